#include "cuda/utils/launch.cuh"

#include "cuda/utils/error.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace vs::cuda {

namespace {

struct Entry
{
    int device;
    const void *kernel;
    int threads;   // 0: the shared memory opt-in
    size_t bytes;
    int value;
};

std::mutex g_mutex;
std::vector<Entry> g_entries;
constexpr size_t kMaxEntries = 512; // shared memory sizes vary with k: bound the table

int current_device()
{
    int dev = 0;
    VS_CUDA_CHECK(cudaGetDevice(&dev));
    return dev;
}

} // namespace

int sm_count()
{
    constexpr int kDevices = 64;
    static std::atomic<int> cached[kDevices];
    const int dev = current_device();
    if (dev >= kDevices)
    {
        int n = 0;
        VS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
        return n;
    }
    int n = cached[dev].load(std::memory_order_relaxed);
    if (n == 0)
    {
        VS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
        cached[dev].store(n, std::memory_order_relaxed);
    }
    return n;
}

void set_smem(const void *kernel, size_t bytes)
{
    if (bytes <= (48u << 10))
        return;
    const int dev = current_device();
    std::lock_guard<std::mutex> lock(g_mutex);
    for (Entry &e : g_entries)
        if (e.device == dev && e.kernel == kernel && e.threads == 0)
        {
            if (e.bytes >= bytes)
                return;
            VS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)));
            e.bytes = bytes;
            return;
        }
    VS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    g_entries.push_back({dev, kernel, 0, bytes, 0});
}

int blocks_per_sm(const void *kernel, int threads, size_t bytes)
{
    const int dev = current_device();
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        for (const Entry &e : g_entries)
            if (e.device == dev && e.kernel == kernel && e.threads == threads && e.bytes == bytes)
                return e.value;
    }
    int blocks = 0;
    VS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, bytes));
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_entries.size() < kMaxEntries)
        g_entries.push_back({dev, kernel, threads, bytes, blocks});
    return blocks;
}

void launch_dependent(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                      void **params)
{
    constexpr int kCached = 64;
    static std::atomic<int> major[kCached]; // per device: compute capability, 0 until asked
    const int dev = current_device();
    int cc = dev < kCached ? major[dev].load(std::memory_order_relaxed) : 0;
    if (cc == 0)
    {
        VS_CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
        if (dev < kCached)
            major[dev].store(cc, std::memory_order_relaxed);
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    // VSEARCH_CUDA_PDL=0: plain launches (to measure the overlap, or to rule it out).
    static const bool pdl = [] {
        const char *v = std::getenv("VSEARCH_CUDA_PDL");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    if (cc >= 9 && pdl)
    {
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    VS_CUDA_CHECK(cudaLaunchKernelExC(&cfg, kernel, params));
}

} // namespace vs::cuda
