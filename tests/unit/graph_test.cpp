// Beam search on a proximity graph (vsearch/graph.h) against independent references: with a beam
// as wide as the graph the search is exhaustive over what the starts reach, so it must return
// exactly vs_knn's answer (ids and distances, bit for bit) over the result nodes, for every
// metric, with nodes that are not results traversed but never returned; with a narrow beam on a
// kNN graph built here by brute force in double precision, recall@10 stays above a floor; the
// padding, the start nodes, NaN distances, determinism and the argument checks.
#include "vsearch/graph.h"

#include "engine_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

struct TestGraph
{
    size_t n = 0, dim = 0, degree = 0;
    std::vector<float> vectors;
    std::vector<uint32_t> neighbors;
    std::vector<uint8_t> live;
    std::vector<int64_t> ids;

    vs_graph_arrays arrays(bool with_live = true) const
    {
        vs_graph_arrays g{};
        g.n = n;
        g.dim = dim;
        g.degree = degree;
        g.vectors = vectors.data();
        g.neighbors = neighbors.data();
        g.live = with_live ? live.data() : nullptr;
        g.ids = ids.data();
        return g;
    }
};

// Rows around 20 centres (drawn once per seed and dimension, so that rows and queries share them)
// or plain Gaussian rows.
std::vector<float> random_vectors(std::mt19937_64 &rng, size_t n, size_t dim, bool clustered)
{
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::mt19937_64 crng(1000 + dim);
    std::vector<float> centers(20 * dim);
    for (auto &x : centers)
        x = 4.0f * g(crng);
    std::vector<float> v(n * dim);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            v[i * dim + j] = (clustered ? centers[(i % 20) * dim + j] : 0.0f) + g(rng);
    return v;
}

// K nearest other nodes by squared L2 in double (ties by node), up to K reverse edges (the nodes
// that chose it, by node number), a ring edge (i -> i + 1) so that every node is reachable, and
// the empty slots left: degree 2K + 2.
TestGraph knn_graph(std::vector<float> vectors, size_t n, size_t dim, size_t K)
{
    TestGraph t;
    t.n = n;
    t.dim = dim;
    t.degree = 2 * K + 2;
    t.vectors = std::move(vectors);
    t.neighbors.assign(n * t.degree, VS_GRAPH_NONE);
    t.live.assign(n, 1);
    t.ids.resize(n);
    for (size_t i = 0; i < n; i++)
    {
        t.ids[i] = static_cast<int64_t>(5000 + 3 * i); // ids are not node numbers
        std::vector<std::pair<double, uint32_t>> d;
        for (size_t j = 0; j < n; j++)
        {
            if (j == i)
                continue;
            double s = 0;
            for (size_t c = 0; c < dim; c++)
            {
                const double x = (double) t.vectors[i * dim + c] - (double) t.vectors[j * dim + c];
                s += x * x;
            }
            d.push_back({s, static_cast<uint32_t>(j)});
        }
        std::partial_sort(d.begin(), d.begin() + K, d.end());
        for (size_t r = 0; r < K; r++)
            t.neighbors[i * t.degree + r] = d[r].second;
        t.neighbors[i * t.degree + 2 * K] = static_cast<uint32_t>((i + 1) % n);
    }
    std::vector<size_t> nrev(n, 0);
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < K; r++)
        {
            const uint32_t j = t.neighbors[i * t.degree + r];
            if (nrev[j] < K)
                t.neighbors[j * t.degree + K + nrev[j]++] = static_cast<uint32_t>(i);
        }
    return t;
}

// vs_knn over the result nodes of a graph (the reference answer), on the CPU engine.
void reference_knn(const TestGraph &t, vs_metric metric, const std::vector<float> &queries,
                   size_t nq, size_t k, std::vector<int64_t> &ids, std::vector<float> &dists,
                   std::vector<int64_t> &counts)
{
    vt::ContextPtr ctx = vt::make_context("cpu");
    ASSERT_TRUE(ctx);
    vs_dataset *ds = nullptr;
    ASSERT_EQ(vs_dataset_create(ctx.get(), t.dim, VS_DTYPE_F32, &ds), VS_OK);
    std::vector<float> v;
    std::vector<int64_t> id;
    for (size_t i = 0; i < t.n; i++)
        if (t.live[i])
        {
            v.insert(v.end(), t.vectors.begin() + i * t.dim, t.vectors.begin() + (i + 1) * t.dim);
            id.push_back(t.ids[i]);
        }
    ASSERT_EQ(vs_dataset_add(ctx.get(), ds, v.data(), id.data(), id.size()), VS_OK);
    ids.assign(nq * k, 0);
    dists.assign(nq * k, 0);
    counts.assign(nq, 0);
    ASSERT_EQ(vs_knn(ctx.get(), ds, queries.data(), nq, k, metric, nullptr, ids.data(),
                     dists.data(), counts.data()),
              VS_OK);
    vs_dataset_destroy(ctx.get(), ds);
}

bool same_float(float a, float b)
{
    return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST(Graph, ExhaustiveBeamEqualsExactKnnForEveryMetric)
{
    std::mt19937_64 rng(7);
    const size_t n = 600, dim = 12, nq = 20, k = 15;
    TestGraph t = knn_graph(random_vectors(rng, n, dim, true), n, dim, 8);
    for (size_t i = 0; i < n; i += 3)
        t.live[i] = 0; // traversed, never returned
    std::vector<float> queries = random_vectors(rng, nq, dim, true);
    std::fill(queries.begin(), queries.begin() + dim, 0.0f); // a zero query: cosine NaN
    const uint32_t start = 0;
    for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
    {
        SCOPED_TRACE(vt::metric_name(m));
        std::vector<int64_t> rid, rcount;
        std::vector<float> rdist;
        reference_knn(t, m, queries, nq, k, rid, rdist, rcount);
        vs_graph_arrays g = t.arrays();
        vs_graph_search_params p{m, n, &start, 1};
        std::vector<int64_t> ids(nq * k), counts(nq);
        std::vector<float> dists(nq * k);
        uint64_t nd = 0;
        ASSERT_EQ(vs_graph_search(&g, &p, queries.data(), nq, k, ids.data(), dists.data(),
                                  counts.data(), &nd),
                  VS_OK);
        EXPECT_EQ(nd, nq * n); // every node once per query (none twice)
        for (size_t q = 0; q < nq; q++)
        {
            EXPECT_EQ(counts[q], rcount[q]) << "query " << q;
            for (size_t i = 0; i < k; i++)
            {
                EXPECT_EQ(ids[q * k + i], rid[q * k + i]) << "query " << q << " rank " << i;
                EXPECT_TRUE(same_float(dists[q * k + i], rdist[q * k + i]))
                    << "query " << q << " rank " << i << ": " << dists[q * k + i] << " vs "
                    << rdist[q * k + i];
            }
        }
    }
}

TEST(Graph, NarrowBeamRecallOnKnnGraph)
{
    std::mt19937_64 rng(11);
    const size_t n = 3000, dim = 16, nq = 100, k = 10;
    for (bool clustered : {true, false})
    {
        SCOPED_TRACE(clustered ? "clustered" : "gaussian");
        TestGraph t = knn_graph(random_vectors(rng, n, dim, clustered), n, dim, 16);
        std::vector<float> queries = random_vectors(rng, nq, dim, clustered);
        std::vector<int64_t> rid, rcount;
        std::vector<float> rdist;
        reference_knn(t, VS_METRIC_L2SQ, queries, nq, k, rid, rdist, rcount);
        // 20 spread start nodes (one per cluster on the clustered data: rows i % 20)
        std::vector<uint32_t> starts;
        for (uint32_t s = 0; s < 20; s++)
            starts.push_back(s);
        vs_graph_arrays g = t.arrays(false);
        double prev = -1;
        for (size_t ef : {10, 40, 160})
        {
            vs_graph_search_params p{VS_METRIC_L2SQ, ef, starts.data(), starts.size()};
            std::vector<int64_t> ids(nq * k), counts(nq);
            std::vector<float> dists(nq * k);
            ASSERT_EQ(vs_graph_search(&g, &p, queries.data(), nq, k, ids.data(), dists.data(),
                                      counts.data(), nullptr),
                      VS_OK);
            size_t hit = 0;
            for (size_t q = 0; q < nq; q++)
            {
                ASSERT_EQ(counts[q], (int64_t) k);
                for (size_t i = 0; i < k; i++)
                {
                    hit += std::count(rid.begin() + q * k, rid.begin() + (q + 1) * k, ids[q * k + i]);
                    if (i > 0) // ascending
                        EXPECT_LE(dists[q * k + i - 1], dists[q * k + i]);
                }
            }
            const double recall = (double) hit / (double) (nq * k);
            RecordProperty(std::string(clustered ? "clustered" : "gaussian") + "_recall_ef" +
                               std::to_string(ef),
                           std::to_string(recall));
            // measured: clustered 0.986 / 1.0 / 1.0, Gaussian 0.849 / 0.985 / 1.0
            EXPECT_GE(recall, ef == 10 ? 0.7 : (ef == 40 ? 0.9 : 0.97)) << "ef " << ef;
            EXPECT_GE(recall + 1e-9, prev) << "a wider beam found fewer";
            prev = recall;
        }
    }
}

TEST(Graph, PaddingStartsAndDeterminism)
{
    std::mt19937_64 rng(3);
    const size_t n = 50, dim = 4, k = 8;
    TestGraph t = knn_graph(random_vectors(rng, n, dim, false), n, dim, 4);
    for (size_t i = 5; i < n; i++)
        t.live[i] = 0; // 5 result nodes
    std::vector<float> q = random_vectors(rng, 1, dim, false);
    vs_graph_arrays g = t.arrays();
    const uint32_t starts[] = {VS_GRAPH_NONE, 1000, 20}; // two out of range: ignored
    vs_graph_search_params p{VS_METRIC_L2, 100, starts, 3};
    int64_t ids[k], ids2[k], count = -1;
    float d[k], d2[k];
    ASSERT_EQ(vs_graph_search(&g, &p, q.data(), 1, k, ids, d, &count, nullptr), VS_OK);
    EXPECT_EQ(count, 5);
    for (size_t i = 5; i < k; i++)
    {
        EXPECT_EQ(ids[i], -1);
        EXPECT_TRUE(std::isinf(d[i]) && d[i] > 0);
    }
    ASSERT_EQ(vs_graph_search(&g, &p, q.data(), 1, k, ids2, d2, nullptr, nullptr), VS_OK);
    for (size_t i = 0; i < k; i++)
    {
        EXPECT_EQ(ids[i], ids2[i]);
        EXPECT_TRUE(same_float(d[i], d2[i]));
    }
    // no start: nothing found
    vs_graph_search_params none{VS_METRIC_L2, 100, nullptr, 0};
    ASSERT_EQ(vs_graph_search(&g, &none, q.data(), 1, k, ids, d, &count, nullptr), VS_OK);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(ids[0], -1);
}

TEST(Graph, ArgumentChecks)
{
    TestGraph t = knn_graph(std::vector<float>(8 * 2, 1.0f), 8, 2, 2);
    vs_graph_arrays g = t.arrays();
    const uint32_t start = 0;
    vs_graph_search_params p{VS_METRIC_L2, 4, &start, 1};
    float q[2] = {0, 0}, d[3];
    int64_t ids[3];
    EXPECT_EQ(vs_graph_search(nullptr, &p, q, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_search(&g, &p, q, 1, 0, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_search(&g, &p, nullptr, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    vs_graph_search_params bad = p;
    bad.ef = 0;
    EXPECT_EQ(vs_graph_search(&g, &bad, q, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    bad = p;
    bad.metric = VS_METRIC_L1;
    EXPECT_EQ(vs_graph_search(&g, &bad, q, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    bad = p;
    bad.starts = nullptr;
    EXPECT_EQ(vs_graph_search(&g, &bad, q, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    vs_graph_arrays g0 = g;
    g0.degree = 0;
    EXPECT_EQ(vs_graph_search(&g0, &p, q, 1, 3, ids, d, nullptr, nullptr), VS_INVALID_ARGUMENT);
    // identical vectors: ties go to the smaller id
    ASSERT_EQ(vs_graph_search(&g, &p, q, 1, 3, ids, d, nullptr, nullptr), VS_OK);
    EXPECT_EQ(ids[0], t.ids[0]);
    EXPECT_EQ(ids[1], t.ids[1]);
    EXPECT_EQ(ids[2], t.ids[2]);
}

} // namespace
