// The IVF-PQ tests' shared part (ivfpq_test.cpp, ivfpq_scan_test.cpp): seeded clustered data, an
// index trained and filled with the entries kept per list, and an independent double-precision
// reference that decodes every code of the probed lists (centroid + codewords), computes the
// estimate from the reconstruction and checks a kNN or range answer against it.  Apart so that
// the tests of the objects' own lists and of the caller's lists (vs_ivfpq_scan_*) each hold their
// own cases and share one reference.
#ifndef VSEARCH_TESTS_IVFPQ_TESTING_H
#define VSEARCH_TESTS_IVFPQ_TESTING_H

#include "engine_testing.h"

namespace ivfpq_testing {

inline const vs_metric kPqMetrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP,
                                       VS_METRIC_COSINE};

struct IvfpqDeleter
{
    vs_context *ctx;
    void operator()(vs_ivfpq *p) const { vs_ivfpq_destroy(ctx, p); }
};
using IvfpqPtr = std::unique_ptr<vs_ivfpq, IvfpqDeleter>;

// n points around nc centers (spread 4, noise 1), the first dups points copying earlier ones.
inline std::vector<float> clustered(size_t n, size_t d, size_t nc, uint64_t seed,
                                    double dup_fraction = 0)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<float> centers(nc * d), x(n * d);
    for (auto &v : centers)
        v = 4.0f * g(rng);
    for (size_t i = 0; i < n; i++)
    {
        if (i > 0 && u(rng) < dup_fraction)
        {
            size_t src = rng() % i;
            std::memcpy(&x[i * d], &x[src * d], d * sizeof(float));
            continue;
        }
        size_t c = rng() % nc;
        for (size_t j = 0; j < d; j++)
            x[i * d + j] = centers[c * d + j] + g(rng);
    }
    return x;
}

// The quantizer, the entries the test added (per list, in add order) and the index.
struct Built
{
    vs_ivfpq_params p{};
    size_t cs = 0;
    std::vector<float> centroids, codebooks;
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<std::vector<uint8_t>>> codes;
    IvfpqPtr ivf{nullptr, IvfpqDeleter{nullptr}};
};

inline vs_ivfpq_params make_params(size_t d, size_t nlist, size_t m, int nbits, vs_metric metric)
{
    vs_ivfpq_params p{};
    p.dim = d;
    p.nlist = nlist;
    p.m = m;
    p.nbits = nbits;
    p.metric = metric;
    return p;
}

// Creates the index from a quantizer, encodes x (ids id0 + i) and adds it per list in two calls.
inline void fill(vs_context *ctx, Built &B, const std::vector<float> &x, int64_t id_step = 7)
{
    const size_t d = B.p.dim, n = x.size() / d;
    B.cs = vs_ivfpq_code_size(&B.p);
    vs_ivfpq *raw = nullptr;
    ASSERT_EQ(vs_ivfpq_create(ctx, &B.p, B.centroids.data(), B.codebooks.data(), &raw), VS_OK)
        << vs_last_error(ctx);
    B.ivf = IvfpqPtr(raw, IvfpqDeleter{ctx});
    std::vector<int32_t> lists(n);
    std::vector<uint8_t> codes(n * B.cs);
    ASSERT_EQ(vs_ivfpq_encode(ctx, raw, x.data(), n, lists.data(), codes.data()), VS_OK)
        << vs_last_error(ctx);
    B.ids.assign(B.p.nlist, {});
    B.codes.assign(B.p.nlist, {});
    std::vector<std::vector<uint8_t>> flat(B.p.nlist);
    for (size_t i = 0; i < n; i++)
    {
        ASSERT_GE(lists[i], 0);
        ASSERT_LT(static_cast<size_t>(lists[i]), B.p.nlist);
        // Ids descending with gaps, some negative: nothing relies on their order.
        int64_t id = static_cast<int64_t>(n - i) * id_step - 100;
        B.ids[lists[i]].push_back(id);
        B.codes[lists[i]].emplace_back(codes.begin() + i * B.cs, codes.begin() + (i + 1) * B.cs);
        flat[lists[i]].insert(flat[lists[i]].end(), codes.begin() + i * B.cs,
                              codes.begin() + (i + 1) * B.cs);
    }
    for (size_t l = 0; l < B.p.nlist; l++)
    {
        size_t cnt = B.ids[l].size(), half = cnt / 2;
        ASSERT_EQ(vs_ivfpq_add(ctx, raw, l, B.ids[l].data(), flat[l].data(), half), VS_OK)
            << vs_last_error(ctx);
        ASSERT_EQ(vs_ivfpq_add(ctx, raw, l, B.ids[l].data() + half, flat[l].data() + half * B.cs,
                               cnt - half),
                  VS_OK);
    }
    ASSERT_EQ(vs_ivfpq_size(raw), n);
}

inline void train(vs_context *ctx, Built &B, const std::vector<float> &x, size_t sample = 0)
{
    vs_ivfpq_train_params t;
    vs_ivfpq_train_params_init(&t);
    t.coarse_iterations = 8;
    t.pq_iterations = 8;
    t.seed = 11;
    t.sample_size = sample;
    const size_t d = B.p.dim;
    B.centroids.assign(B.p.nlist * d, 0.0f);
    B.codebooks.assign((size_t{1} << B.p.nbits) * d, 0.0f);
    ASSERT_EQ(vs_ivfpq_train(ctx, &B.p, &t, x.data(), x.size() / d, B.centroids.data(),
                             B.codebooks.data()),
              VS_OK)
        << vs_last_error(ctx);
}

// ---- reference --------------------------------------------------------------------------------

struct RefCand
{
    double est;
    int64_t id;
    size_t list, entry; // entry: index in the list
};

inline int code_at(const std::vector<uint8_t> &code, size_t j, int nbits)
{
    return nbits == 8 ? code[j] : ((j & 1) ? code[j / 2] >> 4 : code[j / 2] & 15);
}

inline std::vector<double> unit(const float *q, size_t d, vs_metric m)
{
    std::vector<double> v(q, q + d);
    if (m == VS_METRIC_COSINE)
    {
        double s = 0;
        for (double a : v)
            s += a * a;
        if (s > 0)
            for (double &a : v)
                a /= std::sqrt(s);
    }
    return v;
}

// Lists probed for q (ranks [off, off + nprobe) clamped), nearest first.
inline std::vector<size_t> ref_probes(const Built &B, const std::vector<double> &q, size_t off,
                               size_t nprobe)
{
    const size_t d = B.p.dim;
    std::vector<std::pair<double, size_t>> r;
    for (size_t l = 0; l < B.p.nlist; l++)
    {
        double s = 0;
        for (size_t j = 0; j < d; j++)
        {
            double c = B.centroids[l * d + j];
            s += B.p.metric == VS_METRIC_IP || B.p.metric == VS_METRIC_COSINE ? -q[j] * c
                                                                              : (q[j] - c) * (q[j] - c);
        }
        r.emplace_back(static_cast<float>(s), l);
    }
    std::sort(r.begin(), r.end());
    std::vector<size_t> out;
    for (size_t i = off; i < std::min(B.p.nlist, off + nprobe); i++)
        out.push_back(r[i].second);
    return out;
}

inline std::vector<RefCand> ref_candidates(const Built &B, const float *qf, size_t off, size_t nprobe)
{
    const size_t d = B.p.dim, dsub = d / B.p.m, ksub = size_t{1} << B.p.nbits;
    std::vector<double> q = unit(qf, d, B.p.metric);
    std::vector<RefCand> out;
    std::vector<double> y(d);
    for (size_t l : ref_probes(B, q, off, nprobe))
        for (size_t e = 0; e < B.ids[l].size(); e++)
        {
            for (size_t j = 0; j < d; j++)
            {
                size_t sq = j / dsub;
                int c = code_at(B.codes[l][e], sq, B.p.nbits);
                y[j] = static_cast<double>(B.centroids[l * d + j]) +
                       B.codebooks[(sq * ksub + c) * dsub + j % dsub];
            }
            double l2 = 0, ip = 0;
            for (size_t j = 0; j < d; j++)
            {
                l2 += (q[j] - y[j]) * (q[j] - y[j]);
                ip += q[j] * y[j];
            }
            double est = B.p.metric == VS_METRIC_L2SQ  ? l2
                         : B.p.metric == VS_METRIC_L2  ? std::sqrt(l2)
                         : B.p.metric == VS_METRIC_IP ? -ip
                                                       : 1.0 - ip;
            out.push_back({est, B.ids[l][e], l, e});
        }
    return out;
}

inline double ref_tolerance(const std::vector<RefCand> &c)
{
    double mag = 1;
    for (auto &h : c)
        mag = std::max(mag, std::fabs(h.est));
    return 2e-5 * mag;
}

// One query's kNN answer against the reference candidates.
inline ::testing::AssertionResult check_search(const Built &B, const std::vector<RefCand> &cand,
                                        size_t k, const int64_t *ids, const float *dists,
                                        int64_t count)
{
    const size_t expect = std::min(k, cand.size());
    if (count != static_cast<int64_t>(expect))
        return ::testing::AssertionFailure() << "count " << count << " != " << expect;
    const double tol = ref_tolerance(cand);
    std::map<int64_t, const RefCand *> by_id;
    for (auto &c : cand)
        by_id[c.id] = &c;
    std::vector<double> sorted;
    for (auto &c : cand)
        sorted.push_back(c.est);
    std::sort(sorted.begin(), sorted.end());
    std::set<int64_t> seen;
    for (size_t i = 0; i < k; i++)
    {
        if (i >= expect)
        {
            if (ids[i] != -1 || !(std::isinf(dists[i]) && dists[i] > 0))
                return ::testing::AssertionFailure() << "slot " << i << " not padding";
            continue;
        }
        auto it = by_id.find(ids[i]);
        if (it == by_id.end())
            return ::testing::AssertionFailure() << "slot " << i << ": id " << ids[i]
                                                 << " not in the probed lists";
        if (!seen.insert(ids[i]).second)
            return ::testing::AssertionFailure() << "id " << ids[i] << " twice";
        if (std::fabs(dists[i] - it->second->est) > tol)
            return ::testing::AssertionFailure() << "slot " << i << ": estimate " << dists[i]
                                                 << " but reference " << it->second->est;
        if (std::fabs(dists[i] - sorted[i]) > tol)
            return ::testing::AssertionFailure() << "slot " << i << ": estimate " << dists[i]
                                                 << " where the reference's " << i << "-th is "
                                                 << sorted[i];
        if (i > 0 && (dists[i] < dists[i - 1] || (dists[i] == dists[i - 1] && ids[i] < ids[i - 1])))
            return ::testing::AssertionFailure() << "slot " << i << " out of (estimate, id) order";
    }
    if (expect == 0)
        return ::testing::AssertionSuccess();
    const double last = dists[expect - 1];
    for (auto &c : cand)
        if (c.est < last - tol && !seen.count(c.id))
            return ::testing::AssertionFailure() << "missing id " << c.id << " at " << c.est;
    // Entries with the same list and code have bit-identical estimates: smaller ids first.
    std::map<std::pair<size_t, std::vector<uint8_t>>, int64_t> max_taken;
    for (size_t i = 0; i < expect; i++)
    {
        const RefCand *h = by_id[ids[i]];
        auto key = std::make_pair(h->list, B.codes[h->list][h->entry]);
        auto it = max_taken.find(key);
        if (it == max_taken.end() || it->second < h->id)
            max_taken[key] = h->id;
    }
    for (auto &c : cand)
    {
        if (seen.count(c.id) || c.est > last + tol)
            continue;
        auto it = max_taken.find(std::make_pair(c.list, B.codes[c.list][c.entry]));
        if (it != max_taken.end() && c.id < it->second)
            return ::testing::AssertionFailure()
                   << "tie not broken by id: " << c.id << " skipped for " << it->second;
    }
    return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult check_range(const std::vector<RefCand> &cand, float radius,
                                       const int64_t *ids, const float *dists, size_t count)
{
    const double tol = ref_tolerance(cand);
    std::map<int64_t, const RefCand *> by_id;
    for (auto &c : cand)
        by_id[c.id] = &c;
    std::set<int64_t> got;
    for (size_t i = 0; i < count; i++)
    {
        auto it = by_id.find(ids[i]);
        if (it == by_id.end())
            return ::testing::AssertionFailure() << "id " << ids[i] << " not in the probed lists";
        if (i > 0 && ids[i] <= ids[i - 1])
            return ::testing::AssertionFailure() << "ids not ascending at " << i;
        if (!(dists[i] <= radius))
            return ::testing::AssertionFailure() << "id " << ids[i] << " outside the radius";
        if (std::fabs(dists[i] - it->second->est) > tol)
            return ::testing::AssertionFailure() << "id " << ids[i] << " estimate " << dists[i]
                                                 << " but reference " << it->second->est;
        got.insert(ids[i]);
    }
    for (auto &c : cand)
        if (c.est <= radius - tol && !got.count(c.id))
            return ::testing::AssertionFailure() << "missing id " << c.id << " at " << c.est;
    return ::testing::AssertionSuccess();
}

} // namespace ivfpq_testing

#endif // VSEARCH_TESTS_IVFPQ_TESTING_H
