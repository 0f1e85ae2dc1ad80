/*
 * Runtime-dispatched distance kernels: distance_kernels.inc compiled three times (AVX-512,
 * AVX2+FMA, SSE2); the best table the CPU supports is chosen once per process.
 */
#include "vsearch/distance.h"
#include "simd.h"

#include <cmath>

namespace vs::simd {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
namespace avx512 {
#define VS_VEC_BYTES 64
#include "distance_kernels.inc"
#undef VS_VEC_BYTES
} // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#define VS_VEC_BYTES 32
#include "distance_kernels.inc"
#undef VS_VEC_BYTES
} // namespace avx2
#pragma GCC pop_options

namespace sse2 {
#define VS_VEC_BYTES 16
#include "distance_kernels.inc"
#undef VS_VEC_BYTES
} // namespace sse2

#define VS_TABLE(ns) {#ns, ns::l2sq, ns::dot, ns::l1, ns::sqnorm, ns::cosine_parts}
static const Kernels kAvx512 = VS_TABLE(avx512);
static const Kernels kAvx2 = VS_TABLE(avx2);
static const Kernels kSse2 = VS_TABLE(sse2);
#undef VS_TABLE

int supported(const Kernels **out, int max)
{
    __builtin_cpu_init();
    int n = 0;
    if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        out[n++] = &kAvx512;
    if (n < max && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = &kAvx2;
    if (n < max)
        out[n++] = &kSse2;
    return n;
}

const Kernels &active()
{
    static const Kernels *best = [] {
        const Kernels *k = &kSse2;
        supported(&k, 1);
        return k;
    }();
    return *best;
}

} // namespace vs::simd

using vs::simd::active;

extern "C" {

float vs_l2sq_f32(const float *a, const float *b, size_t n) { return active().l2sq(a, b, n); }
float vs_dot_f32(const float *a, const float *b, size_t n) { return active().dot(a, b, n); }
float vs_l1_f32(const float *a, const float *b, size_t n) { return active().l1(a, b, n); }
float vs_sqnorm_f32(const float *a, size_t n) { return active().sqnorm(a, n); }

void vs_cosine_parts_f32(const float *a, const float *b, size_t n, float *dot, float *aa, float *bb)
{
    active().cosine_parts(a, b, n, dot, aa, bb);
}

double vs_distance_f32(vs_metric metric, const float *a, const float *b, size_t n)
{
    switch (metric)
    {
    case VS_METRIC_L2SQ:
        return vs_l2sq_f32(a, b, n);
    case VS_METRIC_L2:
        return std::sqrt(static_cast<double>(vs_l2sq_f32(a, b, n)));
    case VS_METRIC_IP:
        return -static_cast<double>(vs_dot_f32(a, b, n));
    case VS_METRIC_COSINE:
    {
        float ab, aa, bb;
        vs_cosine_parts_f32(a, b, n, &ab, &aa, &bb);
        double denom = std::sqrt(static_cast<double>(aa) * static_cast<double>(bb));
        if (denom == 0.0)
            return NAN;
        double sim = ab / denom;
        sim = sim > 1.0 ? 1.0 : (sim < -1.0 ? -1.0 : sim);
        return 1.0 - sim;
    }
    case VS_METRIC_L1:
        return vs_l1_f32(a, b, n);
    }
    return NAN;
}

const char *vs_simd_level(void) { return active().name; }

} // extern "C"
