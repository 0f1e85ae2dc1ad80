/*
 * The engine's exact distance with runtime-dispatched SIMD (vs_exact_distance_f32, distance.h):
 * exact_kernels.inc compiled for AVX-512, AVX2 and SSE2, the best the CPU supports chosen once per
 * process.  Every table returns the bits of the reference, engine/exact.h's exact_distance, which
 * the GPU computes too; this file is compiled without floating-point contraction (CMake).
 */
#include "vsearch/distance.h"

#include "engine/exact.h"
#include "simd.h"

namespace vs::simd {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2")
namespace exact_avx512 {
#define VS_VEC_BYTES 64
#include "exact_kernels.inc"
#undef VS_VEC_BYTES
} // namespace exact_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2")
namespace exact_avx2 {
#define VS_VEC_BYTES 32
#include "exact_kernels.inc"
#undef VS_VEC_BYTES
} // namespace exact_avx2
#pragma GCC pop_options

namespace exact_sse2 {
#define VS_VEC_BYTES 16
#include "exact_kernels.inc"
#undef VS_VEC_BYTES
} // namespace exact_sse2

int exact_supported(ExactKernel *out, int max)
{
    __builtin_cpu_init();
    int n = 0;
    if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        out[n++] = exact_avx512::exact;
    if (n < max && __builtin_cpu_supports("avx2"))
        out[n++] = exact_avx2::exact;
    if (n < max)
        out[n++] = exact_sse2::exact;
    return n;
}

// The best table's exact_base, chosen as exact_supported orders them.
double exact_base_simd(vs_metric metric, const float *a, const float *b, size_t n)
{
    static const auto best = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
            return exact_avx512::exact_base;
        if (__builtin_cpu_supports("avx2"))
            return exact_avx2::exact_base;
        return exact_sse2::exact_base;
    }();
    return best(metric, a, b, n);
}

} // namespace vs::simd

extern "C" double vs_exact_distance_f32(vs_metric metric, const float *a, const float *b, size_t n)
{
    return vs::base_to_output(metric, vs::simd::exact_base_simd(metric, a, b, n));
}
