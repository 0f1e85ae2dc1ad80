// CUDA / cuBLAS error checking: every failure becomes a vs::Error (VS_OUT_OF_MEMORY for
// allocation failures, VS_DEVICE_ERROR otherwise) carrying the call and its location.
#ifndef VSEARCH_CUDA_UTILS_ERROR_CUH
#define VSEARCH_CUDA_UTILS_ERROR_CUH

#include "engine/backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace vs::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char *what, const char *file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char *what, const char *file, int line);

} // namespace vs::cuda

#define VS_CUDA_CHECK(expr)                                                                       \
    do                                                                                            \
    {                                                                                             \
        cudaError_t vs_e_ = (expr);                                                               \
        if (vs_e_ != cudaSuccess)                                                                 \
            ::vs::cuda::throw_cuda(vs_e_, #expr, __FILE__, __LINE__);                             \
    } while (0)

#define VS_CUBLAS_CHECK(expr)                                                                     \
    do                                                                                            \
    {                                                                                             \
        cublasStatus_t vs_s_ = (expr);                                                            \
        if (vs_s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            ::vs::cuda::throw_cublas(vs_s_, #expr, __FILE__, __LINE__);                           \
    } while (0)

// After every kernel launch.
#define VS_LAUNCH_CHECK() VS_CUDA_CHECK(cudaGetLastError())

#endif
