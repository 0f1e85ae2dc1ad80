// The direct path of kNN (small batches, L1, and the queries the GEMM path could not certify):
// up to 32 queries the rows kernels read the dataset once and keep the keys below a sampled
// threshold (impl/scan.cu); otherwise, and for the queries whose sample missed, the staged scan
// kernel with fused selectors and a merge of the grid's lists; then the same re-rank and
// certification (dot-form or tight direct bound).  One stream: a small batch is latency-bound.
#include "cuda/pipelines.cuh"

#include "cuda/utils/select.cuh"
#include "engine/host_common.h"

#include <algorithm>

namespace vs::cuda {

std::vector<int> direct_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                             const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                             int64_t *out_ids, float *out_d, int64_t *out_counts, bool allow_rows)
{
    if (c.half())
        throw Error(VS_INTERNAL, "the direct kernels read float rows (binary16 rows: knn.cu)");
    const size_t nb = which.size();
    Profile prof;
    // One stream for all of it: a small batch is latency-bound, and host waits between the
    // upload, the allocations and the kernels cost more than the work (~10 us each).
    cudaStream_t st = dev.main;
    QueryBatch Q = upload_queries(dev, hq, which, c, false);
    prof.mark("upload", st);
    const int tier = nb <= 16 ? 0 : 1;
    const int bcap = warp_topk_bcap(static_cast<int>(kp));
    const int d = static_cast<int>(c.dim());
    // <= 32 queries: the rows kernels with a sampled threshold (no selectors, no merge); the
    // queries whose sample missed, and everything else, go through the staged scan.
    const int rows_nb = static_cast<int>(std::min<size_t>(nb, 32));
    FilterPlan fp{};
    if (allow_rows && nb <= 32 && stream_ok(d, rows_nb) && stream_fits(rows_nb, d, dev.smem_optin))
        fp = plan_filter(static_cast<int>(kp), static_cast<uint32_t>(c.size()), 256,
                         kFilterSortMax);
    int per = fp.on ? rows_nb : static_cast<int>(std::min<size_t>(scan_tier_queries(tier), nb));
    while (!fp.on && per > 1 &&
           scan_smem_bytes(tier, true, per, static_cast<int>(kp), bcap) > dev.smem_optin)
        per--;
    int grid = 0;
    DeviceArray<uint64_t> partial, sample, thr, cand;
    DeviceArray<uint32_t> count;
    if (fp.on)
    {
        sample = DeviceArray<uint64_t>(*dev.pool, static_cast<size_t>(per) * fp.chunks * 32, dev.main);
        thr = DeviceArray<uint64_t>(*dev.pool, per, dev.main);
        count = DeviceArray<uint32_t>(*dev.pool, per, dev.main);
        cand = DeviceArray<uint64_t>(*dev.pool, static_cast<size_t>(per) * fp.cap, dev.main);
    }
    else
    {
        const size_t smem = scan_smem_bytes(tier, true, per, static_cast<int>(kp), bcap);
        const size_t ntiles = (c.size() + 127) / 128;
        grid = static_cast<int>(std::min<size_t>(
            ntiles, static_cast<size_t>(dev.prop.multiProcessorCount) *
                        std::max(1, scan_blocks_per_sm(tier, smem))));
        partial = DeviceArray<uint64_t>(*dev.pool, static_cast<size_t>(per) * grid * kp, dev.main);
    }
    DeviceArray<uint64_t> state(*dev.pool, per * kp, dev.main);
    TileOut out;
    make_out(dev, out, per, k, &dev.pinned[0]);
    prof.mark("alloc", st);
    std::vector<int> failed;
    for (size_t q0 = 0; q0 < nb; q0 += per)
    {
        check_cancel(dev.cfg);
        const int qn = static_cast<int>(std::min<size_t>(per, nb - q0));
        ScanArgs a{};
        a.rows = c.rows();
        a.q = Q.x + q0 * c.dim();
        a.qinv = Q.inv + q0;
        a.qsq = Q.sq + q0;
        a.nb = qn;
        a.metric = m;
        a.select = true;
        a.kp = static_cast<int>(kp);
        a.bcap = bcap;
        if (fp.on)
        {
            a.thr = thr.get();
            a.count = count.get();
            a.cand = cand.get();
            a.cap = fp.cap;
            launch_stream_filter(a, fp, dev.prop.multiProcessorCount, sample.get(), state.get(), st);
            prof.mark("rows", st);
        }
        else
        {
            a.partial = partial.get();
            a.grid = grid;
            launch_scan(a, tier, st);
            prof.mark("scan", st);
            launch_merge_lists(state.get(), false, partial.get(), qn, grid,
                               static_cast<int>(kp), bcap, st);
            prof.mark("merge", st);
        }
        // The rows kernels form L2 through dot products (||x||^2 + ||y||^2 - 2 x.y).
        const int kind = fp.on ? APPROX_GEMM_F32 : APPROX_DIRECT_F32;
        rerank_finalize(dev, state.get(), qn, static_cast<int>(kp), Q, q0, c, m, k, kind, true,
                        nullptr, nullptr, nullptr, out, st);
        prof.mark("rerank", st);
        download(out, qn, st);
        VS_CUDA_CHECK(cudaStreamSynchronize(st));
        scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
        prof.mark("download", st);
    }
    prof.print(fp.on ? "rows" : "scan", nb, k);
    if (fp.on && !failed.empty())
        failed = direct_path(dev, c, hq, failed, k, kp, m, out_ids, out_d, out_counts, false);
    return failed;
}

} // namespace vs::cuda
