// The binary16 filter pass on Hopper's warpgroup MMA (`wgmma`; this file is compiled for sm_90a
// alone, gpu/CMakeLists.txt).  The pass of fused_filter.cu's resident kernel (a block keeps 128
// queries in shared memory and streams units of 128-row tiles past them, the next tile copied
// while it works on this one), with the products taken by `wgmma.mma_async` straight from shared
// memory: a warpgroup's 64 x 128 products of a 16-half step are one instruction that reads no
// operand through registers, where `mma.sync` needs sixteen and twelve 16-byte shared loads per
// warp.  The accumulators are 64 floats a thread as before; the epilogue is the same screen.
#include "cuda/impl/fused_common.cuh"
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/async_copy.cuh"
#include "cuda/utils/error.cuh"

#include <algorithm>
#include <atomic>

namespace vs::cuda {

namespace {

constexpr int kTile = 128;                           // queries and rows per tile
constexpr int kChunks = 16;                          // 16-byte pieces of a row of d <= 128 halves
constexpr int kTileBytes = kTile * kChunks * 16;     // 32 KB
constexpr int kThreads = 256;                        // warpgroup w: the tile's queries 64w ..
constexpr size_t kSmemBytes = 3 * size_t{kTileBytes} + 4 * kTile * sizeof(float);

// wgmma's K-major layout without swizzle: core matrices of 8 rows x 16 bytes (128 contiguous
// bytes); a row group's core matrices along K 128 bytes apart (the descriptor's leading byte
// offset), row groups 2 KB apart (its stride byte offset).
constexpr uint32_t kAlongK = 128, kRowGroup = kChunks * 128;

__device__ __forceinline__ uint32_t piece_offset(int row, int chunk)
{
    return (row >> 3) * kRowGroup + chunk * kAlongK + (row & 7) * 16;
}

__device__ __forceinline__ uint64_t smem_desc(uint32_t saddr)
{
    return ((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(kAlongK >> 4) << 16) |
           (static_cast<uint64_t>(kRowGroup >> 4) << 32);
}

// d (+)= A B^T, A: 64 queries x 16 halves, B: 128 rows x 16 halves; accumulate 0 starts the sums.
__device__ __forceinline__ void wgmma_64x128x16(float (&d)[64], uint64_t da, uint64_t db,
                                                int accumulate)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
#endif
}

// After the wait: a new definition of each accumulator, so no read of it moves above the wait.
__device__ __forceinline__ void fence_accumulators(float (&d)[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// The screen of fused_filter.cu's epilogue for a thread's two queries (ql, ql + 8 of the tile)
// and 32 columns: column 8j + 2t + odd holds d[4j + 2h + odd] for query ql + 8h.
template <int Mode>
__device__ __forceinline__ void wgmma_epilogue(const FusedArgs &a, const float (&d)[64],
                                               const float *sx, const float *stv, const float *ys,
                                               int q0, int ql, uint32_t c0, int t)
{
    const uint32_t lim = c0 >= a.n ? 0 : min(static_cast<uint32_t>(kTile), a.n - c0);
    const float tv[2] = {stv[ql], stv[ql + 8]}; // NaN beyond the batch: nothing passes
    const float xv[2] = {sx[ql], sx[ql + 8]};
#pragma unroll
    for (int j = 0; j < 16; j++)
    {
        const uint32_t c = 8 * j + 2 * t;
        const float2 y = Mode == MODE_IP_GEMM ? make_float2(0.0f, 0.0f)
                                              : *reinterpret_cast<const float2 *>(ys + c);
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int odd = 0; odd < 2; odd++)
            {
                const float yc = odd ? y.y : y.x;
                const float val = approx_value(Mode, d[4 * j + 2 * h + odd], xv[h], xv[h], yc, yc);
                if (!(val <= tv[h]) || c + odd >= lim)
                    continue;
                const int q = q0 + ql + 8 * h;
                append_candidate(a, q, a.thr + q, val, c0 + c + odd);
            }
    }
}

template <int Mode>
__global__ void __launch_bounds__(kThreads, 2)
    fused_wgmma_kernel(FusedArgs a, uint32_t unit_tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *const sq = smem;              // the query tile
    unsigned char *const sr = smem + kTileBytes; // two row tiles
    float *const sy = reinterpret_cast<float *>(smem + 3 * kTileBytes); // their ||y||^2 / 1/||y||
    float *const sx = sy + 2 * kTile;            // per query: ||x||^2 or 1/||x||
    float *const stv = sx + kTile;               // per query: the threshold's value
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int chunks = a.d / 8; // d % 8 == 0; a row's other chunks up to 16 are zeros
    const uint4 *xq = static_cast<const uint4 *>(a.x);
    const uint4 *yr = static_cast<const uint4 *>(a.y);
    const float *ycol = row_constants<Mode>(a);
    const int qtiles = (a.qn + kTile - 1) / kTile;
    const uint32_t rtiles = (a.n + kTile - 1) / kTile;
    const long units = static_cast<long>(qtiles) * ((rtiles + unit_tiles - 1) / unit_tiles);
    const uint32_t sq_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sq));
    const uint32_t sr_addr = static_cast<uint32_t>(__cvta_generic_to_shared(sr));

    auto load_tile = [&](unsigned char *dst, const uint4 *src, uint32_t first, uint32_t limit) {
#pragma unroll
        for (int i = 0; i < 8; i++)
        {
            const int piece = tid + i * kThreads; // row piece / 16, chunk piece % 16
            const int row = piece >> 4, c = piece & 15;
            const uint32_t r = first + row;
            const bool ok = c < chunks && r < limit;
            cp_async16(dst + piece_offset(row, c), ok ? src + static_cast<size_t>(r) * chunks + c : src,
                       ok ? 16 : 0);
        }
    };
    auto load_rows = [&](int buf, uint32_t rt) {
        const uint32_t r0 = rt * kTile;
        load_tile(sr + buf * kTileBytes, yr, r0, a.n);
        copy_row_constants(ycol, r0, a.n, sy + buf * kTile, tid);
    };

    float d[64]; // each tile's first step overwrites them (accumulate 0)
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    for (long u = blockIdx.x; u < units; u += gridDim.x)
    {
        const int q0 = static_cast<int>(u % qtiles) * kTile;
        const uint32_t rt0 = static_cast<uint32_t>(u / qtiles) * unit_tiles;
        const uint32_t rt_end = min(rtiles, rt0 + unit_tiles);
        __syncthreads(); // the last unit's epilogue is done with the queries and the buffers
        load_tile(sq, xq, q0, a.qn);
        load_rows(0, rt0);
        cp_async_commit();
        load_query_constants<Mode>(a, q0, sx, stv, tid);
        int buf = 0;
        for (uint32_t rt = rt0; rt < rt_end; rt++, buf ^= 1)
        {
            cp_async_wait<0>();
            // the copies are generic-proxy writes, wgmma reads through the async proxy
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads(); // tile rt is in; every thread is done with tile rt - 1's buffer
            if (rt + 1 < rt_end)
                load_rows(buf ^ 1, rt + 1);
            cp_async_commit();

            const uint32_t qa = sq_addr + (warp >> 2) * 8 * kRowGroup;
            const uint32_t ra = sr_addr + buf * kTileBytes;
            wgmma_fence();
            // 8 steps of 16 halves, also where d < 128 (a loop of d / 16 steps makes ptxas wait
            // between them)
#pragma unroll
            for (int ks = 0; ks < kChunks / 2; ks++)
                wgmma_64x128x16(d, smem_desc(qa + ks * 2 * kAlongK), smem_desc(ra + ks * 2 * kAlongK),
                                ks);
            wgmma_commit();
            wgmma_wait_all();
            fence_accumulators(d);
            wgmma_epilogue<Mode>(a, d, sx, stv, sy + buf * kTile, q0,
                                 (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2), rt * kTile,
                                 lane & 3);
        }
    }
    cp_async_wait<0>();
#else
    __trap(); // launched only where fused_wgmma_runs()
#endif
}

template <int Mode> void launch_as(const FusedArgs &a, cudaStream_t s)
{
    const void *k = reinterpret_cast<const void *>(fused_wgmma_kernel<Mode>);
    set_smem(k, kSmemBytes);
    const long slots =
        static_cast<long>(sm_count()) * std::max(1, blocks_per_sm(k, kThreads, kSmemBytes));
    const long unit_tiles = fused_unit_tiles(a, slots);
    const long qtiles = (a.qn + kTile - 1) / kTile;
    const long rtiles = (static_cast<long>(a.n) + kTile - 1) / kTile;
    const long units = qtiles * ((rtiles + unit_tiles - 1) / unit_tiles);
    fused_wgmma_kernel<Mode><<<static_cast<int>(std::min(units, slots)), kThreads, kSmemBytes, s>>>(
        a, static_cast<uint32_t>(unit_tiles));
    VS_LAUNCH_CHECK();
}

} // namespace

bool fused_wgmma_runs()
{
    constexpr int kDevices = 64;
    static std::atomic<int> cached[kDevices]; // 0 unknown, 1 yes, 2 no
    int dev = 0;
    VS_CUDA_CHECK(cudaGetDevice(&dev));
    int v = dev < kDevices ? cached[dev].load(std::memory_order_relaxed) : 0;
    if (v == 0)
    {
        // an image for the device exists only on sm_90 (this file's sole target, sm_90a)
        cudaFuncAttributes attr;
        const cudaError_t e = cudaFuncGetAttributes(
            &attr, reinterpret_cast<const void *>(fused_wgmma_kernel<MODE_L2_GEMM>));
        if (e != cudaSuccess)
            (void)cudaGetLastError();
        v = e == cudaSuccess ? 1 : 2;
        if (dev < kDevices)
            cached[dev].store(v, std::memory_order_relaxed);
    }
    return v == 1;
}

void launch_fused_wgmma(const FusedArgs &a, cudaStream_t s)
{
    switch (a.mode)
    {
    case MODE_L2_GEMM:
        launch_as<MODE_L2_GEMM>(a, s);
        break;
    case MODE_IP_GEMM:
        launch_as<MODE_IP_GEMM>(a, s);
        break;
    default:
        launch_as<MODE_COS_GEMM>(a, s);
        break;
    }
}

} // namespace vs::cuda
