// Metric-space benchmark: the List of Clusters (vsearch/lc.h) on the CPU against a single-thread
// brute force, on a word list under edit distance (Barrientos et al.'s setting: radii 1, 2, 3).
//
//   vsearch_metric_bench --words FILE [--nq 1000] [--bucket 32] [--seed 1] [--radii 1,2,3]
//                        [--knn 10] [--alphas 0.3,0.4,0.5] [--gpu path/to/vsearch_cuda.so]
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
    if (a.words.empty())
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

} // namespace

int main(int argc, char **argv)
{
    Args args = parse(argc, argv);
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
