// Kernel launch attributes, cached: opting a kernel in to more than 48 KB of dynamic shared memory
// and asking how many of its blocks fit on an SM are host calls, and a small batch's latency path
// would otherwise pay them on every call.
#ifndef VSEARCH_CUDA_UTILS_LAUNCH_CUH
#define VSEARCH_CUDA_UTILS_LAUNCH_CUH

#include <cstddef>

namespace vs::cuda {

// Lets `kernel` (a __global__ function's address) launch with `bytes` of dynamic shared memory on
// the current device.
void set_smem(const void *kernel, size_t bytes);

// Resident blocks of `threads` threads and `bytes` of dynamic shared memory per SM (after
// set_smem), on the current device.
int blocks_per_sm(const void *kernel, int threads, size_t bytes);

} // namespace vs::cuda

#endif
