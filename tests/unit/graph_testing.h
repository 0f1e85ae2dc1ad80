// Graphs for the engine's graph tests (graph_test.cpp, graph_pq_test.cpp): seeded clustered or
// Gaussian rows, and kNN graphs built from them by brute force in double precision.
#ifndef VSEARCH_TESTS_UNIT_GRAPH_TESTING_H
#define VSEARCH_TESTS_UNIT_GRAPH_TESTING_H

#include "vsearch/graph.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace vt {

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
inline std::vector<float> random_vectors(std::mt19937_64 &rng, size_t n, size_t dim, bool clustered)
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
inline TestGraph knn_graph(std::vector<float> vectors, size_t n, size_t dim, size_t K)
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

// One search's answers: ids and distances nq x k, counts nq.
struct Answer
{
    std::vector<int64_t> ids, counts;
    std::vector<float> dists;
};

// Recall@k of a's ids against truth (nq x k ids).
inline double recall(const Answer &a, const std::vector<int64_t> &truth, size_t nq, size_t k)
{
    size_t hit = 0;
    for (size_t q = 0; q < nq; q++)
        for (size_t i = 0; i < k; i++)
            hit += std::count(truth.begin() + q * k, truth.begin() + (q + 1) * k, a.ids[q * k + i]);
    return (double) hit / (double) (nq * k);
}

} // namespace vt

#endif
