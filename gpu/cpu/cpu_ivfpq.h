// IVF-PQ on the CPU: the readable reference of the arithmetic in engine/ivfpq_math.h (the CUDA
// backend computes the same codes, tables and estimates), as the CPU backend's IvfpqBackend
// (engine/ivfpq_backend.h), which CpuBackend::ivfpq() returns.
#ifndef VSEARCH_CPU_IVFPQ_H
#define VSEARCH_CPU_IVFPQ_H

#include "engine/ivfpq_backend.h"

#include <memory>
#include <vector>

namespace vs {

// config is the owning backend's (it outlives the family); threads as the backend's.
std::unique_ptr<IvfpqBackend> make_cpu_ivfpq(const BackendConfig &config, int threads);

// An ivfpq object of a CPU backend whose quantizer is read where it is (vs_ivfpq_create_view):
// the caller keeps centroids and codebooks unchanged until the object is destroyed.
Ivfpq *make_cpu_ivfpq_view(const vs_ivfpq_params &params, const float *centroids,
                          const float *codebooks);

// An ivfpq object of a CPU backend whose quantizer is read in place in pieces
// (vs_ivfpq_create_rows): centroid l at centroid_rows[l], the codebooks packed as pq_table reads
// them, table_rows[j * dim/m + t] = element t of sub-quantizer j's codewords
// (ivfpq_table_width(params) floats).  The pointer arrays are copied; the floats must stay put
// until the object is destroyed.  It searches (list scans) but cannot encode.
Ivfpq *make_cpu_ivfpq_rows(const vs_ivfpq_params &params, const float *const *centroid_rows,
                          const float *const *table_rows);
// The codewords of a packed codebook row: 2^nbits rounded up to a multiple of 32.
size_t ivfpq_table_width(const vs_ivfpq_params &params);

// A list scan (vsearch/ivfpq.h, vs_ivfpq_scan_*): the lists of an index the caller holds,
// searched with the quantizer of a CPU backend's ivfpq object (its own lists are not read).
// Throws Error; arguments are validated by the front end (engine/ivfpq_api.cpp).
class IvfpqListScan
{
public:
    virtual ~IvfpqListScan() = default;
    virtual size_t nq() const = 0;
    // The lists the queries probe, ascending.
    virtual const std::vector<uint32_t> &lists() const = 0;
    // Entries of one list (tags may be null); lists no query probes are ignored.
    virtual void add(size_t list, const int64_t *ids, const uint8_t *codes,
                     const uint64_t *tags, size_t n) = 0;
    virtual void knn_result(int64_t *ids, float *dists, uint64_t *tags, int64_t *counts) = 0;
    virtual void range_result(RangeCollector *collector) = 0;
};

// The queries are used as given (the front end normalizes them for COSINE); the probe window is
// [first, first + count), clamped.  k for kNN, radius for range.
std::unique_ptr<IvfpqListScan> make_cpu_ivfpq_list_scan(const BackendConfig &config,
                                                        const Ivfpq *ivf, const float *queries,
                                                        size_t nq, size_t first, size_t count,
                                                        size_t k, bool range, float radius);

} // namespace vs

#endif
