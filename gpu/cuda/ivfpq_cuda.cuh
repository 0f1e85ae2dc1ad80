// IVF-PQ on the CUDA backend: quantizer and inverted lists in pooled device memory, and the
// encode / search / range pipelines (kernels in impl/ivfpq_kernels.cu), as the CUDA backend's
// IvfpqBackend.
#ifndef VSEARCH_CUDA_IVFPQ_CUDA_CUH
#define VSEARCH_CUDA_IVFPQ_CUDA_CUH

#include "cuda/device_context.cuh"
#include "engine/ivfpq_backend.h"

#include <memory>

namespace vs::cuda {

// The CUDA backend's IvfpqBackend (CudaBackend::ivfpq()) on the backend's lanes (any free one
// per call), which outlive it.
std::unique_ptr<IvfpqBackend> make_cuda_ivfpq(Lanes &lanes);

} // namespace vs::cuda

#endif
