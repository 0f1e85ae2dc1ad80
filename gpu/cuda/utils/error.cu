#include "cuda/utils/error.cuh"

#include <string>

namespace vs::cuda {

void throw_cuda(cudaError_t e, const char *what, const char *file, int line)
{
    std::string msg = std::string("CUDA error ") + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ") in " + what + " at " + file + ":" +
                      std::to_string(line);
    (void)cudaGetLastError(); // reported here: clear it (a sticky error stays regardless)
    if (e == cudaErrorMemoryAllocation)
        throw Error(VS_OUT_OF_MEMORY, "out of device memory: " + msg);
    throw Error(VS_DEVICE_ERROR, msg);
}

void throw_cublas(cublasStatus_t s, const char *what, const char *file, int line)
{
    std::string msg = std::string("cuBLAS error ") + cublasGetStatusName(s) + " in " + what +
                      " at " + file + ":" + std::to_string(line);
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        throw Error(VS_OUT_OF_MEMORY, msg);
    throw Error(VS_DEVICE_ERROR, msg);
}

} // namespace vs::cuda
