// IVF-PQ on the CPU: the readable reference of the arithmetic in engine/ivfpq_math.h (the CUDA
// backend computes the same codes, tables and estimates).  These throw vs::Error; the CPU backend
// turns that into a Status.
#ifndef VSEARCH_CPU_IVFPQ_H
#define VSEARCH_CPU_IVFPQ_H

#include "engine/backend.h"

namespace vs {

Ivfpq *cpu_ivfpq_create(const vs_ivfpq_params &params, const float *centroids,
                        const float *codebooks);
void cpu_ivfpq_encode(const BackendConfig &cfg, int threads, const Ivfpq *ivf,
                      const float *vectors, size_t n, int32_t *lists, uint8_t *codes);
void cpu_ivfpq_add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes, size_t n);
void cpu_ivfpq_search(const BackendConfig &cfg, int threads, const Ivfpq *ivf,
                      const float *queries, size_t nq, size_t probe_first, size_t nprobe,
                      size_t k, int64_t *out_ids, float *out_dists, int64_t *out_counts);
void cpu_ivfpq_range(const BackendConfig &cfg, int threads, const Ivfpq *ivf,
                     const float *queries, size_t nq, size_t probe_first, size_t nprobe,
                     float radius, RangeCollector *collector);

} // namespace vs

#endif
