// The CUDA backend's device context: device, pool, streams and cuBLAS handles, created and
// released in one place.
#include "cuda/device_context.cuh"

namespace vs::cuda {

size_t env_size(const char *name, size_t dflt)
{
    const char *v = std::getenv(name);
    if (!v || !*v)
        return dflt;
    return static_cast<size_t>(std::strtoull(v, nullptr, 10));
}

DeviceContext::DeviceContext(const BackendConfig &config, std::shared_ptr<DevicePool> shared_pool)
    : cfg(config), device(config.device), pool(std::move(shared_pool))
{
    VS_CUDA_CHECK(cudaSetDevice(device));
    VS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (!pool)
    {
        size_t free_b = 0, total_b = 0;
        VS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        size_t budget =
            config.device_memory_budget ? config.device_memory_budget : free_b / 10 * 9;
        pool = std::make_shared<DevicePool>(device, budget);
    }
    VS_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++)
    {
        VS_CUDA_CHECK(cudaStreamCreateWithFlags(&work[i], cudaStreamNonBlocking));
        VS_CUBLAS_CHECK(cublasCreate(&blas[i]));
        VS_CUBLAS_CHECK(cublasSetStream(blas[i], work[i]));
        VS_CUBLAS_CHECK(cublasSetMathMode(blas[i], config.gemm_precision == VS_GEMM_TF32
                                                       ? CUBLAS_TF32_TENSOR_OP_MATH
                                                       : CUBLAS_PEDANTIC_MATH));
    }
    VS_CUDA_CHECK(cudaEventCreateWithFlags(&staging_copied, cudaEventDisableTiming));
    VS_CUDA_CHECK(cudaEventCreateWithFlags(&main_done, cudaEventDisableTiming));
    tile_bytes = env_size("VSEARCH_CUDA_TILE_BYTES", size_t{1} << 30);
    range_cap = env_size("VSEARCH_CUDA_RANGE_CAP", 0);
    fp32_gemm_batch = env_size("VSEARCH_CUDA_FP32_BATCH", 64);
    fused_batch = env_size("VSEARCH_CUDA_FUSED_BATCH", 256);
    fused_unit_tiles = env_size("VSEARCH_CUDA_FUSED_UNIT_TILES", 0);
    fused_wgmma = env_size("VSEARCH_CUDA_FUSED_WGMMA", 1) != 0;
    if (const char *v = std::getenv("VSEARCH_CUDA_SMALL_BATCH"); v && *v)
        small_batch = static_cast<int>(std::strtol(v, nullptr, 10));
    smem_optin = prop.sharedMemPerBlockOptin;
}

DeviceContext::~DeviceContext()
{
    cudaSetDevice(device);
    cudaDeviceSynchronize();
    for (int i = 0; i < 2; i++)
    {
        if (blas[i])
            cublasDestroy(blas[i]);
        if (work[i])
            cudaStreamDestroy(work[i]);
    }
    if (main)
        cudaStreamDestroy(main);
    if (staging_copied)
        cudaEventDestroy(staging_copied);
    if (main_done)
        cudaEventDestroy(main_done);
    pool.reset();
}

} // namespace vs::cuda
