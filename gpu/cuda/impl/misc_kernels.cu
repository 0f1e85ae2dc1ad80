// Small kernels: candidate subsets (id lookup, exact keys, unique counting and output), dataset
// row gathering, and the k-means steps (argmin over a GEMM tile, D^2 weights,
// deterministic per-cluster sums).
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/exact_warp.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace vs::cuda {

namespace {

int blocks_for(size_t items, int threads, size_t cap = 65535u * 8)
{
    size_t b = (items + threads - 1) / threads;
    if (b > cap)
        b = cap;
    return b < 1 ? 1 : static_cast<int>(b);
}

__global__ void subset_rows_kernel(const int64_t *offsets, int nq, const int64_t *cand_ids,
                                   const int64_t *ids, uint32_t n, uint32_t *rows, int *qidx)
{
    const int q = blockIdx.x;
    if (q >= nq)
        return;
    for (int64_t i = offsets[q] + threadIdx.x; i < offsets[q + 1]; i += blockDim.x)
    {
        int64_t id = cand_ids[i];
        uint32_t lo = 0, hi = n;
        while (lo < hi)
        {
            uint32_t mid = (lo + hi) >> 1;
            if (ids[mid] < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        rows[i] = (lo < n && ids[lo] == id) ? lo : kNoRow;
        qidx[i] = q;
    }
}

__global__ void subset_keys_kernel(const uint32_t *rows, const int *qidx, size_t nc,
                                   DeviceQueries Q, DeviceRows R, vs_metric m, bool range,
                                   float radius, uint64_t *keys)
{
    const int lane = threadIdx.x & 31;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < nc;
         i += nwarps)
    {
        uint32_t r = rows[i];
        uint64_t key = kNoKey;
        if (r != kNoRow)
        {
            double b = warp_exact_row(m, Q.x + static_cast<size_t>(qidx[i]) * R.d, R, r, lane);
            float out = base_to_output(m, b);
            if (!range)
                key = make_key(out, r);
            else if (out <= radius)
                key = (static_cast<uint64_t>(r) << 32) | float_bits(out);
        }
        if (lane == 0)
            keys[i] = key;
    }
}

constexpr int kSubThreads = 256;

// Valid keys that differ from their predecessor (segments are sorted, so repeats are adjacent).
__device__ __forceinline__ int subset_flag(const uint64_t *keys, int64_t begin, int64_t i,
                                           int64_t end)
{
    if (i >= end)
        return 0;
    uint64_t k = keys[i];
    return k != kNoKey && (i == begin || keys[i - 1] != k);
}

__global__ void subset_count_kernel(const uint64_t *keys, const int64_t *offsets, int nq,
                                    int64_t cap, int64_t *counts)
{
    using Reduce = cub::BlockReduce<int, kSubThreads>;
    __shared__ typename Reduce::TempStorage tmp;
    const int q = blockIdx.x;
    int64_t b = offsets[q], e = offsets[q + 1];
    int local = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kSubThreads)
        local += subset_flag(keys, b, i, e);
    int total = Reduce(tmp).Sum(local);
    if (threadIdx.x == 0)
        counts[q] = cap >= 0 && total > cap ? cap : total;
}

__global__ void subset_write_kernel(const uint64_t *keys, const int64_t *offsets, int nq,
                                    bool range, int64_t k, const int64_t *out_off,
                                    const int64_t *ids, int64_t *out_ids, float *out_d)
{
    using Scan = cub::BlockScan<int, kSubThreads>;
    __shared__ typename Scan::TempStorage tmp;
    const int q = blockIdx.x;
    int64_t b = offsets[q], e = offsets[q + 1];
    int64_t base = 0;
    const int64_t out0 = range ? out_off[q] : static_cast<int64_t>(q) * k;
    for (int64_t c0 = b; c0 < e; c0 += kSubThreads)
    {
        int64_t i = c0 + threadIdx.x;
        int f = subset_flag(keys, b, i, e);
        int excl, total;
        Scan(tmp).ExclusiveSum(f, excl, total);
        int64_t pos = base + excl;
        if (f && (range || pos < k))
        {
            uint64_t key = keys[i];
            if (range)
            {
                out_ids[out0 + pos] = ids[key >> 32];
                out_d[out0 + pos] = bits_float(static_cast<uint32_t>(key));
            }
            else
            {
                out_ids[out0 + pos] = ids[key_row(key)];
                out_d[out0 + pos] = key_dist(key);
            }
        }
        base += total;
        __syncthreads();
    }
    if (!range)
        for (int64_t i = base + threadIdx.x; i < k; i += kSubThreads)
        {
            out_ids[out0 + i] = -1;
            out_d[out0 + i] = INFINITY;
        }
}

// T: the unit moved (float for rows of a multiple of 4 bytes, else uint16_t); d units a row.
template <typename T>
__global__ void gather_rows_kernel(T *dst, const T *old, const T *fresh, const int64_t *map,
                                   size_t n, size_t d)
{
    size_t total = n * d;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        size_t r = i / d, j = i % d;
        int64_t src = map[r];
        dst[i] = src >= 0 ? old[static_cast<size_t>(src) * d + j]
                          : fresh[static_cast<size_t>(-src - 1) * d + j];
    }
}

__global__ void fill_offsets_kernel(int *offs, int nseg, int stride)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= nseg; i += gridDim.x * blockDim.x)
        offs[i] = i * stride;
}

// ---- k-means ----

__global__ void kmeans_argmin_kernel(const float *tile, int64_t ld, int np, int k, bool spherical,
                                     vs_metric metric, const float *csq, const float *xsq,
                                     uint32_t *assign, float *obj)
{
    const int lane = threadIdx.x & 31;
    const int p = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (p >= np)
        return;
    const float *row = tile + static_cast<size_t>(p) * ld;
    float best = INFINITY;
    int bi = 0x7fffffff;
    for (int c = lane; c < k; c += 32)
    {
        float v = row[c];
        float val = spherical ? -v : csq[c] - 2.0f * v;
        if (bi == 0x7fffffff || val < best) // c ascends: ties keep the smaller centroid
        {
            best = val;
            bi = c;
        }
    }
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
    {
        float ov = __shfl_xor_sync(0xffffffffu, best, off);
        int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (ov < best || (ov == best && oi < bi))
        {
            best = ov;
            bi = oi;
        }
    }
    if (lane == 0)
    {
        assign[p] = static_cast<uint32_t>(bi);
        float o;
        if (!spherical)
            o = fmaxf(xsq[p] + best, 0.0f);
        else
            o = metric == VS_METRIC_COSINE ? 1.0f + best : best;
        obj[p] = o;
    }
}

__global__ void kmeans_mind_kernel(const float *x, size_t m, int d, const float *c, bool first,
                                   double *mind)
{
    const int lane = threadIdx.x & 31;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t p = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; p < m;
         p += nwarps)
    {
        float s = 0.0f;
        for (int j = lane; j < d; j += 32)
        {
            float t = x[p * d + j] - c[j];
            s = fmaf(t, t, s);
        }
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0)
            mind[p] = first ? s : fmin(mind[p], static_cast<double>(s));
    }
}

__global__ void kmeans_pick_kernel(const double *prefix, size_t m, double u, uint32_t *out)
{
    double total = prefix[m - 1];
    if (!(total > 0))
    {
        size_t i = static_cast<size_t>(u * static_cast<double>(m));
        *out = static_cast<uint32_t>(i < m ? i : m - 1);
        return;
    }
    double target = u * total;
    size_t lo = 0, hi = m;
    while (lo < hi)
    {
        size_t mid = (lo + hi) >> 1;
        if (prefix[mid] <= target)
            lo = mid + 1;
        else
            hi = mid;
    }
    *out = static_cast<uint32_t>(lo < m ? lo : m - 1);
}

__global__ void kmeans_counts_kernel(const uint32_t *assign, size_t m, int *counts)
{
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        atomicAdd(&counts[assign[i]], 1);
}

__global__ void kmeans_sums_kernel(const float *x, int d, const uint32_t *perm, const int *offsets,
                                   const int *counts, float *centroids)
{
    const int c = blockIdx.x;
    const int cnt = counts[c];
    if (cnt == 0)
        return;
    const int off = offsets[c];
    for (int j = threadIdx.x; j < d; j += blockDim.x)
    {
        double s = 0.0;
        for (int i = 0; i < cnt; i++)
            s += x[static_cast<size_t>(perm[off + i]) * d + j];
        centroids[static_cast<size_t>(c) * d + j] = static_cast<float>(s / cnt);
    }
}

} // namespace

void launch_subset_rows(const int64_t *offsets, int nq, const int64_t *cand_ids,
                        const int64_t *ids, uint32_t n, uint32_t *rows, int *qidx, cudaStream_t s)
{
    if (nq == 0)
        return;
    subset_rows_kernel<<<nq, 128, 0, s>>>(offsets, nq, cand_ids, ids, n, rows, qidx);
    VS_LAUNCH_CHECK();
}

void launch_subset_keys(const uint32_t *rows, const int *qidx, size_t nc, DeviceQueries q,
                        DeviceRows ds, vs_metric m, bool range, float radius, uint64_t *keys,
                        cudaStream_t s)
{
    if (nc == 0)
        return;
    subset_keys_kernel<<<blocks_for(nc * 32, 256), 256, 0, s>>>(rows, qidx, nc, q, ds, m, range,
                                                                 radius, keys);
    VS_LAUNCH_CHECK();
}

void launch_subset_count(const uint64_t *keys, const int64_t *offsets, int nq, int64_t cap,
                         int64_t *counts, cudaStream_t s)
{
    if (nq == 0)
        return;
    subset_count_kernel<<<nq, kSubThreads, 0, s>>>(keys, offsets, nq, cap, counts);
    VS_LAUNCH_CHECK();
}

void launch_subset_write(const uint64_t *keys, const int64_t *offsets, int nq, bool range,
                         int64_t k, const int64_t *out_off, const int64_t *ids, int64_t *out_ids,
                         float *out_d, cudaStream_t s)
{
    if (nq == 0)
        return;
    subset_write_kernel<<<nq, kSubThreads, 0, s>>>(keys, offsets, nq, range, k, out_off, ids,
                                                   out_ids, out_d);
    VS_LAUNCH_CHECK();
}

void launch_gather_rows(void *dst, const void *old, const void *fresh, const int64_t *map,
                        size_t n, size_t row_bytes, cudaStream_t s)
{
    if (n == 0)
        return;
    if (row_bytes % 4 == 0)
    {
        const size_t d = row_bytes / 4;
        gather_rows_kernel<<<blocks_for(n * d, 256), 256, 0, s>>>(
            static_cast<float *>(dst), static_cast<const float *>(old),
            static_cast<const float *>(fresh), map, n, d);
    }
    else
    {
        const size_t d = row_bytes / 2;
        gather_rows_kernel<<<blocks_for(n * d, 256), 256, 0, s>>>(
            static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(old),
            static_cast<const uint16_t *>(fresh), map, n, d);
    }
    VS_LAUNCH_CHECK();
}

void launch_fill_offsets(int *offs, int nseg, int stride, cudaStream_t s)
{
    fill_offsets_kernel<<<blocks_for(static_cast<size_t>(nseg) + 1, 256), 256, 0, s>>>(offs, nseg,
                                                                                       stride);
    VS_LAUNCH_CHECK();
}

void launch_kmeans_argmin(const float *tile, int64_t ld, int np, int k, bool spherical,
                          vs_metric metric, const float *csq, const float *xsq, uint32_t *assign,
                          float *obj, cudaStream_t s)
{
    if (np == 0)
        return;
    kmeans_argmin_kernel<<<blocks_for(static_cast<size_t>(np) * 32, 256), 256, 0, s>>>(
        tile, ld, np, k, spherical, metric, csq, xsq, assign, obj);
    VS_LAUNCH_CHECK();
}

void launch_kmeans_mind(const float *x, size_t m, int d, const float *c, bool first, double *mind,
                        cudaStream_t s)
{
    kmeans_mind_kernel<<<blocks_for(m * 32, 256), 256, 0, s>>>(x, m, d, c, first, mind);
    VS_LAUNCH_CHECK();
}

void launch_kmeans_pick(const double *prefix, size_t m, double u, uint32_t *out, cudaStream_t s)
{
    kmeans_pick_kernel<<<1, 1, 0, s>>>(prefix, m, u, out);
    VS_LAUNCH_CHECK();
}

void launch_kmeans_counts(const uint32_t *assign, size_t m, int *counts, cudaStream_t s)
{
    kmeans_counts_kernel<<<blocks_for(m, 256), 256, 0, s>>>(assign, m, counts);
    VS_LAUNCH_CHECK();
}

void launch_kmeans_sums(const float *x, int d, const uint32_t *perm, const int *offsets,
                        const int *counts, int k, float *centroids, cudaStream_t s)
{
    kmeans_sums_kernel<<<k, d < 256 ? ((d + 31) / 32) * 32 : 256, 0, s>>>(x, d, perm, offsets,
                                                                           counts, centroids);
    VS_LAUNCH_CHECK();
}

} // namespace vs::cuda
