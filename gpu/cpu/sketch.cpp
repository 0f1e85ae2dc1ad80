// Row sketches and their lower bounds (cpu/sketch.h).  The integer dot product is the scan's
// work per row: AVX-512BW or AVX2 where the CPU has them (codes widened to 16 bits, pairs
// multiplied and added by vpmaddwd), summed into 64 bits often enough that no 32-bit lane can
// overflow.
#include "cpu/sketch.h"
#include "engine/exact.h"
#include "vsearch/rowscan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <limits>

namespace vs {
namespace {

constexpr int kQueryLevels = 2047; // |qi| <= 2047: a pair of products fits 2^21, 1 024 of them 2^31
constexpr double kMargin = 1e-9;   // relative slack for the double sums' rounding

int64_t dot_scalar(const int16_t *q, const uint8_t *c, size_t n)
{
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += static_cast<int64_t>(q[i]) * c[i];
    return s;
}

__attribute__((target("avx2"))) int64_t dot_avx2(const int16_t *q, const uint8_t *c, size_t n)
{
    int64_t total = 0;
    size_t i = 0;
    while (i + 16 <= n)
    {
        __m256i acc = _mm256_setzero_si256();
        const size_t end = std::min(n - n % 16, i + 16 * 1024);
        for (; i < end; i += 16)
        {
            const __m256i cv =
                _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(c + i)));
            const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + i));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(cv, qv));
        }
        alignas(32) int32_t lanes[8];
        _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), acc);
        for (int32_t v : lanes)
            total += v;
    }
    return total + dot_scalar(q + i, c + i, n - i);
}

// The tail's codes come through a masked load (none past the row); q is padded with zeros.
__attribute__((target("avx512f,avx512bw,avx512vl"))) int64_t dot_avx512(const int16_t *q,
                                                                          const uint8_t *c, size_t n)
{
    int64_t total = 0;
    size_t i = 0;
    while (i < n)
    {
        __m512i acc = _mm512_setzero_si512();
        const size_t end = std::min(n, i + 32 * 1024);
        for (; i + 32 <= end; i += 32)
        {
            const __m512i cv = _mm512_cvtepu8_epi16(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(c + i)));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(cv, _mm512_loadu_si512(q + i)));
        }
        if (i < end)
        {
            const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (end - i)) - 1);
            const __m512i cv = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, c + i));
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(cv, _mm512_loadu_si512(q + i)));
            i = end;
        }
        // in 64 bits: 16 lanes of up to 2^30 each may pass 2^31 together
        alignas(64) int32_t lanes[16];
        _mm512_store_si512(lanes, acc);
        for (int32_t v : lanes)
            total += v;
    }
    return total;
}

} // namespace

int sketch_dot_supported(SketchDot *out, int max)
{
    __builtin_cpu_init();
    int n = 0;
    if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        out[n++] = &dot_avx512;
    if (n < max && __builtin_cpu_supports("avx2"))
        out[n++] = &dot_avx2;
    if (n < max)
        out[n++] = &dot_scalar;
    return n;
}

namespace {

SketchDot best_dot()
{
    static const SketchDot best = [] {
        SketchDot f = &dot_scalar;
        sketch_dot_supported(&f, 1);
        return f;
    }();
    return best;
}

} // namespace

int64_t sketch_dot(const int16_t *qi, const uint8_t *codes, size_t dim)
{
    return best_dot()(qi, codes, dim);
}

size_t sketch_bytes(size_t dim) { return sizeof(SketchHead) + ((dim + 7) & ~size_t{7}); }

void make_sketch(const float *row, size_t dim, void *sketch)
{
    SketchHead head;
    uint8_t *codes = static_cast<uint8_t *>(sketch) + sizeof(SketchHead);
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < dim; i++)
    {
        lo = std::min(lo, row[i]);
        hi = std::max(hi, row[i]);
    }
    if (dim == 0)
        lo = hi = 0.0f;
    // step >= (hi - lo) / 255, so that every code lands within the grid
    const double step = float_at_least((static_cast<double>(hi) - lo) / 255.0);
    double e2 = 0.0, tsq = 0.0, c2 = 0.0;
    for (size_t i = 0; i < dim; i++)
    {
        long c = step > 0 ? std::lrint((row[i] - static_cast<double>(lo)) / step) : 0;
        c = std::clamp(c, 0L, 255L);
        codes[i] = static_cast<uint8_t>(c);
        const double t = lo + step * static_cast<double>(c); // exact: 24 + 8 bits in a double
        const double e = row[i] - t;
        e2 += e * e;
        tsq += t * t;
        c2 += static_cast<double>(c * c);
    }
    std::memset(codes + dim, 0, sketch_bytes(dim) - sizeof(SketchHead) - dim);
    head.lo = lo;
    head.step = static_cast<float>(step);
    head.err = float_at_least(std::sqrt(e2) * (1.0 + kMargin));
    head.cnorm = float_at_least(std::sqrt(c2) * (1.0 + kMargin));
    head.tsq = tsq;
    std::memcpy(sketch, &head, sizeof(head));
}

SketchQuery::SketchQuery(const float *q, size_t dim, vs_metric metric)
    : d_(dim), m_(metric), qi_((dim + 31) & ~size_t{31}, 0)
{
    double qmax = 0.0, r2 = 0.0;
    qsum_ = qabs_ = qsq_ = 0.0;
    for (size_t i = 0; i < dim; i++)
    {
        qsum_ += q[i];
        qabs_ += std::fabs(q[i]);
        qsq_ += static_cast<double>(q[i]) * q[i];
        qmax = std::max(qmax, std::fabs(static_cast<double>(q[i])));
    }
    sigma_ = qmax > 0 ? qmax / kQueryLevels : 1.0;
    for (size_t i = 0; i < dim; i++)
    {
        long v = std::clamp(std::lrint(q[i] / sigma_), -static_cast<long>(kQueryLevels),
                            static_cast<long>(kQueryLevels));
        qi_[i] = static_cast<int16_t>(v);
        const double r = q[i] - sigma_ * static_cast<double>(v);
        r2 += r * r;
    }
    // the residual's norm, past the rounding of its terms (each below 2^-52 of sigma |v|)
    rnorm_ = std::sqrt(r2) * (1.0 + kMargin) + 1e-15 * qabs_;
    qn_ = std::sqrt(qsq_);
}

double SketchQuery::lower_base(const void *sketch) const
{
    constexpr double kNone = -std::numeric_limits<double>::infinity();
    if (m_ == VS_METRIC_L1)
        return kNone;
    SketchHead h;
    std::memcpy(&h, sketch, sizeof(h));
    const uint8_t *codes = static_cast<const uint8_t *>(sketch) + sizeof(SketchHead);
    const double di = static_cast<double>(sketch_dot(qi_.data(), codes, d_));
    const double a = static_cast<double>(h.lo) * qsum_;
    const double b = static_cast<double>(h.step) * sigma_ * di;
    const double s = static_cast<double>(h.step) * rnorm_ * h.cnorm;
    const double mag = std::fabs(static_cast<double>(h.lo)) * qabs_ + std::fabs(b) + s;
    const double tup = a + b + s + kMargin * mag; // >= <q, t>
    const double err = static_cast<double>(h.err);
    switch (m_)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
    {
        const double d2 = qsq_ + h.tsq - 2.0 * tup - kMargin * (qsq_ + h.tsq + mag);
        if (!(d2 > 0.0))
            return 0.0;
        const double dl = std::sqrt(d2) * (1.0 - kMargin) - err;
        return dl > 0.0 ? dl * dl * (1.0 - kMargin) : 0.0;
    }
    case VS_METRIC_IP:
        return -(tup + qn_ * err) * (tup + qn_ * err >= 0 ? 1.0 + kMargin : 1.0 - kMargin) -
               1e-300;
    case VS_METRIC_COSINE:
    {
        const double tn_lo = std::sqrt(h.tsq) * (1.0 - kMargin);
        const double tn_hi = std::sqrt(h.tsq) * (1.0 + kMargin);
        if (!(qn_ > 0.0) || !(tn_lo > err))
            return kNone;
        // the cosine of q and t is at most c0; x lies within asin(err / ||t||) of t's direction
        const double c0 = tup / (qn_ * (tup >= 0 ? tn_lo : tn_hi)) + kMargin;
        if (c0 >= 1.0)
            return 0.0;
        const double theta = std::acos(std::max(c0, -1.0)) - std::asin(err / tn_lo) - kMargin;
        return theta > 0.0 ? 1.0 - std::cos(theta) - kMargin : 0.0;
    }
    default:
        return kNone;
    }
}

} // namespace vs

extern "C" {

size_t vs_row_sketch_bytes(size_t dim) noexcept { return vs::sketch_bytes(dim); }

void vs_row_sketch_make(const float *row, size_t dim, void *sketch) noexcept
{
    vs::make_sketch(row, dim, sketch);
}

} // extern "C"
