// The engine's exact distance (engine/exact.h) computed by a team of T lanes of a warp (T a power
// of two, 4 <= T <= 32, teams aligned to T lanes), so that a warp measures 32 / T rows at once.
// Bit-identical to the host version and to warp_exact_base (utils/exact_warp.cuh):
//   the formula's 32 partial sums p[j] (term i goes to p[i mod 32]) are split by j's low bits:
//   lane t of the team owns p[t + T r], r = 0 .. 32 / T - 1, and adds its terms to them in
//   ascending i, as the host does;
//   the butterfly's levels off = 16 .. T pair p[j] with p[j ^ off], which differ in r only: the
//   lane computes them locally (every p[j] it owns, "own + partner" as the host's q[j] =
//   p[j] + p[j ^ off]); the levels off = T / 2 .. 1 pair lanes of the team: an xor shuffle of
//   p[t] (r = 0, the only value p[0] still depends on).
#ifndef VSEARCH_CUDA_UTILS_EXACT_TEAM_CUH
#define VSEARCH_CUDA_UTILS_EXACT_TEAM_CUH

#include "engine/exact.h"

namespace vs::cuda {

// Butterfly of the partials p[0 .. 32 / T) a lane owns, then across its team; every lane of the
// warp must call it (the shuffles use the whole warp).
template <int T>
__device__ __forceinline__ double team_butterfly(double (&p)[32 / T])
{
    constexpr int P = 32 / T;
#pragma unroll
    for (int h = P / 2; h >= 1; h >>= 1)
    {
        double q[P];
#pragma unroll
        for (int r = 0; r < P; r++)
            q[r] = __dadd_rn(p[r], p[r ^ h]);
#pragma unroll
        for (int r = 0; r < P; r++)
            p[r] = q[r];
    }
    double s = p[0];
#pragma unroll
    for (int off = T / 2; off >= 1; off >>= 1)
        s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    return s;
}

// Base value (engine/exact.h) of x against y, d values each (x float, or the floats widened to
// double beforehand: the same terms), for lane t (0 .. T - 1) of a team; every lane of the team
// returns it.  A lane with active false reads nothing (its team's result
// is then 0 or NaN, to be ignored) but takes part in the shuffles: every lane of the warp calls
// this.
template <int T, typename X>
__device__ __forceinline__ double team_exact_base(vs_metric m, const X *__restrict__ x,
                                                  const float *__restrict__ y, int d, int t,
                                                  bool active)
{
    static_assert(T >= 4 && T <= 32 && (T & (T - 1)) == 0, "a team is 4 .. 32 lanes");
    constexpr int P = 32 / T;
    const int len = active ? d : 0;
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
    {
        double p[P] = {};
#pragma unroll 2 // the rows' loads in flight together (a hop waits on them)
        for (int base = t; base < len; base += 32)
#pragma unroll
            for (int r = 0; r < P; r++)
            {
                const int i = base + T * r;
                if (i < len)
                {
                    const double u =
                        __dsub_rn(static_cast<double>(x[i]), static_cast<double>(__ldg(y + i)));
                    p[r] = __dadd_rn(p[r], __dmul_rn(u, u));
                }
            }
        return team_butterfly<T>(p);
    }
    case VS_METRIC_IP:
    {
        double p[P] = {};
#pragma unroll 2
        for (int base = t; base < len; base += 32)
#pragma unroll
            for (int r = 0; r < P; r++)
            {
                const int i = base + T * r;
                if (i < len)
                    p[r] = __dadd_rn(p[r], __dmul_rn(static_cast<double>(x[i]),
                                                     static_cast<double>(__ldg(y + i))));
            }
        return -team_butterfly<T>(p);
    }
    case VS_METRIC_L1:
    {
        double p[P] = {};
        for (int base = t; base < len; base += 32)
#pragma unroll
            for (int r = 0; r < P; r++)
            {
                const int i = base + T * r;
                if (i < len)
                    p[r] = __dadd_rn(p[r], fabs(__dsub_rn(static_cast<double>(x[i]),
                                                          static_cast<double>(__ldg(y + i)))));
            }
        return team_butterfly<T>(p);
    }
    case VS_METRIC_COSINE:
    {
        double p[P] = {}, pa[P] = {}, pb[P] = {};
        for (int base = t; base < len; base += 32)
#pragma unroll
            for (int r = 0; r < P; r++)
            {
                const int i = base + T * r;
                if (i < len)
                {
                    const double a = x[i], b = __ldg(y + i);
                    p[r] = __dadd_rn(p[r], __dmul_rn(a, b));
                    pa[r] = __dadd_rn(pa[r], __dmul_rn(a, a));
                    pb[r] = __dadd_rn(pb[r], __dmul_rn(b, b));
                }
            }
        const double ab = team_butterfly<T>(p), aa = team_butterfly<T>(pa),
                     bb = team_butterfly<T>(pb);
        return cosine_base(ab, aa, bb);
    }
    }
    return NAN;
}

} // namespace vs::cuda

#endif
