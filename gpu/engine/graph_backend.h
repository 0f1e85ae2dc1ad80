// The proximity-graph family behind vsearch/graph.h: its object type (Graph: a fixed-degree
// graph and its vectors on the backend) and the abstract interface a backend implements for it
// (GraphBackend, returned by Backend::graph()).  Implementations: gpu/cpu/cpu_graph.cpp (the beam
// search of cpu/graph.cpp, the reference) and gpu/cuda/graph_cuda.cu (one thread block per
// query); front end: gpu/engine/graph_api.cpp.  Every virtual call is noexcept and returns a
// Status (it crosses the dlopen boundary of vsearch_cuda.so).
#ifndef VSEARCH_ENGINE_GRAPH_BACKEND_H
#define VSEARCH_ENGINE_GRAPH_BACKEND_H

#include "engine/backend.h"
#include "vsearch/graph.h"

#include <cstddef>
#include <cstdint>

namespace vs {

// A graph object (graph.h): n nodes of dim floats and degree neighbour slots; a compressed one
// (pq_m > 0) navigates by codes of pq_m bytes serving pq_metric's family.
class Graph
{
public:
    virtual ~Graph() = default;
    size_t size() const { return n_; }
    size_t dim() const { return dim_; }
    size_t degree() const { return degree_; }
    const vs_graph_memory &memory() const { return memory_; }
    vs_metric pq_metric() const { return pq_metric_; }

protected:
    size_t n_ = 0, dim_ = 0, degree_ = 0;
    vs_graph_memory memory_{};
    vs_metric pq_metric_ = VS_METRIC_L2SQ;
};

// Owned by its Backend, which returns it from graph().  The front end validates the arrays and
// the search parameters (metric L2SQ / L2 / IP / COSINE, ef >= k >= 1, starts not NULL when
// nstarts > 0).
class GraphBackend
{
public:
    virtual ~GraphBackend() = default;
    virtual Status create(const vs_graph_arrays &arrays, Graph **out) noexcept = 0;
    // vs_graph_create_compressed, arguments checked, the nodes' codes (n x pq.m) encoded.
    virtual Status create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                                     const uint8_t *codes, Graph **out) noexcept = 0;
    virtual Status search(const Graph *g, const vs_graph_search_params &params,
                          const float *queries, size_t nq, size_t k, int64_t *out_ids,
                          float *out_dists, int64_t *out_counts) noexcept = 0;
    // vs_graph_build_edges, arguments checked (node numbers excepted); only the CPU backend
    // builds (the index build holds the kNN lists in host memory).
    virtual Status build_edges(const uint32_t *knn, size_t n, size_t knn_width, size_t degree,
                               uint32_t entry, uint32_t *out, vs_graph_build_info *info) noexcept
    {
        (void)knn, (void)n, (void)knn_width, (void)degree, (void)entry, (void)out, (void)info;
        return Status{VS_UNSUPPORTED, "graph builds run on the CPU backend"};
    }
    // vs_graph_link_unfound, arguments checked (node numbers excepted); the CPU backend only.
    virtual Status link_unfound(uint32_t *graph, size_t n, size_t degree, const float *vectors,
                                size_t dim, const vs_graph_link_params &params,
                                vs_graph_link_info *info) noexcept
    {
        (void)graph, (void)n, (void)degree, (void)vectors, (void)dim, (void)params, (void)info;
        return Status{VS_UNSUPPORTED, "graph builds run on the CPU backend"};
    }
};

} // namespace vs

#endif
