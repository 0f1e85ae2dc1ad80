// The CPU searches of graph objects (cpu/graph.cpp) the backend's objects call beside the C
// reference vs_graph_search: one query of it with the caller's visited map, and the compressed
// object's, navigated by PQ estimates (vsearch/graph.h, "compressed graph objects").
#ifndef VSEARCH_CPU_GRAPH_SEARCH_H
#define VSEARCH_CPU_GRAPH_SEARCH_H

#include "vsearch/graph.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs {

// A compressed object's quantizer and codes (n x m bytes), in host memory.
struct GraphPqView
{
    size_t m;
    const float *center;    // dim
    const float *codebooks; // m x 256 x (dim / m)
    const uint8_t *codes;   // n x m
};

// vs_graph_search's search of one query (exact navigation; arguments checked by the caller):
// visited holds n zero bytes and touched nothing, and are left so.  Throws std::bad_alloc.
void graph_search_one(const vs_graph_arrays &g, const vs_graph_search_params &p,
                      const float *query, size_t k, std::vector<uint8_t> &visited,
                      std::vector<uint32_t> &touched, int64_t *ids, float *dists, int64_t *count);

// vs_graph_search's search of nq queries navigated by the PQ estimate, the final beam re-ranked
// by the exact distance; arguments checked by the caller.  Throws std::bad_alloc.
void graph_search_pq(const vs_graph_arrays &g, const GraphPqView &pq,
                     const vs_graph_search_params &p, const float *queries, size_t nq, size_t k,
                     int64_t *out_ids, float *out_distances, int64_t *out_counts);

} // namespace vs

#endif
