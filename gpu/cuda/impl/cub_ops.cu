// Everything that uses CUB device-wide algorithms, one instantiation each (they dominate the
// compile time): segmented sorts of 64-bit keys (int and int64 offsets), the sort of range
// matches, IVF-PQ range compaction, the k-means++ prefix sum and the k-means assignment sort.
#include "cuda/impl/kernels.cuh"

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

void sort_pairs_u64(DevicePool &pool, const uint64_t *kin, uint64_t *kout, const uint32_t *vin,
                    uint32_t *vout, size_t n, int end_bit, cudaStream_t s)
{
    if (n == 0)
        return;
    size_t bytes = 0;
    VS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin, kout, vin, vout, n, 0,
                                                  end_bit, s));
    Temp t(pool, bytes, s);
    VS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(t.get(), bytes, kin, kout, vin, vout, n, 0,
                                                  end_bit, s));
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

} // namespace vs::cuda
