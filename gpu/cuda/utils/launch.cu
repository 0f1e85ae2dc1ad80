#include "cuda/utils/launch.cuh"

#include "cuda/utils/error.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace vs::cuda {

namespace {

struct Entry
{
    int device;
    const void *kernel;
    int threads;
    size_t bytes;
    int value;
};

// A kernel's dynamic shared memory limit on a device, and its static shared memory.
struct SmemLimit
{
    int device;
    const void *kernel;
    size_t limit;
    size_t static_bytes;
};

std::mutex g_mutex;
std::vector<Entry> g_entries;       // blocks_per_sm
std::vector<SmemLimit> g_limits;    // set_smem: one per kernel and device
constexpr size_t kMaxEntries = 512; // shared memory sizes vary with k: bound the table
constexpr size_t kDefaultSmem = 48u << 10; // a block's shared memory without the opt-in

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
    const int dev = current_device();
    std::lock_guard<std::mutex> lock(g_mutex);
    SmemLimit *lim = nullptr;
    for (SmemLimit &l : g_limits)
        if (l.device == dev && l.kernel == kernel)
        {
            lim = &l;
            break;
        }
    if (!lim)
    {
        cudaFuncAttributes fa{};
        VS_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
        const size_t st = fa.sharedSizeBytes;
        // Without the opt-in a block gets 48 KB in all, static part included: a kernel with
        // static shared memory cannot launch with 48 KB of dynamic memory unless raised.
        const size_t limit = std::min(static_cast<size_t>(fa.maxDynamicSharedSizeBytes),
                                      kDefaultSmem > st ? kDefaultSmem - st : 0);
        g_limits.push_back({dev, kernel, limit, st});
        lim = &g_limits.back();
    }
    if (bytes <= lim->limit)
        return;
    int optin = 0;
    VS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes + lim->static_bytes > static_cast<size_t>(optin))
        throw Error(VS_UNSUPPORTED, "a kernel needs " + std::to_string(bytes) + " + " +
                                        std::to_string(lim->static_bytes) +
                                        " bytes of shared memory; the device allows " +
                                        std::to_string(optin) + " per block");
    VS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    lim->limit = bytes;
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
