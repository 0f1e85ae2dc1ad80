// The fused direct scan: one pass over the dataset for a batch of up to 64 queries, spread over
// all SMs (a persistent grid, each block taking 128-row tiles in turn).  A block stages a tile's
// rows and the queries through shared memory in 32-dimension slices (register prefetch of the
// next slice), each thread accumulates a register tile of RT rows x 4 queries with the metric's
// operator (L2 difference, dot, L1), and then either
//   * select: writes the 128 x nb distances to shared memory, where warp w feeds the queries
//     w, w + 8, ... through their WarpTopK selectors; at the end each (query, block) emits its
//     top-K' list and a merge kernel reduces the grid's lists ("final merge"), or
//   * write: stores the distances to a tile in device memory (large k, range).
// Distances are fp32 direct (not GEMM): the approximation bound is the tight direct one.
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/select.cuh"

#include <cstdlib>

namespace vs::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTR = 128; // rows per tile
constexpr int kDS = 32;  // dimensions per slice
constexpr int kLDS = kDS + 4;

template <int OP> __device__ __forceinline__ float op_acc(float acc, float a, float b)
{
    if (OP == OP_L2)
    {
        float t = a - b;
        return fmaf(t, t, acc);
    }
    if (OP == OP_DOT)
        return fmaf(a, b, acc);
    return acc + fabsf(a - b);
}

// Feeds the tile's values Dt[q * kTR + r] (rows row0 .. row0 + kTR) of the batch's queries
// through their selectors: warp w serves queries w, w + 8, ...
template <int TR = kTR>
__device__ __forceinline__ void select_tile(const float *Dt, uint32_t row0, uint32_t n, int nb,
                                            uint64_t *sel, WarpTopKState *st, int words, int kp,
                                            int bcap, int warp, int lane)
{
    for (int q = warp; q < nb; q += kThreads / 32)
    {
        WarpTopK t;
        t.restore(sel + static_cast<size_t>(q) * words, kp, bcap, kNoKey, st[q]);
#pragma unroll
        for (int c = 0; c < TR; c += 32)
        {
            const int r = c + lane;
            const uint32_t grow = row0 + r;
            uint64_t key = grow < n ? make_key(Dt[q * TR + r], grow) : kNoKey;
            t.add(key, lane);
        }
        WarpTopKState s = t.save();
        __syncwarp();
        if (lane == 0)
            st[q] = s;
        __syncwarp();
    }
}

__device__ __forceinline__ void select_init(uint64_t *sel, WarpTopKState *st, int words, int nb,
                                            int kp, int bcap, int warp, int lane)
{
    for (int q = warp; q < nb; q += kThreads / 32)
    {
        WarpTopK t;
        t.init(sel + static_cast<size_t>(q) * words, kp, bcap, kNoKey, lane);
        WarpTopKState s = t.save();
        if (lane == 0)
            st[q] = s;
        __syncwarp();
    }
}

__device__ __forceinline__ void select_finish(uint64_t *sel, WarpTopKState *st, int words, int nb,
                                              int kp, int bcap, uint64_t *partial, int warp,
                                              int lane)
{
    for (int q = warp; q < nb; q += kThreads / 32)
    {
        WarpTopK t;
        t.restore(sel + static_cast<size_t>(q) * words, kp, bcap, kNoKey, st[q]);
        t.finish(partial + (static_cast<size_t>(q) * gridDim.x + blockIdx.x) * kp, lane);
    }
}

template <int QG> struct Tier;
template <> struct Tier<4>
{
    static constexpr int RT = 2;
};
template <> struct Tier<16>
{
    static constexpr int RT = 8;
};

template <int OP, int QG> __global__ void __launch_bounds__(kThreads, 2) scan_kernel(ScanArgs a)
{
    constexpr int QT = 4, RG = kThreads / QG, RT = Tier<QG>::RT, QB = QG * QT;
    static_assert(RG * RT == kTR, "tile rows");
    constexpr int A_LOADS = kTR * (kDS / 4) / kThreads;           // float4 per thread
    constexpr int Q_LOADS = (QB * (kDS / 4) + kThreads - 1) / kThreads;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *As = reinterpret_cast<float *>(smem_raw);
    float *Qs = As + kTR * kLDS;
    float *Dt = Qs + QB * kLDS;
    const int words = warp_topk_words(a.kp, a.bcap);
    uint64_t *sel = reinterpret_cast<uint64_t *>(Dt + QB * kTR);
    WarpTopKState *st = reinterpret_cast<WarpTopKState *>(sel + static_cast<size_t>(a.nb) * words);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rg = tid % RG, qg = tid / RG;
    const int d = a.rows.d;
    const uint32_t n = a.rows.n;
    const bool vec = (d & 3) == 0;

    if (a.select)
        select_init(sel, st, words, a.nb, a.kp, a.bcap, warp, lane);

    auto load4 = [&](const float *base, size_t row_off, int k) {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (vec)
            v = __ldg(reinterpret_cast<const float4 *>(base + row_off + k));
        else
        {
            const float *p = base + row_off;
            if (k < d)
                v.x = p[k];
            if (k + 1 < d)
                v.y = p[k + 1];
            if (k + 2 < d)
                v.z = p[k + 2];
            if (k + 3 < d)
                v.w = p[k + 3];
        }
        return v;
    };

    const uint32_t ntiles = (n + kTR - 1) / kTR;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x)
    {
        const uint32_t row0 = tile * kTR;
        float acc[RT][QT];
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < QT; j++)
                acc[i][j] = 0.0f;

        float4 pa[A_LOADS], pq[Q_LOADS];
        auto fetch = [&](int k0) {
#pragma unroll
            for (int l = 0; l < A_LOADS; l++)
            {
                int e = tid + l * kThreads;
                int r = e >> 3, k = k0 + (e & 7) * 4;
                uint32_t grow = row0 + r;
                pa[l] = (grow < n && k < d) ? load4(a.rows.x, static_cast<size_t>(grow) * d, k)
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int l = 0; l < Q_LOADS; l++)
            {
                int e = tid + l * kThreads;
                int q = e >> 3, k = k0 + (e & 7) * 4;
                pq[l] = (e < QB * 8 && q < a.nb && k < d) ? load4(a.q, static_cast<size_t>(q) * d, k)
                                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        };
        fetch(0);
        for (int k0 = 0; k0 < d; k0 += kDS)
        {
            __syncthreads();
#pragma unroll
            for (int l = 0; l < A_LOADS; l++)
            {
                int e = tid + l * kThreads;
                *reinterpret_cast<float4 *>(&As[(e >> 3) * kLDS + (e & 7) * 4]) = pa[l];
            }
#pragma unroll
            for (int l = 0; l < Q_LOADS; l++)
            {
                int e = tid + l * kThreads;
                if (e < QB * 8)
                    *reinterpret_cast<float4 *>(&Qs[(e >> 3) * kLDS + (e & 7) * 4]) = pq[l];
            }
            __syncthreads();
            if (k0 + kDS < d)
                fetch(k0 + kDS);
#pragma unroll
            for (int kk = 0; kk < kDS; kk += 4)
            {
                float4 av[RT], bv[QT];
#pragma unroll
                for (int i = 0; i < RT; i++)
                    av[i] = *reinterpret_cast<const float4 *>(&As[(rg + i * RG) * kLDS + kk]);
#pragma unroll
                for (int j = 0; j < QT; j++)
                    bv[j] = *reinterpret_cast<const float4 *>(&Qs[(qg * QT + j) * kLDS + kk]);
#pragma unroll
                for (int i = 0; i < RT; i++)
#pragma unroll
                    for (int j = 0; j < QT; j++)
                    {
                        float s = acc[i][j];
                        s = op_acc<OP>(s, av[i].x, bv[j].x);
                        s = op_acc<OP>(s, av[i].y, bv[j].y);
                        s = op_acc<OP>(s, av[i].z, bv[j].z);
                        s = op_acc<OP>(s, av[i].w, bv[j].w);
                        acc[i][j] = s;
                    }
            }
        }

        // Approximate base values of the tile.
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < QT; j++)
            {
                const int r = rg + i * RG, q = qg * QT + j;
                const uint32_t grow = row0 + r;
                float v = acc[i][j];
                if (OP == OP_DOT)
                {
                    if (a.metric == VS_METRIC_COSINE)
                        v = (grow < n && q < a.nb) ? 1.0f - v * a.qinv[q] * a.rows.inv[grow] : 0.0f;
                    else
                        v = -v;
                }
                if (a.select)
                    Dt[q * kTR + r] = v;
                else if (grow < n && q < a.nb)
                    a.out[static_cast<size_t>(q) * a.ldo + grow] = v;
            }
        if (a.select)
        {
            __syncthreads();
            select_tile(Dt, row0, n, a.nb, sel, st, words, a.kp, a.bcap, warp, lane);
        }
    }
    if (a.select)
        select_finish(sel, st, words, a.nb, a.kp, a.bcap, a.partial, warp, lane);
}

// ---- rows kernel: up to 32 queries, d % 4 == 0, queries in shared memory -------------------
//
// Lane = row: each warp takes 32 consecutive rows of a 256-row tile, each lane streams its own
// row in 16-byte pieces (8 in flight, a whole 128-byte line per step, so every DRAM sector is
// used at once) and keeps QB accumulators; the queries come from shared memory as broadcast
// 16-byte reads (one per 4 multiply-adds).  No cross-lane reduction at all.  L2 is formed as
// ||x||^2 + ||y||^2 - 2 x.y (one FMA per element), IP and cosine from the dot, L1 directly.  The
// tile's values go to shared memory and through the per-query selectors (select_tile).
//
// From 16 queries on, each lane streams two rows (a 512-row tile) and applies every query float4
// it reads from shared memory to both: a 128-bit shared load serves a quarter warp per cycle, so
// with one row per lane 16 queries were bound by shared-memory bandwidth (16 loads per 16 bytes
// of data), not by DRAM.

constexpr int kRowsTR = 256;

__host__ __device__ constexpr int rows_per_lane(int qb) { return qb >= 16 ? 2 : 1; }

template <int OP> __device__ __forceinline__ float op4(float acc, float4 a, float4 b)
{
    acc = op_acc<OP>(acc, a.x, b.x);
    acc = op_acc<OP>(acc, a.y, b.y);
    acc = op_acc<OP>(acc, a.z, b.z);
    return op_acc<OP>(acc, a.w, b.w);
}

// The value a rows kernel gives (query q, row): L2 in dot form (as MODE_L2_GEMM), IP, cosine,
// or the L1 sum itself.
template <int OP>
__device__ __forceinline__ float rows_value(const ScanArgs &a, float acc, int q, uint32_t row)
{
    if (OP != OP_DOT)
        return acc;
    if (a.metric == VS_METRIC_COSINE)
        return 1.0f - acc * a.qinv[q] * a.rows.inv[row];
    if (a.metric == VS_METRIC_IP)
        return -acc;
    return (a.qsq[q] + a.rows.sq[row]) - 2.0f * acc;
}

// acc[h][q] = the operator summed over row row0 + h * kRowsTR + rl (rows past n read row 0).
template <int OP, int QB, int R, int U>
__device__ __forceinline__ void rows_accumulate(const ScanArgs &a, const float4 *Qs, uint32_t row0,
                                                int rl, float (&acc)[R][QB], uint32_t (&row)[R],
                                                bool (&on)[R])
{
    const int d = a.rows.d, d4 = d >> 2;
    const float4 *rp[R];
#pragma unroll
    for (int h = 0; h < R; h++)
    {
        row[h] = row0 + h * kRowsTR + rl;
        on[h] = row[h] < a.rows.n;
        rp[h] = reinterpret_cast<const float4 *>(a.rows.x + static_cast<size_t>(on[h] ? row[h] : 0) * d);
#pragma unroll
        for (int q = 0; q < QB; q++)
            acc[h][q] = 0.0f;
    }
    for (int c0 = 0; c0 < d4; c0 += U)
    {
        float4 v[R][U];
#pragma unroll
        for (int h = 0; h < R; h++)
#pragma unroll
            for (int u = 0; u < U; u++)
                v[h][u] = (on[h] && c0 + u < d4) ? __ldg(rp[h] + c0 + u) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int u = 0; u < U; u++)
        {
            if (c0 + u >= d4)
                break;
#pragma unroll
            for (int q = 0; q < QB; q++)
            {
                const float4 qv = Qs[q * d4 + c0 + u];
#pragma unroll
                for (int h = 0; h < R; h++)
                    acc[h][q] = op4<OP>(acc[h][q], v[h][u], qv);
            }
        }
    }
}

template <int OP, int QB> __global__ void __launch_bounds__(kThreads) rows_kernel(ScanArgs a)
{
    constexpr int R = rows_per_lane(QB), TR = kRowsTR * R, U = 8 / R; // U float4 per row in flight
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d = a.rows.d, d4 = d >> 2;
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw); // QB x d4
    float *Dt = reinterpret_cast<float *>(Qs + QB * d4);
    const int words = warp_topk_words(a.kp, a.bcap);
    uint64_t *sel = reinterpret_cast<uint64_t *>(Dt + QB * TR);
    WarpTopKState *st = reinterpret_cast<WarpTopKState *>(sel + static_cast<size_t>(a.nb) * words);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t n = a.rows.n;

    for (int i = tid; i < QB * d4; i += kThreads)
    {
        int q = i / d4, c = i % d4;
        Qs[i] = q < a.nb ? __ldg(reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q) * d) + c)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    select_init(sel, st, words, a.nb, a.kp, a.bcap, warp, lane);
    __syncthreads();

    const uint32_t ntiles = (n + TR - 1) / TR;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x)
    {
        const uint32_t row0 = tile * TR;
        const int rl = warp * 32 + lane;
        uint32_t row[R];
        bool on[R];
        float acc[R][QB];
        rows_accumulate<OP, QB, R, U>(a, Qs, row0, rl, acc, row, on);
#pragma unroll
        for (int h = 0; h < R; h++)
#pragma unroll
            for (int q = 0; q < QB; q++)
            {
                const bool ok = on[h] && q < a.nb;
                Dt[q * TR + h * kRowsTR + rl] = ok ? rows_value<OP>(a, acc[h][q], q, row[h]) : 0.0f;
            }
        __syncthreads();
        select_tile<TR>(Dt, row0, n, a.nb, sel, st, words, a.kp, a.bcap, warp, lane);
        __syncthreads();
    }
    select_finish(sel, st, words, a.nb, a.kp, a.bcap, a.partial, warp, lane);
}

// Filter variant: no selectors.  Each lane compares its rows' values with the queries' sampled
// thresholds (a.thr) in registers and appends the keys below them to the queries' candidate
// buffers (one atomic per warp and hit); no shared-memory tile, no block barrier per tile.
template <int OP, int QB, int MINB, int LOADS>
__global__ void __launch_bounds__(kThreads, MINB) rows_filter_kernel(ScanArgs a)
{
    constexpr int R = rows_per_lane(QB), TR = kRowsTR * R, U = LOADS / R;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d = a.rows.d, d4 = d >> 2;
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw); // QB x d4
    uint64_t *Ts = reinterpret_cast<uint64_t *>(Qs + QB * d4);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned below = (1u << lane) - 1u;
    for (int i = tid; i < QB * d4; i += kThreads)
    {
        int q = i / d4, c = i % d4;
        Qs[i] = q < a.nb ? __ldg(reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q) * d) + c)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int q = tid; q < QB; q += kThreads)
        Ts[q] = q < a.nb ? a.thr[q] : 0; // nothing is below 0
    __syncthreads();

    const uint32_t ntiles = (a.rows.n + TR - 1) / TR;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x)
    {
        const int rl = warp * 32 + lane;
        uint32_t row[R];
        bool on[R];
        float acc[R][QB];
        rows_accumulate<OP, QB, R, U>(a, Qs, tile * TR, rl, acc, row, on);
#pragma unroll
        for (int h = 0; h < R; h++)
        {
            unsigned hits = 0;
#pragma unroll
            for (int q = 0; q < QB; q++)
                if (on[h] && q < a.nb)
                {
                    acc[h][q] = rows_value<OP>(a, acc[h][q], q, row[h]);
                    hits |= (make_key(acc[h][q], row[h]) < Ts[q] ? 1u : 0u) << q;
                }
            unsigned any = __reduce_or_sync(kFullMask, hits);
            while (any)
            {
                const int q = __ffs(any) - 1;
                any &= any - 1;
                const bool pass = (hits >> q) & 1u;
                const unsigned m = __ballot_sync(kFullMask, pass);
                uint32_t at = 0;
                if (lane == 0)
                    at = atomicAdd(a.count + q, static_cast<uint32_t>(__popc(m)));
                at = __shfl_sync(kFullMask, at, 0) + __popc(m & below);
                float v = acc[h][0];
#pragma unroll
                for (int i = 1; i < QB; i++)
                    v = q == i ? acc[h][i] : v;
                if (pass && at < static_cast<uint32_t>(a.cap))
                    a.cand[static_cast<size_t>(q) * a.cap + at] = make_key(v, row[h]);
            }
        }
    }
}

// Group variant: lanes in groups of 8 per row (lane = slot * 8 + g: slot picks one of 4
// consecutive rows, g the row's 16-byte pieces g, g + 8, ...), so one load instruction reads 4
// whole 128-byte lines (the lanes-on-rows layout touched 32 lines per load and loaded the L1 data
// path as much as the queries' shared-memory reads did).  Each lane takes R such rows (4 R rows per
// warp step) and applies every query float4 it reads from shared memory to all of them; a
// transposed butterfly over the 8 lanes of a group then leaves each lane QB * R / 8 complete
// values, compared with the thresholds as in the filter variant (one atomic per hit).
template <int V> __device__ __forceinline__ void group_reduce(float (&acc)[V], int lane)
{
#pragma unroll
    for (int s = 0; s < 3; s++)
    {
        const int m = 4 >> s, half = V >> (s + 1);
        const bool upper = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < half; i++)
        {
            const float keep = upper ? acc[i + half] : acc[i];
            const float send = upper ? acc[i] : acc[i + half];
            acc[i] = keep + __shfl_xor_sync(kFullMask, send, m);
        }
    }
}

template <int OP, int QB, int R, int A, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) rows_group_kernel(ScanArgs a)
{
    constexpr int V = QB * R, VL = V / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d = a.rows.d, d4 = d >> 2, steps = (d4 + 7) / 8;
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw); // QB x d4
    uint64_t *Ts = reinterpret_cast<uint64_t *>(Qs + QB * d4);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, slot = lane >> 3, g = lane & 7;
    for (int i = tid; i < QB * d4; i += kThreads)
    {
        int q = i / d4, c = i % d4;
        Qs[i] = q < a.nb ? __ldg(reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q) * d) + c)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int q = tid; q < QB; q += kThreads)
        Ts[q] = q < a.nb ? a.thr[q] : 0; // nothing is below 0
    __syncthreads();

    const uint32_t n = a.rows.n, step_rows = 4 * R;
    const uint32_t nchunks = (n + step_rows - 1) / step_rows;
    const uint32_t nwarps = gridDim.x * (kThreads / 32);
    for (uint32_t chunk = blockIdx.x * (kThreads / 32) + warp; chunk < nchunks; chunk += nwarps)
    {
        const uint32_t row0 = chunk * step_rows;
        const float4 *rp[R];
        bool on[R];
        float acc[V];
#pragma unroll
        for (int h = 0; h < R; h++)
        {
            const uint32_t r = row0 + 4 * h + slot;
            on[h] = r < n;
            rp[h] = reinterpret_cast<const float4 *>(a.rows.x + static_cast<size_t>(on[h] ? r : 0) * d);
        }
#pragma unroll
        for (int i = 0; i < V; i++)
            acc[i] = 0.0f;
        // A steps of loads in flight per lane, then their arithmetic.
        for (int j0 = 0; j0 < steps; j0 += A)
        {
            float4 v[A][R];
#pragma unroll
            for (int u = 0; u < A; u++)
#pragma unroll
                for (int h = 0; h < R; h++)
                {
                    const int c = g + 8 * (j0 + u);
                    v[u][h] = on[h] && c < d4 ? __ldg(rp[h] + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
            for (int u = 0; u < A; u++)
            {
                const int c = g + 8 * (j0 + u);
                if (c < d4)
                {
#pragma unroll
                    for (int q = 0; q < QB; q++)
                    {
                        const float4 qv = Qs[q * d4 + c];
#pragma unroll
                        for (int h = 0; h < R; h++)
                            acc[h * QB + q] = op4<OP>(acc[h * QB + q], v[u][h], qv);
                    }
                }
            }
        }
        group_reduce<V>(acc, lane);
        // This lane now holds the values of flat indices VL * g + i (flat = h * QB + q).
#pragma unroll
        for (int i = 0; i < VL; i++)
        {
            const int f = VL * g + i, h = f / QB, q = f % QB;
            const uint32_t row = row0 + 4 * h + slot;
            if (row < n && q < a.nb)
            {
                const uint64_t key = make_key(rows_value<OP>(a, acc[i], q, row), row);
                if (key < Ts[q])
                {
                    const uint32_t at = atomicAdd(a.count + q, 1u);
                    if (at < static_cast<uint32_t>(a.cap))
                        a.cand[static_cast<size_t>(q) * a.cap + at] = key;
                }
            }
        }
    }
}

// Keys of the sampled rows (runs of 32 rows spread over the set) for the filter's thresholds:
// thread per (sample, query), the rows kernel's arithmetic.
template <int OP> __global__ void rows_sample_kernel(ScanArgs a, int chunks, uint64_t *keys)
{
    const int S = chunks * 32;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S * a.nb)
        return;
    const int q = i / S, j = i % S;
    const uint32_t row =
        static_cast<uint32_t>(static_cast<uint64_t>(j / 32) * a.rows.n / chunks) / 32 * 32 + j % 32;
    const int d4 = a.rows.d >> 2;
    const float4 *x = reinterpret_cast<const float4 *>(a.rows.x + static_cast<size_t>(row) * a.rows.d);
    const float4 *y = reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q) * a.rows.d);
    float acc = 0.0f;
    for (int c = 0; c < d4; c++)
        acc = op4<OP>(acc, __ldg(x + c), __ldg(y + c));
    keys[i] = make_key(rows_value<OP>(a, acc, q, row), row);
}

template <int QG> const void *kernel_for(int op)
{
    switch (op)
    {
    case OP_L2:
        return reinterpret_cast<const void *>(scan_kernel<OP_L2, QG>);
    case OP_DOT:
        return reinterpret_cast<const void *>(scan_kernel<OP_DOT, QG>);
    default:
        return reinterpret_cast<const void *>(scan_kernel<OP_L1, QG>);
    }
}

const void *kernel_for(int tier, int op)
{
    return tier == 0 ? kernel_for<4>(op) : kernel_for<16>(op);
}

// L2 goes through the dot-product kernel (one FMA per element instead of two).
template <int QB> const void *rows_for(int op)
{
    if (op == OP_L1)
        return reinterpret_cast<const void *>(rows_kernel<OP_L1, QB>);
    return reinterpret_cast<const void *>(rows_kernel<OP_DOT, QB>);
}

int rows_qb(int nb) { return nb <= 4 ? 4 : (nb <= 16 ? 16 : 32); }

template <int QB, int MINB, int LOADS> const void *rows_filter_for(int op)
{
    if (op == OP_L1)
        return reinterpret_cast<const void *>(rows_filter_kernel<OP_L1, QB, MINB, LOADS>);
    return reinterpret_cast<const void *>(rows_filter_kernel<OP_DOT, QB, MINB, LOADS>);
}

int rows_variant()
{
    const char *v = std::getenv("VSEARCH_CUDA_ROWS_VARIANT");
    return v && *v == '1' ? 1 : 0; // 0: group kernel, 1: lanes-on-rows filter kernel
}

template <int MINB, int LOADS> const void *rows_filter_for_nb(int nb, int op)
{
    int qb = rows_qb(nb);
    return qb == 4 ? rows_filter_for<4, MINB, LOADS>(op)
                   : (qb == 16 ? rows_filter_for<16, MINB, LOADS>(op)
                               : rows_filter_for<32, MINB, LOADS>(op));
}

template <int QB, int R, int A, int MINB> const void *rows_group_for(int op)
{
    if (op == OP_L1)
        return reinterpret_cast<const void *>(rows_group_kernel<OP_L1, QB, R, A, MINB>);
    return reinterpret_cast<const void *>(rows_group_kernel<OP_DOT, QB, R, A, MINB>);
}

int group_cfg()
{
    const char *v = std::getenv("VSEARCH_CUDA_GROUP_CFG");
    return v && *v ? std::atoi(v) : 0;
}

const void *rows_group_for_nb(int nb, int op)
{
    const int qb = rows_qb(nb), cfg = group_cfg();
    if (qb == 4)
        return rows_group_for<4, 4, 1, 2>(op);
    if (qb == 16)
        switch (cfg)
        {
        case 1:
            return rows_group_for<16, 2, 2, 3>(op);
        case 2:
            return rows_group_for<16, 2, 4, 2>(op);
        case 3:
            return rows_group_for<16, 4, 2, 2>(op);
        case 4:
            return rows_group_for<16, 1, 4, 4>(op);
        default:
            return rows_group_for<16, 4, 1, 2>(op);
        }
    switch (cfg)
    {
    case 1:
        return rows_group_for<32, 1, 4, 3>(op);
    case 2:
        return rows_group_for<32, 2, 2, 2>(op);
    case 3:
        return rows_group_for<32, 1, 2, 4>(op);
    default:
        return rows_group_for<32, 2, 1, 2>(op);
    }
}

const void *rows_filter_for_nb(int nb, int op)
{
    if (rows_variant() == 0)
    {
        return rows_group_for_nb(nb, op);
    }
    return rows_filter_for_nb<2, 8>(nb, op);
}

const void *rows_for_nb(int nb, int op)
{
    int qb = rows_qb(nb);
    return qb == 4 ? rows_for<4>(op) : (qb == 16 ? rows_for<16>(op) : rows_for<32>(op));
}

} // namespace

int scan_op(vs_metric m)
{
    switch (m)
    {
    case VS_METRIC_L2SQ:
    case VS_METRIC_L2:
        return OP_L2;
    case VS_METRIC_IP:
    case VS_METRIC_COSINE:
        return OP_DOT;
    default:
        return OP_L1;
    }
}

int scan_tier_queries(int tier) { return tier == 0 ? 16 : 64; }

size_t scan_smem_bytes(int tier, bool select, int nb, int kp, int bcap)
{
    size_t qb = static_cast<size_t>(scan_tier_queries(tier));
    size_t bytes = (kTR + qb) * kLDS * sizeof(float);
    if (select)
        bytes += qb * kTR * sizeof(float) +
                 static_cast<size_t>(nb) * (warp_topk_words(kp, bcap) * 8 + sizeof(WarpTopKState));
    return bytes;
}

int scan_blocks_per_sm(int tier, size_t smem)
{
    int blocks = 0;
    const void *k = kernel_for(tier, OP_L2);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    VS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreads, smem));
    return blocks;
}

void launch_scan(const ScanArgs &a, int tier, cudaStream_t s)
{
    if (a.nb == 0 || a.rows.n == 0)
        return;
    int op = scan_op(a.metric);
    const void *k = kernel_for(tier, op);
    size_t smem = scan_smem_bytes(tier, a.select, a.nb, a.kp, a.bcap);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    ScanArgs args = a;
    void *params[] = {&args};
    VS_CUDA_CHECK(cudaLaunchKernel(k, dim3(a.grid), dim3(kThreads), params, smem, s));
}

bool stream_ok(int d, int nb) { return d % 4 == 0 && d <= 1024 && nb <= 32; }

size_t stream_smem_bytes(int nb, int d, int kp, int bcap)
{
    size_t qb = static_cast<size_t>(rows_qb(nb));
    return qb * static_cast<size_t>(d) * sizeof(float) +
           qb * kRowsTR * rows_per_lane(static_cast<int>(qb)) * sizeof(float) +
           static_cast<size_t>(nb) * (warp_topk_words(kp, bcap) * 8 + sizeof(WarpTopKState));
}

int stream_blocks_per_sm(int nb, int op, size_t smem)
{
    int blocks = 0;
    const void *k = rows_for_nb(nb, op);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    VS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreads, smem));
    return blocks;
}

int stream_tile_rows(int nb) { return kRowsTR * rows_per_lane(rows_qb(nb)); }

void launch_stream(const ScanArgs &a, cudaStream_t s)
{
    if (a.nb == 0 || a.rows.n == 0)
        return;
    const void *k = rows_for_nb(a.nb, scan_op(a.metric));
    size_t smem = stream_smem_bytes(a.nb, a.rows.d, a.kp, a.bcap);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    ScanArgs args = a;
    void *params[] = {&args};
    VS_CUDA_CHECK(cudaLaunchKernel(k, dim3(a.grid), dim3(kThreads), params, smem, s));
}

size_t stream_filter_smem_bytes(int nb, int d)
{
    size_t qb = static_cast<size_t>(rows_qb(nb));
    return qb * static_cast<size_t>(d) * sizeof(float) + qb * sizeof(uint64_t);
}

int stream_filter_blocks_per_sm(int nb, int op, int d)
{
    int blocks = 0;
    const void *k = rows_filter_for_nb(nb, op);
    const size_t smem = stream_filter_smem_bytes(nb, d);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    VS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kThreads, smem));
    return blocks;
}

void launch_stream_filter(const ScanArgs &a, const FilterPlan &p, uint64_t *sample_keys,
                          uint64_t *state, cudaStream_t s)
{
    if (a.nb == 0 || a.rows.n == 0)
        return;
    const int op = scan_op(a.metric);
    const int S = p.chunks * 32;
    const int threads = 256, blocks = (S * a.nb + threads - 1) / threads;
    if (op == OP_L1)
        rows_sample_kernel<OP_L1><<<blocks, threads, 0, s>>>(a, p.chunks, sample_keys);
    else
        rows_sample_kernel<OP_DOT><<<blocks, threads, 0, s>>>(a, p.chunks, sample_keys);
    VS_LAUNCH_CHECK();
    launch_threshold(sample_keys, a.nb, S, p.rank, a.thr, s);
    VS_CUDA_CHECK(cudaMemsetAsync(a.count, 0, static_cast<size_t>(a.nb) * sizeof(uint32_t), s));
    const void *k = rows_filter_for_nb(a.nb, op);
    const size_t smem = stream_filter_smem_bytes(a.nb, a.rows.d);
    if (smem > (48u << 10))
        VS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    ScanArgs args = a;
    void *params[] = {&args};
    VS_CUDA_CHECK(cudaLaunchKernel(k, dim3(a.grid), dim3(kThreads), params, smem, s));
    launch_sort_candidates(a.count, a.cand, a.cap, a.kp, a.nb, state, s);
}

} // namespace vs::cuda
