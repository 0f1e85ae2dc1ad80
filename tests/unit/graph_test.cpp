// Beam search on a proximity graph (vsearch/graph.h) against independent references: with a beam
// as wide as the graph the search is exhaustive over what the starts reach, so it must return
// exactly vs_knn's answer (ids and distances, bit for bit) over the live nodes, for every metric,
// with the nodes that are not live skipped; with a narrow beam on a kNN graph built here by brute
// force in double precision, recall@10 stays above a floor; the padding, the start nodes, NaN
// distances, determinism and the argument checks.  Then graph objects (vs_graph_create /
// vs_graph_knn) on every backend: the CPU object, two CPU contexts (the twin of several GPUs),
// and where a GPU exists the CUDA kernel, one and two contexts: their answers equal the reference
// search's bit for bit (so CUDA and CPU reach the same recall), sorted, with valid ids and no
// duplicates, at beam widths from 10 (the kernel's visited set is reset many times) to the whole
// graph.
#include "vsearch/graph.h"

#include "engine_testing.h"
#include "graph_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using vt::knn_graph;
using vt::random_vectors;
using vt::Answer;
using vt::recall;
using vt::TestGraph;

// Points the ring slot (2K) of every live node at the next live node, so that the live nodes stay
// reachable through live nodes alone (nodes that are not live are skipped).
void relink_ring(TestGraph &t, size_t K)
{
    std::vector<size_t> live;
    for (size_t i = 0; i < t.n; i++)
        if (t.live[i])
            live.push_back(i);
    for (size_t j = 0; j < live.size(); j++)
        t.neighbors[live[j] * t.degree + 2 * K] =
            static_cast<uint32_t>(live[(j + 1) % live.size()]);
}

// vs_knn over the live nodes of a graph (the reference answer), on the CPU engine.
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
    size_t nlive = 0;
    for (size_t i = 0; i < n; i++)
    {
        t.live[i] = i % 3 != 0; // skipped: never measured, expanded or returned
        nlive += t.live[i];
    }
    relink_ring(t, 8);
    std::vector<float> queries = random_vectors(rng, nq, dim, true);
    std::fill(queries.begin(), queries.begin() + dim, 0.0f); // a zero query: cosine NaN
    const uint32_t start = 1;
    for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
    for (size_t expand : {1, 2, 4}) // nodes expanded per step: exhaustive all the same
    {
        SCOPED_TRACE(std::string(vt::metric_name(m)) + " expand " + std::to_string(expand));
        std::vector<int64_t> rid, rcount;
        std::vector<float> rdist;
        reference_knn(t, m, queries, nq, k, rid, rdist, rcount);
        vs_graph_arrays g = t.arrays();
        vs_graph_search_params p{m, n, &start, 1, expand};
        std::vector<int64_t> ids(nq * k), counts(nq);
        std::vector<float> dists(nq * k);
        uint64_t nd = 0;
        ASSERT_EQ(vs_graph_search(&g, &p, queries.data(), nq, k, ids.data(), dists.data(),
                                  counts.data(), &nd),
                  VS_OK);
        EXPECT_EQ(nd, nq * nlive); // every live node once per query (none twice)
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
    uint64_t narrow_ndist = 0;
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
        for (size_t expand : {1, 2, 4})
        {
        SCOPED_TRACE("expand " + std::to_string(expand));
        double prev = -1;
        for (size_t ef : {10, 40, 160})
        {
            vs_graph_search_params p{VS_METRIC_L2SQ, ef, starts.data(), starts.size(), expand};
            std::vector<int64_t> ids(nq * k), counts(nq);
            std::vector<float> dists(nq * k);
            uint64_t nd = 0;
            ASSERT_EQ(vs_graph_search(&g, &p, queries.data(), nq, k, ids.data(), dists.data(),
                                      counts.data(), &nd),
                      VS_OK);
            if (expand == 1 && ef == 10)
                narrow_ndist = nd;
            if (expand == 4 && ef == 10) // the setting is not ignored: a step measures more
                EXPECT_GT(nd, narrow_ndist);
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
                               std::to_string(ef) + "_expand" + std::to_string(expand),
                           std::to_string(recall));
            // measured: clustered 0.986 / 1.0 / 1.0 (expand 4: 0.993 at ef 10), Gaussian 0.849 /
            // 0.985 / 1.0 (expand 2: 0.855, 4: 0.865 at ef 10)
            EXPECT_GE(recall, ef == 10 ? 0.7 : (ef == 40 ? 0.9 : 0.97)) << "ef " << ef;
            EXPECT_GE(recall + 1e-9, prev) << "a wider beam found fewer";
            prev = recall;
        }
        }
    }
}

// Nodes a walk from the starts reaches (a set and a queue: not the engine's walk).
std::set<uint32_t> walk(const std::vector<uint32_t> &graph, size_t degree,
                        const std::vector<uint32_t> &starts)
{
    std::set<uint32_t> seen(starts.begin(), starts.end());
    std::vector<uint32_t> queue(starts.begin(), starts.end());
    for (size_t at = 0; at < queue.size(); at++)
        for (size_t i = 0; i < degree; i++)
        {
            const uint32_t v = graph[queue[at] * degree + i];
            if (v != VS_GRAPH_NONE && seen.insert(v).second)
                queue.push_back(v);
        }
    return seen;
}

// Issue 15: the index's build on well-separated clusters of uneven size (the kNN lists never leave
// a cluster, so the pruned graph is one island per cluster) with fewer k-means seeds than
// clusters.  Without vs_graph_cover_starts the islands without a start are out of every search's
// reach and recall stays low however wide the beam; with it, walks from the starts reach every
// node, every query's nearest row is reachable, and a modest beam finds the true neighbours.
TEST(Graph, CoverStartsReachEveryClusterIsland)
{
    const size_t nc = 40, dim = 16, nq = 200, k = 10, K = 16, degree = 8;
    std::mt19937_64 rng(15);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> centers(nc * dim);
    for (auto &x : centers)
        x = 12.0f * g(rng);
    std::vector<size_t> label;
    for (size_t c = 0; c < nc; c++) // sizes 20 .. 137
        for (size_t i = 0; i < 20 + (c * 3) % 118; i++)
            label.push_back(c);
    std::shuffle(label.begin(), label.end(), rng);
    const size_t n = label.size();
    std::vector<float> x(n * dim), queries(nq * dim);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            x[i * dim + j] = centers[label[i] * dim + j] + g(rng);
    for (size_t q = 0; q < nq; q++) // every cluster gets queries, the small ones as many
        for (size_t j = 0; j < dim; j++)
            queries[q * dim + j] = centers[(q % nc) * dim + j] + g(rng);
    // the kNN lists by brute force in double (ties by node)
    std::vector<uint32_t> knn(n * K);
    for (size_t i = 0; i < n; i++)
    {
        std::vector<std::pair<double, uint32_t>> d;
        for (size_t j = 0; j < n; j++)
            if (j != i)
            {
                double s = 0;
                for (size_t c = 0; c < dim; c++)
                {
                    const double e = (double) x[i * dim + c] - (double) x[j * dim + c];
                    s += e * e;
                }
                d.push_back({s, static_cast<uint32_t>(j)});
            }
        std::partial_sort(d.begin(), d.begin() + K, d.end());
        for (size_t r = 0; r < K; r++)
        {
            knn[i * K + r] = d[r].second;
            ASSERT_EQ(label[d[r].second], label[i]) << "clusters closer than the test assumes";
        }
    }
    vt::ContextPtr ctx = vt::make_context("cpu");
    ASSERT_TRUE(ctx);
    std::vector<uint32_t> graph(n * degree);
    const uint32_t entry = 0;
    ASSERT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), n, K, degree, entry, graph.data(),
                                   nullptr),
              VS_OK);
    // eight seeds, one in each of clusters 0..7 (the first node of each), and a repeat, the entry
    // and a node out of range, which are skipped
    std::vector<uint32_t> seeds;
    for (size_t c = 0; c < 8; c++)
        seeds.push_back(static_cast<uint32_t>(std::find(label.begin(), label.end(), c) - label.begin()));
    seeds.push_back(seeds[3]);
    seeds.push_back(entry);
    seeds.push_back(static_cast<uint32_t>(n + 5));

    TestGraph t;
    t.n = n;
    t.dim = dim;
    t.degree = degree;
    t.vectors = x;
    t.neighbors = graph;
    t.live.assign(n, 1);
    for (size_t i = 0; i < n; i++)
        t.ids.push_back(static_cast<int64_t>(i));
    std::vector<int64_t> rid, rcount;
    std::vector<float> rdist;
    reference_knn(t, VS_METRIC_L2SQ, queries, nq, k, rid, rdist, rcount);
    vs_graph_arrays ga = t.arrays(false);
    auto recall_of = [&](const std::vector<uint32_t> &starts, size_t ef) {
        vs_graph_search_params p{VS_METRIC_L2SQ, ef, starts.data(), starts.size()};
        std::vector<int64_t> ids(nq * k);
        std::vector<float> dists(nq * k);
        EXPECT_EQ(vs_graph_search(&ga, &p, queries.data(), nq, k, ids.data(), dists.data(),
                                  nullptr, nullptr),
                  VS_OK);
        size_t hit = 0;
        for (size_t q = 0; q < nq; q++)
            for (size_t i = 0; i < k; i++)
                hit += std::count(rid.begin() + q * k, rid.begin() + (q + 1) * k, ids[q * k + i]);
        return (double) hit / (double) (nq * k);
    };

    // before: the entry's and the eight seeds' clusters only (at most 9 of 40), whatever the beam
    std::vector<uint32_t> before{entry};
    before.insert(before.end(), seeds.begin(), seeds.begin() + 8);
    const std::set<uint32_t> reached_before = walk(graph, degree, before);
    EXPECT_LT(reached_before.size(), n / 2);
    EXPECT_LE(recall_of(before, n), 9.0 / 40.0 + 1e-9);

    std::vector<uint32_t> out(64, VS_GRAPH_NONE);
    uint64_t unreached = 99;
    const int m = vs_graph_cover_starts(graph.data(), n, degree, x.data(), dim, &entry, 1,
                                        seeds.data(), seeds.size(), out.data(), out.size(),
                                        &unreached);
    ASSERT_GT(m, 0);
    out.resize(m);
    EXPECT_EQ(unreached, 0u);
    // no repeats, not the entry, every node in range; the candidates' order kept where they reach
    // new nodes (the seeds of clusters other than the entry's)
    EXPECT_EQ(std::set<uint32_t>(out.begin(), out.end()).size(), out.size());
    EXPECT_EQ(std::count(out.begin(), out.end(), entry), 0);
    for (uint32_t v : out)
        EXPECT_LT(v, n);
    std::vector<uint32_t> firsts;
    for (size_t c = 0; c < 8; c++)
        if (label[seeds[c]] != label[entry])
            firsts.push_back(seeds[c]);
    ASSERT_GE(out.size(), firsts.size());
    EXPECT_TRUE(std::equal(firsts.begin(), firsts.end(), out.begin()));
    // every seed kept; one more start per other cluster at most (the islands are the clusters)
    for (size_t c = 0; c < 8; c++)
        EXPECT_EQ(std::count(out.begin(), out.end(), seeds[c]), 1);
    EXPECT_LE(out.size(), nc + 1);
    std::vector<uint32_t> after{entry};
    after.insert(after.end(), out.begin(), out.end());
    EXPECT_EQ(walk(graph, degree, after).size(), n);
    std::set<size_t> covered;
    for (uint32_t v : after)
        covered.insert(label[v]);
    EXPECT_EQ(covered.size(), nc);
    // every query's nearest row is reachable, and a modest beam finds the neighbours
    const double r16 = recall_of(after, 16);
    RecordProperty("recall_ef16", std::to_string(r16));
    EXPECT_GE(r16, 0.95); // measured: 0.9865
    EXPECT_EQ(recall_of(after, n), 1.0);
    // the same answer again (nothing but the arguments)
    std::vector<uint32_t> again(64);
    ASSERT_EQ(vs_graph_cover_starts(graph.data(), n, degree, x.data(), dim, &entry, 1,
                                    seeds.data(), seeds.size(), again.data(), again.size(),
                                    nullptr),
              m);
    again.resize(m);
    EXPECT_EQ(again, out);

    // too few slots: as many as fit, and the nodes left unreached counted (by the walk here)
    std::vector<uint32_t> few(12);
    uint64_t left = 0;
    ASSERT_EQ(vs_graph_cover_starts(graph.data(), n, degree, x.data(), dim, &entry, 1,
                                    seeds.data(), seeds.size(), few.data(), few.size(), &left),
              12);
    std::vector<uint32_t> fewer{entry};
    fewer.insert(fewer.end(), few.begin(), few.end());
    EXPECT_EQ(left, n - walk(graph, degree, fewer).size());
    EXPECT_GT(left, 0u);
    // an empty graph, and the argument checks
    EXPECT_EQ(vs_graph_cover_starts(nullptr, 0, degree, nullptr, dim, nullptr, 0, nullptr, 0,
                                    nullptr, 0, nullptr),
              0);
    EXPECT_EQ(vs_graph_cover_starts(nullptr, n, degree, x.data(), dim, &entry, 1, nullptr, 0,
                                    out.data(), 1, nullptr),
              -1);
    EXPECT_EQ(vs_graph_cover_starts(graph.data(), n, 0, x.data(), dim, &entry, 1, nullptr, 0,
                                    out.data(), 1, nullptr),
              -1);
}

TEST(Graph, PaddingStartsAndDeterminism)
{
    std::mt19937_64 rng(3);
    const size_t n = 50, dim = 4, k = 8;
    TestGraph t = knn_graph(random_vectors(rng, n, dim, false), n, dim, 4);
    for (size_t i = 5; i < n; i++)
        t.live[i] = 0; // 5 live nodes
    relink_ring(t, 4);
    std::vector<float> q = random_vectors(rng, 1, dim, false);
    vs_graph_arrays g = t.arrays();
    const uint32_t starts[] = {VS_GRAPH_NONE, 1000, 20, 2}; // out of range or not live: ignored
    vs_graph_search_params p{VS_METRIC_L2, 100, starts, 4};
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

// The start cut for the backend's batches (vs_graph_start_cut_*): every start whose navigation
// distance (vs_distance_f32) is at most the width-th smallest of the starts that can be results
// is picked, for L2SQ and IP, ties included (exact duplicates of rows), positions ascending; a
// query with values that overflow gets every start; random data is actually cut; no cut for
// cosine or too few results.
TEST(Graph, StartCutKeepsEveryStartAsNearAsTheWidthNearestResults)
{
    std::mt19937_64 rng(31);
    const size_t nstarts = 300, nq = 40;
    for (size_t dim : {3, 40, 129})
    {
        std::vector<float> rows = random_vectors(rng, nstarts, dim, true);
        for (size_t j = 10; j < 20; j++) // ties: rows equal to others
            std::copy(rows.begin() + (j - 10) * dim, rows.begin() + (j - 9) * dim,
                      rows.begin() + j * dim);
        std::vector<uint8_t> results(nstarts);
        for (size_t j = 0; j < nstarts; j++)
            results[j] = rng() % 10 < 7;
        std::vector<float> queries = random_vectors(rng, nq, dim, true);
        std::fill(queries.begin(), queries.begin() + dim, 0.0f);
        std::copy(rows.begin(), rows.begin() + dim, queries.begin() + dim); // on a start
        for (size_t i = 0; i < dim; i++)
            queries[2 * dim + i] = 3e19f; // its values overflow
        for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_IP})
            for (size_t width : {1, 10, 64})
            {
                SCOPED_TRACE("dim " + std::to_string(dim) + " " + vt::metric_name(m) + " width " +
                             std::to_string(width));
                vs_graph_start_cut *cut =
                    vs_graph_start_cut_create(m, rows.data(), results.data(), nstarts, dim, width);
                ASSERT_NE(cut, nullptr);
                std::vector<uint32_t> picked(nq * nstarts);
                std::vector<size_t> counts(nq);
                ASSERT_EQ(vs_graph_start_cut_pick(cut, queries.data(), nq, picked.data(),
                                                  counts.data()),
                          VS_OK);
                vs_graph_start_cut_destroy(cut);
                size_t total = 0;
                for (size_t q = 0; q < nq; q++)
                {
                    const float *x = queries.data() + q * dim;
                    std::vector<float> key(nstarts), of_results;
                    for (size_t j = 0; j < nstarts; j++)
                    {
                        const float d = static_cast<float>(
                            vs_distance_f32(m, x, rows.data() + j * dim, dim));
                        key[j] = std::isnan(d) ? INFINITY : d;
                        if (results[j])
                            of_results.push_back(key[j]);
                    }
                    std::nth_element(of_results.begin(), of_results.begin() + (width - 1),
                                     of_results.end());
                    const float limit = of_results[width - 1];
                    const uint32_t *mine = picked.data() + q * nstarts;
                    ASSERT_LE(counts[q], nstarts);
                    EXPECT_TRUE(std::is_sorted(mine, mine + counts[q]) &&
                                std::adjacent_find(mine, mine + counts[q]) == mine + counts[q])
                        << "query " << q;
                    std::set<uint32_t> got(mine, mine + counts[q]);
                    for (size_t j = 0; j < nstarts; j++)
                        if (key[j] <= limit)
                            EXPECT_TRUE(got.count(static_cast<uint32_t>(j)))
                                << "query " << q << " start " << j;
                    if (q == 2)
                        EXPECT_EQ(counts[q], nstarts) << "overflowing values: every start";
                    total += counts[q];
                }
                EXPECT_LT(total, nq * nstarts / 2) << "the cut keeps most starts";
            }
        EXPECT_EQ(vs_graph_start_cut_create(VS_METRIC_COSINE, rows.data(), results.data(), nstarts,
                                            dim, 10),
                  nullptr);
        std::vector<uint8_t> few(nstarts, 0);
        std::fill(few.begin(), few.begin() + 10, 1);
        EXPECT_EQ(vs_graph_start_cut_create(VS_METRIC_L2SQ, rows.data(), few.data(), nstarts, dim,
                                            10),
                  nullptr)
            << "10 results, width 10: nothing to cut";
        vs_graph_start_cut *nine =
            vs_graph_start_cut_create(VS_METRIC_L2SQ, rows.data(), few.data(), nstarts, dim, 9);
        EXPECT_NE(nine, nullptr);
        vs_graph_start_cut_destroy(nine);
    }
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
    bad = p;
    bad.expand = VS_GRAPH_MAX_EXPAND + 1;
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

// ---- graph objects on every backend ---------------------------------------------------------

struct GraphDeleter
{
    vs_context *ctx;
    void operator()(vs_graph *g) const { vs_graph_destroy(ctx, g); }
};
using GraphPtr = std::unique_ptr<vs_graph, GraphDeleter>;

Answer reference_answer(const TestGraph &t, const vs_graph_search_params &p,
                        const std::vector<float> &queries, size_t nq, size_t k)
{
    Answer a;
    a.ids.assign(nq * k, 0);
    a.dists.assign(nq * k, 0);
    a.counts.assign(nq, 0);
    vs_graph_arrays g = t.arrays();
    EXPECT_EQ(vs_graph_search(&g, &p, queries.data(), nq, k, a.ids.data(), a.dists.data(),
                              a.counts.data(), nullptr),
              VS_OK);
    return a;
}

// Sorted by (distance, id) with NaN last, ids of live nodes, no duplicates, padding after count.
void check_answer(const TestGraph &t, const Answer &a, size_t nq, size_t k)
{
    std::map<int64_t, size_t> node_of;
    for (size_t i = 0; i < t.n; i++)
        node_of[t.ids[i]] = i;
    for (size_t q = 0; q < nq; q++)
    {
        ASSERT_GE(a.counts[q], 0);
        ASSERT_LE(a.counts[q], (int64_t) k);
        std::set<int64_t> seen;
        for (size_t i = 0; i < k; i++)
        {
            const int64_t id = a.ids[q * k + i];
            const float d = a.dists[q * k + i];
            if ((int64_t) i >= a.counts[q])
            {
                EXPECT_EQ(id, -1);
                EXPECT_TRUE(std::isinf(d) && d > 0);
                continue;
            }
            auto it = node_of.find(id);
            ASSERT_NE(it, node_of.end()) << "query " << q << ": unknown id " << id;
            EXPECT_TRUE(t.live[it->second]) << "query " << q << ": node " << it->second;
            EXPECT_TRUE(seen.insert(id).second) << "query " << q << ": id " << id << " twice";
            if (i > 0)
            {
                const float p = a.dists[q * k + i - 1];
                const int64_t pid = a.ids[q * k + i - 1];
                const bool ordered = std::isnan(d)
                                         ? (!std::isnan(p) || pid < id)
                                         : (!std::isnan(p) && (p < d || (p == d && pid < id)));
                EXPECT_TRUE(ordered) << "query " << q << " rank " << i;
            }
        }
    }
}

class GraphObject : public testing::TestWithParam<std::string>
{
};

// The CUDA backend's choices, read per search: team sizes (VSEARCH_CUDA_GRAPH_KERNEL: the
// default, teams sized by the dimension, and 32 lanes whatever the dimension) and how the start
// pass measures many start nodes (VSEARCH_CUDA_GRAPH_STARTS: the default, only the starts that
// can be in the first beam, every start by teams, by tiles); other backends have one search.
struct KernelChoice
{
    std::string kernel, starts;
    std::string name() const { return kernel + (starts.empty() ? "" : " starts " + starts); }
};

std::vector<KernelChoice> graph_kernels(const std::string &param)
{
    if (param.rfind("cuda", 0) == 0)
        return {{"team", ""}, {"team32", ""}, {"team", "cut"}, {"team", "teams"},
                {"team", "tiles"}};
    return {{"", ""}};
}

// Sets the environment of a KernelChoice for a scope ("" leaves a variable unset).
struct KernelScope
{
    explicit KernelScope(const KernelChoice &c)
    {
        set("VSEARCH_CUDA_GRAPH_KERNEL", c.kernel);
        set("VSEARCH_CUDA_GRAPH_STARTS", c.starts);
    }
    ~KernelScope()
    {
        unsetenv("VSEARCH_CUDA_GRAPH_KERNEL");
        unsetenv("VSEARCH_CUDA_GRAPH_STARTS");
    }
    static void set(const char *name, const std::string &value)
    {
        if (value.empty())
            unsetenv(name);
        else
            setenv(name, value.c_str(), 1);
    }
};

// A graph like a vs_graph index's: a kNN graph with reverse edges, a tenth of the nodes free
// (not live), 20 start nodes, or 300 with repeats, free and out-of-range ones (more than the
// CUDA team kernel measures in one step); one, two or four nodes expanded per step (4: the most,
// vsearch.graph_expand's limit); every metric, beam widths 10 .. n, 120 queries (a zero query
// among them); dimensions that give the CUDA team kernel teams of 8 and 16 lanes (and blocks of
// 256 threads), and the start cut (the CPU object's graph_starts.h, the CUDA backend's
// impl/start_cut.cu) several blocked panels.  The object's answers equal the reference search's,
// bit for bit, with each of the CUDA team sizes and, with many start nodes, each of its start
// passes.
TEST_P(GraphObject, EqualsReferenceSearch)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(23);
    const size_t n = 1500, nq = 120, k = 10;
    for (size_t dim : {16, 100, 200, 300})
    {

        SCOPED_TRACE("dim " + std::to_string(dim));
        TestGraph t = knn_graph(random_vectors(rng, n, dim, true), n, dim, 12);
        for (size_t i = 7; i < n; i += 10)
            t.live[i] = 0;
        relink_ring(t, 12);
        std::vector<float> queries = random_vectors(rng, nq, dim, true);
        std::fill(queries.begin() + 5 * dim, queries.begin() + 6 * dim, 0.0f);
        std::vector<uint32_t> few, many;
        for (uint32_t s = 0; s < 20; s++)
            few.push_back(s * 3); // 21 is not live: skipped
        for (uint32_t s = 0; s < 290; s++)
            many.push_back(s * 5);
        // repeats, nodes not live, out of range
        for (uint32_t s : {0u, 35u, 7u, 1497u, 1500u, VS_GRAPH_NONE, 1499u, 10u, 10u})
            many.push_back(s);
        vs_graph_arrays arrays = t.arrays();
        vs_graph *raw = nullptr;
        ASSERT_EQ(vs_graph_create(ctx.get(), &arrays, &raw), VS_OK) << vs_last_error(ctx.get());
        GraphPtr g(raw, GraphDeleter{ctx.get()});
        EXPECT_EQ(vs_graph_size(g.get()), n);
        for (const std::vector<uint32_t> *starts : {&few, &many})
        for (size_t expand : {0, 2, 4})
        for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
            for (size_t ef : {size_t{10}, size_t{40}, size_t{300}, n})
            {
                if (starts == &many && ef == n && dim > 16)
                    continue; // exhaustive from any start: the few starts cover it
                vs_graph_search_params p{m, ef, starts->data(), starts->size(), expand};
                Answer ref = reference_answer(t, p, queries, nq, k);
                for (const KernelChoice &kernel : graph_kernels(GetParam()))
                {
                    if (starts == &few && !kernel.starts.empty())
                        continue; // no start pass
                    KernelScope scope(kernel);
                    SCOPED_TRACE(kernel.name() + " " + std::to_string(starts->size()) +
                                 " starts expand " + std::to_string(expand) + " " +
                                 std::string(vt::metric_name(m)) + " ef " + std::to_string(ef));
                    Answer got;
                    got.ids.assign(nq * k, 7);
                    got.dists.assign(nq * k, -3.0f);
                    got.counts.assign(nq, -1);
                    ASSERT_EQ(vs_graph_knn(ctx.get(), g.get(), &p, queries.data(), nq, k,
                                           got.ids.data(), got.dists.data(), got.counts.data()),
                              VS_OK)
                        << vs_last_error(ctx.get());
                    check_answer(t, got, nq, k);
                    size_t differ = 0;
                    for (size_t i = 0; i < nq * k; i++)
                        differ +=
                            got.ids[i] != ref.ids[i] || !same_float(got.dists[i], ref.dists[i]);
                    for (size_t q = 0; q < nq; q++)
                        differ += got.counts[q] != ref.counts[q];
                    EXPECT_EQ(differ, 0u);
                }
            }
    }
}

TEST_P(GraphObject, RecallMatchesReference)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    std::mt19937_64 rng(5);
    const size_t n = 4000, dim = 32, nq = 500, k = 10;
    TestGraph t = knn_graph(random_vectors(rng, n, dim, false), n, dim, 12);
    std::vector<float> queries = random_vectors(rng, nq, dim, false);
    std::vector<int64_t> truth, tcount;
    std::vector<float> tdist;
    reference_knn(t, VS_METRIC_L2, queries, nq, k, truth, tdist, tcount);
    std::vector<uint32_t> starts{0, 1000, 2000, 3000};
    vs_graph_arrays arrays = t.arrays(false);
    vs_graph *raw = nullptr;
    ASSERT_EQ(vs_graph_create(ctx.get(), &arrays, &raw), VS_OK) << vs_last_error(ctx.get());
    GraphPtr g(raw, GraphDeleter{ctx.get()});
    double prev = 0;
    for (size_t ef : {10, 20, 40, 80})
    {
        vs_graph_search_params p{VS_METRIC_L2, ef, starts.data(), starts.size()};
        Answer ref = reference_answer(t, p, queries, nq, k);
        Answer got;
        got.ids.assign(nq * k, 0);
        got.dists.assign(nq * k, 0);
        got.counts.assign(nq, 0);
        ASSERT_EQ(vs_graph_knn(ctx.get(), g.get(), &p, queries.data(), nq, k, got.ids.data(),
                               got.dists.data(), got.counts.data()),
                  VS_OK);
        const double r_ref = recall(ref, truth, nq, k), r_got = recall(got, truth, nq, k);
        RecordProperty(GetParam() + "_recall_ef" + std::to_string(ef), std::to_string(r_got));
        EXPECT_NEAR(r_got, r_ref, 0.01) << "ef " << ef;
        // measured on the CPU: 0.559, 0.724, 0.870, 0.955
        EXPECT_GE(r_got, ef == 10 ? 0.5 : ef == 20 ? 0.65 : ef == 40 ? 0.8 : 0.9) << "ef " << ef;
        EXPECT_GE(r_got + 1e-9, prev) << "a wider beam found fewer";
        prev = r_got;
    }
}

TEST_P(GraphObject, ArgumentsAndLimits)
{
    std::string why;
    vt::ContextPtr ctx = vt::object_context(GetParam(), &why);
    if (!ctx)
        GTEST_SKIP() << GetParam() << " unavailable: " << why;
    TestGraph t = knn_graph(std::vector<float>(40 * 3, 0.5f), 40, 3, 2);
    vs_graph_arrays arrays = t.arrays();
    vs_graph *raw = nullptr;
    EXPECT_EQ(vs_graph_create(ctx.get(), nullptr, &raw), VS_INVALID_ARGUMENT);
    vs_graph_arrays bad = arrays;
    bad.degree = 0;
    EXPECT_EQ(vs_graph_create(ctx.get(), &bad, &raw), VS_INVALID_ARGUMENT);
    bad = arrays;
    bad.vectors = nullptr;
    EXPECT_EQ(vs_graph_create(ctx.get(), &bad, &raw), VS_INVALID_ARGUMENT);
    ASSERT_EQ(vs_graph_create(ctx.get(), &arrays, &raw), VS_OK);
    GraphPtr g(raw, GraphDeleter{ctx.get()});
    const uint32_t start = 0;
    float q[3] = {0.5f, 0.5f, 0.5f}, d[4];
    int64_t ids[4], count = -1;
    vs_graph_search_params p{VS_METRIC_L2, 8, &start, 1};
    EXPECT_EQ(vs_graph_knn(ctx.get(), g.get(), &p, q, 1, 0, ids, d, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_knn(ctx.get(), g.get(), nullptr, q, 1, 4, ids, d, nullptr),
              VS_INVALID_ARGUMENT);
    vs_graph_search_params l1 = p;
    l1.metric = VS_METRIC_L1;
    EXPECT_EQ(vs_graph_knn(ctx.get(), g.get(), &l1, q, 1, 4, ids, d, nullptr), VS_INVALID_ARGUMENT);
    vs_graph_search_params nostarts = p;
    nostarts.starts = nullptr;
    EXPECT_EQ(vs_graph_knn(ctx.get(), g.get(), &nostarts, q, 1, 4, ids, d, nullptr),
              VS_INVALID_ARGUMENT);
    vs_graph_search_params wide_step = p;
    wide_step.expand = VS_GRAPH_MAX_EXPAND + 1;
    EXPECT_EQ(vs_graph_knn(ctx.get(), g.get(), &wide_step, q, 1, 4, ids, d, nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_knn(ctx.get(), nullptr, &p, q, 1, 4, ids, d, nullptr), VS_INVALID_ARGUMENT);
    // identical vectors: ties by id; ef below k searches with k
    vs_graph_search_params narrow = p;
    narrow.ef = 1;
    ASSERT_EQ(vs_graph_knn(ctx.get(), g.get(), &narrow, q, 1, 4, ids, d, &count), VS_OK);
    EXPECT_EQ(count, 4);
    for (int i = 0; i < 4; i++)
    {
        EXPECT_EQ(ids[i], t.ids[i]);
        EXPECT_EQ(d[i], 0.0f);
    }
    // more start nodes than a step of the team kernel takes (there measured beforehand by a
    // kernel of their own), each 8 times (also a sanitizer case: tests/gpu, run-on-device)
    std::vector<uint32_t> repeated;
    for (int r = 0; r < 8; r++)
        for (uint32_t i = 0; i < 40; i++)
            repeated.push_back(i);
    vs_graph_search_params many = p;
    many.starts = repeated.data();
    many.nstarts = repeated.size();
    for (const KernelChoice &kernel : graph_kernels(GetParam()))
    {
        KernelScope scope(kernel);
        SCOPED_TRACE(kernel.name());
        ASSERT_EQ(vs_graph_knn(ctx.get(), g.get(), &many, q, 1, 4, ids, d, &count), VS_OK);
        EXPECT_EQ(count, 4);
        for (int i = 0; i < 4; i++)
        {
            EXPECT_EQ(ids[i], t.ids[i]);
            EXPECT_EQ(d[i], 0.0f);
        }
    }
    // the CUDA backend refuses a kernel or start pass it does not know, the removed old kernel's
    for (const KernelChoice &bogus :
         {KernelChoice{"bogus", ""}, KernelChoice{"old", ""}, KernelChoice{"team", "bogus"}})
    {
        KernelScope scope(bogus);
        const vs_status st = vs_graph_knn(ctx.get(), g.get(), &p, q, 1, 4, ids, d, &count);
        EXPECT_EQ(st, GetParam().rfind("cuda", 0) == 0 ? VS_INVALID_ARGUMENT : VS_OK);
    }
    // a width the GPU kernel cannot hold in shared memory is refused there, answered elsewhere
    vs_graph_search_params wide = p;
    wide.ef = size_t{1} << 22;
    const vs_status st = vs_graph_knn(ctx.get(), g.get(), &wide, q, 1, 4, ids, d, &count);
    if (GetParam().rfind("cuda", 0) == 0)
        EXPECT_EQ(st, VS_UNSUPPORTED);
    else
        EXPECT_EQ(st, VS_OK);
    // the documented width fits the kernel with the index's largest degree and 2000 dimensions
    std::mt19937_64 rng(9);
    TestGraph big = knn_graph(random_vectors(rng, 300, 2000, false), 300, 2000, 127);
    vs_graph_arrays barrays = big.arrays();
    ASSERT_EQ(big.degree, 256u);
    vs_graph *braw = nullptr;
    ASSERT_EQ(vs_graph_create(ctx.get(), &barrays, &braw), VS_OK);
    GraphPtr bg(braw, GraphDeleter{ctx.get()});
    vs_graph_search_params widest{VS_METRIC_L2SQ, VS_GRAPH_GPU_MAX_EF, &start, 1};
    std::vector<float> bq(big.vectors.begin(), big.vectors.begin() + 2000);
    for (const KernelChoice &kernel : graph_kernels(GetParam()))
    {
        KernelScope scope(kernel);
        SCOPED_TRACE(kernel.name());
        EXPECT_EQ(vs_graph_knn(ctx.get(), bg.get(), &widest, bq.data(), 1, 4, ids, d, &count),
                  VS_OK)
            << vs_last_error(ctx.get());
        EXPECT_EQ(count, 4);
        EXPECT_EQ(ids[0], big.ids[0]);
    }
}

INSTANTIATE_TEST_SUITE_P(All, GraphObject, testing::Values("cpu", "cpu2", "cuda", "cuda2"),
                         [](const testing::TestParamInfo<std::string> &i) { return i.param; });

} // namespace
