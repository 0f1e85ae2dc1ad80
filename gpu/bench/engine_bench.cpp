// Engine benchmark: exact kNN, range and k-means through the public C API, timed on the host
// around the synchronous calls (queries uploaded and results downloaded inside the timing: the
// dataset alone is resident).  Medians of several runs after a warm-up.
//
//   vsearch_engine_bench [--backend cuda|cpu] [--n 1000000] [--d 128] [--nq 10000]
//                        [--data DIR] [--quick] [--skip-kmeans-cpu] [--out results.json]
//                        [--mode exact|ivfpq|graph] [--nlist 1024] [--m 32] [--nbits 8]
//                        [--clustered | --gaussian] [--fvecs DIR]
//                        [--probes 1,2,4,8,16,32,64] [--rerank 0,50,100,200] [--ks 10,1024]
//                        [--devices 0,1 [--placement replicated|sharded]]
//                        [--degree 32] [--efs 16,32,64,128,256,512] [--kernels team,team8]
//                        [--expands 1,2,4] [--pq-m M] [--half] [--threads N]
//
// --threads N: the CPU backend's threads (default 0: one per CPU).  The ivfpq train and encode
// lines give the process CPU time beside the wall time (their thread scaling).
//
// --half: exact kNN on a dataset stored as binary16 (VS_DTYPE_F16, `halfvec`) beside an F32
// dataset of the same values widened, both resident, in one run: the data (seeded Gaussian, or
// --fvecs DIR) and the queries are rounded to binary16 first, as a `halfvec` column and its
// queries hold them.  Per k of --ks (default 10) and batch (--nq, 64, 16, 1): both datasets'
// times interleaved (median of 5 runs, 21 for small batches), the throughput ratio F16 / F32, and
// whether the answers are identical (ids and distance bits); the device bytes of each dataset.
//
// --devices LIST: one context over these devices (engine/multi_backend.h) with the placement
// (default sharded); with --ks each k is also run once on a single-device context (device 0) and
// the answers are compared bit for bit ("identical to one device: yes").
// --ks LIST: exact kNN only (L2, the whole query batch) at each k of the list, median of 5 runs
// (51 for --nq <= 64): k-selection costs side by side, e.g. with VSEARCH_CUDA_PROFILE=1 for the
// split by phase.
//
// --fvecs DIR: exact kNN only, on DIR/base.fvecs and DIR/query.fvecs (the harness's cached
// datasets, bench/datasets.py), k = 10 and k = 26 (what vsearch_knn_batch asked the engine for
// at k = 10 before it asked for k + 4): the engine's own time for a batch call's work on the same
// data, and what a wider candidate list costs it.
//
// --mode ivfpq: seeded data; IVF-PQ train, encode (+ add) seconds, then search QPS of the whole
// batch at nprobe 1, 4, 16, 64 with k = 40 candidates, and recall@10 after an exact re-rank of
// the first 10, 40, 100 and 400 candidates (one untimed k = 400 search: its prefixes are the
// smaller k's results) on the host against vs_knn's exact top 10.  Data: by default 1000
// well-separated centers (N(0, 4^2) coordinates) with N(0, 1) noise (so inside a cluster the
// points are plain isotropic Gaussian noise); --clustered: a Gaussian mixture of sqrt(n)
// centers (N(0, 1) coordinates) with a per-cluster spread drawn in [0.2, 0.6] (clusters of
// different tightness that overlap a little); --gaussian: N(0, 1), no structure at all.
//
// --mode ivfpq --fvecs DIR: the same quantizer (train, encode, add seconds) on DIR/base.fvecs, the
// first --nq queries of DIR/query.fvecs (default all 10000 of the harness's Fashion-MNIST), and a
// sweep of probes (--probes) x rerank (--rerank): rerank 0 returns the 10 best PQ estimates;
// rerank R searches k = R candidates and re-ranks them with vs_knn on the resident base set
// restricted to each query's candidates (vs_subsets), i.e. exact distances in exact order.  Per
// point: recall@10 against vs_knn's exact top 10 and the whole batch's QPS (median of 3 runs,
// search + re-rank).
//
// --mode graph (engine_bench_graph.cpp): the batched beam search of graph objects
// (vsearch/graph.h) on a seeded Gaussian mixture (as --clustered) or DIR/base.fvecs +
// query.fvecs (--fvecs DIR).  The graph is built there, untimed, from the exact kNN of every row (vs_knn on the context): each row's degree / 2
// nearest rows, then up to degree / 2 reverse edges (rows that chose it), then more of its own
// nearest; the start nodes are the rows nearest to 2 sqrt(n) (at most 1024) k-means centroids, as
// the index's seeds.  --nq is the batch (queries per vs_graph_knn call): at 1000 or more, that
// many queries in one call (median of 3 runs); below, as many calls as make 1000 distinct queries,
// each timed on its own (median and 90th percentile per call: single-query latency with --nq 1).
// Per beam width of --efs: the reference search's distances per query (vs_graph_search on the
// first 1000 queries), QPS at k = 10, microseconds per call and recall@10 against vs_knn; on
// CUDA each compared bit for bit with the reference ("identical to the reference"), and with
// --kernels LIST (VSEARCH_CUDA_GRAPH_KERNEL values: team, team4 .. team32, each optionally with
// +auto, +cut, +teams or +tiles for VSEARCH_CUDA_GRAPH_STARTS) the team sizes and start passes side by
// side, the first the baseline of the others (QPS ratio, identical answers).  --expands LIST:
// each width also with that many nodes expanded per step (vs_graph_search_params.expand), each
// after the first with its QPS ratio to the first's at the same width.  --pq-m M (a divisor of
// the dimension): also a compressed object of the same graph (vs_graph_create_compressed: M-byte
// PQ codes on the device, vectors and neighbour rows in pinned host memory; quantizer trained on
// the context, untimed) searched at every width and expansion beside the in-memory one: its
// recall@10 and QPS, and its QPS ratio to the in-memory object's first kernel.
//
// Writes the dataset / queries (float32, row-major) and this run's k=10 ids to DIR for the
// PyTorch baseline (gpu/bench/torch_baseline.py), which reads them and checks agreement.
#include "bench/engine_bench.h"
#include "vsearch/engine.h"
#include "vsearch/half.h"
#include "vsearch/ivfpq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace vs_bench;

namespace {

// CPU seconds of the whole process (every thread): on a shared machine the work a step did,
// which other processes' load barely moves, beside its wall time.
double cpu_now()
{
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Gaussian N(0,1) data from a seeded generator (the same file feeds PyTorch).
std::vector<float> gaussian(size_t count, uint64_t seed)
{
    std::vector<float> v(count);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto &x : v)
        x = g(rng);
    return v;
}

void write_file(const std::string &path, const void *p, size_t bytes)
{
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(p, 1, bytes, f) != bytes)
    {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        std::exit(1);
    }
    std::fclose(f);
}

// n points around nc centers (N(0, 4^2) each coordinate) with N(0, 1) noise.
std::vector<float> clustered(size_t n, size_t d, size_t nc, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> centers(nc * d), x(n * d);
    for (auto &v : centers)
        v = 4.0f * g(rng);
    for (size_t i = 0; i < n; i++)
    {
        size_t c = rng() % nc;
        for (size_t j = 0; j < d; j++)
            x[i * d + j] = centers[c * d + j] + g(rng);
    }
    return x;
}

// n points of a Gaussian mixture: nc centers with N(0, 1) coordinates, cluster c with spread
// s_c uniform in [0.2, 0.6] (x = center + s_c N(0, 1)).
std::vector<float> mixture(size_t n, size_t d, size_t nc, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.2f, 0.6f);
    std::vector<float> centers(nc * d), spread(nc), x(n * d);
    for (auto &v : centers)
        v = g(rng);
    for (auto &v : spread)
        v = u(rng);
    for (size_t i = 0; i < n; i++)
    {
        size_t c = rng() % nc;
        for (size_t j = 0; j < d; j++)
            x[i * d + j] = centers[c * d + j] + spread[c] * g(rng);
    }
    return x;
}

enum class IvfpqData
{
    Legacy,
    Clustered,
    Gaussian
};

struct IvfpqShape
{
    size_t nlist, m;
    int nbits;
};

vs_ivfpq_params ivfpq_params(size_t d, IvfpqShape shape)
{
    vs_ivfpq_params p{};
    p.dim = d;
    p.nlist = shape.nlist;
    p.m = shape.m;
    p.nbits = shape.nbits;
    p.metric = VS_METRIC_L2;
    return p;
}

// Trains the quantizer on x (n x d), encodes every row and adds it (id = row number) to a new
// ivfpq object; rows gets the train, encode and add seconds.
vs_ivfpq *ivfpq_build(vs_context *ctx, const std::vector<float> &x, size_t n, size_t d,
                      IvfpqShape shape, std::vector<Row> &rows)
{
    const vs_ivfpq_params p = ivfpq_params(d, shape);
    vs_ivfpq_train_params tp;
    vs_ivfpq_train_params_init(&tp);
    tp.sample_size = std::min<size_t>(n, std::max<size_t>(64 * shape.nlist, 65536));
    std::vector<float> cent(p.nlist * d), books((size_t{1} << p.nbits) * d);
    double t0 = now(), c0 = cpu_now();
    check(vs_ivfpq_train(ctx, &p, &tp, x.data(), n, cent.data(), books.data()), ctx, "ivfpq_train");
    char note[256];
    std::snprintf(note, sizeof note, "nlist %zu m %zu nbits %d sample %zu, 20 + 25 iterations, CPU %.2f s",
                  p.nlist, p.m, p.nbits, tp.sample_size, cpu_now() - c0);
    rows.push_back({"ivfpq train", now() - t0, 0, note});
    std::printf("ivfpq train: %.2f s (%s)\n", rows.back().seconds, note);
    std::fflush(stdout);

    vs_ivfpq *ivf = nullptr;
    check(vs_ivfpq_create(ctx, &p, cent.data(), books.data(), &ivf), ctx, "ivfpq_create");
    const size_t cs = vs_ivfpq_code_size(&p);
    std::vector<int32_t> lists(n);
    std::vector<uint8_t> codes(n * cs);
    t0 = now();
    c0 = cpu_now();
    check(vs_ivfpq_encode(ctx, ivf, x.data(), n, lists.data(), codes.data()), ctx, "ivfpq_encode");
    const double encode_cpu = cpu_now() - c0;
    rows.push_back({"ivfpq encode n=" + std::to_string(n), now() - t0, n / (now() - t0), "vectors/s"});
    std::printf("ivfpq encode: %.2f s (CPU %.2f s)\n", rows.back().seconds, encode_cpu);
    // Entries grouped per list (one add per list, as an index build does).
    t0 = now();
    {
        std::vector<std::vector<int64_t>> ids(p.nlist);
        std::vector<std::vector<uint8_t>> lc(p.nlist);
        for (size_t i = 0; i < n; i++)
        {
            ids[lists[i]].push_back(static_cast<int64_t>(i));
            lc[lists[i]].insert(lc[lists[i]].end(), codes.begin() + i * cs, codes.begin() + (i + 1) * cs);
        }
        for (size_t l = 0; l < p.nlist; l++)
            check(vs_ivfpq_add(ctx, ivf, l, ids[l].data(), lc[l].data(), ids[l].size()), ctx, "ivfpq_add");
    }
    rows.push_back({"ivfpq add (per list)", now() - t0, 0, ""});
    std::printf("ivfpq add: %.3f s\n", rows.back().seconds);
    std::fflush(stdout);
    return ivf;
}

// IVF-PQ sweep on real data (--mode ivfpq --fvecs DIR): probes x rerank, recall@10 and QPS.
std::vector<Row> ivfpq_sweep(vs_context *ctx, const std::vector<float> &x, const std::vector<float> &q,
                             size_t d, IvfpqShape shape, const std::vector<size_t> &probes,
                             const std::vector<size_t> &reranks)
{
    const size_t n = x.size() / d, nq = q.size() / d, k = 10;
    // The base set stays resident: exact ground truth now, exact re-ranks in the sweep.
    vs_dataset *ds = resident_dataset(ctx, x.data(), n, d);
    std::vector<int64_t> truth(nq * k);
    std::vector<float> truth_d(nq * k);
    double t0 = now();
    check(vs_knn(ctx, ds, q.data(), nq, k, VS_METRIC_L2, nullptr, truth.data(), truth_d.data(), nullptr),
          ctx, "knn (ground truth)");
    std::printf("exact top-%zu ground truth: %.2f s\n", k, now() - t0);
    std::fflush(stdout);

    std::vector<Row> rows;
    vs_ivfpq *ivf = ivfpq_build(ctx, x, n, d, shape, rows);

    // Recall@10: a returned id is a hit if it is one of the exact top 10, or if its exact L2
    // distance (double on the host) is <= the 10th exact distance * (1 + 1e-5), so that a row
    // tied with the 10th (Fashion-MNIST has duplicate images) counts; the 10 returned ids are
    // distinct, so hits <= 10 per query.
    auto recall = [&](const std::vector<int64_t> &ids) {
        size_t hits = 0;
        for (size_t i = 0; i < nq; i++)
            for (size_t j = 0; j < k; j++)
            {
                const int64_t id = ids[i * k + j];
                if (id < 0)
                    continue;
                if (std::find(&truth[i * k], &truth[i * k] + k, id) != &truth[i * k] + k)
                {
                    hits++;
                    continue;
                }
                double s = 0;
                for (size_t t = 0; t < d; t++)
                {
                    double v = static_cast<double>(q[i * d + t]) - x[static_cast<size_t>(id) * d + t];
                    s += v * v;
                }
                hits += std::sqrt(s) <= truth_d[i * k + k - 1] * (1 + 1e-5);
            }
        return static_cast<double>(hits) / (nq * k);
    };

    std::printf("\n%6s %6s %9s %12s\n", "probes", "rerank", "recall@10", "queries/s");
    for (size_t nprobe : probes)
    {
        if (nprobe > shape.nlist)
            continue;
        for (size_t r : reranks)
        {
            const size_t kc = r ? r : k; // IVF-PQ candidates per query
            std::vector<int64_t> cid(nq * kc), oid(nq * k), off(nq + 1);
            std::vector<float> cd(nq * kc), od(nq * k);
            for (size_t i = 0; i <= nq; i++)
                off[i] = static_cast<int64_t>(i * kc);
            const vs_subsets sub{off.data(), cid.data()}; // padding ids (-1) are ignored
            double t = timeit(0, 3, [&] {
                check(vs_ivfpq_search(ctx, ivf, q.data(), nq, 0, nprobe, kc, cid.data(), cd.data(), nullptr),
                      ctx, "ivfpq_search");
                if (r)
                    check(vs_knn(ctx, ds, q.data(), nq, k, VS_METRIC_L2, &sub, oid.data(), od.data(), nullptr),
                          ctx, "knn (re-rank)");
            });
            const double rec = recall(r ? oid : cid);
            std::printf("%6zu %6zu %9.4f %12.0f\n", nprobe, r, rec, nq / t);
            std::fflush(stdout);
            char note[64], json[96];
            std::snprintf(note, sizeof note, "recall@10 %.4f", rec);
            std::snprintf(json, sizeof json, "\"probes\": %zu, \"rerank\": %zu, \"recall10\": %.4f",
                          nprobe, r, rec);
            rows.push_back({"ivfpq nq=" + std::to_string(nq) + " probes=" + std::to_string(nprobe) +
                                " rerank=" + std::to_string(r),
                            t, nq / t, note, json});
        }
    }
    vs_ivfpq_destroy(ctx, ivf);
    vs_dataset_destroy(ctx, ds);
    return rows;
}

std::vector<Row> ivfpq_bench(vs_context *ctx, size_t n, size_t d, size_t nq, IvfpqShape shape,
                             bool quick, IvfpqData data)
{
    std::vector<Row> rows;
    // One draw: the first n points are the set, the rest the queries (same distribution).
    std::vector<float> x;
    if (data == IvfpqData::Clustered)
        x = mixture(n + nq, d, std::max<size_t>(1, static_cast<size_t>(std::lround(std::sqrt(double(n))))), 42);
    else if (data == IvfpqData::Gaussian)
        x = gaussian((n + nq) * d, 42);
    else
        x = clustered(n + nq, d, 1000, 42);
    std::vector<float> q(x.begin() + n * d, x.end());
    x.resize(n * d);
    vs_ivfpq *ivf = ivfpq_build(ctx, x, n, d, shape, rows);
    const vs_ivfpq_params p = ivfpq_params(d, shape);
    char note[256];

    // Exact top 10 for recall.
    const size_t k = 10, kc = 40;
    const std::vector<int64_t> truth = exact_top_k(ctx, x.data(), n, q.data(), nq, d, k);
    const size_t kmax = 400;
    std::vector<int64_t> oid(nq * kc), rid(nq * kmax);
    std::vector<float> od(nq * kc), rd(nq * kmax);
    for (size_t nprobe : {size_t{1}, size_t{4}, size_t{16}, size_t{64}})
    {
        if (nprobe > p.nlist)
            continue;
        double t = timeit(1, quick ? 2 : 5, [&] {
            check(vs_ivfpq_search(ctx, ivf, q.data(), nq, 0, nprobe, kc, oid.data(), od.data(), nullptr),
                  ctx, "ivfpq_search");
        });
        // Recall@10 after an exact re-rank of the first kr candidates of a k = 400 search.
        check(vs_ivfpq_search(ctx, ivf, q.data(), nq, 0, nprobe, kmax, rid.data(), rd.data(), nullptr),
              ctx, "ivfpq_search");
        bool prefix = true; // the k = 40 result is the k = 400 result's prefix
        for (size_t i = 0; i < nq && prefix; i++)
            for (size_t j = 0; j < kc; j++)
                prefix = prefix && oid[i * kc + j] == rid[i * kmax + j];
        std::string recalls;
        for (size_t kr : {size_t{10}, size_t{40}, size_t{100}, size_t{400}})
        {
            size_t hits = 0;
            for (size_t i = 0; i < nq; i++)
            {
                std::vector<std::pair<float, int64_t>> rr;
                for (size_t j = 0; j < kr; j++)
                {
                    int64_t id = rid[i * kmax + j];
                    if (id >= 0)
                        rr.emplace_back(vs_l2sq_f32(&q[i * d], &x[static_cast<size_t>(id) * d], d), id);
                }
                std::sort(rr.begin(), rr.end());
                for (size_t j = 0; j < std::min(k, rr.size()); j++)
                    for (size_t t2 = 0; t2 < k; t2++)
                        hits += truth[i * k + t2] == rr[j].second;
            }
            char one[48];
            std::snprintf(one, sizeof one, "%s%zu:%.4f", recalls.empty() ? "" : " ", kr,
                          static_cast<double>(hits) / (nq * k));
            recalls += one;
        }
        std::snprintf(note, sizeof note, "k=%zu; recall@10 after exact re-rank of kr candidates %s%s",
                      kc, recalls.c_str(), prefix ? "" : " (k=40 result is NOT the k=400 prefix)");
        rows.push_back({"ivfpq search nq=" + std::to_string(nq) + " nprobe=" + std::to_string(nprobe),
                        t, nq / t, note});
    }
    vs_ivfpq_destroy(ctx, ivf);
    return rows;
}

void report(const std::vector<Row> &rows, const std::string &out_json, const char *device,
            size_t n, size_t d, size_t nq)
{
    std::printf("\n%-34s %12s %14s  %s\n", "case", "median ms", "queries/s", "note");
    for (auto &r : rows)
        std::printf("%-34s %12.3f %14.0f  %s\n", r.name.c_str(), r.seconds * 1e3, r.qps, r.note.c_str());
    if (out_json.empty())
        return;
    FILE *f = std::fopen(out_json.c_str(), "w");
    if (!f)
        return;
    std::fprintf(f, "{\"device\": \"%s\", \"n\": %zu, \"d\": %zu, \"nq\": %zu, \"rows\": [\n", device,
                 n, d, nq);
    for (size_t i = 0; i < rows.size(); i++)
        std::fprintf(f, "  {\"case\": \"%s\", \"seconds\": %.6f, \"qps\": %.1f, \"note\": \"%s\"%s%s}%s\n",
                     rows[i].name.c_str(), rows[i].seconds, rows[i].qps, rows[i].note.c_str(),
                     rows[i].json.empty() ? "" : ", ", rows[i].json.c_str(),
                     i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

} // namespace

// fvecs: per row an int32 dimension then that many float32 values.
std::vector<float> read_fvecs(const std::string &path, size_t *d)
{
    std::FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
    {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        std::exit(1);
    }
    std::vector<float> out;
    int32_t dim = 0;
    while (std::fread(&dim, 4, 1, f) == 1)
    {
        if (dim <= 0 || (*d != 0 && static_cast<size_t>(dim) != *d && !out.empty()))
        {
            std::fprintf(stderr, "%s: bad row dimension %d\n", path.c_str(), dim);
            std::exit(1);
        }
        *d = static_cast<size_t>(dim);
        size_t at = out.size();
        out.resize(at + *d);
        if (std::fread(out.data() + at, 4, *d, f) != *d)
        {
            std::fprintf(stderr, "%s: truncated\n", path.c_str());
            std::exit(1);
        }
    }
    std::fclose(f);
    return out;
}

// "1,2,4" -> {1, 2, 4}
std::vector<size_t> parse_list(const std::string &s)
{
    std::vector<size_t> v;
    for (size_t at = 0; at < s.size();)
    {
        size_t end = s.find(',', at);
        if (end == std::string::npos)
            end = s.size();
        v.push_back(std::stoull(s.substr(at, end - at)));
        at = end + 1;
    }
    return v;
}

// --half: F16 against F32 storage of the same values, exact kNN (see the top of the file).
std::vector<Row> half_bench(vs_context *ctx, std::vector<float> x, std::vector<float> q, size_t d,
                            std::vector<size_t> ks, bool quick)
{
    auto round_half = [](std::vector<float> &v) {
        std::vector<uint16_t> h(v.size());
        vs_float_to_half(v.data(), h.data(), v.size());
        vs_half_to_float(h.data(), v.data(), v.size());
    };
    round_half(x);
    round_half(q);
    const size_t n = x.size() / d, nq = q.size() / d;
    std::vector<int64_t> ids(n);
    for (size_t i = 0; i < n; i++)
        ids[i] = static_cast<int64_t>(i);
    auto in_use = [&] {
        vs_context_info info;
        check(vs_context_get_info(ctx, &info), ctx, "info");
        return info.memory_in_use;
    };
    vs_dataset *ds[2] = {nullptr, nullptr}; // F32, F16
    size_t bytes[2];
    const vs_dtype types[2] = {VS_DTYPE_F32, VS_DTYPE_F16};
    for (int i = 0; i < 2; i++)
    {
        const size_t before = in_use();
        check(vs_dataset_create(ctx, d, types[i], &ds[i]), ctx, "dataset_create");
        check(vs_dataset_add(ctx, ds[i], x.data(), ids.data(), n), ctx, "dataset_add");
        bytes[i] = in_use() - before;
    }
    std::printf("device bytes: f32 %zu, f16 %zu (%.3f)\n", bytes[0], bytes[1],
                static_cast<double>(bytes[1]) / static_cast<double>(bytes[0]));
    std::vector<Row> rows;
    if (ks.empty())
        ks = {10};
    std::vector<size_t> batches{nq};
    for (size_t b : {size_t{64}, size_t{16}, size_t{1}})
        if (b < nq)
            batches.push_back(b);
    for (size_t k : ks)
        for (size_t b : batches)
        {
            std::vector<int64_t> oid[2];
            std::vector<float> od[2];
            const bool small = b <= 64;
            std::vector<double> t[2];
            for (int i = 0; i < 2; i++)
            {
                oid[i].resize(b * k);
                od[i].resize(b * k);
            }
            auto call = [&](int i) {
                check(vs_knn(ctx, ds[i], q.data(), b, k, VS_METRIC_L2, nullptr, oid[i].data(),
                             od[i].data(), nullptr),
                      ctx, "knn");
            };
            call(0);
            call(1);
            const int runs = small ? (quick ? 5 : 21) : (quick ? 3 : 5);
            for (int r = 0; r < runs; r++)
                for (int i = 0; i < 2; i++)
                {
                    double t0 = now();
                    call(i);
                    t[i].push_back(now() - t0);
                }
            const bool same = oid[0] == oid[1] &&
                              std::memcmp(od[0].data(), od[1].data(), od[0].size() * 4) == 0;
            const double s32 = median(t[0]), s16 = median(t[1]);
            const std::string name = "knn nq=" + std::to_string(b) + " k=" + std::to_string(k) + " L2";
            char note[160];
            std::snprintf(note, sizeof note, "f16/f32 throughput %.2fx, identical answers: %s",
                          s32 / s16, same ? "yes" : "NO");
            rows.push_back({name + " f32", s32, b / s32, ""});
            rows.push_back({name + " f16", s16, b / s16, note});
            std::printf("%s: f32 %.3f ms, f16 %.3f ms, ratio %.2fx, identical: %s\n", name.c_str(),
                        s32 * 1e3, s16 * 1e3, s32 / s16, same ? "yes" : "NO");
            std::fflush(stdout);
        }
    for (vs_dataset *p : ds)
        vs_dataset_destroy(ctx, p);
    return rows;
}

int main(int argc, char **argv)
{
    std::string backend = "cuda", dir = "", out_json = "", mode = "exact", fvecs = "";
    size_t n = 1000000, d = 128, nq = 10000;
    IvfpqShape shape{1024, 32, 8};
    bool quick = false, kmeans_cpu = true, half = false;
    IvfpqData ivfpq_data = IvfpqData::Legacy;
    std::vector<size_t> probes{1, 2, 4, 8, 16, 32, 64}, reranks{0, 50, 100, 200}, ks;
    std::vector<size_t> efs{16, 32, 64, 128, 256, 512};
    std::vector<std::string> kernels; // --mode graph on CUDA: VSEARCH_CUDA_GRAPH_KERNEL values
    std::vector<size_t> expands{1};   // --mode graph: nodes expanded per step
    size_t degree = 32;
    size_t pq_m = 0; // --mode graph: a compressed object beside the in-memory one
    int threads = 0;
    std::vector<int> devices;
    vs_placement placement = VS_PLACEMENT_SHARDED;
    for (int i = 1; i < argc; i++)
    {
        std::string a = argv[i];
        auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
        if (a == "--backend")
            backend = next();
        else if (a == "--n")
            n = std::stoull(next());
        else if (a == "--d")
            d = std::stoull(next());
        else if (a == "--nq")
            nq = std::stoull(next());
        else if (a == "--data")
            dir = next();
        else if (a == "--out")
            out_json = next();
        else if (a == "--quick")
            quick = true;
        else if (a == "--half")
            half = true;
        else if (a == "--clustered")
            ivfpq_data = IvfpqData::Clustered;
        else if (a == "--gaussian")
            ivfpq_data = IvfpqData::Gaussian;
        else if (a == "--skip-kmeans-cpu")
            kmeans_cpu = false;
        else if (a == "--mode")
            mode = next();
        else if (a == "--nlist")
            shape.nlist = std::stoull(next());
        else if (a == "--m")
            shape.m = std::stoull(next());
        else if (a == "--nbits")
            shape.nbits = std::stoi(next());
        else if (a == "--fvecs")
            fvecs = next();
        else if (a == "--probes")
            probes = parse_list(next());
        else if (a == "--rerank")
            reranks = parse_list(next());
        else if (a == "--ks")
            ks = parse_list(next());
        else if (a == "--efs")
            efs = parse_list(next());
        else if (a == "--degree")
            degree = std::stoull(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--expands")
            expands = parse_list(next());
        else if (a == "--pq-m")
            pq_m = std::stoull(next());
        else if (a == "--kernels")
            for (std::string rest = next(); !rest.empty();)
            {
                const size_t comma = rest.find(',');
                kernels.push_back(rest.substr(0, comma));
                rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
            }
        else if (a == "--devices")
            for (size_t v : parse_list(next()))
                devices.push_back(static_cast<int>(v));
        else if (a == "--placement")
            placement = next() == "replicated" ? VS_PLACEMENT_REPLICATED : VS_PLACEMENT_SHARDED;
        else
        {
            std::fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = backend == "cpu" ? VS_BACKEND_CPU : VS_BACKEND_CUDA;
    o.num_threads = threads;
#ifdef VSEARCH_BENCH_CUDA_LIBRARY
    o.cuda_library = std::getenv("VSEARCH_CUDA_LIBRARY") ? nullptr : VSEARCH_BENCH_CUDA_LIBRARY;
#endif
    if (const char *p = std::getenv("VSEARCH_BENCH_FP32"); p && p[0] == '1')
        o.gemm_precision = VS_GEMM_FP32;
    const vs_context_options single = o;
    if (!devices.empty())
    {
        o.devices = devices.data();
        o.ndevices = static_cast<int>(devices.size());
        o.placement = placement;
    }
    vs_context *ctx = nullptr;
    char err[512];
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        std::fprintf(stderr, "context: %s\n", err);
        return 1;
    }
    vs_context_info info;
    check(vs_context_get_info(ctx, &info), ctx, "info");
    std::printf("device: %s  n=%zu d=%zu nq=%zu gemm=%s\n", info.device_name, n, d, nq,
                o.gemm_precision == VS_GEMM_TF32 ? "tf32+exact-rerank" : "fp32");

    if (mode == "ivfpq" && !fvecs.empty())
    {
        std::vector<float> x = read_fvecs(fvecs + "/base.fvecs", &d);
        std::vector<float> q = read_fvecs(fvecs + "/query.fvecs", &d);
        n = x.size() / d;
        nq = std::min(nq, q.size() / d);
        q.resize(nq * d);
        std::printf("data: %s (%zu x %zu, %zu queries)\n", fvecs.c_str(), n, d, nq);
        report(ivfpq_sweep(ctx, x, q, d, shape, probes, reranks), out_json, info.device_name, n, d, nq);
        vs_context_destroy(ctx);
        return 0;
    }
    if (mode == "graph")
    {
        std::vector<float> x, q;
        if (!fvecs.empty())
        {
            x = read_fvecs(fvecs + "/base.fvecs", &d);
            q = read_fvecs(fvecs + "/query.fvecs", &d);
        }
        else
        {
            x = mixture(n + graph_pool(nq), d, std::max<size_t>(1, static_cast<size_t>(std::lround(std::sqrt(double(n))))), 42);
            q.assign(x.begin() + n * d, x.end());
            x.resize(n * d);
        }
        n = x.size() / d;
        const size_t batch = std::min(nq, q.size() / d);
        q.resize(std::min(q.size() / d, graph_pool(batch)) / batch * batch * d);
        std::printf("data: %s (%zu x %zu, %zu queries, calls of %zu)\n",
                    fvecs.empty() ? "mixture" : fvecs.c_str(), n, d, q.size() / d, batch);
        report(graph_bench(ctx, std::move(x), std::move(q), d, batch, degree, efs, expands,
                           info.backend == VS_BACKEND_CUDA, kernels, pq_m),
               out_json, info.device_name, n, d, nq);
        vs_context_destroy(ctx);
        return 0;
    }
    if (mode == "ivfpq")
    {
        report(ivfpq_bench(ctx, n, d, nq, shape, quick, ivfpq_data), out_json, info.device_name, n, d, nq);
        vs_context_destroy(ctx);
        return 0;
    }
    std::vector<float> x, q;
    if (!fvecs.empty())
    {
        x = read_fvecs(fvecs + "/base.fvecs", &d);
        q = read_fvecs(fvecs + "/query.fvecs", &d);
        n = x.size() / d;
        nq = q.size() / d;
        std::printf("data: %s (%zu x %zu, %zu queries)\n", fvecs.c_str(), n, d, nq);
    }
    else
    {
        x = gaussian(n * d, 42);
        q = gaussian(nq * d, 43);
    }
    if (half)
    {
        report(half_bench(ctx, std::move(x), std::move(q), d, ks, quick), out_json,
               info.device_name, n, d, nq);
        vs_context_destroy(ctx);
        return 0;
    }
    std::vector<int64_t> ids(n);
    for (size_t i = 0; i < n; i++)
        ids[i] = static_cast<int64_t>(i);
    if (!dir.empty())
    {
        write_file(dir + "/data.f32", x.data(), x.size() * 4);
        write_file(dir + "/queries.f32", q.data(), q.size() * 4);
    }
    vs_dataset *ds = nullptr;
    check(vs_dataset_create(ctx, d, VS_DTYPE_F32, &ds), ctx, "dataset_create");
    double t0 = now();
    check(vs_dataset_add(ctx, ds, x.data(), ids.data(), n), ctx, "dataset_add");
    std::printf("upload: %.3f s\n", now() - t0);

    std::vector<Row> rows;
    const int runs = quick ? 3 : 7;
    auto knn = [&](size_t nqq, size_t k, vs_metric m, std::vector<int64_t> &oid, std::vector<float> &od) {
        oid.resize(nqq * k);
        od.resize(nqq * k);
        check(vs_knn(ctx, ds, q.data(), nqq, k, m, nullptr, oid.data(), od.data(), nullptr), ctx, "knn");
    };
    std::vector<int64_t> oid;
    std::vector<float> od;

    if (!fvecs.empty())
    {
        for (size_t k : {size_t{10}, size_t{26}})
        {
            double t = timeit(1, runs, [&] { knn(nq, k, VS_METRIC_L2, oid, od); });
            rows.push_back({"knn nq=" + std::to_string(nq) + " k=" + std::to_string(k) + " L2", t,
                            nq / t, fvecs});
        }
        report(rows, out_json, info.device_name, n, d, nq);
        vs_dataset_destroy(ctx, ds);
        vs_context_destroy(ctx);
        return 0;
    }
    if (!ks.empty())
    {
        for (size_t k : ks)
        {
            const bool small = nq <= 64; // latency: more runs
            double t = timeit(small ? 5 : 1, small ? 51 : 5, [&] { knn(nq, k, VS_METRIC_L2, oid, od); });
            rows.push_back({"knn nq=" + std::to_string(nq) + " k=" + std::to_string(k) + " L2", t,
                            nq / t, ""});
            std::printf("k=%zu: %.3f ms\n", k, t * 1e3);
            std::fflush(stdout);
        }
        if (!devices.empty())
        {
            // the same answers as one device (the merge of the shards is exact)
            vs_context *one = nullptr;
            check(vs_context_create(&single, &one, err, sizeof err), nullptr, "single context");
            vs_dataset *ds1 = nullptr;
            check(vs_dataset_create(one, d, VS_DTYPE_F32, &ds1), one, "dataset_create");
            check(vs_dataset_add(one, ds1, x.data(), ids.data(), n), one, "dataset_add");
            for (size_t k : ks)
            {
                std::vector<int64_t> id1(nq * k);
                std::vector<float> d1(nq * k);
                double t1 = timeit(1, 3, [&] {
                    check(vs_knn(one, ds1, q.data(), nq, k, VS_METRIC_L2, nullptr, id1.data(),
                                 d1.data(), nullptr), one, "knn");
                });
                knn(nq, k, VS_METRIC_L2, oid, od);
                bool same = oid == id1 && std::memcmp(od.data(), d1.data(), od.size() * 4) == 0;
                rows.push_back({"knn nq=" + std::to_string(nq) + " k=" + std::to_string(k) +
                                    " L2 one device (same run)", t1, nq / t1, ""});
                std::printf("k=%zu: one device %.3f ms; identical to one device: %s\n", k,
                            t1 * 1e3, same ? "yes" : "NO");
            }
            vs_dataset_destroy(one, ds1);
            vs_context_destroy(one);
        }
        report(rows, out_json, info.device_name, n, d, nq);
        vs_dataset_destroy(ctx, ds);
        vs_context_destroy(ctx);
        return 0;
    }
    // Large batch, k = 10.
    for (vs_metric m : {VS_METRIC_L2, VS_METRIC_IP})
    {
        double t = timeit(1, runs, [&] { knn(nq, 10, m, oid, od); });
        rows.push_back({std::string("knn nq=") + std::to_string(nq) + " k=10 " +
                            (m == VS_METRIC_L2 ? "L2" : "IP"),
                        t, nq / t, ""});
        if (m == VS_METRIC_L2 && !dir.empty())
        {
            write_file(dir + "/knn10_ids.i64", oid.data(), oid.size() * 8);
            write_file(dir + "/knn10_d.f32", od.data(), od.size() * 4);
        }
    }
    // Small batches.
    for (size_t b : {size_t{1}, size_t{16}, size_t{64}})
    {
        double t = timeit(3, quick ? 5 : 21, [&] { knn(b, 10, VS_METRIC_L2, oid, od); });
        rows.push_back({"knn nq=" + std::to_string(b) + " k=10 L2", t, b / t, ""});
    }
    // Larger k.
    {
        double t = timeit(1, quick ? 2 : 5, [&] { knn(nq, 1024, VS_METRIC_L2, oid, od); });
        rows.push_back({"knn nq=" + std::to_string(nq) + " k=1024 L2", t, nq / t, ""});
        size_t nq_big = std::min<size_t>(nq, 1000);
        t = timeit(1, quick ? 1 : 3, [&] { knn(nq_big, 10000, VS_METRIC_L2, oid, od); });
        rows.push_back({"knn nq=" + std::to_string(nq_big) + " k=10000 L2", t, nq_big / t, ""});
    }
    // L1 (dedicated kernel) on a smaller batch.
    {
        size_t b = std::min<size_t>(nq, 1000);
        double t = timeit(1, quick ? 2 : 3, [&] { knn(b, 10, VS_METRIC_L1, oid, od); });
        rows.push_back({"knn nq=" + std::to_string(b) + " k=10 L1", t, b / t, ""});
    }
    // Range at radii returning about 0.1% and 1% of the set: the radius is the pooled quantile of
    // 100 queries' nearest distances (so the mean count per query is about frac * n).
    std::vector<float> range_radii;
    for (double frac : {0.001, 0.01})
    {
        const size_t cal = 100, kk = static_cast<size_t>(4 * frac * n);
        std::vector<int64_t> cid;
        std::vector<float> cd;
        knn(cal, kk, VS_METRIC_L2, cid, cd);
        std::vector<float> pooled(cd);
        size_t want = static_cast<size_t>(frac * n * cal);
        std::nth_element(pooled.begin(), pooled.begin() + (want - 1), pooled.end());
        float radius = pooled[want - 1];
        range_radii.push_back(radius);
        size_t total = 0;
        double t = timeit(1, quick ? 2 : 3, [&] {
            vs_range_result r;
            check(vs_range(ctx, ds, q.data(), nq, radius, VS_METRIC_L2, nullptr, nullptr, nullptr, &r),
                  ctx, "range");
            total = r.total;
            vs_range_result_free(&r);
        });
        char note[160];
        std::snprintf(note, sizeof note, "radius %.4f, %.3f%% of the set per query, %.3g results",
                      radius, 100.0 * total / (static_cast<double>(nq) * n), static_cast<double>(total));
        rows.push_back({"range nq=" + std::to_string(nq) + " L2 ~" + std::to_string(frac * 100).substr(0, 3) + "%",
                        t, nq / t, note});
    }
    // Phase breakdown (serialises the streams) and tile / threshold variants, to stderr.
    if (const char *p = std::getenv("VSEARCH_BENCH_PROFILE"); p && p[0] == '1')
    {
        setenv("VSEARCH_CUDA_PROFILE", "1", 1);
        knn(nq, 10, VS_METRIC_L2, oid, od);
        for (size_t b : {size_t{1}, size_t{16}, size_t{64}})
            knn(b, 10, VS_METRIC_L2, oid, od);
        knn(nq, 1024, VS_METRIC_L2, oid, od);
        knn(std::min<size_t>(nq, 1000), 10000, VS_METRIC_L2, oid, od);
        for (float radius : range_radii)
        {
            vs_range_result r;
            check(vs_range(ctx, ds, q.data(), nq, radius, VS_METRIC_L2, nullptr, nullptr, nullptr, &r),
                  ctx, "range");
            vs_range_result_free(&r);
        }
        unsetenv("VSEARCH_CUDA_PROFILE");
        struct Variant
        {
            const char *var, *value;
        };
        for (Variant v : {Variant{"VSEARCH_CUDA_TILE_BYTES", "268435456"},
                          Variant{"VSEARCH_CUDA_TILE_BYTES", "1073741824"},
                          Variant{"VSEARCH_CUDA_SMALL_BATCH", "64"}})
        {
            setenv(v.var, v.value, 1);
            vs_context *vc = nullptr;
            if (vs_context_create(&o, &vc, err, sizeof err) == VS_OK)
            {
                vs_dataset *vd = nullptr;
                check(vs_dataset_create(vc, d, VS_DTYPE_F32, &vd), vc, "variant dataset");
                check(vs_dataset_add(vc, vd, x.data(), ids.data(), n), vc, "variant add");
                size_t b = std::string(v.var) == "VSEARCH_CUDA_SMALL_BATCH" ? 64 : nq;
                oid.resize(b * 10);
                od.resize(b * 10);
                double t = timeit(1, 3, [&] {
                    check(vs_knn(vc, vd, q.data(), b, 10, VS_METRIC_L2, nullptr, oid.data(), od.data(), nullptr),
                          vc, "variant knn");
                });
                std::fprintf(stderr, "variant %s=%s: knn nq=%zu k=10 %.3f ms\n", v.var, v.value, b, t * 1e3);
                vs_dataset_destroy(vc, vd);
                vs_context_destroy(vc);
            }
            unsetenv(v.var);
        }
    }
    vs_dataset_destroy(ctx, ds);

    // k-means 1M x 128 -> 1024, 20 iterations (random init), on this backend and on the CPU.
    {
        vs_kmeans_params p;
        vs_kmeans_params_init(&p);
        p.k = quick ? 256 : 1024;
        p.iterations = 20;
        std::vector<float> cent(p.k * d);
        vs_kmeans_info ki;
        double t = timeit(0, 1, [&] { check(vs_kmeans(ctx, x.data(), n, d, &p, cent.data(), &ki), ctx, "kmeans"); });
        char note[128];
        std::snprintf(note, sizeof note, "objective %.6g", ki.objective);
        rows.push_back({"kmeans k=" + std::to_string(p.k) + " it=20 (" + backend + ")", t, 0, note});
        if (kmeans_cpu && backend != "cpu")
        {
            vs_context_options oc;
            vs_context_options_init(&oc);
            oc.backend = VS_BACKEND_CPU;
            vs_context *cpu = nullptr;
            check(vs_context_create(&oc, &cpu, err, sizeof err), nullptr, "cpu context");
            vs_context_info ci;
            vs_context_get_info(cpu, &ci);
            t = timeit(0, 1, [&] { check(vs_kmeans(cpu, x.data(), n, d, &p, cent.data(), &ki), cpu, "kmeans cpu"); });
            std::snprintf(note, sizeof note, "objective %.6g, %s", ki.objective, ci.device_name);
            rows.push_back({"kmeans k=" + std::to_string(p.k) + " it=20 (cpu)", t, 0, note});
            vs_context_destroy(cpu);
        }
    }

    report(rows, out_json, info.device_name, n, d, nq);
    vs_context_destroy(ctx);
    return 0;
}
