#include "cuda/utils/memory_pool.cuh"

#include <cstdint>
#include <string>

namespace vs::cuda {

DevicePool::DevicePool(int device, size_t budget) : budget_(budget)
{
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    VS_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    uint64_t keep = UINT64_MAX; // keep freed memory for reuse (the budget bounds it)
    VS_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
}

DevicePool::~DevicePool()
{
    if (pool_)
    {
        cudaDeviceSynchronize();
        cudaMemPoolDestroy(pool_);
    }
}

void *DevicePool::allocate(size_t bytes, cudaStream_t s)
{
    if (bytes == 0)
        return nullptr;
    bytes = (bytes + 255) & ~size_t{255};
    size_t used = in_use_.load(std::memory_order_relaxed);
    do
    {
        if (used > budget_ || bytes > budget_ - used)
            throw Error(VS_OUT_OF_MEMORY, "device memory budget exceeded: " +
                                              std::to_string(bytes) + " bytes requested, " +
                                              std::to_string(budget_ > used ? budget_ - used : 0) +
                                              " of " + std::to_string(budget_) + " available");
    } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    void *p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, s);
    if (e == cudaErrorMemoryAllocation)
    {
        (void)cudaGetLastError();
        // Give cached blocks back to the device and try once more.
        cudaStreamSynchronize(s);
        cudaDeviceSynchronize();
        cudaMemPoolTrimTo(pool_, 0);
        e = cudaMallocFromPoolAsync(&p, bytes, pool_, s);
    }
    if (e != cudaSuccess)
    {
        in_use_.fetch_sub(bytes, std::memory_order_relaxed);
        throw_cuda(e, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
    }
    return p;
}

void DevicePool::release(void *p, size_t bytes, cudaStream_t s) noexcept
{
    if (!p)
        return;
    bytes = (bytes + 255) & ~size_t{255};
    cudaFreeAsync(p, s);
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
}

} // namespace vs::cuda
