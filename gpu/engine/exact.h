// The engine's one definition of an "exact" distance, and the 64-bit selection keys.
//
// Every distance the engine returns is computed the same way on every backend, so the CPU and the
// CUDA backend agree bit for bit:
//   * terms are formed in double from the float inputs (x - y, x * y, |x - y|),
//   * term i is added, in order, to partial sum p[i mod 32] (32 partial sums, starting at 0),
//   * the 32 partials are reduced by an xor butterfly: for off = 16, 8, 4, 2, 1:
//     p[j] = p[j] + p[j ^ off]; the result is p[0],
//   * no fused multiply-add anywhere (products are rounded before they are added),
//   * the metric's transform (sqrt for L2, 1 - ab / sqrt(aa * bb) for cosine) in double, then one
//     rounding to float.
// On the GPU a warp computes it with lane j owning p[j] and __shfl_xor_sync doing the butterfly
// (gpu/cuda/utils/exact_warp.cuh); here is the host version and everything both share.
//
// A key orders (distance, row) pairs with one unsigned 64-bit comparison: the distance's order
// preserving 32-bit image in the high half (NaN after +inf), the row in the low half.  Rows of a
// dataset are kept in ascending id order, so ties are broken by the smaller id.
#ifndef VSEARCH_ENGINE_EXACT_H
#define VSEARCH_ENGINE_EXACT_H

#include "vsearch/distance.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define VS_HD __host__ __device__ __forceinline__
#else
#define VS_HD inline
#endif

namespace vs {

constexpr uint64_t kNoKey = ~0ull;          // empty slot; sorts after every real key
constexpr uint32_t kNoRow = 0xFFFFFFFFu;    // rows are < 2^32 - 1
constexpr int kExactLanes = 32;
// The exact distance's rounding (a double sum rounded to float once, or its root rounded), in the
// units of cpu/gemm.h's bounds (the squared distance or the product), with room to spare: a graph
// search's start node cut as farther than the beam (cpu/graph_starts.h, cuda/impl/start_cut.cuh)
// has a larger key, not an equal one.
constexpr double kExactKeyError = 0x1p-20;

VS_HD uint32_t float_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
#endif
}

VS_HD float bits_float(uint32_t b)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
#endif
}

// Order-preserving image of a float: -inf < ... < -0 == +0 < ... < +inf < NaN.
VS_HD uint32_t float_key(float f)
{
    if (f != f)
        return 0xFFFFFFFFu;
    if (f == 0.0f)
        f = 0.0f; // -0 -> +0
    uint32_t b = float_bits(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

VS_HD float key_float(uint32_t k)
{
    return bits_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

VS_HD uint64_t make_key(float dist, uint32_t row)
{
    return (static_cast<uint64_t>(float_key(dist)) << 32) | row;
}

VS_HD uint32_t key_row(uint64_t key) { return static_cast<uint32_t>(key); }
VS_HD float key_dist(uint64_t key) { return key_float(static_cast<uint32_t>(key >> 32)); }

// 1 - ab / sqrt(aa * bb), clamped to [0, 2]; NaN when a norm is zero.
VS_HD double cosine_base(double ab, double aa, double bb)
{
    double den = sqrt(aa * bb);
    if (den == 0.0)
        return NAN;
    double s = ab / den;
    s = s > 1.0 ? 1.0 : (s < -1.0 ? -1.0 : s);
    return 1.0 - s;
}

// The ranking quantity every metric is certified in ("base units"): squared L2 for L2SQ and L2,
// -<x,y> for IP, 1 - cos for COSINE, the L1 sum for L1.
VS_HD float base_to_output(vs_metric m, double base)
{
    if (m == VS_METRIC_L2)
        return static_cast<float>(sqrt(base > 0.0 ? base : 0.0));
    return static_cast<float>(base);
}

// ---- host version of the exact formula --------------------------------------------------

#if !defined(__CUDA_ARCH__)
// The smallest float no lower than x (+inf above float's range, NaN for NaN).
inline float float_at_least(double x)
{
    float f = static_cast<float>(x);
    return static_cast<double>(f) < x ? nextafterf(f, INFINITY) : f;
}

// A product that the compiler may not fuse into a following addition.
inline double mul_rn(double a, double b)
{
    double r = a * b;
#if defined(__x86_64__)
    __asm__ volatile("" : "+x"(r));
#elif defined(__aarch64__)
    __asm__ volatile("" : "+w"(r));
#endif
    return r;
}

inline double butterfly32(double *p)
{
    for (int off = 16; off >= 1; off >>= 1)
    {
        double q[kExactLanes];
        for (int j = 0; j < kExactLanes; j++)
            q[j] = p[j] + p[j ^ off];
        for (int j = 0; j < kExactLanes; j++)
            p[j] = q[j];
    }
    return p[0];
}

// Exact base value of one pair (host).
inline double exact_base(vs_metric m, const float *x, const float *y, size_t d)
{
    double p[kExactLanes] = {};
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        for (size_t i = 0; i < d; i++)
        {
            double t = static_cast<double>(x[i]) - static_cast<double>(y[i]);
            p[i & 31] = p[i & 31] + mul_rn(t, t);
        }
        return butterfly32(p);
    case VS_METRIC_IP:
        for (size_t i = 0; i < d; i++)
            p[i & 31] = p[i & 31] + mul_rn(static_cast<double>(x[i]), static_cast<double>(y[i]));
        return -butterfly32(p);
    case VS_METRIC_L1:
        for (size_t i = 0; i < d; i++)
            p[i & 31] = p[i & 31] + fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
        return butterfly32(p);
    case VS_METRIC_COSINE:
    {
        double pa[kExactLanes] = {}, pb[kExactLanes] = {};
        for (size_t i = 0; i < d; i++)
        {
            double a = x[i], b = y[i];
            p[i & 31] = p[i & 31] + mul_rn(a, b);
            pa[i & 31] = pa[i & 31] + mul_rn(a, a);
            pb[i & 31] = pb[i & 31] + mul_rn(b, b);
        }
        double ab = butterfly32(p), aa = butterfly32(pa), bb = butterfly32(pb);
        return cosine_base(ab, aa, bb);
    }
    }
    return NAN;
}

inline float exact_distance(vs_metric m, const float *x, const float *y, size_t d)
{
    return base_to_output(m, exact_base(m, x, y, d));
}
#endif

// ---- rigorous bounds on approximate (float / GEMM) distances ----------------------------

// |approx - exact_base| <= rel * |approx| + abs for every row, given the query.
struct ErrBound
{
    double rel;
    double abs;
};

enum ApproxKind
{
    APPROX_DIRECT_F32 = 0, // per-pair float kernels (CPU SIMD, CUDA fused scan)
    APPROX_GEMM_F32 = 1,   // ||x||^2 + ||y||^2 - 2 x.y with an fp32 SGEMM dot
    APPROX_GEMM_TF32 = 2,  // the same with TF32 tensor-core products
    APPROX_GEMM_F16 = 3    // the same over binary16 rows with the query rounded to binary16
};

// qnorm: ||x|| of the query; maxnorm: an upper bound on ||y|| over the dataset's rows; qrel (for
// APPROX_GEMM_F16 only): an upper bound on ||x - x'|| / ||x||, x' the query rounded to binary16.
//
// Why binary16 GEMMs need only qrel besides the fp32 terms: a binary16 row value is exact in
// binary16 (no rounding of y), and the product of two binary16 values (11-bit significands, 2^-48
// .. 2^32 in magnitude) is exact in fp32, so the only errors are the query's rounding, which
// moves the dot by |<y, x - x'>| <= ||y|| ||x - x'|| <= qrel ||x|| maxnorm, and the fp32
// accumulation, bounded by g ||y|| ||x'|| as for SGEMM (||x'|| <= (1 + qrel) ||x||, inside the
// safety factor).  qrel takes the place of TF32's 2^-9; a query that is exact in binary16 (the
// integer pixels of Fashion-MNIST) has qrel = 0 and the fp32 GEMM's bound.
VS_HD ErrBound approx_error(int kind, vs_metric m, size_t d, double qnorm, double maxnorm,
                            double qrel = 0.0)
{
    const double u = 5.9604644775390625e-08; // 2^-24
    const double g = (static_cast<double>(d) + 4.0) * u;
    const double ct = kind == APPROX_GEMM_TF32  ? 1.953125e-03 /* 2^-9 */
                      : kind == APPROX_GEMM_F16 ? qrel
                                                : 0.0;
    ErrBound e = {0.0, 0.0};
    const double safety = 2.0;
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        if (kind == APPROX_DIRECT_F32)
            e.rel = safety * g;
        else
            e.abs = safety * (2.0 * (ct + g) * qnorm * maxnorm +
                              3.0 * u * (qnorm + maxnorm) * (qnorm + maxnorm));
        break;
    case VS_METRIC_L1:
        e.rel = safety * g;
        break;
    case VS_METRIC_IP:
        e.abs = safety * (ct + g) * qnorm * maxnorm + 1e-300;
        break;
    case VS_METRIC_COSINE:
        e.abs = safety * (ct + 3.0 * g + 8.0 * u);
        break;
    }
    return e;
}

// Smallest exact base value compatible with an approximate value a.
VS_HD double approx_lower(ErrBound e, double a)
{
    double mag = a < 0 ? -a : a;
    return a - e.rel * mag - e.abs;
}

// Range: an upper bound R on the base value of any row whose output distance is <= radius, and
// the approximate-value threshold that keeps every such row (approx <= threshold).
VS_HD double range_base_limit(vs_metric m, float radius)
{
    float up = nextafterf(radius, INFINITY);
    double r = up;
    if (m == VS_METRIC_L2)
    {
        if (up < 0)
            return -1.0;
        r = nextafter(r * r, INFINITY);
    }
    return r;
}

VS_HD double range_approx_threshold(ErrBound e, double base_limit)
{
    double t = base_limit + e.abs;
    if (e.rel > 0 && t >= 0)
        t = t / (1.0 - e.rel);
    else if (e.rel > 0)
        t = t / (1.0 + e.rel);
    return nextafter(t, INFINITY);
}

} // namespace vs

#endif
