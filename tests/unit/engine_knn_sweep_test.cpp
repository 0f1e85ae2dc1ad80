// The CUDA backend's small-batch kNN over a grid of batch sizes (1..64 queries), row counts, k
// and dimensions, every answer equal to the CPU backend's.  The kernels' launch parameters (grid,
// block, dynamic shared memory) are functions of (nq, n, d, k) and of a dataset's TF32 miss
// average; the grid's points include those where a launch once asked for exactly 48 KB of dynamic
// shared memory for a kernel that also has static shared memory, which the device refuses without
// the opt-in (cudaErrorInvalidValue; docs/RELIABILITY.md, "The GPU error under mixed load").
// Skipped without a CUDA device.
#include "engine_testing.h"

namespace {

struct Shape
{
    size_t n, d;
    bool integer;           // small integer values (near and exact ties: TF32 leaves many uncertified)
    std::vector<size_t> ks; // per shape: k values of its launch-parameter boundaries
    const char *why;
};

std::vector<Shape> shapes()
{
    return {
        // The direct path's staged scan and list merge (n below the rows kernels' 4 096): the
        // merge's warps W = min(8, (grid + 1) / 2) for a grid of n / 128 blocks, so W * (2 K' +
        // buffer) * 8 bytes was exactly 48 KB for K' = 640 at 7-8 blocks (k 541-568), 448 at
        // 11-12 (k 370-398) and 320 at 15 or more (k 257-285).
        {1000, 8, false, {10, 100, 560}, "merge, K' 640, 8 blocks"},
        {1536, 8, false, {10, 390}, "merge, K' 448, 12 blocks"},
        {2000, 8, false, {1, 10, 30, 64, 100, 256, 260, 285}, "merge, K' 320 (the mixed load's tables)"},
        {2000, 128, false, {10, 270}, "merge, K' 320, long rows"},
        {4095, 16, false, {10, 270}, "the last n of the staged scan"},
        {4096, 16, false, {10, 270}, "the first n of the rows kernels"},
        // The rows kernels' sampled threshold (up to 32 queries) and the GEMM path's sample
        // (more): 32 selector warps of rank 64 were 48 KB for K' = 288 (k 225-256) once the
        // sample has 128 runs (n >= 32 768), and TF32's wider K' = 288 at k 172-192; rank 320
        // (8 warps) at K' = 2016 (rows: k 1765-1792).
        {32768, 8, false, {10, 180, 240, 256}, "threshold, rank 64"},
        {32768, 128, false, {180, 256}, "threshold, rank 64, long rows"},
        {8192, 8, false, {1780}, "threshold, rank 320"},
        // Rows over 64 pieces: the sample's rows split over teams of 8 lanes (75 pieces: the
        // last pass leaves lanes idle).
        {8192, 300, false, {1, 10, 100}, "sample teams, d 300"},
        // More than 128 dimensions: the GEMM path for every batch (L1: the staged scan; 129 is not
        // a multiple of 4), TF32 on integer data leaving many queries uncertified, so that the
        // dataset's miss average moves between calls and small batches switch to the fp32 GEMM.
        {2000, 129, true, {10, 100, 270}, "GEMM, d not a multiple of 4"},
        {4099, 784, true, {1, 10, 100, 260}, "GEMM, pixel-like rows"},
        {2000, 784, true, {10, 270}, "GEMM, K' 320 for fp32"},
        // Queries longer than the query norms' 2 048-float chunk in shared memory, 3 values past
        // the last multiple of 4 (the norm's tail).
        {1000, 2051, false, {10}, "query norms over two chunks"},
    };
}

const vs_metric kSweepMetrics[] = {VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1};

TEST(EngineCudaSweep, SmallBatchesMatchCpu)
{
    VT_CONTEXT_OR_SKIP(gpu, "cuda");
    VT_CONTEXT_OR_SKIP(cpu, "cpu");
    constexpr size_t kPool = 128, kMaxBatch = 64;
    for (const Shape &s : shapes())
    {
        vt::Data D = vt::make_data(s.n, s.d, 9000 + s.n + s.d, 0.05);
        std::vector<float> q = vt::make_queries(D, kPool, 9100 + s.n + s.d);
        if (s.integer)
        {
            for (float &v : D.x)
                v = std::round(v * 3.0f);
            for (float &v : q)
                v = std::round(v * 3.0f);
        }
        vt::DatasetPtr dg = vt::upload(gpu.get(), D), dc = vt::upload(cpu.get(), D);
        const size_t kmax = *std::max_element(s.ks.begin(), s.ks.end());
        for (vs_metric m : kSweepMetrics)
        {
            // The CPU backend's answers at the largest k: with ties broken by id, the answer for
            // a smaller k is its prefix.
            std::vector<int64_t> ic(kPool * kmax);
            std::vector<float> fc(kPool * kmax);
            ASSERT_EQ(vs_knn(cpu.get(), dc.get(), q.data(), kPool, kmax, m, nullptr, ic.data(),
                             fc.data(), nullptr),
                      VS_OK)
                << vs_last_error(cpu.get());
            for (size_t k : s.ks)
                for (size_t nq = 1; nq <= kMaxBatch; nq++)
                {
                    const size_t q0 = (nq * 37) % (kPool - kMaxBatch + 1);
                    std::vector<int64_t> ig(nq * k, vt::kPoisonId), cg(nq, -7);
                    std::vector<float> fg(nq * k, vt::poison_float());
                    ASSERT_EQ(vs_knn(gpu.get(), dg.get(), &q[q0 * s.d], nq, k, m, nullptr,
                                     ig.data(), fg.data(), cg.data()),
                              VS_OK)
                        << s.why << ": n=" << s.n << " d=" << s.d << " " << vt::metric_name(m)
                        << " k=" << k << " nq=" << nq << ": " << vs_last_error(gpu.get());
                    for (size_t i = 0; i < nq; i++)
                    {
                        const size_t want = std::min(k, s.n);
                        const int64_t *ref_ids = &ic[(q0 + i) * kmax];
                        const float *ref_d = &fc[(q0 + i) * kmax];
                        size_t id_diff = 0, d_diff = 0;
                        for (size_t j = 0; j < want; j++)
                        {
                            id_diff += ig[i * k + j] != ref_ids[j];
                            d_diff += !vt::close(fg[i * k + j], ref_d[j], 0.0);
                        }
                        ASSERT_TRUE(cg[i] == static_cast<int64_t>(want) && id_diff == 0 &&
                                    d_diff == 0)
                            << s.why << ": n=" << s.n << " d=" << s.d << " "
                            << vt::metric_name(m) << " k=" << k << " nq=" << nq << " query "
                            << q0 + i << ": count " << cg[i] << " (want " << want << "), "
                            << id_diff << " ids and " << d_diff << " distances differ";
                    }
                }
        }
    }
}

} // namespace
