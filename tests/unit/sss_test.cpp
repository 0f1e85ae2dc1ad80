// SSS pivot tables (vsearch/sss.h) against brute force written here: seeded vectors (L2, L1) and
// strings (with code points above 255 and empty strings); range answers equal the brute-force set
// with the same distances, kNN the k smallest by (distance, id), at several alphas (few and many
// pivots); pivot selection keeps pivots alpha M apart.
#include "vsearch/sss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
};

Space vectors(std::mt19937_64 &rng, size_t n, size_t dim, vs_metric metric)
{
    Space d;
    std::normal_distribution<float> g(0.0f, 1.0f);
    d.vectors.resize(n * dim);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            d.vectors[i * dim + j] = 3.0f * static_cast<float>(i % 5) + g(rng);
    d.s.kind = VS_MSPACE_VECTORS;
    d.s.metric = metric;
    d.s.dim = dim;
    d.s.vectors = d.vectors.data();
    d.s.n = n;
    return d;
}

std::vector<uint32_t> word(std::mt19937_64 &rng)
{
    static const uint32_t alphabet[] = {'a', 'e', 'o', 's', 'c', 'r', 0xF1, 0x4E2D};
    std::vector<uint32_t> w(rng() % 9);
    for (auto &c : w)
        c = alphabet[rng() % 8];
    return w;
}

Space strings(std::mt19937_64 &rng, size_t n)
{
    Space d;
    for (size_t i = 0; i < n; i++)
    {
        std::vector<uint32_t> w = word(rng);
        d.chars.insert(d.chars.end(), w.begin(), w.end());
        d.offsets.push_back(d.chars.size());
    }
    d.s.kind = VS_MSPACE_STRINGS;
    d.s.chars = d.chars.data();
    d.s.offsets = d.offsets.data();
    d.s.n = n;
    return d;
}

void with_ids(Space &d)
{
    d.ids.resize(d.s.n);
    for (size_t i = 0; i < d.s.n; i++)
        d.ids[i] = static_cast<int64_t>(5000 - 3 * i);
    d.s.ids = d.ids.data();
}

Space gather(const Space &src, const std::vector<size_t> &pos)
{
    Space out;
    out.s = src.s;
    for (size_t p : pos)
    {
        vs_mobject o = vs_mspace_object(&src.s, p);
        if (src.s.kind == VS_MSPACE_VECTORS)
            out.vectors.insert(out.vectors.end(), o.vector, o.vector + o.len);
        else
        {
            out.chars.insert(out.chars.end(), o.chars, o.chars + o.len);
            out.offsets.push_back(out.chars.size());
        }
    }
    out.s.n = pos.size();
    out.s.vectors = out.vectors.data();
    out.s.chars = out.chars.data();
    out.s.offsets = out.offsets.data();
    out.s.ids = nullptr;
    return out;
}

void check(Space &d, double alpha, const std::vector<vs_mobject> &queries,
           const std::vector<double> &radii)
{
    with_ids(d);
    std::vector<size_t> piv(VS_SSS_MAX_PIVOTS);
    size_t np = 0;
    double m = 0;
    ASSERT_EQ(vs_sss_select(&d.s, alpha, piv.size(), piv.data(), &np, &m, nullptr), VS_OK);
    ASSERT_GE(np, 1u);
    piv.resize(np);
    for (size_t a = 0; a < np; a++)
        for (size_t b = a + 1; b < np; b++)
        {
            vs_mobject x = vs_mspace_object(&d.s, piv[a]), y = vs_mspace_object(&d.s, piv[b]);
            ASSERT_GE(vs_mspace_distance(&d.s, &x, &y), alpha * m);
        }
    Space pv = gather(d, piv);
    std::vector<float> table(d.s.n * np);
    ASSERT_EQ(vs_sss_table(&pv.s, &d.s, nullptr, nullptr, table.data(), nullptr), VS_OK);
    vs_sss s{pv.s, d.s, table.data()};
    for (const vs_mobject &q : queries)
    {
        std::vector<std::pair<double, int64_t>> all;
        for (size_t i = 0; i < d.s.n; i++)
        {
            vs_mobject o = vs_mspace_object(&d.s, i);
            all.emplace_back(vs_mspace_distance(&d.s, &q, &o), d.ids[i]);
        }
        std::sort(all.begin(), all.end());
        for (double r : radii)
        {
            vs_mhits h{};
            ASSERT_EQ(vs_sss_range(&s, &q, r, nullptr, nullptr, &h, nullptr), VS_OK);
            std::vector<std::pair<double, int64_t>> got;
            for (size_t i = 0; i < h.n; i++)
                got.emplace_back(h.distances[i], h.ids[i]);
            vs_mhits_free(&h);
            std::sort(got.begin(), got.end());
            std::vector<std::pair<double, int64_t>> want;
            for (auto &e : all)
                if (e.first <= r)
                    want.push_back(e);
            ASSERT_EQ(got, want) << "alpha " << alpha << " radius " << r;
        }
        for (size_t k : {size_t(1), size_t(7), size_t(50), all.size() + 2})
        {
            std::vector<int64_t> ids(k);
            std::vector<double> dist(k);
            size_t count = 0;
            ASSERT_EQ(vs_sss_knn(&s, &q, k, nullptr, nullptr, ids.data(), dist.data(), &count,
                                 nullptr),
                      VS_OK);
            ASSERT_EQ(count, std::min(k, all.size()));
            for (size_t i = 0; i < count; i++)
            {
                ASSERT_EQ(ids[i], all[i].second) << "alpha " << alpha << " k " << k;
                ASSERT_EQ(dist[i], all[i].first);
            }
        }
    }
}

TEST(SparseSpatialSelection, Vectors)
{
    std::mt19937_64 rng(3);
    for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_L1})
        for (double alpha : {0.2, 0.4, 0.7})
        {
            Space d = vectors(rng, 500, 5, metric);
            Space qd = vectors(rng, 6, 5, metric);
            std::vector<vs_mobject> qs;
            for (size_t i = 0; i < 6; i++)
                qs.push_back(vs_mspace_object(&qd.s, i));
            qs.push_back(vs_mspace_object(&d.s, 9));
            double sc = metric == VS_METRIC_L2 ? 1.0 : 2.2;
            check(d, alpha, qs, {0.0, 1.0 * sc, 3.0 * sc, 1e30});
        }
}

TEST(SparseSpatialSelection, Strings)
{
    std::mt19937_64 rng(5);
    for (double alpha : {0.3, 0.5, 0.9})
    {
        Space d = strings(rng, 600);
        std::vector<std::vector<uint32_t>> ws;
        for (int i = 0; i < 8; i++)
            ws.push_back(word(rng));
        ws.push_back({});
        ws.push_back(std::vector<uint32_t>(70, 'e'));
        std::vector<vs_mobject> qs;
        for (auto &w : ws)
            qs.push_back(vs_mobject{nullptr, w.data(), w.size()});
        check(d, alpha, qs, {0, 1, 2, 3, 1.5});
    }
}

TEST(SparseSpatialSelection, Invalid)
{
    Space d;
    d.s.kind = VS_MSPACE_STRINGS;
    d.s.offsets = d.offsets.data();
    size_t p = 0, np = 9;
    EXPECT_EQ(vs_sss_select(&d.s, 0.4, 1, &p, &np, nullptr, nullptr), VS_OK);
    EXPECT_EQ(np, 0u);
    EXPECT_EQ(vs_sss_select(&d.s, 0.0, 1, &p, &np, nullptr, nullptr), VS_INVALID_ARGUMENT);
}

} // namespace
