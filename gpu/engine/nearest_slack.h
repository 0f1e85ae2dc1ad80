// The candidate bound shared by the CPU's nearest rows (cpu/gemm.h) and the graph start cuts on
// both backends (cpu/graph_starts.cpp, cuda/impl/start_cut.cu).
#ifndef VSEARCH_ENGINE_NEAREST_SLACK_H
#define VSEARCH_ENGINE_NEAREST_SLACK_H

#include "engine/exact.h" // VS_HD

namespace vs {

// The candidate bound of cpu/gemm.h's nearest_rows and of the graph start cuts (CPU and CUDA): a
// row j can be the reference's nearest only if its product value v_j (||r_j||^2 - 2 <x, r_j> for
// L2, -<x, r_j> for IP: float products of d terms summed in any order) is within this slack of the
// smallest v.  ref_err bounds the reference's own rounding (gemm.h's NearestKind); xnorm = ||x||,
// rmax the largest ||r_j||.  One definition, so the device cut and the host one cannot drift.
VS_HD double nearest_value_slack(bool l2, double d, double ref_err, double xnorm, double rmax)
{
    const double u = 0x1p-24, g = (d + 4.0) * u;
    const double e1 = l2 ? 2.0 * (g + 2.0 * u) * xnorm * rmax + 2.0 * u * rmax * rmax
                         : g * xnorm * rmax;
    const double e2 = l2 ? ref_err * (xnorm + rmax) * (xnorm + rmax) : ref_err * xnorm * rmax;
    return 4.0 * (e1 + e2) + 16.0 * (d + 4.0) * 0x1p-149;
}

} // namespace vs

#endif
