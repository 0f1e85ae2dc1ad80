// Kernel launch attributes, cached: a kernel's shared memory limit (and raising it) and how many
// of its blocks fit on an SM are host calls, and a small batch's latency path would otherwise pay
// them on every call.
#ifndef VSEARCH_CUDA_UTILS_LAUNCH_CUH
#define VSEARCH_CUDA_UTILS_LAUNCH_CUH

#include <cuda_runtime.h>

#include <cstddef>

namespace vs::cuda {

// Lets `kernel` (a __global__ function's address) launch with `bytes` of dynamic shared memory on
// the current device: raises the kernel's limit when `bytes` is above it, which without the
// opt-in is 48 KB less the kernel's static shared memory (so below 48 KB too for a kernel with
// static shared memory).  Throws VS_UNSUPPORTED when static and dynamic memory together exceed
// the device's maximum per block.
void set_smem(const void *kernel, size_t bytes);

// Streaming multiprocessors of the current device (cached).
int sm_count();

// Resident blocks of `threads` threads and `bytes` of dynamic shared memory per SM (after
// set_smem), on the current device.
int blocks_per_sm(const void *kernel, int threads, size_t bytes);

// Launches `kernel` so that it may start while the stream's previous kernel is finishing
// (programmatic dependent launch, sm_90+; a plain launch on older devices).  The kernel must call
// grid_dependency_wait() before it touches anything the earlier work writes.
void launch_dependent(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                      void **params);

#ifdef __CUDACC__
// Waits until the previous kernel of the stream has completed and its writes are visible (a
// no-op unless launched by launch_dependent on sm_90+).
__device__ __forceinline__ void grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the stream's next kernel (launched by launch_dependent) start now, its prologue overlapping
// the rest of this one; its grid_dependency_wait still waits for all of this kernel.
__device__ __forceinline__ void grid_dependents_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}
#endif

} // namespace vs::cuda

#endif
