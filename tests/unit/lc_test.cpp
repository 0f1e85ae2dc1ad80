// List of Clusters (vsearch/lc.h) against brute force written here: on seeded vectors (L2, L1,
// clustered and uniform) and strings (random words and their edits, code points above 255), range
// answers equal the brute-force set with the same distances, kNN answers equal the k smallest by
// (distance, id); the build's structure holds (every object once, fixed bucket sizes, covering
// radii); deleted centers (id -1) route but are never reported.
#include "vsearch/lc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

struct Data
{
    vs_mspace space{};
    std::vector<float> vectors;
    std::vector<uint32_t> chars;
    std::vector<uint64_t> offsets;
    std::vector<int64_t> ids;
};

void finish(Data &d, size_t n)
{
    d.space.n = n;
    d.ids.resize(n);
    for (size_t i = 0; i < n; i++)
        d.ids[i] = static_cast<int64_t>(1000 + 7 * i); // ids are not positions
    d.space.ids = d.ids.data();
}

Data vectors(std::mt19937_64 &rng, size_t n, size_t dim, vs_metric metric, bool clustered)
{
    Data d;
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> centers(8 * dim);
    for (auto &x : centers)
        x = 4.0f * g(rng);
    d.vectors.resize(n * dim);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            d.vectors[i * dim + j] = (clustered ? centers[(i % 8) * dim + j] : 0.0f) + g(rng);
    d.space.kind = VS_MSPACE_VECTORS;
    d.space.metric = metric;
    d.space.dim = dim;
    d.space.vectors = d.vectors.data();
    finish(d, n);
    return d;
}

std::vector<uint32_t> word(std::mt19937_64 &rng)
{
    static const uint32_t alphabet[] = {'a', 'e', 'o', 's', 'c', 'r', 't', 0xF1, 0x4E2D};
    std::vector<uint32_t> w(1 + rng() % 9);
    for (auto &c : w)
        c = alphabet[rng() % 9];
    return w;
}

Data strings(std::mt19937_64 &rng, size_t n)
{
    Data d;
    d.offsets.push_back(0);
    std::vector<uint32_t> base;
    for (size_t i = 0; i < n; i++)
    {
        std::vector<uint32_t> w = (i % 3 == 0 || base.empty()) ? word(rng) : base;
        if (i % 3 != 0 && !w.empty())
            w[rng() % w.size()] = 'a' + rng() % 4; // a neighbour of the last fresh word
        if (i % 17 == 0)
            w.clear(); // a few empty strings
        if (i % 3 == 0)
            base = w;
        d.chars.insert(d.chars.end(), w.begin(), w.end());
        d.offsets.push_back(d.chars.size());
    }
    // one long string past the bit-parallel limit
    for (int i = 0; i < 80; i++)
        d.chars.push_back('a' + i % 3);
    d.offsets.push_back(d.chars.size());
    d.space.kind = VS_MSPACE_STRINGS;
    d.space.chars = d.chars.data();
    d.space.offsets = d.offsets.data();
    finish(d, n + 1);
    return d;
}

struct Built
{
    std::vector<size_t> centers, members, offsets;
    std::vector<uint64_t> offsets64;
    std::vector<double> radii;
    size_t ncenters = 0;
    // the gathered arrays the search reads, as the extension lays them out from its pages
    Data cdata, mdata;
    vs_lc lc{};
};

void gather(const Data &src, const std::vector<size_t> &pos, Data &out)
{
    out.space = src.space;
    out.vectors.clear();
    out.chars.clear();
    out.offsets.assign(1, 0);
    out.ids.clear();
    for (size_t p : pos)
    {
        vs_mobject o = vs_mspace_object(&src.space, p);
        if (src.space.kind == VS_MSPACE_VECTORS)
            out.vectors.insert(out.vectors.end(), o.vector, o.vector + o.len);
        else
        {
            out.chars.insert(out.chars.end(), o.chars, o.chars + o.len);
            out.offsets.push_back(out.chars.size());
        }
        out.ids.push_back(src.ids[p]);
    }
    out.space.n = pos.size();
    out.space.vectors = out.vectors.data();
    out.space.chars = out.chars.data();
    out.space.offsets = out.offsets.data();
    out.space.ids = out.ids.data();
}

void build(const Data &d, size_t bucket, Built &b)
{
    size_t n = d.space.n;
    b.centers.resize(n);
    b.members.resize(n);
    b.offsets.resize(n + 1);
    b.radii.resize(n);
    uint64_t evals = 0;
    ASSERT_EQ(vs_lc_build(&d.space, bucket, 42, nullptr, nullptr, b.centers.data(), &b.ncenters,
                          b.members.data(), b.offsets.data(), b.radii.data(), &evals),
              VS_OK);
    b.centers.resize(b.ncenters);
    b.members.resize(n - b.ncenters);
    // structure: every object exactly once, full buckets except the last, radii cover
    std::vector<int> seen(n, 0);
    for (size_t c : b.centers)
        seen[c]++;
    for (size_t m : b.members)
        seen[m]++;
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(seen[i], 1);
    for (size_t c = 0; c < b.ncenters; c++)
    {
        size_t size = b.offsets[c + 1] - b.offsets[c];
        if (c + 1 < b.ncenters)
            ASSERT_EQ(size, bucket);
        vs_mobject co = vs_mspace_object(&d.space, b.centers[c]);
        for (size_t m = b.offsets[c]; m < b.offsets[c + 1]; m++)
        {
            vs_mobject mo = vs_mspace_object(&d.space, b.members[m]);
            ASSERT_LE(vs_mspace_distance(&d.space, &co, &mo), b.radii[c]);
        }
    }
    gather(d, b.centers, b.cdata);
    gather(d, b.members, b.mdata);
    b.offsets64.assign(b.offsets.begin(), b.offsets.begin() + b.ncenters + 1);
    b.lc.centers = b.cdata.space;
    b.lc.radii = b.radii.data();
    b.lc.bucket_offsets = b.offsets64.data();
    b.lc.members = b.mdata.space;
}

std::vector<std::pair<int64_t, double>> brute_range(const Data &d, const vs_mobject &q, double r,
                                                    const std::vector<bool> &dead)
{
    std::vector<std::pair<int64_t, double>> out;
    for (size_t i = 0; i < d.space.n; i++)
    {
        if (dead[i])
            continue;
        vs_mobject o = vs_mspace_object(&d.space, i);
        double dist = vs_mspace_distance(&d.space, &q, &o);
        if (dist <= r)
            out.emplace_back(d.ids[i], dist);
    }
    std::sort(out.begin(), out.end());
    return out;
}

void check_queries(const Data &d, Built &b, const std::vector<vs_mobject> &queries,
                   const std::vector<double> &radii, const std::vector<bool> &dead)
{
    uint64_t lc_evals = 0;
    for (const vs_mobject &q : queries)
    {
        for (double r : radii)
        {
            vs_mhits hits{};
            ASSERT_EQ(vs_lc_range(&b.lc, &q, r, nullptr, nullptr, &hits, &lc_evals), VS_OK);
            std::vector<std::pair<int64_t, double>> got;
            for (size_t i = 0; i < hits.n; i++)
                got.emplace_back(hits.ids[i], hits.distances[i]);
            vs_mhits_free(&hits);
            std::sort(got.begin(), got.end());
            ASSERT_EQ(got, brute_range(d, q, r, dead)) << "radius " << r;
        }
        // kNN: the k smallest by (distance, id)
        std::vector<std::pair<double, int64_t>> all;
        for (size_t i = 0; i < d.space.n; i++)
            if (!dead[i])
            {
                vs_mobject o = vs_mspace_object(&d.space, i);
                all.emplace_back(vs_mspace_distance(&d.space, &q, &o), d.ids[i]);
            }
        std::sort(all.begin(), all.end());
        for (size_t k : {size_t(1), size_t(5), size_t(40), all.size() + 3})
        {
            std::vector<int64_t> ids(k);
            std::vector<double> dist(k);
            size_t count = 0;
            ASSERT_EQ(vs_lc_knn(&b.lc, &q, k, nullptr, nullptr, ids.data(), dist.data(), &count,
                                &lc_evals),
                      VS_OK);
            ASSERT_EQ(count, std::min(k, all.size()));
            for (size_t i = 0; i < count; i++)
            {
                ASSERT_EQ(ids[i], all[i].second) << "k " << k << " rank " << i;
                ASSERT_EQ(dist[i], all[i].first);
            }
        }
    }
}

TEST(ListOfClusters, VectorsL2AndL1)
{
    std::mt19937_64 rng(7);
    for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_L1})
        for (bool clustered : {true, false})
            for (size_t bucket : {size_t(1), size_t(8), size_t(64)})
            {
                Data d = vectors(rng, 600, 6, metric, clustered);
                Built b;
                build(d, bucket, b);
                std::vector<vs_mobject> queries;
                Data qd = vectors(rng, 8, 6, metric, clustered);
                for (size_t i = 0; i < 8; i++)
                    queries.push_back(vs_mspace_object(&qd.space, i));
                queries.push_back(vs_mspace_object(&d.space, 3)); // an indexed object
                double scale = metric == VS_METRIC_L2 ? 1.0 : 2.5;
                check_queries(d, b, queries, {0.0, 0.5 * scale, 1.5 * scale, 4.0 * scale, 1e30},
                              std::vector<bool>(d.space.n, false));
            }
}

TEST(ListOfClusters, Strings)
{
    std::mt19937_64 rng(11);
    for (size_t bucket : {size_t(1), size_t(4), size_t(32)})
    {
        Data d = strings(rng, 700);
        Built b;
        build(d, bucket, b);
        std::vector<std::vector<uint32_t>> qs;
        for (int i = 0; i < 10; i++)
            qs.push_back(word(rng));
        qs.push_back({});
        qs.push_back(std::vector<uint32_t>(70, 'a')); // a long query
        std::vector<vs_mobject> queries;
        for (auto &w : qs)
            queries.push_back(vs_mobject{nullptr, w.data(), w.size()});
        check_queries(d, b, queries, {0, 1, 2, 3, 2.5, 100}, std::vector<bool>(d.space.n, false));
    }
}

TEST(ListOfClusters, DeletedCentersRouteButAreNotReported)
{
    std::mt19937_64 rng(13);
    Data d = strings(rng, 300);
    Built b;
    build(d, 8, b);
    std::vector<bool> dead(d.space.n, false);
    for (size_t c = 0; c < b.ncenters; c += 2)
    {
        b.cdata.ids[c] = -1;
        dead[b.centers[c]] = true;
    }
    std::vector<std::vector<uint32_t>> qs;
    for (int i = 0; i < 8; i++)
        qs.push_back(word(rng));
    std::vector<vs_mobject> queries;
    for (auto &w : qs)
        queries.push_back(vs_mobject{nullptr, w.data(), w.size()});
    check_queries(d, b, queries, {0, 1, 2}, dead);
}

TEST(ListOfClusters, PrunesOnClusteredData)
{
    // the point of the index: far fewer distances than brute force at a small radius
    std::mt19937_64 rng(17);
    Data d = vectors(rng, 4000, 4, VS_METRIC_L2, true);
    Built b;
    build(d, 32, b);
    uint64_t evals = 0;
    vs_mhits hits{};
    vs_mobject q = vs_mspace_object(&d.space, 10);
    ASSERT_EQ(vs_lc_range(&b.lc, &q, 0.3, nullptr, nullptr, &hits, &evals), VS_OK);
    vs_mhits_free(&hits);
    EXPECT_LT(evals, d.space.n / 2);
}

TEST(ListOfClusters, EmptyAndInvalid)
{
    Data d;
    d.space.kind = VS_MSPACE_STRINGS;
    d.offsets = {0};
    d.space.offsets = d.offsets.data();
    size_t nc = 7, c = 0, m = 0, off = 0;
    double r = 0;
    EXPECT_EQ(vs_lc_build(&d.space, 4, 1, nullptr, nullptr, &c, &nc, &m, &off, &r, nullptr), VS_OK);
    EXPECT_EQ(nc, 0u);
    EXPECT_EQ(vs_lc_build(&d.space, 0, 1, nullptr, nullptr, &c, &nc, &m, &off, &r, nullptr),
              VS_INVALID_ARGUMENT);
    Data v;
    v.space.kind = VS_MSPACE_VECTORS;
    v.space.metric = VS_METRIC_COSINE; // not a metric
    EXPECT_EQ(vs_mspace_check(&v.space), VS_INVALID_ARGUMENT);
}

} // namespace
