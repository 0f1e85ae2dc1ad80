// IVF-PQ on both backends against an independent double-precision reference (ivfpq_testing.h):
// the reference decodes every code of the probed lists (centroid + codewords) and computes the
// estimate from the reconstruction; results must match it within float rounding, be complete,
// ordered by (estimate, id), padded, and CPU and CUDA must return identical candidates.  The scans
// of lists handed over by the caller are in ivfpq_scan_test.cpp.
#include "ivfpq_testing.h"

#include <cfloat>

namespace {

using namespace ivfpq_testing;

class EngineIvfpq : public ::testing::TestWithParam<std::string>
{
};

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

} // namespace
