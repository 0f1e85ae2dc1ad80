// IVF-PQ on the CUDA backend: quantizer and inverted lists in pooled device memory, and the
// encode / search / range pipelines (kernels in impl/ivfpq_kernels.cu).  Functions throw
// vs::Error; the backend turns that into a Status.
#ifndef VSEARCH_CUDA_IVFPQ_CUDA_CUH
#define VSEARCH_CUDA_IVFPQ_CUDA_CUH

#include "cuda/utils/memory_pool.cuh"
#include "engine/backend.h"

namespace vs::cuda {

// What the pipelines need from the backend.
struct IvfpqDevice
{
    DevicePool &pool;
    cudaStream_t stream;
    const BackendConfig &cfg;
    size_t smem_optin; // largest dynamic shared memory per block
};

Ivfpq *ivfpq_create(const IvfpqDevice &dev, const vs_ivfpq_params &params, const float *centroids,
                    const float *codebooks);
void ivfpq_encode(const IvfpqDevice &dev, const Ivfpq *ivf, const float *vectors, size_t n,
                  int32_t *lists, uint8_t *codes);
void ivfpq_add(const IvfpqDevice &dev, Ivfpq *ivf, size_t list, const int64_t *ids,
               const uint8_t *codes, size_t n);
void ivfpq_search(const IvfpqDevice &dev, const Ivfpq *ivf, const float *queries, size_t nq,
                  size_t probe_first, size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts);
void ivfpq_range(const IvfpqDevice &dev, const Ivfpq *ivf, const float *queries, size_t nq,
                 size_t probe_first, size_t nprobe, float radius, RangeCollector *collector);

} // namespace vs::cuda

#endif
