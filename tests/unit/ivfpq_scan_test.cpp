// IVF-PQ list scans (vsearch/ivfpq.h, vs_ivfpq_scan_*): the lists handed over by the caller in
// chunks, in any order and some twice, against vs_ivfpq_search and vs_ivfpq_range over an object
// holding the same entries (bit for bit) and against the reference (ivfpq_testing.h); the
// quantizer held as a copy, a view or rows read in place.  Apart from ivfpq_test.cpp, which tests
// the objects' own lists on both backends.
#include "ivfpq_testing.h"

#include <cfloat>

namespace {

using namespace ivfpq_testing;

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
// (an entry seen again after a concurrent compaction moved it) and that of every fifth list (from
// the second) as one chunk holding each of its entries twice, each entry tagged 3 id + 1.
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
            if (first && l % 5 == 1)
            {
                std::vector<int64_t> ids2;
                std::vector<uint8_t> codes2;
                std::vector<uint64_t> tags2;
                for (int twice = 0; twice < 2; twice++)
                {
                    ids2.insert(ids2.end(), B.ids[l].begin() + at, B.ids[l].begin() + at + chunk);
                    codes2.insert(codes2.end(), codes.begin() + at * B.cs,
                                  codes.begin() + (at + chunk) * B.cs);
                    tags2.insert(tags2.end(), tags.begin() + at, tags.begin() + at + chunk);
                }
                ASSERT_EQ(vs_ivfpq_scan_add(ctx, scan, l, ids2.data(), codes2.data(), tags2.data(),
                                            2 * chunk),
                          VS_OK)
                    << vs_last_error(ctx);
            }
            else
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
        // one query at a time: a lone query's lists are ranked by exact distances to every
        // centroid, the scan's (8 queries or more) from blocked products
        for (size_t q = 0; q < nq; q++)
            ASSERT_EQ(vs_ivfpq_search(ctx, B.ivf.get(), &queries[q * d], 1, off, nprobe, k,
                                      &want_ids[q * k], &want_dists[q * k], &want_counts[q]),
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

// B with params p, trained on x and holding x's rows.
void build(vs_context *ctx, Built &B, const vs_ivfpq_params &p, const std::vector<float> &x)
{
    B.p = p;
    train(ctx, B, x);
    fill(ctx, B, x);
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
            build(ctx.get(), B, make_params(s.d, nlist, s.m, s.nbits, metric), x);
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

// A scan (or search) of 8 queries or more ranks the lists from blocked products and computes the
// exact coarse distance only near the last probe's: queries halfway between two centroids (exact
// distances that tie or nearly) and on a centroid rank the lists as a lone query's search (every
// exact distance) does, bit for bit.
TEST(EngineIvfpqScan, ListsRankedFromProductsAsExactly)
{
    vt::ContextPtr ctx = cpu_context(2);
    ASSERT_TRUE(ctx);
    for (vs_metric metric : kPqMetrics)
    {
        SCOPED_TRACE(vt::metric_name(metric));
        const size_t n = 3000, d = 32, nlist = 64;
        std::vector<float> x = clustered(n, d, 80, 31, 0.05);
        Built B;
        build(ctx.get(), B, make_params(d, nlist, 8, 8, metric), x);
        std::vector<float> q = clustered(8, d, 80, 32);
        for (size_t i = 0; i < 12; i++)
        {
            const float *a = &B.centroids[(i * 5 % nlist) * d];
            const float *b = &B.centroids[((i * 5 + 1 + i) % nlist) * d];
            for (size_t t = 0; t < d; t++)
                q.push_back(0.5f * (a[t] + b[t]));
        }
        q.insert(q.end(), B.centroids.begin() + 7 * d, B.centroids.begin() + 8 * d);
        // the search of all queries at once (blocked) against one at a time (exact)
        const size_t nq = q.size() / d, k = 10;
        for (size_t np : {size_t{1}, size_t{4}})
        {
            std::vector<int64_t> ids(nq * k), one_ids(k), counts(nq), one_count(1);
            std::vector<float> dists(nq * k), one_dists(k);
            ASSERT_EQ(vs_ivfpq_search(ctx.get(), B.ivf.get(), q.data(), nq, 1, np, k, ids.data(),
                                      dists.data(), counts.data()),
                      VS_OK);
            for (size_t i = 0; i < nq; i++)
            {
                ASSERT_EQ(vs_ivfpq_search(ctx.get(), B.ivf.get(), &q[i * d], 1, 1, np, k,
                                          one_ids.data(), one_dists.data(), one_count.data()),
                          VS_OK);
                ASSERT_EQ(counts[i], one_count[0]) << "query " << i;
                for (size_t j = 0; j < k; j++)
                {
                    ASSERT_EQ(ids[i * k + j], one_ids[j]) << "query " << i << " slot " << j;
                    ASSERT_EQ(bits(dists[i * k + j]), bits(one_dists[j]));
                }
            }
        }
        check_scan(ctx.get(), B, q, 0, 1, {10}, 11, n + 1);
        check_scan(ctx.get(), B, q, 0, 3, {10}, 12, n + 1, Held::Pieces);
        check_scan(ctx.get(), B, q, 2, 5, {20}, 13, 97);
        check_scan(ctx.get(), B, q, 0, nlist - 1, {10}, 14, n + 1);
        check_scan(ctx.get(), B, q, 0, 0, {10}, 15, n + 1); // no probe: no candidate
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
        build(ctx.get(), B, make_params(d, nlist, 16, 8, metric), x);
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
    std::vector<float> x = clustered(400, 16, 4, 9);
    Built B;
    build(ctx.get(), B, make_params(16, 4, 4, 8, VS_METRIC_L2), x);
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
