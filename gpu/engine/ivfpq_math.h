// IVF-PQ arithmetic shared by the CPU and the CUDA backend, so both compute bit-identical codes,
// lookup tables and estimates (hence the same candidates):
//   * coarse distances (list ranking and assignment) use the exact formula of engine/exact.h
//     under the coarse metric (squared L2, or -<x, c> for IP / COSINE), keys (distance, list);
//   * residuals, sub-quantizer distances and lookup-table entries are float sums in dimension
//     order with every product rounded before it is added (no fused multiply-add);
//   * an estimate starts from the list's term (0 for L2, <q, c> for IP / COSINE) and adds the
//     tables j = 0 .. m-1 in order, in float; then the metric's transform.
// Candidates are ordered by (estimate, id, scan position), the scan position counting entries
// over the probed lists in rank order, so equal estimates and repeated ids resolve the same way.
#ifndef VSEARCH_ENGINE_IVFPQ_MATH_H
#define VSEARCH_ENGINE_IVFPQ_MATH_H

#include "engine/exact.h"

namespace vs {

// Products rounded to float before any addition (the host compiler may not fuse them).
VS_HD float pq_mul(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    float r = a * b;
#if defined(__x86_64__)
    __asm__ volatile("" : "+x"(r));
#elif defined(__aarch64__)
    __asm__ volatile("" : "+w"(r));
#endif
    return r;
#endif
}

VS_HD float pq_add(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

VS_HD float pq_sub(float a, float b)
{
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// sum_i (x[i] - c[i])^2 in float, in order.
VS_HD float pq_l2(const float *x, const float *c, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
    {
        float t = pq_sub(x[i], c[i]);
        s = pq_add(s, pq_mul(t, t));
    }
    return s;
}

// sum_i x[i] c[i] in float, in order.
VS_HD float pq_dot(const float *x, const float *c, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s = pq_add(s, pq_mul(x[i], c[i]));
    return s;
}

// Codeword index of sub-quantizer j (nbits 4: byte j / 2, low nibble for even j).
VS_HD int pq_code_get(const uint8_t *code, int j, int nbits)
{
    if (nbits == 8)
        return code[j];
    uint8_t b = code[j >> 1];
    return (j & 1) ? (b >> 4) : (b & 15);
}

VS_HD void pq_code_set(uint8_t *code, int j, int nbits, int v)
{
    if (nbits == 8)
        code[j] = static_cast<uint8_t>(v);
    else if (j & 1)
        code[j >> 1] = static_cast<uint8_t>((code[j >> 1] & 15) | (v << 4));
    else
        code[j >> 1] = static_cast<uint8_t>((code[j >> 1] & 0xF0) | v);
}

// IP and COSINE rank lists by inner product and use the query . codeword tables.
VS_HD bool pq_inner_product(vs_metric m) { return m == VS_METRIC_IP || m == VS_METRIC_COSINE; }

// The metric of the coarse quantizer (and of the exact coarse distances).
VS_HD vs_metric pq_coarse_metric(vs_metric m)
{
    return pq_inner_product(m) ? VS_METRIC_IP : VS_METRIC_L2SQ;
}

// The estimate from the accumulated sum (squared L2, or the inner product <q, c + r>).
VS_HD float pq_finish(vs_metric m, float acc)
{
    switch (m)
    {
    case VS_METRIC_L2:
#if defined(__CUDA_ARCH__)
        return __fsqrt_rn(acc > 0.0f ? acc : 0.0f);
#else
        return sqrtf(acc > 0.0f ? acc : 0.0f);
#endif
    case VS_METRIC_IP:
        return -acc;
    case VS_METRIC_COSINE:
        return pq_sub(1.0f, acc);
    default:
        return acc;
    }
}

// The list term an estimate starts from, given the coarse distance of the list.
VS_HD float pq_list_term(vs_metric m, float coarse) { return pq_inner_product(m) ? -coarse : 0.0f; }

// The returned distance as it comes back out of a selection key (-0 becomes +0).
VS_HD float pq_canonical(float d) { return key_float(float_key(d)); }

} // namespace vs

#endif
