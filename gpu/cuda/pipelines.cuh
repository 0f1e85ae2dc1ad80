// The exact-search and k-means pipelines of the CUDA backend (host code; the kernels are in
// impl/, declared in impl/kernels.cuh), as free functions over the backend's DeviceContext:
//
//   knn.cu          knn_impl: picks the path per call (below) and the exhaustive exact path
//   knn_gemm.cu     GEMM path: cuBLAS tiles, sampled-threshold filter or warp selectors
//   knn_direct.cu   direct path: rows kernels (<= 32 queries) or the staged scan
//   knn_large_k.cu  large k (K' > 4096): full-row tiles and a radix select
//   range.cu        range_impl
//   subsets.cu      subsets_impl (kNN and range over per-query candidate ids)
//   kmeans.cu       kmeans_impl
//   search_common.cu  what they share: query upload, tile outputs, re-rank / certification,
//                     the GEMM and full-row tiles
//
// Each throws vs::Error; CudaBackend (cuda_backend.cu) turns that into a Status.
#ifndef VSEARCH_CUDA_PIPELINES_CUH
#define VSEARCH_CUDA_PIPELINES_CUH

#include "cuda/dataset.cuh"
#include "cuda/device_context.cuh"
#include "cuda/impl/kernels.cuh"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vs::cuda {

constexpr int kWarpSelectMax = 4096; // largest K' for the register/shared-memory selectors

// ---- entry points (CudaBackend) --------------------------------------------------------------

// k nearest rows per query (no subsets).
void knn_impl(DeviceContext &dev, const CudaDataset &c, const float *queries, size_t nq, size_t k,
              vs_metric m, int64_t *out_ids, float *out_d, int64_t *out_counts);

// Every row within radius per query, to the collector (no subsets).
void range_impl(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, float radius,
                vs_metric m, RangeCollector *collector);

// kNN (range = false) or range search over per-query candidate ids.
void subsets_impl(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, size_t k,
                  vs_metric m, const Subsets &sub, bool range, float radius, int64_t *out_ids,
                  float *out_d, int64_t *out_counts, RangeCollector *collector);

// k-means on the device (same sample and initial draws as the CPU backend).
void kmeans_impl(DeviceContext &dev, const float *data, size_t n, size_t d,
                 const vs_kmeans_params &p, float *centroids, vs_kmeans_info *info);

// ---- the kNN paths (knn_impl calls them; each returns the queries it could not certify) ----

std::vector<int> gemm_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                           const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                           int64_t *out_ids, float *out_d, int64_t *out_counts, bool filter = true);

std::vector<int> direct_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                             const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                             int64_t *out_ids, float *out_d, int64_t *out_counts,
                             bool allow_rows = true);

std::vector<int> large_k_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                              const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                              bool direct, int64_t *out_ids, float *out_d, int64_t *out_counts);

// ---- shared by the pipelines (search_common.cu) ---------------------------------------------

// Queries on the device with their norms, uploaded in one copy.  For an F16 dataset also the
// queries rounded to binary16 (the GEMM's operand) and qrel, a bound on each one's relative
// rounding error (engine/exact.h, APPROX_GEMM_F16; +inf where a value overflows binary16: that
// query cannot take the GEMM).
struct QueryBatch
{
    DeviceArray<unsigned char> buf;
    float *x = nullptr, *sq = nullptr, *inv = nullptr;
    double *norm = nullptr;
    uint16_t *xh = nullptr;  // F16 datasets only
    double *qrel = nullptr;  // F16 datasets only
    int n = 0;
    int d = 0;
    DeviceQueries view(size_t q0 = 0) const
    {
        return DeviceQueries{x + q0 * d,  sq + q0, inv + q0, norm + q0, n - static_cast<int>(q0),
                             qrel ? qrel + q0 : nullptr};
    }
    std::vector<double> host_norm; // with upload_queries' host_bounds only (range thresholds)
    std::vector<double> host_qrel; // the same, F16 datasets only
};

// Uploads the queries of a search of c on dev.main, their norms (and binary16 roundings)
// computed there; with sync, waits for them (callers that go on with other streams need that;
// work on dev.main itself is ordered after it).  host_bounds: also host_norm / host_qrel.
QueryBatch upload_queries(DeviceContext &dev, const float *hq, const std::vector<int> &which,
                          const CudaDataset &c, bool sync = true, bool host_bounds = false);

// Per-tile outputs on the device (one allocation) and their pinned host copy (same layout):
// ids (tq x k) | distances (tq x k) | counts (tq) | ok (tq).
struct TileOut
{
    DeviceArray<unsigned char> buf;
    int64_t *ids = nullptr, *counts = nullptr;
    float *d = nullptr;
    int *ok = nullptr;
    PinnedBuffer *host = nullptr;
    size_t tq = 0, k = 0;
    size_t o_d() const { return tq * k * 8; }
    size_t o_cnt() const { return round_up(tq * k * 12, 8); }
    size_t o_ok() const { return o_cnt() + tq * 8; }
    size_t bytes() const { return o_ok() + tq * 4 + 16; }
};

void make_out(DeviceContext &dev, TileOut &o, size_t tq, size_t k, PinnedBuffer *host);

// Copies the outputs of the first qn queries to the pinned buffer (async on s).
void download(TileOut &o, size_t qn, cudaStream_t s);

// After the stream is done: copies results of queries which[first .. first + qn) to the user
// arrays, collecting the uncertified ones.
void scatter(TileOut &o, size_t qn, const std::vector<int> &which, size_t first, int64_t *out_ids,
             float *out_d, int64_t *out_counts, std::vector<int> *failed);

// Re-rank candidates exactly, sort, certify and write one tile's outputs (stream s).
void rerank_finalize(DeviceContext &dev, const uint64_t *cand, int qn, int kp, const QueryBatch &Q,
                     size_t q0, const CudaDataset &c, vs_metric m, size_t k, int kind, bool certify,
                     uint64_t *exact, uint64_t *sorted, int *offs, TileOut &o, cudaStream_t s);

// How the approximate tile values of a metric become base values (MODE_*_GEMM; MODE_RAW: L1).
int approx_mode(vs_metric m);

// C[q * ldc + c] = <y_{row0 + c}, x_{q0 + q}> for c < cn, q < qn (an F16 dataset: x rounded to
// binary16, fp32 accumulation on tensor cores).
void gemm(DeviceContext &dev, int slot, const CudaDataset &c, size_t row0, size_t cn,
          const QueryBatch &Q, size_t q0, size_t qn, float *C, size_t ldc);

// Approximate values of full rows for qn queries into tile (ld): a GEMM (dot products,
// MODE_*_GEMM) or the direct scan (base values, MODE_RAW).
void full_rows(DeviceContext &dev, const CudaDataset &c, const QueryBatch &Q, size_t q0, size_t qn,
               vs_metric m, float *tile, size_t ld, int slot, cudaStream_t st, bool direct);

} // namespace vs::cuda

#endif
