// Exact kNN and range search against an independent double-precision reference, on every metric,
// on the CPU backend (always) and the CUDA backend (skipped where no device or library exists).
// Outputs are poisoned before each call and checked to be fully written.
#include "engine_testing.h"

#include <cmath>
#include <cstdio>
#include <tuple>

namespace {

struct Case
{
    const char *name;
    size_t n, d, nq;
    std::vector<size_t> ks; // 0 means "n"
    double dups;
    bool zero_row;
    uint64_t seed;
};

std::vector<Case> knn_cases()
{
    std::vector<Case> c = {
        {"n1_d3", 1, 3, 7, {1, 10}, 0.0, false, 11},
        {"n37_d3", 37, 3, 7, {1, 10, 0, 100}, 0.1, false, 12},
        {"n1000_d1_ties", 1000, 1, 64, {1, 10, 100}, 0.2, false, 13},
        {"n1000_d128_b64", 1000, 128, 64, {1, 10, 100}, 0.05, true, 14},
        {"n3001_d128_k2048", 3001, 128, 7, {1024, 2048}, 0.05, false, 15},
        {"n6007_d16_bigk", 6007, 16, 7, {5000, 0}, 0.05, false, 16},
        {"n501_d784", 501, 784, 7, {10, 100}, 0.05, false, 17},
        {"n301_d1536", 301, 1536, 7, {10}, 0.05, false, 18},
        {"n2003_d32_b1000", 2003, 32, 1000, {10}, 0.05, false, 19},
        {"n203_d8_b10000", 203, 8, 10000, {10}, 0.1, false, 20},
        {"n999_d16_dups", 999, 16, 64, {10, 100}, 0.5, true, 21},
        {"n5000_d24_b1", 5000, 24, 1, {1, 10, 100}, 0.02, false, 22},
        // 17-32 queries: CUDA's rows kernel with two rows per lane (a 512-row tile), n not a
        // multiple of it
        {"n1531_d64_b29", 1531, 64, 29, {1, 10, 100}, 0.05, false, 24},
        // 5-16 queries: CUDA's rows kernel with two rows per lane, d = 36 ending inside a group
        // of loads
        {"n2001_d128_b12", 2001, 128, 12, {1, 10, 100}, 0.05, false, 25},
        {"n777_d36_b5", 777, 36, 5, {1, 10}, 0.1, false, 26},
        // At most 32 queries, n >= 4096: CUDA's rows kernel with a sampled threshold
        {"n9001_d64_b12_filter", 9001, 64, 12, {1, 10, 100}, 0.05, true, 28},
        // the same with d = 36: an odd number of 16-byte pieces per row (a lane pair per row)
        {"n4099_d36_b7_filter", 4099, 36, 7, {1, 10, 100}, 0.05, false, 29},
        // More than 32 queries over whole rows: CUDA's filter selection (sampled
        // threshold, filter pass, sort of the survivors)
        {"n20011_d32_b40_filter", 20011, 32, 40, {300, 1024}, 0.05, true, 27},
        // Groups of hundreds of identical rows: candidate sets cannot be certified, so the
        // exhaustive exact fallback runs.
        {"n2000_d8_heavy_dups", 2000, 8, 64, {10, 100}, 0.97, false, 23},
    };
    if (const char *p = std::getenv("VSEARCH_TEST_LARGE"); p && p[0] == '1')
    {
        c.push_back({"large_n100003_d128_b100", 100003, 128, 100, {1, 10, 100, 1024, 2048}, 0.01, false, 31});
        c.push_back({"large_n100003_d128_b16", 100003, 128, 16, {10, 5000}, 0.01, false, 32});
        c.push_back({"large_n65537_d96_b7", 65537, 96, 7, {10, 0}, 0.01, false, 33});
    }
    return c;
}

void PrintTo(const Case &c, std::ostream *os)
{
    *os << c.name;
}

using Param = std::tuple<std::string, Case>;

class EngineKnn : public ::testing::TestWithParam<Param>
{
};

const vs_metric kMetrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE,
                              VS_METRIC_L1};

TEST_P(EngineKnn, MatchesDoubleReference)
{
    const std::string backend = std::get<0>(GetParam());
    const Case &c = std::get<1>(GetParam());
    VT_CONTEXT_OR_SKIP(ctx, backend);
    vt::Data D = vt::make_data(c.n, c.d, c.seed, c.dups, c.zero_row);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, c.nq, c.seed);
    for (vs_metric m : kMetrics)
    {
        std::vector<std::vector<vt::RefHit>> ref(c.nq);
        std::vector<std::unique_ptr<vt::RefIndex>> index(c.nq);
        for (size_t i = 0; i < c.nq; i++)
        {
            ref[i] = vt::ref_sorted(D, &q[i * c.d], m);
            index[i].reset(new vt::RefIndex(ref[i]));
        }
        for (size_t k0 : c.ks)
        {
            size_t k = k0 ? k0 : c.n;
            std::vector<int64_t> ids(c.nq * k, vt::kPoisonId), counts(c.nq, -7);
            std::vector<float> dists(c.nq * k, vt::poison_float());
            ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), c.nq, k, m, nullptr, ids.data(),
                             dists.data(), counts.data()),
                      VS_OK)
                << vs_last_error(ctx.get());
            int failures = 0;
            for (size_t i = 0; i < c.nq && failures < 3; i++)
            {
                auto r = vt::check_knn(D, ref[i], k, &ids[i * k], &dists[i * k], counts[i],
                                       index[i].get());
                if (!r)
                {
                    failures++;
                    ADD_FAILURE() << c.name << " " << vt::metric_name(m) << " k=" << k
                                  << " query " << i << ": " << r.message();
                }
            }
        }
    }
}

TEST_P(EngineKnn, SubsetsMatchReference)
{
    const std::string backend = std::get<0>(GetParam());
    const Case &c = std::get<1>(GetParam());
    if (c.nq > 1000 || c.n < 30 || c.n > 50000)
        GTEST_SKIP() << "covered by other cases";
    VT_CONTEXT_OR_SKIP(ctx, backend);
    vt::Data D = vt::make_data(c.n, c.d, c.seed + 100, c.dups, c.zero_row);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, c.nq, c.seed + 100);
    vt::SubsetData S = vt::make_subsets(D, c.nq, std::min<size_t>(c.n, 300), c.seed);
    vs_subsets subsets{S.offsets.data(), S.ids.data()};
    for (vs_metric m : kMetrics)
    {
        for (size_t k : {size_t{1}, size_t{10}, size_t{200}})
        {
            std::vector<int64_t> ids(c.nq * k, vt::kPoisonId), counts(c.nq, -7);
            std::vector<float> dists(c.nq * k, vt::poison_float());
            ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), c.nq, k, m, &subsets, ids.data(),
                             dists.data(), counts.data()),
                      VS_OK)
                << vs_last_error(ctx.get());
            for (size_t i = 0; i < c.nq; i++)
            {
                auto ref = vt::ref_sorted(D, &q[i * c.d], m, &S.rows[i]);
                auto r = vt::check_knn(D, ref, k, &ids[i * k], &dists[i * k], counts[i]);
                ASSERT_TRUE(r) << c.name << " " << vt::metric_name(m) << " k=" << k << " query "
                               << i << ": " << r.message();
            }
        }
        // Range over the subsets with a radius keeping about half of them.
        std::vector<float> all;
        for (size_t r : S.rows[0])
            all.push_back(static_cast<float>(vt::ref_distance(m, &q[0], &D.x[r * c.d], c.d)));
        std::sort(all.begin(), all.end());
        float radius = all.empty() ? 1.0f : all[all.size() / 2];
        vs_range_result res;
        ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), c.nq, radius, m, &subsets, nullptr,
                           nullptr, &res),
                  VS_OK)
            << vs_last_error(ctx.get());
        for (size_t i = 0; i < c.nq; i++)
        {
            auto ref = vt::ref_sorted(D, &q[i * c.d], m, &S.rows[i]);
            auto r = vt::check_range(ref, radius, res.ids + res.offsets[i],
                                     res.distances + res.offsets[i],
                                     static_cast<size_t>(res.offsets[i + 1] - res.offsets[i]));
            EXPECT_TRUE(r) << c.name << " " << vt::metric_name(m) << " query " << i << ": "
                           << r.message();
        }
        vs_range_result_free(&res);
    }
}

TEST_P(EngineKnn, RangeMatchesReference)
{
    const std::string backend = std::get<0>(GetParam());
    const Case &c = std::get<1>(GetParam());
    if (c.nq > 1000 || c.n > 50000)
        GTEST_SKIP() << "covered by other cases";
    VT_CONTEXT_OR_SKIP(ctx, backend);
    vt::Data D = vt::make_data(c.n, c.d, c.seed + 200, c.dups, c.zero_row);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, c.nq, c.seed + 200);
    for (vs_metric m : kMetrics)
    {
        std::vector<std::vector<vt::RefHit>> ref(c.nq);
        std::vector<float> first;
        for (size_t i = 0; i < c.nq; i++)
            ref[i] = vt::ref_sorted(D, &q[i * c.d], m);
        for (auto &h : ref[0])
            if (h.dist == h.dist)
                first.push_back(h.dist);
        if (first.empty())
            continue;
        // Radii returning nothing, a few rows and about 10% of the set.
        float lo = first.front();
        for (auto &r : ref)
            if (!r.empty() && r.front().dist == r.front().dist)
                lo = std::min(lo, r.front().dist);
        float none = lo - 1.0f - std::fabs(lo);
        float few = first[std::min<size_t>(first.size() - 1, 3)];
        float tenth = first[first.size() / 10];
        for (float radius : {none, few, tenth})
        {
            vs_range_result res;
            ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), c.nq, radius, m, nullptr, nullptr,
                               nullptr, &res),
                      VS_OK)
                << vs_last_error(ctx.get());
            ASSERT_EQ(res.nq, c.nq);
            ASSERT_EQ(static_cast<size_t>(res.offsets[c.nq]), res.total);
            if (radius == none)
                EXPECT_EQ(res.total, 0u);
            int failures = 0;
            for (size_t i = 0; i < c.nq && failures < 3; i++)
            {
                auto r = vt::check_range(ref[i], radius, res.ids + res.offsets[i],
                                         res.distances + res.offsets[i],
                                         static_cast<size_t>(res.offsets[i + 1] - res.offsets[i]));
                if (!r)
                {
                    failures++;
                    ADD_FAILURE() << c.name << " " << vt::metric_name(m) << " radius " << radius
                                  << " query " << i << ": " << r.message();
                }
            }
            vs_range_result_free(&res);
        }
    }
}

std::string param_name(const ::testing::TestParamInfo<Param> &info)
{
    return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(All, EngineKnn,
                         ::testing::Combine(::testing::Values(std::string("cpu"), std::string("cuda")),
                                            ::testing::ValuesIn(knn_cases())),
                         param_name);

// The CPU and the CUDA backend return the same ids and distances.
TEST(EngineCrossBackend, CpuAndCudaAgree)
{
    VT_CONTEXT_OR_SKIP(gpu, "cuda");
    VT_CONTEXT_OR_SKIP(cpu, "cpu");
    struct Sz
    {
        size_t n, d, nq, k;
    };
    for (Sz s : {Sz{4099, 128, 100, 10}, Sz{4099, 128, 5, 100}, Sz{2000, 33, 300, 1024},
                 Sz{3000, 64, 20, 4000}})
    {
        vt::Data D = vt::make_data(s.n, s.d, 77 + s.n, 0.05, true);
        vt::DatasetPtr dg = vt::upload(gpu.get(), D), dc = vt::upload(cpu.get(), D);
        std::vector<float> q = vt::make_queries(D, s.nq, 99);
        for (vs_metric m : kMetrics)
        {
            std::vector<int64_t> ig(s.nq * s.k), ic(s.nq * s.k);
            std::vector<float> fg(s.nq * s.k), fc(s.nq * s.k);
            ASSERT_EQ(vs_knn(gpu.get(), dg.get(), q.data(), s.nq, s.k, m, nullptr, ig.data(),
                             fg.data(), nullptr),
                      VS_OK)
                << vs_last_error(gpu.get());
            ASSERT_EQ(vs_knn(cpu.get(), dc.get(), q.data(), s.nq, s.k, m, nullptr, ic.data(),
                             fc.data(), nullptr),
                      VS_OK);
            size_t id_diff = 0, d_diff = 0;
            for (size_t i = 0; i < ig.size(); i++)
            {
                id_diff += ig[i] != ic[i];
                d_diff += !vt::close(fg[i], fc[i], 0.0);
            }
            EXPECT_EQ(id_diff, 0u) << vt::metric_name(m) << " n=" << s.n << " k=" << s.k;
            EXPECT_EQ(d_diff, 0u) << vt::metric_name(m) << " n=" << s.n << " k=" << s.k;
        }
    }
}

} // namespace

namespace {

// CUDA's filter selections (GEMM tiles of whole rows for more than 32 queries, the rows kernel for
// up to 32) take their thresholds from runs of 32 rows spaced n / chunks apart: for n = 32768, 128
// runs at rows 256 j .. 256 j + 31.
// Those rows are made far from every query (too many rows then fall below the threshold) or close
// to every query (too few): the sample is unlike its row and the query must go to the fallback.
// Results must be exact either way (the CPU backend answers the same data as a reference check).
TEST(EngineKnnFilter, UnrepresentativeSampleFallsBack)
{
    const size_t n = 32768, d = 16, nq = 40;
    for (const char *backend : {"cpu", "cuda"})
    {
        std::string why;
        vt::ContextPtr ctx = vt::make_context(backend, &why);
        if (!ctx)
            continue;
        for (bool sample_far : {true, false})
        {
            std::mt19937_64 rng(sample_far ? 71 : 72);
            std::normal_distribution<float> g(0.0f, 1.0f);
            vt::Data D;
            D.n = n;
            D.d = d;
            D.x.resize(n * d);
            D.group.resize(n);
            D.ids.resize(n);
            for (size_t i = 0; i < n; i++)
            {
                const bool sampled = i % 256 < 32;
                const bool far = sampled == sample_far;
                for (size_t j = 0; j < d; j++)
                    D.x[i * d + j] = far ? 3.0f + g(rng) : 0.05f * g(rng);
                D.group[i] = static_cast<int>(i);
                D.ids[i] = 3 * static_cast<int64_t>(i) - 7; // ascending: device row i = row i
            }
            std::vector<float> q(nq * d);
            for (auto &v : q)
                v = 0.01f * g(rng);
            vt::DatasetPtr ds = vt::upload(ctx.get(), D);
            for (vs_metric m : kMetrics)
            {
                std::vector<std::vector<vt::RefHit>> ref(nq);
                for (size_t i = 0; i < nq; i++)
                    ref[i] = vt::ref_sorted(D, &q[i * d], m);
                for (size_t k : {size_t{10}, size_t{300}, size_t{1024}})
                    for (size_t nb : {nq, size_t{12}, size_t{29}})
                    {
                        std::vector<int64_t> ids(nb * k, vt::kPoisonId), counts(nb, -7);
                        std::vector<float> dists(nb * k, vt::poison_float());
                        ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), nb, k, m, nullptr,
                                         ids.data(), dists.data(), counts.data()),
                                  VS_OK)
                            << vs_last_error(ctx.get());
                        for (size_t i = 0; i < nb; i++)
                        {
                            auto r = vt::check_knn(D, ref[i], k, &ids[i * k], &dists[i * k],
                                                   counts[i]);
                            ASSERT_TRUE(r) << backend << (sample_far ? " far" : " close")
                                           << " sample " << vt::metric_name(m) << " k=" << k
                                           << " nb=" << nb << " query " << i << ": "
                                           << r.message();
                        }
                    }
            }
        }
    }
}

// Small batches of integer-valued data (like image pixels: many near and exact ties) in more than
// 128 dimensions, several calls on one dataset: on CUDA the first batches run TF32, which leaves most queries
// uncertified, and the later ones switch to the fp32 GEMM at once (knn.cu); every answer must be
// exact throughout.
TEST(EngineKnnFilter, RepeatedSmallBatchesOfTiedData)
{
    const size_t n = 20011, d = 160, nb = 24, rounds = 8, k = 14;
    vt::Data D = vt::make_data(n, d, 616);
    for (float &v : D.x)
        v = std::round(v * 3.0f);
    std::vector<float> q = vt::make_queries(D, nb * rounds, 616);
    for (float &v : q)
        v = std::round(v * 3.0f);
    for (const char *backend : {"cpu", "cuda"})
    {
        std::string why;
        vt::ContextPtr ctx = vt::make_context(backend, &why);
        if (!ctx)
            continue;
        vt::DatasetPtr ds = vt::upload(ctx.get(), D);
        for (vs_metric m : {VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
            for (size_t r = 0; r < rounds; r++)
            {
                const float *qr = &q[r * nb * d];
                std::vector<int64_t> ids(nb * k, vt::kPoisonId), counts(nb, -7);
                std::vector<float> dists(nb * k, vt::poison_float());
                ASSERT_EQ(vs_knn(ctx.get(), ds.get(), qr, nb, k, m, nullptr, ids.data(),
                                 dists.data(), counts.data()),
                          VS_OK)
                    << vs_last_error(ctx.get());
                for (size_t i = 0; i < nb; i++)
                {
                    auto res = vt::check_knn(D, vt::ref_sorted(D, &qr[i * d], m), k, &ids[i * k],
                                             &dists[i * k], counts[i]);
                    ASSERT_TRUE(res) << backend << " " << vt::metric_name(m) << " round " << r
                                     << " query " << i << ": " << res.message();
                }
            }
    }
}

// The fused GEMM and filter kernel (fused_filter.cu) for every batch size: dimensions that are
// and are not multiples of its 32-float stages, batches of one, part of and several of its
// 128-query tiles, sets not a multiple of its 128-row tiles.
TEST(EngineCudaOnly, FusedFilterMatchesReference)
{
    VT_CONTEXT_WITH_ENV_OR_SKIP(ctx, "cuda", {"VSEARCH_CUDA_FUSED_BATCH", "1"},
                                {"VSEARCH_CUDA_SMALL_BATCH", "0"});
    struct Shape
    {
        size_t n, d, nq;
    };
    for (Shape sh : {Shape{4099, 4, 37}, Shape{20011, 100, 300}, Shape{5003, 128, 129},
                     Shape{8191, 124, 1}})
    {
        vt::Data D = vt::make_data(sh.n, sh.d, 600 + sh.d, 0.02);
        vt::DatasetPtr ds = vt::upload(ctx.get(), D);
        std::vector<float> q = vt::make_queries(D, sh.nq, 600 + sh.d);
        for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
            for (size_t k : {size_t{1}, size_t{10}, size_t{100}})
            {
                std::vector<int64_t> ids(sh.nq * k, vt::kPoisonId), counts(sh.nq, -7);
                std::vector<float> dists(sh.nq * k, vt::poison_float());
                ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), sh.nq, k, m, nullptr, ids.data(),
                                 dists.data(), counts.data()),
                          VS_OK)
                    << vs_last_error(ctx.get());
                for (size_t i = 0; i < sh.nq; i++)
                {
                    auto r = vt::check_knn(D, vt::ref_sorted(D, &q[i * sh.d], m), k, &ids[i * k],
                                           &dists[i * k], counts[i]);
                    ASSERT_TRUE(r) << "n=" << sh.n << " d=" << sh.d << " nq=" << sh.nq << " "
                                   << vt::metric_name(m) << " k=" << k << " query " << i << ": "
                                   << r.message();
                }
            }
    }
}

// Forces the CUDA backend's tiny tiles (several dataset tiles per query tile for kNN, several
// column chunks for range) and a zero small-batch threshold (GEMM path for 2 queries).
TEST(EngineCudaOnly, SmallTilesMatchReference)
{
    VT_CONTEXT_WITH_ENV_OR_SKIP(ctx, "cuda", {"VSEARCH_CUDA_TILE_BYTES", "262144"},
                                {"VSEARCH_CUDA_SMALL_BATCH", "0"});
    const size_t n = 20011, d = 32, nq = 70;
    vt::Data D = vt::make_data(n, d, 515, 0.02);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, nq, 515);
    for (vs_metric m : {VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1})
    {
        std::vector<std::vector<vt::RefHit>> ref(nq);
        for (size_t i = 0; i < nq; i++)
            ref[i] = vt::ref_sorted(D, &q[i * d], m);
        for (size_t k : {size_t{10}, size_t{300}})
        {
            for (size_t nb : {size_t{2}, nq})
            {
                std::vector<int64_t> ids(nb * k, vt::kPoisonId), counts(nb, -7);
                std::vector<float> dists(nb * k, vt::poison_float());
                ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), nb, k, m, nullptr, ids.data(),
                                 dists.data(), counts.data()),
                          VS_OK)
                    << vs_last_error(ctx.get());
                for (size_t i = 0; i < nb; i++)
                {
                    auto r = vt::check_knn(D, ref[i], k, &ids[i * k], &dists[i * k], counts[i]);
                    ASSERT_TRUE(r) << vt::metric_name(m) << " k=" << k << " nb=" << nb
                                   << " query " << i << ": " << r.message();
                }
            }
        }
        float radius = ref[0][50].dist;
        vs_range_result res;
        ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), nq, radius, m, nullptr, nullptr, nullptr,
                           &res),
                  VS_OK)
            << vs_last_error(ctx.get());
        for (size_t i = 0; i < nq; i++)
        {
            auto r = vt::check_range(ref[i], radius, res.ids + res.offsets[i],
                                     res.distances + res.offsets[i],
                                     static_cast<size_t>(res.offsets[i + 1] - res.offsets[i]));
            ASSERT_TRUE(r) << vt::metric_name(m) << " query " << i << ": " << r.message();
        }
        vs_range_result_free(&res);
    }
}

} // namespace
