// Row sketches (vsearch/rowscan.h, cpu/sketch.h): the lower bound from a sketch never exceeds the
// exact base value of the pair (doubles' reference, all metrics, awkward rows and queries), the
// integer kernels agree with the scalar sum, and a scan that adds only the rows its sketches ask
// for answers exactly what a scan of every row does, while skipping most rows of clustered data.
#include "cpu/simd.h"
#include "cpu/sketch.h"
#include "vsearch/rowscan.h"

#include "engine_testing.h"

namespace {

vt::ContextPtr cpu_context()
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = 1;
    vs_context *ctx = nullptr;
    char err[256] = {0};
    EXPECT_EQ(vs_context_create(&o, &ctx, err, sizeof err), VS_OK) << err;
    return vt::ContextPtr(ctx);
}

std::vector<unsigned char> sketches_of(const std::vector<float> &x, size_t n, size_t d)
{
    const size_t sb = vs_row_sketch_bytes(d);
    std::vector<unsigned char> s(n * sb);
    for (size_t i = 0; i < n; i++)
        vs_row_sketch_make(&x[i * d], d, &s[i * sb]);
    return s;
}

// Rows that make a bound work hard: Gaussian, far from the origin, constant, huge, tiny, mixed.
std::vector<float> awkward_rows(size_t n, size_t d, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(n * d);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
        {
            float v = g(rng);
            switch (i % 8)
            {
            case 1: v = 200.0f + 50.0f * v; break;       // all positive, far out
            case 2: v = 3.5f; break;                      // constant
            case 3: v = 1e18f * v; break;                 // huge
            case 4: v = 1e-30f * v; break;                // tiny
            case 5: v = j % 7 == 0 ? 1e6f * v : v; break; // one scale dominates
            case 6: v = j == 0 ? 1.0f : 0.0f; break;      // a unit vector
            default: break;
            }
            x[i * d + j] = v;
        }
    return x;
}

TEST(Sketch, IntegerDotKernelsAreTheScalarSum)
{
    std::mt19937_64 rng(5);
    for (size_t d : {size_t(1), size_t(15), size_t(16), size_t(31), size_t(33), size_t(784),
                     size_t(4076), size_t(70000)})
    {
        std::vector<int16_t> q((d + 31) & ~size_t{31}, 0);
        std::vector<uint8_t> c(d);
        for (int round = 0; round < 3; round++)
        {
            int64_t want = 0;
            for (size_t i = 0; i < d; i++)
            {
                // round 0: the extremes everywhere (the sums' worst case), then random values
                q[i] = static_cast<int16_t>(round == 0 ? 2047 : static_cast<int>(rng() % 4095) - 2047);
                c[i] = static_cast<uint8_t>(round == 0 ? 255 : rng() % 256);
                want += static_cast<int64_t>(q[i]) * c[i];
            }
            vs::SketchDot kernels[4];
            const int nk = vs::sketch_dot_supported(kernels, 4);
            for (int k = 0; k < nk; k++)
                EXPECT_EQ(kernels[k](q.data(), c.data(), d), want) << "d " << d << " kernel " << k;
            EXPECT_EQ(vs::sketch_dot(q.data(), c.data(), d), want) << "d " << d;
        }
    }
}

TEST(Sketch, LowerBoundNeverExceedsTheExactBase)
{
    for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE})
        for (size_t d : {size_t(1), size_t(3), size_t(17), size_t(128), size_t(784), size_t(2051)})
        {
            const size_t n = 64, sb = vs_row_sketch_bytes(d);
            std::vector<float> x = awkward_rows(n, d, 3 + d), q = awkward_rows(24, d, 9 + d);
            for (size_t j = 0; j < d; j++)
            {
                q[0 * d + j] = 0.0f;               // the origin
                q[1 * d + j] = x[1 * d + j];       // a row itself
                q[9 * d + j] = x[9 * d + j] * 1.0001f;
            }
            std::vector<unsigned char> s = sketches_of(x, n, d);
            for (size_t qi = 0; qi < 24; qi++)
            {
                vs::SketchQuery sq(&q[qi * d], d, m);
                for (size_t i = 0; i < n; i++)
                {
                    const double exact = vs::simd::exact_base_simd(m, &q[qi * d], &x[i * d], d);
                    const double lb = sq.lower_base(&s[i * sb]);
                    if (std::isnan(exact))
                        continue; // cosine with a zero vector: no base value to bound
                    EXPECT_LE(lb, exact) << "metric " << m << " d " << d << " query " << qi
                                         << " row " << i;
                }
            }
        }
}

// Clustered rows: 40 centres, rows near them; queries near centres too.
vt::Data clustered(size_t n, size_t d, uint64_t seed)
{
    vt::Data D = vt::make_data(n, d, seed);
    std::mt19937_64 rng(seed * 7 + 1);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> centres(40 * d);
    for (float &c : centres)
        c = 10.0f * g(rng);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            D.x[i * d + j] = centres[(i % 40) * d + j] + 0.5f * g(rng);
    return D;
}

// A scan adding only the rows the sketches ask for, chunk by chunk, against one adding all.
void filtered_against_full(vs_metric m, size_t d, size_t nq, size_t k, bool range,
                           size_t *needed_rows)
{
    auto ctx = cpu_context();
    vt::Data D = clustered(3000, d, 11 + d);
    std::vector<float> Q = vt::make_queries(D, nq, 3);
    for (size_t i = 0; i < nq * d; i++)
        if (i / d % 3 != 1)
            Q[i] = D.x[(i / d * 37 % D.n) * d + i % d] + 0.3f * static_cast<float>(i % 5);
    const size_t sb = vs_row_sketch_bytes(d);
    std::vector<unsigned char> s = sketches_of(D.x, D.n, d);
    // the radius of the first query's 30th nearest row
    std::vector<float> dq(D.n);
    for (size_t i = 0; i < D.n; i++)
        dq[i] = vs::exact_distance_simd(m, Q.data(), &D.x[i * d], d);
    std::nth_element(dq.begin(), dq.begin() + 29, dq.end());
    const float radius = dq[29];
    vs_rowscan *full = nullptr, *part = nullptr;
    if (range)
    {
        ASSERT_EQ(vs_rowscan_range_begin(ctx.get(), d, m, Q.data(), nq, radius, &full), VS_OK);
        ASSERT_EQ(vs_rowscan_range_begin(ctx.get(), d, m, Q.data(), nq, radius, &part), VS_OK);
    }
    else
    {
        ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), d, m, Q.data(), nq, k, &full), VS_OK);
        ASSERT_EQ(vs_rowscan_knn_begin(ctx.get(), d, m, Q.data(), nq, k, &part), VS_OK);
    }
    vs_row_block all{D.x.data(), d * sizeof(float), D.n, D.ids.data()};
    ASSERT_EQ(vs_rowscan_add(ctx.get(), full, &all, 1), VS_OK);
    *needed_rows = 0;
    std::vector<unsigned char> need(25);
    for (size_t r = 0; r < D.n; r += 25)
    {
        const size_t n = std::min<size_t>(25, D.n - r);
        ASSERT_EQ(vs_rowscan_sketch_filter(ctx.get(), part, &s[r * sb], sb, n, need.data()),
                  VS_OK);
        std::vector<vs_row_block> blocks;
        for (size_t i = 0; i < n; i++)
            if (need[i])
                blocks.push_back({&D.x[(r + i) * d], d * sizeof(float), 1, &D.ids[r + i]});
        *needed_rows += blocks.size();
        ASSERT_EQ(vs_rowscan_add(ctx.get(), part, blocks.data(), blocks.size()), VS_OK);
    }
    if (range)
    {
        vs_range_result a, b;
        ASSERT_EQ(vs_rowscan_range_result(ctx.get(), full, nullptr, nullptr, &a), VS_OK);
        ASSERT_EQ(vs_rowscan_range_result(ctx.get(), part, nullptr, nullptr, &b), VS_OK);
        EXPECT_GT(a.total, 0u);
        ASSERT_EQ(a.total, b.total);
        for (size_t i = 0; i < a.total; i++)
        {
            EXPECT_EQ(a.ids[i], b.ids[i]);
            EXPECT_EQ(a.distances[i], b.distances[i]);
        }
        for (size_t q = 0; q <= nq; q++)
            EXPECT_EQ(a.offsets[q], b.offsets[q]);
        vs_range_result_free(&a);
        vs_range_result_free(&b);
    }
    else
    {
        std::vector<int64_t> ia(nq * k), ib(nq * k), ca(nq), cb(nq);
        std::vector<float> da(nq * k), db(nq * k);
        ASSERT_EQ(vs_rowscan_knn_result(ctx.get(), full, ia.data(), da.data(), ca.data()), VS_OK);
        ASSERT_EQ(vs_rowscan_knn_result(ctx.get(), part, ib.data(), db.data(), cb.data()), VS_OK);
        EXPECT_EQ(ia, ib);
        EXPECT_EQ(ca, cb);
        for (size_t i = 0; i < nq * k; i++)
            EXPECT_TRUE(da[i] == db[i] || (std::isinf(da[i]) && std::isinf(db[i]))) << i;
    }
    vs_rowscan_destroy(ctx.get(), full);
    vs_rowscan_destroy(ctx.get(), part);
}

TEST(Sketch, FilteredScanIsTheFullScansAnswer)
{
    for (vs_metric m : {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE, VS_METRIC_L1})
        for (size_t d : {size_t(5), size_t(128), size_t(784)})
            for (size_t nq : {size_t(1), size_t(3)})
            {
                size_t needed = 0;
                for (size_t k : {size_t(1), size_t(10), size_t(3100)})
                {
                    SCOPED_TRACE(testing::Message() << "metric " << m << " d " << d << " nq "
                                                    << nq << " k " << k);
                    filtered_against_full(m, d, nq, k, false, &needed);
                    // a filter that lets everything through would pass the comparison: on
                    // clustered rows with k 10, most rows must be ruled out (not L1: no bound)
                    if (k == 10 && m != VS_METRIC_L1 && d >= 128)
                        EXPECT_LT(needed, 3000u / 3);
                    if (k == 3100)
                        EXPECT_EQ(needed, 3000u); // k beyond the rows: every row is needed
                }
                SCOPED_TRACE(testing::Message() << "range, metric " << m << " d " << d);
                filtered_against_full(m, d, nq, 0, true, &needed);
            }
}

} // namespace
