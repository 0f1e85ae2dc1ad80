// The GEMM and the threshold filter in one kernel, for large kNN batches: tensor-core products of
// a query tile against the dataset (TF32 over float rows, binary16 over binary16 rows, fp32
// accumulation, mma.sync), and in the epilogue each product becomes its approximate key and is
// compared with the query's sampled threshold; only the keys below it leave the SM.  The tile of
// products that the cuBLAS path writes and reads back (40 GB for 10 000 x 1M) never exists.
//
// Block tile: 128 queries x 128 rows, 8 warps of 64 x 32, K in stages of 128 bytes per row
// (32 floats or 64 halves) streamed to shared memory by cp.async, three stages in flight.  Which
// dimension feeds which slot of an mma is free as long as the queries and the rows agree, so a
// thread's slots of four consecutive k-steps are eight consecutive words of the row: two 16-byte
// shared loads (a row stride of 36 words keeps them free of bank conflicts) instead of sixteen
// scalar ones.  The summation order differs from cuBLAS's; the error bounds (engine/exact.h,
// APPROX_GEMM_TF32 for truncated TF32 operands, APPROX_GEMM_F16) hold for any order.
//
// The filter pass over binary16 rows has a kernel of its own (fused_half_resident_kernel below:
// the query tile stays, row tiles stream past it) and, on sm_90, a wgmma one
// (fused_filter_sm90a.cu); the sample's pass and float rows take fused_kernel.
#include "cuda/impl/fused_common.cuh"
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/async_copy.cuh"
#include "cuda/utils/error.cuh"

#include <algorithm>

namespace vs::cuda {

namespace {

constexpr int kBQ = 128, kBN = 128;   // queries and rows per block tile
constexpr int kStageWords = 32;       // 128 bytes of each row per stage
constexpr int kLdw = kStageWords + 4; // shared row stride in words
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr size_t kSmemBytes = static_cast<size_t>(kStages) * (kBQ + kBN) * kLdw * 4;

// c += a b for one 16 x 8 tile: k = 8 TF32 values (float bits, the low mantissa bits ignored) or
// k = 16 binary16 values (two a register).
template <bool Half>
__device__ __forceinline__ void mma(float &c0, float &c1, float &c2, float &c3, uint32_t a0,
                                    uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    if constexpr (Half)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Dataset row of tile column c: the sample's runs of 32 rows (chunks > 0) or the rows themselves.
__device__ __forceinline__ uint32_t column_row(const FusedArgs &a, uint32_t c)
{
    if (a.chunks == 0)
        return c;
    const uint32_t run = c >> 5;
    return (static_cast<uint32_t>(static_cast<uint64_t>(run) * a.n / a.chunks) & ~31u) + (c & 31u);
}

// A warp tile's products become keys: into the sample's keys (Sample), or appended to their
// query's candidates when below its threshold.  qb: this thread's first query; cw: the warp's
// first column (its 32 columns are one run of rows from rw on: the sample's runs are 32 rows);
// the thread's columns are cw + ni*8 + 2t (+1).  Almost every product fails the float compare
// with the threshold's value, which takes three instructions; the rest runs for the few below.
template <bool Sample, int Mode>
__device__ __forceinline__ void epilogue(const FusedArgs &a, const float (&acc)[4][4][4], int qb,
                                         uint32_t cw, uint32_t rw, int t)
{
    // columns cw + off with off < lim exist (in the tile and in the set)
    const uint32_t lim = cw >= a.cols || rw >= a.n ? 0 : min(a.cols - cw, a.n - rw);
    float ycol[4][2]; // ||y||^2 (L2) or 1/||y|| (cosine) of the thread's columns
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
        for (int odd = 0; odd < 2; odd++)
        {
            const uint32_t off = ni * 8 + 2 * t + odd;
            ycol[ni][odd] = off >= lim                 ? 0.0f
                            : Mode == MODE_L2_GEMM  ? a.ysq[rw + off]
                            : Mode == MODE_COS_GEMM ? a.yinv[rw + off]
                                                    : 0.0f;
        }
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
        {
            const int q = qb + mi * 16 + 8 * hf;
            if (q >= a.qn)
                continue;
            const float xs = Mode == MODE_L2_GEMM ? a.xsq[q] : 0.0f;
            const float xi = Mode == MODE_COS_GEMM ? a.xinv[q] : 0.0f;
            if constexpr (Sample)
            {
                uint64_t *out = a.keys + static_cast<size_t>(q) * a.cols + cw + 2 * t;
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int odd = 0; odd < 2; odd++)
                    {
                        const uint32_t off = ni * 8 + 2 * t + odd;
                        if (cw + off < a.cols)
                            out[ni * 8 + odd] =
                                off < lim
                                    ? make_key(approx_value(Mode, acc[mi][ni][2 * hf + odd], xs, xi,
                                                            ycol[ni][odd], ycol[ni][odd]),
                                               rw + off)
                                    : kNoKey;
                    }
            }
            else
            {
                const uint64_t T = a.thr[q];
                const float tval = key_dist(T); // NaN (no threshold): nothing passes
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int odd = 0; odd < 2; odd++)
                    {
                        const float val = approx_value(Mode, acc[mi][ni][2 * hf + odd], xs, xi,
                                                       ycol[ni][odd], ycol[ni][odd]);
                        const uint32_t off = ni * 8 + 2 * t + odd;
                        if (val <= tval && off < lim)
                            append_candidate(a, q, &T, val, rw + off);
                    }
            }
        }
}

template <bool Sample>
__device__ __forceinline__ void epilogue_for(const FusedArgs &a, const float (&acc)[4][4][4],
                                             int qb, uint32_t cw, int t)
{
    const uint32_t rw = cw < a.cols ? column_row(a, cw) : 0;
    switch (a.mode)
    {
    case MODE_L2_GEMM:
        epilogue<Sample, MODE_L2_GEMM>(a, acc, qb, cw, rw, t);
        break;
    case MODE_IP_GEMM:
        epilogue<Sample, MODE_IP_GEMM>(a, acc, qb, cw, rw, t);
        break;
    default:
        epilogue<Sample, MODE_COS_GEMM>(a, acc, qb, cw, rw, t);
        break;
    }
}

template <bool Half> __global__ void __launch_bounds__(kThreads, 2) fused_kernel(FusedArgs a)
{
    extern __shared__ __align__(16) uint32_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wq = warp >> 2, wn = warp & 3; // the warp's 64 queries and 32 rows of the tile
    const int words = Half ? a.d / 2 : a.d;  // 32-bit words per row
    const int ktiles = (words + kStageWords - 1) / kStageWords;
    const uint32_t *xq = static_cast<const uint32_t *>(a.x);
    const uint32_t *yr = static_cast<const uint32_t *>(a.y);
    const int qtiles = (a.qn + kBQ - 1) / kBQ;
    const long ntiles = static_cast<long>(qtiles) * ((a.cols + kBN - 1) / kBN);

    // Blocks that run together share a row tile (query tiles vary fastest): the rows come from
    // DRAM once and from L2 for the other query tiles.
    for (long tile = blockIdx.x; tile < ntiles; tile += gridDim.x)
    {
        const int q0 = static_cast<int>(tile % qtiles) * kBQ;
        const uint32_t c0 = static_cast<uint32_t>(tile / qtiles) * kBN;

        // Each thread copies 4 of the query tile's and 4 of the row tile's 1 024 16-byte pieces a
        // stage; a row beyond the batch or the set, or words beyond d, read as zeros.
        // Piece i of this thread is row tid / 8 + 32 i of the tile: run c0 / 32 + i of the columns.
        uint32_t piece_row[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
        {
            const uint32_t c = c0 + (tid >> 3) + 32 * i;
            piece_row[i] = c < a.cols ? column_row(a, c) : a.n;
        }
        auto load_stage = [&](int buf, int kt) {
            uint32_t *sq = smem + static_cast<size_t>(buf) * (kBQ + kBN) * kLdw;
            uint32_t *sr = sq + kBQ * kLdw;
#pragma unroll
            for (int i = 0; i < 4; i++)
            {
                const int piece = tid + i * kThreads; // 0 .. 1023
                const int row = piece >> 3, w = (piece & 7) * 4;
                const int kw = kt * kStageWords + w;
                const bool in_k = kw < words;
                const int q = q0 + row;
                const bool qok = in_k && q < a.qn;
                cp_async16(sq + row * kLdw + w,
                           qok ? xq + static_cast<size_t>(q) * words + kw : xq, qok ? 16 : 0);
                const uint32_t r = piece_row[i];
                const bool rin = in_k && r < a.n;
                cp_async16(sr + row * kLdw + w,
                           rin ? yr + static_cast<size_t>(r) * words + kw : yr, rin ? 16 : 0);
            }
        };

        float acc[4][4][4];
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[mi][ni][e] = 0.0f;

#pragma unroll
        for (int s = 0; s < kStages - 1; s++)
        {
            if (s < ktiles)
                load_stage(s, s);
            cp_async_commit();
        }
        for (int kt = 0; kt < ktiles; kt++)
        {
            cp_async_wait<kStages - 2>();
            __syncthreads();
            const int next = kt + kStages - 1;
            if (next < ktiles)
                load_stage(next % kStages, next);
            cp_async_commit();
            const uint32_t *sq = smem + static_cast<size_t>(kt % kStages) * (kBQ + kBN) * kLdw;
            const uint32_t *sr = sq + kBQ * kLdw;
            // Words 8t + 4h .. 8t + 4h + 3 of a row hold this thread's slots for k-steps 2h and
            // 2h + 1: slot t of step s is word 8t + 2s, slot t + 4 word 8t + 2s + 1.
#pragma unroll
            for (int h = 0; h < 2; h++)
            {
                uint4 b[4];
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    b[ni] = *reinterpret_cast<const uint4 *>(sr + (wn * 32 + ni * 8 + g) * kLdw +
                                                             8 * t + 4 * h);
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
                {
                    const int qr = wq * 64 + mi * 16 + g;
                    const uint32_t *at = sq + qr * kLdw + 8 * t + 4 * h;
                    const uint4 lo = *reinterpret_cast<const uint4 *>(at);
                    const uint4 hi = *reinterpret_cast<const uint4 *>(at + 8 * kLdw);
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
                    {
                        float *c = acc[mi][ni];
                        mma<Half>(c[0], c[1], c[2], c[3], lo.x, hi.x, lo.y, hi.y, b[ni].x, b[ni].y);
                        mma<Half>(c[0], c[1], c[2], c[3], lo.z, hi.z, lo.w, hi.w, b[ni].z, b[ni].w);
                    }
                }
            }
        }
        cp_async_wait<0>();
        __syncthreads(); // the next tile's copies overwrite these stages

        // Epilogue: acc[mi][ni][e] is the product of query wq*64 + mi*16 + g (+8 for e >= 2) and
        // column wn*32 + ni*8 + 2t (+1 for odd e).
        if (a.keys)
            epilogue_for<true>(a, acc, q0 + wq * 64 + g, c0 + wn * 32, t);
        else
            epilogue_for<false>(a, acc, q0 + wq * 64 + g, c0 + wn * 32, t);
    }
}

// The filter pass over binary16 rows with the query tile resident: a block keeps its 128 queries
// (the whole of d <= 128, 34 KB) and their constants in shared memory for a unit of consecutive
// row tiles, and copies the next row tile while it multiplies and filters the current one.  A
// row tile is 32 KB from L2 instead of the 64 KB of a query and a row tile, and the copies never
// stop for an epilogue.  Units go round-robin over the blocks with the query tiles varying
// fastest, so the blocks that run together read the same rows (from DRAM once).
constexpr int kHalfLdw = 64 + 4; // words of a whole binary16 row (d <= 128) + 4, as kLdw
constexpr int kHalfTileWords = kBQ * kHalfLdw;
constexpr size_t kHalfSmemBytes = (3 * static_cast<size_t>(kHalfTileWords) + 2 * kBN + 2 * kBQ) * 4;

template <int Mode>
__device__ __forceinline__ void resident_epilogue(const FusedArgs &a, const float (&acc)[4][4][4],
                                                  const float *sx, const float *stv,
                                                  const float *sy, int q0, int ql, int cl,
                                                  uint32_t cw, int t)
{
    const uint32_t lim = cw >= a.n ? 0 : min(32u, a.n - cw); // columns cw + off < lim exist
    float ycol[4][2];
#pragma unroll
    for (int ni = 0; ni < 4; ni++)
#pragma unroll
        for (int odd = 0; odd < 2; odd++)
            ycol[ni][odd] = Mode == MODE_IP_GEMM ? 0.0f : sy[cl + ni * 8 + 2 * t + odd];
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
        {
            const int qi = ql + mi * 16 + 8 * hf;
            const float tval = stv[qi]; // NaN beyond the batch: nothing passes
            const float xs = sx[qi];
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int odd = 0; odd < 2; odd++)
                {
                    const float val = approx_value(Mode, acc[mi][ni][2 * hf + odd], xs, xs,
                                                   ycol[ni][odd], ycol[ni][odd]);
                    const uint32_t off = ni * 8 + 2 * t + odd;
                    if (!(val <= tval) || off >= lim)
                        continue;
                    const uint64_t thr = a.thr[q0 + qi];
                    append_candidate(a, q0 + qi, &thr, val, cw + off);
                }
        }
}

template <int Mode>
__global__ void __launch_bounds__(kThreads, 2) fused_half_resident_kernel(FusedArgs a,
                                                                           uint32_t unit_tiles)
{
    extern __shared__ __align__(16) uint32_t smem[];
    uint32_t *const sq = smem;                        // the query tile
    uint32_t *const sr = sq + kHalfTileWords;         // two row tiles
    float *const sy = reinterpret_cast<float *>(sr + 2 * kHalfTileWords); // their ||y||^2 / 1/||y||
    float *const sx = sy + 2 * kBN;                   // per query: ||x||^2 or 1/||x||
    float *const stv = sx + kBQ;                      // per query: the threshold's value
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wq = warp >> 2, wn = warp & 3;
    const int words = a.d / 2;                        // d % 8 == 0: 16-byte pieces
    const int kwords = words > 32 ? 64 : 32;          // words multiplied (zeros beyond d)
    const uint32_t *xq = static_cast<const uint32_t *>(a.x);
    const uint32_t *yr = static_cast<const uint32_t *>(a.y);
    const float *ycol = row_constants<Mode>(a);
    const int qtiles = (a.qn + kBQ - 1) / kBQ;
    const uint32_t rtiles = (a.n + kBN - 1) / kBN;
    const long units = static_cast<long>(qtiles) * ((rtiles + unit_tiles - 1) / unit_tiles);

    // 128 rows x kwords words of src (row `first` on, `limit` rows exist) into dst, in 16-byte
    // pieces, zeros beyond the rows or d.
    auto load_tile = [&](uint32_t *dst, const uint32_t *src, uint32_t first, uint32_t limit) {
#pragma unroll
        for (int i = 0; i < 8; i++)
        {
            const int piece = tid + i * kThreads; // 0 .. 2047: row piece / 16, word (piece % 16) * 4
            const int row = piece >> 4, w = (piece & 15) * 4;
            if (w >= kwords)
                continue;
            const uint32_t r = first + row;
            const bool ok = w < words && r < limit;
            cp_async16(dst + row * kHalfLdw + w, ok ? src + static_cast<size_t>(r) * words + w : src,
                       ok ? 16 : 0);
        }
    };
    auto load_rows = [&](int buf, uint32_t rt) {
        const uint32_t r0 = rt * kBN;
        load_tile(sr + buf * kHalfTileWords, yr, r0, a.n);
        copy_row_constants(ycol, r0, a.n, sy + buf * kBN, tid);
    };

    for (long u = blockIdx.x; u < units; u += gridDim.x)
    {
        const int q0 = static_cast<int>(u % qtiles) * kBQ;
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
            __syncthreads(); // tile rt is in; every thread is done with tile rt - 1's buffer
            if (rt + 1 < rt_end)
                load_rows(buf ^ 1, rt + 1);
            cp_async_commit();

            const uint32_t *rows = sr + buf * kHalfTileWords;
            float acc[4][4][4];
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[mi][ni][e] = 0.0f;
            // A thread's slots as in fused_kernel: words 8t + 4h .. 8t + 4h + 3 of each 32.
            for (int k0 = 0; k0 < kwords; k0 += 32)
#pragma unroll
                for (int h = 0; h < 2; h++)
                {
                    const int w = k0 + 8 * t + 4 * h;
                    uint4 b[4];
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
                        b[ni] = *reinterpret_cast<const uint4 *>(
                            rows + (wn * 32 + ni * 8 + g) * kHalfLdw + w);
#pragma unroll
                    for (int mi = 0; mi < 4; mi++)
                    {
                        const uint32_t *at = sq + (wq * 64 + mi * 16 + g) * kHalfLdw + w;
                        const uint4 lo = *reinterpret_cast<const uint4 *>(at);
                        const uint4 hi = *reinterpret_cast<const uint4 *>(at + 8 * kHalfLdw);
#pragma unroll
                        for (int ni = 0; ni < 4; ni++)
                        {
                            float *c = acc[mi][ni];
                            mma<true>(c[0], c[1], c[2], c[3], lo.x, hi.x, lo.y, hi.y, b[ni].x,
                                      b[ni].y);
                            mma<true>(c[0], c[1], c[2], c[3], lo.z, hi.z, lo.w, hi.w, b[ni].z,
                                      b[ni].w);
                        }
                    }
                }
            resident_epilogue<Mode>(a, acc, sx, stv, sy + buf * kBN, q0, wq * 64 + g, wn * 32,
                                    rt * kBN + wn * 32, t);
        }
    }
    cp_async_wait<0>();
}

template <int Mode> void launch_half_resident_as(const FusedArgs &a, cudaStream_t s)
{
    const void *k = reinterpret_cast<const void *>(fused_half_resident_kernel<Mode>);
    set_smem(k, kHalfSmemBytes);
    const long slots =
        static_cast<long>(sm_count()) * std::max(1, blocks_per_sm(k, kThreads, kHalfSmemBytes));
    const long qtiles = (a.qn + kBQ - 1) / kBQ;
    const long rtiles = (static_cast<long>(a.n) + kBN - 1) / kBN;
    const long unit_tiles = fused_unit_tiles(a, slots);
    const long units = qtiles * ((rtiles + unit_tiles - 1) / unit_tiles);
    fused_half_resident_kernel<Mode><<<static_cast<int>(std::min(units, slots)), kThreads,
                                       kHalfSmemBytes, s>>>(a, static_cast<uint32_t>(unit_tiles));
    VS_LAUNCH_CHECK();
}

// The epilogue per metric is its own kernel: one with the three kept live through a switch spills.
void launch_half_resident(const FusedArgs &a, cudaStream_t s)
{
    switch (a.mode)
    {
    case MODE_L2_GEMM:
        launch_half_resident_as<MODE_L2_GEMM>(a, s);
        break;
    case MODE_IP_GEMM:
        launch_half_resident_as<MODE_IP_GEMM>(a, s);
        break;
    default:
        launch_half_resident_as<MODE_COS_GEMM>(a, s);
        break;
    }
}

template <bool Half> void launch_fused_as(const FusedArgs &a, cudaStream_t s)
{
    const void *k = reinterpret_cast<const void *>(fused_kernel<Half>);
    set_smem(k, kSmemBytes);
    const long tiles = static_cast<long>((a.qn + kBQ - 1) / kBQ) * ((a.cols + kBN - 1) / kBN);
    const long grid = std::min<long>(
        tiles, static_cast<long>(sm_count()) * std::max(1, blocks_per_sm(k, kThreads, kSmemBytes)));
    fused_kernel<Half><<<static_cast<int>(grid), kThreads, kSmemBytes, s>>>(a);
    VS_LAUNCH_CHECK();
}

} // namespace

long fused_unit_tiles(const FusedArgs &a, long slots)
{
    if (a.unit_tiles)
        return a.unit_tiles;
    // About 16 units a block: the last round leaves few blocks idle, and a unit's query tile is
    // copied once for its row tiles.
    const long qtiles = (a.qn + kBQ - 1) / kBQ;
    const long rtiles = (static_cast<long>(a.n) + kBN - 1) / kBN;
    return std::clamp<long>(qtiles * rtiles / (16 * slots), 1, 64);
}

// Measured on an H100 (10 000 queries, k = 10): at d = 96 and 128 the fused kernel beats cuBLAS and
// the tile (1.32x at 1M x 128, 2.52x at 10M x 96); at d = 784 it loses (0.64x at 60 000 x 784),
// its products running at a fraction of cuBLAS's rate where the tile is small beside them.
constexpr int kFusedMaxDim = 128;

bool fused_filter_fits(int d, bool half)
{
    return d <= kFusedMaxDim && (half ? d % 8 == 0 : d % 4 == 0);
}

void launch_fused(const FusedArgs &a, bool half, cudaStream_t s)
{
    if (a.qn == 0 || a.cols == 0)
        return;
    if (half && !a.keys && a.wgmma && fused_wgmma_runs())
        launch_fused_wgmma(a, s);
    else if (half && !a.keys)
        launch_half_resident(a, s);
    else if (half)
        launch_fused_as<true>(a, s);
    else
        launch_fused_as<false>(a, s);
}

} // namespace vs::cuda
