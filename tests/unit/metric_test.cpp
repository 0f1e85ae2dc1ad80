// Metric-space index objects (vsearch/metric.h) on every backend against the host functions of
// lc.h / sss.h (the CPU twin): a List of Clusters, an SSS pivot table and the brute force, over
// strings (code points above 255, empty strings, indexed strings and queries longer than 64
// characters, a deleted center) and vectors (L2, L1; 40 dimensions, so every lane of a warp works),
// kNN at k = 1 .. beyond the GPU kernel's limit (ties among edit distances decide by id), range from
// radius 0 to everything; the context builds against the host builds (ties, long centers, both
// metrics).  "cpu", "cuda": one context; "cpu2", "cuda2": two contexts behind one
// (objects placed whole on one device).  The CUDA cases skip without the library or a device.
#include "engine_testing.h"
#include "vsearch/metric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
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
        vectors.reserve(vectors.size() + 1);
        chars.reserve(chars.size() + 1);
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

// A list built over `all` and gathered as the extension's pages hold it; a pivot table likewise.
struct Built
{
    Space cs, ms, ps, rs;
    std::vector<double> radii;
    std::vector<uint64_t> boff;
    std::vector<float> table;
    vs_lc lc{};
    vs_sss sss{};

    Built(Space &all, size_t bucket, double alpha)
    {
        size_t n = all.s.n, nc = 0;
        std::vector<size_t> centers(n), members(n), off(n + 1);
        radii.resize(n);
        EXPECT_EQ(vs_lc_build(&all.s, bucket, 7, nullptr, nullptr, centers.data(), &nc,
                              members.data(), off.data(), radii.data(), nullptr),
                  VS_OK);
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
        if (nc > 1)
            cs.ids[1] = -1; // a deleted center: routes, never reported
        radii.resize(nc);
        boff.assign(off.begin(), off.begin() + nc + 1);
        lc = vs_lc{cs.s, radii.data(), boff.data(), ms.s};

        std::vector<size_t> piv(VS_SSS_MAX_PIVOTS);
        size_t np = 0;
        double diameter = 0;
        EXPECT_EQ(vs_sss_select(&all.s, alpha, 64, piv.data(), &np, &diameter, nullptr), VS_OK);
        for (size_t j = 0; j < np; j++)
            gather(ps, piv[j]);
        ps.finish(all.s.kind, all.s.metric, all.s.dim);
        for (size_t i = 0; i < n; i++)
            gather(rs, i);
        rs.finish(all.s.kind, all.s.metric, all.s.dim);
        table.resize(std::max<size_t>(n * np, 1));
        EXPECT_EQ(vs_sss_table(&ps.s, &rs.s, nullptr, nullptr, table.data(), nullptr), VS_OK);
        sss = vs_sss{ps.s, rs.s, table.data()};
    }
};

struct IndexDeleter
{
    vs_context *ctx;
    void operator()(vs_metric_index *m) const { vs_metric_index_destroy(ctx, m); }
};
using IndexPtr = std::unique_ptr<vs_metric_index, IndexDeleter>;

using Pairs = std::vector<std::pair<int64_t, float>>;

// The host functions' answer of query q, in metric.h's units.
Pairs host_knn(int type, const Built &b, const Space &all, const vs_mobject &o, size_t k)
{
    std::vector<int64_t> ids(k);
    std::vector<double> d(k);
    size_t count = 0;
    if (type == 0)
        EXPECT_EQ(vs_lc_knn(&b.lc, &o, k, nullptr, nullptr, ids.data(), d.data(), &count, nullptr),
                  VS_OK);
    else if (type == 1)
        EXPECT_EQ(vs_sss_knn(&b.sss, &o, k, nullptr, nullptr, ids.data(), d.data(), &count,
                             nullptr),
                  VS_OK);
    else
    {
        // brute force: every distance, sorted by (distance, id)
        vs_mhits h{};
        EXPECT_EQ(vs_mspace_range(&all.s, &o, INFINITY, &h, nullptr), VS_OK);
        std::vector<std::pair<double, int64_t>> v;
        for (size_t i = 0; i < h.n; i++)
            v.emplace_back(h.distances[i], h.ids[i]);
        vs_mhits_free(&h);
        std::sort(v.begin(), v.end());
        count = std::min(k, v.size());
        for (size_t i = 0; i < count; i++)
        {
            ids[i] = v[i].second;
            d[i] = v[i].first;
        }
    }
    Pairs p;
    for (size_t i = 0; i < count; i++)
        p.emplace_back(ids[i], vs_metric_base(&all.s, d[i]));
    return p;
}

Pairs host_range(int type, const Built &b, const Space &all, const vs_mobject &o, double r)
{
    vs_mhits h{};
    if (type == 0)
        EXPECT_EQ(vs_lc_range(&b.lc, &o, r, nullptr, nullptr, &h, nullptr), VS_OK);
    else if (type == 1)
        EXPECT_EQ(vs_sss_range(&b.sss, &o, r, nullptr, nullptr, &h, nullptr), VS_OK);
    else
        EXPECT_EQ(vs_mspace_range(&all.s, &o, r, &h, nullptr), VS_OK);
    Pairs p;
    for (size_t i = 0; i < h.n; i++)
        p.emplace_back(h.ids[i], vs_metric_base(&all.s, h.distances[i]));
    vs_mhits_free(&h);
    std::sort(p.begin(), p.end());
    return p;
}

class MetricObject : public testing::TestWithParam<std::string>
{
};

// Every index type over `all`: kNN at each k and range at each radius, query by query.
void compare(vs_context *ctx, Space &all, Space &queries, const std::vector<size_t> &ks,
             const std::vector<double> &radii, size_t bucket, double alpha)
{
    Built b(all, bucket, alpha);
    static const char *names[] = {"list", "pivots", "flat"};
    for (int type = 0; type < 3; type++)
    {
        SCOPED_TRACE(names[type]);
        vs_metric_index *raw = nullptr;
        vs_status st = type == 0   ? vs_metric_index_lc(ctx, &b.lc, &raw)
                       : type == 1 ? vs_metric_index_sss(ctx, &b.sss, &raw)
                                   : vs_metric_index_flat(ctx, &all.s, &raw);
        ASSERT_EQ(st, VS_OK) << vs_last_error(ctx);
        IndexPtr idx(raw, IndexDeleter{ctx});
        EXPECT_EQ(vs_metric_index_size(raw), all.s.n);
        const size_t nq = queries.s.n;
        for (size_t k : ks)
        {
            std::vector<int64_t> ids(nq * k, 7), counts(nq, 7);
            std::vector<float> d(nq * k, 7.0f);
            ASSERT_EQ(vs_metric_index_knn(ctx, raw, &queries.s, k, ids.data(), d.data(),
                                          counts.data()),
                      VS_OK)
                << vs_last_error(ctx);
            for (size_t q = 0; q < nq; q++)
            {
                Pairs want = host_knn(type, b, all, vs_mspace_object(&queries.s, q), k);
                Pairs got;
                for (int64_t i = 0; i < counts[q]; i++)
                    got.emplace_back(ids[q * k + i], d[q * k + i]);
                ASSERT_EQ(got, want) << "k " << k << " query " << q;
                for (size_t i = want.size(); i < k; i++)
                    ASSERT_EQ(ids[q * k + i], -1) << "padding, k " << k << " query " << q;
            }
        }
        for (double r : radii)
        {
            vs_range_result res{};
            ASSERT_EQ(vs_metric_index_range(ctx, raw, &queries.s, r, nullptr, nullptr, &res),
                      VS_OK)
                << vs_last_error(ctx);
            ASSERT_EQ(res.nq, nq);
            for (size_t q = 0; q < nq; q++)
            {
                Pairs got;
                for (int64_t i = res.offsets[q]; i < res.offsets[q + 1]; i++)
                    got.emplace_back(res.ids[i], res.distances[i]);
                ASSERT_TRUE(std::is_sorted(got.begin(), got.end())) << "ids ascending";
                ASSERT_EQ(got, host_range(type, b, all, vs_mspace_object(&queries.s, q), r))
                    << "radius " << r << " query " << q;
            }
            vs_range_result_free(&res);
        }
    }
}

TEST_P(MetricObject, StringsEqualTheHostFunctions)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
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
    for (int i = 0; i < 150; i++)
        queries.add_string(i == 0   ? std::vector<uint32_t>(64, 'a')
                           : i == 1 ? std::vector<uint32_t>(70, 'e') // longer than 64: the host path
                           : i == 2 ? std::vector<uint32_t>()
                                    : word(10),
                           i);
    queries.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    compare(ctx.get(), all, queries, {1, 10, 100, 1100}, {0, 1, 2, 3, 100}, 32, 0.5);
    compare(ctx.get(), all, queries, {5}, {1, 2}, 1, 0.3);
}

// Edit distances above 255, which the CUDA pivot table stores as 255 (bytes): strings of 256 to
// 400 characters among short words, so that they become pivots whose distances to most rows and
// queries saturate; radii below and beyond 255.
TEST_P(MetricObject, StringsBeyondTheTableBytes)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(24);
    static const uint32_t alphabet[] = {'a', 'e', 'o', 's', 0xF1};
    auto word = [&](size_t len) {
        std::vector<uint32_t> w(len);
        for (auto &c : w)
            c = alphabet[rng() % 5];
        return w;
    };
    static const size_t longs[] = {256, 270, 300, 320, 350, 400};
    Space all, queries;
    for (int i = 0; i < 1500; i++)
        all.add_string(i % 250 == 7 ? word(longs[i / 250]) : word(rng() % 10), i);
    all.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    for (int i = 0; i < 60; i++)
        queries.add_string(word(i < 3 ? 64 : rng() % 10), i);
    queries.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    compare(ctx.get(), all, queries, {1, 10}, {0, 2, 254.5, 255, 300, 1000}, 32, 0.02);
}

TEST_P(MetricObject, VectorsEqualTheHostFunctions)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(22);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const size_t dim = 40;
    for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_L1})
    {
        SCOPED_TRACE(vt::metric_name(metric));
        Space all, queries;
        std::vector<float> v(dim);
        for (int i = 0; i < 3000; i++)
        {
            for (auto &x : v)
                x = 2.0f * static_cast<float>(i % 7) + g(rng);
            all.add_vector(v.data(), dim, 5 + i);
        }
        all.finish(VS_MSPACE_VECTORS, metric, dim);
        for (int i = 0; i < 60; i++)
        {
            for (auto &x : v)
                x = 2.0f * static_cast<float>(i % 7) + g(rng);
            if (i == 1)
                v = std::vector<float>(all.vectors.begin() + 40, all.vectors.begin() + 80);
            queries.add_vector(v.data(), dim, i);
        }
        queries.finish(VS_MSPACE_VECTORS, metric, dim);
        double s = metric == VS_METRIC_L2 ? 1.0 : 6.0;
        compare(ctx.get(), all, queries, {1, 10, 64, 1030}, {0.0, 7.0 * s, 8.5 * s, 1e30}, 64,
                0.4);
    }
}

// The context builds against the host functions, output for output: the List of Clusters
// (vs_metric_build_lc / vs_lc_build), the SSS pivots and diameter (vs_metric_select_sss /
// vs_sss_select) and the pivot table (vs_metric_table_sss / vs_sss_table).
void compare_builds(vs_context *ctx, const Space &all, size_t bucket, uint64_t seed, double alpha,
                    size_t max_pivots)
{
    SCOPED_TRACE("bucket " + std::to_string(bucket) + " alpha " + std::to_string(alpha));
    const size_t n = all.s.n;
    std::vector<size_t> hc(n + 1), hm(n + 1), ho(n + 1), cc(n + 1, 7), cm(n + 1, 7), co(n + 1, 7);
    std::vector<double> hr(n + 1), cr(n + 1, -1.0);
    size_t hn = 0, cn = 7;
    ASSERT_EQ(vs_lc_build(&all.s, bucket, seed, nullptr, nullptr, hc.data(), &hn, hm.data(),
                          ho.data(), hr.data(), nullptr),
              VS_OK);
    ASSERT_EQ(vs_metric_build_lc(ctx, &all.s, bucket, seed, cc.data(), &cn, cm.data(), co.data(),
                                 cr.data()),
              VS_OK)
        << vs_last_error(ctx);
    ASSERT_EQ(cn, hn);
    hc.resize(hn), cc.resize(hn), hr.resize(hn), cr.resize(hn);
    hm.resize(n - hn), cm.resize(n - hn), ho.resize(hn + 1), co.resize(hn + 1);
    EXPECT_EQ(cc, hc) << "centers";
    EXPECT_EQ(cm, hm) << "members";
    EXPECT_EQ(co, ho) << "bucket offsets";
    EXPECT_EQ(cr, hr) << "radii";

    std::vector<size_t> hp(max_pivots), cp(max_pivots, 7);
    size_t hnp = 0, cnp = 7;
    double hd = 0, cd = -1;
    ASSERT_EQ(vs_sss_select(&all.s, alpha, max_pivots, hp.data(), &hnp, &hd, nullptr), VS_OK);
    ASSERT_EQ(vs_metric_select_sss(ctx, &all.s, alpha, max_pivots, cp.data(), &cnp, &cd), VS_OK)
        << vs_last_error(ctx);
    ASSERT_EQ(cnp, hnp);
    hp.resize(hnp), cp.resize(hnp);
    EXPECT_EQ(cp, hp) << "pivots";
    EXPECT_EQ(cd, hd) << "diameter";

    Space ps;
    for (size_t p : hp)
    {
        vs_mobject o = vs_mspace_object(&all.s, p);
        if (all.s.kind == VS_MSPACE_STRINGS)
            ps.add_string(std::vector<uint32_t>(o.chars, o.chars + o.len), 0);
        else
            ps.add_vector(o.vector, all.s.dim, 0);
    }
    ps.finish(all.s.kind, all.s.metric, all.s.dim);
    std::vector<float> ht(std::max<size_t>(n * hnp, 1)), ct(ht.size(), -1.0f);
    ASSERT_EQ(vs_sss_table(&ps.s, &all.s, nullptr, nullptr, ht.data(), nullptr), VS_OK);
    ASSERT_EQ(vs_metric_table_sss(ctx, &all.s, hp.data(), hnp, ct.data()), VS_OK)
        << vs_last_error(ctx);
    if (n * hnp == 0)
        ct = ht; // nothing written
    EXPECT_EQ(ct, ht) << "table";
}

// Strings with many equal distances (a small alphabet, duplicates, empty strings), code points
// above 255 and centers longer than 64 characters (measured on the host by the CUDA backend).
TEST_P(MetricObject, StringBuildsEqualTheHostBuilds)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(25);
    static const uint32_t alphabet[] = {'a', 'e', 'o', 0xF1, 0x4E2D};
    auto word = [&](size_t maxlen) {
        std::vector<uint32_t> w(rng() % maxlen);
        for (auto &c : w)
            c = alphabet[rng() % 5];
        return w;
    };
    Space all;
    for (int i = 0; i < 2000; i++)
        all.add_string(i % 400 == 3 ? word(120) : i % 97 == 0 ? std::vector<uint32_t>() : word(8),
                       i);
    all.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    compare_builds(ctx.get(), all, 32, 7, 0.5, 64);
    compare_builds(ctx.get(), all, 1, 3, 0.3, 5);
    compare_builds(ctx.get(), all, 2500, 1, 0.1, VS_SSS_MAX_PIVOTS);
    // alpha M a whole number: objects at exactly alpha M from every pivot become pivots too
    std::vector<size_t> piv(64);
    size_t np = 0;
    double diameter = 0;
    ASSERT_EQ(vs_sss_select(&all.s, 0.5, 64, piv.data(), &np, &diameter, nullptr), VS_OK);
    const double alpha = 3.0 / diameter;
    ASSERT_EQ(alpha * diameter, 3.0);
    compare_builds(ctx.get(), all, 32, 7, alpha, 64);
}

// Vectors under L2 and L1 with whole-number coordinates (equal distances) and duplicate rows.
TEST_P(MetricObject, VectorBuildsEqualTheHostBuilds)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(26);
    for (size_t dim : {size_t{3}, size_t{40}})
        for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_L1})
        {
            SCOPED_TRACE(vt::metric_name(metric) + std::string(" dim ") + std::to_string(dim));
            Space all;
            std::vector<float> v(dim);
            for (int i = 0; i < 1500; i++)
            {
                if (i % 5 != 4) // every fifth row repeats the one before
                    for (auto &x : v)
                        x = static_cast<float>(rng() % 4) + (i % 3 == 0 ? 0.25f : 0.0f);
                all.add_vector(v.data(), dim, i);
            }
            all.finish(VS_MSPACE_VECTORS, metric, dim);
            compare_builds(ctx.get(), all, 64, 11, 0.4, 64);
            compare_builds(ctx.get(), all, 3, 2, 0.2, 7);
        }
    // 9 000 rows: the CPU backend's first calls spread over its threads (runs of 4 096 rows each)
    Space many;
    for (int i = 0; i < 9000; i++)
    {
        const float v[2] = {static_cast<float>(rng() % 50), static_cast<float>(rng() % 50)};
        many.add_vector(v, 2, i);
    }
    many.finish(VS_MSPACE_VECTORS, VS_METRIC_L1, 2);
    compare_builds(ctx.get(), many, 64, 5, 0.3, 64);
}

TEST_P(MetricObject, BuildArguments)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    Space empty;
    empty.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    size_t centers[1], members[1], offsets[1] = {7}, pivots[4], nc = 7, np = 7;
    double radii[1], diameter = -1;
    EXPECT_EQ(vs_metric_build_lc(ctx.get(), &empty.s, 4, 1, centers, &nc, members, offsets, radii),
              VS_OK);
    EXPECT_EQ(nc, 0u);
    EXPECT_EQ(offsets[0], 0u);
    EXPECT_EQ(vs_metric_select_sss(ctx.get(), &empty.s, 0.5, 4, pivots, &np, &diameter), VS_OK);
    EXPECT_EQ(np, 0u);
    EXPECT_EQ(vs_metric_build_lc(ctx.get(), &empty.s, 0, 1, centers, &nc, members, offsets, radii),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_metric_build_lc(ctx.get(), nullptr, 4, 1, centers, &nc, members, offsets, radii),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_metric_select_sss(ctx.get(), &empty.s, 0.0, 4, pivots, &np, nullptr),
              VS_INVALID_ARGUMENT);
    Space one;
    one.add_string({'a'}, 0);
    one.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    const size_t beyond = 1;
    float table[1];
    EXPECT_EQ(vs_metric_table_sss(ctx.get(), &one.s, &beyond, 1, table), VS_INVALID_ARGUMENT);
    Space cosine;
    const float x[2] = {1, 0};
    cosine.add_vector(x, 2, 0);
    cosine.finish(VS_MSPACE_VECTORS, VS_METRIC_COSINE, 2);
    EXPECT_EQ(vs_metric_select_sss(ctx.get(), &cosine.s, 0.5, 4, pivots, &np, nullptr),
              VS_INVALID_ARGUMENT);
}

// Every object type, mode (kNN, range count and write) and data kind on a small set: the case
// gpu/bench/run-on-device runs under compute-sanitizer (memcheck, racecheck).
TEST_P(MetricObject, CompactCase)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(23);
    static const uint32_t alphabet[] = {'a', 'e', 's', 0xF1, 0x4E2D};
    auto word = [&](size_t maxlen) {
        std::vector<uint32_t> w(rng() % maxlen);
        for (auto &c : w)
            c = alphabet[rng() % 5];
        return w;
    };
    Space words, wq;
    for (int i = 0; i < 400; i++)
        words.add_string(word(i % 100 == 0 ? 80 : 8), i);
    words.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    for (int i = 0; i < 30; i++)
        wq.add_string(word(8), i);
    wq.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    compare(ctx.get(), words, wq, {3, 40}, {1, 2}, 8, 0.5);

    std::normal_distribution<float> g(0.0f, 1.0f);
    Space vs, vq;
    std::vector<float> v(40);
    for (int i = 0; i < 300; i++)
    {
        for (auto &x : v)
            x = static_cast<float>(i % 5) + g(rng);
        vs.add_vector(v.data(), 40, i);
    }
    vs.finish(VS_MSPACE_VECTORS, VS_METRIC_L2, 40);
    for (int i = 0; i < 20; i++)
    {
        for (auto &x : v)
            x = static_cast<float>(i % 5) + g(rng);
        vq.add_vector(v.data(), 40, i);
    }
    vq.finish(VS_MSPACE_VECTORS, VS_METRIC_L2, 40);
    compare(ctx.get(), vs, vq, {5}, {8.5}, 16, 0.4);
}

TEST_P(MetricObject, EmptyAndArguments)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    vs_context *c = ctx.get();
    Space none, q, vq;
    none.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    q.add_string({'a', 'b'}, 0);
    q.finish(VS_MSPACE_STRINGS, VS_METRIC_L2, 0);
    float x[3] = {1, 2, 3};
    vq.add_vector(x, 3, 0);
    vq.finish(VS_MSPACE_VECTORS, VS_METRIC_L2, 3);

    // an empty list and an empty flat set answer nothing
    vs_lc lc{none.s, nullptr, nullptr, none.s};
    vs_metric_index *raw = nullptr;
    ASSERT_EQ(vs_metric_index_lc(c, &lc, &raw), VS_OK) << vs_last_error(c);
    IndexPtr idx(raw, IndexDeleter{c});
    int64_t ids[2] = {7, 7}, count = 7;
    float d[2];
    ASSERT_EQ(vs_metric_index_knn(c, raw, &q.s, 2, ids, d, &count), VS_OK);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(ids[0], -1);
    vs_range_result res{};
    ASSERT_EQ(vs_metric_index_range(c, raw, &q.s, 5.0, nullptr, nullptr, &res), VS_OK);
    EXPECT_EQ(res.total, 0u);
    vs_range_result_free(&res);

    // wrong query kind, k 0, NaN radius, an inconsistent list
    EXPECT_EQ(vs_metric_index_knn(c, raw, &vq.s, 1, ids, d, &count), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_metric_index_knn(c, raw, &q.s, 0, ids, d, &count), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_metric_index_range(c, raw, &q.s, NAN, nullptr, nullptr, &res),
              VS_INVALID_ARGUMENT);
    double r = 1.0;
    uint64_t boff[2] = {0, 5};
    vs_lc bad{q.s, &r, boff, q.s}; // offsets cover 5 members, there is 1
    vs_metric_index *b = nullptr;
    EXPECT_EQ(vs_metric_index_lc(c, &bad, &b), VS_INVALID_ARGUMENT);
    vs_lc mixed{q.s, &r, boff, vq.s};
    EXPECT_EQ(vs_metric_index_lc(c, &mixed, &b), VS_INVALID_ARGUMENT);
    Space cosine;
    cosine.add_vector(x, 3, 0);
    cosine.finish(VS_MSPACE_VECTORS, VS_METRIC_COSINE, 3);
    EXPECT_EQ(vs_metric_index_flat(c, &cosine.s, &b), VS_INVALID_ARGUMENT);
}

INSTANTIATE_TEST_SUITE_P(All, MetricObject, testing::Values("cpu", "cpu2", "cuda", "cuda2"),
                         [](const testing::TestParamInfo<std::string> &i) { return i.param; });

} // namespace
