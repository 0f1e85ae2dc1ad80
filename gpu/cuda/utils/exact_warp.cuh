// The engine's exact distance (engine/exact.h) computed by one warp: lane j owns partial sum
// p[j] of the terms i = j, j + 32, ...; an xor butterfly of rounded double additions reduces
// them.  Bit-identical to the host version; no fused multiply-add (__dmul_rn / __dadd_rn).
#ifndef VSEARCH_CUDA_UTILS_EXACT_WARP_CUH
#define VSEARCH_CUDA_UTILS_EXACT_WARP_CUH

#include "engine/exact.h"

#include <cuda_fp16.h>

namespace vs::cuda {

__device__ __forceinline__ double warp_butterfly(double p)
{
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
        p = __dadd_rn(p, __shfl_xor_sync(0xffffffffu, p, off));
    return p;
}

__device__ __forceinline__ float widen(float v) { return v; }
// A binary16 value is exact in float, so a row of halves gives the bits of its widened floats.
__device__ __forceinline__ float widen(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Calls term(x[i], y[i]) for i = lane, lane + 32, ... < d in that order, with the loads of eight
// terms issued before their sums: the sums are a dependent chain, and a load waited on per term
// left a warp's distance bound by memory latency (a 784-value row: 25 round trips).
template <typename Y, typename Term>
__device__ __forceinline__ void lane_terms(const float *__restrict__ x, const Y *__restrict__ y,
                                           int d, int lane, Term term)
{
    constexpr int kAhead = 8;
    int i = lane;
    for (; i + 32 * (kAhead - 1) < d; i += 32 * kAhead)
    {
        float xv[kAhead], yv[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; u++)
        {
            xv[u] = x[i + 32 * u];
            yv[u] = widen(y[i + 32 * u]);
        }
#pragma unroll
        for (int u = 0; u < kAhead; u++)
            term(xv[u], yv[u]);
    }
    for (; i < d; i += 32)
        term(x[i], widen(y[i]));
}

// Base value (engine/exact.h) of x against y, d values each (y float or binary16); every lane
// returns it.
template <typename Y>
__device__ __forceinline__ double warp_exact_base(vs_metric m, const float *__restrict__ x,
                                                  const Y *__restrict__ y, int d, int lane)
{
    double p = 0.0;
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        lane_terms(x, y, d, lane, [&](float a, float b) {
            const double t = __dsub_rn(static_cast<double>(a), static_cast<double>(b));
            p = __dadd_rn(p, __dmul_rn(t, t));
        });
        return warp_butterfly(p);
    case VS_METRIC_IP:
        lane_terms(x, y, d, lane, [&](float a, float b) {
            p = __dadd_rn(p, __dmul_rn(static_cast<double>(a), static_cast<double>(b)));
        });
        return -warp_butterfly(p);
    case VS_METRIC_L1:
        lane_terms(x, y, d, lane, [&](float a, float b) {
            p = __dadd_rn(p, fabs(__dsub_rn(static_cast<double>(a), static_cast<double>(b))));
        });
        return warp_butterfly(p);
    case VS_METRIC_COSINE:
    {
        double pa = 0.0, pb = 0.0;
        lane_terms(x, y, d, lane, [&](float a32, float b32) {
            const double a = a32, b = b32;
            p = __dadd_rn(p, __dmul_rn(a, b));
            pa = __dadd_rn(pa, __dmul_rn(a, a));
            pb = __dadd_rn(pb, __dmul_rn(b, b));
        });
        double ab = warp_butterfly(p), aa = warp_butterfly(pa), bb = warp_butterfly(pb);
        return cosine_base(ab, aa, bb);
    }
    }
    return NAN;
}

} // namespace vs::cuda

#endif
