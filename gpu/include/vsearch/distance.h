/*
 * Distance kernels of the engine's CPU backend, one implementation per metric.
 *
 * Plain C ABI so the PostgreSQL glue (C) and the engine (C++) share the very same code.  Every
 * function is SIMD-vectorized with runtime dispatch (AVX-512, AVX2+FMA, or baseline SSE2), picked
 * once per process by the loader.  Accumulation is in float, like pgvector; callers that need a
 * float8 result widen the returned value.
 */
#ifndef VSEARCH_DISTANCE_H
#define VSEARCH_DISTANCE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The metrics every index and engine call understands.  Values are stable: they are stored in
 * index metapages and travel in worker requests. */
typedef enum vs_metric
{
    VS_METRIC_L2SQ = 0,   /* squared Euclidean distance */
    VS_METRIC_L2 = 1,     /* Euclidean distance */
    VS_METRIC_IP = 2,     /* negative inner product (smaller is more similar) */
    VS_METRIC_COSINE = 3, /* 1 - cosine similarity */
    VS_METRIC_L1 = 4      /* taxicab distance */
} vs_metric;

#define VS_METRIC_COUNT 5

/* sum((a[i] - b[i])^2) */
float vs_l2sq_f32(const float *a, const float *b, size_t n);
/* sum(a[i] * b[i]) */
float vs_dot_f32(const float *a, const float *b, size_t n);
/* sum(|a[i] - b[i]|) */
float vs_l1_f32(const float *a, const float *b, size_t n);
/* sum(a[i]^2) */
float vs_sqnorm_f32(const float *a, size_t n);
/* dot = a.b, aa = a.a, bb = b.b in one pass (cosine distance) */
void vs_cosine_parts_f32(const float *a, const float *b, size_t n,
                         float *dot, float *aa, float *bb);

/* Distance of one pair under a metric, as the engine ranks it (double for range thresholds):
 * L2SQ, L2 (sqrt), IP (-dot), COSINE (1 - dot / sqrt(aa * bb), NaN if a norm is zero, clamped to
 * [0, 2]), L1. */
double vs_distance_f32(vs_metric metric, const float *a, const float *b, size_t n);

/*
 * The engine's exact distance of one pair (engine/exact.h: terms formed in double, 32 partial sums
 * reduced by an xor butterfly, the metric's transform in double, one rounding to float), widened to
 * double: what every engine search returns, on the CPU and the GPU bit for bit, and what the SQL
 * distance operators compute.  L2 is the root; cosine is NaN when a norm is zero.
 */
double vs_exact_distance_f32(vs_metric metric, const float *a, const float *b, size_t n);

/*
 * vs_exact_distance_f32 of two sparse vectors: a has a_nnz non-zero elements a_val at the strictly
 * increasing 0-based positions a_idx, b likewise, both of the same dimension.  Only the positions
 * where either is non-zero form terms, each added to the partial sum of its position (mod 32) in
 * position order; a term of zeros adds nothing to a partial sum (which is never -0), so the result
 * is the dense vectors' exact distance bit for bit.
 */
double vs_exact_distance_sparse_f32(vs_metric metric, const int *a_idx, const float *a_val,
                                    size_t a_nnz, const int *b_idx, const float *b_val,
                                    size_t b_nnz);

/* Name of the instruction set the dispatcher picked ("avx512f", "avx2", "sse2"), for diagnostics. */
const char *vs_simd_level(void);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_DISTANCE_H */
