// The arithmetic of a compressed graph object's navigation (vsearch/graph.h, "compressed graph
// objects"), shared by the CPU search (cpu/graph.cpp) and the CUDA kernel (cuda/graph_cuda.cu) so
// that both rank nodes by bit-identical estimates: engine/ivfpq_math.h's float operations, no
// fused multiply-add.
#ifndef VSEARCH_ENGINE_GRAPH_PQ_H
#define VSEARCH_ENGINE_GRAPH_PQ_H

#include "engine/ivfpq_math.h"
#include "vsearch/graph.h"

namespace vs {

// The codes of a COSINE object are of unit vectors; L2SQ, L2 and IP share codes of the vectors.
VS_HD bool graph_pq_unit(vs_metric m) { return m == VS_METRIC_COSINE; }

// IP navigates by inner-product tables; L2SQ, L2 and COSINE by squared-L2 tables (COSINE: of the
// unit query against the unit vectors' codes, 2 - 2 cos: ranks far better than the inner product
// of the codes, which leaves out the codes' own norm errors).
VS_HD bool graph_pq_inner(vs_metric m) { return m == VS_METRIC_IP; }

// 1 / |q| in double (squares summed in order, no fused multiply-add); 0 for a zero query.
VS_HD double graph_pq_inv_norm(const float *q, int dim)
{
    double s = 0.0;
    for (int i = 0; i < dim; i++)
    {
        const double x = q[i];
#if defined(__CUDA_ARCH__)
        s = __dadd_rn(s, __dmul_rn(x, x));
#else
        s = s + mul_rn(x, x);
#endif
    }
#if defined(__CUDA_ARCH__)
    return s > 0.0 ? __ddiv_rn(1.0, __dsqrt_rn(s)) : 0.0;
#else
    return s > 0.0 ? 1.0 / sqrt(s) : 0.0;
#endif
}

// Element i of what the table is built from: the query (IP), or the residual to the center of the
// query (L2SQ, L2) or of the unit query (COSINE: inv from graph_pq_inv_norm).
VS_HD float graph_pq_residual(vs_metric m, const float *q, double inv, const float *center, int i)
{
    if (graph_pq_inner(m))
        return q[i];
    const float x = graph_pq_unit(m) ? static_cast<float>(q[i] * inv) : q[i];
    return pq_sub(x, center[i]);
}

// Entry e = j * 256 + c of a query's table: the inner product of the query's sub-vector j and
// codeword c (inner), else the squared L2 between the residual's sub-vector j and codeword c.
VS_HD float graph_pq_table_entry(bool inner, const float *x, const float *codebooks, int dsub, int e)
{
    const int j = e / VS_GRAPH_PQ_KSUB;
    const float *cw = codebooks + static_cast<size_t>(e) * dsub;
    return inner ? pq_dot(x + j * dsub, cw, dsub) : pq_l2(x + j * dsub, cw, dsub);
}

// The navigation key's distance from the table sum (NaN as +inf, as every key of the search).
VS_HD float graph_pq_key_distance(bool inner, float acc)
{
    const float d = inner ? -acc : acc;
    return d != d ? INFINITY : d;
}

} // namespace vs

#endif
