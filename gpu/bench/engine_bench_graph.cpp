// The engine benchmark's --mode graph (gpu/bench/engine_bench.cpp has the command line and the
// other modes): the batched beam search of graph objects (vsearch/graph.h) on a graph built here
// from the exact kNN, kernels and widths side by side against the host reference.
#include "bench/engine_bench.h"
#include "vsearch/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace vs_bench {
namespace {

// The graph of --mode graph over x (n x d): kNN lists with reverse edges, degree slots per row.
std::vector<uint32_t> bench_graph(vs_context *ctx, const std::vector<float> &x, size_t n, size_t d,
                                  size_t degree)
{
    const size_t kk = std::min(n, degree + 1), half = degree / 2;
    std::vector<int64_t> nn(n * kk);
    {
        vs_dataset *ds = resident_dataset(ctx, x.data(), n, d);
        std::vector<float> nd(n * kk);
        const size_t chunk = 16384;
        for (size_t q0 = 0; q0 < n; q0 += chunk)
        {
            const size_t c = std::min(chunk, n - q0);
            check(vs_knn(ctx, ds, x.data() + q0 * d, c, kk, VS_METRIC_L2, nullptr,
                         nn.data() + q0 * kk, nd.data() + q0 * kk, nullptr),
                  ctx, "knn (graph)");
        }
        vs_dataset_destroy(ctx, ds);
    }
    std::vector<uint32_t> g(n * degree, VS_GRAPH_NONE);
    std::vector<size_t> fill(n, 0);
    auto add = [&](size_t i, int64_t j) {
        if (j < 0 || static_cast<size_t>(j) == i || fill[i] >= degree)
            return;
        for (size_t s = 0; s < fill[i]; s++)
            if (g[i * degree + s] == static_cast<uint32_t>(j))
                return;
        g[i * degree + fill[i]++] = static_cast<uint32_t>(j);
    };
    for (size_t i = 0; i < n; i++) // the nearest half
        for (size_t r = 0; r < kk && fill[i] < half; r++)
            add(i, nn[i * kk + r]);
    for (size_t i = 0; i < n; i++) // reverse edges
        for (size_t r = 0; r < kk; r++)
        {
            const int64_t j = nn[i * kk + r];
            if (j >= 0 && static_cast<size_t>(j) != i && fill[j] < degree)
                add(static_cast<size_t>(j), static_cast<int64_t>(i));
        }
    for (size_t i = 0; i < n; i++) // the rest of its own list
        for (size_t r = 0; r < kk; r++)
            add(i, nn[i * kk + r]);
    return g;
}

// Per-call timings of one kernel at one width: the answers of every pool query, and the calls'
// median (and 90th percentile) seconds.
struct GraphRun
{
    std::vector<int64_t> ids;
    std::vector<float> dist;
    double median = 0, p90 = 0;
};

// The pool q (pool x d) searched in calls of `batch` queries: one call for the whole pool (median
// of 3 after a warm-up), or each batch of a smaller size timed on its own (after one warm-up call),
// so that single-query latency is measured over distinct queries, not one query served from a
// warm cache.
GraphRun graph_run(vs_context *ctx, const vs_graph *g, const vs_graph_search_params &p,
                   const std::vector<float> &q, size_t d, size_t batch, size_t k)
{
    const size_t pool = q.size() / d, calls = pool / batch;
    GraphRun r;
    r.ids.resize(pool * k);
    r.dist.resize(pool * k);
    auto call = [&](size_t c) {
        check(vs_graph_knn(ctx, g, &p, q.data() + c * batch * d, batch, k,
                           r.ids.data() + c * batch * k, r.dist.data() + c * batch * k, nullptr),
              ctx, "graph_knn");
    };
    if (calls == 1)
    {
        r.median = r.p90 = timeit(1, 3, [&] { call(0); });
        return r;
    }
    call(0);
    std::vector<double> t;
    for (size_t c = 0; c < calls; c++)
    {
        const double t0 = now();
        call(c);
        t.push_back(now() - t0);
    }
    r.median = median(t);
    std::sort(t.begin(), t.end());
    r.p90 = t[std::min(t.size() - 1, t.size() * 9 / 10)];
    return r;
}

} // namespace

// The queries --mode graph searches for a batch size: the batch, or for batches under 1000 as
// many whole batches as make 1000 queries (single-query latency over distinct queries).
size_t graph_pool(size_t batch)
{
    return batch >= 1000 ? batch : std::max<size_t>(1, 1000 / batch) * batch;
}

// q: the query pool (a multiple of batch); batch: the queries per vs_graph_knn call.
std::vector<Row> graph_bench(vs_context *ctx, std::vector<float> x, std::vector<float> q, size_t d,
                             size_t batch, size_t degree, const std::vector<size_t> &efs,
                             const std::vector<size_t> &expands, bool on_cuda,
                             const std::vector<std::string> &kernel_list, size_t pq_m)
{
    std::vector<Row> rows;
    const size_t n = x.size() / d, nq = q.size() / d, k = 10;
    double t0 = now();
    std::vector<uint32_t> nbrs = bench_graph(ctx, x, n, d, degree);
    std::printf("graph: %zu nodes, degree %zu, built from the exact kNN in %.2f s (untimed)\n", n,
                degree, now() - t0);
    const std::vector<int64_t> truth = exact_top_k(ctx, x.data(), n, q.data(), nq, d, k);
    vs_graph_arrays a{};
    a.n = n;
    a.dim = d;
    a.degree = degree;
    a.vectors = x.data();
    a.neighbors = nbrs.data();
    // start nodes as the index places its seeds: the rows nearest to 2 sqrt(n) (at most 1024)
    // k-means centroids (a sample of 64 rows per centroid, 10 iterations)
    std::vector<uint32_t> starts;
    {
        vs_kmeans_params kp;
        vs_kmeans_params_init(&kp);
        kp.k = std::min<size_t>({n, 1024, static_cast<size_t>(2 * std::sqrt(double(n))) + 1});
        kp.iterations = 10;
        kp.seed = 7;
        kp.sample_size = std::min(n, 64 * kp.k);
        kp.metric = VS_METRIC_L2;
        std::vector<float> cent(kp.k * d);
        check(vs_kmeans(ctx, x.data(), n, d, &kp, cent.data(), nullptr), ctx, "kmeans (starts)");
        vs_dataset *ds = resident_dataset(ctx, x.data(), n, d);
        std::vector<int64_t> near(kp.k);
        std::vector<float> nd(kp.k);
        check(vs_knn(ctx, ds, cent.data(), kp.k, 1, VS_METRIC_L2, nullptr, near.data(), nd.data(),
                     nullptr),
              ctx, "knn (starts)");
        vs_dataset_destroy(ctx, ds);
        for (int64_t v : near)
            if (v >= 0 && std::find(starts.begin(), starts.end(), static_cast<uint32_t>(v)) == starts.end())
                starts.push_back(static_cast<uint32_t>(v));
    }
    std::printf("start nodes: %zu; queries: %zu in calls of %zu\n", starts.size(), nq, batch);
    vs_graph *g = nullptr;
    t0 = now();
    check(vs_graph_create(ctx, &a, &g), ctx, "graph_create");
    std::printf("graph_create: %.3f s\n", now() - t0);
    vs_graph *packed = nullptr; // --pq-m: the compressed object of the same graph
    if (pq_m > 0)
    {
        std::vector<float> center(d), codebooks(VS_GRAPH_PQ_KSUB * d);
        vs_graph_pq_train_params tp{7, 0, 0};
        t0 = now();
        check(vs_graph_pq_train(ctx, &a, pq_m, VS_METRIC_L2, &tp, center.data(), codebooks.data()),
              ctx, "graph_pq_train");
        const double train_s = now() - t0;
        const vs_graph_pq pq{pq_m, VS_METRIC_L2, center.data(), codebooks.data()};
        t0 = now();
        check(vs_graph_create_compressed(ctx, &a, &pq, &packed), ctx, "graph_create_compressed");
        vs_graph_memory mem{}, full{};
        vs_graph_get_memory(packed, &mem);
        vs_graph_get_memory(g, &full);
        std::printf("graph_create_compressed (pq m %zu): trained in %.2f s, created in %.2f s; "
                    "device %.1f MB (in-memory object %.1f MB), pinned host %.1f MB\n",
                    pq_m, train_s, now() - t0, mem.device_bytes / 1e6, full.device_bytes / 1e6,
                    mem.host_bytes / 1e6);
    }
    auto recall_of = [&](const std::vector<int64_t> &ids) {
        size_t hit = 0;
        for (size_t i = 0; i < nq; i++)
            for (size_t j = 0; j < k; j++)
                hit += std::count(truth.begin() + i * k, truth.begin() + (i + 1) * k, ids[i * k + j]);
        return double(hit) / double(nq * k);
    };
    // On CUDA the team sizes side by side (the first is the baseline): --kernels, else the one
    // VSEARCH_CUDA_GRAPH_KERNEL names (unset: the dimension's).  Each expansion after the first
    // of --expands is also compared with the first at the same width and team size.
    std::vector<std::string> kernels{""};
    const char *chosen = std::getenv("VSEARCH_CUDA_GRAPH_KERNEL");
    if (on_cuda && !kernel_list.empty())
        kernels = kernel_list;
    std::vector<double> first_expand_median(efs.size() * kernels.size(), 0);
    for (size_t expand : expands)
    for (size_t e = 0; e < efs.size(); e++)
    {
        const size_t ef = efs[e];
        vs_graph_search_params p{VS_METRIC_L2, ef, starts.data(), starts.size(), expand};
        // the reference search (host, one thread) on the first 1000 queries: its distances per
        // query, and on CUDA the answers every kernel must equal bit for bit
        const size_t nc = std::min<size_t>(nq, 1000);
        std::vector<int64_t> rid(nc * k);
        std::vector<float> rd(nc * k);
        uint64_t ndist = 0;
        if (vs_graph_search(&a, &p, q.data(), nc, k, rid.data(), rd.data(), nullptr, &ndist) != VS_OK)
        {
            std::fprintf(stderr, "vs_graph_search failed\n");
            std::exit(1);
        }
        std::printf("graph ef %4zu expand %zu: the reference measures %.0f distances per query "
                    "(%zu starts)\n",
                    ef, expand, double(ndist) / double(nc), starts.size());
        double base_median = 0;
        std::vector<int64_t> base_ids;
        std::vector<float> base_dist;
        for (size_t ki = 0; ki < kernels.size(); ki++)
        {
            const std::string &kernel = kernels[ki];
            if (!kernel.empty())
            {
                // "team+tiles": VSEARCH_CUDA_GRAPH_KERNEL, then VSEARCH_CUDA_GRAPH_STARTS
                const size_t plus = kernel.find('+');
                setenv("VSEARCH_CUDA_GRAPH_KERNEL", kernel.substr(0, plus).c_str(), 1);
                if (plus == std::string::npos)
                    unsetenv("VSEARCH_CUDA_GRAPH_STARTS");
                else
                    setenv("VSEARCH_CUDA_GRAPH_STARTS", kernel.substr(plus + 1).c_str(), 1);
            }
            GraphRun r = graph_run(ctx, g, p, q, d, batch, k);
            const double recall = recall_of(r.ids);
            std::string note = "recall@10 " + std::to_string(recall).substr(0, 6);
            char buf[200];
            std::snprintf(buf, sizeof buf, ", %.1f us per call (p90 %.1f)", r.median * 1e6,
                          r.p90 * 1e6);
            note += buf;
            if (on_cuda)
            {
                const bool same = std::equal(rid.begin(), rid.end(), r.ids.begin()) &&
                                  std::memcmp(rd.data(), r.dist.data(), nc * k * sizeof(float)) == 0;
                note += same ? ", identical to the reference: yes" : ", identical to the reference: NO";
            }
            if (base_median > 0)
            {
                const bool same = base_ids == r.ids &&
                                  std::memcmp(base_dist.data(), r.dist.data(), nq * k * sizeof(float)) == 0;
                std::snprintf(buf, sizeof buf, ", %.2fx %s's QPS, answers identical to it: %s",
                              base_median / r.median, kernels[0].c_str(), same ? "yes" : "NO");
                note += buf;
            }
            else
            {
                base_median = r.median;
                base_ids = r.ids;
                base_dist = r.dist;
            }
            double &first = first_expand_median[e * kernels.size() + ki];
            if (first > 0)
            {
                std::snprintf(buf, sizeof buf, ", %.2fx expand %zu's QPS", first / r.median,
                              expands[0]);
                note += buf;
            }
            else
                first = r.median;
            const std::string name = "graph ef=" + std::to_string(ef) +
                                     (expand > 1 ? " x" + std::to_string(expand) : "") +
                                     (kernel.empty() ? "" : " " + kernel) + " batch " +
                                     std::to_string(batch);
            std::printf("%s: %.0f QPS, %s\n", name.c_str(), double(batch) / r.median, note.c_str());
            std::fflush(stdout);
            Row row{name, r.median, double(batch) / r.median, note};
            char js[200];
            std::snprintf(js, sizeof js,
                          "\"ef\": %zu, \"expand\": %zu, \"kernel\": \"%s\", \"batch\": %zu, "
                          "\"recall10\": %.4f, \"p90_seconds\": %.6f, \"distances_per_query\": %.1f",
                          ef, expand, kernel.c_str(), batch, recall, r.p90,
                          double(ndist) / double(nc));
            row.json = js;
            rows.push_back(row);
        }
        if (chosen == nullptr || *chosen == '\0')
            unsetenv("VSEARCH_CUDA_GRAPH_KERNEL");
        else
            setenv("VSEARCH_CUDA_GRAPH_KERNEL", chosen, 1);
        if (packed)
        {
            GraphRun r = graph_run(ctx, packed, p, q, d, batch, k);
            const double recall = recall_of(r.ids);
            char note[200];
            std::snprintf(note, sizeof note,
                          "recall@10 %.4f, %.1f us per call (p90 %.1f), %.2fx the in-memory "
                          "object's QPS",
                          recall, r.median * 1e6, r.p90 * 1e6, base_median / r.median);
            const std::string name = "graph-pq m=" + std::to_string(pq_m) +
                                     " ef=" + std::to_string(ef) +
                                     (expand > 1 ? " x" + std::to_string(expand) : "") +
                                     " batch " + std::to_string(batch);
            std::printf("%s: %.0f QPS, %s\n", name.c_str(), double(batch) / r.median, note);
            std::fflush(stdout);
            Row row{name, r.median, double(batch) / r.median, note};
            char js[200];
            std::snprintf(js, sizeof js,
                          "\"ef\": %zu, \"expand\": %zu, \"pq_m\": %zu, \"batch\": %zu, "
                          "\"recall10\": %.4f, \"p90_seconds\": %.6f",
                          ef, expand, pq_m, batch, recall, r.p90);
            row.json = js;
            rows.push_back(row);
        }
    }
    if (packed)
        vs_graph_destroy(ctx, packed);
    vs_graph_destroy(ctx, g);
    return rows;
}

} // namespace vs_bench
