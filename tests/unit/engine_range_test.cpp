// Range search and large k, exact to the bit: every backend against the CPU backend's exact
// distances of every row (vs_knn with k = n: the engine's formula, so "exactly at the radius" is
// well defined) and against a double-precision brute force (within rounding).  The CUDA backend
// also runs with candidate buffers of a few hundred keys and tiles of 4 096 columns, so every
// buffer the range kernels use overflows (batches of queries, column chunks of one query, column
// tiles).  CUDA contexts are skipped where no device or library exists.
#include "engine_testing.h"

#include "engine/host_common.h"

#include <cmath>

namespace {

const vs_metric kRangeMetrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE,
                                   VS_METRIC_L1};

// "cpu", "cuda", or "cuda_small": CUDA with 256-key candidate buffers and 16 KiB tiles.
vt::ContextPtr backend_context(const std::string &name, std::string *why)
{
    if (name != "cuda_small")
        return vt::make_context(name, why);
    return vt::make_context_with_env(
        "cuda", {{"VSEARCH_CUDA_RANGE_CAP", "256"}, {"VSEARCH_CUDA_TILE_BYTES", "16384"}}, why);
}

#define RANGE_CONTEXT_OR_SKIP(var, name)                                                          \
    std::string var##_why;                                                                        \
    vt::ContextPtr var = backend_context(name, &var##_why);                                       \
    if (!var)                                                                                     \
        GTEST_SKIP() << name << " backend unavailable: " << var##_why;

// Every row's exact distance to each query from the CPU backend: exact[q] sorted by (distance,
// id), NaN last.
std::vector<std::vector<vt::RefHit>> cpu_exact_all(const vt::Data &D, const std::vector<float> &q,
                                                   size_t nq, vs_metric m)
{
    std::vector<std::vector<vt::RefHit>> out(nq);
    vt::ContextPtr cpu = vt::make_context("cpu");
    EXPECT_TRUE(cpu != nullptr);
    if (!cpu)
        return out;
    vt::DatasetPtr ds = vt::upload(cpu.get(), D);
    std::vector<int64_t> ids(nq * D.n);
    std::vector<float> dists(nq * D.n);
    EXPECT_EQ(vs_knn(cpu.get(), ds.get(), q.data(), nq, D.n, m, nullptr, ids.data(), dists.data(),
                     nullptr),
              VS_OK);
    for (size_t i = 0; i < nq; i++)
        for (size_t j = 0; j < D.n; j++)
            out[i].push_back({dists[i * D.n + j], ids[i * D.n + j], 0});
    return out;
}

// A range answer equals the exact one: ids ascending, the same distances (kNN keys turn -0 into
// +0, range keeps the distance's sign), every row with distance <= radius; and it agrees with the double brute force within rounding.
::testing::AssertionResult check_exact_range(const std::vector<vt::RefHit> &exact,
                                             const std::vector<vt::RefHit> &ref, float radius,
                                             const int64_t *ids, const float *dists, size_t count)
{
    std::vector<vt::RefHit> want;
    for (const vt::RefHit &h : exact)
        if (h.dist <= radius)
            want.push_back(h);
    std::sort(want.begin(), want.end(),
              [](const vt::RefHit &a, const vt::RefHit &b) { return a.id < b.id; });
    if (count != want.size())
        return ::testing::AssertionFailure() << count << " matches, exact answer has " << want.size();
    for (size_t i = 0; i < count; i++)
        if (ids[i] != want[i].id || !(dists[i] == want[i].dist)) // -0 (range) == +0 (kNN key)
            return ::testing::AssertionFailure()
                   << "match " << i << ": id " << ids[i] << " at " << dists[i] << ", exact id "
                   << want[i].id << " at " << want[i].dist;
    return vt::check_range(ref, radius, ids, dists, count);
}

class EngineRange : public ::testing::TestWithParam<std::string>
{
};

// Radius 0 (queries that copy rows, and groups of identical rows), a radius that returns a few
// rows, one at exactly the distance of a group of duplicates, ~20% of the set, and +inf; over
// the GEMM path (50 queries) and the direct path (7).
TEST_P(EngineRange, ExactAnswersAtEveryRadius)
{
    RANGE_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t n = 10007, d = 24;
    vt::Data D = vt::make_data(n, d, 1801, 0.2, true);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    for (size_t nq : {size_t{50}, size_t{7}})
    {
        std::vector<float> q = vt::make_queries(D, nq, 1802 + nq);
        for (vs_metric m : kRangeMetrics)
        {
            auto exact = cpu_exact_all(D, q, nq, m);
            std::vector<std::vector<vt::RefHit>> ref(nq);
            for (size_t i = 0; i < nq; i++)
                ref[i] = vt::ref_sorted(D, &q[i * d], m);
            // query 1 copies a row (make_queries): its duplicates' distance, and the first row
            // past position 20 that has a duplicate at the same distance
            const std::vector<vt::RefHit> &e1 = exact[1];
            float at_dups = e1[20].dist;
            for (size_t j = 20; j + 1 < e1.size(); j++)
                if (e1[j].dist == e1[j + 1].dist && e1[j].dist == e1[j].dist)
                {
                    at_dups = e1[j].dist;
                    break;
                }
            size_t at_radius = 0;
            for (const vt::RefHit &h : e1)
                at_radius += h.dist == at_dups;
            ASSERT_GE(at_radius, 2u) << "no duplicates at one distance";
            if (m == VS_METRIC_L2 || m == VS_METRIC_L1)
                ASSERT_EQ(e1[0].dist, 0.0f); // radius 0 has matches
            const float radii[] = {0.0f, e1[3].dist, at_dups, e1[n / 5].dist, INFINITY};
            for (float radius : radii)
            {
                if (radius != radius)
                    continue; // NaN distance (cosine of the zero row): no radius there
                vs_range_result res;
                ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), nq, radius, m, nullptr, nullptr,
                                   nullptr, &res),
                          VS_OK)
                    << vs_last_error(ctx.get());
                ASSERT_EQ(res.nq, nq);
                ASSERT_EQ(static_cast<size_t>(res.offsets[nq]), res.total);
                for (size_t i = 0; i < nq; i++)
                {
                    auto r = check_exact_range(exact[i], ref[i], radius, res.ids + res.offsets[i],
                                               res.distances + res.offsets[i],
                                               static_cast<size_t>(res.offsets[i + 1] -
                                                                   res.offsets[i]));
                    ASSERT_TRUE(r) << GetParam() << " " << vt::metric_name(m) << " nq=" << nq
                                   << " radius " << radius << " query " << i << ": "
                                   << r.message();
                }
                if (radius == INFINITY && m != VS_METRIC_COSINE)
                    EXPECT_EQ(res.total, nq * n); // every row (cosine: not the zero row)
                vs_range_result_free(&res);
            }
        }
    }
}

// The same answer through a caller's allocator (the copying delivery) as through malloc (the
// collector's arrays taken over).
TEST_P(EngineRange, CallerAllocatorGetsTheSameAnswer)
{
    RANGE_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t n = 5003, d = 16, nq = 40;
    vt::Data D = vt::make_data(n, d, 1811, 0.1);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, nq, 1812);
    auto exact = cpu_exact_all(D, q, nq, VS_METRIC_L2);
    const float radius = exact[0][n / 10].dist;
    struct Arena
    {
        std::vector<std::unique_ptr<char[]>> blocks;
    } arena;
    auto alloc = [](void *arg, size_t bytes) -> void * {
        auto *a = static_cast<Arena *>(arg);
        a->blocks.emplace_back(new char[bytes]);
        return a->blocks.back().get();
    };
    vs_range_result mine, theirs;
    ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), nq, radius, VS_METRIC_L2, nullptr, alloc,
                       &arena, &mine),
              VS_OK)
        << vs_last_error(ctx.get());
    ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), nq, radius, VS_METRIC_L2, nullptr, nullptr,
                       nullptr, &theirs),
              VS_OK);
    ASSERT_EQ(mine.total, theirs.total);
    EXPECT_GT(mine.total, nq);
    for (size_t i = 0; i <= nq; i++)
        ASSERT_EQ(mine.offsets[i], theirs.offsets[i]);
    EXPECT_EQ(std::memcmp(mine.ids, theirs.ids, mine.total * 8), 0);
    EXPECT_EQ(std::memcmp(mine.distances, theirs.distances, mine.total * 4), 0);
    vs_range_result_free(&theirs);
}

TEST_P(EngineRange, NanRadiusIsRejected)
{
    RANGE_CONTEXT_OR_SKIP(ctx, GetParam());
    vt::Data D = vt::make_data(100, 8, 1821);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    std::vector<float> q = vt::make_queries(D, 3, 1822);
    vs_range_result res;
    EXPECT_EQ(vs_range(ctx.get(), ds.get(), q.data(), 3, NAN, VS_METRIC_L2, nullptr, nullptr,
                       nullptr, &res),
              VS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(vs_last_error(ctx.get())).find("NaN"), std::string::npos);
    EXPECT_EQ(res.ids, nullptr);
}

// Large k: K' beyond the selectors (the filter with a global sort, and its radix-select fallback
// for queries whose sample missed), k = n and k > n (padding with id -1 and +inf).
TEST_P(EngineRange, LargeKIsExact)
{
    RANGE_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t n = 32768, d = 16, nq = 40;
    for (bool unrepresentative : {false, true})
    {
        vt::Data D = vt::make_data(n, d, 1831, 0.05);
        std::vector<float> q = vt::make_queries(D, nq, 1832);
        if (unrepresentative)
        {
            // The filter samples runs of 32 rows spaced n / chunks apart (n / 256 chunks: rows
            // 256 j .. 256 j + 31): make them the closest rows of every query (L2, L1), so far
            // too few rows fall below the sampled threshold and the radix select must answer.
            for (size_t i = 0; i < n; i++)
                if (i % 256 < 32)
                    for (size_t j = 0; j < d; j++)
                        D.x[i * d + j] = 0.01f * D.x[i * d + j];
            for (auto &v : q)
                v *= 0.01f;
        }
        vt::DatasetPtr ds = vt::upload(ctx.get(), D);
        for (vs_metric m : {VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_L1})
        {
            auto exact = cpu_exact_all(D, q, nq, m);
            for (size_t k : {size_t{3000}, size_t{6000}, n, n + 5})
                for (size_t nb : {nq, size_t{7}})
                {
                    std::vector<int64_t> ids(nb * k, vt::kPoisonId), counts(nb, -7);
                    std::vector<float> dists(nb * k, vt::poison_float());
                    ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), nb, k, m, nullptr, ids.data(),
                                     dists.data(), counts.data()),
                              VS_OK)
                        << vs_last_error(ctx.get());
                    for (size_t i = 0; i < nb; i++)
                    {
                        ASSERT_EQ(counts[i], static_cast<int64_t>(std::min(k, n)));
                        for (size_t j = 0; j < k; j++)
                        {
                            const int64_t want_id = j < n ? exact[i][j].id : -1;
                            const float want_d = j < n ? exact[i][j].dist : INFINITY;
                            ASSERT_TRUE(ids[i * k + j] == want_id &&
                                        std::memcmp(&dists[i * k + j], &want_d, 4) == 0)
                                << GetParam() << " " << vt::metric_name(m) << " k=" << k
                                << " nb=" << nb << " query " << i << " rank " << j << ": id "
                                << ids[i * k + j] << " at " << dists[i * k + j] << ", exact id "
                                << want_id << " at " << want_d;
                        }
                    }
                }
        }
    }
}

// A compact case of both (the one compute-sanitizer runs, gpu/bench/run-on-device): range with
// every buffer overflowing on "cuda_small" (about a third of the set per query), and k = 3 000
// over 6 000 rows (K' = 4 500: the filter with a global sort), on the GEMM and direct paths.
TEST_P(EngineRange, CompactRangeAndLargeK)
{
    RANGE_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t n = 6000, d = 8, k = 3000;
    vt::Data D = vt::make_data(n, d, 1851, 0.1);
    vt::DatasetPtr ds = vt::upload(ctx.get(), D);
    for (size_t nq : {size_t{40}, size_t{5}})
    {
        std::vector<float> q = vt::make_queries(D, nq, 1852 + nq);
        for (vs_metric m : {VS_METRIC_L2, VS_METRIC_COSINE})
        {
            auto exact = cpu_exact_all(D, q, nq, m);
            std::vector<std::vector<vt::RefHit>> ref(nq);
            for (size_t i = 0; i < nq; i++)
                ref[i] = vt::ref_sorted(D, &q[i * d], m);
            const float radius = exact[0][n / 3].dist;
            vs_range_result res;
            ASSERT_EQ(vs_range(ctx.get(), ds.get(), q.data(), nq, radius, m, nullptr, nullptr,
                               nullptr, &res),
                      VS_OK)
                << vs_last_error(ctx.get());
            for (size_t i = 0; i < nq; i++)
            {
                auto r = check_exact_range(exact[i], ref[i], radius, res.ids + res.offsets[i],
                                           res.distances + res.offsets[i],
                                           static_cast<size_t>(res.offsets[i + 1] - res.offsets[i]));
                ASSERT_TRUE(r) << GetParam() << " " << vt::metric_name(m) << " nq=" << nq
                               << " query " << i << ": " << r.message();
            }
            vs_range_result_free(&res);
            std::vector<int64_t> ids(nq * k, vt::kPoisonId);
            std::vector<float> dists(nq * k, vt::poison_float());
            ASSERT_EQ(vs_knn(ctx.get(), ds.get(), q.data(), nq, k, m, nullptr, ids.data(),
                             dists.data(), nullptr),
                      VS_OK)
                << vs_last_error(ctx.get());
            for (size_t i = 0; i < nq; i++)
                for (size_t j = 0; j < k; j++)
                    ASSERT_TRUE(ids[i * k + j] == exact[i][j].id &&
                                std::memcmp(&dists[i * k + j], &exact[i][j].dist, 4) == 0)
                        << GetParam() << " " << vt::metric_name(m) << " nq=" << nq << " query "
                        << i << " rank " << j << ": id " << ids[i * k + j] << ", exact id "
                        << exact[i][j].id;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(All, EngineRange,
                         ::testing::Values(std::string("cpu"), std::string("cuda"),
                                           std::string("cuda_small")),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                             return info.param;
                         });

// The exact distances of cpu_exact_all are the double brute force's within rounding (the
// tests above compare bit for bit against them).
TEST(EngineRangeReference, CpuExactDistancesMatchDoubleBruteForce)
{
    const size_t n = 2001, d = 24, nq = 5;
    vt::Data D = vt::make_data(n, d, 1841, 0.2, true);
    std::vector<float> q = vt::make_queries(D, nq, 1842);
    for (vs_metric m : kRangeMetrics)
    {
        auto exact = cpu_exact_all(D, q, nq, m);
        for (size_t i = 0; i < nq; i++)
        {
            std::vector<int64_t> ids;
            std::vector<float> dists;
            for (const vt::RefHit &h : exact[i])
            {
                ids.push_back(h.id);
                dists.push_back(h.dist);
            }
            auto r = vt::check_knn(D, vt::ref_sorted(D, &q[i * d], m), n, ids.data(),
                                   dists.data(), static_cast<int64_t>(n));
            ASSERT_TRUE(r) << vt::metric_name(m) << " query " << i << ": " << r.message();
        }
    }
}

// copy_parallel (kNN scatters): every item copied once, whatever the split.
TEST(EngineRangeReference, ParallelCopyCoversEveryItem)
{
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20})
    {
        std::vector<int64_t> src(n), dst(n, -1);
        for (size_t i = 0; i < n; i++)
            src[i] = static_cast<int64_t>(i * 2654435761u);
        vs::copy_parallel(n, 8, [&](size_t b, size_t e) {
            ASSERT_LE(b, e);
            ASSERT_LE(e, n);
            for (size_t i = b; i < e; i++)
                dst[i] = dst[i] == -1 ? src[i] : -2; // -2: copied twice
        });
        EXPECT_EQ(src, dst) << "n=" << n;
    }
}

} // namespace
