// The GEMM path of kNN (large batches, L2/IP/cosine): cuBLAS GEMM (TF32 tensor cores by
// default) of a query tile against the dataset into a tile buffer, a selection of K' = k + margin
// candidates per query (tiles of whole rows: a threshold from a sample of the row, a filter pass
// and a sort of the survivors, impl/filter_select.cu; column tiles: WarpTopK, one warp per row
// segment, thresholds carried across segments), the exact re-rank of the candidates with
// certification against the GEMM error bound; two streams alternate query tiles.  The full
// distance matrix never exists: only one tile per stream.  Large batches of short rows (TF32 or
// binary16 products) skip the tile: the sample's keys, then one kernel that multiplies and
// filters (impl/fused_filter.cu), then the same sort and re-rank.
#include "cuda/pipelines.cuh"

#include "cuda/utils/select.cuh"
#include "engine/host_common.h"

#include <algorithm>

namespace vs::cuda {

std::vector<int> gemm_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                           const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                           int64_t *out_ids, float *out_d, int64_t *out_counts, bool filter)
{
    const size_t n = c.size(), nb = which.size();
    Profile prof;
    QueryBatch Q = upload_queries(dev, hq, which, c, false);
    prof.mark("upload", dev.main);
    // Tile shape: whole rows when 32 of them fit, else column tiles of 64 queries.
    const size_t budget = std::min(dev.tile_bytes, dev.pool->available() / 6);
    size_t tn = n, tq;
    if (round_up(n, 4) * 4 * 32 <= budget)
    {
        tq = budget / (round_up(n, 4) * 4);
        tq = std::min(tq, size_t{2048});
        if (tq >= 32)
            tq = tq / 32 * 32;
    }
    else
    {
        tq = 64;
        tn = std::max<size_t>(4096, budget / (4 * tq) / 4096 * 4096);
        tn = std::min(tn, n);
    }
    tq = std::max<size_t>(1, std::min(tq, nb));
    const size_t ld = round_up(tn, 4);
    const int bcap = warp_topk_bcap(static_cast<int>(kp));
    const size_t target_warps = static_cast<size_t>(dev.prop.multiProcessorCount) * 32;
    size_t P = std::max<size_t>(1, (target_warps + tq - 1) / tq);
    P = std::min(P, std::max<size_t>(1, (tn + 2047) / 2048));
    // First part of each row, scanned before the rest to set the thresholds.
    size_t L1 = round_up(std::max<size_t>(8 * kp, tn / 32), 128);
    bool split = tn >= 4 * L1;
    size_t P1 = std::max<size_t>(1, std::min(P, L1 / std::max<size_t>(1024, 4 * kp)));
    // Whole rows: sampled threshold, filter, sort (filter_select.cu); else warp selectors.
    const FilterPlan whole = filter ? plan_filter(static_cast<int>(kp), static_cast<uint32_t>(n),
                                                  1024, kFilterSortMax)
                                    : FilterPlan{};
    // A large batch of TF32 or binary16 products takes the fused kernel: no tile in memory (so
    // also where a tile of whole rows would not fit), the sample's keys and the survivors only.
    const bool half = c.half();
    const bool fused = whole.on && nb >= dev.fused_batch &&
                       (half || dev.cfg.gemm_precision == VS_GEMM_TF32) &&
                       fused_filter_fits(static_cast<int>(c.dim()), half);
    const FilterPlan fp = fused || tn == n ? whole : FilterPlan{};
    const size_t S = fp.on ? size_t{32} * fp.chunks : 0;
    if (fused)
    {
        tq = budget / ((S + fp.cap + kp + 4) * 8);
        tq = std::max<size_t>(1, std::min({tq, size_t{2048}, nb}));
        if (tq >= 128)
            tq = tq / 128 * 128;
    }

    struct Slot
    {
        DeviceArray<float> tile;
        DeviceArray<uint64_t> state, partial, thr, cand, keys;
        DeviceArray<uint32_t> count;
        TileOut out;
        size_t q0 = 0, qn = 0;
        bool busy = false;
    } slots[2];
    for (int i = 0; i < 2 && static_cast<size_t>(i) * tq < nb; i++)
    {
        Slot &s = slots[i];
        if (fused)
            s.keys = DeviceArray<uint64_t>(*dev.pool, tq * S, dev.main);
        else
            s.tile = DeviceArray<float>(*dev.pool, tq * ld, dev.main);
        s.state = DeviceArray<uint64_t>(*dev.pool, tq * kp, dev.main);
        if (fp.on)
        {
            s.thr = DeviceArray<uint64_t>(*dev.pool, tq, dev.main);
            s.count = DeviceArray<uint32_t>(*dev.pool, tq, dev.main);
            s.cand = DeviceArray<uint64_t>(*dev.pool, tq * fp.cap, dev.main);
        }
        else
            s.partial = DeviceArray<uint64_t>(*dev.pool, tq * std::max(P, P1) * kp, dev.main);
        make_out(dev, s.out, tq, k, &dev.pinned[i]);
    }
    // The work streams start after the upload and the allocations on dev.main: a device-side
    // wait, not a host one (a small batch's latency is made of such waits).
    dev.work_after_main();
    StreamJoin join{dev.work, 2};
    std::vector<int> failed;
    const int mode = approx_mode(m);
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
        if (fused)
        {
            const size_t d = c.dim();
            FusedArgs f{};
            f.x = half ? static_cast<const void *>(Q.xh + q0 * d)
                       : static_cast<const void *>(Q.x + q0 * d);
            f.y = half ? static_cast<const void *>(c.x_f16())
                       : static_cast<const void *>(c.x_f32());
            f.d = static_cast<int>(d);
            f.qn = static_cast<int>(qn);
            f.n = static_cast<uint32_t>(n);
            f.mode = mode;
            f.xsq = Q.sq + q0;
            f.xinv = Q.inv + q0;
            f.ysq = c.sq.get();
            f.yinv = c.inv.get();
            f.cols = static_cast<uint32_t>(S);
            f.chunks = fp.chunks;
            f.keys = s.keys.get();
            launch_fused(f, half, st);
            prof.mark("sample", st);
            launch_threshold(s.keys.get(), f.qn, static_cast<int>(S), fp.rank, s.thr.get(),
                             s.count.get(), s.cand.get(), fp.cap, st);
            prof.mark("threshold", st);
            f.cols = static_cast<uint32_t>(n);
            f.chunks = 0;
            f.keys = nullptr;
            f.thr = s.thr.get();
            f.count = s.count.get();
            f.cand = s.cand.get();
            f.cap = fp.cap;
            f.unit_tiles = static_cast<uint32_t>(dev.fused_unit_tiles);
            f.wgmma = dev.fused_wgmma;
            launch_fused(f, half, st);
            prof.mark("fused", st);
            launch_sort_candidates(s.count.get(), s.cand.get(), fp.cap, static_cast<int>(kp),
                                   f.qn, s.state.get(), st);
            prof.mark("sort", st);
        }
        for (size_t c0 = 0; c0 < n && !fused; c0 += tn)
        {
            const size_t cn = std::min(tn, n - c0);
            gemm(dev, si, c, c0, cn, Q, q0, qn, s.tile.get(), ld);
            prof.mark("gemm", st);
            TileSelectArgs a{};
            a.tile = s.tile.get();
            a.ld = static_cast<int64_t>(ld);
            a.tq = static_cast<int>(qn);
            a.row0 = static_cast<uint32_t>(c0);
            a.mode = mode;
            a.xsq = Q.sq + q0;
            a.xinv = Q.inv + q0;
            a.ysq = c.sq.get();
            a.yinv = c.inv.get();
            a.partial = s.partial.get();
            a.kp = static_cast<int>(kp);
            a.bcap = bcap;
            auto pass = [&](size_t col0, size_t col1, size_t parts, bool have_state) {
                a.col0 = static_cast<int>(col0);
                a.col1 = static_cast<int>(col1);
                a.P = static_cast<int>(parts);
                a.seg_len = static_cast<int>(round_up((col1 - col0 + parts - 1) / parts, 128));
                a.state = have_state ? s.state.get() : nullptr;
                launch_tile_select(a, st);
                prof.mark(have_state ? "select2" : "select1", st);
                launch_merge_lists(s.state.get(), have_state, s.partial.get(), a.tq, a.P,
                                   a.kp, bcap, st);
                prof.mark("merge", st);
            };
            if (fp.on)
            {
                FilterArgs f{};
                f.tile = a.tile;
                f.ld = a.ld;
                f.tq = a.tq;
                f.tn = static_cast<uint32_t>(cn);
                f.mode = mode;
                f.xsq = a.xsq;
                f.xinv = a.xinv;
                f.ysq = a.ysq;
                f.yinv = a.yinv;
                f.chunks = fp.chunks;
                f.rank = fp.rank;
                f.cap = fp.cap;
                f.kp = a.kp;
                f.thr = s.thr.get();
                f.count = s.count.get();
                f.cand = s.cand.get();
                f.state = s.state.get();
                launch_filter_select(f, st);
                prof.mark("filter", st);
            }
            else if (c0 == 0 && split && cn >= 4 * L1)
            {
                pass(0, L1, P1, false);
                pass(L1, cn, P, true);
            }
            else
                pass(0, cn, P, c0 > 0);
        }
        rerank_finalize(dev, s.state.get(), static_cast<int>(qn), static_cast<int>(kp), Q, q0, c, m,
                        k, dev.gemm_kind(c.half()), true, nullptr, nullptr, nullptr, s.out, st);
        prof.mark("rerank", st);
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
            scatter(slots[si].out, slots[si].qn, which, slots[si].q0, out_ids, out_d,
                    out_counts, &failed);
        }
    prof.mark("tail", dev.main);
    prof.print("gemm", nb, k);
    return failed;
}

} // namespace vs::cuda
