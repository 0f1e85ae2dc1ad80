/*
 * The engine's exact distance of two sparse vectors (vs_exact_distance_sparse_f32, distance.h):
 * engine/exact.h's formula walked over the union of the non-zero positions.  Compiled without
 * floating-point contraction (CMake), as exact_simd.cpp.
 */
#include "vsearch/distance.h"

#include "engine/exact.h"

namespace {

// The next position of the merge and the two values there (0 where a vector has no element).
struct SparseMerge
{
    const int *a_idx, *b_idx;
    const float *a_val, *b_val;
    size_t a_nnz, b_nnz, i = 0, j = 0;

    bool next(int *pos, double *x, double *y)
    {
        if (i == a_nnz && j == b_nnz)
            return false;
        if (j == b_nnz || (i < a_nnz && a_idx[i] < b_idx[j]))
        {
            *pos = a_idx[i];
            *x = a_val[i++];
            *y = 0.0;
        }
        else if (i == a_nnz || b_idx[j] < a_idx[i])
        {
            *pos = b_idx[j];
            *x = 0.0;
            *y = b_val[j++];
        }
        else
        {
            *pos = a_idx[i];
            *x = a_val[i++];
            *y = b_val[j++];
        }
        return true;
    }
};

double exact_sparse_base(vs_metric m, SparseMerge merge)
{
    double p[vs::kExactLanes] = {};
    int pos;
    double x, y;

    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        while (merge.next(&pos, &x, &y))
        {
            double t = x - y;
            p[pos & 31] = p[pos & 31] + vs::mul_rn(t, t);
        }
        return vs::butterfly32(p);
    case VS_METRIC_IP:
        while (merge.next(&pos, &x, &y))
            p[pos & 31] = p[pos & 31] + vs::mul_rn(x, y);
        return -vs::butterfly32(p);
    case VS_METRIC_L1:
        while (merge.next(&pos, &x, &y))
            p[pos & 31] = p[pos & 31] + fabs(x - y);
        return vs::butterfly32(p);
    case VS_METRIC_COSINE:
    {
        double pa[vs::kExactLanes] = {}, pb[vs::kExactLanes] = {};
        while (merge.next(&pos, &x, &y))
        {
            p[pos & 31] = p[pos & 31] + vs::mul_rn(x, y);
            pa[pos & 31] = pa[pos & 31] + vs::mul_rn(x, x);
            pb[pos & 31] = pb[pos & 31] + vs::mul_rn(y, y);
        }
        double ab = vs::butterfly32(p), aa = vs::butterfly32(pa), bb = vs::butterfly32(pb);
        return vs::cosine_base(ab, aa, bb);
    }
    }
    return NAN;
}

} // namespace

extern "C" double vs_exact_distance_sparse_f32(vs_metric metric, const int *a_idx,
                                               const float *a_val, size_t a_nnz, const int *b_idx,
                                               const float *b_val, size_t b_nnz)
{
    SparseMerge merge{a_idx, b_idx, a_val, b_val, a_nnz, b_nnz};
    return vs::base_to_output(metric, exact_sparse_base(metric, merge));
}
