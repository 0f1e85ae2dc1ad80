// Graph objects on the CPU (vsearch/graph.h): the arrays copied into host memory and searched by
// the reference beam search of graph.cpp, queries spread over the backend's threads; the CPU
// backend's GraphBackend, which CpuBackend::graph() returns, and the build of a graph from its kNN
// lists (graph_build.cpp).
#ifndef VSEARCH_CPU_GRAPH_H
#define VSEARCH_CPU_GRAPH_H

#include "engine/graph_backend.h"

#include <memory>

namespace vs {

// config is the owning backend's (it outlives the family); threads as the backend's.
std::unique_ptr<GraphBackend> make_cpu_graph(const BackendConfig &config, int threads);

// vs_graph_build_edges on `threads` threads (cpu/graph_build.cpp); throws Error.
void graph_build_edges(const uint32_t *knn, size_t n, size_t knn_width, size_t degree,
                       uint32_t entry, uint32_t *graph, vs_graph_build_info *info, int threads,
                       const BackendConfig &config);

// vs_graph_link_unfound on `threads` threads (cpu/graph_navigable.cpp); throws Error.
void graph_link_unfound(uint32_t *graph, size_t n, size_t degree, const float *vectors, size_t dim,
                        const vs_graph_link_params &params, vs_graph_link_info *info, int threads,
                        const BackendConfig &config);

} // namespace vs

#endif
