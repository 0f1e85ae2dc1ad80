// IVF-PQ on the CUDA backend: quantizer and inverted lists in pooled device memory, and the
// encode / search / range pipelines (kernels in impl/ivfpq_kernels.cu), as the CUDA backend's
// IvfpqBackend.
#ifndef VSEARCH_CUDA_IVFPQ_CUDA_CUH
#define VSEARCH_CUDA_IVFPQ_CUDA_CUH

#include "cuda/utils/memory_pool.cuh"
#include "engine/ivfpq_backend.h"

#include <memory>

namespace vs::cuda {

// What the pipelines need from the backend.
struct IvfpqDevice
{
    DevicePool &pool;
    cudaStream_t stream;
    const BackendConfig &cfg;
    size_t smem_optin; // largest dynamic shared memory per block
};

// The CUDA backend's IvfpqBackend (CudaBackend::ivfpq()) on device `device`; dev refers to the
// backend's pool and configuration, which outlive it.
std::unique_ptr<IvfpqBackend> make_cuda_ivfpq(const IvfpqDevice &dev, int device);

} // namespace vs::cuda

#endif
