/* The per-instruction-set kernel tables behind distance.h, exposed for the unit tests, which
 * check every table the machine can run against the references. */
#ifndef VSEARCH_CPU_SIMD_H
#define VSEARCH_CPU_SIMD_H

#include <cstddef>

#include "vsearch/distance.h"

namespace vs::simd {

struct Kernels
{
    const char *name;
    float (*l2sq)(const float *, const float *, size_t);
    float (*dot)(const float *, const float *, size_t);
    float (*l1)(const float *, const float *, size_t);
    float (*sqnorm)(const float *, size_t);
    void (*cosine_parts)(const float *, const float *, size_t, float *, float *, float *);
};

/* Every table this CPU supports, best first; the first is the one distance.h uses. */
int supported(const Kernels **out, int max);

/* The table distance.h dispatches to. */
const Kernels &active();

/* The exact distance (exact_simd.cpp), one per instruction set: every one this CPU supports, best
 * first; vs_exact_distance_f32 uses the first. */
typedef double (*ExactKernel)(vs_metric, const float *, const float *, size_t);
int exact_supported(ExactKernel *out, int max);
/* The same formula's base value (before the metric's transform and the rounding to float) through
 * the best kernel, e.g. a row's squared norm in double as its L2SQ base against the origin. */
double exact_base_simd(vs_metric metric, const float *a, const float *b, size_t n);

} // namespace vs::simd

namespace vs {

/* engine/exact.h's exact_distance, bit for bit, through the SIMD kernel of the CPU
 * (vs_exact_distance_f32): for the CPU backend's exact re-ranks and scans. */
inline float exact_distance_simd(vs_metric m, const float *x, const float *y, size_t d)
{
    return static_cast<float>(vs_exact_distance_f32(m, x, y, d));
}

} // namespace vs

#endif
