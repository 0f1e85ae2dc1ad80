/*
 * binary16 <-> binary32 conversion (vsearch/half.h): a portable implementation on the bit
 * patterns, and F16C (vcvtph2ps / vcvtps2ph, 8 values per instruction) where the CPU has it.
 */
#include "vsearch/half.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VS_HALF_X86 1
#endif

namespace {

uint32_t float_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float bits_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff;

    if (exponent == 0)
    {
        /* zero or subnormal: mantissa units of 2^-24, exact in float */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) /* infinity, or NaN (made quiet, as vcvtph2ps does) */
        return bits_float(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0));
    return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float f)
{
    uint32_t x = float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t magnitude = x & 0x7fffffffu;

    if (magnitude >= 0x7f800000u) /* infinity or NaN (kept a quiet NaN) */
        return (uint16_t)(sign | 0x7c00 |
                          (magnitude > 0x7f800000u ? 0x200 | ((magnitude >> 13) & 0x3ff) : 0));
    if (magnitude >= 0x477ff000u) /* >= 65520: rounds past the largest half */
        return (uint16_t)(sign | 0x7c00);
    if (magnitude < 0x38800000u)
    {
        /* below 2^-14: a subnormal half, in units of 2^-24; the scaling is exact and
         * nearbyintf rounds ties to even (the default rounding mode) */
        float units = std::nearbyint(bits_float(magnitude) * 0x1p24f);
        return (uint16_t)(sign | (uint16_t)units); /* 1024 units is the smallest normal half */
    }
    uint32_t mantissa = magnitude & 0x7fffffu;
    uint32_t half = ((((magnitude >> 23) - 112) << 10) | (mantissa >> 13));
    uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++; /* a carry moves into the exponent, as it should */
    return (uint16_t)(sign | half);
}

#ifdef VS_HALF_X86
__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t *src, float *dst,
                                                            size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
    if (i < n)
    {
        uint16_t in[8] = {0};
        float out[8];
        std::memcpy(in, src + i, (n - i) * sizeof(uint16_t));
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in))));
        std::memcpy(dst + i, out, (n - i) * sizeof(float));
    }
}

__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float *src, uint16_t *dst,
                                                            size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n)
    {
        float in[8] = {0};
        uint16_t out[8];
        std::memcpy(in, src + i, (n - i) * sizeof(float));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(out),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        std::memcpy(dst + i, out, (n - i) * sizeof(uint16_t));
    }
}

bool have_f16c()
{
    static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return have;
}
#else
bool have_f16c()
{
    return false;
}
#endif

} // namespace

extern "C" {

float vs_half_to_float1(uint16_t h)
{
    return half_to_float(h);
}

uint16_t vs_float_to_half1(float f)
{
    return float_to_half(f);
}

void vs_half_to_float_portable(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = half_to_float(src[i]);
}

void vs_float_to_half_portable(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = float_to_half(src[i]);
}

void vs_half_to_float(const uint16_t *src, float *dst, size_t n)
{
#ifdef VS_HALF_X86
    if (have_f16c())
    {
        half_to_float_f16c(src, dst, n);
        return;
    }
#endif
    vs_half_to_float_portable(src, dst, n);
}

void vs_float_to_half(const float *src, uint16_t *dst, size_t n)
{
#ifdef VS_HALF_X86
    if (have_f16c())
    {
        float_to_half_f16c(src, dst, n);
        return;
    }
#endif
    vs_float_to_half_portable(src, dst, n);
}

const char *vs_half_simd_level(void)
{
    return have_f16c() ? "f16c" : "portable";
}

} // extern "C"
