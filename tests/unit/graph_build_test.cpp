// The vs_graph build's graph from kNN lists (vsearch/graph.h: vs_graph_prune,
// vs_graph_build_edges) against a plain reference written here from the documented rules
// (detours counted pair by pair, a stable sort, reverse edges gathered per node, reachability
// walked with a set), on kNN lists of points by brute force and on lists that leave many nodes
// unreachable (so that the links and the slot choice are exercised): the same lists, node for
// node, on one thread and on several; then the argument checks, a cancel, and the CUDA backend's
// refusal.
#include "vsearch/graph.h"

#include "engine_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace {

constexpr uint32_t kNone = VS_GRAPH_NONE;

// Candidate i has one detour per (j, r) with j < i, r < i and nbrs(j)[r] == cands[i].
std::vector<uint32_t> ref_prune(const std::vector<uint32_t> &cands,
                                const std::vector<std::vector<uint32_t>> &nbrs, size_t degree)
{
    const size_t m = cands.size();
    std::vector<size_t> detours(m, 0), order(m);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < i; j++)
            for (size_t r = 0; r < i && r < nbrs[j].size(); r++)
                detours[i] += nbrs[j][r] == cands[i];
    for (size_t i = 0; i < m; i++)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return detours[a] < detours[b]; });
    std::vector<uint32_t> out;
    for (size_t i = 0; i < std::min(degree, m); i++)
        out.push_back(cands[order[i]]);
    return out;
}

std::vector<uint32_t> row_of(const std::vector<uint32_t> &knn, size_t K, size_t v)
{
    std::vector<uint32_t> r;
    for (size_t j = 0; j < K && knn[v * K + j] != kNone; j++)
        r.push_back(knn[v * K + j]);
    return r;
}

struct RefBuild
{
    std::vector<uint32_t> graph;
    uint64_t linked = 0, unreached = 0;
};

RefBuild ref_build(const std::vector<uint32_t> &knn, size_t n, size_t K, size_t degree,
                   uint32_t entry)
{
    const size_t half = (degree + 1) / 2;
    std::vector<std::vector<uint32_t>> fwd(n);
    for (size_t v = 0; v < n; v++)
    {
        const std::vector<uint32_t> cands = row_of(knn, K, v);
        std::vector<std::vector<uint32_t>> nbrs;
        for (uint32_t c : cands)
            nbrs.push_back(row_of(knn, K, c));
        fwd[v] = ref_prune(cands, nbrs, degree);
    }
    std::vector<std::vector<std::pair<size_t, uint32_t>>> rev(n); // (position given, source)
    for (size_t v = 0; v < n; v++)
        for (size_t p = 0; p < fwd[v].size(); p++)
            rev[fwd[v][p]].push_back({p, static_cast<uint32_t>(v)});
    RefBuild b;
    b.graph.assign(n * degree, kNone);
    for (size_t v = 0; v < n; v++)
    {
        std::sort(rev[v].begin(), rev[v].end());
        std::vector<uint32_t> out;
        auto add = [&](uint32_t x) {
            if (out.size() < degree && std::find(out.begin(), out.end(), x) == out.end())
                out.push_back(x);
        };
        for (size_t p = 0; p < fwd[v].size() && p < half; p++)
            add(fwd[v][p]);
        for (auto &e : rev[v])
            add(e.second);
        for (size_t p = half; p < fwd[v].size(); p++)
            add(fwd[v][p]);
        std::copy(out.begin(), out.end(), b.graph.begin() + static_cast<std::ptrdiff_t>(v * degree));
    }
    std::vector<int> indeg(n, 0);
    for (uint32_t x : b.graph)
        if (x != kNone)
            indeg[x]++;
    std::set<uint32_t> reached;
    auto walk = [&](uint32_t from) {
        std::vector<uint32_t> todo{from};
        while (!todo.empty())
        {
            const uint32_t u = todo.back();
            todo.pop_back();
            if (!reached.insert(u).second)
                continue;
            for (size_t i = 0; i < degree; i++)
                if (b.graph[u * degree + i] != kNone)
                    todo.push_back(b.graph[u * degree + i]);
        }
    };
    walk(entry);
    for (int pass = 0; pass < 4; pass++)
    {
        bool changed = false;
        for (uint32_t x = 0; x < n; x++)
        {
            if (reached.count(x))
                continue;
            for (uint32_t w : row_of(knn, K, x))
            {
                if (!reached.count(w))
                    continue;
                uint32_t *out = &b.graph[w * degree];
                long slot = -1;
                for (long p = static_cast<long>(degree) - 1; p >= 0 && slot < 0; p--)
                    if (out[p] == kNone)
                        slot = p;
                for (long p = static_cast<long>(degree) - 1; p >= static_cast<long>(half) && slot < 0; p--)
                    if (indeg[out[p]] > 1)
                        slot = p;
                if (slot < 0)
                    continue;
                if (out[slot] != kNone)
                    indeg[out[slot]]--;
                out[slot] = x;
                indeg[x]++;
                b.linked++;
                changed = true;
                walk(x);
                break;
            }
        }
        if (!changed)
            break;
    }
    b.unreached = n - reached.size();
    return b;
}

// The K nearest other points by squared L2 in double, ties by node number.
std::vector<uint32_t> knn_of_points(size_t n, size_t dim, size_t K, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(n * dim);
    for (auto &v : x)
        v = g(rng);
    std::vector<uint32_t> knn(n * K);
    for (size_t i = 0; i < n; i++)
    {
        std::vector<std::pair<double, uint32_t>> d;
        for (size_t j = 0; j < n; j++)
        {
            if (j == i)
                continue;
            double s = 0;
            for (size_t t = 0; t < dim; t++)
            {
                const double e = static_cast<double>(x[i * dim + t]) - x[j * dim + t];
                s += e * e;
            }
            d.push_back({s, static_cast<uint32_t>(j)});
        }
        std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(K), d.end());
        for (size_t k = 0; k < K; k++)
            knn[i * K + k] = d[k].second;
    }
    return knn;
}

// Lists drawn from a few hubs (distinct per row, some rows short): most nodes are named by no
// list, so the reachability pass has work, and full rows force the second-half slot choice.
std::vector<uint32_t> hub_lists(size_t n, size_t K, size_t hubs, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> knn(n * K, kNone);
    for (size_t i = 0; i < n; i++)
    {
        const size_t len = 1 + rng() % K;
        std::set<uint32_t> used{static_cast<uint32_t>(i)};
        for (size_t k = 0; k < len; k++)
        {
            uint32_t c;
            do
                c = static_cast<uint32_t>(rng() % 4 == 0 ? rng() % n : rng() % hubs);
            while (used.count(c));
            used.insert(c);
            knn[i * K + k] = c;
        }
    }
    return knn;
}

vt::ContextPtr cpu_context(int threads)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = threads;
    vs_context *ctx = nullptr;
    char err[256] = {0};
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_OK) << err;
    return vt::ContextPtr(ctx);
}

void expect_build(const std::vector<uint32_t> &knn, size_t n, size_t K, size_t degree,
                  uint32_t entry, const char *what)
{
    const RefBuild want = ref_build(knn, n, K, degree, entry);
    for (int threads : {1, 3})
    {
        vt::ContextPtr ctx = cpu_context(threads);
        std::vector<uint32_t> got(n * degree, 7);
        vs_graph_build_info info{};
        ASSERT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), n, K, degree, entry, got.data(), &info),
                  VS_OK)
            << vs_last_error(ctx.get());
        size_t differ = 0;
        for (size_t i = 0; i < n * degree; i++)
            differ += got[i] != want.graph[i];
        EXPECT_EQ(differ, 0u) << what << ", " << threads << " threads: slots unlike the reference";
        EXPECT_EQ(info.linked, want.linked) << what;
        EXPECT_EQ(info.unreached, want.unreached) << what;
        EXPECT_GE(info.prune_seconds, 0.0);
        for (size_t v = 0; v < n; v++)
        {
            std::set<uint32_t> seen;
            for (size_t i = 0; i < degree; i++)
            {
                const uint32_t x = got[v * degree + i];
                if (x == kNone)
                    continue;
                ASSERT_LT(x, n);
                ASSERT_NE(x, v) << what << ": a self loop";
                ASSERT_TRUE(seen.insert(x).second) << what << ": node " << v << " names " << x << " twice";
            }
        }
    }
}

TEST(GraphBuild, PruneEqualsReference)
{
    std::mt19937_64 rng(5);
    for (int t = 0; t < 200; t++)
    {
        const size_t m = rng() % 40, width = 1 + rng() % 48, degree = 1 + rng() % 24;
        std::vector<uint32_t> cands;
        std::set<uint32_t> used;
        while (cands.size() < m)
        {
            const uint32_t c = static_cast<uint32_t>(rng() % 100);
            if (used.insert(c).second)
                cands.push_back(c);
        }
        std::vector<std::vector<uint32_t>> nbrs(m);
        std::vector<uint32_t> flat(std::max<size_t>(m, 1) * width, kNone);
        for (size_t j = 0; j < m; j++)
        {
            const size_t len = rng() % (width + 1);
            for (size_t r = 0; r < len; r++)
            {
                // mostly other candidates, so that detours are common
                const uint32_t u = rng() % 3 ? cands[rng() % m] : static_cast<uint32_t>(rng() % 100);
                flat[j * width + r] = u;
                nbrs[j].push_back(u);
            }
        }
        // the reference reads whole lists; the rule reads positions below min(width, m) only,
        // which is the same (a detour needs r < i < m)
        const std::vector<uint32_t> want = ref_prune(cands, nbrs, degree);
        std::vector<uint32_t> got(degree, kNone);
        const int nout = vs_graph_prune(cands.data(), m, flat.data(), width, degree, got.data());
        ASSERT_EQ(nout, static_cast<int>(want.size())) << "case " << t;
        for (int i = 0; i < nout; i++)
            ASSERT_EQ(got[i], want[i]) << "case " << t << ", slot " << i;
    }
}

TEST(GraphBuild, EdgesOfPointKnnEqualReference)
{
    const size_t n = 1500, K = 16;
    const std::vector<uint32_t> knn = knn_of_points(n, 6, K, 11);
    expect_build(knn, n, K, 8, 0, "points, degree 8");
    expect_build(knn, n, K, 5, 17, "points, degree 5");
    expect_build(knn, n, K, 24, 3, "points, degree 24 > K");
}

TEST(GraphBuild, ReachabilityLinksEqualReference)
{
    const size_t n = 3000, K = 10;
    const std::vector<uint32_t> knn = hub_lists(n, K, 40, 3);
    const RefBuild want = ref_build(knn, n, K, 6, 0);
    ASSERT_GT(want.linked, 100u) << "the lists should leave many nodes to link";
    expect_build(knn, n, K, 6, 0, "hub lists, degree 6");
    expect_build(knn, n, K, 3, 5, "hub lists, degree 3");
}

TEST(GraphBuild, ArgumentsCancelAndBackends)
{
    vt::ContextPtr ctx = cpu_context(2);
    std::vector<uint32_t> knn = {1, 2, 0, 2, 0, 1}, out(3 * 2);
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 3, 2, 2, 3, out.data(), nullptr),
              VS_INVALID_ARGUMENT); // entry out of range
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 3, 2, 0, 0, out.data(), nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), nullptr, 3, 2, 2, 0, out.data(), nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_graph_build_edges(nullptr, knn.data(), 3, 2, 2, 0, out.data(), nullptr),
              VS_INVALID_ARGUMENT);
    knn[3] = 9; // a node number out of range
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 3, 2, 2, 0, out.data(), nullptr),
              VS_INVALID_ARGUMENT);
    knn[3] = 2;
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 3, 2, 2, 0, out.data(), nullptr), VS_OK);
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 0, 2, 2, 0, nullptr, nullptr), VS_OK);
    std::vector<uint32_t> one(4, 7); // one node, no neighbours (knn_width 0): an empty list
    EXPECT_EQ(vs_graph_build_edges(ctx.get(), knn.data(), 1, 0, 4, 0, one.data(), nullptr), VS_OK);
    EXPECT_EQ(one, std::vector<uint32_t>(4, kNone));
    EXPECT_EQ(vs_graph_prune(nullptr, 0, nullptr, 4, 4, nullptr), 0);

    // a cancel asked for before the call ends it with VS_CANCELLED
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = 2;
    o.cancel = [](void *) { return 1; };
    vs_context *cancelled = nullptr;
    char err[256] = {0};
    ASSERT_EQ(vs_context_create(&o, &cancelled, err, sizeof err), VS_OK) << err;
    vt::ContextPtr cc(cancelled);
    const std::vector<uint32_t> big = knn_of_points(300, 4, 8, 2);
    std::vector<uint32_t> bout(300 * 4);
    EXPECT_EQ(vs_graph_build_edges(cc.get(), big.data(), 300, 8, 4, 0, bout.data(), nullptr),
              VS_CANCELLED);

    // the build's graph is made where the kNN lists are, on the CPU backend
    std::string why;
    vt::ContextPtr cuda = vt::make_context("cuda", &why);
    if (cuda)
        EXPECT_EQ(vs_graph_build_edges(cuda.get(), knn.data(), 3, 2, 2, 0, out.data(), nullptr),
                  VS_UNSUPPORTED);
}

} // namespace
