// kNN on the CUDA backend: knn_impl picks, per chunk of queries, the GEMM path (L2/IP/cosine
// batches past the direct path's size; TF32, or fp32 at once for small batches of data where
// TF32 rarely certifies), the large-k path (K' > 4096), the direct path (small batches, L1, and the
// queries GEMM could not certify, with an fp32 GEMM retry first for TF32) and, for K' >= n or
// the rare queries no bound certifies, the exhaustive exact path below (exact keys of every row
// and a segmented sort).  Datasets of binary16 rows take the GEMM or the exact path
// (half_rows_knn).
#include "cuda/pipelines.cuh"

#include "cpu/cpu_backend.h" // knn_candidates
#include "engine/host_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace vs::cuda {
namespace {

// Small batches go straight to the fp32 GEMM while TF32 leaves more than this fraction of a
// dataset's queries uncertified; TF32 is retried every kTf32Retry such batches.
constexpr float kTf32MissMax = 0.25f;
constexpr unsigned kTf32Retry = 32;
// ... and only above this dimension: with short rows the skinny GEMM is no longer bound by the
// dataset's reads, and fp32 costs 1.4x TF32 at 1M x 128 (H200, 32-64 queries).
constexpr size_t kFp32MinDim = 128;

void exact_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                const std::vector<int> &which, size_t k, vs_metric m, int64_t *out_ids,
                float *out_d, int64_t *out_counts)
{
    const size_t n = c.size(), nb = which.size();
    QueryBatch Q = upload_queries(dev, hq, which, c);
    const size_t per_query = n * 8 * 3 + k * 12;
    size_t tq = std::max<size_t>(1, (dev.pool->available() / 2) / per_query);
    tq = std::min({tq, nb, std::max<size_t>(1, 0x7fffffffu / n)});
    DeviceArray<uint64_t> keys(*dev.pool, tq * n, dev.main), sorted(*dev.pool, tq * n, dev.main);
    DeviceArray<int> offs(*dev.pool, tq + 1, dev.main);
    TileOut out;
    make_out(dev, out, tq, k, &dev.pinned[0]);
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    StreamJoin join{dev.work, 2};
    cudaStream_t st = dev.work[0];
    std::vector<int> failed;
    for (size_t q0 = 0; q0 < nb; q0 += tq)
    {
        check_cancel(dev.cfg);
        const size_t qn = std::min(tq, nb - q0);
        DeviceQueries qv = Q.view(q0);
        qv.n = static_cast<int>(qn);
        launch_exact_all(qv, c.rows(), m, keys.get(), st);
        launch_fill_offsets(offs.get(), static_cast<int>(qn), static_cast<int>(n), st);
        segmented_sort_keys(*dev.pool, keys.get(), sorted.get(), static_cast<int>(qn * n),
                            static_cast<int>(qn), offs.get(), offs.get() + 1, st);
        FinalizeArgs f{};
        f.sorted = sorted.get();
        f.seg = static_cast<int64_t>(n);
        f.approx = nullptr;
        f.nq = static_cast<int>(qn);
        f.k = static_cast<int>(k);
        f.metric = m;
        f.d = static_cast<int>(c.dim());
        f.qnorm = Q.norm + q0;
        f.ids = c.ids.get();
        f.out_ids = out.ids;
        f.out_d = out.d;
        f.out_counts = out.counts;
        f.out_ok = out.ok;
        launch_finalize(f, st);
        download(out, qn, st);
        VS_CUDA_CHECK(cudaStreamSynchronize(st));
        scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
    }
    if (!failed.empty())
        throw Error(VS_INTERNAL, "exact path left queries unresolved");
}

// A dataset of binary16 rows, which the direct kernels do not read: the GEMM on binary16 tensor
// cores finds the candidates of L2 / IP / cosine queries at every batch size (the large-k path
// past kWarpSelectMax); L1, the queries no bound certifies and those with a value beyond the
// binary16 range (qrel = inf: never certified) take the exact path.
void half_rows_knn(DeviceContext &dev, const CudaDataset &c, const float *queries,
                   const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                   int64_t *out_ids, float *out_d, int64_t *out_counts)
{
    std::vector<int> failed = which;
    if (m != VS_METRIC_L1 && kp < c.size())
    {
        failed = kp <= static_cast<size_t>(kWarpSelectMax)
                     ? gemm_path(dev, c, queries, which, k, kp, m, out_ids, out_d, out_counts)
                     : large_k_path(dev, c, queries, which, k, kp, m, false, out_ids, out_d,
                                    out_counts);
        dev.stats_gemm_failed += failed.size();
    }
    dev.stats_exact += failed.size();
    if (!failed.empty())
        exact_path(dev, c, queries, failed, k, m, out_ids, out_d, out_counts);
}

} // namespace

void knn_impl(DeviceContext &dev, const CudaDataset &c, const float *queries, size_t nq, size_t k,
              vs_metric m, int64_t *out_ids, float *out_d, int64_t *out_counts)
{
    const size_t n = c.size();
    if (n == 0)
    {
        for (size_t i = 0; i < nq * k; i++)
        {
            out_ids[i] = -1;
            out_d[i] = INFINITY;
        }
        if (out_counts)
            std::fill(out_counts, out_counts + nq, 0);
        return;
    }
    // Candidates per query: k + k/8 for fp32 approximations; k + k/2 for TF32 GEMMs, whose
    // rounding bound is ~250x wider (a thin margin would send most queries to the fallback).
    const size_t kp_d = knn_candidates(k, n);
    const size_t kp_g = dev.cfg.gemm_precision == VS_GEMM_TF32 || c.half()
                            ? knn_candidates_wide(k, n)
                            : kp_d;
    const bool gemm_metric = m != VS_METRIC_L1;
    const size_t chunk = 65536;
    for (size_t b0 = 0; b0 < nq; b0 += chunk)
    {
        std::vector<int> which(std::min(chunk, nq - b0));
        std::iota(which.begin(), which.end(), static_cast<int>(b0));
        std::vector<int> failed;
        if (kp_d >= n)
        {
            exact_path(dev, c, queries, which, k, m, out_ids, out_d, out_counts);
            continue;
        }
        if (c.half())
        {
            half_rows_knn(dev, c, queries, which, k, kp_g, m, out_ids, out_d, out_counts);
            continue;
        }
        const size_t small_batch = static_cast<size_t>(dev.small_batch_for(c.dim()));
        const bool small = which.size() <= small_batch;
        // A small batch of data on which TF32 leaves many queries uncertified (near ties, e.g.
        // Fashion-MNIST's integer pixels: 63 % at k = 26) takes the fp32 GEMM at once instead of
        // paying both passes; TF32 is tried again every kTf32Retry batches in case the data or
        // the k changed.  A skinny fp32 GEMM of long rows is only ~20-40 % slower than TF32
        // (docs/ENGINE.md).
        const bool small_gemm = which.size() <= dev.fp32_gemm_batch && c.dim() > kFp32MinDim;
        if (gemm_metric && !small && small_gemm && dev.cfg.gemm_precision == VS_GEMM_TF32 &&
            c.tf32_miss.load(std::memory_order_relaxed) > kTf32MissMax &&
            (c.fp32_runs.fetch_add(1, std::memory_order_relaxed) + 1) % kTf32Retry != 0 &&
            kp_d < n &&
            kp_d <= static_cast<size_t>(kWarpSelectMax))
        {
            failed = dev.with_fp32_gemm([&] {
                return gemm_path(dev, c, queries, which, k, kp_d, m, out_ids, out_d, out_counts);
            });
            dev.stats_fp32_failed += failed.size();
        }
        else if (gemm_metric && !small && kp_g < n)
        {
            if (kp_g <= static_cast<size_t>(kWarpSelectMax))
                failed = gemm_path(dev, c, queries, which, k, kp_g, m, out_ids, out_d, out_counts);
            else
                failed = large_k_path(dev, c, queries, which, k, kp_g, m, false, out_ids, out_d,
                                      out_counts);
            dev.stats_gemm_failed += failed.size();
            if (small_gemm && dev.cfg.gemm_precision == VS_GEMM_TF32)
                c.tf32_miss.store(0.75f * c.tf32_miss.load(std::memory_order_relaxed) +
                                      0.25f * static_cast<float>(failed.size()) / which.size(),
                                  std::memory_order_relaxed);
            // TF32 leaves uncertified the queries with near ties at their k-th place (40% of
            // a clustered 1M x 128 batch); an fp32 GEMM pass, whose bound is ~250x tighter,
            // certifies them at GEMM speed where the direct path would scan per query.  It
            // uses the warp selectors, which also answer the queries whose sampled filter
            // threshold missed (filter_select.cu).
            if (dev.cfg.gemm_precision == VS_GEMM_TF32 &&
                failed.size() > small_batch &&
                kp_d <= static_cast<size_t>(kWarpSelectMax))
            {
                failed = dev.with_fp32_gemm([&] {
                    return gemm_path(dev, c, queries, failed, k, kp_d, m, out_ids, out_d, out_counts,
                                     false);
                });
                dev.stats_fp32_failed += failed.size();
            }
        }
        else
            failed = which;
        if (!failed.empty())
        {
            if (kp_d <= static_cast<size_t>(kWarpSelectMax))
                failed = direct_path(dev, c, queries, failed, k, kp_d, m, out_ids, out_d, out_counts);
            else if (!gemm_metric || small)
                failed = large_k_path(dev, c, queries, failed, k, kp_d, m, true, out_ids, out_d,
                                      out_counts);
        }
        dev.stats_exact += failed.size();
        if (!failed.empty())
            exact_path(dev, c, queries, failed, k, m, out_ids, out_d, out_counts);
    }
    if (const char *st = std::getenv("VSEARCH_CUDA_STATS"); st && *st)
        std::fprintf(stderr,
                     "vsearch cuda: nq=%zu k=%zu gemm_uncertified=%zu fp32_uncertified=%zu "
                     "exact=%zu\n",
                     nq, k, dev.stats_gemm_failed, dev.stats_fp32_failed, dev.stats_exact);
}

} // namespace vs::cuda
