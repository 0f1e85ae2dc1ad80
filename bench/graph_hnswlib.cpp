// The hnswlib baseline of bench/graph-sweep: builds an HNSW index (M = 16, ef_construction = 200,
// every hardware thread) over the rows of a text file, and for a sweep of ef reports recall@10
// against the exact answer (brute force with double accumulation) and single-thread queries per
// second.  hnswlib is Debian's libhnswlib-dev (header-only).
//   graph_hnswlib ROWS_FILE QUERIES_FILE EF...
// The files hold one vector per line as PostgreSQL prints them: [x1,x2,...].
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

static std::vector<std::vector<float>> read_vectors(const char *path)
{
    std::ifstream in(path);
    std::vector<std::vector<float>> out;
    std::string line;
    while (std::getline(in, line))
    {
        std::vector<float> v;
        for (char &c : line)
            if (c == '[' || c == ']' || c == ',')
                c = ' ';
        std::istringstream ss(line);
        float x;
        while (ss >> x)
            v.push_back(x);
        if (!v.empty())
            out.push_back(std::move(v));
    }
    return out;
}

static double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char **argv)
{
    if (argc < 4)
    {
        std::fprintf(stderr, "usage: %s ROWS_FILE QUERIES_FILE EF...\n", argv[0]);
        return 2;
    }
    const auto rows = read_vectors(argv[1]);
    const auto queries = read_vectors(argv[2]);
    if (rows.empty() || queries.empty())
    {
        std::fprintf(stderr, "no vectors read\n");
        return 1;
    }
    const size_t n = rows.size(), nq = queries.size(), dim = rows[0].size(), k = 10;

    // exact answer: double accumulation, ties by row number
    std::vector<std::vector<size_t>> truth(nq);
    for (size_t q = 0; q < nq; q++)
    {
        std::vector<std::pair<double, size_t>> d(n);
        for (size_t i = 0; i < n; i++)
        {
            double s = 0;
            for (size_t j = 0; j < dim; j++)
            {
                double t = (double) rows[i][j] - (double) queries[q][j];
                s += t * t;
            }
            d[i] = {s, i};
        }
        std::partial_sort(d.begin(), d.begin() + k, d.end());
        for (size_t i = 0; i < k; i++)
            truth[q].push_back(d[i].second);
    }

    hnswlib::L2Space space(dim);
    hnswlib::HierarchicalNSW<float> index(&space, n, 16, 200, 100);
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    auto t0 = std::chrono::steady_clock::now();
    index.addPoint(rows[0].data(), 0);
    std::atomic<size_t> next(1);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; t++)
        pool.emplace_back([&] {
            for (size_t i; (i = next++) < n;)
                index.addPoint(rows[i].data(), i);
        });
    for (auto &t : pool)
        t.join();
    const double build_s = seconds_since(t0);
    std::printf("hnswlib 0.6.2 (M 16, ef_construction 200, %u threads): build %.2f s, %zu rows x %zu\n\n",
                threads, build_s, n, dim);
    std::printf("| ef | recall@10 | ms/query | QPS (1 thread) |\n| --- | --- | --- | --- |\n");
    for (int a = 3; a < argc; a++)
    {
        const size_t ef = (size_t) std::atol(argv[a]);
        index.setEf(std::max(ef, k));
        size_t hits = 0;
        t0 = std::chrono::steady_clock::now();
        for (size_t q = 0; q < nq; q++)
        {
            auto res = index.searchKnn(queries[q].data(), k);
            while (!res.empty())
            {
                const size_t id = res.top().second;
                res.pop();
                hits += std::count(truth[q].begin(), truth[q].end(), id);
            }
        }
        const double s = seconds_since(t0);
        std::printf("| %zu | %.4f | %.3f | %.0f |\n", ef, (double) hits / (double) (nq * k),
                    s * 1000 / (double) nq, (double) nq / s);
    }
    return 0;
}
