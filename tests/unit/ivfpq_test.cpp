// IVF-PQ on both backends against an independent double-precision reference: the reference
// decodes every code of the probed lists (centroid + codewords) and computes the estimate from
// the reconstruction; results must match it within float rounding, be complete, ordered by
// (estimate, id), padded, and CPU and CUDA must return identical candidates.
#include "engine_testing.h"

#include <cfloat>

namespace {

const vs_metric kPqMetrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE};

class EngineIvfpq : public ::testing::TestWithParam<std::string>
{
};

struct IvfpqDeleter
{
    vs_context *ctx;
    void operator()(vs_ivfpq *p) const { vs_ivfpq_destroy(ctx, p); }
};
using IvfpqPtr = std::unique_ptr<vs_ivfpq, IvfpqDeleter>;

// n points around nc centers (spread 4, noise 1), the first dups points copying earlier ones.
std::vector<float> clustered(size_t n, size_t d, size_t nc, uint64_t seed, double dup_fraction = 0)
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

vs_ivfpq_params make_params(size_t d, size_t nlist, size_t m, int nbits, vs_metric metric)
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
void fill(vs_context *ctx, Built &B, const std::vector<float> &x, int64_t id_step = 7)
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

void train(vs_context *ctx, Built &B, const std::vector<float> &x, size_t sample = 0)
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

int code_at(const std::vector<uint8_t> &code, size_t j, int nbits)
{
    return nbits == 8 ? code[j] : ((j & 1) ? code[j / 2] >> 4 : code[j / 2] & 15);
}

std::vector<double> unit(const float *q, size_t d, vs_metric m)
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
std::vector<size_t> ref_probes(const Built &B, const std::vector<double> &q, size_t off,
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

std::vector<RefCand> ref_candidates(const Built &B, const float *qf, size_t off, size_t nprobe)
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

double ref_tolerance(const std::vector<RefCand> &c)
{
    double mag = 1;
    for (auto &h : c)
        mag = std::max(mag, std::fabs(h.est));
    return 2e-5 * mag;
}

// One query's kNN answer against the reference candidates.
::testing::AssertionResult check_search(const Built &B, const std::vector<RefCand> &cand,
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

::testing::AssertionResult check_range(const std::vector<RefCand> &cand, float radius,
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

// Searches nq queries with (off, nprobe) and several k, checking each against the reference;
// range with radii returning nothing, about half and everything.
void check_all(vs_context *ctx, const Built &B, const std::vector<float> &queries, size_t off,
               size_t nprobe, const std::vector<size_t> &ks)
{
    const size_t d = B.p.dim, nq = queries.size() / d;
    std::vector<std::vector<RefCand>> ref(nq);
    for (size_t q = 0; q < nq; q++)
        ref[q] = ref_candidates(B, &queries[q * d], off, nprobe);
    for (size_t k : ks)
    {
        std::vector<int64_t> ids(nq * k, vt::kPoisonId), counts(nq, -7);
        std::vector<float> dists(nq * k, vt::poison_float());
        ASSERT_EQ(vs_ivfpq_search(ctx, B.ivf.get(), queries.data(), nq, off, nprobe, k, ids.data(),
                                  dists.data(), counts.data()),
                  VS_OK)
            << vs_last_error(ctx);
        for (size_t q = 0; q < nq; q++)
            ASSERT_TRUE(check_search(B, ref[q], k, &ids[q * k], &dists[q * k], counts[q]))
                << "query " << q << " k " << k << " window " << off << "+" << nprobe << " "
                << vt::metric_name(B.p.metric) << " d " << d << " nbits " << B.p.nbits;
    }
    // Radii: below everything, the median of query 0's estimates, above everything.
    std::vector<double> ests;
    for (auto &c : ref[0])
        ests.push_back(c.est);
    std::sort(ests.begin(), ests.end());
    float mid = ests.empty() ? 0.0f : static_cast<float>(ests[ests.size() / 2]);
    for (float radius : {-FLT_MAX, mid, INFINITY})
    {
        vs_range_result r;
        ASSERT_EQ(vs_ivfpq_range(ctx, B.ivf.get(), queries.data(), nq, off, nprobe, radius,
                                 nullptr, nullptr, &r),
                  VS_OK)
            << vs_last_error(ctx);
        ASSERT_EQ(r.nq, nq);
        size_t total = 0;
        for (size_t q = 0; q < nq; q++)
        {
            size_t cnt = static_cast<size_t>(r.offsets[q + 1] - r.offsets[q]);
            total += cnt;
            if (radius == -FLT_MAX)
                EXPECT_EQ(cnt, 0u);
            if (std::isinf(radius))
                EXPECT_EQ(cnt, ref[q].size());
            EXPECT_TRUE(check_range(ref[q], radius, r.ids + r.offsets[q], r.distances + r.offsets[q],
                                    cnt))
                << "query " << q << " radius " << radius;
        }
        EXPECT_EQ(total, r.total);
        vs_range_result_free(&r);
    }
}

TEST_P(EngineIvfpq, MatchesReference)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    struct Shape
    {
        size_t d, m;
        int nbits;
    };
    for (Shape s : {Shape{8, 4, 8}, Shape{8, 8, 4}, Shape{96, 3, 4}, Shape{96, 12, 8},
                    Shape{128, 16, 8}, Shape{128, 32, 4}})
        for (vs_metric metric : kPqMetrics)
        {
            SCOPED_TRACE(std::string(vt::metric_name(metric)) + " d " + std::to_string(s.d) +
                         " m " + std::to_string(s.m) + " nbits " + std::to_string(s.nbits));
            const size_t n = 1200, nlist = 12;
            std::vector<float> x = clustered(n, s.d, 20, s.d * 31 + s.m, 0.05);
            Built B;
            B.p = make_params(s.d, nlist, s.m, s.nbits, metric);
            train(ctx.get(), B, x, s.d == 96 ? 700 : 0);
            fill(ctx.get(), B, x);
            std::vector<float> q = clustered(9, s.d, 20, s.d * 31 + s.m, 0.0);
            // a query equal to a stored vector
            std::memcpy(q.data(), x.data() + 5 * s.d, s.d * sizeof(float));
            check_all(ctx.get(), B, q, 0, 1, {1, 10});
            check_all(ctx.get(), B, q, 0, 4, {10, 100});
            check_all(ctx.get(), B, q, 3, 5, {7});
            check_all(ctx.get(), B, q, 0, nlist + 20, {10, n + 50}); // clamped, k > candidates
            check_all(ctx.get(), B, q, nlist - 2, 10, {300});
            if (HasFatalFailure())
                return;
        }
}

// An object created as a view of the caller's quantizer encodes and searches as one holding a
// copy (on a CPU context it reads the arrays in place; other backends copy them).
TEST_P(EngineIvfpq, ViewOfTheQuantizerMatchesACopy)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    for (vs_metric metric : kPqMetrics)
    {
        SCOPED_TRACE(vt::metric_name(metric));
        const size_t n = 1500, d = 64, nlist = 10;
        std::vector<float> x = clustered(n, d, 20, 77, 0.05);
        Built B;
        B.p = make_params(d, nlist, 16, 8, metric);
        train(ctx.get(), B, x);
        std::vector<float> centroids = B.centroids, codebooks = B.codebooks;
        vs_ivfpq *copy_raw = nullptr, *view_raw = nullptr;
        ASSERT_EQ(vs_ivfpq_create(ctx.get(), &B.p, centroids.data(), codebooks.data(), &copy_raw),
                  VS_OK);
        IvfpqPtr copy(copy_raw, IvfpqDeleter{ctx.get()});
        ASSERT_EQ(vs_ivfpq_create_view(ctx.get(), &B.p, centroids.data(), codebooks.data(),
                                       &view_raw),
                  VS_OK)
            << vs_last_error(ctx.get());
        IvfpqPtr view(view_raw, IvfpqDeleter{ctx.get()});
        const size_t cs = vs_ivfpq_code_size(&B.p);
        std::vector<int32_t> lists_copy(n), lists_view(n);
        std::vector<uint8_t> codes_copy(n * cs), codes_view(n * cs);
        ASSERT_EQ(vs_ivfpq_encode(ctx.get(), copy_raw, x.data(), n, lists_copy.data(),
                                  codes_copy.data()),
                  VS_OK);
        ASSERT_EQ(vs_ivfpq_encode(ctx.get(), view_raw, x.data(), n, lists_view.data(),
                                  codes_view.data()),
                  VS_OK);
        ASSERT_EQ(lists_copy, lists_view);
        ASSERT_EQ(codes_copy, codes_view);
        for (size_t l = 0; l < nlist; l++)
        {
            std::vector<int64_t> ids;
            std::vector<uint8_t> codes;
            for (size_t i = 0; i < n; i++)
                if (static_cast<size_t>(lists_copy[i]) == l)
                {
                    ids.push_back(static_cast<int64_t>(i));
                    codes.insert(codes.end(), codes_copy.begin() + i * cs,
                                 codes_copy.begin() + (i + 1) * cs);
                }
            ASSERT_EQ(vs_ivfpq_add(ctx.get(), copy_raw, l, ids.data(), codes.data(), ids.size()),
                      VS_OK);
            ASSERT_EQ(vs_ivfpq_add(ctx.get(), view_raw, l, ids.data(), codes.data(), ids.size()),
                      VS_OK);
        }
        const size_t nq = 12, k = 20;
        std::vector<float> q = clustered(nq, d, 20, 78);
        auto search = [&](vs_ivfpq *ivf, std::vector<int64_t> &ids, std::vector<float> &dists) {
            std::vector<int64_t> counts(nq);
            ids.assign(nq * k, vt::kPoisonId);
            dists.assign(nq * k, vt::poison_float());
            ASSERT_EQ(vs_ivfpq_search(ctx.get(), ivf, q.data(), nq, 0, 3, k, ids.data(),
                                      dists.data(), counts.data()),
                      VS_OK);
        };
        std::vector<int64_t> ids_copy, ids_view;
        std::vector<float> dists_copy, dists_view;
        search(copy_raw, ids_copy, dists_copy);
        search(view_raw, ids_view, dists_view);
        ASSERT_EQ(ids_copy, ids_view);
        ASSERT_EQ(std::memcmp(dists_copy.data(), dists_view.data(), dists_copy.size() * sizeof(float)),
                  0);
    }
}

TEST_P(EngineIvfpq, EmptyListsAndWindowsPastTheEnd)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t d = 16, nlist = 10;
    std::vector<float> x = clustered(600, d, 6, 5);
    Built B;
    B.p = make_params(d, nlist, 4, 8, VS_METRIC_L2);
    train(ctx.get(), B, x);
    // Only the vectors of even lists go in: odd lists stay empty.
    std::vector<int32_t> lists(600);
    std::vector<uint8_t> codes(600 * 4);
    {
        vs_ivfpq *tmp = nullptr;
        ASSERT_EQ(vs_ivfpq_create(ctx.get(), &B.p, B.centroids.data(), B.codebooks.data(), &tmp),
                  VS_OK);
        ASSERT_EQ(vs_ivfpq_encode(ctx.get(), tmp, x.data(), 600, lists.data(), codes.data()), VS_OK);
        vs_ivfpq_destroy(ctx.get(), tmp);
    }
    std::vector<float> kept;
    for (size_t i = 0; i < 600; i++)
        if (lists[i] % 2 == 0)
            kept.insert(kept.end(), x.begin() + i * d, x.begin() + (i + 1) * d);
    fill(ctx.get(), B, kept);
    std::vector<float> q = clustered(6, d, 6, 5);
    check_all(ctx.get(), B, q, 0, 3, {5, 1000});
    check_all(ctx.get(), B, q, 1, 1, {5});
    check_all(ctx.get(), B, q, nlist - 1, 4, {5});
    // A window starting past the last list: nothing, padded.
    std::vector<int64_t> ids(2 * 3, vt::kPoisonId), counts(2, -1);
    std::vector<float> dists(2 * 3);
    ASSERT_EQ(vs_ivfpq_search(ctx.get(), B.ivf.get(), q.data(), 2, nlist + 5, 3, 3, ids.data(),
                              dists.data(), counts.data()),
              VS_OK);
    for (size_t i = 0; i < 6; i++)
        EXPECT_EQ(ids[i], -1);
    EXPECT_EQ(counts[0], 0);
    // An empty index.
    Built E;
    E.p = B.p;
    E.centroids = B.centroids;
    E.codebooks = B.codebooks;
    fill(ctx.get(), E, {});
    check_all(ctx.get(), E, q, 0, nlist, {4});
}

TEST_P(EngineIvfpq, DuplicatesTieByIdAndLargeTieGroups)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t d = 32, n = 3000;
    std::vector<float> x = clustered(n, d, 8, 77, 0.3);
    // 400 copies of one vector: more equal estimates than any candidate margin.
    for (size_t i = 1000; i < 1400; i++)
        std::memcpy(&x[i * d], &x[999 * d], d * sizeof(float));
    for (vs_metric metric : kPqMetrics)
    {
        Built B;
        B.p = make_params(d, 8, 8, 8, metric);
        train(ctx.get(), B, x);
        fill(ctx.get(), B, x, 3);
        std::vector<float> q(x.begin() + 999 * d, x.begin() + 1000 * d);
        std::vector<float> more = clustered(4, d, 8, 78);
        q.insert(q.end(), more.begin(), more.end());
        // 2100 > kPqSelectMax: the CUDA backend's unfused path.
        check_all(ctx.get(), B, q, 0, 2, {1, 10, 450, 1000, 2100});
        if (HasFatalFailure())
            return;
    }
}

TEST_P(EngineIvfpq, RecallAfterExactRerank)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t d = 32, n = 5000, nq = 50, k = 10, nlist = 16;
    std::vector<float> x = clustered(n + nq, d, 40, 99);
    std::vector<float> q(x.begin() + n * d, x.end());
    x.resize(n * d);
    Built B;
    B.p = make_params(d, nlist, 16, 8, VS_METRIC_L2);
    train(ctx.get(), B, x);
    fill(ctx.get(), B, x, 1);
    // ids are (n - i) for row i (id_step 1, minus 100)
    auto row_of = [&](int64_t id) { return static_cast<size_t>(n - (id + 100)); };
    std::vector<int64_t> ids(nq * 4 * k);
    std::vector<float> dists(nq * 4 * k);
    ASSERT_EQ(vs_ivfpq_search(ctx.get(), B.ivf.get(), q.data(), nq, 0, nlist, 4 * k, ids.data(),
                              dists.data(), nullptr),
              VS_OK);
    size_t hits = 0;
    for (size_t i = 0; i < nq; i++)
    {
        std::vector<std::pair<double, size_t>> exact, rerank;
        for (size_t r = 0; r < n; r++)
            exact.emplace_back(vt::ref_distance(VS_METRIC_L2SQ, &q[i * d], &x[r * d], d), r);
        std::partial_sort(exact.begin(), exact.begin() + k, exact.end());
        for (size_t j = 0; j < 4 * k; j++)
        {
            size_t r = row_of(ids[i * 4 * k + j]);
            rerank.emplace_back(vt::ref_distance(VS_METRIC_L2SQ, &q[i * d], &x[r * d], d), r);
        }
        std::sort(rerank.begin(), rerank.end());
        std::set<size_t> truth;
        for (size_t j = 0; j < k; j++)
            truth.insert(exact[j].second);
        for (size_t j = 0; j < k; j++)
            hits += truth.count(rerank[j].second);
    }
    double recall = static_cast<double>(hits) / (nq * k);
    EXPECT_GE(recall, 0.95);
}

TEST_P(EngineIvfpq, TrainingIsDeterministicAndEncodesCosineZero)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    const size_t d = 16;
    std::vector<float> x = clustered(800, d, 5, 3);
    Built A, B;
    A.p = B.p = make_params(d, 8, 4, 4, VS_METRIC_COSINE);
    train(ctx.get(), A, x, 500);
    train(ctx.get(), B, x, 500);
    EXPECT_EQ(A.centroids, B.centroids);
    EXPECT_EQ(A.codebooks, B.codebooks);
    for (size_t c = 0; c < 8; c++) // spherical coarse centroids
        EXPECT_NEAR(vt::ref_distance(VS_METRIC_IP, &A.centroids[c * d], &A.centroids[c * d], d), -1.0,
                    1e-5);
    vs_ivfpq *raw = nullptr;
    ASSERT_EQ(vs_ivfpq_create(ctx.get(), &A.p, A.centroids.data(), A.codebooks.data(), &raw), VS_OK);
    IvfpqPtr ivf(raw, IvfpqDeleter{ctx.get()});
    std::vector<float> v(2 * d, 0.0f);
    for (size_t j = 0; j < d; j++)
        v[d + j] = -x[j];
    int32_t lists[2] = {-1, -1};
    uint8_t codes[4] = {0xAA, 0xAA, 0xAA, 0xAA};
    ASSERT_EQ(vs_ivfpq_encode(ctx.get(), raw, v.data(), 2, lists, codes), VS_OK);
    EXPECT_EQ(lists[0], 0);
    EXPECT_EQ(codes[0], 0);
    EXPECT_EQ(codes[1], 0);
    EXPECT_GE(lists[1], 0);
}

TEST_P(EngineIvfpq, InvalidArguments)
{
    VT_CONTEXT_OR_SKIP(ctx, GetParam());
    vs_context *c = ctx.get();
    const size_t d = 8;
    std::vector<float> x = clustered(300, d, 4, 1);
    std::vector<float> cent(4 * d), cb(256 * d);
    vs_ivfpq_params p = make_params(d, 4, 4, 8, VS_METRIC_L2SQ);
    EXPECT_EQ(vs_ivfpq_code_size(&p), 4u);
    vs_ivfpq_params q = make_params(d, 4, 3, 4, VS_METRIC_L2SQ);
    EXPECT_EQ(vs_ivfpq_code_size(&q), 2u);
    auto bad = [&](vs_ivfpq_params b, vs_status want) {
        EXPECT_EQ(vs_ivfpq_train(c, &b, nullptr, x.data(), 300, cent.data(), cb.data()), want);
        EXPECT_STRNE(vs_last_error(c), "");
        vs_ivfpq *o = nullptr;
        EXPECT_EQ(vs_ivfpq_create(c, &b, cent.data(), cb.data(), &o), want);
        EXPECT_EQ(o, nullptr);
    };
    bad(make_params(d, 4, 3, 8, VS_METRIC_L2SQ), VS_INVALID_ARGUMENT);  // dim % m
    bad(make_params(d, 4, 4, 5, VS_METRIC_L2SQ), VS_INVALID_ARGUMENT);  // nbits
    bad(make_params(d, 0, 4, 8, VS_METRIC_L2SQ), VS_INVALID_ARGUMENT);  // nlist
    bad(make_params(0, 4, 4, 8, VS_METRIC_L2SQ), VS_INVALID_ARGUMENT);  // dim
    bad(make_params(d, 4, 0, 8, VS_METRIC_L2SQ), VS_INVALID_ARGUMENT);  // m
    bad(make_params(d, 4, 4, 8, VS_METRIC_L1), VS_UNSUPPORTED);
    bad(make_params(d, 4, 4, 8, static_cast<vs_metric>(9)), VS_INVALID_ARGUMENT);
    // Too few training points: n < nlist, n < 2^nbits, sample < nlist.
    EXPECT_EQ(vs_ivfpq_train(c, &p, nullptr, x.data(), 3, cent.data(), cb.data()), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_train(c, &p, nullptr, x.data(), 200, cent.data(), cb.data()),
              VS_INVALID_ARGUMENT);
    vs_ivfpq_train_params t;
    vs_ivfpq_train_params_init(&t);
    EXPECT_EQ(t.coarse_iterations, 20);
    EXPECT_EQ(t.pq_iterations, 25);
    t.sample_size = 2;
    vs_ivfpq_params p4 = make_params(d, 4, 4, 4, VS_METRIC_L2SQ);
    EXPECT_EQ(vs_ivfpq_train(c, &p4, &t, x.data(), 300, cent.data(), cb.data()), VS_INVALID_ARGUMENT);
    t.sample_size = 0;
    t.pq_iterations = -1;
    EXPECT_EQ(vs_ivfpq_train(c, &p4, &t, x.data(), 300, cent.data(), cb.data()), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_train(c, &p, nullptr, nullptr, 300, cent.data(), cb.data()), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_train(c, nullptr, nullptr, x.data(), 300, cent.data(), cb.data()),
              VS_INVALID_ARGUMENT);

    ASSERT_EQ(vs_ivfpq_train(c, &p, nullptr, x.data(), 300, cent.data(), cb.data()), VS_OK)
        << vs_last_error(c);
    vs_ivfpq *raw = nullptr;
    EXPECT_EQ(vs_ivfpq_create(c, &p, nullptr, cb.data(), &raw), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_create(c, &p, cent.data(), cb.data(), nullptr), VS_INVALID_ARGUMENT);
    ASSERT_EQ(vs_ivfpq_create(c, &p, cent.data(), cb.data(), &raw), VS_OK);
    IvfpqPtr ivf(raw, IvfpqDeleter{c});
    int64_t id = 1;
    uint8_t code[4] = {0, 0, 0, 0};
    EXPECT_EQ(vs_ivfpq_add(c, raw, 4, &id, code, 1), VS_INVALID_ARGUMENT); // list out of range
    EXPECT_NE(std::string(vs_last_error(c)).find("out of range"), std::string::npos);
    EXPECT_EQ(vs_ivfpq_add(c, raw, 0, nullptr, code, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_add(c, raw, 0, &id, code, 1), VS_OK);
    EXPECT_EQ(vs_ivfpq_add(c, nullptr, 0, &id, code, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_size(raw), 1u);
    int32_t l;
    EXPECT_EQ(vs_ivfpq_encode(c, raw, x.data(), 1, &l, nullptr), VS_INVALID_ARGUMENT);
    int64_t oid[2];
    float od[2];
    EXPECT_EQ(vs_ivfpq_search(c, raw, nullptr, 1, 0, 1, 2, oid, od, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_search(c, raw, x.data(), 1, 0, 1, 2, nullptr, od, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_search(c, raw, x.data(), 1, 0, 4, 2, oid, od, nullptr), VS_OK);
    EXPECT_EQ(oid[0], 1);
    EXPECT_EQ(oid[1], -1);
    vs_range_result r;
    EXPECT_EQ(vs_ivfpq_range(c, raw, x.data(), 1, 0, 1, NAN, nullptr, nullptr, &r), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_range(c, raw, x.data(), 1, 0, 1, 1.0f, nullptr, nullptr, nullptr),
              VS_INVALID_ARGUMENT);
    // An object of another context.
    std::string why;
    vt::ContextPtr other = vt::make_context(GetParam(), &why);
    ASSERT_TRUE(other);
    EXPECT_EQ(vs_ivfpq_add(other.get(), raw, 0, &id, code, 1), VS_INVALID_ARGUMENT);
}

int cancel_now(void *) { return 1; }

TEST_P(EngineIvfpq, Cancellation)
{
    std::string why;
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = GetParam() == "cuda" ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
    o.cuda_library = vt::cuda_library();
    o.cancel = cancel_now;
    vs_context *raw = nullptr;
    char err[256];
    if (vs_context_create(&o, &raw, err, sizeof err) != VS_OK)
        GTEST_SKIP() << err;
    vt::ContextPtr ctx(raw);
    const size_t d = 8;
    std::vector<float> x = clustered(400, d, 4, 1);
    std::vector<float> cent(4 * d), cb(256 * d);
    vs_ivfpq_params p = make_params(d, 4, 4, 8, VS_METRIC_L2SQ);
    EXPECT_EQ(vs_ivfpq_train(raw, &p, nullptr, x.data(), 400, cent.data(), cb.data()), VS_CANCELLED);
}

INSTANTIATE_TEST_SUITE_P(All, EngineIvfpq,
                         ::testing::Values(std::string("cpu"), std::string("cuda")),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

// The same quantizer and entries on both backends: identical encodings, candidates and
// estimates (bit for bit), for search and range.
TEST(EngineIvfpqCross, CpuAndCudaAgree)
{
    VT_CONTEXT_OR_SKIP(gpu, "cuda");
    VT_CONTEXT_OR_SKIP(cpu, "cpu");
    struct Shape
    {
        size_t d, m;
        int nbits;
    };
    for (Shape s : {Shape{8, 4, 4}, Shape{96, 12, 8}, Shape{128, 32, 4}, Shape{128, 64, 8}})
        for (vs_metric metric : kPqMetrics)
        {
            SCOPED_TRACE(std::string(vt::metric_name(metric)) + " d " + std::to_string(s.d));
            const size_t n = 3000, nlist = 24, nq = 300;
            std::vector<float> x = clustered(n, s.d, 30, s.d + s.m, 0.1);
            Built C, G;
            C.p = make_params(s.d, nlist, s.m, s.nbits, metric);
            train(cpu.get(), C, x);
            G.p = C.p;
            G.centroids = C.centroids;
            G.codebooks = C.codebooks;
            fill(cpu.get(), C, x);
            fill(gpu.get(), G, x);
            ASSERT_EQ(C.ids, G.ids) << "different list assignment";
            ASSERT_EQ(C.codes, G.codes) << "different codes";
            std::vector<float> q = clustered(nq, s.d, 30, s.d + s.m + 1);
            for (size_t w : {size_t{0}, size_t{5}})
                for (size_t k : {size_t{1}, size_t{10}, size_t{257}})
                {
                    std::vector<int64_t> ic(nq * k), ig(nq * k), cc(nq), cg(nq);
                    std::vector<float> fc(nq * k), fg(nq * k);
                    ASSERT_EQ(vs_ivfpq_search(cpu.get(), C.ivf.get(), q.data(), nq, w, 6, k,
                                              ic.data(), fc.data(), cc.data()),
                              VS_OK);
                    ASSERT_EQ(vs_ivfpq_search(gpu.get(), G.ivf.get(), q.data(), nq, w, 6, k,
                                              ig.data(), fg.data(), cg.data()),
                              VS_OK)
                        << vs_last_error(gpu.get());
                    EXPECT_EQ(ic, ig) << "k " << k;
                    EXPECT_EQ(cc, cg);
                    size_t diff = 0;
                    for (size_t i = 0; i < fc.size(); i++)
                        diff += std::memcmp(&fc[i], &fg[i], sizeof(float)) != 0;
                    EXPECT_EQ(diff, 0u) << "k " << k;
                }
            vs_range_result rc, rg;
            float radius = metric == VS_METRIC_IP ? -10.0f : (metric == VS_METRIC_COSINE ? 0.1f : 30.0f);
            ASSERT_EQ(vs_ivfpq_range(cpu.get(), C.ivf.get(), q.data(), nq, 0, 4, radius, nullptr,
                                     nullptr, &rc),
                      VS_OK);
            ASSERT_EQ(vs_ivfpq_range(gpu.get(), G.ivf.get(), q.data(), nq, 0, 4, radius, nullptr,
                                     nullptr, &rg),
                      VS_OK)
                << vs_last_error(gpu.get());
            ASSERT_EQ(rc.total, rg.total);
            EXPECT_TRUE(std::equal(rc.offsets, rc.offsets + nq + 1, rg.offsets));
            EXPECT_TRUE(std::equal(rc.ids, rc.ids + rc.total, rg.ids));
            EXPECT_EQ(std::memcmp(rc.distances, rg.distances, rc.total * sizeof(float)), 0);
            vs_range_result_free(&rc);
            vs_range_result_free(&rg);
            if (HasFatalFailure())
                return;
        }
}

// Training on the GPU: deterministic, and a quantizer as good as the CPU's (same sample).
TEST(EngineIvfpqCross, CudaTrainingIsComparable)
{
    VT_CONTEXT_OR_SKIP(gpu, "cuda");
    VT_CONTEXT_OR_SKIP(cpu, "cpu");
    const size_t d = 64;
    std::vector<float> x = clustered(4000, d, 20, 5);
    Built C, G, G2;
    C.p = G.p = G2.p = make_params(d, 16, 16, 8, VS_METRIC_L2SQ);
    train(cpu.get(), C, x);
    train(gpu.get(), G, x);
    train(gpu.get(), G2, x);
    EXPECT_EQ(G.centroids, G2.centroids);
    EXPECT_EQ(G.codebooks, G2.codebooks);
    // Mean reconstruction error (the reference decoder) within 5% of the CPU's.
    auto error = [&](Built &B, vs_context *ctx) {
        fill(ctx, B, x);
        double e = 0;
        for (size_t q = 0; q < 50; q++)
        {
            auto cand = ref_candidates(B, &x[q * d], 0, B.p.nlist);
            double best = INFINITY;
            for (auto &c : cand)
                best = std::min(best, c.est);
            e += best;
        }
        return e;
    };
    double ec = error(C, cpu.get()), eg = error(G, gpu.get());
    EXPECT_LT(eg, 1.05 * ec + 1e-9);
}

// ---- list scans: the lists handed over by the caller (vsearch/ivfpq.h, vs_ivfpq_scan_*) --------

uint32_t bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

struct ScanDeleter
{
    vs_context *ctx;
    void operator()(vs_ivfpq_scan *s) const { vs_ivfpq_scan_destroy(ctx, s); }
};
using ScanPtr = std::unique_ptr<vs_ivfpq_scan, ScanDeleter>;

// Hands every list of B (probed or not: the scan ignores the others) to scan in random chunks of
// fewer than max_chunk entries, lists in random order, the first chunk of every third list twice
// (an entry seen again after a concurrent compaction moved it), each entry tagged 3 id + 1.
void feed_lists(vs_context *ctx, const Built &B, vs_ivfpq_scan *scan, uint64_t seed,
                size_t max_chunk)
{
    std::mt19937_64 rng(seed);
    std::vector<size_t> order(B.p.nlist);
    for (size_t l = 0; l < order.size(); l++)
        order[l] = l;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t l : order)
    {
        const size_t n = B.ids[l].size();
        std::vector<uint8_t> codes;
        std::vector<uint64_t> tags;
        for (size_t e = 0; e < n; e++)
        {
            codes.insert(codes.end(), B.codes[l][e].begin(), B.codes[l][e].end());
            tags.push_back(static_cast<uint64_t>(B.ids[l][e] * 3 + 1));
        }
        size_t at = 0;
        bool first = true;
        while (at < n || first)
        {
            size_t chunk = std::min<size_t>(n - at, rng() % max_chunk);
            for (int twice = 0; twice < (first && l % 3 == 0 ? 2 : 1); twice++)
                ASSERT_EQ(vs_ivfpq_scan_add(ctx, scan, l, B.ids[l].data() + at,
                                            codes.data() + at * B.cs, tags.data() + at, chunk),
                          VS_OK)
                    << vs_last_error(ctx);
            at += chunk;
            first = false;
        }
    }
}

// How a scan's quantizer object holds B's quantizer.
enum class Held
{
    Copy,   // vs_ivfpq_create
    View,   // vs_ivfpq_create_view: B's arrays read in place
    Pieces, // vs_ivfpq_create_rows: each centroid and packed codebook row a piece of its own
};

// B's quantizer as vs_ivfpq_create_rows reads it, each row at an odd place of its own (as index
// pages would hold them), packed here from the documented layout: row j * dsub + t holds element
// t of sub-quantizer j's codewords, zero-padded to vs_ivfpq_table_width.
struct Pieces
{
    std::vector<std::vector<float>> store;
    std::vector<const float *> centroid_rows, table_rows;

    explicit Pieces(const Built &B)
    {
        const size_t d = B.p.dim, dsub = d / B.p.m, ksub = size_t{1} << B.p.nbits;
        const size_t w = vs_ivfpq_table_width(&B.p);
        EXPECT_EQ(w % 32, 0u);
        EXPECT_GE(w, ksub);
        for (size_t l = 0; l < B.p.nlist; l++)
        {
            store.emplace_back(d + 3, -1.0f);
            std::copy(&B.centroids[l * d], &B.centroids[(l + 1) * d], store.back().begin() + 3);
            centroid_rows.push_back(store.back().data() + 3);
        }
        for (size_t j = 0; j < B.p.m; j++)
            for (size_t t = 0; t < dsub; t++)
            {
                store.emplace_back(w + 1, 0.0f);
                for (size_t c = 0; c < ksub; c++)
                    store.back()[1 + c] = B.codebooks[(j * ksub + c) * dsub + t];
                table_rows.push_back(store.back().data() + 1);
            }
    }
};

// A scan's kNN and range answers are vs_ivfpq_search's and vs_ivfpq_range's over the object
// holding the same entries (bit for bit), and the reference's, with the quantizer held as `held`.
void check_scan(vs_context *ctx, const Built &B, const std::vector<float> &queries, size_t off,
                size_t nprobe, const std::vector<size_t> &ks, uint64_t seed, size_t max_chunk = 97,
                Held held = Held::Copy)
{
    const size_t d = B.p.dim, nq = queries.size() / d;
    // the quantizer alone: the scan must not read the object's lists
    vs_ivfpq *raw = nullptr;
    Pieces pieces(B);
    if (held == Held::Pieces)
        ASSERT_EQ(vs_ivfpq_create_rows(ctx, &B.p, pieces.centroid_rows.data(),
                                       pieces.table_rows.data(), &raw),
                  VS_OK)
            << vs_last_error(ctx);
    else
        ASSERT_EQ((held == Held::View ? vs_ivfpq_create_view
                                      : vs_ivfpq_create)(ctx, &B.p, B.centroids.data(),
                                                         B.codebooks.data(), &raw),
                  VS_OK);
    IvfpqPtr quantizer(raw, IvfpqDeleter{ctx});
    for (size_t k : ks)
    {
        std::vector<int64_t> want_ids(nq * k), want_counts(nq), ids(nq * k, vt::kPoisonId),
            counts(nq, -7);
        std::vector<float> want_dists(nq * k), dists(nq * k, vt::poison_float());
        std::vector<uint64_t> tags(nq * k, 99);
        ASSERT_EQ(vs_ivfpq_search(ctx, B.ivf.get(), queries.data(), nq, off, nprobe, k,
                                  want_ids.data(), want_dists.data(), want_counts.data()),
                  VS_OK);
        vs_ivfpq_scan *s = nullptr;
        ASSERT_EQ(vs_ivfpq_scan_knn_begin(ctx, quantizer.get(), queries.data(), nq, off, nprobe, k,
                                          &s),
                  VS_OK)
            << vs_last_error(ctx);
        ScanPtr scan(s, ScanDeleter{ctx});
        // the probed lists: ascending, and every list a query's answer came from among them
        const uint32_t *lists = nullptr;
        size_t nlists = vs_ivfpq_scan_lists(s, &lists);
        std::set<size_t> probed;
        for (size_t q = 0; q < nq; q++)
        {
            std::vector<size_t> r = ref_probes(B, unit(&queries[q * d], d, B.p.metric), off, nprobe);
            probed.insert(r.begin(), r.end());
        }
        ASSERT_EQ(nlists, probed.size());
        for (size_t i = 0; i < nlists; i++)
            ASSERT_TRUE(probed.count(lists[i])) << "list " << lists[i] << " not probed";
        for (size_t i = 1; i < nlists; i++)
            ASSERT_LT(lists[i - 1], lists[i]);
        feed_lists(ctx, B, s, seed + k, max_chunk);
        if (::testing::Test::HasFatalFailure())
            return;
        ASSERT_EQ(vs_ivfpq_scan_knn_result(ctx, s, ids.data(), dists.data(), tags.data(),
                                           counts.data()),
                  VS_OK)
            << vs_last_error(ctx);
        for (size_t q = 0; q < nq; q++)
        {
            ASSERT_EQ(counts[q], want_counts[q]) << "query " << q << " k " << k;
            for (size_t i = 0; i < k; i++)
            {
                ASSERT_EQ(ids[q * k + i], want_ids[q * k + i]) << "query " << q << " slot " << i;
                ASSERT_EQ(bits(dists[q * k + i]), bits(want_dists[q * k + i]))
                    << "query " << q << " slot " << i;
                ASSERT_EQ(tags[q * k + i], static_cast<int64_t>(i) < counts[q]
                                               ? static_cast<uint64_t>(ids[q * k + i] * 3 + 1)
                                               : 0u);
            }
            ASSERT_TRUE(check_search(B, ref_candidates(B, &queries[q * d], off, nprobe), k,
                                     &ids[q * k], &dists[q * k], counts[q]))
                << "query " << q << " k " << k;
        }
    }
    for (float radius : {-FLT_MAX, 0.0f, 5.0f, 50.0f, INFINITY})
    {
        vs_range_result want, got;
        ASSERT_EQ(vs_ivfpq_range(ctx, B.ivf.get(), queries.data(), nq, off, nprobe, radius,
                                 nullptr, nullptr, &want),
                  VS_OK);
        vs_ivfpq_scan *s = nullptr;
        ASSERT_EQ(vs_ivfpq_scan_range_begin(ctx, quantizer.get(), queries.data(), nq, off, nprobe,
                                            radius, &s),
                  VS_OK)
            << vs_last_error(ctx);
        ScanPtr scan(s, ScanDeleter{ctx});
        feed_lists(ctx, B, s, seed + 1000, max_chunk);
        if (::testing::Test::HasFatalFailure())
            return;
        ASSERT_EQ(vs_ivfpq_scan_range_result(ctx, s, nullptr, nullptr, &got), VS_OK)
            << vs_last_error(ctx);
        ASSERT_EQ(got.nq, nq);
        ASSERT_EQ(got.total, want.total) << "radius " << radius;
        for (size_t q = 0; q <= nq; q++)
            ASSERT_EQ(got.offsets[q], want.offsets[q]);
        for (size_t i = 0; i < got.total; i++)
        {
            ASSERT_EQ(got.ids[i], want.ids[i]);
            ASSERT_EQ(bits(got.distances[i]), bits(want.distances[i]));
        }
        vs_range_result_free(&want);
        vs_range_result_free(&got);
    }
}

vt::ContextPtr cpu_context(int threads)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = threads;
    vs_context *raw = nullptr;
    char err[256] = {0};
    EXPECT_EQ(vs_context_create(&o, &raw, err, sizeof err), VS_OK) << err;
    return vt::ContextPtr(raw);
}

TEST(EngineIvfpqScan, MatchesSearchOverTheSameEntries)
{
    struct Shape
    {
        size_t d, m;
        int nbits;
    };
    vt::ContextPtr ctx = cpu_context(1);
    ASSERT_TRUE(ctx);
    for (Shape s : {Shape{32, 8, 8}, Shape{96, 12, 4}})
        for (vs_metric metric : kPqMetrics)
        {
            SCOPED_TRACE(std::string(vt::metric_name(metric)) + " d " + std::to_string(s.d));
            const size_t n = 2000, nlist = 12;
            std::vector<float> x = clustered(n, s.d, 20, s.d + s.m, 0.05);
            // repeated vectors: equal estimates whose ties go to the smaller id
            for (size_t i = 1000; i < 1100; i++)
                std::memcpy(&x[i * s.d], &x[999 * s.d], s.d * sizeof(float));
            Built B;
            B.p = make_params(s.d, nlist, s.m, s.nbits, metric);
            train(ctx.get(), B, x);
            fill(ctx.get(), B, x);
            std::vector<float> q = clustered(16, s.d, 20, s.d + s.m + 1);
            std::memcpy(q.data(), x.data() + 999 * s.d, s.d * sizeof(float));
            check_scan(ctx.get(), B, q, 0, 1, {1, 10, 150}, 1);
            check_scan(ctx.get(), B, q, 0, 4, {10, 600}, 2);
            check_scan(ctx.get(), B, q, 3, 5, {7}, 3);
            check_scan(ctx.get(), B, q, 0, nlist + 20, {10, n + 50}, 4);
            check_scan(ctx.get(), B, q, nlist + 5, 3, {5}, 5); // past the last list
            check_scan(ctx.get(), B, q, 0, 4, {10, 600}, 6, 97, Held::View);
            check_scan(ctx.get(), B, q, 0, 4, {10, 600}, 7, 97, Held::Pieces);
            check_scan(ctx.get(), B, q, 2, 9, {10}, 8, 97, Held::Pieces);
            if (HasFatalFailure())
                return;
        }
}

// Adds with enough work (whole lists, 100 queries probing every list) split their queries over
// the context's threads: the same answers.
TEST(EngineIvfpqScan, ThreadsGiveTheSameAnswers)
{
    vt::ContextPtr ctx = cpu_context(2);
    ASSERT_TRUE(ctx);
    for (vs_metric metric : {VS_METRIC_L2, VS_METRIC_IP})
    {
        SCOPED_TRACE(vt::metric_name(metric));
        const size_t n = 3000, d = 128, nlist = 8;
        std::vector<float> x = clustered(n, d, 10, 21, 0.05);
        Built B;
        B.p = make_params(d, nlist, 16, 8, metric);
        train(ctx.get(), B, x);
        fill(ctx.get(), B, x);
        std::vector<float> q = clustered(100, d, 10, 22);
        check_scan(ctx.get(), B, q, 0, nlist, {10}, 6, n + 1);
        if (HasFatalFailure())
            return;
    }
}

TEST(EngineIvfpqScan, InvalidArguments)
{
    VT_CONTEXT_OR_SKIP(ctx, "cpu");
    VT_CONTEXT_OR_SKIP(other, "cpu");
    Built B;
    B.p = make_params(16, 4, 4, 8, VS_METRIC_L2);
    std::vector<float> x = clustered(400, 16, 4, 9);
    train(ctx.get(), B, x);
    fill(ctx.get(), B, x);
    std::vector<float> q(x.begin(), x.begin() + 16);
    vs_ivfpq_scan *s = nullptr;
    EXPECT_EQ(vs_ivfpq_scan_knn_begin(nullptr, B.ivf.get(), q.data(), 1, 0, 1, 5, &s),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_knn_begin(ctx.get(), nullptr, q.data(), 1, 0, 1, 5, &s),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_knn_begin(ctx.get(), B.ivf.get(), nullptr, 1, 0, 1, 5, &s),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_knn_begin(ctx.get(), B.ivf.get(), q.data(), 1, 0, 1, 5, nullptr),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_knn_begin(other.get(), B.ivf.get(), q.data(), 1, 0, 1, 5, &s),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_range_begin(ctx.get(), B.ivf.get(), q.data(), 1, 0, 1, NAN, &s),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    ASSERT_EQ(vs_ivfpq_scan_knn_begin(ctx.get(), B.ivf.get(), q.data(), 1, 0, 1, 5, &s), VS_OK);
    ScanPtr scan(s, ScanDeleter{ctx.get()});
    int64_t id = 1;
    EXPECT_EQ(vs_ivfpq_scan_add(ctx.get(), s, 0, &id, nullptr, nullptr, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_add(other.get(), s, 0, &id, nullptr, nullptr, 0),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_ivfpq_scan_lists(nullptr, nullptr), 0u);
    // a list number past nlist is no probed list: ignored
    uint8_t code[4] = {0, 0, 0, 0};
    EXPECT_EQ(vs_ivfpq_scan_add(ctx.get(), s, 1000, &id, code, nullptr, 1), VS_OK);
    int64_t ids[5], counts[1];
    float dists[5];
    ASSERT_EQ(vs_ivfpq_scan_knn_result(ctx.get(), s, ids, dists, nullptr, counts), VS_OK);
    EXPECT_EQ(counts[0], 0);
    EXPECT_EQ(ids[0], -1);

    // a quantizer read in pieces: every piece named, CPU only, and it does not encode
    Pieces pieces(B);
    vs_ivfpq *raw = nullptr;
    EXPECT_EQ(vs_ivfpq_create_rows(ctx.get(), &B.p, nullptr, pieces.table_rows.data(), &raw),
              VS_INVALID_ARGUMENT);
    std::vector<const float *> holed = pieces.table_rows;
    holed[5] = nullptr;
    EXPECT_EQ(vs_ivfpq_create_rows(ctx.get(), &B.p, pieces.centroid_rows.data(), holed.data(),
                                   &raw),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(raw, nullptr);
    EXPECT_EQ(vs_ivfpq_table_width(nullptr), 0u);
    ASSERT_EQ(vs_ivfpq_create_rows(ctx.get(), &B.p, pieces.centroid_rows.data(),
                                   pieces.table_rows.data(), &raw),
              VS_OK);
    IvfpqPtr in_pieces(raw, IvfpqDeleter{ctx.get()});
    int32_t list = -1;
    EXPECT_EQ(vs_ivfpq_encode(ctx.get(), raw, q.data(), 1, &list, code), VS_UNSUPPORTED);
}

} // namespace
