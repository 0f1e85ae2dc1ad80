// The CUDA backend's device context: the device and its properties, the budgeted memory pool, a
// main stream and two work streams with a cuBLAS handle each, pinned staging buffers and the
// tunables read from the environment; plus the host helpers every pipeline uses (pinned buffers,
// VSEARCH_CUDA_PROFILE timing, joining the work streams).  A CudaBackend has one DeviceContext
// per lane (calls that may run at once; Lanes below), all on one device and sharing one memory
// pool; every pipeline takes the lane its call runs on.
#ifndef VSEARCH_CUDA_DEVICE_CONTEXT_CUH
#define VSEARCH_CUDA_DEVICE_CONTEXT_CUH

#include "cuda/utils/error.cuh"
#include "cuda/utils/memory_pool.cuh"
#include "engine/backend.h"
#include "engine/exact.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace vs::cuda {

// A size from the environment (tunables and test hooks), or dflt when unset or empty.
size_t env_size(const char *name, size_t dflt);

inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

class PinnedBuffer
{
public:
    ~PinnedBuffer()
    {
        if (p_)
            cudaFreeHost(p_);
    }
    void *ensure(size_t bytes)
    {
        if (bytes > cap_)
        {
            const size_t want = std::max(bytes, cap_ * 2);
            if (p_)
                cudaFreeHost(p_);
            p_ = nullptr;
            cap_ = 0;
            VS_CUDA_CHECK(cudaMallocHost(&p_, want));
            cap_ = want;
        }
        return p_;
    }

private:
    void *p_ = nullptr;
    size_t cap_ = 0;
};

// VSEARCH_CUDA_PROFILE=1: synchronise after each phase and print where the time went (it
// serialises the two streams, so totals grow; use it for the split, not the total).
class Profile
{
public:
    Profile()
    {
        const char *p = std::getenv("VSEARCH_CUDA_PROFILE");
        on_ = p && *p && *p != '0';
        t_ = now();
    }
    void mark(const char *phase, cudaStream_t s)
    {
        if (!on_)
            return;
        cudaStreamSynchronize(s);
        double t = now();
        for (auto &e : acc_)
            if (e.first == phase)
            {
                e.second += t - t_;
                t_ = t;
                return;
            }
        acc_.emplace_back(phase, t - t_);
        t_ = t;
    }
    void print(const char *what, size_t nq, size_t k) const
    {
        if (!on_)
            return;
        std::fprintf(stderr, "vsearch profile %s nq=%zu k=%zu:", what, nq, k);
        for (auto &e : acc_)
            std::fprintf(stderr, " %s=%.3fms", e.first.c_str(), e.second * 1e3);
        std::fprintf(stderr, "\n");
    }

private:
    static double now()
    {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    bool on_ = false;
    double t_ = 0;
    std::vector<std::pair<std::string, double>> acc_;
};

// Waits for the work streams before per-call buffers are released (also on exceptions).
struct StreamJoin
{
    cudaStream_t *s;
    int n;
    ~StreamJoin()
    {
        for (int i = 0; i < n; i++)
            cudaStreamSynchronize(s[i]);
    }
};

struct DeviceContext
{
    // A lane with a pool of its own (the first), or sharing another lane's pool.
    explicit DeviceContext(const BackendConfig &config,
                           std::shared_ptr<DevicePool> shared_pool = nullptr);
    ~DeviceContext();
    DeviceContext(const DeviceContext &) = delete;
    DeviceContext &operator=(const DeviceContext &) = delete;

    // Runs f on this device (a backend call's body) holding the lane, turning every exception into
    // a Status.
    template <typename F> Status on_device(F &&f)
    {
        std::lock_guard<std::recursive_mutex> hold(busy);
        return guarded([&] {
            VS_CUDA_CHECK(cudaSetDevice(device));
            // An error an earlier call left in the runtime's per-thread state (every call that
            // failed has reported it already) would otherwise fail this call's first launch check.
            if (cudaError_t stale = cudaGetLastError(); stale != cudaSuccess)
                std::fprintf(stderr, "vsearch cuda: cleared an earlier error: %s\n",
                             cudaGetErrorName(stale));
            f();
        });
    }

    // Runs f with plain fp32 GEMMs (pedantic math and the fp32 rounding bound), then restores
    // the context's TF32 setting, also when f throws.
    template <typename F> auto with_fp32_gemm(F &&f)
    {
        struct Restore
        {
            DeviceContext *self;
            ~Restore()
            {
                self->cfg.gemm_precision = VS_GEMM_TF32;
                for (cublasHandle_t h : self->blas)
                    cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
            }
        } restore{this};
        cfg.gemm_precision = VS_GEMM_FP32;
        for (cublasHandle_t h : blas)
            VS_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
        return f();
    }

    // Orders both work streams after everything queued on main so far, without a host wait.
    void work_after_main()
    {
        VS_CUDA_CHECK(cudaEventRecord(main_done, main));
        for (cudaStream_t w : work)
            VS_CUDA_CHECK(cudaStreamWaitEvent(w, main_done, 0));
    }

    // The rounding bound of this context's GEMMs over a dataset (binary16 rows: half).
    int gemm_kind(bool half) const
    {
        if (half)
            return APPROX_GEMM_F16;
        return cfg.gemm_precision == VS_GEMM_TF32 ? APPROX_GEMM_TF32 : APPROX_GEMM_F32;
    }

    BackendConfig cfg;
    int device;
    cudaDeviceProp prop{};
    std::shared_ptr<DevicePool> pool; // shared by the backend's lanes
    std::recursive_mutex busy;        // held by the call running on this lane
    cudaStream_t main = nullptr;
    cudaStream_t work[2] = {nullptr, nullptr};
    cublasHandle_t blas[2] = {nullptr, nullptr};
    PinnedBuffer pinned[2];
    size_t tile_bytes = 0;
    int small_batch = -1; // VSEARCH_CUDA_SMALL_BATCH (benchmarks); -1: the measured defaults
    // Most queries of a kNN batch the direct path takes at dimension d, from the crossovers
    // measured on an H200 (docs/ENGINE.md): at 1M x 128 the rows kernels win up to ~20 queries
    // and lose at 32 (0.47 against 0.36 ms by TF32 GEMM), but through the worker batches of 10-30
    // served faster by them than by the GEMM path (36 700 against 39 200 QPS at 32 clients); at
    // 60 000 x 784 the GEMM path wins from one query (0.16 against 0.19 ms; 16 queries 0.18
    // against 0.29).
    int small_batch_for(size_t d) const
    {
        return small_batch >= 0 ? small_batch : (d <= 128 ? 32 : 0);
    }
    // Most queries of a TF32 context's kNN batch that may take the fp32 GEMM at once (knn.cu:
    // only above kFp32MinDim dimensions); VSEARCH_CUDA_FP32_BATCH (benchmarks).
    size_t fp32_gemm_batch = 64;
    // Fewest queries of a GEMM-path batch that take the fused kernel (fused_filter.cu); below it
    // cuBLAS and the tile; VSEARCH_CUDA_FUSED_BATCH (tests, benchmarks).
    size_t fused_batch = 256;
    // Row tiles a block of the binary16 filter pass takes at once (fused_filter.cu); 0: its own
    // choice; VSEARCH_CUDA_FUSED_UNIT_TILES (tests: several units on a small set).
    size_t fused_unit_tiles = 0;
    // The binary16 filter pass on wgmma where the device runs it (sm_90); VSEARCH_CUDA_FUSED_WGMMA=0
    // takes the mma.sync kernel (tests, benchmarks).
    bool fused_wgmma = true;
    // Most queries of a range batch the direct path takes.
    int range_small_batch() const { return small_batch >= 0 ? small_batch : 32; }
    size_t smem_optin = 48 << 10;
    size_t stats_gemm_failed = 0, stats_fp32_failed = 0, stats_exact = 0; // VSEARCH_CUDA_STATS
    // The queries' upload buffer (pinned: a pageable copy costs ~1 us per 784-float query) and
    // the event after its last copy, which the next upload waits for before writing it.
    PinnedBuffer staging;
    cudaEvent_t staging_copied = nullptr;
    cudaEvent_t main_done = nullptr; // work_after_main
    size_t range_cap = 0; // range candidates per buffer (0: from the budget; tests make it small)
};

// The lanes of a backend: one DeviceContext each on one device, sharing the first one's pool.
class Lanes
{
public:
    explicit Lanes(const BackendConfig &cfg)
    {
        lanes_.push_back(std::make_unique<DeviceContext>(cfg));
        for (int i = 1; i < cfg.lanes; i++)
            lanes_.push_back(std::make_unique<DeviceContext>(cfg, lanes_[0]->pool));
    }
    int size() const { return static_cast<int>(lanes_.size()); }
    DeviceContext &first() { return *lanes_[0]; }

    // Runs f(lane) on a free lane, turning exceptions into a Status; when every lane is busy,
    // waits for one in turn.
    template <typename F> Status run(F &&f)
    {
        for (auto &lane : lanes_)
        {
            std::unique_lock<std::recursive_mutex> free(lane->busy, std::try_to_lock);
            if (free.owns_lock())
                return lane->on_device([&] { f(*lane); });
        }
        DeviceContext &lane = *lanes_[next_wait_++ % lanes_.size()];
        return lane.on_device([&] { f(lane); });
    }

private:
    std::vector<std::unique_ptr<DeviceContext>> lanes_;
    std::atomic<unsigned> next_wait_{0};
};

} // namespace vs::cuda

#endif
