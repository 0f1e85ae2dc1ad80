// The CPU backend's blocked products (cpu/gemm.h, dot_block) against a BLAS sgemm on the shapes the
// CPU build uses: C = X R^T for nx rows of X against k rows of R, one thread each, process CPU
// time per product (median of several), GFLOP/s.  The BLAS is loaded with dlopen (default
// libopenblas.so.0; Debian's libopenblas0-pthread, run with OPENBLAS_NUM_THREADS=1), so the
// engine itself never links one.
//
// Then the memory-bandwidth bound of an exact scan: one thread reading a 60000 x 784 float array
// (Fashion-MNIST's size, larger than the caches) with the SIMD sum of squares (vs_sqnorm_f32,
// the same loads as a distance kernel), the best of 5 passes in CPU time (and wall time), GB/s.
//
// --nearest: the candidate step of nearest_rows for PQ sub-vectors (65 536 rows of d elements
// against 256 codewords, L2), the row kernel (nearest_row_candidates, a row at a time) against
// the lane kernel (nearest_lane_candidates, a row per vector lane), side by side: process CPU time
// per row (median of 5), their ratio and the mean candidates per row (the same for both).
//
//   vsearch_blas_compare [path-to-libblas-with-cblas_sgemm]
//   vsearch_blas_compare --scan-only      (the bound alone)
//   vsearch_blas_compare --nearest
#include "cpu/gemm.h"
#include "vsearch/distance.h"
#include "vsearch/rowscan.h"

#include <chrono>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

namespace {

// cblas_sgemm(CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112, ...)
using Sgemm = void (*)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                       float, float *, int);

double cpu_seconds()
{
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <typename F> double median_cpu(F &&f, int reps)
{
    std::vector<double> t;
    f(); // warm-up
    for (int r = 0; r < reps; r++)
    {
        double t0 = cpu_seconds();
        f();
        t.push_back(cpu_seconds() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

void nearest_kernels()
{
    const size_t n = 65536, k = 256;
    std::mt19937 rng(11);
    std::normal_distribution<float> g;
    std::printf("%-34s %14s %14s %8s %12s\n", "rows x d against 256 codewords", "row ns/row",
                "lanes ns/row", "ratio", "candidates");
    for (size_t d : {2, 4, 8, 14, 16})
    {
        const size_t lanes = vs::nearest_lane_rows(d);
        if (lanes == 0)
        {
            std::printf("%zu x %zu: no lane kernel for d = %zu on this CPU\n", n, d, d);
            continue;
        }
        std::vector<float> x(n * d), r(k * d);
        for (float &v : x)
            v = g(rng);
        for (float &v : r)
            v = g(rng);
        vs::PackedRows rows(r.data(), k, d, d);
        const size_t ld = rows.padded();
        std::vector<double> norms(n);
        vs::row_norms(x.data(), d, n, d, norms.data());
        const double err = vs::float_sum_error(d), rmax = rows.max_norm();
        std::vector<float> v(lanes * ld), lane_values(ld * vs::kMaxLaneRows);
        std::vector<uint32_t> cand(lanes * k);
        size_t counts[vs::kMaxLaneRows];
        double slack[vs::kMaxLaneRows];
        size_t by_row = 0, by_lanes = 0;
        const double row = median_cpu(
            [&] {
                by_row = 0;
                for (size_t i = 0; i < n; i++)
                    by_row += vs::nearest_row_candidates(
                        &x[i * d], rows, vs::NearestKind::L2,
                        vs::nearest_slack(vs::NearestKind::L2, d, err, norms[i], rmax), v.data(),
                        cand.data());
            },
            5);
        const double lane = median_cpu(
            [&] {
                by_lanes = 0;
                for (size_t i0 = 0; i0 < n; i0 += lanes)
                {
                    const size_t nr = std::min(lanes, n - i0);
                    for (size_t b = 0; b < nr; b++)
                        slack[b] = vs::nearest_slack(vs::NearestKind::L2, d, err, norms[i0 + b], rmax);
                    vs::nearest_lane_candidates(&x[i0 * d], d, nr, rows, vs::NearestKind::L2, slack,
                                                lane_values.data(), v.data(), ld, cand.data(), k,
                                                counts);
                    for (size_t b = 0; b < nr; b++)
                        by_lanes += counts[b];
                }
            },
            5);
        char what[64];
        std::snprintf(what, sizeof what, "%zu x %zu", n, d);
        std::printf("%-34s %14.1f %14.1f %8.2f %6.3f %s\n", what, row / n * 1e9, lane / n * 1e9,
                    row / lane, static_cast<double>(by_lanes) / n,
                    by_row == by_lanes ? "(same)" : "(DIFFERENT)");
    }
}

} // namespace

int main(int argc, char **argv)
{
    if (argc > 1 && std::strcmp(argv[1], "--nearest") == 0)
    {
        nearest_kernels();
        return 0;
    }
    const bool scan_only = argc > 1 && std::strcmp(argv[1], "--scan-only") == 0;
    const char *lib = argc > 1 && !scan_only ? argv[1] : "libopenblas.so.0";
    void *h = scan_only ? nullptr : dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    Sgemm sgemm = h ? reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm")) : nullptr;
    if (!sgemm && !scan_only)
        std::printf("no cblas_sgemm in %s (%s): own kernels only\n", lib, dlerror());
    struct Shape
    {
        const char *what;
        size_t nx, d, k;
    };
    const Shape shapes[] = {{"coarse k-means / list assignment (Fashion-MNIST: 245 lists)", 1020, 784, 245},
                            {"coarse, 1024 lists at d = 128", 1020, 128, 1024},
                            {"coarse, 3162 lists at d = 96 (10M x 96)", 1020, 96, 3162},
                            {"PQ sub-quantizer k-means / encoding (256 codewords, d = 14)", 1020, 14, 256},
                            {"PQ, 256 codewords, d = 4", 1020, 4, 256}};
    std::mt19937 rng(7);
    std::normal_distribution<float> g;
    if (!scan_only)
        std::printf("%-62s %12s %12s\n", "shape (nx x d against k rows)", "own GFLOP/s", "BLAS GFLOP/s");
    for (const Shape &s : shapes)
    {
        if (scan_only)
            break;
        std::vector<float> x(s.nx * s.d), r(s.k * s.d);
        for (float &v : x)
            v = g(rng);
        for (float &v : r)
            v = g(rng);
        vs::PackedRows packed(r.data(), s.k, s.d, s.d);
        std::vector<float> out(s.nx * packed.padded()), c(s.nx * s.k);
        const double flops = 2.0 * static_cast<double>(s.nx * s.d * s.k);
        const int reps = 9;
        // the packing is part of the own kernels' cost (once per k-means iteration)
        double own = median_cpu(
            [&] {
                vs::PackedRows p(r.data(), s.k, s.d, s.d);
                vs::dot_block(x.data(), s.d, s.nx, p, out.data(), p.padded());
            },
            reps);
        double blas = 0;
        if (sgemm)
            blas = median_cpu(
                [&] {
                    sgemm(101, 111, 112, static_cast<int>(s.nx), static_cast<int>(s.k),
                          static_cast<int>(s.d), 1.0f, x.data(), static_cast<int>(s.d), r.data(),
                          static_cast<int>(s.d), 0.0f, c.data(), static_cast<int>(s.k));
                },
                reps);
        char what[96];
        std::snprintf(what, sizeof what, "%s: %zu x %zu vs %zu", s.what, s.nx, s.d, s.k);
        std::printf("%-62s %12.1f %12.1f\n", what, flops / own / 1e9, sgemm ? flops / blas / 1e9 : 0.0);
    }
    // single-thread SIMD scan of Fashion-MNIST's vectors, best of 5 in CPU time (what a backend's
    // query is measured in, and what the load of a shared machine moves least) and in wall time
    {
        const size_t n = 60000, d = 784;
        std::vector<float> a(n * d);
        for (size_t i = 0; i < a.size(); i++)
            a[i] = static_cast<float>(i % 251);
        double best = 1e30, best_wall = 1e30, sink = 0;
        for (int rep = 0; rep < 5; rep++)
        {
            auto t0 = std::chrono::steady_clock::now();
            double c0 = cpu_seconds();
            for (size_t r = 0; r < n; r++)
                sink += vs_sqnorm_f32(&a[r * d], d);
            best = std::min(best, cpu_seconds() - c0);
            best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        const double bytes = static_cast<double>(n * d * sizeof(float));
        std::printf("single-thread SIMD scan of %zu x %zu floats (%.0f MB): %.2f ms of CPU time, %.1f GB/s "
                    "(wall %.2f ms) (%.0f)\n",
                    n, d, bytes / 1e6, best * 1e3, bytes / best / 1e9, best_wall * 1e3, sink > 0 ? 1.0 : 0.0);
        // The same rows laid out as vs_flat's 8 kB pages (a 24-byte page header, then items of an
        // 8-byte head and the floats: 2 a page) and searched by one query through the engine's
        // row scan, 4 pages an add as flatpages.c hands a single query's runs (the next 4 named
        // ahead): what the scan costs without PostgreSQL's pins, locks and page reads.
        const size_t page = 8192, head = 24, item = 8 + d * sizeof(float), per_page = 2;
        const size_t npages = n / per_page;
        std::vector<char> pages(npages * page);
        std::vector<int64_t> ids(n);
        for (size_t r = 0; r < n; r++)
        {
            ids[r] = static_cast<int64_t>(r);
            std::memcpy(&pages[(r / per_page) * page + head + (r % per_page) * item + 8], &a[r * d],
                        d * sizeof(float));
        }
        vs_context_options o;
        vs_context_options_init(&o);
        o.backend = VS_BACKEND_CPU;
        o.num_threads = 1;
        vs_context *ctx = nullptr;
        char err[256] = {0};
        if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
        {
            std::printf("no CPU context: %s\n", err);
            return 1;
        }
        std::vector<vs_row_block> blocks(npages);
        for (size_t p = 0; p < npages; p++)
            blocks[p] = {reinterpret_cast<const float *>(&pages[p * page + head + 8]), item, per_page,
                         &ids[p * per_page]};
        std::vector<int64_t> out_ids(10);
        std::vector<float> out_d(10);
        best = 1e30;
        for (int rep = 0; rep < 5; rep++)
        {
            double c0 = cpu_seconds();
            vs_rowscan *scan = nullptr;
            if (vs_rowscan_knn_begin(ctx, d, VS_METRIC_L2, &a[12345 * d], 1, 10, &scan) != VS_OK)
                return 1;
            for (size_t p = 0; p < npages; p += 4)
            {
                const size_t next = p + 4 < npages ? std::min<size_t>(4, npages - p - 4) : 0;
                vs_rowscan_add_ahead(ctx, scan, &blocks[p], std::min<size_t>(4, npages - p),
                                     next ? &blocks[p + 4] : nullptr, next);
            }
            vs_rowscan_knn_result(ctx, scan, out_ids.data(), out_d.data(), nullptr);
            vs_rowscan_destroy(ctx, scan);
            best = std::min(best, cpu_seconds() - c0);
        }
        std::printf("single-query row scan of the same rows in vs_flat's page layout: %.2f ms of CPU time "
                    "(nearest id %lld)\n",
                    best * 1e3, static_cast<long long>(out_ids[0]));
        vs_context_destroy(ctx);
    }
    return 0;
}
