/*
 * IEEE 754 binary16 ("half") <-> binary32 conversion, the storage format of `halfvec`.
 *
 * A half is carried as its 16 raw bits (uint16_t) so that C, C++ and CUDA code share one layout.
 * Half to float is exact.  Float to half rounds to nearest, ties to even; a finite float of
 * magnitude >= 65520 becomes infinity (the caller decides whether that is an error) and a float too
 * small for a half becomes a signed zero or a subnormal half.
 *
 * The bulk functions use the CPU's F16C instructions where it has them (picked once per process)
 * and a portable implementation otherwise; both give the same bits for every input (NaN payloads
 * aside: a NaN stays a NaN).  The _portable variants are exposed for the unit tests.
 */
#ifndef VSEARCH_HALF_H
#define VSEARCH_HALF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VS_HALF_MAX 65504.0f /* the largest finite half */

/* dst[i] = the float value of the half src[i], i < n */
void vs_half_to_float(const uint16_t *src, float *dst, size_t n);
/* dst[i] = src[i] rounded to the nearest half (ties to even), i < n */
void vs_float_to_half(const float *src, uint16_t *dst, size_t n);

void vs_half_to_float_portable(const uint16_t *src, float *dst, size_t n);
void vs_float_to_half_portable(const float *src, uint16_t *dst, size_t n);

/* One value at a time (portable code; no dispatch). */
float vs_half_to_float1(uint16_t h);
uint16_t vs_float_to_half1(float f);

/* "f16c" or "portable": what the bulk functions use on this CPU. */
const char *vs_half_simd_level(void);

/* True if the half is +-infinity or NaN. */
static inline int vs_half_is_special(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00;
}

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_HALF_H */
