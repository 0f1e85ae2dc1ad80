// k-selection kernels: the fused pass over GEMM tiles (one warp per query segment, WarpTopK),
// the merge of per-segment lists, the exact re-rank of candidates, the certification and output
// kernel, the exhaustive exact keys, and the radix select for large k.
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/exact_warp.cuh"
#include "cuda/utils/select.cuh"

#include <cub/block/block_scan.cuh>

#include <algorithm>

namespace vs::cuda {

namespace {

constexpr int kSelectWarpsMax = 4;
constexpr int kMergeWarpsMax = 8;

int select_warps_per_block(int kp, int bcap)
{
    size_t per = static_cast<size_t>(warp_topk_words(kp, bcap)) * 8;
    int w = static_cast<int>((96u << 10) / per);
    if (w > kSelectWarpsMax)
        w = kSelectWarpsMax;
    return w < 1 ? 1 : w;
}


__global__ void tile_select_kernel(TileSelectArgs a, int wpb)
{
    extern __shared__ uint64_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long gw = static_cast<long>(blockIdx.x) * wpb + warp;
    if (gw >= static_cast<long>(a.tq) * a.P)
        return;
    const int q = static_cast<int>(gw / a.P), p = static_cast<int>(gw % a.P);
    uint64_t *mine = smem + static_cast<size_t>(warp) * warp_topk_words(a.kp, a.bcap);
    const uint64_t thr0 = a.state ? a.state[static_cast<size_t>(q) * a.kp + a.kp - 1] : kNoKey;
    WarpTopK t;
    t.init(mine, a.kp, a.bcap, thr0, lane);
    const int c_begin = a.col0 + p * a.seg_len;
    const int c_end = min(a.col1, c_begin + a.seg_len);
    const float *row = a.tile + static_cast<size_t>(q) * a.ld;
    const float xsq = a.xsq ? a.xsq[q] : 0.0f, xinv = a.xinv ? a.xinv[q] : 0.0f;
    for (int base = c_begin; base < c_end; base += 512)
    {
        float4 v[4], ys[4], yi[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            v[u] = ys[u] = yi[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            int c = base + u * 128 + lane * 4;
            if (c < c_end)
            {
                v[u] = __ldg(reinterpret_cast<const float4 *>(row + c));
                size_t r = a.row0 + static_cast<size_t>(c);
                if (a.mode == MODE_L2_GEMM)
                    ys[u] = __ldg(reinterpret_cast<const float4 *>(a.ysq + r));
                if (a.mode == MODE_COS_GEMM)
                    yi[u] = __ldg(reinterpret_cast<const float4 *>(a.yinv + r));
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            const int c = base + u * 128 + lane * 4;
            const float vv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
            const float ss[4] = {ys[u].x, ys[u].y, ys[u].z, ys[u].w};
            const float ii[4] = {yi[u].x, yi[u].y, yi[u].z, yi[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
            {
                uint64_t key = kNoKey;
                if (c + e < c_end)
                    key = make_key(approx_value(a.mode, vv[e], xsq, xinv, ss[e], ii[e]),
                                   a.row0 + static_cast<uint32_t>(c + e));
                t.add(key, lane);
            }
        }
    }
    t.finish(a.partial + static_cast<size_t>(gw) * a.kp, lane);
}

// One block per query.  Heads first: lane l of warp w takes the first key of list w * 32 + l (+
// 32 W, ...), so a warp reads 32 lists with one load instead of walking them one by one; each
// warp's K'-th head bounds the block's answer (K' keys are at or below it), and the smallest such
// bound becomes every warp's threshold.  Then each warp walks, from their second key, only its lists
// whose head is below the threshold (sorted lists: a chunk above it ends the list), and warp 0
// merges the other warps' lists.
__global__ void merge_kernel(uint64_t *state, bool valid, const uint64_t *lists, int nq, int P,
                             int kp, int bcap)
{
    extern __shared__ uint64_t smem[];
    __shared__ uint64_t *s_top[kMergeWarpsMax];
    __shared__ unsigned long long s_bound;
    const int W = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q = blockIdx.x;
    const uint64_t *qlists = lists + static_cast<size_t>(q) * P * kp;
    WarpTopK t;
    if (threadIdx.x == 0)
        s_bound = kNoKey;
    t.init(smem + static_cast<size_t>(warp) * warp_topk_words(kp, bcap), kp, bcap, kNoKey, lane);
    if (valid && warp == 0)
        t.load(state + static_cast<size_t>(q) * kp, lane);
    for (int p0 = warp * 32; p0 < P; p0 += W * 32)
    {
        const int p = p0 + lane;
        t.add(p < P ? qlists[static_cast<size_t>(p) * kp] : kNoKey, lane);
    }
    t.flush(lane);
    __syncthreads(); // s_bound initialised
    if (lane == 0)
        atomicMin(&s_bound, static_cast<unsigned long long>(t.thr));
    __syncthreads();
    const uint64_t bound = s_bound;
    t.thr0 = bound < t.thr0 ? bound : t.thr0;
    t.thr = bound < t.thr ? bound : t.thr;
    for (int p0 = warp * 32; p0 < P; p0 += W * 32)
    {
        const int p = p0 + lane;
        const uint64_t head = p < P ? qlists[static_cast<size_t>(p) * kp] : kNoKey;
        unsigned todo = __ballot_sync(kFullMask, head < t.thr);
        while (todo)
        {
            const int l = __ffs(todo) - 1;
            todo &= todo - 1;
            t.add_sorted(qlists + static_cast<size_t>(p0 + l) * kp, 1, kp, lane);
        }
    }
    t.flush(lane);
    if (lane == 0)
        s_top[warp] = t.top;
    __syncthreads();
    if (warp == 0)
    {
        for (int w = 1; w < W; w++)
            t.add_sorted(s_top[w], 0, kp, lane);
        t.finish(state + static_cast<size_t>(q) * kp, lane);
    }
}

__global__ void exact_keys_kernel(const uint64_t *cand, int nq, int kp, DeviceQueries Q,
                                  DeviceRows R, vs_metric m, uint64_t *out)
{
    const int lane = threadIdx.x & 31;
    const size_t total = static_cast<size_t>(nq) * kp;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < total;
         i += nwarps)
    {
        uint64_t key = cand[i];
        uint64_t res = kNoKey;
        if (key != kNoKey)
        {
            uint32_t r = key_row(key);
            size_t q = i / kp;
            double b = warp_exact_row(m, Q.x + q * R.d, R, r, lane);
            res = make_key(base_to_output(m, b), r);
        }
        if (lane == 0)
            out[i] = res;
    }
}

__global__ void exact_all_kernel(DeviceQueries Q, DeviceRows R, vs_metric m, uint64_t *out)
{
    const int lane = threadIdx.x & 31;
    const size_t total = static_cast<size_t>(Q.n) * R.n;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < total;
         i += nwarps)
    {
        size_t q = i / R.n;
        uint32_t r = static_cast<uint32_t>(i % R.n);
        double b = warp_exact_row(m, Q.x + q * R.d, R, r, lane);
        if (lane == 0)
            out[i] = make_key(base_to_output(m, b), r);
    }
}

__global__ void exact_tile_kernel(DeviceQueries Q, DeviceRows R, vs_metric m, float *out,
                                  int64_t ld)
{
    const int lane = threadIdx.x & 31;
    const size_t total = static_cast<size_t>(Q.n) * R.n;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < total;
         i += nwarps)
    {
        size_t q = i / R.n;
        uint32_t r = static_cast<uint32_t>(i % R.n);
        double b = warp_exact_row(m, Q.x + q * R.d, R, r, lane);
        if (lane == 0)
            out[q * ld + r] = static_cast<float>(b);
    }
}

// Writes query q's k results from its sorted exact keys (seg of them) and certifies them against
// the largest approximate candidate key (s_max; 0 = no certification needed).
__device__ void write_results(const uint64_t *sorted, int64_t seg, int k, int q, bool certify,
                              unsigned long long amax, vs_metric metric, int kind, int d,
                              double qnorm, double qrel, double maxnorm, const int64_t *ids,
                              int64_t *out_ids, float *out_d, int64_t *out_counts, int *out_ok,
                              int *s_count)
{
    const int64_t lim = seg < k ? seg : k;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
    {
        uint64_t key = i < lim ? sorted[i] : kNoKey;
        size_t o = static_cast<size_t>(q) * k + i;
        if (key == kNoKey)
        {
            out_ids[o] = -1;
            out_d[o] = INFINITY;
        }
        else
        {
            out_ids[o] = ids[key_row(key)];
            out_d[o] = key_dist(key);
            if (i + 1 == lim || sorted[i + 1] == kNoKey)
                *s_count = static_cast<int>(i + 1);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0)
    {
        int ok = 1;
        if (certify)
        {
            ok = 0;
            // The k-th exact key must be strictly below anything a row outside the candidates
            // could reach: its approximate value is >= the largest candidate's.
            if (*s_count >= k && amax != 0)
            {
                float ak = key_dist(amax);
                ErrBound e =
                    approx_error(kind, metric, static_cast<size_t>(d), qnorm, maxnorm, qrel);
                float lb = base_to_output(metric, approx_lower(e, static_cast<double>(ak)));
                ok = lb > key_dist(sorted[k - 1]) ? 1 : 0;
            }
        }
        out_ok[q] = ok;
        if (out_counts)
            out_counts[q] = *s_count;
    }
}

__global__ void finalize_kernel(FinalizeArgs a)
{
    const int q = blockIdx.x;
    const uint64_t *sorted = a.sorted + static_cast<size_t>(q) * a.seg;
    __shared__ unsigned long long s_max;
    __shared__ int s_count;
    if (threadIdx.x == 0)
    {
        s_max = 0;
        s_count = 0;
    }
    __syncthreads();
    if (a.bound)
    {
        if (threadIdx.x == 0)
            s_max = a.bound[q];
    }
    else if (a.approx)
    {
        unsigned long long mx = 0;
        for (int i = threadIdx.x; i < a.kp; i += blockDim.x)
        {
            uint64_t v = a.approx[static_cast<size_t>(q) * a.kp + i];
            if (v != kNoKey && v > mx)
                mx = v;
        }
        atomicMax(&s_max, mx);
    }
    __syncthreads();
    const bool certify = a.approx != nullptr || a.bound != nullptr;
    write_results(sorted, a.seg, a.k, q, certify, s_max, a.metric, a.kind, a.d,
                  a.qnorm ? a.qnorm[q] : 0.0, a.qrel ? a.qrel[q] : 0.0, a.maxnorm, a.ids,
                  a.out_ids, a.out_d, a.out_counts, a.out_ok, &s_count);
}

constexpr int kRerankThreads = 512; // 16 warps: a query's candidates in few rounds

__global__ void __launch_bounds__(kRerankThreads) rerank_kernel(RerankArgs a, int S)
{
    extern __shared__ uint64_t keys[];
    __shared__ unsigned long long s_max;
    __shared__ int s_count;
    const int q = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0)
    {
        s_max = 0;
        s_count = 0;
    }
    __syncthreads();
    const uint64_t *cand = a.cand + static_cast<size_t>(q) * a.kp;
    const float *x = a.q.x + static_cast<size_t>(q) * a.rows.d;
    unsigned long long mx = 0;
    for (int i = warp; i < a.kp; i += kRerankThreads / 32)
    {
        uint64_t c = cand[i];
        uint64_t res = kNoKey;
        if (c != kNoKey)
        {
            uint32_t r = key_row(c);
            double b = warp_exact_row(a.metric, x, a.rows, r, lane);
            res = make_key(base_to_output(a.metric, b), r);
            mx = c > mx ? c : mx;
        }
        if (lane == 0)
            keys[i] = res;
    }
    for (int i = a.kp + threadIdx.x; i < S; i += kRerankThreads)
        keys[i] = kNoKey;
    if (lane == 0 && mx)
        atomicMax(&s_max, mx);
    __syncthreads();
    for (int k = 2; k <= S; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1)
        {
            for (int i = threadIdx.x; i < (S >> 1); i += kRerankThreads)
            {
                int l = 2 * i - (i & (j - 1));
                int r = l + j;
                bool asc = (l & k) == 0;
                uint64_t u = keys[l], v = keys[r];
                if ((u > v) == asc)
                {
                    keys[l] = v;
                    keys[r] = u;
                }
            }
            __syncthreads();
        }
    write_results(keys, a.kp, a.k, q, true, s_max, a.metric, a.kind, a.rows.d, a.q.norm[q],
                  a.q.qrel ? a.q.qrel[q] : 0.0, a.maxnorm, a.rows.ids, a.out_ids, a.out_d,
                  a.out_counts, a.out_ok, &s_count);
}

constexpr int kRadixThreads = 512;

__global__ void __launch_bounds__(kRadixThreads)
    radix_select_kernel(const float *tile, int64_t ld, uint32_t n, int mode, const float *xsq,
                        const float *xinv, const float *ysq, const float *yinv, int kp, int k,
                        int stride, uint32_t *count, uint64_t *bound, uint64_t *cand)
{
    using Scan = cub::BlockScan<int, kRadixThreads>;
    __shared__ typename Scan::TempStorage scan_tmp;
    __shared__ unsigned hist[256];
    __shared__ unsigned s_digit, s_kk, s_less;
    const int q = blockIdx.x;
    const uint32_t have = count[q];
    if (have >= static_cast<uint32_t>(k) && have <= static_cast<uint32_t>(stride))
        return; // the filter's candidates stand
    const float *row = tile + static_cast<size_t>(q) * ld;
    const float xs = xsq ? xsq[q] : 0.0f, xi = xinv ? xinv[q] : 0.0f;
    auto ukey = [&](uint32_t c) {
        float ys = mode == MODE_L2_GEMM ? ysq[c] : 0.0f;
        float yv = mode == MODE_COS_GEMM ? yinv[c] : 0.0f;
        return float_key(approx_value(mode, row[c], xs, xi, ys, yv));
    };
    uint32_t prefix = 0, mask = 0, kk = static_cast<uint32_t>(kp);
    for (int pass = 0; pass < 4; pass++)
    {
        const int shift = 24 - 8 * pass;
        for (int i = threadIdx.x; i < 256; i += blockDim.x)
            hist[i] = 0;
        __syncthreads();
        // Four independent loads in flight per thread.
        for (uint32_t c0 = threadIdx.x; c0 < n; c0 += 4 * blockDim.x)
        {
            uint32_t u[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
            {
                uint32_t c = c0 + e * blockDim.x;
                u[e] = c < n ? ukey(c) : 0u;
            }
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c0 + e * blockDim.x < n && (u[e] & mask) == prefix)
                    atomicAdd(&hist[(u[e] >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0)
        {
            uint32_t cum = 0;
            for (int b = 0; b < 256; b++)
            {
                if (cum + hist[b] >= kk)
                {
                    s_digit = b;
                    s_kk = kk - cum;
                    break;
                }
                cum += hist[b];
            }
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= 255u << shift;
        kk = s_kk;
        __syncthreads();
    }
    // prefix is the K'-th smallest distance image; take everything below it and the first kk
    // rows equal to it (ascending rows), so the result is the K' smallest (image, row) keys.
    const uint32_t T = prefix, need_eq = kk, less_count = static_cast<uint32_t>(kp) - kk;
    if (threadIdx.x == 0)
        s_less = 0;
    __syncthreads();
    uint64_t *out = cand + static_cast<size_t>(q) * stride;
    uint32_t eq_base = 0;
    for (uint32_t c0 = 0; c0 < n; c0 += blockDim.x)
    {
        uint32_t c = c0 + threadIdx.x;
        uint32_t u = c < n ? ukey(c) : 0xFFFFFFFFu;
        bool lt = c < n && u < T;
        int eq = (c < n && u == T) ? 1 : 0;
        if (lt)
        {
            uint32_t pos = atomicAdd(&s_less, 1u);
            out[pos] = (static_cast<uint64_t>(u) << 32) | c;
        }
        int excl, total;
        Scan(scan_tmp).ExclusiveSum(eq, excl, total);
        if (eq && eq_base + static_cast<uint32_t>(excl) < need_eq)
            out[less_count + eq_base + excl] = (static_cast<uint64_t>(u) << 32) | c;
        eq_base += static_cast<uint32_t>(total);
        __syncthreads();
    }
    for (int i = kp + threadIdx.x; i < stride; i += blockDim.x)
        out[i] = kNoKey;
    if (threadIdx.x == 0)
    {
        count[q] = static_cast<uint32_t>(kp);
        bound[q] = static_cast<uint64_t>(T) << 32;
    }
}

__global__ void segment_bounds_kernel(const uint32_t *count, int nq, int stride, int *begin,
                                      int *end)
{
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= nq)
        return;
    const uint32_t c = count[q];
    begin[q] = q * stride;
    end[q] = q * stride + static_cast<int>(c < static_cast<uint32_t>(stride) ? c : stride);
}

int grid_for(size_t warps_needed, int threads)
{
    size_t blocks = (warps_needed * 32 + threads - 1) / threads;
    if (blocks > 65535u * 4)
        blocks = 65535u * 4;
    return blocks < 1 ? 1 : static_cast<int>(blocks);
}

} // namespace

void launch_tile_select(const TileSelectArgs &a, cudaStream_t s)
{
    int wpb = select_warps_per_block(a.kp, a.bcap);
    size_t smem = static_cast<size_t>(wpb) * warp_topk_words(a.kp, a.bcap) * 8;
    set_smem(reinterpret_cast<const void *>(tile_select_kernel), smem);
    long warps = static_cast<long>(a.tq) * a.P;
    int blocks = static_cast<int>((warps + wpb - 1) / wpb);
    tile_select_kernel<<<blocks, wpb * 32, smem, s>>>(a, wpb);
    VS_LAUNCH_CHECK();
}

void launch_merge_lists(uint64_t *state, bool state_valid, const uint64_t *lists, int nq, int P,
                        int kp, int bcap, cudaStream_t s)
{
    if (nq == 0)
        return;
    size_t per = static_cast<size_t>(warp_topk_words(kp, bcap)) * 8;
    int W = static_cast<int>((160u << 10) / per);
    W = std::max(1, std::min({W, kMergeWarpsMax, (P + 1) / 2}));
    size_t smem = static_cast<size_t>(W) * per;
    set_smem(reinterpret_cast<const void *>(merge_kernel), smem);
    merge_kernel<<<nq, W * 32, smem, s>>>(state, state_valid, lists, nq, P, kp, bcap);
    VS_LAUNCH_CHECK();
}

void launch_exact_keys(const uint64_t *cand, int nq, int kp, DeviceQueries q, DeviceRows rows,
                       vs_metric m, uint64_t *out, cudaStream_t s)
{
    size_t total = static_cast<size_t>(nq) * kp;
    if (total == 0)
        return;
    exact_keys_kernel<<<grid_for(total, 256), 256, 0, s>>>(cand, nq, kp, q, rows, m, out);
    VS_LAUNCH_CHECK();
}

void launch_exact_all(DeviceQueries q, DeviceRows rows, vs_metric m, uint64_t *out, cudaStream_t s)
{
    size_t total = static_cast<size_t>(q.n) * rows.n;
    if (total == 0)
        return;
    exact_all_kernel<<<grid_for(total, 256), 256, 0, s>>>(q, rows, m, out);
    VS_LAUNCH_CHECK();
}

void launch_exact_tile(DeviceQueries q, DeviceRows rows, vs_metric m, float *out, int64_t ld,
                       cudaStream_t s)
{
    size_t total = static_cast<size_t>(q.n) * rows.n;
    if (total == 0)
        return;
    exact_tile_kernel<<<grid_for(total, 256), 256, 0, s>>>(q, rows, m, out, ld);
    VS_LAUNCH_CHECK();
}

void launch_finalize(const FinalizeArgs &a, cudaStream_t s)
{
    if (a.nq == 0)
        return;
    finalize_kernel<<<a.nq, 256, 0, s>>>(a);
    VS_LAUNCH_CHECK();
}

void launch_rerank(const RerankArgs &a, cudaStream_t s)
{
    if (a.nq == 0)
        return;
    int S = 32;
    while (S < a.kp)
        S <<= 1;
    size_t smem = static_cast<size_t>(S) * 8;
    set_smem(reinterpret_cast<const void *>(rerank_kernel), smem);
    rerank_kernel<<<a.nq, kRerankThreads, smem, s>>>(a, S);
    VS_LAUNCH_CHECK();
}

void launch_radix_select(const float *tile, int64_t ld, int nq, uint32_t n, int mode,
                         const float *xsq, const float *xinv, const float *ysq, const float *yinv,
                         int kp, int k, int stride, uint32_t *count, uint64_t *bound,
                         uint64_t *cand, cudaStream_t s)
{
    if (nq == 0)
        return;
    radix_select_kernel<<<nq, kRadixThreads, 0, s>>>(tile, ld, n, mode, xsq, xinv, ysq, yinv, kp,
                                                     k, stride, count, bound, cand);
    VS_LAUNCH_CHECK();
}

void launch_segment_bounds(const uint32_t *count, int nq, int stride, int *begin, int *end,
                           cudaStream_t s)
{
    if (nq == 0)
        return;
    segment_bounds_kernel<<<(nq + 127) / 128, 128, 0, s>>>(count, nq, stride, begin, end);
    VS_LAUNCH_CHECK();
}

} // namespace vs::cuda
