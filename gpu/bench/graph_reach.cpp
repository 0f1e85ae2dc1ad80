// The vs_graph build on the engine alone, and where its searches cannot go: the CPU twin of a
// CREATE INDEX ... USING vs_graph (extension/graphbuild.c) over a harness dataset, then what the
// graph's connectivity does to recall.
//
//   vsearch_graph_reach DIR [--degree 32] [--build-degree 64] [--efs 10,16,32,64,128,256]
//                           [--nq 10000] [--threads 0] [--knn-cache FILE] [--seeds N]
//                           [--cover on|off] [--seed-rule kmeans|kcenter]
//                           [--link-width W] [--links L] [--cover-first on|off]
//
// DIR holds base.fvecs and query.fvecs (bench/datasets.py prepare NAME prints it).  The build is
// the index's: the exact build_degree nearest rows of every row (vs_knn, squared L2), the entry
// (the row nearest the mean), the seeds (the rows nearest to 2 sqrt(n), at most 1024, k-means
// centroids: k-means++, the index's fixed seed, 64 sample rows per centroid, 10 iterations), then
// vs_graph_build_edges, then vs_graph_link_unfound from the entry and the seeds (--link-width W,
// the width of its searches, 0: none, the build before 2026-11-26's navigability pass; --links L:
// in-edges per unfound node; --cover-first on: the seeds completed for islands before it too, as
// the index's build does), then the seeds completed by vs_graph_cover_starts (--cover off: the k-means
// seeds as they are, the index's build before 2026-11-26; --seeds N: N centroids instead of
// 2 sqrt(n), e.g. to give a smaller set 1M rows' ratio of seeds to clusters; --seed-rule kcenter:
// greedy farthest rows of a stride sample of 64 rows per seed instead of the k-means, an
// experiment, not the index's rule).  Reported: the build's linked / unreached counts, the weakly and strongly
// connected components of the graph, how many nodes a walk from the entry and from all the start
// nodes reaches, the queries whose true nearest row no start reaches, and recall@10 (against
// vs_knn) per beam width with vs_graph_knn from the index's start nodes, split by whether the
// query's nearest row is reachable.  --knn-cache FILE keeps the kNN lists between runs (written
// when missing, read when present and of the right size).
#include "vsearch/engine.h"
#include "vsearch/graph.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kIndexSeed = 20251125; // VS_GRAPH_SEED (extension/graph.h)
constexpr size_t kMaxSeeds = 1024;        // VS_GRAPH_DEFAULT_MAX_SEEDS
constexpr size_t kCoverSeeds = 2000;      // VS_GRAPH_MAX_SEEDS

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the process, all threads (on a shared machine a steadier measure of a step's
// work than its wall time)
double cpu_now()
{
    return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

void check(vs_status st, vs_context *ctx, const char *what)
{
    if (st != VS_OK)
    {
        std::fprintf(stderr, "%s: %s %s\n", what, vs_status_name(st), ctx ? vs_last_error(ctx) : "");
        std::exit(1);
    }
}

std::vector<float> read_fvecs(const std::string &path, size_t &d, size_t limit)
{
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
    {
        std::perror(path.c_str());
        std::exit(1);
    }
    int32_t dim = 0;
    if (std::fread(&dim, 4, 1, f) != 1 || dim <= 0)
    {
        std::fprintf(stderr, "%s: bad header\n", path.c_str());
        std::exit(1);
    }
    std::fseek(f, 0, SEEK_END);
    const size_t rows = static_cast<size_t>(std::ftell(f)) / (4 * (static_cast<size_t>(dim) + 1));
    std::fseek(f, 0, SEEK_SET);
    const size_t n = std::min(rows, limit);
    d = static_cast<size_t>(dim);
    std::vector<float> x(n * d), rec(d + 1);
    for (size_t i = 0; i < n; i++)
    {
        if (std::fread(rec.data(), 4, d + 1, f) != d + 1)
        {
            std::fprintf(stderr, "%s: short read\n", path.c_str());
            std::exit(1);
        }
        std::memcpy(&x[i * d], &rec[1], 4 * d);
    }
    std::fclose(f);
    return x;
}

std::vector<size_t> parse_list(const char *s)
{
    std::vector<size_t> v;
    for (const char *p = s; *p;)
    {
        char *end;
        v.push_back(std::strtoull(p, &end, 10));
        p = *end ? end + 1 : end;
    }
    return v;
}

// Nodes a walk from the given starts reaches.
std::vector<uint8_t> reach(const std::vector<uint32_t> &g, size_t n, size_t degree,
                           const std::vector<uint32_t> &starts)
{
    std::vector<uint8_t> seen(n, 0);
    std::vector<uint32_t> stack;
    for (uint32_t s : starts)
        if (s < n && !seen[s])
        {
            seen[s] = 1;
            stack.push_back(s);
        }
    while (!stack.empty())
    {
        const uint32_t u = stack.back();
        stack.pop_back();
        for (size_t i = 0; i < degree; i++)
        {
            const uint32_t v = g[u * degree + i];
            if (v != VS_GRAPH_NONE && !seen[v])
            {
                seen[v] = 1;
                stack.push_back(v);
            }
        }
    }
    return seen;
}

uint32_t find(std::vector<uint32_t> &p, uint32_t x)
{
    while (p[x] != x)
        x = p[x] = p[p[x]];
    return x;
}

// Weakly connected components: the component (its smallest node's root) of every node.
std::vector<uint32_t> weak_components(const std::vector<uint32_t> &g, size_t n, size_t degree)
{
    std::vector<uint32_t> p(n);
    std::iota(p.begin(), p.end(), 0u);
    for (size_t u = 0; u < n; u++)
        for (size_t i = 0; i < degree; i++)
        {
            const uint32_t v = g[u * degree + i];
            if (v == VS_GRAPH_NONE)
                continue;
            const uint32_t a = find(p, static_cast<uint32_t>(u)), b = find(p, v);
            if (a != b)
                p[std::max(a, b)] = std::min(a, b);
        }
    for (size_t u = 0; u < n; u++)
        p[u] = find(p, static_cast<uint32_t>(u));
    return p;
}

// Strongly connected components (Tarjan's, without recursion): the number of them and the size
// of the largest.
void strong_components(const std::vector<uint32_t> &g, size_t n, size_t degree, size_t &count,
                       size_t &largest)
{
    const uint32_t unset = VS_GRAPH_NONE;
    std::vector<uint32_t> index(n, unset), low(n), edge(n, 0), stack, call;
    std::vector<uint8_t> on(n, 0);
    uint32_t next = 0;
    count = largest = 0;
    for (size_t root = 0; root < n; root++)
    {
        if (index[root] != unset)
            continue;
        call.push_back(static_cast<uint32_t>(root));
        index[root] = low[root] = next++;
        stack.push_back(static_cast<uint32_t>(root));
        on[root] = 1;
        while (!call.empty())
        {
            const uint32_t u = call.back();
            if (edge[u] < degree)
            {
                const uint32_t v = g[static_cast<size_t>(u) * degree + edge[u]++];
                if (v == VS_GRAPH_NONE)
                    continue;
                if (index[v] == unset)
                {
                    index[v] = low[v] = next++;
                    stack.push_back(v);
                    on[v] = 1;
                    call.push_back(v);
                }
                else if (on[v])
                    low[u] = std::min(low[u], index[v]);
                continue;
            }
            call.pop_back();
            if (!call.empty())
                low[call.back()] = std::min(low[call.back()], low[u]);
            if (low[u] == index[u])
            {
                size_t size = 0;
                uint32_t w;
                do
                {
                    w = stack.back();
                    stack.pop_back();
                    on[w] = 0;
                    size++;
                } while (w != u);
                count++;
                largest = std::max(largest, size);
            }
        }
    }
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2)
    {
        std::fprintf(stderr, "usage: %s DIR [--degree 32] [--build-degree 64] [--efs LIST] "
                             "[--nq N] [--threads T] [--knn-cache FILE]\n", argv[0]);
        return 2;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // progress shows in a log
    const std::string dir = argv[1];
    size_t degree = 32, K = 0, nq_limit = SIZE_MAX;
    int threads = 0;
    std::vector<size_t> efs = {10, 16, 32, 64, 128, 256};
    std::string cache;
    size_t nseeds = 0, link_width = 0, links = 2;
    bool cover = true, kcenter = false, cover_first = false;
    for (int i = 2; i < argc; i++)
    {
        const std::string a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (a == "--degree")
            degree = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--build-degree")
            K = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--efs")
            efs = parse_list(v), i++;
        else if (a == "--nq")
            nq_limit = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--threads")
            threads = std::atoi(v), i++;
        else if (a == "--seeds")
            nseeds = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--seed-rule")
            kcenter = std::string(v) == "kcenter", i++;
        else if (a == "--cover-first")
            cover_first = std::string(v) != "off", i++;
        else if (a == "--cover")
            cover = std::string(v) != "off", i++;
        else if (a == "--link-width")
            link_width = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--links")
            links = std::strtoull(v, nullptr, 10), i++;
        else if (a == "--knn-cache")
            cache = v, i++;
        else
        {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (K == 0)
        K = 2 * degree;

    size_t d = 0, dq = 0;
    std::vector<float> x = read_fvecs(dir + "/base.fvecs", d, SIZE_MAX);
    std::vector<float> q = read_fvecs(dir + "/query.fvecs", dq, nq_limit);
    const size_t n = x.size() / d, nq = q.size() / d;
    if (dq != d)
    {
        std::fprintf(stderr, "base and query dimensions differ\n");
        return 1;
    }
    std::printf("data: %zu x %zu, %zu queries; degree %zu, build_degree %zu\n", n, d, nq, degree, K);

    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = threads;
    vs_context *ctx = nullptr;
    char err[256];
    check(vs_context_create(&o, &ctx, err, sizeof err), nullptr, "context");
    vs_dataset *ds = nullptr;
    check(vs_dataset_create(ctx, d, VS_DTYPE_F32, &ds), ctx, "dataset");
    {
        std::vector<int64_t> ids(n);
        std::iota(ids.begin(), ids.end(), int64_t{0});
        check(vs_dataset_add(ctx, ds, x.data(), ids.data(), n), ctx, "dataset_add");
    }

    // the kNN lists (nearest other rows first), as the index's build takes them
    std::vector<uint32_t> knn(n * K, VS_GRAPH_NONE);
    bool have = false;
    if (!cache.empty())
        if (FILE *f = std::fopen(cache.c_str(), "rb"))
        {
            have = std::fread(knn.data(), 4, n * K, f) == n * K && std::fgetc(f) == EOF;
            std::fclose(f);
        }
    double t0 = now();
    if (!have)
    {
        const size_t chunk = 4096, k = std::min(n, K + 1);
        std::vector<int64_t> ids(chunk * k);
        std::vector<float> dist(chunk * k);
        for (size_t q0 = 0; q0 < n; q0 += chunk)
        {
            const size_t c = std::min(chunk, n - q0);
            check(vs_knn(ctx, ds, x.data() + q0 * d, c, k, VS_METRIC_L2SQ, nullptr, ids.data(),
                         dist.data(), nullptr), ctx, "knn");
            for (size_t i = 0; i < c; i++)
            {
                size_t m = 0;
                for (size_t j = 0; j < k && m < K; j++)
                {
                    const int64_t id = ids[i * k + j];
                    if (id >= 0 && static_cast<size_t>(id) != q0 + i)
                        knn[(q0 + i) * K + m++] = static_cast<uint32_t>(id);
                }
            }
        }
        std::printf("knn lists: %.1f s\n", now() - t0);
        if (!cache.empty())
            if (FILE *f = std::fopen(cache.c_str(), "wb"))
            {
                std::fwrite(knn.data(), 4, n * K, f);
                std::fclose(f);
            }
    }

    // the entry and the seeds, as compute_knn places them
    std::vector<uint32_t> starts;
    {
        std::vector<double> sum(d, 0.0);
        std::vector<float> mean(d);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < d; j++)
                sum[j] += x[i * d + j];
        for (size_t j = 0; j < d; j++)
            mean[j] = static_cast<float>(sum[j] / double(n));
        int64_t id;
        float dist;
        check(vs_knn(ctx, ds, mean.data(), 1, 1, VS_METRIC_L2SQ, nullptr, &id, &dist, nullptr),
              ctx, "entry");
        starts.push_back(static_cast<uint32_t>(id));
        const size_t nc = nseeds ? std::min(nseeds, n)
                                : std::min({kMaxSeeds, n, static_cast<size_t>(std::ceil(2.0 * std::sqrt(double(n))))});
        vs_kmeans_params kp;
        vs_kmeans_params_init(&kp);
        kp.k = nc;
        kp.iterations = 10;
        kp.init = VS_KMEANS_INIT_PLUSPLUS;
        kp.seed = kIndexSeed;
        kp.sample_size = std::min(n, nc * 64);
        kp.metric = VS_METRIC_L2SQ;
        std::vector<float> cent(nc * d);
        t0 = now();
        if (kcenter)
        {
            // greedy farthest point (k-center) over a stride sample of 64 rows per seed, from the
            // entry: every well-separated cluster gets a seed before any gets a second
            const size_t S = std::min(n, nc * 64), stride = n / S;
            std::vector<double> mind(S, INFINITY);
            size_t c = starts[0];
            for (size_t t = 0; t < nc; t++)
            {
                const float *cv = x.data() + c * d;
                std::memcpy(&cent[t * d], cv, 4 * d);
                size_t far = 0;
                for (size_t i = 0; i < S; i++)
                {
                    const float *xv = x.data() + i * stride * d;
                    double e = 0;
                    for (size_t j = 0; j < d; j++)
                        e += double(xv[j] - cv[j]) * double(xv[j] - cv[j]);
                    mind[i] = std::min(mind[i], e);
                    if (mind[i] > mind[far])
                        far = i;
                }
                c = far * stride;
            }
        }
        else
            check(vs_kmeans(ctx, x.data(), n, d, &kp, cent.data(), nullptr), ctx, "kmeans");
        std::vector<int64_t> ids(nc);
        std::vector<float> dd(nc);
        check(vs_knn(ctx, ds, cent.data(), nc, 1, VS_METRIC_L2SQ, nullptr, ids.data(), dd.data(),
                     nullptr), ctx, "seeds");
        for (size_t c = 0; c < nc; c++)
            if (ids[c] >= 0 && std::find(starts.begin(), starts.end(),
                                         static_cast<uint32_t>(ids[c])) == starts.end())
                starts.push_back(static_cast<uint32_t>(ids[c]));
        std::printf("seeds: %zu centroids, %zu distinct start nodes with the entry (%.1f s)\n", nc,
                    starts.size(), now() - t0);
    }

    std::vector<uint32_t> g(n * degree);
    vs_graph_build_info info{};
    t0 = now();
    double c0 = cpu_now();
    check(vs_graph_build_edges(ctx, knn.data(), n, K, degree, starts[0], g.data(), &info), ctx,
          "build_edges");
    std::printf("build_edges: %.2f s (prune %.2f), cpu %.2f s; linked %llu, unreached from the "
                "entry %llu\n", now() - t0, info.prune_seconds, cpu_now() - c0,
                (unsigned long long) info.linked, (unsigned long long) info.unreached);

    // the seeds completed so that the start nodes reach every island (the index's cover_starts)
    auto cover_starts = [&]() {
        std::vector<uint32_t> seeds(starts.begin() + 1, starts.end()), out(kCoverSeeds);
        uint64_t left = 0;
        t0 = now();
        c0 = cpu_now();
        const int m = vs_graph_cover_starts(g.data(), n, degree, x.data(), d, starts.data(), 1,
                                            seeds.data(), seeds.size(), out.data(), kCoverSeeds,
                                            &left);
        if (m < 0)
        {
            std::fprintf(stderr, "vs_graph_cover_starts failed\n");
            std::exit(1);
        }
        size_t kept = 0;
        for (int i = 0; i < m; i++)
            kept += std::find(seeds.begin(), seeds.end(), out[i]) != seeds.end();
        std::printf("cover_starts: %d seeds (%zu of the previous seeds, %zu for islands), %llu "
                    "nodes still unreached (%.2f s, cpu %.2f s)\n", m, kept, m - kept,
                    (unsigned long long) left, now() - t0, cpu_now() - c0);
        starts.resize(1);
        starts.insert(starts.end(), out.begin(), out.begin() + m);
    };
    if (cover && cover_first)
        cover_starts();

    if (link_width > 0)
    {
        vs_graph_link_params lp{VS_METRIC_L2SQ, link_width, links, starts.data(), starts.size()};
        vs_graph_link_info li{};
        t0 = now();
        c0 = cpu_now();
        check(vs_graph_link_unfound(ctx, g.data(), n, degree, x.data(), d, &lp, &li), ctx,
              "link_unfound");
        std::printf("link_unfound (width %zu, links %zu): %.2f s, cpu %.2f s; %llu nodes unfound, "
                    "%llu edges added\n", link_width, links, now() - t0, cpu_now() - c0,
                    (unsigned long long) li.unfound,
                    (unsigned long long) li.linked);
        // what a second pass would find: the nodes still unfound (on a copy)
        std::vector<uint32_t> g2(g);
        check(vs_graph_link_unfound(ctx, g2.data(), n, degree, x.data(), d, &lp, &li), ctx,
              "link_unfound");
        std::printf("link_unfound again: %llu nodes unfound at width %zu\n",
                    (unsigned long long) li.unfound, link_width);
    }

    if (cover)
        cover_starts();
    {
        // FNV-1a of the lists and the start nodes: two builds made the same graph when it matches
        uint64_t h = 1469598103934665603ull;
        auto mix = [&](const std::vector<uint32_t> &a) {
            for (uint32_t w : a)
                for (int b = 0; b < 4; b++)
                    h = (h ^ ((w >> (8 * b)) & 0xFF)) * 1099511628211ull;
        };
        mix(g);
        mix(starts);
        std::printf("graph hash: %016llx\n", (unsigned long long) h);
        std::fflush(stdout);
    }

    // connectivity
    {
        std::vector<uint32_t> wc = weak_components(g, n, degree);
        std::vector<size_t> size(n, 0);
        for (uint32_t c : wc)
            size[c]++;
        size_t count = 0, largest = 0, singles = 0;
        for (size_t c = 0; c < n; c++)
            if (size[c])
            {
                count++;
                largest = std::max(largest, size[c]);
                singles += size[c] == 1;
            }
        size_t scc = 0, scc_largest = 0;
        strong_components(g, n, degree, scc, scc_largest);
        std::vector<uint8_t> from_entry = reach(g, n, degree, {starts[0]});
        std::vector<uint8_t> from_starts = reach(g, n, degree, starts);
        const size_t re = std::count(from_entry.begin(), from_entry.end(), 1);
        const size_t rs = std::count(from_starts.begin(), from_starts.end(), 1);
        std::printf("weak components: %zu (largest %zu nodes, %zu single nodes); strong "
                    "components: %zu (largest %zu)\n", count, largest, singles, scc, scc_largest);
        std::printf("reached: from the entry %zu of %zu (%.4f), from all %zu starts %zu (%.4f)\n",
                    re, n, double(re) / n, starts.size(), rs, double(rs) / n);

        // the queries' true neighbours
        const size_t k = 10;
        std::vector<int64_t> truth(nq * k);
        std::vector<float> td(nq * k);
        check(vs_knn(ctx, ds, q.data(), nq, k, VS_METRIC_L2SQ, nullptr, truth.data(), td.data(),
                     nullptr), ctx, "truth");
        size_t nn_unreached = 0, top10_unreached = 0;
        std::vector<uint8_t> ok(nq);
        for (size_t i = 0; i < nq; i++)
        {
            ok[i] = from_starts[truth[i * k]];
            nn_unreached += !ok[i];
            for (size_t r = 0; r < k; r++)
                top10_unreached += !from_starts[truth[i * k + r]];
        }
        std::printf("queries whose nearest row no start reaches: %zu of %zu; of the true top-10 "
                    "rows %zu of %zu (recall bound %.4f)\n", nn_unreached, nq, top10_unreached,
                    nq * k, 1.0 - double(top10_unreached) / double(nq * k));

        vs_graph_arrays a{};
        a.n = n;
        a.dim = d;
        a.degree = degree;
        a.vectors = x.data();
        a.neighbors = g.data();
        vs_graph *go = nullptr;
        check(vs_graph_create(ctx, &a, &go), ctx, "graph_create");
        std::vector<int64_t> ids(nq * k);
        std::vector<float> dist(nq * k);
        for (size_t ef : efs)
        {
            vs_graph_search_params p{VS_METRIC_L2SQ, ef, starts.data(), starts.size()};
            t0 = now();
            check(vs_graph_knn(ctx, go, &p, q.data(), nq, k, ids.data(), dist.data(), nullptr),
                  ctx, "graph_knn");
            const double sec = now() - t0;
            size_t hit = 0, hit_ok = 0, nok = 0;
            for (size_t i = 0; i < nq; i++)
            {
                size_t h = 0;
                for (size_t r = 0; r < k; r++)
                    h += std::count(truth.begin() + i * k, truth.begin() + (i + 1) * k, ids[i * k + r]);
                hit += h;
                if (ok[i])
                    hit_ok += h, nok++;
            }
            // missed true neighbours: in the weakly connected component of the search's best
            // row, or in another one (no edge leads there from where the search went)
            size_t miss_same = 0, miss_other = 0;
            for (size_t i = 0; i < nq; i++)
                for (size_t r = 0; r < k; r++)
                {
                    const int64_t t = truth[i * k + r];
                    if (std::find(ids.begin() + i * k, ids.begin() + (i + 1) * k, t) !=
                        ids.begin() + (i + 1) * k)
                        continue;
                    (ids[i * k] >= 0 && wc[t] == wc[ids[i * k]] ? miss_same : miss_other)++;
                }
            std::printf("ef %4zu: missed true neighbours %zu in the best row's component, %zu in "
                        "another\n", ef, miss_same, miss_other);
            std::printf("ef %4zu: recall@10 %.4f (queries with a reachable nearest row: %.4f, "
                        "others %.4f), %.2f s\n", ef, double(hit) / double(nq * k),
                        nok ? double(hit_ok) / double(nok * k) : 0.0,
                        nq > nok ? double(hit - hit_ok) / double((nq - nok) * k) : 0.0, sec);
            std::fflush(stdout);
        }
        vs_graph_destroy(ctx, go);
    }
    vs_dataset_destroy(ctx, ds);
    vs_context_destroy(ctx);
    return 0;
}
