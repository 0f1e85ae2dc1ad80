// What the fused kernels (fused_filter.cu, and fused_filter_sm90a.cu built for another target)
// share: a survivor's append to its query's candidates, the binary16 filter pass's constants of a
// query tile and of a row tile and its units, and the wgmma pass's entry points.
#ifndef VSEARCH_CUDA_IMPL_FUSED_COMMON_CUH
#define VSEARCH_CUDA_IMPL_FUSED_COMMON_CUH

#include "cuda/impl/kernels.cuh"
#include "cuda/utils/async_copy.cuh"

namespace vs::cuda {

// Row tiles a block of a binary16 filter pass takes at once, with `slots` blocks resident.
long fused_unit_tiles(const FusedArgs &a, long slots);
// The binary16 filter pass on wgmma (fused_filter_sm90a.cu): whether the current device runs it
// (sm_90), and its launch.
bool fused_wgmma_runs();
void launch_fused_wgmma(const FusedArgs &a, cudaStream_t s);

// Query q's product with dataset row `row` passed its threshold's value: appended to q's
// candidates if its key is below the threshold key *thr (past the buffer it is only counted).
__device__ __forceinline__ void append_candidate(const FusedArgs &a, int q, const uint64_t *thr,
                                                 float val, uint32_t row)
{
    const uint64_t key = make_key(val, row);
    if (key >= *thr)
        return;
    const uint32_t at = atomicAdd(a.count + q, 1u);
    if (at < static_cast<uint32_t>(a.cap))
        a.cand[static_cast<size_t>(q) * a.cap + at] = key;
}

// Threads 0 .. 127: the constants of the 128 queries from q0 on, ||x||^2 (L2) or 1/||x|| (cosine)
// into sx and the threshold's value into stv (NaN past the batch: nothing passes).
template <int Mode>
__device__ __forceinline__ void load_query_constants(const FusedArgs &a, int q0, float *sx,
                                                     float *stv, int tid)
{
    if (tid >= 128)
        return;
    const int q = q0 + tid;
    sx[tid] = q >= a.qn                 ? 0.0f
              : Mode == MODE_L2_GEMM  ? a.xsq[q]
              : Mode == MODE_COS_GEMM ? a.xinv[q]
                                      : 0.0f;
    stv[tid] = q < a.qn ? key_dist(a.thr[q]) : key_dist(kNoKey);
}

// The rows' ||y||^2 (L2) or 1/||y|| (cosine), null for inner products.
template <int Mode> __device__ __forceinline__ const float *row_constants(const FusedArgs &a)
{
    return Mode == MODE_L2_GEMM ? a.ysq : Mode == MODE_COS_GEMM ? a.yinv : nullptr;
}

// Threads 0 .. 31: ycol of the 128 rows from r0 on into dst by cp.async, zeros past the n rows.
__device__ __forceinline__ void copy_row_constants(const float *ycol, uint32_t r0, uint32_t n,
                                                   float *dst, int tid)
{
    if (!ycol || tid >= 32)
        return;
    const uint32_t r = r0 + 4 * tid;
    const int bytes = r < n ? static_cast<int>(min(4u, n - r)) * 4 : 0;
    cp_async16(dst + 4 * tid, bytes ? ycol + r : ycol, bytes);
}

} // namespace vs::cuda

#endif
