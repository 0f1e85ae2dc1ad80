// Device memory with a byte budget: a private stream-ordered pool (cudaMallocFromPoolAsync) that
// keeps freed memory cached for reuse, plus the engine's own accounting so that exceeding the
// budget is a clean VS_OUT_OF_MEMORY, never an abort.  DeviceArray<T> is the RAII handle.
#ifndef VSEARCH_CUDA_UTILS_MEMORY_POOL_CUH
#define VSEARCH_CUDA_UTILS_MEMORY_POOL_CUH

#include "cuda/utils/error.cuh"

#include <atomic>
#include <cstddef>
#include <utility>

namespace vs::cuda {

class DevicePool
{
public:
    DevicePool(int device, size_t budget);
    ~DevicePool();
    DevicePool(const DevicePool &) = delete;
    DevicePool &operator=(const DevicePool &) = delete;

    // bytes on stream s (stream ordered); throws Error(VS_OUT_OF_MEMORY).  The lanes of a backend
    // share one pool and may allocate at once: the budget is reserved atomically.
    void *allocate(size_t bytes, cudaStream_t s);
    void release(void *p, size_t bytes, cudaStream_t s) noexcept;
    size_t budget() const { return budget_; }
    size_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
    size_t available() const
    {
        const size_t used = in_use();
        return budget_ > used ? budget_ - used : 0;
    }

private:
    cudaMemPool_t pool_ = nullptr;
    size_t budget_;
    std::atomic<size_t> in_use_{0};
};

template <typename T> class DeviceArray
{
public:
    DeviceArray() = default;
    DeviceArray(DevicePool &pool, size_t n, cudaStream_t s) : pool_(&pool), n_(n), stream_(s)
    {
        ptr_ = static_cast<T *>(pool.allocate(n * sizeof(T), s));
    }
    ~DeviceArray() { reset(); }
    DeviceArray(DeviceArray &&o) noexcept { swap(o); }
    DeviceArray &operator=(DeviceArray &&o) noexcept
    {
        if (this != &o)
        {
            reset();
            swap(o);
        }
        return *this;
    }
    void reset() noexcept
    {
        if (ptr_)
            pool_->release(ptr_, n_ * sizeof(T), stream_);
        ptr_ = nullptr;
        n_ = 0;
    }
    T *get() const { return ptr_; }
    size_t size() const { return n_; }
    size_t bytes() const { return n_ * sizeof(T); }

private:
    void swap(DeviceArray &o) noexcept
    {
        std::swap(pool_, o.pool_);
        std::swap(ptr_, o.ptr_);
        std::swap(n_, o.n_);
        std::swap(stream_, o.stream_);
    }
    DevicePool *pool_ = nullptr;
    T *ptr_ = nullptr;
    size_t n_ = 0;
    cudaStream_t stream_ = nullptr;
};

} // namespace vs::cuda

#endif
