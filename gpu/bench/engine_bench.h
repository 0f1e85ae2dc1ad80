// What the engine benchmark's modes share (gpu/bench/engine_bench.cpp; --mode graph in
// engine_bench_graph.cpp): timing, the exit on an engine error, resident datasets, result rows.
#ifndef VSEARCH_BENCH_ENGINE_BENCH_H
#define VSEARCH_BENCH_ENGINE_BENCH_H

#include "vsearch/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace vs_bench {

inline double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Median seconds of `runs` calls after `warm` warm-ups.
inline double timeit(int warm, int runs, const std::function<void()> &f)
{
    for (int i = 0; i < warm; i++)
        f();
    std::vector<double> t;
    for (int i = 0; i < runs; i++)
    {
        double t0 = now();
        f();
        t.push_back(now() - t0);
    }
    return median(t);
}

inline void check(vs_status st, vs_context *ctx, const char *what)
{
    if (st != VS_OK)
    {
        std::fprintf(stderr, "%s failed: %s: %s\n", what, vs_status_name(st), vs_last_error(ctx));
        std::exit(1);
    }
}

// n rows of x uploaded as a dataset with ids 0 .. n - 1.
inline vs_dataset *resident_dataset(vs_context *ctx, const float *x, size_t n, size_t d)
{
    std::vector<int64_t> ids(n);
    for (size_t i = 0; i < n; i++)
        ids[i] = static_cast<int64_t>(i);
    vs_dataset *ds = nullptr;
    check(vs_dataset_create(ctx, d, VS_DTYPE_F32, &ds), ctx, "dataset_create");
    check(vs_dataset_add(ctx, ds, x, ids.data(), n), ctx, "dataset_add");
    return ds;
}

// The exact k nearest rows of x (n x d) to each of nq queries (L2, row numbers), for recall.
inline std::vector<int64_t> exact_top_k(vs_context *ctx, const float *x, size_t n, const float *q,
                                        size_t nq, size_t d, size_t k)
{
    std::vector<int64_t> ids(nq * k);
    std::vector<float> dists(nq * k);
    vs_dataset *ds = resident_dataset(ctx, x, n, d);
    check(vs_knn(ctx, ds, q, nq, k, VS_METRIC_L2, nullptr, ids.data(), dists.data(), nullptr), ctx,
          "knn");
    vs_dataset_destroy(ctx, ds);
    return ids;
}

struct Row
{
    std::string name;
    double seconds;
    double qps;
    std::string note;
    std::string json = ""; // extra fields for the --out row ("\"recall10\": 0.95, ...")
};

// --mode graph (engine_bench_graph.cpp): the queries searched for a batch size (the batch, or
// whole batches making 1000 queries) ...
size_t graph_pool(size_t batch);
// ... and the benchmark: q the query pool (a multiple of batch), batch the queries per
// vs_graph_knn call.
std::vector<Row> graph_bench(vs_context *ctx, std::vector<float> x, std::vector<float> q, size_t d,
                             size_t batch, size_t degree, const std::vector<size_t> &efs,
                             const std::vector<size_t> &expands, bool on_cuda,
                             const std::vector<std::string> &kernel_list, size_t pq_m);

} // namespace vs_bench

#endif
