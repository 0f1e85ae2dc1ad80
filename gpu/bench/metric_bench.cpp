// Metric-space benchmark: the List of Clusters (vsearch/lc.h) and SSS pivot tables (vsearch/sss.h)
// on an engine context (vsearch/metric.h: the GPU with --gpu, else the engine's CPU backend) and on
// the CPU host path, against brute forces, on a word list under edit distance (Barrientos et al.'s
// setting: radii 1, 2, 3) or on vectors.
//
//   vsearch_metric_bench --words FILE [--nq 10000] [--cpu-nq 1000] [--bucket 32] [--alpha 0.5]
//                        [--seed 1] [--radii 1,2,3] [--knn 10] [--gpu path/to/vsearch_cuda.so]
//                        [--limit N] [--repeat 3]
//   vsearch_metric_bench --idx-base TRAIN.gz --idx-queries TEST.gz [--metric l2|l1] ...
//   vsearch_metric_bench --synthetic N,DIM,CLUSTERS [--metric l2|l1] ...
//
// Words: one per line (UTF-8, decoded to code points; empty lines skipped), e.g. Debian's
// wspanish (/usr/share/dict/spanish, 86 016 words; --limit N keeps the first N words).  Queries:
// a seeded sample of --nq words of the list, each with one or two random edits (insertion,
// deletion or substitution at a random position; the character drawn from the list's own
// characters; one edit for even query numbers, two for odd).  Vectors: IDX image files (gzipped,
// .xz or plain; Fashion-MNIST's train-images-idx3-ubyte.gz and the first --nq test images; pixels
// as floats) or seeded clustered vectors (--synthetic: cluster centers N(0, 10^2) per coordinate,
// rows and queries a center plus N(0, 1) noise), under L2 or L1, radii calibrated to return
// about 0.01 %, 0.1 % and 1 % of the set (the median over the first 100 queries of the distance
// to their (n/10^4)-th, (n/10^3)-th and (n/100)-th nearest row).
//
// Per radius, one line each:
//   engine LC, SSS, brute   the whole batch of --nq queries as one call of vs_metric_index_range
//                           on the engine context (with --gpu: the CUDA backend, which uploads the
//                           queries, counts, writes and downloads the matches; the brute force is
//                           a flat object, every object with the same Myers / exact-distance code
//                           as the indexes), the median of --repeat calls after a warm-up;
//   CPU LC, CPU brute       the host functions on one thread (vs_lc_range, as a backend searches
//                           without the worker; vs_mspace_range) over the first --cpu-nq queries;
// with distance evaluations per query (LC and SSS from the host functions' counts, which the GPU
// kernels match up to one chunk of 128 centers; the brute force's is n), QPS and the ratios.  Every
// answer is compared: engine LC, SSS and brute with each other on every query, and with the CPU
// brute force on the --cpu-nq queries; any difference is an error (exit 1).  Then kNN (--knn k)
// the same way.  Build: the LC and SSS builds on one thread (host functions), the same builds in
// the engine context (vs_metric_build_lc, vs_metric_select_sss + vs_metric_table_sss: on the GPU
// with --gpu, else on the CPU backend's threads; any difference from the host's is an error), and
// the engine objects' creation (the copy to the device).  On words, per radius, what the GPU
// kernels read per query (discard_pass: SSS's discard pass against the brute force's length
// filter, computed from the host arrays over at most 200 queries).
#include "vsearch/edit.h"
#include "vsearch/lc.h"
#include "vsearch/metric.h"
#include "vsearch/sss.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
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
    size_t nq = 10000;
    size_t cpu_nq = 1000;
    size_t bucket = 0; // 0: 32 for words, 64 for vectors
    double alpha = 0.5;
    uint64_t seed = 1;
    std::vector<double> radii = {1, 2, 3};
    size_t knn = 10;
    size_t limit = 0;
    int repeat = 3;
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
        else if (k == "--cpu-nq")
            a.cpu_nq = std::strtoull(v, nullptr, 10);
        else if (k == "--bucket")
            a.bucket = std::strtoull(v, nullptr, 10);
        else if (k == "--alpha")
            a.alpha = std::strtod(v, nullptr);
        else if (k == "--seed")
            a.seed = std::strtoull(v, nullptr, 10);
        else if (k == "--limit")
            a.limit = std::strtoull(v, nullptr, 10);
        else if (k == "--repeat")
            a.repeat = std::max(1, std::atoi(v));
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
        else if (k == "--radii")
        {
            a.radii.clear();
            for (const char *p = v; *p;)
            {
                char *end;
                a.radii.push_back(std::strtod(p, &end));
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
        std::fprintf(stderr, "usage: %s --words FILE | --idx-base F --idx-queries F | "
                             "--synthetic N,DIM,CLUSTERS  [--nq N] [--cpu-nq N] [--bucket K] "
                             "[--alpha A] [--radii 1,2,3] [--knn K] [--gpu LIB]\n",
                     argv[0]);
        std::exit(2);
    }
    if (a.nq == 0)
        a.nq = 1;
    a.cpu_nq = std::min(a.cpu_nq, a.nq);
    return a;
}

// A set of objects (strings or vectors) with its own arrays.
struct Set
{
    vs_mspace_kind kind = VS_MSPACE_STRINGS;
    vs_metric metric = VS_METRIC_L2;
    size_t dim = 0;
    std::vector<uint32_t> chars;
    std::vector<uint64_t> offsets{0};
    std::vector<float> vectors;
    std::vector<int64_t> ids;
    void add_string(const uint32_t *c, size_t n, int64_t id)
    {
        chars.insert(chars.end(), c, c + n);
        offsets.push_back(chars.size());
        ids.push_back(id);
    }
    void add_vector(const float *v, int64_t id)
    {
        vectors.insert(vectors.end(), v, v + dim);
        ids.push_back(id);
    }
    void add(const vs_mobject &o, int64_t id)
    {
        if (kind == VS_MSPACE_STRINGS)
            add_string(o.chars, o.len, id);
        else
            add_vector(o.vector, id);
    }
    // The first n objects as a space (n = SIZE_MAX: all).
    vs_mspace space(size_t n = SIZE_MAX) const
    {
        vs_mspace s{};
        s.kind = kind;
        s.metric = metric;
        s.dim = dim;
        s.n = std::min(n, ids.size());
        s.chars = chars.data();
        s.offsets = offsets.data();
        s.vectors = vectors.data();
        s.ids = ids.data();
        return s;
    }
    Set like() const
    {
        Set s;
        s.kind = kind;
        s.metric = metric;
        s.dim = dim;
        return s;
    }
};

// IDX images (magic 0x00000803, big-endian counts), gzipped, xz-compressed (a name ending in .xz:
// what bench/metric-gpu carries) or plain, as floats; at most `limit` images.
std::vector<float> read_idx(const std::string &path, size_t limit, size_t *n, size_t *dim)
{
    const bool xz = path.size() > 3 && path.compare(path.size() - 3, 3, ".xz") == 0;
    std::string cmd = (xz ? "xz -dc '" : "gzip -dcf '") + path + "'";
    FILE *f = popen(cmd.c_str(), "r");
    std::vector<float> out;
    unsigned char h[16];
    if (f == nullptr || fread(h, 1, 16, f) != 16 || h[2] != 8 || h[3] != 3)
    {
        std::fprintf(stderr, "cannot read IDX images from %s\n", path.c_str());
        std::exit(1);
    }
    auto be = [&](int o) {
        return (size_t(h[o]) << 24) | (size_t(h[o + 1]) << 16) | (size_t(h[o + 2]) << 8) | h[o + 3];
    };
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

bool load_words(const Args &args, Set &all, Set &queries)
{
    std::ifstream in(args.words);
    if (!in)
    {
        std::fprintf(stderr, "cannot read %s\n", args.words.c_str());
        return false;
    }
    std::string line;
    std::set<uint32_t> alphabet_set;
    while (std::getline(in, line) && (args.limit == 0 || all.ids.size() < args.limit))
    {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        if (line.empty())
            continue;
        std::vector<uint32_t> w = decode(line);
        alphabet_set.insert(w.begin(), w.end());
        all.add_string(w.data(), w.size(), static_cast<int64_t>(all.ids.size()));
    }
    if (all.ids.empty())
        return false;
    std::vector<uint32_t> alphabet(alphabet_set.begin(), alphabet_set.end());
    const vs_mspace s = all.space();
    std::mt19937_64 rng(args.seed * 7919 + 17);
    for (size_t q = 0; q < args.nq; q++)
    {
        vs_mobject o = vs_mspace_object(&s, rng() % s.n);
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
        queries.add_string(w.data(), w.size(), static_cast<int64_t>(q));
    }
    std::printf("words %zu (%s), alphabet %zu code points, queries %zu (sampled words with one "
                "edit (even) or two (odd), seed %llu)\n",
                s.n, args.words.c_str(), alphabet.size(), args.nq,
                static_cast<unsigned long long>(args.seed));
    return true;
}

bool load_vectors(const Args &args, Set &all, Set &queries, std::vector<double> &radii)
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
        base = read_idx(args.idx_base, args.limit ? args.limit : SIZE_MAX, &n, &dim);
        qv = read_idx(args.idx_queries, args.nq, &nq, &qdim);
    }
    if (qdim != dim || n == 0 || nq == 0)
    {
        std::fprintf(stderr, "dimensions differ or empty sets\n");
        return false;
    }
    for (Set *s : {&all, &queries})
    {
        s->kind = VS_MSPACE_VECTORS;
        s->metric = args.metric;
        s->dim = dim;
    }
    for (size_t i = 0; i < n; i++)
        all.add_vector(base.data() + i * dim, static_cast<int64_t>(i));
    for (size_t i = 0; i < nq; i++)
        queries.add_vector(qv.data() + i * dim, static_cast<int64_t>(i));
    std::printf("vectors %zu x %zu, %s, queries %zu\n", n, dim,
                args.metric == VS_METRIC_L2 ? "L2" : "L1", nq);
    // radii returning about 0.01 %, 0.1 % and 1 % of the set
    const vs_mspace s = all.space();
    std::vector<std::vector<double>> kth(3);
    size_t ks[3] = {std::max<size_t>(1, n / 10000), std::max<size_t>(1, n / 1000),
                    std::max<size_t>(1, n / 100)};
    for (size_t q = 0; q < std::min<size_t>(nq, 100); q++)
    {
        vs_mobject o{qv.data() + q * dim, nullptr, dim};
        std::vector<double> d(n);
        for (size_t i = 0; i < n; i++)
        {
            vs_mobject b = vs_mspace_object(&s, i);
            d[i] = vs_mspace_distance(&s, &o, &b);
        }
        for (int j = 0; j < 3; j++)
        {
            std::nth_element(d.begin(), d.begin() + static_cast<long>(ks[j] - 1), d.end());
            kth[j].push_back(d[ks[j] - 1]);
        }
    }
    radii.clear();
    for (int j = 0; j < 3; j++)
    {
        std::sort(kth[j].begin(), kth[j].end());
        radii.push_back(kth[j][kth[j].size() / 2]);
    }
    return true;
}

vs_context *make_context(const Args &args, std::string &name)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = args.gpu.empty() ? VS_BACKEND_CPU : VS_BACKEND_CUDA;
    o.cuda_library = args.gpu.empty() ? nullptr : args.gpu.c_str();
    vs_context *ctx = nullptr;
    char err[512] = {0};
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        std::fprintf(stderr, "cannot create the engine context: %s\n", err);
        return nullptr;
    }
    vs_context_info info{};
    vs_context_get_info(ctx, &info);
    name = info.device_name;
    return ctx;
}

using Answer = std::vector<std::vector<int64_t>>; // ids per query, ascending

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// An engine batch call, timed: a warm-up on the first 100 queries, then the median of `repeat`.
double timed(int repeat, const std::function<void(bool warmup)> &call)
{
    call(true);
    std::vector<double> t;
    for (int i = 0; i < repeat; i++)
    {
        auto t0 = Clock::now();
        call(false);
        t.push_back(seconds_since(t0));
    }
    return median(t);
}

// What the CUDA kernels read per query at radius r, from the host arrays (strings): the SSS
// discard pass (a thread per row, a warp per 32 consecutive rows, pivot-major table: a warp reads
// 128 bytes per step until its slowest row is discarded) with float entries tested one pivot at a
// time and with byte entries tested 4 at a time, against the brute force's length filter (Myers
// returns at once when the lengths differ by more than r: 8 bytes of offsets per row, then the
// characters of the rows that pass it).  Over the first `count` queries.
void discard_pass(const vs_sss &sss, const vs_mspace &queries, size_t count, double r)
{
    const vs_mspace &rows = sss.objects;
    const size_t n = rows.n, np = sss.pivots.n;
    double tested = 0, warp_floats = 0, warp_words = 0, brute = 0, near = 0, survivors = 0;
    std::vector<double> dq(np);
    for (size_t q = 0; q < count; q++)
    {
        vs_mobject o = vs_mspace_object(&queries, q);
        for (size_t j = 0; j < np; j++)
        {
            vs_mobject p = vs_mspace_object(&sss.pivots, j);
            dq[j] = vs_mspace_distance(&sss.pivots, &o, &p);
        }
        for (size_t w0 = 0; w0 < n; w0 += 32)
        {
            size_t slowest = 0, slowest_words = 0;
            for (size_t i = w0; i < std::min(n, w0 + 32); i++)
            {
                size_t k = 0, kc = 0; // pivots tested until the discard: floats, clamped bytes
                while (k < np && !(std::fabs(sss.table[i * np + k] - dq[k]) > r))
                    k++;
                while (kc < np && !(std::fabs(std::min<double>(sss.table[i * np + kc], 255) -
                                              std::min(dq[kc], 255.0)) > r))
                    kc++;
                survivors += k == np;
                tested += static_cast<double>(std::min(k + 1, np));
                slowest = std::max(slowest, std::min(k + 1, np));
                slowest_words = std::max(slowest_words, std::min(kc / 4 + 1, (np + 3) / 4));
                const uint64_t len = rows.offsets[i + 1] - rows.offsets[i];
                const bool in = std::fabs(static_cast<double>(len) - o.len) <= r;
                near += in;
                brute += 8 + (in ? 4.0 * static_cast<double>(len) : 0);
            }
            warp_floats += 128.0 * static_cast<double>(slowest);
            warp_words += 128.0 * static_cast<double>(slowest_words);
        }
    }
    const double c = static_cast<double>(count);
    std::printf("  radius %g, %zu queries: SSS discard pass: %.2f pivots tested per row, %.1f per "
                "warp of 32 rows (its slowest row); table bytes per query: floats one pivot at a "
                "time %.0f kB, bytes 4 pivots to a word %.0f kB; %.1f rows survive; the brute "
                "force's length filter reads %.0f kB per query (%.1f %% of the rows within r of "
                "the query's length)\n",
                r, count, tested / c / static_cast<double>(n),
                warp_floats / 128.0 / c / std::ceil(static_cast<double>(n) / 32),
                warp_floats / c / 1e3, warp_words / c / 1e3, survivors / c, brute / c / 1e3,
                100.0 * near / c / static_cast<double>(n));
}

int run(const Args &args, const Set &all, const Set &queries, const std::vector<double> &radii)
{
    const vs_mspace as = all.space();
    const size_t n = as.n, nq = queries.ids.size(), cnq = std::min(args.cpu_nq, nq);
    const vs_mspace qs = queries.space(), warm = queries.space(100), cq = queries.space(cnq);
    const size_t bucket = args.bucket ? args.bucket : as.kind == VS_MSPACE_STRINGS ? 32 : 64;
    std::string device;
    vs_context *ctx = make_context(args, device);
    if (!ctx)
        return 1;

    // builds (host, one thread)
    std::vector<size_t> centers(n), members(n), offsets(n + 1);
    std::vector<double> cradii(n);
    size_t nc = 0;
    uint64_t build_evals = 0;
    auto t0 = Clock::now();
    if (vs_lc_build(&as, bucket, args.seed, nullptr, nullptr, centers.data(), &nc, members.data(),
                    offsets.data(), cradii.data(), &build_evals) != VS_OK)
        return 1;
    const double lc_build = seconds_since(t0);
    Set cs = all.like(), ms = all.like();
    for (size_t c = 0; c < nc; c++)
        cs.add(vs_mspace_object(&as, centers[c]), as.ids[centers[c]]);
    for (size_t m = 0; m < n - nc; m++)
        ms.add(vs_mspace_object(&as, members[m]), as.ids[members[m]]);
    std::vector<uint64_t> boff(offsets.begin(), offsets.begin() + nc + 1);
    vs_lc lc{cs.space(), cradii.data(), boff.data(), ms.space()};

    std::vector<size_t> piv(VS_SSS_MAX_PIVOTS);
    size_t np = 0;
    double diameter = 0;
    t0 = Clock::now();
    vs_sss_select(&as, args.alpha, piv.size(), piv.data(), &np, &diameter, nullptr);
    Set ps = all.like();
    for (size_t j = 0; j < np; j++)
        ps.add(vs_mspace_object(&as, piv[j]), 0);
    std::vector<float> table(std::max<size_t>(n * np, 1));
    vs_mspace pspace = ps.space();
    vs_sss_table(&pspace, &as, nullptr, nullptr, table.data(), nullptr);
    const double sss_build = seconds_since(t0);
    vs_sss sss{pspace, as, table.data()};

    // the same builds in the engine context, which must give the same results
    std::vector<size_t> ecenters(n), emembers(n), eoffsets(n + 1), epiv(VS_SSS_MAX_PIVOTS);
    std::vector<double> eradii(n);
    std::vector<float> etable(table.size());
    size_t enc = 0, enp = 0;
    double ediameter = 0;
    t0 = Clock::now();
    vs_status bst = vs_metric_build_lc(ctx, &as, bucket, args.seed, ecenters.data(), &enc,
                                       emembers.data(), eoffsets.data(), eradii.data());
    const double elc_build = seconds_since(t0);
    t0 = Clock::now();
    if (bst == VS_OK)
        bst = vs_metric_select_sss(ctx, &as, args.alpha, epiv.size(), epiv.data(), &enp,
                                   &ediameter);
    if (bst == VS_OK && enp == np)
        bst = vs_metric_table_sss(ctx, &as, epiv.data(), enp, etable.data());
    const double esss_build = seconds_since(t0);
    if (bst != VS_OK)
    {
        std::fprintf(stderr, "engine builds: %s\n", vs_last_error(ctx));
        return 1;
    }
    if (enc != nc || !std::equal(centers.begin(), centers.begin() + nc, ecenters.begin()) ||
        !std::equal(members.begin(), members.begin() + (n - nc), emembers.begin()) ||
        !std::equal(offsets.begin(), offsets.begin() + nc + 1, eoffsets.begin()) ||
        !std::equal(cradii.begin(), cradii.begin() + nc, eradii.begin()) || enp != np ||
        !std::equal(piv.begin(), piv.begin() + np, epiv.begin()) || ediameter != diameter ||
        (n * np > 0 && etable != table))
    {
        std::fprintf(stderr, "the engine's builds differ from the host functions'\n");
        return 1;
    }

    vs_metric_index *elc = nullptr, *esss = nullptr, *eflat = nullptr;
    t0 = Clock::now();
    vs_status st = vs_metric_index_lc(ctx, &lc, &elc);
    const double lc_up = seconds_since(t0);
    t0 = Clock::now();
    if (st == VS_OK)
        st = vs_metric_index_sss(ctx, &sss, &esss);
    const double sss_up = seconds_since(t0);
    if (st == VS_OK)
        st = vs_metric_index_flat(ctx, &as, &eflat);
    if (st != VS_OK)
    {
        std::fprintf(stderr, "engine objects: %s\n", vs_last_error(ctx));
        return 1;
    }
    std::printf("engine: %s\n", device.c_str());
    std::printf("build (host, one thread): LC bucket %zu: %.2f s, %zu centers, %.3g distances; "
                "SSS alpha %.2f: %.2f s, %zu pivots (diameter estimate %.4g); copies to the "
                "engine: LC %.3f s, SSS %.3f s\n",
                bucket, lc_build, nc, static_cast<double>(build_evals), args.alpha, sss_build, np,
                diameter, lc_up, sss_up);
    std::printf("build (engine context, the same lists and tables): LC %.2f s (%.1fx the host "
                "build's speed), SSS %.2f s (%.1fx)\n",
                elc_build, lc_build / elc_build, esss_build, sss_build / esss_build);
    if (as.kind == VS_MSPACE_STRINGS && np > 0)
    {
        std::printf("what the GPU kernels read per query (from the host arrays):\n");
        for (double r : radii)
            discard_pass(sss, cq, std::min<size_t>(cnq, 200), r);
    }
    std::printf("engine QPS: one call of %zu queries, median of %d after a warm-up; CPU QPS: one "
                "thread over the first %zu queries\n\n",
                nq, args.repeat, cnq);

    int bad = 0;
    auto engine_range = [&](vs_metric_index *idx, double r, Answer *out) {
        return timed(args.repeat, [&](bool warmup) {
            vs_range_result res{};
            if (vs_metric_index_range(ctx, idx, warmup ? &warm : &qs, r, nullptr, nullptr, &res) !=
                VS_OK)
            {
                std::fprintf(stderr, "engine range failed: %s\n", vs_last_error(ctx));
                std::exit(1);
            }
            if (!warmup && out)
            {
                out->assign(nq, {});
                for (size_t q = 0; q < nq; q++)
                    (*out)[q].assign(res.ids + res.offsets[q], res.ids + res.offsets[q + 1]);
            }
            vs_range_result_free(&res);
        });
    };
    auto host_range = [&](std::function<int(const vs_mobject &, vs_mhits *, uint64_t *)> f,
                          uint64_t *evals, Answer *out) {
        out->assign(cnq, {});
        auto t = Clock::now();
        for (size_t q = 0; q < cnq; q++)
        {
            vs_mobject o = vs_mspace_object(&cq, q);
            vs_mhits h{};
            f(o, &h, evals);
            (*out)[q].assign(h.ids, h.ids + h.n);
            std::sort((*out)[q].begin(), (*out)[q].end());
            vs_mhits_free(&h);
        }
        return seconds_since(t);
    };
    auto compare = [&](const Answer &a, const Answer &b, size_t count, const char *what,
                       double r) {
        for (size_t q = 0; q < count; q++)
            if (a[q] != b[q])
            {
                std::fprintf(stderr, "MISMATCH %s at radius %g, query %zu\n", what, r, q);
                bad = 1;
                return;
            }
    };

    std::printf("%-7s %9s %10s %10s | %11s %11s %11s %11s %11s | %9s %9s %9s %9s %9s\n",
                "radius", "rows/q", "LC dist/q", "SSS dist/q", "eng LC", "eng SSS", "eng brute",
                "CPU LC", "CPU brute", "engLC/CB", "engLC/EB", "engSSS/EB", "engSSS/CB",
                "CPU LC/CB");
    for (double r : radii)
    {
        Answer glc, gsss, gflat, clc, cbf, csss;
        const double t_lc = engine_range(elc, r, &glc);
        const double t_sss = engine_range(esss, r, &gsss);
        const double t_flat = engine_range(eflat, r, &gflat);
        uint64_t lc_evals = 0, sss_evals = 0, bf_evals = 0;
        const double c_lc = host_range(
            [&](const vs_mobject &o, vs_mhits *h, uint64_t *e) {
                return vs_lc_range(&lc, &o, r, nullptr, nullptr, h, e);
            },
            &lc_evals, &clc);
        const double c_bf = host_range(
            [&](const vs_mobject &o, vs_mhits *h, uint64_t *e) {
                return vs_mspace_range(&as, &o, r, h, e);
            },
            &bf_evals, &cbf);
        host_range(
            [&](const vs_mobject &o, vs_mhits *h, uint64_t *e) {
                return vs_sss_range(&sss, &o, r, nullptr, nullptr, h, e);
            },
            &sss_evals, &csss);
        compare(glc, gflat, nq, "engine LC / engine brute", r);
        compare(gsss, gflat, nq, "engine SSS / engine brute", r);
        compare(gflat, cbf, cnq, "engine brute / CPU brute", r);
        compare(clc, cbf, cnq, "CPU LC / CPU brute", r);
        compare(csss, cbf, cnq, "CPU SSS / CPU brute", r);
        size_t rows = 0;
        for (const auto &a : gflat)
            rows += a.size();
        const double q_lc = nq / t_lc, q_sss = nq / t_sss, q_flat = nq / t_flat,
                     q_clc = cnq / c_lc, q_cbf = cnq / c_bf;
        std::printf("%-7.4g %9.2f %10.0f %10.0f | %11.0f %11.0f %11.0f %11.0f %11.0f | %8.1fx "
                    "%8.2fx %8.2fx %8.1fx %8.1fx\n",
                    r, static_cast<double>(rows) / nq, static_cast<double>(lc_evals) / cnq,
                    static_cast<double>(sss_evals) / cnq, q_lc, q_sss, q_flat, q_clc, q_cbf,
                    q_lc / q_cbf, q_lc / q_flat, q_sss / q_flat, q_sss / q_cbf, q_clc / q_cbf);
    }

    if (args.knn > 0)
    {
        const size_t k = args.knn;
        std::vector<int64_t> ids(nq * k), counts(nq);
        std::vector<float> d(nq * k);
        auto engine_knn = [&](vs_metric_index *idx, std::vector<std::vector<float>> *out) {
            return timed(args.repeat, [&](bool warmup) {
                if (vs_metric_index_knn(ctx, idx, warmup ? &warm : &qs, k, ids.data(), d.data(),
                                        counts.data()) != VS_OK)
                {
                    std::fprintf(stderr, "engine kNN failed: %s\n", vs_last_error(ctx));
                    std::exit(1);
                }
                if (!warmup)
                {
                    out->assign(nq, {});
                    for (size_t q = 0; q < nq; q++)
                        (*out)[q].assign(d.begin() + q * k, d.begin() + q * k + counts[q]);
                }
            });
        };
        std::vector<std::vector<float>> glc, gsss, gflat;
        std::vector<std::vector<int64_t>> idlc(nq), idflat(nq);
        const double t_lc = engine_knn(elc, &glc);
        for (size_t q = 0; q < nq; q++)
            idlc[q].assign(ids.begin() + q * k, ids.begin() + q * k + counts[q]);
        const double t_sss = engine_knn(esss, &gsss);
        const double t_flat = engine_knn(eflat, &gflat);
        for (size_t q = 0; q < nq; q++)
            idflat[q].assign(ids.begin() + q * k, ids.begin() + q * k + counts[q]);
        if (glc != gflat || gsss != gflat || idlc != idflat)
        {
            std::fprintf(stderr, "kNN MISMATCH between the engine's LC, SSS and brute force\n");
            bad = 1;
        }
        uint64_t lc_evals = 0, sss_evals = 0;
        std::vector<int64_t> hid(k);
        std::vector<double> hd(k);
        auto t1 = Clock::now();
        for (size_t q = 0; q < cnq; q++)
        {
            vs_mobject o = vs_mspace_object(&cq, q);
            size_t count = 0;
            vs_lc_knn(&lc, &o, k, nullptr, nullptr, hid.data(), hd.data(), &count, &lc_evals);
            std::vector<int64_t> got(hid.begin(), hid.begin() + static_cast<long>(count));
            if (got != idflat[q])
            {
                std::fprintf(stderr, "kNN MISMATCH CPU LC / engine at query %zu\n", q);
                bad = 1;
            }
        }
        const double c_lc = seconds_since(t1);
        for (size_t q = 0; q < cnq; q++)
        {
            vs_mobject o = vs_mspace_object(&cq, q);
            size_t count = 0;
            vs_sss_knn(&sss, &o, k, nullptr, nullptr, hid.data(), hd.data(), &count, &sss_evals);
        }
        // the single-thread brute force: every distance, a bounded top k
        t1 = Clock::now();
        for (size_t q = 0; q < cnq; q++)
        {
            vs_mobject o = vs_mspace_object(&cq, q);
            std::vector<std::pair<double, int64_t>> best;
            for (size_t i = 0; i < n; i++)
            {
                vs_mobject b = vs_mspace_object(&as, i);
                best.emplace_back(vs_mspace_distance(&as, &o, &b), as.ids[i]);
            }
            std::partial_sort(best.begin(), best.begin() + static_cast<long>(std::min(k, n)),
                              best.end());
        }
        const double c_bf = seconds_since(t1);
        const double q_lc = nq / t_lc, q_sss = nq / t_sss, q_flat = nq / t_flat,
                     q_clc = cnq / c_lc, q_cbf = cnq / c_bf;
        std::printf("%-7s %9zu %10.0f %10.0f | %11.0f %11.0f %11.0f %11.0f %11.0f | %8.1fx "
                    "%8.2fx %8.2fx %8.1fx %8.1fx\n",
                    ("knn" + std::to_string(k)).c_str(), k, static_cast<double>(lc_evals) / cnq,
                    static_cast<double>(sss_evals) / cnq, q_lc, q_sss, q_flat, q_clc, q_cbf,
                    q_lc / q_cbf, q_lc / q_flat, q_sss / q_flat, q_sss / q_cbf, q_clc / q_cbf);
    }
    std::printf("\ncolumns: engLC/CB = engine LC over the CPU brute force, engLC/EB = engine LC "
                "over the engine brute force, likewise SSS; CPU LC/CB = the CPU path over the CPU "
                "brute force\n%s\n",
                bad ? "ANSWERS DIFFER" : "every answer equal");
    vs_metric_index_destroy(ctx, elc);
    vs_metric_index_destroy(ctx, esss);
    vs_metric_index_destroy(ctx, eflat);
    vs_context_destroy(ctx);
    return bad;
}

} // namespace

int main(int argc, char **argv)
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // a log cut by a timeout keeps every line so far
    Args args = parse(argc, argv);
    Set all, queries;
    std::vector<double> radii = args.radii;
    if (!args.idx_base.empty() || args.syn_n > 0)
    {
        if (!load_vectors(args, all, queries, radii))
            return 1;
    }
    else if (!load_words(args, all, queries))
        return 1;
    return run(args, all, queries, radii);
}
