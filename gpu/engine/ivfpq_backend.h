// The IVF-PQ index family behind vsearch/ivfpq.h: its object type (Ivfpq: a quantizer and
// inverted lists on the backend) and the abstract interface a backend implements for it
// (IvfpqBackend, returned by Backend::ivfpq()).  Implementations: gpu/cpu/cpu_ivfpq.cpp and
// gpu/cuda/ivfpq_cuda.cu; front end: gpu/engine/ivfpq_api.cpp.  Like Backend, every virtual call
// is noexcept and returns a Status (it crosses the dlopen boundary of vsearch_cuda.so).
#ifndef VSEARCH_ENGINE_IVFPQ_BACKEND_H
#define VSEARCH_ENGINE_IVFPQ_BACKEND_H

#include "engine/backend.h"
#include "vsearch/ivfpq.h"

#include <cstddef>
#include <cstdint>

namespace vs {

// An IVF-PQ index (ivfpq.h): quantizer and inverted lists on the backend.
class Ivfpq
{
public:
    virtual ~Ivfpq() = default;
    const vs_ivfpq_params &params() const { return params_; }
    size_t size() const { return size_; }

protected:
    vs_ivfpq_params params_{};
    size_t size_ = 0;
};

// Owned by its Backend, which returns it from ivfpq().  The front end validates arguments,
// normalizes COSINE vectors and queries, and clamps the probe window to
// [probe_first, probe_first + nprobe) within nlist (nprobe >= 1).
class IvfpqBackend
{
public:
    virtual ~IvfpqBackend() = default;
    virtual Status create(const vs_ivfpq_params &params, const float *centroids,
                          const float *codebooks, Ivfpq **out) noexcept = 0;
    // codes may be null: assignment only (used by training).
    virtual Status encode(const Ivfpq *ivf, const float *vectors, size_t n, int32_t *lists,
                          uint8_t *codes) noexcept = 0;
    virtual Status add(Ivfpq *ivf, size_t list, const int64_t *ids, const uint8_t *codes,
                       size_t n) noexcept = 0;
    virtual Status search(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                          size_t nprobe, size_t k, int64_t *out_ids, float *out_dists,
                          int64_t *out_counts) noexcept = 0;
    // Delivers each query's matches in one add() call, ascending (id, scan position).
    virtual Status range(const Ivfpq *ivf, const float *queries, size_t nq, size_t probe_first,
                         size_t nprobe, float radius, RangeCollector *collector) noexcept = 0;
};

} // namespace vs

#endif
