// The CPU backend's blocked products (cpu/gemm.h) and what is built on them, each against a plain
// reference: the dot tiles of every instruction set against double sums within their rounding
// bound; the certified nearest-row search against a scan of every row with the reference
// distance (the same index, ties included); k-means and IVF-PQ encoding against a plain Lloyd
// loop and a plain encoder that scan every centroid and codeword (bit-identical results).
#include "engine_testing.h"

#include "cpu/gemm.h"
#include "engine/exact.h"
#include "engine/host_common.h"
#include "engine/ivfpq_math.h"

namespace {

std::vector<float> gaussian(size_t n, uint64_t seed, float scale = 1.0f)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v)
        x = g(rng);
    return v;
}

// Rows for the lane kernel: Gaussian, some copied (exact ties), points equal to rows; x with
// leading dimension d + 2.
struct NearestCaseRows
{
    std::vector<float> rows, x;
    vs::PackedRows packed;
};

NearestCaseRows nearest_case_rows(size_t k, size_t nr, size_t d, uint64_t seed)
{
    NearestCaseRows c{gaussian(k * d, seed), gaussian(nr * (d + 2), seed + 1), {}};
    for (size_t j = 2; j < k; j += 5)
        std::memcpy(&c.rows[j * d], &c.rows[(j / 2) * d], d * sizeof(float));
    for (size_t b = 1; b < nr; b += 4)
        std::memcpy(&c.x[b * (d + 2)], &c.rows[(b * 3 % k) * d], d * sizeof(float));
    c.packed.pack(c.rows.data(), k, d, d);
    return c;
}

TEST(BlockedDots, EveryKernelMatchesDoubleSums)
{
    const double u = 0x1p-24;
    for (const char *isa : {"avx512", "avx2", "sse2"})
        for (size_t d : {1, 3, 14, 100, 784})
            for (size_t n : {1, 17, 32, 45, 256, 257, 300})
                for (size_t nx : {1, 5, 12, 13, 29})
                {
                    const size_t ldx = d + 3, ldr = d + 1;
                    std::vector<float> x = gaussian(nx * ldx, d * 7 + n), r = gaussian(n * ldr, nx);
                    vs::PackedRows packed(r.data(), n, d, ldr);
                    ASSERT_EQ(packed.padded() % vs::kGemmColumnAlign, 0u);
                    ASSERT_GE(packed.padded(), n);
                    const size_t ldo = packed.padded() + 5;
                    std::vector<float> out(nx * ldo, vt::poison_float());
                    if (!vs::dot_block_with(isa, x.data(), ldx, nx, packed, out.data(), ldo))
                        break; // not supported here
                    for (size_t i = 0; i < nx; i++)
                        for (size_t j = 0; j < packed.padded(); j++)
                        {
                            const float got = out[i * ldo + j];
                            if (j >= n)
                            {
                                ASSERT_EQ(got, 0.0f) << isa << " padding column " << j;
                                continue;
                            }
                            double s = 0, mag = 0;
                            for (size_t t = 0; t < d; t++)
                            {
                                s += static_cast<double>(x[i * ldx + t]) * r[j * ldr + t];
                                mag += std::fabs(static_cast<double>(x[i * ldx + t]) * r[j * ldr + t]);
                            }
                            ASSERT_LE(std::fabs(got - s), (d + 4) * u * mag + 1e-30)
                                << isa << " d " << d << " n " << n << " row " << i << " col " << j;
                        }
                }
}

// IVF-PQ tables from packed codebooks: pq_l2 and pq_dot bit for bit (in order, products
// rounded), for every instruction set, codebooks of 16 (nbits 4, padded) and 256 codewords, the
// packed rows read in their panel or each from a place of its own (index pages: an odd offset
// from any vector alignment, in reverse order).
TEST(PqTable, EveryKernelMatchesThePlainSumsBitForBit)
{
    for (const char *isa : {"avx512", "avx2", "sse2"})
        for (size_t ksub : {16, 256})
            for (size_t d : {1, 2, 3, 4, 14, 16, 33})
                for (bool scattered : {false, true})
                {
                    std::vector<float> cb = gaussian(ksub * d, ksub + d, 3.0f),
                                       x = gaussian(d, d, 3.0f);
                    cb[0] = x[0]; // a zero difference
                    vs::PackedRows packed(cb.data(), ksub, d, d);
                    const size_t w = packed.padded();
                    std::vector<const float *> rows;
                    packed.panel_rows(rows);
                    std::vector<float> elsewhere(d * (w + 7));
                    if (scattered)
                        for (size_t t = 0; t < d; t++)
                        {
                            float *r = &elsewhere[(d - 1 - t) * (w + 7) + 3];
                            std::memcpy(r, rows[t], w * sizeof(float));
                            rows[t] = r;
                        }
                    std::vector<float> out(w, vt::poison_float());
                    for (bool ip : {false, true})
                    {
                        if (!vs::pq_table_with(isa, x.data(), rows.data(), d, w, ip, out.data()))
                            break; // not supported here
                        for (size_t c = 0; c < ksub; c++)
                        {
                            const int di = static_cast<int>(d);
                            const float want = ip ? vs::pq_dot(x.data(), &cb[c * d], di)
                                                  : vs::pq_l2(x.data(), &cb[c * d], di);
                            ASSERT_EQ(std::memcmp(&out[c], &want, sizeof(float)), 0)
                                << isa << " ksub " << ksub << " d " << d << (ip ? " ip" : " l2")
                                << (scattered ? " scattered" : "") << " codeword " << c << ": "
                                << out[c] << " vs " << want;
                        }
                    }
                }
}

// The filter of exact kNN's blocked products for every instruction set: values within float
// rounding of the plain formulas, and exactly the columns whose own value is not above its bound or
// is +inf or NaN (overflowed sums), ascending; bounds of -inf keep only those.
TEST(BoundedColumns, EveryKernelKeepsTheColumnsNotAboveTheirBound)
{
    const size_t n = 64;
    std::vector<float> o = gaussian(n, 5, 4.0f), xa = gaussian(n, 6, 2.0f), bound = gaussian(n, 7, 6.0f);
    o[3] = INFINITY;
    o[4] = -INFINITY;
    o[5] = NAN;
    xa[6] = INFINITY;
    bound[7] = INFINITY;
    for (size_t c = 8; c < n; c += 9)
        bound[c] = -INFINITY;
    for (size_t c = 0; c < n; c++)
        xa[c] = std::fabs(xa[c]);
    for (const char *isa : {"avx512", "avx2", "sse2"})
        for (vs::GemmValue kind : {vs::GemmValue::L2, vs::GemmValue::IP, vs::GemmValue::Cosine})
            for (float s : {0.5f, 3.0f})
            {
                std::vector<float> v(n, vt::poison_float());
                std::vector<uint32_t> cols(n, 999);
                size_t m = 0;
                if (!vs::bounded_columns_with(isa, o.data(), xa.data(), s, bound.data(), n, kind,
                                              v.data(), cols.data(), &m))
                    break; // not supported here
                std::vector<uint32_t> want;
                for (size_t c = 0; c < n; c++)
                {
                    const double ref = kind == vs::GemmValue::L2 ? (double(xa[c]) + s) - 2.0 * o[c]
                                       : kind == vs::GemmValue::IP ? -double(o[c])
                                                                   : 1.0 - double(o[c]) * xa[c] * s;
                    if (std::isfinite(ref))
                        EXPECT_NEAR(v[c], ref, 1e-6 * (1.0 + std::fabs(ref))) << isa << " column " << c;
                    else if (ref == ref)
                        EXPECT_EQ(v[c], static_cast<float>(ref)) << isa << " column " << c;
                    else
                        EXPECT_TRUE(v[c] != v[c]) << isa << " column " << c;
                    if (!(v[c] > bound[c]) || v[c] == INFINITY)
                        want.push_back(static_cast<uint32_t>(c));
                }
                ASSERT_EQ(std::vector<uint32_t>(cols.begin(), cols.begin() + m), want)
                    << isa << " kind " << static_cast<int>(kind) << " s " << s;
                EXPECT_GE(m, 5u) << isa;        // the specials at least
                EXPECT_LT(m, n - 6) << isa;     // and not everything
            }
}

// The lane kernel of nearest_rows (rows of up to 16 elements, one per vector lane) for every
// instruction set, against the same values computed one at a time in the kernels' order
// (products summed in order t = 0..d-1 from the first product, fused with FMA instruction sets;
// then ||r||^2 - 2 <x, r> or -<x, r>): the same candidates, ascending, and the same values bit for
// bit, for groups of fewer rows than lanes, rows with ties, and slack 0 or wide.
TEST(NearestLanes, EveryKernelMatchesScalarValues)
{
    for (const char *isa : {"avx512", "avx2", "sse2"})
        for (size_t d = 1; d <= 16; d++)
            for (size_t k : {1, 7, 40, 256})
                for (size_t nr : {1, 3, 4, 8, 13, 16})
                {
                    NearestCaseRows c = nearest_case_rows(k, nr, d, d * 1000 + k + nr);
                    const size_t ldx = d + 2, ld = c.packed.padded();
                    std::vector<double> slack(nr);
                    for (size_t b = 0; b < nr; b++)
                        slack[b] = b % 3 == 0 ? 0.0 : (b % 3 == 1 ? 1e-6 : 0.5);
                    std::vector<float> lane_values(ld * vs::kMaxLaneRows), v(nr * ld, vt::poison_float());
                    std::vector<uint32_t> cand(nr * k, 0xdeadu);
                    size_t counts[vs::kMaxLaneRows];
                    for (vs::NearestKind kind : {vs::NearestKind::L2, vs::NearestKind::IP})
                    {
                        if (!vs::nearest_lane_candidates_with(isa, c.x.data(), ldx, nr, c.packed, kind,
                                                              slack.data(), lane_values.data(),
                                                              v.data(), ld, cand.data(), k, counts))
                            break; // not supported here, or d too long for this kernel
                        const bool fused = std::strcmp(isa, "sse2") != 0;
                        for (size_t b = 0; b < nr; b++)
                        {
                            std::vector<float> want(k);
                            float lo = INFINITY;
                            for (size_t j = 0; j < k; j++)
                            {
                                const float *xb = &c.x[b * ldx];
                                float acc = 0.0f;
                                for (size_t t = 0; t < d; t++)
                                    acc = fused ? std::fma(xb[t], c.packed.at(j, t), acc)
                                                : acc + xb[t] * c.packed.at(j, t);
                                want[j] = kind == vs::NearestKind::L2 ? c.packed.sqnorms()[j] - 2.0f * acc
                                                                      : -acc;
                                lo = std::min(lo, want[j]);
                            }
                            float thr = static_cast<float>(static_cast<double>(lo) + slack[b]);
                            if (static_cast<double>(thr) < static_cast<double>(lo) + slack[b])
                                thr = std::nextafter(thr, INFINITY);
                            std::vector<uint32_t> expect;
                            for (size_t j = 0; j < k; j++)
                                if (want[j] <= thr)
                                    expect.push_back(static_cast<uint32_t>(j));
                            ASSERT_EQ(counts[b], expect.size())
                                << isa << " d " << d << " k " << k << " nr " << nr << " row " << b;
                            for (size_t n = 0; n < expect.size(); n++)
                            {
                                ASSERT_EQ(cand[b * k + n], expect[n]) << isa << " d " << d << " row " << b;
                                const float got = v[b * ld + expect[n]];
                                ASSERT_EQ(std::memcmp(&got, &want[expect[n]], sizeof got), 0)
                                    << isa << " d " << d << " k " << k << " row " << b << " column "
                                    << expect[n] << ": " << got << " vs " << want[expect[n]];
                            }
                        }
                    }
                }
}

// The row kernel's candidates are exactly the values within the slack of the smallest of the k
// real columns (a minimum taken over only some lanes would keep more).
TEST(NearestRowCandidates, ExactlyThoseWithinTheSlackOfTheSmallest)
{
    for (size_t d : {1, 5, 17, 24, 32})
        for (size_t k : {7, 100, 256})
        {
            NearestCaseRows c = nearest_case_rows(k, 20, d, d * 77 + k);
            std::vector<float> v(c.packed.padded());
            std::vector<uint32_t> cand(k);
            for (size_t b = 0; b < 20; b++)
                for (double slack : {0.0, 1e-3, 0.3})
                {
                    const size_t nc = vs::nearest_row_candidates(&c.x[b * (d + 2)], c.packed,
                                                                 vs::NearestKind::L2, slack, v.data(),
                                                                 cand.data());
                    const float lo = *std::min_element(v.begin(), v.begin() + k);
                    std::vector<uint32_t> expect;
                    for (size_t j = 0; j < k; j++)
                        if (static_cast<double>(v[j]) <= static_cast<double>(lo) + slack)
                            expect.push_back(static_cast<uint32_t>(j));
                    ASSERT_EQ(std::vector<uint32_t>(cand.begin(), cand.begin() + nc), expect)
                        << "d " << d << " k " << k << " row " << b << " slack " << slack;
                }
        }
}

// The reference answer: a scan of every row, first smallest (as `c == 0 || v < best`).
template <typename Ref> std::pair<int32_t, float> scan_nearest(size_t i, size_t k, Ref &&ref)
{
    int32_t arg = 0;
    float best = 0;
    for (size_t j = 0; j < k; j++)
    {
        float v = ref(i, j);
        if (j == 0 || v < best)
        {
            best = v;
            arg = static_cast<int32_t>(j);
        }
    }
    return {arg, best};
}

// Rows that tie or nearly tie: copies of a row, and copies with their last element moved by one
// unit in the last place; points equal to rows; huge values whose squares overflow float.
struct NearestCase
{
    std::vector<float> rows, x;
    size_t k, n, d;
};

NearestCase nearest_case(size_t k, size_t n, size_t d, uint64_t seed, float scale)
{
    NearestCase c{gaussian(k * d, seed, scale), gaussian(n * d, seed + 1, scale), k, n, d};
    std::mt19937_64 rng(seed + 2);
    for (size_t j = 1; j < k; j++)
        if (rng() % 5 == 0)
        {
            size_t src = rng() % j;
            std::memcpy(&c.rows[j * d], &c.rows[src * d], d * sizeof(float));
            if (rng() % 2)
                c.rows[j * d + d - 1] = std::nextafter(c.rows[j * d + d - 1], INFINITY);
        }
    for (size_t i = 0; i < n; i++)
        if (rng() % 3 == 0)
            std::memcpy(&c.x[i * d], &c.rows[(rng() % k) * d], d * sizeof(float));
    return c;
}

TEST(NearestRows, MatchesAScanOfEveryRow)
{
    struct Shape
    {
        size_t k, n, d;
        float scale;
    };
    // one panel from registers (d <= 32, k <= 256) and tiles (longer rows, more rows)
    for (Shape s : {Shape{1, 10, 4, 1.0f}, Shape{7, 50, 3, 1.0f}, Shape{256, 300, 14, 0.3f},
                    Shape{245, 100, 784, 1.0f}, Shape{40, 60, 33, 1e-20f}, Shape{33, 40, 5, 3e19f},
                    Shape{300, 50, 10, 1.0f}, Shape{16, 70, 32, 1.0f}, Shape{256, 301, 4, 1.0f},
                    Shape{256, 37, 16, 2.0f}, Shape{200, 45, 1, 1.0f}, Shape{64, 40, 8, 1e19f},
                    Shape{256, 50, 2, 1e-20f}})
    {
        NearestCase c = nearest_case(s.k, s.n, s.d, s.k * 31 + s.d, s.scale);
        const size_t d = s.d;
        vs::PackedRows packed(c.rows.data(), s.k, d, d);
        vs::NearestScratch scratch;
        auto l2_simd = [&](size_t i, size_t j) { return vs_l2sq_f32(&c.x[i * d], &c.rows[j * d], d); };
        auto ip_simd = [&](size_t i, size_t j) { return -vs_dot_f32(&c.x[i * d], &c.rows[j * d], d); };
        auto l2_exact = [&](size_t i, size_t j) {
            return vs::exact_distance(VS_METRIC_L2SQ, &c.x[i * d], &c.rows[j * d], d);
        };
        auto ip_exact = [&](size_t i, size_t j) {
            return vs::exact_distance(VS_METRIC_IP, &c.x[i * d], &c.rows[j * d], d);
        };
        auto l2_ordered = [&](size_t i, size_t j) {
            return vs::pq_l2(&c.x[i * d], &c.rows[j * d], static_cast<int>(d));
        };
        auto check = [&](const char *what, vs::NearestKind kind, double err, auto &&ref) {
            std::vector<int32_t> got(s.n, -5);
            std::vector<float> val(s.n);
            vs::nearest_rows(c.x.data(), d, s.n, packed, kind, err, ref, nullptr, got.data(),
                             val.data(), scratch);
            for (size_t i = 0; i < s.n; i++)
            {
                auto want = scan_nearest(i, s.k, ref);
                ASSERT_EQ(got[i], want.first) << what << " k " << s.k << " d " << d << " point " << i;
                double xn = 0;
                for (size_t t = 0; t < d; t++)
                    xn += static_cast<double>(c.x[i * d + t]) * c.x[i * d + t];
                const double slack = vs::nearest_slack(kind, d, err, std::sqrt(xn), packed.max_norm());
                if (std::isfinite(want.second) && slack < INFINITY)
                    ASSERT_NEAR(val[i], want.second, slack) << what << " point " << i;
            }
        };
        check("l2 simd", vs::NearestKind::L2, vs::float_sum_error(d), l2_simd);
        check("ip simd", vs::NearestKind::IP, vs::float_sum_error(d), ip_simd);
        check("l2 exact", vs::NearestKind::L2, vs::kRoundedOnceError, l2_exact);
        check("ip exact", vs::NearestKind::IP, vs::kRoundedOnceError, ip_exact);
        check("l2 in order", vs::NearestKind::L2, vs::float_sum_error(d), l2_ordered);
    }
}

// Lane groups (rows of at most 16 elements) in which some points are so long that their values
// might overflow (though the reference does not): those take the row path, the others the lane
// kernel, and every answer is the scan's.
TEST(NearestRows, LaneGroupsWithPointsThatMayOverflow)
{
    for (size_t d : {3, 8, 16})
    {
        const size_t k = 100, n = 70;
        std::vector<float> rows = gaussian(k * d, d + 10, 5e17f), x = gaussian(n * d, d + 11, 5e17f);
        for (size_t i = 0; i < n; i += 3)
        {
            double norm = 0;
            for (size_t t = 0; t < d; t++)
                norm += static_cast<double>(x[i * d + t]) * x[i * d + t];
            // odd: norm 1.2e19, so (norm + longest row)^2 lies between 2^127 and FLT_MAX
            const double scale = i % 2 ? 1.2e19 / std::sqrt(norm) : 1e-30;
            for (size_t t = 0; t < d; t++)
                x[i * d + t] = static_cast<float>(x[i * d + t] * scale);
        }
        vs::PackedRows packed(rows.data(), k, d, d);
        ASSERT_GT(vs::nearest_lane_rows(d), 0u);
        vs::NearestScratch scratch;
        size_t row_path = 0;
        for (size_t i = 0; i < n; i++)
        {
            double xn = 0;
            for (size_t t = 0; t < d; t++)
                xn += static_cast<double>(x[i * d + t]) * x[i * d + t];
            row_path += !vs::nearest_values_finite(std::sqrt(xn), packed.max_norm());
        }
        ASSERT_GT(row_path, 0u);
        ASSERT_LT(row_path, n);
        for (vs::NearestKind kind : {vs::NearestKind::L2, vs::NearestKind::IP})
        {
            auto ref = [&](size_t i, size_t j) {
                return kind == vs::NearestKind::L2 ? vs_l2sq_f32(&x[i * d], &rows[j * d], d)
                                                   : -vs_dot_f32(&x[i * d], &rows[j * d], d);
            };
            std::vector<int32_t> got(n, -1);
            vs::nearest_rows(x.data(), d, n, packed, kind, vs::float_sum_error(d), ref, nullptr,
                             got.data(), nullptr, scratch);
            for (size_t i = 0; i < n; i++)
                ASSERT_EQ(got[i], scan_nearest(i, k, ref).first)
                    << "d " << d << " point " << i << (kind == vs::NearestKind::L2 ? " l2" : " ip");
        }
    }
}

// Points at and near zero among rows of very different lengths (PQ sub-vectors of image
// backgrounds): the per-row sharpening of the candidates must keep the scan's answer.
TEST(NearestRows, ShortRowsAmongLongOnes)
{
    for (size_t d : {4, 14, 40})
    {
        const size_t k = 256, n = 300;
        std::vector<float> rows = gaussian(k * d, d, 100.0f), x(n * d, 0.0f);
        std::vector<float> tiny = gaussian(k * d, d + 1, 1e-3f);
        for (size_t j = 0; j < k; j += 2)
            for (size_t t = 0; t < d; t++)
                rows[j * d + t] = j % 8 == 0 ? 0.0f : tiny[j * d + t];
        std::vector<float> noise = gaussian(n * d, d + 2, 1e-3f);
        for (size_t i = 0; i < n; i++)
            if (i % 3 != 0)
                for (size_t t = 0; t < d; t++)
                    x[i * d + t] = i % 3 == 1 ? noise[i * d + t] : rows[((i * 7) % k) * d + t];
        vs::PackedRows packed(rows.data(), k, d, d);
        vs::NearestScratch scratch;
        for (vs::NearestKind kind : {vs::NearestKind::L2, vs::NearestKind::IP})
        {
            auto ref = [&](size_t i, size_t j) {
                return kind == vs::NearestKind::L2
                           ? vs::pq_l2(&x[i * d], &rows[j * d], static_cast<int>(d))
                           : -vs_dot_f32(&x[i * d], &rows[j * d], d);
            };
            std::vector<int32_t> got(n, -1);
            vs::nearest_rows(x.data(), d, n, packed, kind, vs::float_sum_error(d), ref, nullptr,
                             got.data(), nullptr, scratch);
            for (size_t i = 0; i < n; i++)
                ASSERT_EQ(got[i], scan_nearest(i, k, ref).first)
                    << "d " << d << " point " << i << (kind == vs::NearestKind::L2 ? " l2" : " ip");
        }
    }
}

// The CPU k-means as a plain Lloyd loop: the same seeded sample and initialisation (host_common),
// assignment by a scan of every centroid with the SIMD kernels (first smallest), sums in double
// in point order, the same empty-cluster repair.
std::vector<float> plain_kmeans(const std::vector<float> &data, size_t n, size_t d,
                                const vs_kmeans_params &p)
{
    vs::Rng rng(p.seed);
    std::vector<size_t> sample = vs::kmeans_sample(n, p.sample_size, rng);
    const size_t m = sample.size(), k = p.k;
    const bool spherical = vs::kmeans_spherical(p.metric);
    std::vector<float> x(m * d), c(k * d);
    for (size_t i = 0; i < m; i++)
        std::memcpy(&x[i * d], &data[sample[i] * d], d * sizeof(float));
    if (p.metric == VS_METRIC_COSINE)
        vs::kmeans_normalize(x.data(), m, d);
    std::vector<size_t> init = vs::kmeans_random_init(m, k, rng);
    for (size_t j = 0; j < k; j++)
        std::memcpy(&c[j * d], &x[init[j] * d], d * sizeof(float));
    if (spherical)
        vs::kmeans_normalize(c.data(), k, d);
    std::vector<size_t> assign(m);
    for (int it = 0; it < p.iterations; it++)
    {
        for (size_t i = 0; i < m; i++)
            assign[i] = static_cast<size_t>(scan_nearest(i, k, [&](size_t a, size_t j) {
                            return spherical ? -vs_dot_f32(&x[a * d], &c[j * d], d)
                                             : vs_l2sq_f32(&x[a * d], &c[j * d], d);
                        }).first);
        std::vector<double> sums(k * d, 0.0);
        std::vector<int64_t> counts(k, 0);
        for (size_t i = 0; i < m; i++)
        {
            counts[assign[i]]++;
            for (size_t t = 0; t < d; t++)
                sums[assign[i] * d + t] += x[i * d + t];
        }
        for (size_t j = 0; j < k; j++)
            if (counts[j] > 0)
                for (size_t t = 0; t < d; t++)
                    c[j * d + t] = static_cast<float>(sums[j * d + t] / static_cast<double>(counts[j]));
        vs::kmeans_repair_empty(c.data(), counts, k, d, m, rng);
        if (spherical)
            vs::kmeans_normalize(c.data(), k, d);
    }
    return c;
}

vt::ContextPtr cpu_context(int threads)
{
    vs_context_options o;
    vs_context_options_init(&o);
    o.backend = VS_BACKEND_CPU;
    o.num_threads = threads;
    vs_context *ctx = nullptr;
    EXPECT_EQ(vs_context_create(&o, &ctx, nullptr, 0), VS_OK);
    return vt::ContextPtr(ctx);
}

TEST(CpuKmeans, MatchesAPlainLloydLoop)
{
    struct Case
    {
        size_t n, d, k, sample;
        vs_metric metric;
    };
    for (Case cs : {Case{3000, 16, 40, 0, VS_METRIC_L2}, Case{2500, 784, 37, 1200, VS_METRIC_L2},
                    Case{4000, 14, 256, 0, VS_METRIC_L2}, Case{5000, 4, 256, 0, VS_METRIC_L2},
                    Case{3000, 2, 100, 0, VS_METRIC_IP}, Case{2000, 24, 30, 0, VS_METRIC_IP},
                    Case{2000, 24, 30, 0, VS_METRIC_COSINE}})
    {
        vt::Data D = vt::make_data(cs.n, cs.d, cs.k, 0.1);
        vs_kmeans_params p;
        vs_kmeans_params_init(&p);
        p.k = cs.k;
        p.iterations = 6;
        p.seed = 99;
        p.sample_size = cs.sample;
        p.metric = cs.metric;
        std::vector<float> want = plain_kmeans(D.x, cs.n, cs.d, p);
        for (int threads : {1, 3})
        {
            vt::ContextPtr ctx = cpu_context(threads);
            std::vector<float> got(cs.k * cs.d);
            vs_kmeans_info info;
            ASSERT_EQ(vs_kmeans(ctx.get(), D.x.data(), cs.n, cs.d, &p, got.data(), &info), VS_OK);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << "n " << cs.n << " d " << cs.d << " k " << cs.k << " metric "
                << vt::metric_name(cs.metric) << " threads " << threads;
        }
    }
}

// The IVF-PQ encoder as a plain scan: the smallest (exact coarse distance, list) key, then the
// first codeword with the smallest pq_l2 to each residual sub-vector.
void plain_encode(const vs_ivfpq_params &p, const std::vector<float> &centroids,
                  const std::vector<float> &codebooks, const float *x, int32_t *list,
                  std::vector<uint8_t> &code)
{
    const size_t d = p.dim, dsub = d / p.m, ksub = size_t{1} << p.nbits;
    const vs_metric cm = vs::pq_coarse_metric(p.metric);
    uint64_t best = vs::kNoKey;
    for (size_t l = 0; l < p.nlist; l++)
        best = std::min(best, vs::make_key(vs::exact_distance(cm, x, &centroids[l * d], d),
                                           static_cast<uint32_t>(l)));
    *list = static_cast<int32_t>(vs::key_row(best));
    std::vector<float> r(d);
    for (size_t t = 0; t < d; t++)
        r[t] = vs::pq_sub(x[t], centroids[static_cast<size_t>(*list) * d + t]);
    code.assign(vs_ivfpq_code_size(&p), 0);
    for (size_t j = 0; j < p.m; j++)
    {
        auto w = scan_nearest(0, ksub, [&](size_t, size_t c) {
            return vs::pq_l2(&r[j * dsub], &codebooks[(j * ksub + c) * dsub], static_cast<int>(dsub));
        });
        vs::pq_code_set(code.data(), static_cast<int>(j), p.nbits, w.first);
    }
}

TEST(CpuIvfpqEncode, MatchesAPlainScanOfListsAndCodewords)
{
    struct Case
    {
        size_t d, nlist, m;
        int nbits;
        vs_metric metric;
    };
    vt::ContextPtr ctx = cpu_context(2);
    for (Case cs : {Case{16, 20, 4, 8, VS_METRIC_L2}, Case{96, 50, 24, 8, VS_METRIC_IP},
                    Case{784, 60, 56, 8, VS_METRIC_L2SQ}, Case{30, 9, 5, 4, VS_METRIC_COSINE}})
    {
        const size_t d = cs.d, n = 1500, ksub = size_t{1} << cs.nbits;
        vs_ivfpq_params p{};
        p.dim = d;
        p.nlist = cs.nlist;
        p.m = cs.m;
        p.nbits = cs.nbits;
        p.metric = cs.metric;
        vt::Data D = vt::make_data(n, d, d + cs.nlist, 0.05);
        // A quantizer with repeated centroids and codewords (ties): random, then copies.
        std::vector<float> centroids = gaussian(cs.nlist * d, 5), codebooks = gaussian(ksub * d, 6, 0.5f);
        std::memcpy(&centroids[3 * d], &centroids[1 * d], d * sizeof(float));
        const size_t dsub = d / cs.m;
        std::memcpy(&codebooks[5 * dsub], &codebooks[2 * dsub], dsub * sizeof(float));
        vs_ivfpq *ivf = nullptr;
        ASSERT_EQ(vs_ivfpq_create(ctx.get(), &p, centroids.data(), codebooks.data(), &ivf), VS_OK);
        const size_t cs_bytes = vs_ivfpq_code_size(&p);
        std::vector<int32_t> lists(n);
        std::vector<uint8_t> codes(n * cs_bytes);
        ASSERT_EQ(vs_ivfpq_encode(ctx.get(), ivf, D.x.data(), n, lists.data(), codes.data()), VS_OK)
            << vs_last_error(ctx.get());
        vs_ivfpq_destroy(ctx.get(), ivf);
        std::vector<float> unit = D.x;
        if (cs.metric == VS_METRIC_COSINE)
            vs::kmeans_normalize(unit.data(), n, d);
        std::vector<uint8_t> want;
        for (size_t i = 0; i < n; i++)
        {
            int32_t list;
            plain_encode(p, centroids, codebooks, &unit[i * d], &list, want);
            ASSERT_EQ(lists[i], list) << "row " << i << " d " << d;
            ASSERT_EQ(std::memcmp(&codes[i * cs_bytes], want.data(), cs_bytes), 0)
                << "row " << i << " d " << d;
        }
    }
}

} // namespace
