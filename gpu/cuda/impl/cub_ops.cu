// Everything that uses CUB device-wide algorithms, one instantiation each (they dominate the
// compile time): segmented sorts of 64-bit keys (int and int64 offsets), range candidate
// selection and compaction, IVF-PQ range compaction, the k-means++ prefix sum and the k-means
// assignment sort.
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/exact_warp.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

namespace vs::cuda {

namespace {

// Temporary storage from the pool for one CUB call.
struct Temp
{
    DeviceArray<unsigned char> buf;
    Temp(DevicePool &pool, size_t bytes, cudaStream_t s) : buf(pool, bytes ? bytes : 1, s) {}
    void *get() { return buf.get(); }
};

struct RangePred
{
    RangeTile t;
    __device__ __forceinline__ bool operator()(uint32_t idx) const
    {
        uint32_t q = idx / t.tn, c = idx % t.tn;
        float v = t.tile[static_cast<size_t>(q) * t.ld + c];
        float a = approx_value(t.mode, v, t.xsq ? t.xsq[q] : 0.0f, t.xinv ? t.xinv[q] : 0.0f,
                               t.mode == MODE_L2_GEMM ? t.ysq[c] : 0.0f,
                               t.mode == MODE_COS_GEMM ? t.yinv[c] : 0.0f);
        return !(static_cast<double>(a) > t.thr[q]); // NaN stays a candidate
    }
};

constexpr int kCountThreads = 256;

__global__ void range_count_kernel(RangeTile t, int64_t *counts)
{
    using Reduce = cub::BlockReduce<int, kCountThreads>;
    __shared__ typename Reduce::TempStorage tmp;
    const uint32_t q = blockIdx.y;
    RangePred pred{t};
    int local = 0;
    for (uint32_t c = blockIdx.x * kCountThreads + threadIdx.x; c < t.tn;
         c += gridDim.x * kCountThreads)
        local += pred(q * t.tn + c) ? 1 : 0;
    int total = Reduce(tmp).Sum(local);
    if (threadIdx.x == 0 && total)
        atomicAdd(reinterpret_cast<unsigned long long *>(&counts[q]),
                  static_cast<unsigned long long>(total));
}

__global__ void range_exact_kernel(const uint32_t *cand, size_t nc, uint32_t tn, uint32_t row0,
                                   DeviceQueries Q, DeviceRows R, vs_metric m, float radius,
                                   uint64_t *packed, uint8_t *flags)
{
    const int lane = threadIdx.x & 31;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * (blockDim.x >> 5);
    for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; i < nc;
         i += nwarps)
    {
        uint32_t idx = cand[i];
        uint32_t q = idx / tn, r = row0 + idx % tn;
        double b = warp_exact_base(m, Q.x + static_cast<size_t>(q) * R.d,
                                   R.x + static_cast<size_t>(r) * R.d, R.d, lane);
        float out = base_to_output(m, b);
        if (lane == 0)
        {
            packed[i] = (static_cast<uint64_t>(idx) << 32) | float_bits(out);
            flags[i] = out <= radius ? 1 : 0;
        }
    }
}

} // namespace

void segmented_sort_keys(DevicePool &pool, const uint64_t *in, uint64_t *out, int n, int nseg,
                         const int *begin, const int *end, cudaStream_t s)
{
    if (n == 0 || nseg == 0)
        return;
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(nullptr, bytes, in, out, n, nseg, begin, end, s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(t.get(), bytes, in, out, n, nseg, begin, end, s));
}

void segmented_sort_keys64(DevicePool &pool, const uint64_t *in, uint64_t *out, int n, int nseg,
                           const int64_t *offsets, cudaStream_t s)
{
    if (n == 0 || nseg == 0)
        return;
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(nullptr, bytes, in, out, n, nseg, offsets,
                                                     offsets + 1, s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(t.get(), bytes, in, out, n, nseg, offsets,
                                                     offsets + 1, s));
}

size_t select_flagged_indices(DevicePool &pool, const uint8_t *flags, size_t n, uint32_t *out,
                              cudaStream_t s)
{
    if (n == 0)
        return 0;
    thrust::counting_iterator<uint32_t> first(0);
    DeviceArray<uint32_t> num(pool, 1, s);
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, bytes, first, flags, out, num.get(),
                                             static_cast<int64_t>(n), s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceSelect::Flagged(t.get(), bytes, first, flags, out, num.get(),
                                             static_cast<int64_t>(n), s));
    uint32_t h = 0;
    VS_CUDA_CHECK(cudaMemcpyAsync(&h, num.get(), sizeof h, cudaMemcpyDeviceToHost, s));
    VS_CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
}

void inclusive_sum(DevicePool &pool, const double *in, double *out, size_t n, cudaStream_t s)
{
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, in, out, n, s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceScan::InclusiveSum(t.get(), bytes, in, out, n, s));
}

void sort_pairs_u32(DevicePool &pool, const uint32_t *kin, uint32_t *kout, const uint32_t *vin,
                    uint32_t *vout, size_t n, int end_bit, cudaStream_t s)
{
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, vin, vout, n, 0,
                                                  end_bit, s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(t.get(), bytes, kin, kout, vin, vout, n, 0,
                                                  end_bit, s));
}

void range_count(const RangeTile &t, int tq, int64_t *counts, cudaStream_t s)
{
    VS_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(int64_t) * tq, s));
    if (tq == 0 || t.tn == 0)
        return;
    unsigned gx = (t.tn + kCountThreads * 8 - 1) / (kCountThreads * 8);
    range_count_kernel<<<dim3(gx, tq), kCountThreads, 0, s>>>(t, counts);
    VS_LAUNCH_CHECK();
}

void range_select(DevicePool &pool, const RangeTile &t, int qa, int qb, uint32_t *out,
                  cudaStream_t s)
{
    int64_t items = static_cast<int64_t>(qb - qa) * t.tn;
    if (items == 0)
        return;
    RangePred pred{t};
    thrust::counting_iterator<uint32_t> first(static_cast<uint32_t>(qa) * t.tn);
    DeviceArray<uint32_t> num(pool, 1, s);
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceSelect::If(nullptr, bytes, first, out, num.get(), items, pred, s));
    Temp tmp(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceSelect::If(tmp.get(), bytes, first, out, num.get(), items, pred, s));
}

size_t range_exact(DevicePool &pool, const uint32_t *cand, size_t ncand, uint32_t tn,
                   uint32_t row0, DeviceQueries q, DeviceRows rows, vs_metric m, float radius,
                   uint64_t *packed, uint8_t *flags, uint64_t *packed_out, cudaStream_t s)
{
    if (ncand == 0)
        return 0;
    size_t blocks = (ncand * 32 + 255) / 256;
    if (blocks > 65535u * 8)
        blocks = 65535u * 8;
    range_exact_kernel<<<static_cast<int>(blocks), 256, 0, s>>>(cand, ncand, tn, row0, q, rows, m,
                                                                radius, packed, flags);
    VS_LAUNCH_CHECK();
    DeviceArray<uint32_t> num(pool, 1, s);
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, bytes, packed, flags, packed_out, num.get(),
                                             static_cast<int64_t>(ncand), s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceSelect::Flagged(t.get(), bytes, packed, flags, packed_out, num.get(),
                                             static_cast<int64_t>(ncand), s));
    uint32_t h = 0;
    VS_CUDA_CHECK(cudaMemcpyAsync(&h, num.get(), sizeof h, cudaMemcpyDeviceToHost, s));
    VS_CUDA_CHECK(cudaStreamSynchronize(s));
    return h;
}

} // namespace vs::cuda
