// Graph objects on the CUDA backend (vsearch/graph.h): the arrays in pooled device memory and the
// batched beam search kernel, as the CUDA backend's GraphBackend.
#ifndef VSEARCH_CUDA_GRAPH_CUDA_CUH
#define VSEARCH_CUDA_GRAPH_CUDA_CUH

#include "cuda/device_context.cuh"
#include "engine/graph_backend.h"

#include <memory>

namespace vs::cuda {

// The CUDA backend's GraphBackend (CudaBackend::graph()) on the backend's lanes (any free one
// per call), which outlive it.
std::unique_ptr<GraphBackend> make_cuda_graph(Lanes &lanes);

} // namespace vs::cuda

#endif
