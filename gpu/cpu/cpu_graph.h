// Graph objects on the CPU (vsearch/graph.h): the arrays copied into host memory and searched by
// the reference beam search of graph.cpp, queries spread over the backend's threads; the CPU
// backend's GraphBackend, which CpuBackend::graph() returns.
#ifndef VSEARCH_CPU_GRAPH_H
#define VSEARCH_CPU_GRAPH_H

#include "engine/graph_backend.h"

#include <memory>

namespace vs {

// config is the owning backend's (it outlives the family); threads as the backend's.
std::unique_ptr<GraphBackend> make_cpu_graph(const BackendConfig &config, int threads);

} // namespace vs

#endif
