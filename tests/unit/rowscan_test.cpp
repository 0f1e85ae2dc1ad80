// Row scans (vsearch/rowscan.h): the answers over blocks of rows in the caller's memory must be
// those of vs_knn / vs_range on a dataset of the same rows, bit for bit, whatever the blocks'
// order, sizes and the thread count; and they must agree with the double-precision reference.
#include "vsearch/rowscan.h"

#include "engine_testing.h"

#include <tuple>

namespace {

vt::ContextPtr cpu_context(int threads, int (*cancel)(void *) = nullptr)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = threads;
    o.cancel = cancel;
    vs_context *ctx = nullptr;
    char err[256] = {0};
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_OK) << err;
    return vt::ContextPtr(ctx);
}

// The rows laid out as a vs_flat page does (an 8-byte header, then the floats), split into blocks
// of 0 to 40 rows handed over in a shuffled order.
struct Pages
{
    size_t stride;
    std::vector<char> bytes;
    std::vector<vs_row_block> blocks;
};

Pages make_pages(const vt::Data &D, uint64_t seed)
{
    Pages P;
    P.stride = 8 + D.d * sizeof(float);
    P.bytes.assign(D.n * P.stride + 8, 0x7f);
    for (size_t r = 0; r < D.n; r++)
        std::memcpy(&P.bytes[r * P.stride + 8], &D.x[r * D.d], D.d * sizeof(float));
    std::mt19937_64 rng(seed);
    for (size_t r = 0; r < D.n;)
    {
        size_t n = std::min<size_t>(rng() % 41, D.n - r);
        P.blocks.push_back({reinterpret_cast<const float *>(&P.bytes[r * P.stride + 8]), P.stride,
                            n, &D.ids[r]});
        r += n;
    }
    std::shuffle(P.blocks.begin(), P.blocks.end(), rng);
    return P;
}

// Adds the blocks in a few calls of different sizes; every other call names the next call's
// blocks as the rows to fetch ahead, without their ids and with more rows than they hold (as
// flatpages.c names a page's capacity), which must not change any answer.
void add_all(vs_context *ctx, vs_rowscan *scan, const Pages &P)
{
    size_t at = 0, step = 1;
    for (int call = 0; at < P.blocks.size(); call++)
    {
        size_t n = std::min(step, P.blocks.size() - at);
        size_t next = std::min(step * 3 + 1, P.blocks.size() - at - n);
        std::vector<vs_row_block> ahead(P.blocks.begin() + at + n, P.blocks.begin() + at + n + next);
        for (vs_row_block &b : ahead)
        {
            b.ids = nullptr;
            const size_t off = reinterpret_cast<const char *>(b.rows) - P.bytes.data();
            b.n = std::min(b.n + 2, (P.bytes.size() - off) / P.stride); // rows in the buffer
        }
        vs_status st = call % 2 ? vs_rowscan_add_ahead(ctx, scan, P.blocks.data() + at, n,
                                                       ahead.data(), ahead.size())
                                : vs_rowscan_add(ctx, scan, P.blocks.data() + at, n);
        ASSERT_EQ(st, VS_OK) << vs_last_error(ctx);
        at += n;
        step = step * 3 + 1;
    }
}

bool same_float(float a, float b)
{
    return (a != a && b != b) || std::memcmp(&a, &b, sizeof a) == 0;
}

class RowScanTest : public ::testing::TestWithParam<std::tuple<vs_metric, int, size_t>>
{
};

TEST_P(RowScanTest, KnnIsTheDatasetsAnswer)
{
    auto [metric, threads, d] = GetParam();
    auto ctx = cpu_context(threads);
    vt::Data D = vt::make_data(d > 100 ? 900 : 2500, d, 7 + d, 0.2, true);
    // rows far from the others, some of whose float sums overflow
    for (size_t j = 0; j < d; j++)
    {
        D.x[5 * d + j] = 3e19f * (j % 2 ? 1.0f : -1.0f);
        D.x[9 * d + j] = 1e18f;
    }
    Pages P = make_pages(D, 3);
    auto ds = vt::upload(ctx.get(), D);
    // 3 queries: the float kernels' bounds; 13: blocked products' (both the scan's and vs_knn's)
    for (size_t nq : {size_t(3), size_t(13)})
    for (size_t k : {size_t(1), size_t(10), D.n + 5})
    {
        std::vector<float> Q = vt::make_queries(D, nq, 11);
        std::vector<int64_t> ids(nq * k), want_ids(nq * k), counts(nq), want_counts(nq);
        std::vector<float> dists(nq * k), want_dists(nq * k);
        ASSERT_EQ(vs_knn(ctx.get(), ds.get(), Q.data(), nq, k, metric, nullptr, want_ids.data(),
                         want_dists.data(), want_counts.data()),
                  VS_OK);
        vs_rowscan *scan = nullptr;
        ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), d, metric, Q.data(), nq, k, &scan), VS_OK);
        add_all(ctx.get(), scan, P);
        ASSERT_EQ(vs_rowscan_knn_result(ctx.get(), scan, ids.data(), dists.data(), counts.data()),
                  VS_OK);
        vs_rowscan_destroy(ctx.get(), scan);
        EXPECT_EQ(counts, want_counts);
        for (size_t i = 0; i < nq * k; i++)
        {
            ASSERT_EQ(ids[i], want_ids[i]) << nq << " queries, k " << k << " query " << i / k
                                           << " rank " << i % k;
            ASSERT_TRUE(same_float(dists[i], want_dists[i])) << dists[i] << " " << want_dists[i];
        }
        // and the independent reference: every returned distance, and the order
        for (size_t q = 0; q < nq; q++)
        {
            std::vector<vt::RefHit> ref = vt::ref_sorted(D, &Q[q * d], metric);
            for (int64_t i = 0; i < counts[q]; i++)
            {
                float r = ref[i].dist;
                float got = dists[q * k + i];
                if (!std::isfinite(r))
                    EXPECT_TRUE(same_float(got, r));
                else
                    EXPECT_NEAR(got, r, 1e-5 * std::max(1.0f, std::fabs(r))) << "rank " << i;
            }
        }
    }
}

TEST_P(RowScanTest, RangeIsTheDatasetsAnswer)
{
    auto [metric, threads, d] = GetParam();
    auto ctx = cpu_context(threads);
    vt::Data D = vt::make_data(d > 100 ? 900 : 2500, d, 17 + d, 0.2, true);
    Pages P = make_pages(D, 9);
    auto ds = vt::upload(ctx.get(), D);
    // 2 queries: the float kernels' bounds; 7: blocked products'
    for (size_t nq : {size_t(2), size_t(11)})
    for (size_t at : {size_t(0), D.n / 50, D.n / 3})
    {
        std::vector<float> Q = vt::make_queries(D, nq, 5);
        std::vector<vt::RefHit> ref = vt::ref_sorted(D, &Q[0], metric);
        float radius = ref[at].dist;
        if (radius != radius)
            continue;
        vs_range_result want, got;
        ASSERT_EQ(vs_range(ctx.get(), ds.get(), Q.data(), nq, radius, metric, nullptr, nullptr,
                           nullptr, &want),
                  VS_OK);
        vs_rowscan *scan = nullptr;
        ASSERT_EQ(vs_rowscan_range_begin(ctx.get(), d, metric, Q.data(), nq, radius, &scan), VS_OK);
        add_all(ctx.get(), scan, P);
        ASSERT_EQ(vs_rowscan_range_result(ctx.get(), scan, nullptr, nullptr, &got), VS_OK);
        vs_rowscan_destroy(ctx.get(), scan);
        ASSERT_EQ(got.total, want.total) << "radius " << radius;
        EXPECT_GE(got.total, at + 1);
        for (size_t q = 0; q <= nq; q++)
            ASSERT_EQ(got.offsets[q], want.offsets[q]);
        for (size_t i = 0; i < got.total; i++)
        {
            ASSERT_EQ(got.ids[i], want.ids[i]);
            ASSERT_TRUE(same_float(got.distances[i], want.distances[i]));
        }
        vs_range_result_free(&want);
        vs_range_result_free(&got);
    }
}

INSTANTIATE_TEST_SUITE_P(All, RowScanTest,
                         ::testing::Combine(::testing::Values(VS_METRIC_L2SQ, VS_METRIC_L2,
                                                              VS_METRIC_IP, VS_METRIC_COSINE,
                                                              VS_METRIC_L1),
                                            ::testing::Values(1, 3),
                                            ::testing::Values(size_t(3), size_t(37), size_t(784))),
                         [](const auto &info) {
                             return std::string(vt::metric_name(std::get<0>(info.param))) + "_t" +
                                    std::to_string(std::get<1>(info.param)) + "_d" +
                                    std::to_string(std::get<2>(info.param));
                         });

// Rows and queries from 1e-22 to 1e20 (subnormal products and squares, overflowing float sums):
// the float kernels' bounds must send every doubtful row to the exact formula.
TEST(RowScan, MixedScalesAreExact)
{
    auto ctx = cpu_context(2);
    vt::Data D = vt::make_data(860, 16, 23, 0.0, true);
    for (size_t r = 0; r < D.n; r++)
        for (size_t j = 0; j < D.d; j++)
            D.x[r * D.d + j] *= static_cast<float>(std::pow(10.0, -22.0 + static_cast<double>(r % 43)));
    // 3 queries (scales 1e-20, 1, 1e20): the float kernel per pair; 11 (every scale): blocked
    // products (kRowScanGemmMinQueries)
    for (size_t nq : {size_t(3), size_t(11)})
    {
        std::vector<float> Q = vt::make_queries(D, nq, 2);
        for (size_t q = 0; q < nq; q++)
            for (size_t j = 0; j < D.d; j++)
                Q[q * D.d + j] *=
                    static_cast<float>(std::pow(10.0, -20.0 + 5.0 * static_cast<double>(q * 4 % 9)));
        Pages P = make_pages(D, 4);
        auto ds = vt::upload(ctx.get(), D);
        for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1})
        {
            const size_t k = 40;
            std::vector<int64_t> ids(nq * k), want_ids(nq * k);
            std::vector<float> dists(nq * k), want_dists(nq * k);
            ASSERT_EQ(vs_knn(ctx.get(), ds.get(), Q.data(), nq, k, m, nullptr, want_ids.data(),
                             want_dists.data(), nullptr),
                      VS_OK);
            vs_rowscan *scan = nullptr;
            ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), D.d, m, Q.data(), nq, k, &scan), VS_OK);
            add_all(ctx.get(), scan, P);
            ASSERT_EQ(vs_rowscan_knn_result(ctx.get(), scan, ids.data(), dists.data(), nullptr), VS_OK);
            vs_rowscan_destroy(ctx.get(), scan);
            for (size_t i = 0; i < nq * k; i++)
            {
                auto row_of = [&](int64_t id) {
                    return &D.x[(std::find(D.ids.begin(), D.ids.end(), id) - D.ids.begin()) * D.d];
                };
                ASSERT_EQ(ids[i], want_ids[i])
                    << vt::metric_name(m) << " query " << i / k << " rank " << i % k << ": " << dists[i]
                    << " (reference " << vt::ref_distance(m, &Q[i / k * D.d], row_of(ids[i]), D.d)
                    << ") against " << want_dists[i] << " (reference "
                    << vt::ref_distance(m, &Q[i / k * D.d], row_of(want_ids[i]), D.d) << ")";
                ASSERT_TRUE(same_float(dists[i], want_dists[i]));
            }
            for (size_t q = 0; q < nq; q++)
            {
                // the double-precision reference at every rank
                std::vector<vt::RefHit> ref = vt::ref_sorted(D, &Q[q * D.d], m);
                for (size_t i = 0; i < k; i++)
                {
                    float r = ref[i].dist, got = dists[q * k + i];
                    if (!std::isfinite(r))
                        EXPECT_TRUE(same_float(got, r)) << vt::metric_name(m) << " query " << q;
                    else
                        EXPECT_NEAR(got, r, 1e-5 * std::max(1.0f, std::fabs(r)))
                            << vt::metric_name(m) << " query " << q << " rank " << i;
                }
            }
            for (size_t q = 0; q < nq; q++)
            {
                float radius = want_dists[q * k + k / 2];
                if (radius != radius)
                    continue;
                vs_range_result want, got;
                ASSERT_EQ(vs_range(ctx.get(), ds.get(), &Q[q * D.d], 1, radius, m, nullptr, nullptr,
                                   nullptr, &want),
                          VS_OK);
                ASSERT_EQ(vs_rowscan_range_begin(ctx.get(), D.d, m, &Q[q * D.d], 1, radius, &scan),
                          VS_OK);
                add_all(ctx.get(), scan, P);
                ASSERT_EQ(vs_rowscan_range_result(ctx.get(), scan, nullptr, nullptr, &got), VS_OK);
                vs_rowscan_destroy(ctx.get(), scan);
                ASSERT_EQ(got.total, want.total) << vt::metric_name(m) << " query " << q;
                for (size_t i = 0; i < got.total; i++)
                    ASSERT_EQ(got.ids[i], want.ids[i]);
                vs_range_result_free(&want);
                vs_range_result_free(&got);
            }
        }
    }
}

int always_cancel(void *) { return 1; }

TEST(RowScan, CancelStopsAnAdd)
{
    auto ctx = cpu_context(2, always_cancel);
    vt::Data D = vt::make_data(100, 8, 1);
    Pages P = make_pages(D, 1);
    vs_rowscan *scan = nullptr;
    ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), 8, VS_METRIC_L2SQ, D.x.data(), 1, 5, &scan), VS_OK);
    EXPECT_EQ(vs_rowscan_add(ctx.get(), scan, P.blocks.data(), P.blocks.size()), VS_CANCELLED);
    vs_rowscan_destroy(ctx.get(), scan);
}

TEST(RowScan, BadArgumentsAreRefused)
{
    auto ctx = cpu_context(1);
    float q[4] = {1, 2, 3, 4};
    vs_rowscan *scan = nullptr;
    EXPECT_EQ(vs_rowscan_knn_begin(ctx.get(), 0, VS_METRIC_L2, q, 1, 5, &scan), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_rowscan_knn_begin(ctx.get(), 4, static_cast<vs_metric>(9), q, 1, 5, &scan),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_rowscan_knn_begin(ctx.get(), 4, VS_METRIC_L2, nullptr, 1, 5, &scan),
              VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_rowscan_range_begin(ctx.get(), 4, VS_METRIC_L2, q, 1, NAN, &scan),
              VS_INVALID_ARGUMENT);
    ASSERT_EQ(vs_rowscan_range_begin(ctx.get(), 4, VS_METRIC_L2, q, 1, 1.0f, &scan), VS_OK);
    int64_t id;
    float dist;
    EXPECT_EQ(vs_rowscan_knn_result(ctx.get(), scan, &id, &dist, nullptr), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_rowscan_add(ctx.get(), scan, nullptr, 1), VS_INVALID_ARGUMENT);
    EXPECT_EQ(vs_rowscan_add_ahead(ctx.get(), scan, nullptr, 0, nullptr, 2), VS_INVALID_ARGUMENT);
    vs_rowscan_destroy(ctx.get(), scan);
    // k = 0 and an empty scan answer nothing
    ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), 4, VS_METRIC_L2, q, 1, 3, &scan), VS_OK);
    int64_t ids[3], counts[1];
    float dists[3];
    ASSERT_EQ(vs_rowscan_knn_result(ctx.get(), scan, ids, dists, counts), VS_OK);
    EXPECT_EQ(counts[0], 0);
    EXPECT_EQ(ids[0], -1);
    EXPECT_TRUE(std::isinf(dists[2]));
    vs_rowscan_destroy(ctx.get(), scan);
}

} // namespace
