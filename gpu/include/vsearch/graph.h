/*
 * Beam search on a fixed-degree proximity graph held in host arrays: the engine's reference of the
 * vs_graph index's search (extension/graph*.c), the semantics a batched GPU kernel must reproduce
 * (SONG / CAGRA: one query per block, a bounded beam, a visited set).  Plain C ABI, no engine
 * context: the caller lays the graph out as the index's pages do (node i: its vector, its
 * `degree` neighbour slots, whether it is a result) and gets, per query, the k best nodes the
 * search reaches.
 *
 * The search, per query: every start node is a candidate; the beam keeps the best `ef` result
 * nodes seen (at least k); pop the nearest unexpanded candidate, stop when it is farther than the
 * worst of a full beam, else compute the distance of each neighbour not visited yet and keep it as
 * a candidate when the beam is not full or it beats the beam's worst.  Nodes that are not results
 * (live[i] == 0: a deleted row) are traversed but never returned.  Distances are the engine's
 * exact ones (vs_exact_distance_f32 rounded to float, as vs_knn returns them), for navigation too,
 * so that a CPU and a GPU search of the same graph return the same ids and distances; ties go to
 * the smaller node number.  With ef at least the number of result nodes, the search visits every
 * node reachable from the starts and returns exactly vs_knn's answer over them.
 */
#ifndef VSEARCH_GRAPH_H
#define VSEARCH_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "vsearch/distance.h"
#include "vsearch/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VS_GRAPH_NONE 0xFFFFFFFFu /* an empty neighbour slot */

/* A graph of n nodes. */
typedef struct vs_graph_arrays
{
    size_t n;
    size_t dim;
    size_t degree;
    const float *vectors;       /* n x dim, row-major */
    const uint32_t *neighbors;  /* n x degree; VS_GRAPH_NONE, or a node number < n */
    const uint8_t *live;        /* n: nonzero when the node may be returned; NULL: every node */
    const int64_t *ids;         /* n: what results report; NULL: the node numbers */
} vs_graph_arrays;

typedef struct vs_graph_search_params
{
    vs_metric metric;       /* L2SQ, L2, IP or COSINE (results in that metric's units) */
    size_t ef;              /* beam width (at least 1; searches use max(ef, k)) */
    const uint32_t *starts; /* start nodes (out-of-range ones are ignored) */
    size_t nstarts;
} vs_graph_search_params;

/*
 * The k best nodes of each of nq queries (nq x dim floats): out_ids / out_distances nq x k,
 * ascending by (distance, id), padded with id -1 and +inf; out_counts (optional) nq.  ndist
 * (optional) gets the distances computed.  VS_OK, VS_INVALID_ARGUMENT (a NULL array, dim, degree,
 * k or ef of 0, a metric the graph cannot rank by) or VS_OUT_OF_MEMORY.
 */
int vs_graph_search(const vs_graph_arrays *graph, const vs_graph_search_params *params,
                    const float *queries, size_t nq, size_t k, int64_t *out_ids,
                    float *out_distances, int64_t *out_counts, uint64_t *ndist);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_GRAPH_H */
