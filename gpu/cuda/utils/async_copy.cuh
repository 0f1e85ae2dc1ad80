// Asynchronous global -> shared copies (cp.async, sm_80+): the copy bypasses registers, so a
// block can keep several stages of a stream in flight while it computes on an earlier one.
#ifndef VSEARCH_CUDA_UTILS_ASYNC_COPY_CUH
#define VSEARCH_CUDA_UTILS_ASYNC_COPY_CUH

namespace vs::cuda {

// 16 bytes to shared `dst` (16-byte aligned) from global `src`: the first src_bytes (0 .. 16) are
// read, the rest zero-filled (src must be a mapped address even when nothing is read).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes)
                 : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace vs::cuda

#endif
