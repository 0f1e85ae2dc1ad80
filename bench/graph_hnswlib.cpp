// The hnswlib baseline of the vs_graph benchmarks: builds an HNSW index (M = 16, ef_construction =
// 200, every hardware thread) over the rows of a file, then for each ef searches the queries.
// hnswlib is Debian's libhnswlib-dev (header-only).
//
//   graph_hnswlib ROWS QUERIES EF...                      (bench/graph-sweep)
//       recall@10 against a brute force with double accumulation, and single-thread latency
//   graph_hnswlib --batch --out PREFIX ROWS QUERIES EF...  (bench/harness.py --graph)
//       the queries as one batch spread over every hardware thread; per ef the 10 ids (row
//       numbers from 0) and squared distances of each query go to PREFIX.ef<EF>.bin (nq x 10
//       int64, then nq x 10 float32) and a line "ef EF: S s" to stdout; the caller computes recall
//
// A file is .fvecs (per row an int32 dimension, then the floats) when its name ends so, else one
// vector per line as PostgreSQL prints them: [x1,x2,...].
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

struct Vectors
{
    size_t n = 0, dim = 0;
    std::vector<float> x; // n x dim
    const float *row(size_t i) const { return x.data() + i * dim; }
};

bool ends_with(const std::string &s, const std::string &tail)
{
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Vectors read_fvecs(const char *path)
{
    Vectors v;
    std::ifstream in(path, std::ios::binary);
    int32_t d = 0;
    if (!in.read(reinterpret_cast<char *>(&d), sizeof(d)) || d <= 0)
        return v;
    in.seekg(0, std::ios::end);
    const size_t bytes = static_cast<size_t>(in.tellg()), rec = sizeof(float) * (1 + d);
    if (bytes % rec != 0)
        return v;
    v.dim = static_cast<size_t>(d);
    v.n = bytes / rec;
    v.x.resize(v.n * v.dim);
    in.seekg(0);
    std::vector<float> buf(1 + v.dim);
    for (size_t i = 0; i < v.n; i++)
    {
        in.read(reinterpret_cast<char *>(buf.data()), static_cast<std::streamsize>(rec));
        std::memcpy(&v.x[i * v.dim], buf.data() + 1, sizeof(float) * v.dim);
    }
    if (!in)
        v.n = 0;
    return v;
}

Vectors read_text(const char *path)
{
    Vectors v;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line))
    {
        for (char &c : line)
            if (c == '[' || c == ']' || c == ',')
                c = ' ';
        std::istringstream ss(line);
        size_t got = 0;
        float x;
        while (ss >> x)
        {
            v.x.push_back(x);
            got++;
        }
        if (got == 0)
            continue;
        if (v.dim == 0)
            v.dim = got;
        if (got != v.dim)
        {
            v.n = 0;
            return v;
        }
        v.n++;
    }
    return v;
}

Vectors read_vectors(const char *path)
{
    return ends_with(path, ".fvecs") ? read_fvecs(path) : read_text(path);
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// fn(i) for i in [0, n) on `threads` threads, items handed out one at a time
template <typename F>
void parallel(size_t n, unsigned threads, F fn)
{
    std::atomic<size_t> next(0);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; t++)
        pool.emplace_back([&] {
            for (size_t i; (i = next++) < n;)
                fn(i);
        });
    for (auto &t : pool)
        t.join();
}

// the exact k nearest rows of each query: double accumulation, ties by row number
std::vector<std::vector<size_t>> brute_force(const Vectors &rows, const Vectors &queries, size_t k,
                                             unsigned threads)
{
    std::vector<std::vector<size_t>> truth(queries.n);
    parallel(queries.n, threads, [&](size_t q) {
        std::vector<std::pair<double, size_t>> d(rows.n);
        for (size_t i = 0; i < rows.n; i++)
        {
            double s = 0;
            for (size_t j = 0; j < rows.dim; j++)
            {
                const double t = static_cast<double>(rows.row(i)[j]) - queries.row(q)[j];
                s += t * t;
            }
            d[i] = {s, i};
        }
        const size_t kk = std::min(k, rows.n);
        std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(kk), d.end());
        for (size_t i = 0; i < kk; i++)
            truth[q].push_back(d[i].second);
    });
    return truth;
}

int usage(const char *argv0)
{
    std::fprintf(stderr, "usage: %s [--batch] [--out PREFIX] ROWS QUERIES EF...\n", argv0);
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    bool batch = false;
    const char *out = nullptr;
    int a = 1;
    for (; a < argc && std::strncmp(argv[a], "--", 2) == 0; a++)
    {
        if (std::strcmp(argv[a], "--batch") == 0)
            batch = true;
        else if (std::strcmp(argv[a], "--out") == 0 && a + 1 < argc)
            out = argv[++a];
        else
            return usage(argv[0]);
    }
    if (argc - a < 3)
        return usage(argv[0]);
    const Vectors rows = read_vectors(argv[a]), queries = read_vectors(argv[a + 1]);
    if (rows.n == 0 || queries.n == 0 || rows.dim != queries.dim)
    {
        std::fprintf(stderr, "%s, %s: no vectors read, or dimensions differ\n", argv[a], argv[a + 1]);
        return 1;
    }
    const size_t n = rows.n, nq = queries.n, dim = rows.dim, k = 10;
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());

    hnswlib::L2Space space(dim);
    hnswlib::HierarchicalNSW<float> index(&space, n, 16, 200, 100);
    auto t0 = std::chrono::steady_clock::now();
    index.addPoint(rows.row(0), 0);
    parallel(n - 1, threads, [&](size_t i) { index.addPoint(rows.row(i + 1), i + 1); });
    const double build_s = seconds_since(t0);
    std::printf("hnswlib 0.6.2 (M 16, ef_construction 200, %u threads): build %.2f s, %zu rows x %zu\n",
                threads, build_s, n, dim);
    std::fflush(stdout);

    std::vector<std::vector<size_t>> truth;
    if (!out)
    {
        truth = brute_force(rows, queries, k, threads);
        std::printf("\n| ef | recall@10 | ms/query | QPS (1 thread) |\n| --- | --- | --- | --- |\n");
    }
    std::vector<int64_t> ids(nq * k);
    std::vector<float> dists(nq * k);
    for (int e = a + 2; e < argc; e++)
    {
        const size_t ef = static_cast<size_t>(std::atol(argv[e]));
        index.setEf(std::max(ef, k));
        std::fill(ids.begin(), ids.end(), -1);
        std::fill(dists.begin(), dists.end(), 0.0f);
        auto one = [&](size_t q) {
            auto res = index.searchKnn(queries.row(q), k);
            for (size_t i = res.size(); i-- > 0; res.pop()) // farthest on top
            {
                ids[q * k + i] = static_cast<int64_t>(res.top().second);
                dists[q * k + i] = res.top().first;
            }
        };
        t0 = std::chrono::steady_clock::now();
        if (batch)
            parallel(nq, threads, one);
        else
            for (size_t q = 0; q < nq; q++)
                one(q);
        const double s = seconds_since(t0);
        if (out)
        {
            const std::string path = std::string(out) + ".ef" + std::to_string(ef) + ".bin";
            std::ofstream f(path, std::ios::binary);
            f.write(reinterpret_cast<const char *>(ids.data()),
                    static_cast<std::streamsize>(sizeof(int64_t) * ids.size()));
            f.write(reinterpret_cast<const char *>(dists.data()),
                    static_cast<std::streamsize>(sizeof(float) * dists.size()));
            if (!f)
            {
                std::fprintf(stderr, "%s: write failed\n", path.c_str());
                return 1;
            }
            std::printf("ef %zu: %.6f s\n", ef, s);
            std::fflush(stdout);
            continue;
        }
        size_t hits = 0;
        for (size_t q = 0; q < nq; q++)
            for (size_t i = 0; i < k; i++)
                hits += std::count(truth[q].begin(), truth[q].end(), static_cast<size_t>(ids[q * k + i]));
        std::printf("| %zu | %.4f | %.3f | %.0f |\n", ef, static_cast<double>(hits) / static_cast<double>(nq * k),
                    s * 1000 / static_cast<double>(nq), static_cast<double>(nq) / s);
    }
    return 0;
}
