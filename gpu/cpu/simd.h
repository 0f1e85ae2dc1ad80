/* The per-instruction-set kernel tables behind distance.h, exposed for the unit tests, which
 * check every table the machine can run against the double-precision reference. */
#ifndef VSEARCH_CPU_SIMD_H
#define VSEARCH_CPU_SIMD_H

#include <cstddef>

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

} // namespace vs::simd

#endif
