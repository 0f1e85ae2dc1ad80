// The large-k path of kNN (K' > 4096, beyond the selectors).  Per tile of whole rows (GEMM or the
// direct scan): the sampled threshold and filter pass of filter_select.cu with a candidate buffer
// of up to kLargeKCap keys per query (K' = 15 000 keeps ~18 000); for the queries whose sample
// missed (fewer than k or more than the buffer below the threshold), a block-per-query radix
// select of exactly K'; exact keys of every candidate, a CUB segmented sort per query in global
// memory, and certification against the filter's threshold (every row outside the candidates
// has an approximate key at or above it) or the radix select's K'-th key.  Two slots (stream,
// tile, buffers, pinned outputs) alternate, so one tile's GEMM and selection run while the
// previous tile's results are copied out and scattered.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>

namespace vs::cuda {

namespace {
constexpr int kLargeKCap = 1 << 16; // candidate buffer per query (keys), a power of two
}

std::vector<int> large_k_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                              const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                              bool direct, int64_t *out_ids, float *out_d, int64_t *out_counts)
{
    const size_t n = c.size(), nb = which.size();
    Profile prof;
    QueryBatch Q = upload_queries(dev, hq, which, c);
    const FilterPlan fp =
        plan_filter(static_cast<int>(kp), static_cast<uint32_t>(n), 1024, kLargeKCap);
    const size_t stride = fp.on ? static_cast<size_t>(fp.cap) : kp;
    const size_t ld = round_up(n, 4);
    const size_t per_query = ld * 4 + stride * 8 * 3 + k * 12 + 32;
    const size_t budget = std::min(dev.tile_bytes, dev.pool->available() / 6);
    size_t tq = std::max<size_t>(1, budget / per_query);
    tq = std::min(tq, nb);
    if (tq * stride > 0x7fffffffu)
        tq = std::max<size_t>(1, 0x7fffffffu / stride);
    struct Slot
    {
        DeviceArray<float> tile;
        DeviceArray<uint64_t> cand, exact, sorted, bound;
        DeviceArray<uint32_t> count;
        DeviceArray<int> begin, end;
        TileOut out;
        size_t q0 = 0, qn = 0;
        bool busy = false;
    } slots[2];
    for (int i = 0; i < 2 && static_cast<size_t>(i) * tq < nb; i++)
    {
        Slot &s = slots[i];
        s.tile = DeviceArray<float>(*dev.pool, tq * ld, dev.main);
        s.cand = DeviceArray<uint64_t>(*dev.pool, tq * stride, dev.main);
        s.exact = DeviceArray<uint64_t>(*dev.pool, tq * stride, dev.main);
        s.sorted = DeviceArray<uint64_t>(*dev.pool, tq * stride, dev.main);
        s.bound = DeviceArray<uint64_t>(*dev.pool, tq, dev.main);
        s.count = DeviceArray<uint32_t>(*dev.pool, tq, dev.main);
        s.begin = DeviceArray<int>(*dev.pool, tq, dev.main);
        s.end = DeviceArray<int>(*dev.pool, tq, dev.main);
        make_out(dev, s.out, tq, k, &dev.pinned[i]);
    }
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    StreamJoin join{dev.work, 2};
    const int mode = direct ? MODE_RAW : approx_mode(m);
    const int kind = direct ? APPROX_DIRECT_F32 : dev.gemm_kind(c.half());
    std::vector<int> failed;
    size_t t = 0;
    for (size_t q0 = 0; q0 < nb; q0 += tq, t++)
    {
        const int si = static_cast<int>(t % 2);
        Slot &s = slots[si];
        cudaStream_t st = dev.work[si];
        if (s.busy)
        {
            VS_CUDA_CHECK(cudaStreamSynchronize(st));
            scatter(s.out, s.qn, which, s.q0, out_ids, out_d, out_counts, &failed);
            s.busy = false;
        }
        check_cancel(dev.cfg);
        const size_t qn = std::min(tq, nb - q0);
        const int nqi = static_cast<int>(qn);
        full_rows(dev, c, Q, q0, qn, m, s.tile.get(), ld, si, st, direct);
        prof.mark("rows", st);
        // Slots past a query's candidates read as kNoKey (no exact key computed).
        VS_CUDA_CHECK(cudaMemsetAsync(s.cand.get(), 0xFF, qn * stride * 8, st));
        if (fp.on)
        {
            FilterArgs f{};
            f.tile = s.tile.get();
            f.ld = static_cast<int64_t>(ld);
            f.tq = nqi;
            f.tn = static_cast<uint32_t>(n);
            f.mode = mode;
            f.xsq = Q.sq + q0;
            f.xinv = Q.inv + q0;
            f.ysq = c.sq.get();
            f.yinv = c.inv.get();
            f.chunks = fp.chunks;
            f.rank = fp.rank;
            f.cap = fp.cap;
            f.kp = static_cast<int>(kp);
            f.thr = s.bound.get();
            f.count = s.count.get();
            f.cand = s.cand.get();
            launch_filter_candidates(f, st);
        }
        else
            VS_CUDA_CHECK(cudaMemsetAsync(s.count.get(), 0, qn * 4, st)); // all by radix select
        prof.mark("filter", st);
        launch_radix_select(s.tile.get(), static_cast<int64_t>(ld), nqi, static_cast<uint32_t>(n),
                            mode, Q.sq + q0, Q.inv + q0, c.sq.get(), c.inv.get(),
                            static_cast<int>(kp), static_cast<int>(k), static_cast<int>(stride),
                            s.count.get(), s.bound.get(), s.cand.get(), st);
        prof.mark("radix", st);
        launch_exact_keys(s.cand.get(), nqi, static_cast<int>(stride), Q.view(q0), c.rows(), m,
                          s.exact.get(), st);
        prof.mark("exact", st);
        launch_segment_bounds(s.count.get(), nqi, static_cast<int>(stride), s.begin.get(),
                              s.end.get(), st);
        VS_CUDA_CHECK(cudaMemsetAsync(s.sorted.get(), 0xFF, qn * stride * 8, st));
        segmented_sort_keys(*dev.pool, s.exact.get(), s.sorted.get(), static_cast<int>(qn * stride),
                            nqi, s.begin.get(), s.end.get(), st);
        prof.mark("sort", st);
        FinalizeArgs f{};
        f.sorted = s.sorted.get();
        f.seg = static_cast<int64_t>(stride);
        f.bound = s.bound.get();
        f.kp = static_cast<int>(kp);
        f.nq = nqi;
        f.k = static_cast<int>(k);
        f.metric = m;
        f.kind = kind;
        f.d = static_cast<int>(c.dim());
        f.qnorm = Q.norm + q0;
        f.qrel = Q.qrel ? Q.qrel + q0 : nullptr;
        f.maxnorm = c.maxnorm;
        f.ids = c.ids.get();
        f.out_ids = s.out.ids;
        f.out_d = s.out.d;
        f.out_counts = s.out.counts;
        f.out_ok = s.out.ok;
        launch_finalize(f, st);
        download(s.out, qn, st);
        prof.mark("download", st);
        s.q0 = q0;
        s.qn = qn;
        s.busy = true;
    }
    for (int si = 0; si < 2; si++)
        if (slots[si].busy)
        {
            VS_CUDA_CHECK(cudaStreamSynchronize(dev.work[si]));
            scatter(slots[si].out, slots[si].qn, which, slots[si].q0, out_ids, out_d, out_counts,
                    &failed);
        }
    prof.print("large_k", nb, k);
    return failed;
}

} // namespace vs::cuda
