// The start nodes of a batch of graph searches, cut by products (start_cut.cuh).
//
// A block per query: each start's value v_s from its product (||r_s||^2 - 2 <x, r_s> for L2,
// -<x, r_s> for IP: the distance less a term of the query alone), the width-th smallest value w
// by a bitwise search over the values' order-preserving keys (32 block-wide counts), then every
// start with v_s <= w + slack is measured by a team of the exact formula.  The slack is gemm.h's
// nearest_slack (the CPU cut's bound, gpu/cpu/graph_starts.cpp): twice a bound on |v_s - (exact
// value - query term)| that holds for any summation order, so a start above it is farther than
// `width` others by its exact key too.
#include "cuda/impl/start_cut.cuh"

#include "cuda/utils/error.cuh"
#include "cuda/utils/exact_team.cuh"
#include "cuda/utils/launch.cuh"
#include "engine/exact.h"
#include "engine/nearest_slack.h"

#include <algorithm>

namespace vs::cuda {
namespace {

constexpr int kCutThreads = 128;

// A warp per start: its vector copied into the packed rows, its squared norm, the largest norm.
__global__ void __launch_bounds__(256)
    pack_start_rows_kernel(PairKeyRows R, float *__restrict__ packed, float *__restrict__ sqnorms,
                           double *rmax)
{
    const int lane = threadIdx.x & 31;
    const int warps = gridDim.x * blockDim.x / 32;
    for (int s = (blockIdx.x * blockDim.x + threadIdx.x) / 32; s < R.count; s += warps)
    {
        const uint32_t v = R.list[s];
        const bool valid = pair_row_has_key(R, v);
        const float *x = R.vectors + static_cast<size_t>(valid ? v : 0) * R.dim;
        float *out = packed + static_cast<size_t>(s) * R.dim;
        double sum = 0.0;
        for (int i = lane; i < R.dim; i += 32)
        {
            const float a = valid ? x[i] : 0.0f;
            out[i] = a;
            sum += static_cast<double>(a) * a;
        }
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0)
        {
            sqnorms[s] = static_cast<float>(sum);
            // non-negative doubles order as their bits do
            const double norm = sqrt(sum) * (1.0 + 1e-9);
            atomicMax(reinterpret_cast<unsigned long long *>(rmax),
                      static_cast<unsigned long long>(__double_as_longlong(norm)));
        }
    }
}

// exact.h's nearest_value_slack (the CPU cut's bound), plus the products' flushed subnormals
// (cuBLAS may flush them: each of the d products and d sums can lose up to 2^-126, twice for
// L2's 2 <x, r>).
__device__ double cut_slack(bool l2, int d, double ref_err, double xnorm, double rmax)
{
    return (nearest_value_slack(l2, d, ref_err, xnorm, rmax) + 8.0 * (d + 1.0) * 0x1p-126) *
           (1.0 + 1e-9);
}

template <int T, vs_metric Base>
__global__ void __launch_bounds__(kCutThreads)
    start_cut_kernel(vs_metric metric, const float *__restrict__ queries, PairKeyRows R,
                     const float *__restrict__ products, const float *__restrict__ sqnorms,
                     const double *__restrict__ rmax_in, int width, double ref_err,
                     uint64_t *__restrict__ keys)
{
    extern __shared__ uint32_t cut_smem[];
    uint32_t *order = cut_smem;             // the values' keys (float_key), kNoRow: no key
    uint32_t *cand = cut_smem + R.count;    // the starts to measure
    __shared__ double xsum[kCutThreads / 32];
    __shared__ int nvalid, ncand, finite;
    __shared__ unsigned count[3];
    constexpr bool kL2 = Base == VS_METRIC_L2SQ;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32;
    const size_t q = blockIdx.x;
    const float *x = queries + q * R.dim;
    const float *p = products + q * R.count;
    uint64_t *out = keys + q * R.count;

    double sq = 0.0;
    for (int i = tid; i < R.dim; i += kCutThreads)
        sq += static_cast<double>(x[i]) * x[i];
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
        sq += __shfl_xor_sync(0xffffffffu, sq, off);
    if (lane == 0)
        xsum[warp] = sq;
    if (tid == 0)
    {
        nvalid = ncand = 0;
        finite = 1;
        count[0] = count[1] = 0;
    }
    __syncthreads();
    double xnorm = 0.0;
#pragma unroll
    for (int w = 0; w < kCutThreads / 32; w++)
        xnorm += xsum[w];
    xnorm = sqrt(xnorm) * (1.0 + 1e-9);
    const double rmax = *rmax_in;

    int mine = 0;
    for (int s = tid; s < R.count; s += kCutThreads)
    {
        uint32_t key = kNoRow;
        if (pair_row_has_key(R, R.list[s]))
        {
            const float v = kL2 ? sqnorms[s] - 2.0f * p[s] : -p[s];
            if (!isfinite(v))
                finite = 0; // then every start with a key is measured: any key but kNoRow
            key = float_key(isfinite(v) ? v : INFINITY);
            mine++;
        }
        order[s] = key;
    }
    mine = __reduce_add_sync(0xffffffffu, mine);
    if (lane == 0)
        atomicAdd(&nvalid, mine);
    __syncthreads();

    // (xnorm + rmax)^2 overflowing: the values may not be finite (nearest_values_finite)
    const bool cut =
        finite && nvalid > width && (xnorm + rmax) * (xnorm + rmax) < 0x1p127;
    double limit = 0.0;
    if (cut)
    {
        // the width-th smallest key: bit by bit from the top, keeping count(key < found) < width
        // <= count(key <= found | the bits below); counters rotate through three so that one
        // barrier a bit suffices (a counter is cleared two bits after it was last read)
        uint32_t found = 0;
        for (int b = 31; b >= 0; b--)
        {
            const int slot = b % 3;
            if (tid == 0)
                count[(b + 2) % 3] = 0;
            const uint32_t probe = found | ((1u << b) - 1u);
            unsigned c = 0;
            for (int s = tid; s < R.count; s += kCutThreads)
                c += order[s] <= probe;
            c = __reduce_add_sync(0xffffffffu, c);
            if (lane == 0)
                atomicAdd(&count[slot], c);
            __syncthreads();
            if (count[slot] < static_cast<unsigned>(width))
                found |= 1u << b;
        }
        limit = static_cast<double>(key_float(found)) +
                cut_slack(kL2, R.dim, ref_err, xnorm, rmax);
    }
    for (int s = tid; s < R.count; s += kCutThreads)
    {
        const uint32_t key = order[s];
        if (key != kNoRow && (!cut || static_cast<double>(key_float(key)) <= limit))
            cand[atomicAdd(&ncand, 1)] = s;
        else
            out[s] = kNoKey;
    }
    __syncthreads();

    // a team of T lanes per candidate; a warp-uniform trip count (the shuffles need the warp)
    constexpr int kTeams = kCutThreads / T;
    const int team = tid / T, t = tid & (T - 1);
    for (int base = 0; base < ncand; base += kTeams)
    {
        const int i = base + team;
        const bool active = i < ncand;
        const int s = active ? static_cast<int>(cand[i]) : 0;
        const uint32_t v = active ? R.list[s] : 0;
        const double b = team_exact_base<T>(
            Base, x, R.vectors + static_cast<size_t>(v) * R.dim, R.dim, t, active);
        if (active && t == 0)
        {
            const float d = base_to_output(metric, b);
            out[s] = make_key(d != d ? INFINITY : d, v);
        }
    }
}

template <int T>
void launch_cut(vs_metric metric, const float *queries, int nq, const PairKeyRows &R,
                const float *products, const float *sqnorms, const double *rmax, int width,
                double ref_err, uint64_t *keys, cudaStream_t s)
{
    const auto kernel = metric == VS_METRIC_IP ? start_cut_kernel<T, VS_METRIC_IP>
                                               : start_cut_kernel<T, VS_METRIC_L2SQ>;
    const size_t bytes = start_cut_smem(R.count);
    set_smem(reinterpret_cast<const void *>(kernel), bytes);
    kernel<<<nq, kCutThreads, bytes, s>>>(metric, queries, R, products, sqnorms, rmax, width,
                                          ref_err, keys);
    VS_LAUNCH_CHECK();
}

} // namespace

size_t start_cut_smem(int count) { return static_cast<size_t>(count) * 2 * sizeof(uint32_t); }

void pack_start_rows(const PairKeyRows &rows, float *packed, float *sqnorms, double *rmax,
                     cudaStream_t s)
{
    if (rows.count <= 0)
        return;
    const unsigned blocks = static_cast<unsigned>(std::min((rows.count + 7) / 8, 1024));
    pack_start_rows_kernel<<<blocks, 256, 0, s>>>(rows, packed, sqnorms, rmax);
    VS_LAUNCH_CHECK();
}

void cut_start_keys(vs_metric metric, int lanes, const float *queries, int nq,
                    const PairKeyRows &rows, const float *products, const float *sqnorms,
                    const double *rmax, int width, double ref_err, uint64_t *keys,
                    cudaStream_t s)
{
    if (nq <= 0 || rows.count <= 0)
        return;
    switch (lanes)
    {
    case 4:
        launch_cut<4>(metric, queries, nq, rows, products, sqnorms, rmax, width, ref_err, keys, s);
        break;
    case 8:
        launch_cut<8>(metric, queries, nq, rows, products, sqnorms, rmax, width, ref_err, keys, s);
        break;
    case 16:
        launch_cut<16>(metric, queries, nq, rows, products, sqnorms, rmax, width, ref_err, keys,
                       s);
        break;
    default:
        launch_cut<32>(metric, queries, nq, rows, products, sqnorms, rmax, width, ref_err, keys,
                       s);
    }
}

} // namespace vs::cuda
