// The large-k path of kNN (K' > 4096, beyond the selectors): full-row tiles (GEMM or the direct
// scan), a block-per-query radix select of K' candidates, exact re-rank with a CUB segmented
// sort, certification.
#include "cuda/pipelines.cuh"

#include "engine/host_common.h"

#include <algorithm>

namespace vs::cuda {

std::vector<int> large_k_path(DeviceContext &dev, const CudaDataset &c, const float *hq,
                              const std::vector<int> &which, size_t k, size_t kp, vs_metric m,
                              bool direct, int64_t *out_ids, float *out_d, int64_t *out_counts)
{
    const size_t n = c.size(), nb = which.size();
    Profile prof;
    QueryBatch Q = upload_queries(dev, hq, which, c.dim());
    const size_t ld = round_up(n, 4);
    const size_t per_query = ld * 4 + kp * 8 * 3 + k * 12;
    size_t tq = std::max<size_t>(1, std::min(dev.tile_bytes, dev.pool->available() / 3) / per_query);
    tq = std::min(tq, nb);
    if (tq * kp > 0x7fffffffu)
        tq = std::max<size_t>(1, 0x7fffffffu / kp);
    DeviceArray<float> tile(*dev.pool, tq * ld, dev.main);
    DeviceArray<uint64_t> cand(*dev.pool, tq * kp, dev.main), exact(*dev.pool, tq * kp, dev.main),
        sorted(*dev.pool, tq * kp, dev.main);
    DeviceArray<int> offs(*dev.pool, tq + 1, dev.main);
    TileOut out;
    make_out(dev, out, tq, k, &dev.pinned[0]);
    VS_CUDA_CHECK(cudaStreamSynchronize(dev.main));
    StreamJoin join{dev.work, 2};
    cudaStream_t st = dev.work[0];
    const int mode = direct ? MODE_RAW : approx_mode(m);
    const int kind = direct ? APPROX_DIRECT_F32 : dev.gemm_kind();
    std::vector<int> failed;
    for (size_t q0 = 0; q0 < nb; q0 += tq)
    {
        check_cancel(dev.cfg);
        const size_t qn = std::min(tq, nb - q0);
        full_rows(dev, c, Q, q0, qn, m, tile.get(), ld, 0, st, direct);
        prof.mark("rows", st);
        launch_radix_select(tile.get(), static_cast<int64_t>(ld), static_cast<int>(qn),
                            static_cast<uint32_t>(n), mode, Q.sq + q0, Q.inv + q0,
                            c.sq.get(), c.inv.get(), static_cast<int>(kp), cand.get(), st);
        prof.mark("radix", st);
        rerank_finalize(dev, cand.get(), static_cast<int>(qn), static_cast<int>(kp), Q, q0, c, m, k,
                        kind, true, exact.get(), sorted.get(), offs.get(), out, st);
        prof.mark("rerank", st);
        download(out, qn, st);
        VS_CUDA_CHECK(cudaStreamSynchronize(st));
        scatter(out, qn, which, q0, out_ids, out_d, out_counts, &failed);
        prof.mark("download", st);
    }
    prof.print("large_k", nb, k);
    return failed;
}

} // namespace vs::cuda
