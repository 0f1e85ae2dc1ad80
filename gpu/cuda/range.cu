// Range search on the CUDA backend: an approximate tile (GEMM, or the direct scan for L1 and
// small batches), per-query candidate counts against radius + the error bound, CUB selection of
// the candidates in order for batches of queries that fit the candidate buffer, the exact check,
// CUB compaction of the matches, ids and distances to pinned memory and the collector; per query
// tile and dataset chunk, so the output never needs more than the budget.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>
#include <numeric>

namespace vs::cuda {

void range_impl(DeviceContext &dev, const CudaDataset &c, const float *hq, size_t nq, float radius,
                vs_metric m, RangeCollector *collector)
{
    const size_t n = c.size(), d = c.dim();
    if (n == 0)
    {
        std::vector<int64_t> zeros(nq, 0);
        collector->add(0, nq, zeros.data(), nullptr, nullptr);
        return;
    }
    std::vector<int> which(nq);
    std::iota(which.begin(), which.end(), 0);
    QueryBatch Q = upload_queries(dev, hq, which, d);
    const bool use_gemm = m != VS_METRIC_L1 && nq > static_cast<size_t>(dev.small_batch);
    const int kind = use_gemm ? dev.gemm_kind() : APPROX_DIRECT_F32;
    const int mode = use_gemm ? approx_mode(m) : MODE_RAW;
    const double limit = range_base_limit(m, radius);
    std::vector<double> thr(nq);
    for (size_t i = 0; i < nq; i++)
        thr[i] = range_approx_threshold(approx_error(kind, m, d, Q.host_norm[i], c.maxnorm),
                                        limit);
    DeviceArray<double> thr_d(*dev.pool, nq, dev.main);
    VS_CUDA_CHECK(cudaMemcpyAsync(thr_d.get(), thr.data(), nq * sizeof(double),
                                  cudaMemcpyHostToDevice, dev.main));
    // Tiles of whole rows (tq queries x n values) when they fit, else column chunks; the
    // candidate buffers (21 bytes per candidate) are sized separately, and the per-query
    // candidate counts split a tile into batches that fit them.
    const size_t avail = dev.pool->available();
    const size_t tile_budget = std::min(dev.tile_bytes, avail / 4);
    size_t tn = n, tq;
    if (round_up(n, 4) * 4 <= tile_budget)
        tq = std::max<size_t>(1, tile_budget / (round_up(n, 4) * 4));
    else
    {
        tq = 1;
        tn = use_gemm ? std::max<size_t>(4096, tile_budget / 4 / 4096 * 4096) : n;
    }
    tq = std::min({tq, nq, size_t{4096}});
    const size_t ld = round_up(tn, 4);
    if (tq * ld >= 0xFFFFFFF0ull)
        tq = std::max<size_t>(1, 0xFFFFFFF0ull / ld - 1);
    const size_t cap = std::max(ld, std::min(tq * ld, avail / 4 / 21));
    DeviceArray<float> tile(*dev.pool, tq * ld, dev.main);
    DeviceArray<uint32_t> cand(*dev.pool, cap, dev.main);
    DeviceArray<uint64_t> packed(*dev.pool, cap, dev.main), packed_out(*dev.pool, cap, dev.main);
    DeviceArray<uint8_t> flags(*dev.pool, cap, dev.main);
    DeviceArray<int64_t> qcount(*dev.pool, tq, dev.main), counts(*dev.pool, tq, dev.main);
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    StreamJoin join{dev.work, 2};
    cudaStream_t st = dev.work[0];
    std::vector<int64_t> h_qcount(tq);
    for (size_t q0 = 0; q0 < nq; q0 += tq)
    {
        const size_t qn = std::min(tq, nq - q0);
        for (size_t c0 = 0; c0 < n; c0 += tn)
        {
            check_cancel(dev.cfg);
            const size_t cn = std::min(tn, n - c0);
            if (use_gemm)
                gemm(dev, 0, c, c0, cn, Q.x + q0 * d, qn, tile.get(), ld);
            else
                full_rows(dev, c, Q, q0, qn, m, tile.get(), ld, 0, st, true);
            RangeTile rt{tile.get(), static_cast<int64_t>(ld), static_cast<uint32_t>(cn), mode,
                         Q.sq + q0, Q.inv + q0, c.sq.get() + c0, c.inv.get() + c0,
                         thr_d.get() + q0};
            range_count(rt, static_cast<int>(qn), qcount.get(), st);
            VS_CUDA_CHECK(cudaMemcpyAsync(h_qcount.data(), qcount.get(), qn * 8,
                                          cudaMemcpyDeviceToHost, st));
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            for (size_t qa = 0; qa < qn;)
            {
                size_t qb = qa, ncand = 0;
                while (qb < qn && ncand + static_cast<size_t>(h_qcount[qb]) <= cap)
                    ncand += static_cast<size_t>(h_qcount[qb++]);
                range_select(*dev.pool, rt, static_cast<int>(qa), static_cast<int>(qb), cand.get(), st);
                DeviceQueries qv = Q.view(q0);
                size_t nm = range_exact(*dev.pool, cand.get(), ncand, static_cast<uint32_t>(cn),
                                        static_cast<uint32_t>(c0), qv, c.rows(), m, radius,
                                        packed.get(), flags.get(), packed_out.get(), st);
                // Emit into the (now free) packed / cand buffers; counts of queries [0, qb).
                int64_t *e_ids = reinterpret_cast<int64_t *>(packed.get());
                float *e_d = reinterpret_cast<float *>(cand.get());
                launch_range_emit(packed_out.get(), nm, static_cast<uint32_t>(cn),
                                  static_cast<uint32_t>(c0), c.ids.get(), static_cast<int>(qb),
                                  counts.get(), e_ids, e_d, st);
                char *h = static_cast<char *>(dev.pinned[0].ensure(qn * 8 + nm * 12 + 16));
                int64_t *h_counts = reinterpret_cast<int64_t *>(h);
                int64_t *h_ids = reinterpret_cast<int64_t *>(h + qn * 8);
                float *h_d = reinterpret_cast<float *>(h + qn * 8 + nm * 8);
                VS_CUDA_CHECK(cudaMemcpyAsync(h_counts, counts.get() + qa, (qb - qa) * 8,
                                              cudaMemcpyDeviceToHost, st));
                if (nm)
                {
                    VS_CUDA_CHECK(cudaMemcpyAsync(h_ids, e_ids, nm * 8, cudaMemcpyDeviceToHost, st));
                    VS_CUDA_CHECK(cudaMemcpyAsync(h_d, e_d, nm * 4, cudaMemcpyDeviceToHost, st));
                }
                VS_CUDA_CHECK(cudaStreamSynchronize(st));
                collector->add(q0 + qa, qb - qa, h_counts, h_ids, h_d);
                qa = qb;
            }
        }
    }
}

} // namespace vs::cuda
