// The List of Clusters range search on a CUDA device (vsearch/lc_cuda.h) against its CPU twin
// vs_lc_range, query by query: strings (code points above 255, empty strings, members longer than
// 64 characters) and vectors (L2, L1; 40 dimensions, so every lane of a warp works); radii from
// nothing to everything.  Skips without the CUDA library or a device; fails when the library
// loads but does not export the entry point.
#include "engine_testing.h"
#include "vsearch/lc.h"
#include "vsearch/lc_cuda.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

struct Space
{
    vs_mspace s{};
    std::vector<float> vectors;
    std::vector<uint32_t> chars;
    std::vector<uint64_t> offsets{0};
    std::vector<int64_t> ids;
    void add_string(const std::vector<uint32_t> &w, int64_t id)
    {
        chars.insert(chars.end(), w.begin(), w.end());
        offsets.push_back(chars.size());
        ids.push_back(id);
    }
    void add_vector(const float *v, size_t dim, int64_t id)
    {
        vectors.insert(vectors.end(), v, v + dim);
        ids.push_back(id);
    }
    void finish(vs_mspace_kind kind, vs_metric metric, size_t dim)
    {
        s.kind = kind;
        s.metric = metric;
        s.dim = dim;
        s.n = ids.size();
        s.vectors = vectors.data();
        s.chars = chars.data();
        s.offsets = offsets.data();
        s.ids = ids.data();
    }
};

vs_cuda_lc_range_fn entry_point()
{
#ifndef VSEARCH_TEST_CUDA_LIBRARY
    if (!std::getenv("VSEARCH_CUDA_LIBRARY"))
        return nullptr;
#endif
    void *lib = dlopen(vt::cuda_library(), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return nullptr;
    void *f = dlsym(lib, VS_CUDA_LC_RANGE_SYMBOL);
    EXPECT_NE(f, nullptr) << vt::cuda_library() << " does not export " << VS_CUDA_LC_RANGE_SYMBOL;
    return reinterpret_cast<vs_cuda_lc_range_fn>(f);
}

// Builds the list over all, gathers it as the extension does, and compares GPU and CPU answers.
void compare(vs_cuda_lc_range_fn gpu, Space &all, Space &queries, const std::vector<double> &radii,
             size_t bucket)
{
    size_t n = all.s.n, nc = 0;
    std::vector<size_t> centers(n), members(n), off(n + 1);
    std::vector<double> rad(n);
    ASSERT_EQ(vs_lc_build(&all.s, bucket, 7, nullptr, nullptr, centers.data(), &nc, members.data(),
                          off.data(), rad.data(), nullptr),
              VS_OK);
    Space cs, ms;
    auto gather = [&](Space &out, size_t p) {
        vs_mobject o = vs_mspace_object(&all.s, p);
        if (all.s.kind == VS_MSPACE_STRINGS)
            out.add_string(std::vector<uint32_t>(o.chars, o.chars + o.len), all.ids[p]);
        else
            out.add_vector(o.vector, all.s.dim, all.ids[p]);
    };
    for (size_t c = 0; c < nc; c++)
        gather(cs, centers[c]);
    for (size_t m = 0; m < n - nc; m++)
        gather(ms, members[m]);
    cs.finish(all.s.kind, all.s.metric, all.s.dim);
    ms.finish(all.s.kind, all.s.metric, all.s.dim);
    cs.ids[0] = -1; // a deleted center: routes, never reported
    std::vector<uint64_t> boff(off.begin(), off.begin() + nc + 1);
    vs_lc lc{cs.s, rad.data(), boff.data(), ms.s};
    for (double r : radii)
    {
        std::vector<uint64_t> qoff(queries.s.n + 1);
        int64_t *ids = nullptr;
        double *dist = nullptr;
        char err[256] = {0};
        int st = gpu(&lc, &queries.s, r, qoff.data(), &ids, &dist, err, sizeof err);
        if (st == VS_UNSUPPORTED)
            GTEST_SKIP() << err;
        ASSERT_EQ(st, VS_OK) << err;
        for (size_t q = 0; q < queries.s.n; q++)
        {
            std::vector<std::pair<int64_t, double>> got, want;
            for (uint64_t i = qoff[q]; i < qoff[q + 1]; i++)
                got.emplace_back(ids[i], dist[i]);
            vs_mobject o = vs_mspace_object(&queries.s, q);
            vs_mhits h{};
            ASSERT_EQ(vs_lc_range(&lc, &o, r, nullptr, nullptr, &h, nullptr), VS_OK);
            for (size_t i = 0; i < h.n; i++)
                want.emplace_back(h.ids[i], h.distances[i]);
            vs_mhits_free(&h);
            std::sort(got.begin(), got.end());
            std::sort(want.begin(), want.end());
            ASSERT_EQ(got, want) << "radius " << r << " query " << q;
        }
        std::free(ids);
        std::free(dist);
    }
}

TEST(ListOfClustersCuda, StringsEqualTheCpuPath)
{
    vs_cuda_lc_range_fn gpu = entry_point();
    if (gpu == nullptr)
        GTEST_SKIP() << "no CUDA library in this build";
    std::mt19937_64 rng(21);
    static const uint32_t alphabet[] = {'a', 'e', 'o', 's', 'c', 'r', 0xF1, 0x4E2D, 0x1F600};
    auto word = [&](size_t maxlen) {
        std::vector<uint32_t> w(rng() % maxlen);
        for (auto &c : w)
            c = alphabet[rng() % 9];
        return w;
    };
    Space all, queries;
    for (int i = 0; i < 3000; i++)
        all.add_string(i % 500 == 0 ? word(90) : word(10), 10 + 3 * i);
    all.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    for (int i = 0; i < 200; i++)
        queries.add_string(i == 0 ? std::vector<uint32_t>(64, 'a') : word(10), i);
    queries.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    compare(gpu, all, queries, {0, 1, 2, 3, 100}, 32);
    compare(gpu, all, queries, {1, 2}, 1);
}

TEST(ListOfClustersCuda, VectorsEqualTheCpuPath)
{
    vs_cuda_lc_range_fn gpu = entry_point();
    if (gpu == nullptr)
        GTEST_SKIP() << "no CUDA library in this build";
    std::mt19937_64 rng(22);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const size_t dim = 40;
    for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_L1})
    {
        Space all, queries;
        std::vector<float> v(dim);
        for (int i = 0; i < 4000; i++)
        {
            for (auto &x : v)
                x = 2.0f * static_cast<float>(i % 7) + g(rng);
            all.add_vector(v.data(), dim, 5 + i);
        }
        all.finish(VS_MSPACE_VECTORS, metric, dim);
        for (int i = 0; i < 100; i++)
        {
            for (auto &x : v)
                x = 2.0f * static_cast<float>(i % 7) + g(rng);
            queries.add_vector(v.data(), dim, i);
        }
        queries.finish(VS_MSPACE_VECTORS, metric, dim);
        double s = metric == VS_METRIC_L2 ? 1.0 : 6.0;
        compare(gpu, all, queries, {0.0, 7.0 * s, 8.5 * s, 10.0 * s, 1e30}, 64);
    }
}

TEST(ListOfClustersCuda, LongStringQueriesAreRefused)
{
    vs_cuda_lc_range_fn gpu = entry_point();
    if (gpu == nullptr)
        GTEST_SKIP() << "no CUDA library in this build";
    Space all, queries;
    all.add_string({'a'}, 1);
    all.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    queries.add_string(std::vector<uint32_t>(65, 'a'), 0);
    queries.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    size_t c = 0, nc = 0, m = 0, off[2];
    double r = 0;
    ASSERT_EQ(vs_lc_build(&all.s, 4, 1, nullptr, nullptr, &c, &nc, &m, off, &r, nullptr), VS_OK);
    uint64_t boff[2] = {0, 0};
    vs_lc lc{all.s, &r, boff, all.s};
    lc.members.n = 0;
    uint64_t qoff[2];
    int64_t *ids = nullptr;
    double *dist = nullptr;
    char err[256] = {0};
    EXPECT_EQ(gpu(&lc, &queries.s, 1.0, qoff, &ids, &dist, err, sizeof err), VS_UNSUPPORTED);
}

} // namespace
