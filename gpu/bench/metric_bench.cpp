// Metric-space benchmark: the List of Clusters (vsearch/lc.h) on the CPU against a single-thread
// brute force, on a word list under edit distance (Barrientos et al.'s setting: radii 1, 2, 3).
//
//   vsearch_metric_bench --words FILE [--nq 1000] [--bucket 32] [--seed 1] [--radii 1,2,3]
//                        [--knn 10] [--alphas 0.3,0.4,0.5] [--gpu path/to/vsearch_cuda.so]
//   vsearch_metric_bench --idx-base TRAIN.gz --idx-queries TEST.gz [--metric l2|l1] [--nq 200]
//                        [--bucket 64]
//   vsearch_metric_bench --synthetic N,DIM,CLUSTERS [--metric l2|l1] [--nq 200] [--bucket 64]
//
// Words: one per line (UTF-8, decoded to code points; empty lines skipped), e.g. Debian's
// wspanish (/usr/share/dict/spanish, 86 016 words).  Queries: a seeded sample of --nq words of
// the list, each with one or two random edits (insertion, deletion or substitution at a random
// position; the character drawn from the list's own characters; one edit for even query numbers,
// two for odd).  Per radius: distance evaluations per query and queries per second of the LC
// range search and of the brute force (both one thread, whole batch, answers compared: any
// difference is an error), and the build's time and distance evaluations; then kNN (--knn k):
// the LC's evaluations and QPS, answers checked against the brute force's k-th distance.
// --gpu LIB: the same range queries as one batch through the CUDA List of Clusters search
// (vsearch/lc_cuda.h, loaded from LIB): the batch's wall time (it uploads the list, counts,
// writes and downloads the matches), its QPS, and every answer compared with the brute force's.
// --idx-base / --idx-queries: vectors instead of words, from gzipped IDX image files (e.g.
// Fashion-MNIST's train-images-idx3-ubyte.gz, 60 000 x 784, and the first --nq images of
// t10k-images-idx3-ubyte.gz as queries; pixel values 0..255 as floats), under L2 or L1.  The
// radii are calibrated to return about 0.01 %, 0.1 % and 1 % of the set: the median over the
// queries of the distance to their (n/10^4)-th, (n/10^3)-th and (n/100)-th nearest row.  Per
// radius: rows and LC distances per query, LC and brute-force QPS (one thread), answers compared.
// --synthetic N,DIM,CLUSTERS: seeded clustered vectors instead (cluster centers N(0, 10^2) per
// coordinate, rows and queries a center plus N(0, 1) noise), same report.
// --alphas: the same range queries on SSS pivot tables (vsearch/sss.h) at each alpha (pivots,
// table build seconds, distances per query including the pivots', QPS; answers compared with
// the brute force's of the LC runs above).
#include "vsearch/edit.h"
#include "vsearch/lc.h"
#include "vsearch/sss.h"
#include "vsearch/lc_cuda.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// UTF-8 to code points (invalid bytes become U+FFFD).
std::vector<uint32_t> decode(const std::string &s)
{
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();)
    {
        unsigned char c = static_cast<unsigned char>(s[i]);
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size())
        {
            out.push_back(0xFFFD);
            i++;
            continue;
        }
        uint32_t cp = n == 1 ? c : c & (0x7F >> n);
        for (int k = 1; k < n; k++)
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        out.push_back(cp);
        i += n;
    }
    return out;
}

struct Args
{
    std::string words;
    size_t nq = 1000;
    size_t bucket = 32;
    uint64_t seed = 1;
    std::vector<double> radii = {1, 2, 3};
    size_t knn = 10;
    std::vector<double> alphas;
    std::string gpu;
    std::string idx_base, idx_queries;
    size_t syn_n = 0, syn_dim = 0, syn_clusters = 0;
    vs_metric metric = VS_METRIC_L2;
};

Args parse(int argc, char **argv)
{
    Args a;
    for (int i = 1; i < argc; i++)
    {
        std::string k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (v == nullptr)
        {
            std::fprintf(stderr, "missing value for %s\n", k.c_str());
            std::exit(2);
        }
        if (k == "--words")
            a.words = v;
        else if (k == "--nq")
            a.nq = std::strtoull(v, nullptr, 10);
        else if (k == "--bucket")
            a.bucket = std::strtoull(v, nullptr, 10);
        else if (k == "--seed")
            a.seed = std::strtoull(v, nullptr, 10);
        else if (k == "--gpu")
            a.gpu = v;
        else if (k == "--synthetic")
        {
            if (std::sscanf(v, "%zu,%zu,%zu", &a.syn_n, &a.syn_dim, &a.syn_clusters) != 3 ||
                a.syn_n == 0 || a.syn_dim == 0 || a.syn_clusters == 0)
            {
                std::fprintf(stderr, "--synthetic takes N,DIM,CLUSTERS\n");
                std::exit(2);
            }
        }
        else if (k == "--idx-base")
            a.idx_base = v;
        else if (k == "--idx-queries")
            a.idx_queries = v;
        else if (k == "--metric")
            a.metric = std::string(v) == "l1" ? VS_METRIC_L1 : VS_METRIC_L2;
        else if (k == "--knn")
            a.knn = std::strtoull(v, nullptr, 10);
        else if (k == "--radii" || k == "--alphas")
        {
            std::vector<double> &list = k == "--radii" ? a.radii : a.alphas;
            list.clear();
            for (const char *p = v; *p;)
            {
                char *end;
                list.push_back(std::strtod(p, &end));
                if (end == p)
                    break;
                p = *end == ',' ? end + 1 : end;
            }
        }
        else
        {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            std::exit(2);
        }
        i++;
    }
    if (a.words.empty() && a.idx_base.empty() && a.syn_n == 0)
    {
        std::fprintf(stderr, "usage: %s --words FILE [--nq N] [--bucket K] [--seed S] "
                             "[--radii 1,2,3] [--knn K]\n", argv[0]);
        std::exit(2);
    }
    return a;
}

struct Gathered
{
    std::vector<uint32_t> chars;
    std::vector<uint64_t> offsets{0};
    std::vector<int64_t> ids;
    vs_mspace space{};
    void add(const uint32_t *c, size_t n, int64_t id)
    {
        chars.insert(chars.end(), c, c + n);
        offsets.push_back(chars.size());
        ids.push_back(id);
    }
    void finish()
    {
        space.kind = VS_MSPACE_STRINGS;
        space.n = ids.size();
        space.chars = chars.data();
        space.offsets = offsets.data();
        space.ids = ids.data();
    }
};

// Gzipped IDX images (magic 0x00000803, big-endian counts) as floats; at most `limit` images.
std::vector<float> read_idx(const std::string &path, size_t limit, size_t *n, size_t *dim)
{
    std::string cmd = "gzip -dc '" + path + "'";
    FILE *f = popen(cmd.c_str(), "r");
    std::vector<float> out;
    unsigned char h[16];
    if (f == nullptr || fread(h, 1, 16, f) != 16 || h[2] != 8 || h[3] != 3)
    {
        std::fprintf(stderr, "cannot read IDX images from %s\n", path.c_str());
        std::exit(1);
    }
    auto be = [&](int o) { return (size_t(h[o]) << 24) | (size_t(h[o + 1]) << 16) | (size_t(h[o + 2]) << 8) | h[o + 3]; };
    size_t count = std::min(be(4), limit);
    *dim = be(8) * be(12);
    std::vector<unsigned char> buf(*dim);
    for (size_t i = 0; i < count; i++)
    {
        if (fread(buf.data(), 1, *dim, f) != *dim)
            break;
        for (unsigned char c : buf)
            out.push_back(static_cast<float>(c));
    }
    pclose(f);
    *n = out.size() / *dim;
    return out;
}

int run_vectors(const Args &args)
{
    size_t n = 0, dim = 0, nq = 0, qdim = 0;
    std::vector<float> base, qv;
    if (args.syn_n > 0)
    {
        std::mt19937_64 rng(args.seed);
        std::normal_distribution<float> g(0.0f, 1.0f);
        n = args.syn_n;
        dim = qdim = args.syn_dim;
        nq = args.nq;
        std::vector<float> centers(args.syn_clusters * dim);
        for (auto &x : centers)
            x = 10.0f * g(rng);
        auto fill = [&](std::vector<float> &out, size_t count) {
            out.resize(count * dim);
            for (size_t i = 0; i < count; i++)
            {
                size_t c = rng() % args.syn_clusters;
                for (size_t j = 0; j < dim; j++)
                    out[i * dim + j] = centers[c * dim + j] + g(rng);
            }
        };
        fill(base, n);
        fill(qv, nq);
    }
    else
    {
        base = read_idx(args.idx_base, SIZE_MAX, &n, &dim);
        qv = read_idx(args.idx_queries, args.nq, &nq, &qdim);
    }
    if (qdim != dim || n == 0 || nq == 0)
    {
        std::fprintf(stderr, "dimensions differ or empty sets\n");
        return 1;
    }
    vs_mspace all{};
    all.kind = VS_MSPACE_VECTORS;
    all.metric = args.metric;
    all.dim = dim;
    all.n = n;
    all.vectors = base.data();
    std::printf("vectors %zu x %zu, %s, bucket %zu, queries %zu\n", n, dim,
                args.metric == VS_METRIC_L2 ? "L2" : "L1", args.bucket, nq);
    std::vector<size_t> centers(n), members(n), offsets(n + 1);
    std::vector<double> radii(n);
    size_t nc = 0;
    uint64_t build_evals = 0;
    auto t0 = Clock::now();
    if (vs_lc_build(&all, args.bucket, args.seed, nullptr, nullptr, centers.data(), &nc,
                    members.data(), offsets.data(), radii.data(), &build_evals) != VS_OK)
        return 1;
    std::printf("build: %.2f s, %zu centers, %.3g distance evaluations\n", seconds_since(t0), nc,
                static_cast<double>(build_evals));
    std::vector<float> cv, mv;
    std::vector<int64_t> cid, mid;
    for (size_t c = 0; c < nc; c++)
    {
        cv.insert(cv.end(), base.begin() + centers[c] * dim, base.begin() + (centers[c] + 1) * dim);
        cid.push_back(static_cast<int64_t>(centers[c]));
    }
    for (size_t m = 0; m < n - nc; m++)
    {
        mv.insert(mv.end(), base.begin() + members[m] * dim, base.begin() + (members[m] + 1) * dim);
        mid.push_back(static_cast<int64_t>(members[m]));
    }
    std::vector<uint64_t> boff(offsets.begin(), offsets.begin() + nc + 1);
    vs_lc lc{};
    lc.centers = all;
    lc.centers.n = nc;
    lc.centers.vectors = cv.data();
    lc.centers.ids = cid.data();
    lc.members = all;
    lc.members.n = n - nc;
    lc.members.vectors = mv.data();
    lc.members.ids = mid.data();
    lc.radii = radii.data();
    lc.bucket_offsets = boff.data();

    // radii returning about 0.01 %, 0.1 % and 1 % of the set
    std::vector<double> radius_of(3);
    {
        std::vector<std::vector<double>> kth(3);
        size_t ks[3] = {std::max<size_t>(1, n / 10000), std::max<size_t>(1, n / 1000),
                        std::max<size_t>(1, n / 100)};
        for (size_t q = 0; q < nq; q++)
        {
            vs_mobject o{qv.data() + q * dim, nullptr, dim};
            std::vector<double> d(n);
            for (size_t i = 0; i < n; i++)
            {
                vs_mobject b = vs_mspace_object(&all, i);
                d[i] = vs_mspace_distance(&all, &o, &b);
            }
            for (int j = 0; j < 3; j++)
            {
                std::nth_element(d.begin(), d.begin() + static_cast<long>(ks[j] - 1), d.end());
                kth[j].push_back(d[ks[j] - 1]);
            }
        }
        for (int j = 0; j < 3; j++)
        {
            std::sort(kth[j].begin(), kth[j].end());
            radius_of[j] = kth[j][kth[j].size() / 2];
        }
    }
    std::printf("%-10s %10s %12s %12s %12s %12s %10s\n", "radius", "share", "rows/query",
                "lc evals/q", "lc QPS", "brute QPS", "speedup");
    const char *share[3] = {"0.01%", "0.1%", "1%"};
    for (int j = 0; j < 3; j++)
    {
        double r = radius_of[j];
        uint64_t evals = 0;
        size_t hits_total = 0;
        std::vector<std::vector<int64_t>> a(nq), b(nq);
        auto t1 = Clock::now();
        for (size_t q = 0; q < nq; q++)
        {
            vs_mobject o{qv.data() + q * dim, nullptr, dim};
            vs_mhits h{};
            vs_lc_range(&lc, &o, r, nullptr, nullptr, &h, &evals);
            a[q].assign(h.ids, h.ids + h.n);
            hits_total += h.n;
            vs_mhits_free(&h);
        }
        double lc_s = seconds_since(t1);
        auto t2 = Clock::now();
        for (size_t q = 0; q < nq; q++)
        {
            vs_mobject o{qv.data() + q * dim, nullptr, dim};
            vs_mhits h{};
            vs_mspace_range(&all, &o, r, &h, nullptr);
            b[q].assign(h.ids, h.ids + h.n);
            vs_mhits_free(&h);
        }
        double bf_s = seconds_since(t2);
        for (size_t q = 0; q < nq; q++)
        {
            std::sort(a[q].begin(), a[q].end());
            std::sort(b[q].begin(), b[q].end());
            if (a[q] != b[q])
            {
                std::fprintf(stderr, "MISMATCH at radius %g, query %zu\n", r, q);
                return 1;
            }
        }
        std::printf("%-10.1f %10s %12.1f %12.0f %12.0f %12.0f %9.2fx\n", r, share[j],
                    static_cast<double>(hits_total) / nq, static_cast<double>(evals) / nq,
                    nq / lc_s, nq / bf_s, bf_s / lc_s);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    Args args = parse(argc, argv);
    if (!args.idx_base.empty() || args.syn_n > 0)
        return run_vectors(args);
    std::ifstream in(args.words);
    if (!in)
    {
        std::fprintf(stderr, "cannot read %s\n", args.words.c_str());
        return 1;
    }
    Gathered all;
    std::string line;
    std::set<uint32_t> alphabet_set;
    while (std::getline(in, line))
    {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.empty())
            continue;
        std::vector<uint32_t> w = decode(line);
        alphabet_set.insert(w.begin(), w.end());
        all.add(w.data(), w.size(), static_cast<int64_t>(all.ids.size()));
    }
    all.finish();
    std::vector<uint32_t> alphabet(alphabet_set.begin(), alphabet_set.end());
    size_t n = all.space.n;
    std::printf("words %zu, alphabet %zu code points, bucket %zu, seed %llu, queries %zu\n", n,
                alphabet.size(), args.bucket, static_cast<unsigned long long>(args.seed), args.nq);

    // queries: sampled words with one or two random edits
    std::mt19937_64 rng(args.seed * 7919 + 17);
    std::vector<std::vector<uint32_t>> queries(args.nq);
    for (size_t q = 0; q < args.nq; q++)
    {
        vs_mobject o = vs_mspace_object(&all.space, rng() % n);
        std::vector<uint32_t> w(o.chars, o.chars + o.len);
        int edits = q % 2 ? 2 : 1;
        for (int e = 0; e < edits; e++)
        {
            int op = static_cast<int>(rng() % 3);
            uint32_t c = alphabet[rng() % alphabet.size()];
            if (op == 0 || w.empty())
                w.insert(w.begin() + static_cast<long>(rng() % (w.size() + 1)), c);
            else if (op == 1)
                w.erase(w.begin() + static_cast<long>(rng() % w.size()));
            else
                w[rng() % w.size()] = c;
        }
        queries[q] = w;
    }

    // build
    std::vector<size_t> centers(n), members(n), offsets(n + 1);
    std::vector<double> radii(n);
    size_t nc = 0;
    uint64_t build_evals = 0;
    auto t0 = Clock::now();
    int st = vs_lc_build(&all.space, args.bucket, args.seed, nullptr, nullptr, centers.data(), &nc,
                         members.data(), offsets.data(), radii.data(), &build_evals);
    double build_s = seconds_since(t0);
    if (st != VS_OK)
    {
        std::fprintf(stderr, "build failed: %d\n", st);
        return 1;
    }
    std::printf("build: %.2f s, %zu centers, %.3g distance evaluations\n", build_s, nc,
                static_cast<double>(build_evals));
    Gathered cg, mg;
    for (size_t c = 0; c < nc; c++)
    {
        vs_mobject o = vs_mspace_object(&all.space, centers[c]);
        cg.add(o.chars, o.len, all.ids[centers[c]]);
    }
    for (size_t m = 0; m < n - nc; m++)
    {
        vs_mobject o = vs_mspace_object(&all.space, members[m]);
        mg.add(o.chars, o.len, all.ids[members[m]]);
    }
    cg.finish();
    mg.finish();
    std::vector<uint64_t> boff(offsets.begin(), offsets.begin() + nc + 1);
    vs_lc lc{};
    lc.centers = cg.space;
    lc.radii = radii.data();
    lc.bucket_offsets = boff.data();
    lc.members = mg.space;

    vs_cuda_lc_range_fn gpu = nullptr;
    if (!args.gpu.empty())
    {
        void *lib = dlopen(args.gpu.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr || (gpu = reinterpret_cast<vs_cuda_lc_range_fn>(
                                   dlsym(lib, VS_CUDA_LC_RANGE_SYMBOL))) == nullptr)
        {
            std::fprintf(stderr, "cannot load %s from %s\n", VS_CUDA_LC_RANGE_SYMBOL,
                         args.gpu.c_str());
            return 1;
        }
    }
    Gathered qg;
    for (size_t q = 0; q < args.nq; q++)
        qg.add(queries[q].data(), queries[q].size(), static_cast<int64_t>(q));
    qg.finish();
    std::vector<std::vector<std::vector<int64_t>>> truth;
    std::printf("%-8s %12s %12s %12s %12s %10s %10s\n", "radius", "hits/query", "lc evals/q",
                "lc QPS", "brute QPS", "speedup", "eval frac");
    for (double r : args.radii)
    {
        uint64_t lc_evals = 0, bf_evals = 0;
        size_t hits_total = 0;
        std::vector<std::vector<int64_t>> lc_ids(args.nq), bf_ids(args.nq);
        auto t1 = Clock::now();
        for (size_t q = 0; q < args.nq; q++)
        {
            vs_mobject o{nullptr, queries[q].data(), queries[q].size()};
            vs_mhits h{};
            vs_lc_range(&lc, &o, r, nullptr, nullptr, &h, &lc_evals);
            lc_ids[q].assign(h.ids, h.ids + h.n);
            hits_total += h.n;
            vs_mhits_free(&h);
        }
        double lc_s = seconds_since(t1);
        auto t2 = Clock::now();
        for (size_t q = 0; q < args.nq; q++)
        {
            vs_mobject o{nullptr, queries[q].data(), queries[q].size()};
            vs_mhits h{};
            vs_mspace_range(&all.space, &o, r, &h, &bf_evals);
            bf_ids[q].assign(h.ids, h.ids + h.n);
            vs_mhits_free(&h);
        }
        double bf_s = seconds_since(t2);
        for (size_t q = 0; q < args.nq; q++)
        {
            std::sort(lc_ids[q].begin(), lc_ids[q].end());
            std::sort(bf_ids[q].begin(), bf_ids[q].end());
            if (lc_ids[q] != bf_ids[q])
            {
                std::fprintf(stderr, "MISMATCH at radius %g, query %zu\n", r, q);
                return 1;
            }
        }
        truth.push_back(bf_ids);
        if (gpu != nullptr)
        {
            std::vector<uint64_t> off(args.nq + 1);
            int64_t *gids = nullptr;
            double *gd = nullptr;
            char err[256] = {0};
            auto t3 = Clock::now();
            int gst = gpu(&lc, &qg.space, r, off.data(), &gids, &gd, err, sizeof err);
            double g_s = seconds_since(t3);
            if (gst != VS_OK)
            {
                std::fprintf(stderr, "GPU range failed: %d %s\n", gst, err);
                return 1;
            }
            for (size_t q = 0; q < args.nq; q++)
            {
                std::vector<int64_t> got(gids + off[q], gids + off[q + 1]);
                std::sort(got.begin(), got.end());
                if (got != bf_ids[q])
                {
                    std::fprintf(stderr, "GPU MISMATCH at radius %g, query %zu\n", r, q);
                    return 1;
                }
            }
            std::free(gids);
            std::free(gd);
            std::printf("  gpu batch: %.1f ms, %.0f QPS (%.1fx the brute force), answers equal\n",
                        g_s * 1e3, args.nq / g_s, bf_s / g_s);
        }
        std::printf("%-8g %12.2f %12.0f %12.0f %12.0f %9.1fx %9.3f\n", r,
                    static_cast<double>(hits_total) / args.nq,
                    static_cast<double>(lc_evals) / args.nq, args.nq / lc_s, args.nq / bf_s,
                    bf_s / lc_s, static_cast<double>(lc_evals) / static_cast<double>(bf_evals));
    }

    for (double alpha : args.alphas)
    {
        std::vector<size_t> piv(VS_SSS_MAX_PIVOTS);
        size_t np = 0;
        double diameter = 0;
        auto t1 = Clock::now();
        vs_sss_select(&all.space, alpha, piv.size(), piv.data(), &np, &diameter, nullptr);
        Gathered pg;
        for (size_t j = 0; j < np; j++)
        {
            vs_mobject o = vs_mspace_object(&all.space, piv[j]);
            pg.add(o.chars, o.len, 0);
        }
        pg.finish();
        std::vector<float> table(n * np);
        vs_sss_table(&pg.space, &all.space, nullptr, nullptr, table.data(), nullptr);
        double build_s = seconds_since(t1);
        vs_sss sss{pg.space, all.space, table.data()};
        std::printf("sss alpha %.2f: %zu pivots (diameter %.0f), build %.2f s\n", alpha, np,
                    diameter, build_s);
        for (size_t ri = 0; ri < args.radii.size(); ri++)
        {
            double r = args.radii[ri];
            uint64_t evals = 0;
            auto t2 = Clock::now();
            for (size_t q = 0; q < args.nq; q++)
            {
                vs_mobject o{nullptr, queries[q].data(), queries[q].size()};
                vs_mhits h{};
                vs_sss_range(&sss, &o, r, nullptr, nullptr, &h, &evals);
                std::vector<int64_t> got(h.ids, h.ids + h.n);
                vs_mhits_free(&h);
                std::sort(got.begin(), got.end());
                if (got != truth[ri][q])
                {
                    std::fprintf(stderr, "SSS MISMATCH at radius %g, query %zu\n", r, q);
                    return 1;
                }
            }
            double s2 = seconds_since(t2);
            std::printf("  radius %g: %.0f evals/query, %.0f QPS\n", r,
                        static_cast<double>(evals) / args.nq, args.nq / s2);
        }
    }

    if (args.knn > 0)
    {
        uint64_t evals = 0;
        std::vector<int64_t> ids(args.knn);
        std::vector<double> dist(args.knn);
        std::vector<std::vector<double>> got(args.nq);
        auto t1 = Clock::now();
        for (size_t q = 0; q < args.nq; q++)
        {
            vs_mobject o{nullptr, queries[q].data(), queries[q].size()};
            size_t count = 0;
            vs_lc_knn(&lc, &o, args.knn, nullptr, nullptr, ids.data(), dist.data(), &count, &evals);
            got[q].assign(dist.begin(), dist.begin() + static_cast<long>(count));
        }
        double s = seconds_since(t1);
        // check against brute force distances (first 100 queries)
        for (size_t q = 0; q < std::min<size_t>(args.nq, 100); q++)
        {
            std::vector<double> d(n);
            for (size_t i = 0; i < n; i++)
            {
                vs_mobject a{nullptr, queries[q].data(), queries[q].size()};
                vs_mobject b = vs_mspace_object(&all.space, i);
                d[i] = vs_mspace_distance(&all.space, &a, &b);
            }
            std::partial_sort(d.begin(), d.begin() + static_cast<long>(args.knn), d.end());
            d.resize(args.knn);
            if (d != got[q])
            {
                std::fprintf(stderr, "kNN MISMATCH at query %zu\n", q);
                return 1;
            }
        }
        std::printf("knn k=%zu: %.0f evals/query, %.0f QPS (first 100 checked against brute force)\n",
                    args.knn, static_cast<double>(evals) / args.nq, args.nq / s);
    }
    return 0;
}
