// Helpers for the engine tests: backends to run on, seeded data with duplicates, an independent
// double-precision reference, output poisoning and result checks.
#ifndef VSEARCH_TESTS_ENGINE_TESTING_H
#define VSEARCH_TESTS_ENGINE_TESTING_H

#include "vsearch/engine.h"
#include "vsearch/ivfpq.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace vt {

inline const char *cuda_library()
{
    if (const char *p = std::getenv("VSEARCH_CUDA_LIBRARY"))
        return p;
#ifdef VSEARCH_TEST_CUDA_LIBRARY
    return VSEARCH_TEST_CUDA_LIBRARY;
#else
    return "vsearch_cuda.so";
#endif
}

struct ContextDeleter
{
    void operator()(vs_context *c) const { vs_context_destroy(c); }
};
using ContextPtr = std::unique_ptr<vs_context, ContextDeleter>;

// A context on the named backend ("cpu" or "cuda"), or null (with a reason) if unavailable.
inline ContextPtr make_context(const std::string &backend, std::string *why = nullptr,
                               size_t budget = 0)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = backend == "cuda" ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = cuda_library();
    o.device_memory_budget = budget;
    if (const char *p = std::getenv("VSEARCH_TEST_GEMM_FP32"))
        if (p[0] == '1')
            o.gemm_precision = VS_GEMM_FP32;
    vs_context *ctx = nullptr;
    char err[512] = {0};
    vs_status st = vs_context_create(&o, &ctx, err, sizeof err);
    if (st != VS_OK)
    {
        if (why)
            *why = err;
        return nullptr;
    }
    return ContextPtr(ctx);
}

// The object families' parameterised contexts: "cpu", "cuda" (make_context), or "cpu2", "cuda2":
// two engine contexts behind one (MultiBackend; the CUDA one on GPUs 0 and 1 when
// VSEARCH_TEST_DEVICES=2, else twice on GPU 0).
inline ContextPtr object_context(const std::string &name, std::string *why)
{
    if (name == "cpu" || name == "cuda")
        return make_context(name, why);
    const bool cuda = name == "cuda2";
    const char *two = std::getenv("VSEARCH_TEST_DEVICES");
    int devices[2] = {0, cuda && !(two && two[0] == '2') ? 0 : 1};
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = cuda ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = cuda_library();
    o.devices = devices;
    o.ndevices = 2;
    o.num_threads = 2;
    vs_context *ctx = nullptr;
    char err[512] = {0};
    if (vs_context_create(&o, &ctx, err, sizeof err) != VS_OK)
    {
        *why = err;
        return nullptr;
    }
    return ContextPtr(ctx);
}

// Skips the current test when the backend is not available here.
#define VT_CONTEXT_OR_SKIP(var, backend)                                                          \
    std::string var##_why;                                                                        \
    vt::ContextPtr var = vt::make_context(backend, &var##_why);                                   \
    if (!var)                                                                                     \
        GTEST_SKIP() << backend << " backend unavailable: " << var##_why;

// An environment variable's value while a context is made: the CUDA backend reads its tuning
// variables (VSEARCH_CUDA_TILE_BYTES, VSEARCH_CUDA_SMALL_BATCH, ...) when a context is created.
struct EnvSetting
{
    const char *name;
    const char *value;
};

// A context on the named backend made with the settings in the environment; afterwards each
// variable is as it was before (set to its old value, or unset), so the test program's other
// contexts keep their defaults.
inline ContextPtr make_context_with_env(const std::string &backend,
                                        std::initializer_list<EnvSetting> settings,
                                        std::string *why = nullptr)
{
    std::vector<std::pair<const char *, std::optional<std::string>>> before;
    for (const EnvSetting &s : settings)
    {
        const char *old = std::getenv(s.name);
        before.emplace_back(s.name, old ? std::optional<std::string>(old) : std::nullopt);
        setenv(s.name, s.value, 1);
    }
    ContextPtr ctx = make_context(backend, why);
    // newest first, so a variable named twice ends as it was before the first
    for (auto it = before.rbegin(); it != before.rend(); ++it)
        if (it->second)
            setenv(it->first, it->second->c_str(), 1);
        else
            unsetenv(it->first);
    return ctx;
}

// VT_CONTEXT_OR_SKIP with settings: VT_CONTEXT_WITH_ENV_OR_SKIP(ctx, "cuda", {"NAME", "value"}, ...).
#define VT_CONTEXT_WITH_ENV_OR_SKIP(var, backend, ...)                                            \
    std::string var##_why;                                                                        \
    vt::ContextPtr var = vt::make_context_with_env(backend, {__VA_ARGS__}, &var##_why);           \
    if (!var)                                                                                     \
        GTEST_SKIP() << backend << " backend unavailable: " << var##_why;

inline const char *metric_name(vs_metric m)
{
    static const char *names[] = {"L2SQ", "L2", "IP", "COSINE", "L1"};
    return names[m];
}

// ---- data ----------------------------------------------------------------------------------

struct Data
{
    size_t n = 0, d = 0;
    std::vector<float> x;      // n x d, in id order of insertion below
    std::vector<int64_t> ids;  // unique, shuffled
    std::vector<int> group;    // rows with identical vectors share a group
};

// n rows of N(0, 1) in d dims; about dup_fraction of them copy an earlier row exactly.
inline Data make_data(size_t n, size_t d, uint64_t seed, double dup_fraction = 0.0,
                      bool with_zero_row = false)
{
    Data D;
    D.n = n;
    D.d = d;
    D.x.resize(n * d);
    D.group.resize(n);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (size_t i = 0; i < n; i++)
    {
        if (i > 0 && u(rng) < dup_fraction)
        {
            size_t src = rng() % i;
            std::memcpy(&D.x[i * d], &D.x[src * d], d * sizeof(float));
            D.group[i] = D.group[src];
        }
        else
        {
            for (size_t j = 0; j < d; j++)
                D.x[i * d + j] = g(rng);
            D.group[i] = static_cast<int>(i);
        }
    }
    if (with_zero_row && n > 2)
    {
        std::fill(&D.x[(n / 2) * d], &D.x[(n / 2) * d] + d, 0.0f);
        D.group[n / 2] = -1;
    }
    // Unique ids with gaps and negatives, in shuffled order.
    std::set<int64_t> used;
    D.ids.resize(n);
    for (size_t i = 0; i < n; i++)
    {
        int64_t id;
        do
            id = static_cast<int64_t>(rng() % (8 * n + 64)) - static_cast<int64_t>(n);
        while (!used.insert(id).second);
        D.ids[i] = id;
    }
    return D;
}

// Queries: fresh N(0, 1) vectors, and every third one a copy of a dataset row (distance 0 ties).
inline std::vector<float> make_queries(const Data &D, size_t nq, uint64_t seed)
{
    std::mt19937_64 rng(seed ^ 0x5151);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> q(nq * D.d);
    for (size_t i = 0; i < nq; i++)
    {
        if (i % 3 == 1 && D.n > 0)
            std::memcpy(&q[i * D.d], &D.x[(rng() % D.n) * D.d], D.d * sizeof(float));
        else
            for (size_t j = 0; j < D.d; j++)
                q[i * D.d + j] = g(rng);
    }
    return q;
}

struct DatasetDeleter
{
    vs_context *ctx;
    void operator()(vs_dataset *ds) const { vs_dataset_destroy(ctx, ds); }
};
using DatasetPtr = std::unique_ptr<vs_dataset, DatasetDeleter>;

// Uploads D in three calls (the last ones with smaller ids too, so rows get merged).
inline DatasetPtr upload(vs_context *ctx, const Data &D)
{
    vs_dataset *ds = nullptr;
    EXPECT_EQ(vs_dataset_create(ctx, D.d, VS_DTYPE_F32, &ds), VS_OK) << vs_last_error(ctx);
    size_t a = D.n / 2, b = D.n * 3 / 4;
    size_t cuts[4] = {0, a, b, D.n};
    for (int c = 0; c < 3; c++)
    {
        size_t n = cuts[c + 1] - cuts[c];
        EXPECT_EQ(vs_dataset_add(ctx, ds, D.x.data() + cuts[c] * D.d, D.ids.data() + cuts[c], n),
                  VS_OK)
            << vs_last_error(ctx);
    }
    EXPECT_EQ(vs_dataset_size(ds), D.n);
    return DatasetPtr(ds, DatasetDeleter{ctx});
}

// ---- reference -------------------------------------------------------------------------------

inline double ref_distance(vs_metric m, const float *x, const float *y, size_t d)
{
    double s = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < d; i++)
    {
        double a = x[i], b = y[i];
        switch (m)
        {
        case VS_METRIC_L2SQ:
        case VS_METRIC_L2:
            s += (a - b) * (a - b);
            break;
        case VS_METRIC_IP:
        case VS_METRIC_COSINE:
            s += a * b;
            aa += a * a;
            bb += b * b;
            break;
        case VS_METRIC_L1:
            s += std::fabs(a - b);
            break;
        }
    }
    switch (m)
    {
    case VS_METRIC_L2:
        return std::sqrt(s);
    case VS_METRIC_IP:
        return -s;
    case VS_METRIC_COSINE:
    {
        double den = std::sqrt(aa * bb);
        if (den == 0)
            return NAN;
        double c = std::max(-1.0, std::min(1.0, s / den));
        return 1.0 - c;
    }
    default:
        return s;
    }
}

struct RefHit
{
    float dist;
    int64_t id;
    size_t row; // index into Data
};

inline bool hit_less(const RefHit &a, const RefHit &b)
{
    bool an = a.dist != a.dist, bn = b.dist != b.dist;
    if (an != bn)
        return bn; // NaN last
    if (!an && a.dist != b.dist)
        return a.dist < b.dist;
    return a.id < b.id;
}

// All rows (or the given rows) of one query, sorted by (distance, id), NaN last.
inline std::vector<RefHit> ref_sorted(const Data &D, const float *q, vs_metric m,
                                      const std::vector<size_t> *rows = nullptr)
{
    std::vector<RefHit> out;
    auto add = [&](size_t r) {
        out.push_back({static_cast<float>(ref_distance(m, q, &D.x[r * D.d], D.d)), D.ids[r], r});
    };
    if (rows)
        for (size_t r : *rows)
            add(r);
    else
        for (size_t r = 0; r < D.n; r++)
            add(r);
    std::sort(out.begin(), out.end(), hit_less);
    return out;
}

inline double tolerance(const std::vector<RefHit> &ref)
{
    double mag = 0;
    for (auto &h : ref)
        if (h.dist == h.dist && std::isfinite(h.dist))
            mag = std::max(mag, static_cast<double>(std::fabs(h.dist)));
    return 1e-6 * (1.0 + mag);
}

inline bool close(float got, float want, double abs_tol)
{
    if (got == want)
        return true; // also +inf padding
    if (got != got || want != want)
        return (got != got) && (want != want);
    return std::fabs(static_cast<double>(got) - want) <=
           1e-5 * std::fabs(static_cast<double>(want)) + abs_tol;
}

const uint32_t kPoisonBits = 0x7FA5A5A5u;
const int64_t kPoisonId = 0x7E7E7E7E7E7E7E7Ell;

inline float poison_float()
{
    float f;
    std::memcpy(&f, &kPoisonBits, sizeof f);
    return f;
}

inline bool is_poison(float f)
{
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b == kPoisonBits;
}

// id -> reference hit, built once per reference list.
class RefIndex
{
public:
    explicit RefIndex(const std::vector<RefHit> &ref) : ref_(&ref)
    {
        idx_.reserve(ref.size());
        for (size_t i = 0; i < ref.size(); i++)
            idx_.emplace_back(ref[i].id, i);
        std::sort(idx_.begin(), idx_.end());
    }
    const RefHit *find(int64_t id) const
    {
        auto it = std::lower_bound(idx_.begin(), idx_.end(), std::make_pair(id, size_t{0}));
        if (it == idx_.end() || it->first != id)
            return nullptr;
        return &(*ref_)[it->second];
    }

private:
    const std::vector<RefHit> *ref_;
    std::vector<std::pair<int64_t, size_t>> idx_;
};

// Checks one query's kNN answer against the reference (all candidates, sorted).
inline ::testing::AssertionResult check_knn(const Data &D, const std::vector<RefHit> &ref, size_t k,
                                            const int64_t *ids, const float *dists, int64_t count,
                                            const RefIndex *index = nullptr)
{
    const size_t expect = std::min(k, ref.size());
    if (count != static_cast<int64_t>(expect))
        return ::testing::AssertionFailure() << "count " << count << " != " << expect;
    double tol = tolerance(ref);
    std::unique_ptr<RefIndex> own;
    if (!index)
    {
        own.reset(new RefIndex(ref));
        index = own.get();
    }
    struct ById
    {
        const RefIndex *ix;
        const RefHit *operator[](int64_t id) const { return ix->find(id); }
    } by_id{index};
    std::set<int64_t> seen;
    for (size_t i = 0; i < k; i++)
    {
        if (is_poison(dists[i]) || ids[i] == kPoisonId)
            return ::testing::AssertionFailure() << "slot " << i << " not written";
        if (i >= expect)
        {
            if (ids[i] != -1 || !(std::isinf(dists[i]) && dists[i] > 0))
                return ::testing::AssertionFailure()
                       << "slot " << i << " should be padding, got " << ids[i] << "/" << dists[i];
            continue;
        }
        const RefHit *hit = by_id[ids[i]];
        if (!hit)
            return ::testing::AssertionFailure() << "slot " << i << ": unknown id " << ids[i];
        if (!seen.insert(ids[i]).second)
            return ::testing::AssertionFailure() << "slot " << i << ": id " << ids[i] << " twice";
        if (!close(dists[i], hit->dist, tol))
            return ::testing::AssertionFailure()
                   << "slot " << i << ": id " << ids[i] << " distance " << dists[i]
                   << " but reference " << hit->dist;
        if (!close(dists[i], ref[i].dist, tol))
            return ::testing::AssertionFailure()
                   << "slot " << i << ": distance " << dists[i] << " (id " << ids[i]
                   << ") where the reference has " << ref[i].dist << " (id " << ref[i].id << ")";
        if (i > 0)
        {
            bool ordered = hit_less(RefHit{dists[i - 1], ids[i - 1], 0}, RefHit{dists[i], ids[i], 0});
            if (!ordered)
                return ::testing::AssertionFailure() << "slot " << i << " out of (distance, id) order";
        }
    }
    // Completeness: everything clearly better than the last returned must be there.
    if (expect > 0)
    {
        float last = dists[expect - 1];
        for (auto &h : ref)
        {
            if (!(h.dist == h.dist) || !(last == last))
                break;
            if (h.dist >= last - tol)
                break;
            if (!seen.count(h.id))
                return ::testing::AssertionFailure() << "missing id " << h.id << " at " << h.dist;
        }
        // Exact duplicates: within a group of identical vectors the smaller ids come first.
        std::map<int, int64_t> max_taken;
        for (size_t i = 0; i < expect; i++)
        {
            int g = D.group[by_id[ids[i]]->row];
            max_taken[g] = std::max(max_taken.count(g) ? max_taken[g] : INT64_MIN, ids[i]);
        }
        // Members of a group share one distance: only rows up to the last returned distance
        // (plus tolerance) can matter.
        for (auto &h : ref)
        {
            if (!(h.dist == h.dist) || h.dist > last + tol)
                break;
            int g = D.group[h.row];
            auto it = max_taken.find(g);
            if (it != max_taken.end() && h.id < it->second && !seen.count(h.id))
                return ::testing::AssertionFailure()
                       << "tie not broken by id: duplicate " << h.id << " skipped for "
                       << it->second;
        }
    }
    return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult check_range(const std::vector<RefHit> &ref, float radius,
                                              const int64_t *ids, const float *dists, size_t count)
{
    double tol = tolerance(ref);
    RefIndex index(ref);
    std::set<int64_t> got;
    for (size_t i = 0; i < count; i++)
    {
        const RefHit *hit = index.find(ids[i]);
        if (!hit)
            return ::testing::AssertionFailure() << "unknown id " << ids[i];
        if (i > 0 && ids[i] <= ids[i - 1])
            return ::testing::AssertionFailure() << "ids not ascending at " << i;
        if (!close(dists[i], hit->dist, tol))
            return ::testing::AssertionFailure() << "id " << ids[i] << " distance " << dists[i]
                                                 << " but reference " << hit->dist;
        if (!(dists[i] <= radius))
            return ::testing::AssertionFailure() << "id " << ids[i] << " at " << dists[i]
                                                 << " outside radius " << radius;
        got.insert(ids[i]);
    }
    for (auto &h : ref)
    {
        if (h.dist <= radius - tol && !got.count(h.id))
            return ::testing::AssertionFailure() << "missing id " << h.id << " at " << h.dist
                                                 << " (radius " << radius << ")";
    }
    return ::testing::AssertionSuccess();
}

// Candidate subsets: per query some existing ids (with repeats), some unknown ids, some empty.
struct SubsetData
{
    std::vector<int64_t> offsets, ids;
    std::vector<std::vector<size_t>> rows; // unique existing rows per query
};

inline SubsetData make_subsets(const Data &D, size_t nq, size_t per_query, uint64_t seed)
{
    SubsetData S;
    std::mt19937_64 rng(seed ^ 0xABCDEF);
    std::set<int64_t> all(D.ids.begin(), D.ids.end());
    S.offsets.push_back(0);
    S.rows.resize(nq);
    for (size_t q = 0; q < nq; q++)
    {
        size_t m = q % 5 == 4 ? 0 : (per_query / 2 + rng() % (per_query + 1));
        std::set<size_t> rows;
        for (size_t i = 0; i < m && D.n > 0; i++)
        {
            uint64_t pick = rng() % 10;
            if (pick == 0)
            {
                int64_t bogus = static_cast<int64_t>(rng() % 1000000) + 10 * static_cast<int64_t>(D.n) + 100;
                if (!all.count(bogus))
                    S.ids.push_back(bogus);
            }
            else if (pick == 1 && !rows.empty())
            {
                S.ids.push_back(D.ids[*rows.begin()]); // repeat
            }
            else
            {
                size_t r = rng() % D.n;
                S.ids.push_back(D.ids[r]);
                rows.insert(r);
            }
        }
        S.rows[q].assign(rows.begin(), rows.end());
        S.offsets.push_back(static_cast<int64_t>(S.ids.size()));
    }
    return S;
}

} // namespace vt

#endif
