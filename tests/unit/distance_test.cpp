// The CPU distance kernels (every instruction set this machine runs) against a double-precision
// reference on seeded random data.
#include "cpu/simd.h"
#include "engine/exact.h"
#include "vsearch/distance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

struct Reference
{
    double l2sq = 0, dot = 0, l1 = 0, aa = 0, bb = 0;
};

Reference reference(const std::vector<float> &a, const std::vector<float> &b)
{
    Reference r;
    for (size_t i = 0; i < a.size(); i++)
    {
        double x = a[i], y = b[i];
        r.l2sq += (x - y) * (x - y);
        r.dot += x * y;
        r.l1 += std::fabs(x - y);
        r.aa += x * x;
        r.bb += y * y;
    }
    return r;
}

// Float accumulation over n terms: allow a relative error growing like sqrt(n) ulps, measured
// against the sum of magnitudes so cancellation in the dot product does not inflate it.
void expect_close(double got, double want, double magnitude, size_t n)
{
    double tol = 8.0 * 1.2e-7 * std::sqrt(static_cast<double>(n) + 1.0) * (magnitude + 1e-30);
    EXPECT_NEAR(got, want, tol) << "n=" << n;
}

class DistanceTest : public ::testing::TestWithParam<size_t>
{
};

TEST_P(DistanceTest, EveryKernelTableMatchesDoubleReference)
{
    const size_t n = GetParam();
    std::mt19937_64 rng(1234 + n);
    std::normal_distribution<float> gauss(0.5f, 2.0f);
    const vs::simd::Kernels *tables[4];
    int ntables = vs::simd::supported(tables, 4);
    ASSERT_GE(ntables, 1);

    for (int trial = 0; trial < 5; trial++)
    {
        std::vector<float> a(n), b(n);
        for (size_t i = 0; i < n; i++)
        {
            a[i] = gauss(rng);
            b[i] = gauss(rng);
        }
        Reference r = reference(a, b);
        double absdot = 0;
        for (size_t i = 0; i < n; i++)
            absdot += std::fabs(static_cast<double>(a[i]) * b[i]);

        for (int t = 0; t < ntables; t++)
        {
            SCOPED_TRACE(tables[t]->name);
            const auto &k = *tables[t];
            expect_close(k.l2sq(a.data(), b.data(), n), r.l2sq, r.l2sq, n);
            expect_close(k.dot(a.data(), b.data(), n), r.dot, absdot, n);
            expect_close(k.l1(a.data(), b.data(), n), r.l1, r.l1, n);
            expect_close(k.sqnorm(a.data(), n), r.aa, r.aa, n);
            float ab, aa, bb;
            k.cosine_parts(a.data(), b.data(), n, &ab, &aa, &bb);
            expect_close(ab, r.dot, absdot, n);
            expect_close(aa, r.aa, r.aa, n);
            expect_close(bb, r.bb, r.bb, n);
        }

        // The dispatched C entry points, metric by metric.
        double cos_ref = 1.0 - r.dot / std::sqrt(r.aa * r.bb);
        EXPECT_NEAR(vs_distance_f32(VS_METRIC_L2SQ, a.data(), b.data(), n), r.l2sq, 1e-5 * r.l2sq);
        EXPECT_NEAR(vs_distance_f32(VS_METRIC_L2, a.data(), b.data(), n), std::sqrt(r.l2sq),
                    1e-5 * std::sqrt(r.l2sq));
        EXPECT_NEAR(vs_distance_f32(VS_METRIC_IP, a.data(), b.data(), n), -r.dot, 1e-5 * absdot + 1e-6);
        EXPECT_NEAR(vs_distance_f32(VS_METRIC_COSINE, a.data(), b.data(), n), cos_ref, 1e-4);
        EXPECT_NEAR(vs_distance_f32(VS_METRIC_L1, a.data(), b.data(), n), r.l1, 1e-5 * r.l1);
    }
}

INSTANTIATE_TEST_SUITE_P(Dimensions, DistanceTest,
                         ::testing::Values<size_t>(1, 3, 31, 128, 784, 1536, 16000));

TEST(Distance, CosineOfZeroVectorIsNaN)
{
    std::vector<float> zero(8, 0.0f), one(8, 1.0f);
    EXPECT_TRUE(std::isnan(vs_distance_f32(VS_METRIC_COSINE, zero.data(), one.data(), 8)));
}

TEST(Distance, CosineIsClampedToValidRange)
{
    std::vector<float> a(17, 0.1f);
    double d = vs_distance_f32(VS_METRIC_COSINE, a.data(), a.data(), a.size());
    EXPECT_GE(d, 0.0);
    EXPECT_LE(d, 1e-6);
    std::vector<float> neg(17, -0.1f);
    double opposite = vs_distance_f32(VS_METRIC_COSINE, a.data(), neg.data(), a.size());
    EXPECT_LE(opposite, 2.0);
    EXPECT_GE(opposite, 2.0 - 1e-6);
}

// The SIMD exact distance: the bits of engine/exact.h's reference for every instruction set, every
// metric, dimensions around the 32-term blocks, and awkward values (zeros of both signs,
// subnormals, huge magnitudes that overflow the float result, cancellation).
TEST(Distance, ExactKernelsMatchTheReferenceBitForBit)
{
    vs::simd::ExactKernel kernels[4];
    int nk = vs::simd::exact_supported(kernels, 4);
    ASSERT_GE(nk, 1);
    std::mt19937_64 rng(77);
    std::normal_distribution<float> gauss(0.0f, 3.0f);
    std::uniform_int_distribution<int> pick(0, 9);
    const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 3e38f, -3e38f, 1.0f, -1.0f};
    const vs_metric metrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE,
                                 VS_METRIC_L1};
    long compared = 0;
    for (size_t n : {1, 2, 7, 16, 31, 32, 33, 63, 64, 65, 100, 128, 784, 1000, 2049})
        for (int trial = 0; trial < 20; trial++)
        {
            std::vector<float> a(n), b(n);
            for (size_t i = 0; i < n; i++)
            {
                int ka = pick(rng), kb = pick(rng);
                a[i] = trial % 4 == 3 && ka < 3 ? specials[(ka + trial) % 8] : gauss(rng);
                b[i] = trial % 4 == 3 && kb < 3 ? specials[(kb + i) % 8] : gauss(rng);
                if (trial % 5 == 4)
                    b[i] = a[i] * (1.0f + 1e-6f * gauss(rng)); // near cancellation
            }
            for (vs_metric m : metrics)
            {
                float want = vs::exact_distance(m, a.data(), b.data(), n);
                for (int k = 0; k < nk; k++)
                {
                    float got = static_cast<float>(kernels[k](m, a.data(), b.data(), n));
                    uint32_t gb, wb;
                    std::memcpy(&gb, &got, 4);
                    std::memcpy(&wb, &want, 4);
                    if (std::isnan(want))
                        EXPECT_TRUE(std::isnan(got)) << "metric " << m << " n " << n;
                    else
                        EXPECT_EQ(gb, wb) << "table " << k << " metric " << m << " n " << n
                                          << " trial " << trial << ": " << got << " vs " << want;
                    compared++;
                }
            }
        }
    EXPECT_GT(compared, 1000);
    std::vector<float> x(40, 0.25f), y(40, -0.5f);
    EXPECT_EQ(vs_exact_distance_f32(VS_METRIC_L1, x.data(), y.data(), 40),
              static_cast<double>(vs::exact_distance(VS_METRIC_L1, x.data(), y.data(), 40)));
}

TEST(Distance, ReportsDispatchedInstructionSet)
{
    std::string level = vs_simd_level();
    EXPECT_TRUE(level == "avx512" || level == "avx2" || level == "sse2") << level;
}

} // namespace

// The sparse exact distance: the bits of the dense one over the same values, for every metric,
// supports that overlap, nest, are disjoint or empty, and awkward values.
TEST(Distance, SparseExactDistanceIsTheDenseOneBitForBit)
{
    std::mt19937_64 rng(23);
    std::normal_distribution<float> gauss(0.0f, 3.0f);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const float specials[] = {1e-40f, -1e-40f, 3e38f, -3e38f, 1.0f, -1.0f};
    const vs_metric metrics[] = {VS_METRIC_L2SQ, VS_METRIC_L2, VS_METRIC_IP, VS_METRIC_COSINE,
                                 VS_METRIC_L1};
    long compared = 0;
    for (size_t n : {1, 2, 31, 32, 33, 100, 1000, 5000})
        for (int trial = 0; trial < 30; trial++)
        {
            // densities from empty to full; trial % 6 == 5: b's support disjoint from a's
            double da = (trial % 6) / 5.0, db = ((trial + 3) % 6) / 5.0;
            std::vector<float> a(n, 0.0f), b(n, 0.0f);
            std::vector<int> ai, bi;
            std::vector<float> av, bv;
            for (size_t i = 0; i < n; i++)
            {
                if (unit(rng) < da)
                    a[i] = trial % 4 == 3 ? specials[i % 6] : gauss(rng);
                if (unit(rng) < db && !(trial % 6 == 5 && a[i] != 0.0f))
                    b[i] = trial % 7 == 6 && a[i] != 0.0f ? a[i] * 1.000001f : gauss(rng);
                if (a[i] != 0.0f)
                    ai.push_back(static_cast<int>(i)), av.push_back(a[i]);
                if (b[i] != 0.0f)
                    bi.push_back(static_cast<int>(i)), bv.push_back(b[i]);
            }
            for (vs_metric m : metrics)
            {
                double want = vs_exact_distance_f32(m, a.data(), b.data(), n);
                double got = vs_exact_distance_sparse_f32(m, ai.data(), av.data(), ai.size(),
                                                          bi.data(), bv.data(), bi.size());
                if (std::isnan(want))
                    EXPECT_TRUE(std::isnan(got)) << "metric " << m << " n " << n;
                else
                    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0)
                        << "metric " << m << " n " << n << " trial " << trial << ": " << got
                        << " vs " << want;
                compared++;
            }
        }
    EXPECT_GT(compared, 1000);
}
