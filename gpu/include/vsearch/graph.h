/*
 * Beam search on a fixed-degree proximity graph held in host arrays: the engine's reference of the
 * vs_graph index's search (extension/graph*.c), the semantics a batched GPU kernel must reproduce
 * (SONG / CAGRA: one query per block, a bounded beam, a visited set).  Plain C ABI, no engine
 * context: the caller lays the graph out as the index's pages do (node i: its vector, its
 * `degree` neighbour slots, whether it is a result) and gets, per query, the k best nodes the
 * search reaches.
 *
 * The search, per query: every start node is a candidate; the beam keeps the best `ef` nodes
 * seen (at least k); pop the nearest unexpanded candidate, stop when it is farther than the worst
 * of a full beam, else compute the distance of each neighbour not visited yet and keep it as a
 * candidate when the beam is not full or it beats the beam's worst.  Nodes with live[i] == 0 (the
 * free slots of a vs_graph index, removed by VACUUM) are skipped: never measured, traversed or
 * returned.  Distances are the engine's exact ones (vs_exact_distance_f32 rounded to float, as
 * vs_knn returns them), for navigation too, so that a CPU and a GPU search of the same graph
 * return the same ids and distances; ties go to the smaller node number.  With ef at least the
 * number of live nodes, the search visits every live node reachable from the starts through live
 * nodes and returns exactly vs_knn's answer over them.
 *
 * Since every candidate the search could still expand lies in the beam, the search is the same as
 * SONG's formulation: expand the nearest unexpanded node of the beam until none is left; a node
 * not in the beam needs no visited mark (it lost to the beam's worst once, and the worst only
 * improves), which is what lets the GPU kernel keep its visited set small.
 *
 * vs_graph_search runs on host arrays without a context (the reference); a vs_graph object
 * (vs_graph_create) holds a copy of the graph in a context's backend (device memory on CUDA) and
 * vs_graph_knn runs the same search there in batches (CUDA: one thread block per query).
 */
#ifndef VSEARCH_ENGINE_GRAPH_H
#define VSEARCH_ENGINE_GRAPH_H

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
    const uint8_t *live;        /* n: zero for a node to skip (a free slot); NULL: every node */
    const int64_t *ids;         /* n: what results report; NULL: the node numbers */
} vs_graph_arrays;

typedef struct vs_graph_search_params
{
    vs_metric metric;       /* L2SQ, L2, IP or COSINE (results in that metric's units) */
    size_t ef;              /* beam width (at least 1; searches use max(ef, k)) */
    const uint32_t *starts; /* start nodes (out-of-range ones are ignored) */
    size_t nstarts;
    size_t expand;          /* beam nodes expanded per step, at most VS_GRAPH_MAX_EXPAND (0: 1) */
} vs_graph_search_params;

/*
 * expand = w > 1 (CAGRA's "search width"): each step takes the w nearest unexpanded nodes of the
 * beam (fewer when fewer are left) and measures the neighbours of all of them before the beam
 * changes; w = 1 is the search described above.  A wider step lets a GPU block measure more
 * distances at once (fewer sequential steps per query) at the cost of some distances a narrow
 * search would not have measured; the results differ from w = 1's (the same on every backend).
 */
#define VS_GRAPH_MAX_EXPAND 4

/*
 * The k best nodes of each of nq queries (nq x dim floats): out_ids / out_distances nq x k,
 * ascending by (distance, id), padded with id -1 and +inf; out_counts (optional) nq.  ndist
 * (optional) gets the distances computed.  VS_OK, VS_INVALID_ARGUMENT (a NULL array, dim, degree,
 * k or ef of 0, expand above VS_GRAPH_MAX_EXPAND, a metric the graph cannot rank by) or
 * VS_OUT_OF_MEMORY.
 */
int vs_graph_search(const vs_graph_arrays *graph, const vs_graph_search_params *params,
                    const float *queries, size_t nq, size_t k, int64_t *out_ids,
                    float *out_distances, int64_t *out_counts, uint64_t *ndist);

/*
 * Start-node cuts for a batch of searches that navigate by vs_distance_f32 from every start node
 * (the index's own search in the backend): only the `width` nearest starts that can be results
 * stay in a search's beam, and a start farther than all of them is never expanded nor enters the
 * beam later, so each query's search is the same from the starts that can be nearer
 * (cpu/graph_starts.h: certified from blocked products).  metric: L2SQ or IP (for others no
 * bound is known); rows: the starts' vectors, nstarts x dim; results: per start, 1 when it can be
 * a result (a live node), 0 when it is only navigated through.  NULL when no cut applies (another
 * metric, at most width starts that can be results) or memory is short: then every query needs
 * every start.
 */
typedef struct vs_graph_start_cut vs_graph_start_cut;
vs_graph_start_cut *vs_graph_start_cut_create(vs_metric metric, const float *rows,
                                              const uint8_t *results, size_t nstarts, size_t dim,
                                              size_t width);
/*
 * For each of nq queries (nq x dim floats), the positions of the starts it needs, ascending, into
 * out + q x nstarts and how many into counts[q] (every start when a value is not finite).  VS_OK
 * or VS_OUT_OF_MEMORY.
 */
int vs_graph_start_cut_pick(const vs_graph_start_cut *cut, const float *queries, size_t nq,
                            uint32_t *out, size_t *counts);
void vs_graph_start_cut_destroy(vs_graph_start_cut *cut);

/* ---- graph objects in a context ------------------------------------------------------------ */

typedef struct vs_graph vs_graph;

/*
 * A graph object with a copy of the arrays (vectors, neighbours, live flags, ids; ids NULL: node
 * numbers) in the context's backend.  VS_INVALID_ARGUMENT (dim or degree 0, n >= VS_GRAPH_NONE, a
 * NULL array), VS_OUT_OF_MEMORY (host or device budget).
 */
vs_status vs_graph_create(vs_context *ctx, const vs_graph_arrays *graph,
                          vs_graph **out) VS_NOEXCEPT;
void vs_graph_destroy(vs_context *ctx, vs_graph *g) VS_NOEXCEPT;
/* Nodes of the graph (live or not). */
size_t vs_graph_size(const vs_graph *g) VS_NOEXCEPT;

/*
 * vs_graph_search on the object, in the context's backend: the same answers (ids and distances
 * bit for bit) on every backend.  The CUDA backend keeps a query's beam and visited set in
 * shared memory: an ef or degree too large for it is VS_UNSUPPORTED (ef up to
 * VS_GRAPH_GPU_MAX_EF fits with any degree up to 256 and dim up to 4096).
 */
#define VS_GRAPH_GPU_MAX_EF 1024
/*
 * On a compressed object (vs_graph_create_compressed), the search described there; the CUDA
 * backend then also holds the query's table in shared memory (m x 1 KiB): VS_UNSUPPORTED when it
 * does not fit with the beam; VS_INVALID_ARGUMENT for a metric its codes do not serve.
 */
vs_status vs_graph_knn(vs_context *ctx, const vs_graph *g, const vs_graph_search_params *params,
                       const float *queries, size_t nq, size_t k, int64_t *out_ids,
                       float *out_distances, int64_t *out_counts) VS_NOEXCEPT;

/* ---- compressed graph objects (graphs larger than the device's memory: BANG) ---------------
 *
 * A compressed object keeps on the device (CUDA) only what every hop of every query reads in
 * bulk: one 8-bit product-quantization code of m bytes per node, the quantizer and the live
 * flags; the adjacency rows, the full vectors and the ids stay in pinned host memory mapped into
 * the device's address space, which the search kernel reads through PCIe as it needs them
 * ("fetched per hop").  vs_graph_knn on it is vs_graph_search's beam search but for the
 * navigation distance: every node the search measures (start nodes and neighbours) is ranked by
 * its PQ estimate, then the final beam (max(ef, k) nodes) is re-ranked by the exact distance
 * (vs_exact_distance_f32 rounded to float, as vs_graph_knn reports it) and its first k returned
 * in (distance, id) order, NaN last.  Results are the in-memory object's in units and order; they
 * differ from its answers where the estimate ranks nodes differently.  CPU and CUDA objects made
 * from the same quantizer return the same ids and distances bit for bit.
 *
 * The quantizer (vs_ivfpq's with one list, 8 bits): a center (dim floats) and m sub-quantizers of
 * 256 codewords of dim / m floats, m x 256 x (dim / m) floats, sub-quantizer major; a node's code
 * is the nearest codeword of each sub-vector of x - center (vs_ivfpq_encode's codes).  The rank
 * metric the codes serve: L2SQ, L2 and IP code the vectors, COSINE their unit vectors, and an
 * object answers the metrics of its codes only (L2SQ / L2 / IP together, COSINE alone).  The
 * estimate, per query: a table of m x 256 floats, entry (j, c) the squared L2 between the query's
 * sub-vector j minus the center's and codeword c (L2SQ, L2; COSINE: of the unit query, q / |q|
 * with |q| in double), or the inner product of the query's sub-vector j and codeword c (IP); a
 * node's estimate is the float sum of its m entries in order j = 0 .. m-1 (engine/ivfpq_math.h's
 * arithmetic: products rounded before they are added), negated for IP (the query's <q, center>,
 * the same for every node, is left out).  COSINE navigates by squared L2 between unit vectors
 * (2 - 2 cos) because the inner product of the codes ranks far worse (it leaves out the codes'
 * norm errors: recall@10 of the estimate alone 0.35 against 0.76 on graph_pq_test's data).
 */
#define VS_GRAPH_PQ_KSUB 256

typedef struct vs_graph_pq
{
    size_t m;              /* sub-quantizers: code bytes per node; divides dim */
    vs_metric metric;      /* L2SQ, L2, IP or COSINE: what the codes serve (above) */
    const float *center;   /* dim floats */
    const float *codebooks; /* m x 256 x (dim / m) floats */
} vs_graph_pq;

typedef struct vs_graph_pq_train_params
{
    uint64_t seed;      /* the sample's and the k-means' seed */
    size_t sample_size; /* live nodes drawn to train on; 0: VS_GRAPH_PQ_DEFAULT_SAMPLE */
    int iterations;     /* Lloyd iterations per sub-quantizer; 0: vs_ivfpq's default */
} vs_graph_pq_train_params;

#define VS_GRAPH_PQ_DEFAULT_SAMPLE 32768

/*
 * Trains a quantizer for graph's live nodes (center: dim floats, codebooks: m x 256 x dim / m)
 * through vs_ivfpq_train (one list, 8 bits) on the context's backend, over sample_size live nodes
 * drawn with the seed (all of them when fewer).  Fewer than 256 live nodes are repeated in order
 * up to 256 rows; no live node gives a zero quantizer.  Deterministic for a seed on a backend.
 * VS_INVALID_ARGUMENT (a NULL array, m 0 or not a divisor of dim, a metric other than L2SQ, L2,
 * IP, COSINE), VS_OUT_OF_MEMORY.
 */
vs_status vs_graph_pq_train(vs_context *ctx, const vs_graph_arrays *graph, size_t m,
                            vs_metric metric, const vs_graph_pq_train_params *train,
                            float *center, float *codebooks) VS_NOEXCEPT;

/*
 * A compressed object of the graph with this quantizer: every node's vector encoded on the
 * context's backend (vs_ivfpq_encode, in chunks), the codes and quantizer copied to the backend,
 * the vectors, neighbour rows and ids to pinned host memory (CUDA; plain host memory on the CPU
 * backend).  The arrays are not needed after the call.  VS_INVALID_ARGUMENT as vs_graph_create,
 * and for pq (NULL, m 0 or not a divisor of dim, a NULL array, a metric as vs_graph_pq_train's),
 * VS_OUT_OF_MEMORY (host, pinned or device memory).
 */
vs_status vs_graph_create_compressed(vs_context *ctx, const vs_graph_arrays *graph,
                                     const vs_graph_pq *pq, vs_graph **out) VS_NOEXCEPT;

typedef struct vs_graph_memory
{
    size_t pq_m;         /* 0: an in-memory object (vs_graph_create), else the code bytes */
    size_t device_bytes; /* held on the backend (device memory on CUDA) */
    size_t host_bytes;   /* held in (pinned) host memory for the backend's searches */
} vs_graph_memory;

/* What an object holds where (device_bytes is what a cache of objects accounts). */
void vs_graph_get_memory(const vs_graph *g, vs_graph_memory *out) VS_NOEXCEPT;

/*
 * What vs_graph_create_compressed's object of n nodes will hold (before building it): device
 * bytes n x (m + 1) plus the quantizer, host bytes n x (4 dim + 4 degree + 8).
 */
void vs_graph_compressed_memory(size_t n, size_t dim, size_t degree, size_t m,
                                vs_graph_memory *out) VS_NOEXCEPT;

/* ---- building a graph (the vs_graph index's build, inserts and VACUUM) ---------------------- */

/*
 * Rank-based pruning (CAGRA) of one candidate list: cands[0..ncands) distinct nodes, nearest first,
 * and cand_nbrs their own neighbour lists (nbr_width entries each, nearest first, VS_GRAPH_NONE
 * padded).  Candidate i has a detour through candidate j when j < i and i stands at a position
 * r < i of j's list; the candidates ordered by their number of detours, then by rank, the first
 * `degree` go to out.  Returns how many (min(degree, ncands)), or -1 when out of memory.
 */
int vs_graph_prune(const uint32_t *cands, size_t ncands, const uint32_t *cand_nbrs,
                   size_t nbr_width, size_t degree, uint32_t *out) VS_NOEXCEPT;

typedef struct vs_graph_build_info
{
    uint64_t linked;      /* nodes linked so that a walk from the entry reaches them */
    uint64_t unreached;   /* nodes a walk from the entry still does not reach */
    double prune_seconds; /* the pruning's part of the call */
} vs_graph_build_info;

/*
 * The graph of n nodes (out: n x degree, VS_GRAPH_NONE padded) from their kNN lists (knn: n x
 * knn_width, each the nearest other nodes, nearest first, VS_GRAPH_NONE padded at the end):
 *   1. each list pruned to `degree` by vs_graph_prune, with the candidates' own kNN lists;
 *   2. reverse edges: a node's list is the first half (rounded up) of its pruned list, then the
 *      nodes whose pruned lists name it (by the position they gave it, then by node number), then
 *      the rest of its pruned list, without repeats;
 *   3. reachability: each node that a walk from `entry` does not reach is linked from the first
 *      reached node of its kNN list that has an empty slot, or a slot in the second half whose
 *      target keeps another in-edge (scanning slots from the last); up to four passes.
 * The result depends on nothing but the arguments (not the backend or its thread count).  On the
 * CPU backend steps 1 and 2 run on the context's threads; VS_UNSUPPORTED on others (the build
 * runs it in the process that holds the kNN lists), VS_INVALID_ARGUMENT for a node number out of
 * range, degree 0, or entry >= n; VS_CANCELLED when the context's callback asks.  knn_width 0
 * (a one-row table) gives empty lists.
 */
vs_status vs_graph_build_edges(vs_context *ctx, const uint32_t *knn, size_t n, size_t knn_width,
                               size_t degree, uint32_t entry, uint32_t *out,
                               vs_graph_build_info *info) VS_NOEXCEPT;

typedef struct vs_graph_link_params
{
    vs_metric metric;       /* as for vs_graph_search: the build's rank metric */
    size_t width;           /* the beam width with which every node should be found (at least 1) */
    size_t links;           /* in-edges an unfound node gets (at least 1) */
    const uint32_t *starts; /* the start nodes searches use (out-of-range ones are ignored) */
    size_t nstarts;
} vs_graph_link_params;

typedef struct vs_graph_link_info
{
    uint64_t unfound; /* nodes whose search did not reach them */
    uint64_t linked;  /* edges added (into unfound nodes and back out of them) */
} vs_graph_link_info;

/*
 * Navigability of a built graph (graph: n x degree, as vs_graph_build_edges gives it; changed in
 * place): each node in turn is the query of a beam search of width params->width from the starts
 * (vs_graph_search's search, navigating by vs_distance_f32 as the vs_graph index's scans in a
 * backend do, stopped when it measures the node).  A node the search does not
 * reach gets an edge from each of the params->links nearest nodes the search found, and an edge
 * back to each, in a slot chosen as vs_graph_build_edges' reachability links choose theirs (an
 * empty one, else one of the second half whose target keeps another in-edge; a list without such
 * a slot is passed over for the next found node).  A graph pruned from exact kNN lists on
 * clustered data keeps every edge inside its cluster, so a search that starts elsewhere stops at
 * the rim of a neighbouring cluster: this puts edges from where it stops into the cluster.  Nodes
 * go in blocks of 1024, each block's searches over the graph as the previous blocks left it, its
 * links added in node order: the result depends on the arguments only (and on the SIMD kernel
 * vs_distance_f32 uses on this CPU), not on the thread count.  On the CPU backend the
 * searches run on the context's threads; VS_UNSUPPORTED on others; VS_INVALID_ARGUMENT for a
 * node number out of range, width, links or degree 0, a NULL array; VS_CANCELLED when the
 * context's callback asks.  The graph changes only when the call returns VS_OK.
 */
vs_status vs_graph_link_unfound(vs_context *ctx, uint32_t *graph, size_t n, size_t degree,
                                const float *vectors, size_t dim,
                                const vs_graph_link_params *params,
                                vs_graph_link_info *info) VS_NOEXCEPT;

/*
 * The start nodes of a built graph (out: n x degree, as vs_graph_build_edges gives it) such that
 * walks from them reach every node: a graph pruned from a kNN graph has no edge between clusters
 * that lie farther apart than the kNN lists reach, so each such island needs a start of its own.
 * `fixed` (nfixed nodes, the index's entry) are starts already and are not written to out; the
 * candidates cands[0..ncands) (the index's seeds, out-of-range ones and repeats skipped) are taken
 * in order, and those that reach a node no earlier start reaches come first in out; then, while
 * some node is unreached, one node per weakly connected part of the unreached nodes (largest part
 * first, then by node number): the one nearest (L2, in double) to the part's mean, ties to the
 * smaller node; then the other candidates.  At most max_out nodes go to out; returns how many
 * (-1: out of memory, or a NULL array with n > 0), and *unreached (optional) gets the nodes that
 * walks from fixed and out still do not reach (0 unless max_out is too small).  Depends on nothing
 * but the arguments.
 */
int vs_graph_cover_starts(const uint32_t *graph, size_t n, size_t degree, const float *vectors,
                          size_t dim, const uint32_t *fixed, size_t nfixed, const uint32_t *cands,
                          size_t ncands, uint32_t *out, size_t max_out,
                          uint64_t *unreached) VS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_ENGINE_GRAPH_H */
