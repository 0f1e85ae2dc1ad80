// Range search kernels (range.cu): one thresholded pass over a tile of approximate values that
// compacts the candidates with one atomic per warp step, the exact check of the candidates, the
// per-query bounds of the sorted matches, and the output (ids and distances).
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/exact_warp.cuh"

#include <algorithm>

namespace vs::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRangeThreads = 256;
constexpr uint32_t kRangeSegment = 8192; // columns per warp (a multiple of 512)

// Warp per (query, segment of columns): 4 float4 loads per lane in flight (512 columns a step);
// the lanes' hits are counted, a warp prefix sum places them, lane 31 reserves the step's slots
// with one atomic, and the keys (query << cbits | column: the sort reads only the bits in use)
// go to the candidate buffer, the first `cap` of them (the total keeps counting, so the caller
// sees an overflow).
__global__ void __launch_bounds__(kRangeThreads) range_filter_kernel(RangeFilterArgs a, int P)
{
    const int lane = threadIdx.x & 31;
    const long gw = (static_cast<long>(blockIdx.x) * kRangeThreads + threadIdx.x) >> 5;
    if (gw >= static_cast<long>(a.qb - a.qa) * P)
        return;
    const int q = a.qa + static_cast<int>(gw / P);
    const uint32_t c_begin = a.ca + static_cast<uint32_t>(gw % P) * kRangeSegment;
    const uint32_t c_end = min(a.cb, c_begin + kRangeSegment);
    const float *row = a.tile + static_cast<size_t>(q) * a.ld;
    const float xs = a.xsq ? a.xsq[q] : 0.0f, xi = a.xinv ? a.xinv[q] : 0.0f;
    const float thr = a.thr[q];
    const uint64_t qkey = static_cast<uint64_t>(q) << a.cbits;
    uint32_t found = 0;
    for (uint32_t base = c_begin; base < c_end; base += 512)
    {
        float4 v[4], ys[4], yi[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            v[u] = ys[u] = yi[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const uint32_t c = base + u * 128 + lane * 4;
            if (c < c_end)
            {
                // ca, ld and the norm arrays are multiples of 4 columns: aligned float4 loads
                v[u] = __ldg(reinterpret_cast<const float4 *>(row + c));
                if (a.mode == MODE_L2_GEMM)
                    ys[u] = __ldg(reinterpret_cast<const float4 *>(a.ysq + c));
                if (a.mode == MODE_COS_GEMM)
                    yi[u] = __ldg(reinterpret_cast<const float4 *>(a.yinv + c));
            }
        }
        unsigned hits = 0;
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            const float vv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
            const float ss[4] = {ys[u].x, ys[u].y, ys[u].z, ys[u].w};
            const float ii[4] = {yi[u].x, yi[u].y, yi[u].z, yi[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
            {
                const uint32_t c = base + u * 128 + lane * 4 + e;
                const float av = approx_value(a.mode, vv[e], xs, xi, ss[e], ii[e]);
                // NaN stays a candidate (the exact check decides)
                hits |= (c < c_end && !(av > thr) ? 1u : 0u) << (u * 4 + e);
            }
        }
        const unsigned h = __popc(hits);
        if (!__any_sync(kFullMask, h != 0))
            continue;
        unsigned incl = h;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1)
        {
            const unsigned t = __shfl_up_sync(kFullMask, incl, o);
            if (lane >= o)
                incl += t;
        }
        const unsigned step = __shfl_sync(kFullMask, incl, 31);
        unsigned long long at = 0;
        if (lane == 31)
            at = atomicAdd(a.total, static_cast<unsigned long long>(step));
        at = __shfl_sync(kFullMask, at, 31) + (incl - h);
        while (hits)
        {
            const int e = __ffs(hits) - 1;
            hits &= hits - 1;
            if (at < a.cap)
                a.cand[at] = qkey | (base + (e >> 2) * 128 + lane * 4 + (e & 3));
            at++;
        }
        found += step;
    }
    if (a.count && lane == 0 && found)
        atomicAdd(a.count + q, found);
}

// Warp per candidate: the exact distance; a match keeps its key (query << cbits | column),
// anything else becomes kNoKey (sorted after every match); the distance's bits ride along.
__global__ void range_check_kernel(const uint64_t *cand, size_t n, int cbits, uint32_t row0,
                                   DeviceQueries Q, DeviceRows R, vs_metric m, float radius,
                                   uint64_t *keys, uint32_t *vals)
{
    const uint64_t cmask = (uint64_t{1} << cbits) - 1;
    const int lane = threadIdx.x & 31;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < n;
         i += nwarps)
    {
        const uint64_t key = cand[i];
        const uint32_t q = static_cast<uint32_t>(key >> cbits);
        const uint32_t r = row0 + static_cast<uint32_t>(key & cmask);
        const double b = warp_exact_row(m, Q.x + static_cast<size_t>(q) * R.d, R, r, lane);
        const float out = base_to_output(m, b);
        if (lane == 0)
        {
            keys[i] = out <= radius ? key : kNoKey; // NaN never matches
            vals[i] = float_bits(out);
        }
    }
}

// offsets[j] = first position of query qa + j in the sorted keys (j <= nq): a binary search each.
__global__ void range_bounds_kernel(const uint64_t *sorted, size_t n, int cbits, int qa, int nq,
                                    int64_t *offsets)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > nq)
        return;
    const uint64_t want = static_cast<uint64_t>(qa + j) << cbits;
    size_t lo = 0, hi = n;
    while (lo < hi)
    {
        const size_t mid = (lo + hi) / 2;
        if (sorted[mid] < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    offsets[j] = static_cast<int64_t>(lo);
}

// The first offsets[nq] sorted matches as dataset ids and distances.
__global__ void range_emit_kernel(const uint64_t *sorted, const uint32_t *vals, size_t n,
                                  int cbits, const int64_t *offsets, int nq, uint32_t row0,
                                  const int64_t *ids, int64_t *out_ids, float *out_d)
{
    const uint64_t cmask = (uint64_t{1} << cbits) - 1;
    const size_t m = static_cast<size_t>(offsets[nq]);
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m && i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        out_ids[i] = ids[row0 + static_cast<uint32_t>(sorted[i] & cmask)];
        out_d[i] = bits_float(vals[i]);
    }
}

int blocks_for(size_t threads, int per_block)
{
    size_t b = (threads + per_block - 1) / per_block;
    return static_cast<int>(std::min<size_t>(std::max<size_t>(b, 1), 65535u * 8));
}

} // namespace

void launch_range_filter(const RangeFilterArgs &a, cudaStream_t s)
{
    if (a.qb <= a.qa || a.cb <= a.ca)
        return;
    const int P = static_cast<int>((a.cb - a.ca + kRangeSegment - 1) / kRangeSegment);
    const long warps = static_cast<long>(a.qb - a.qa) * P;
    range_filter_kernel<<<static_cast<int>((warps * 32 + kRangeThreads - 1) / kRangeThreads),
                          kRangeThreads, 0, s>>>(a, P);
    VS_LAUNCH_CHECK();
}

void launch_range_check(const uint64_t *cand, size_t n, int cbits, uint32_t row0, DeviceQueries q,
                        DeviceRows rows, vs_metric m, float radius, uint64_t *keys, uint32_t *vals,
                        cudaStream_t s)
{
    if (n == 0)
        return;
    range_check_kernel<<<blocks_for(n * 32, 256), 256, 0, s>>>(cand, n, cbits, row0, q, rows, m,
                                                              radius, keys, vals);
    VS_LAUNCH_CHECK();
}

void launch_range_output(const uint64_t *sorted, const uint32_t *vals, size_t n, int cbits, int qa,
                         int nq, uint32_t row0, const int64_t *ids, int64_t *offsets,
                         int64_t *out_ids, float *out_d, cudaStream_t s)
{
    range_bounds_kernel<<<(nq + 1 + 127) / 128, 128, 0, s>>>(sorted, n, cbits, qa, nq, offsets);
    VS_LAUNCH_CHECK();
    if (n == 0)
        return;
    range_emit_kernel<<<blocks_for(n, 256), 256, 0, s>>>(sorted, vals, n, cbits, offsets, nq, row0,
                                                        ids, out_ids, out_d);
    VS_LAUNCH_CHECK();
}

} // namespace vs::cuda
