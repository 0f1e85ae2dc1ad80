// The direct scans (small batches, L1, GEMM fallbacks).  Below: the rows kernels for up to 32
// queries (a sampled threshold, no selectors).  First the staged scan, for up to 64 queries and any
// d: one pass over the dataset, spread over all SMs (a persistent grid, each block taking 128-row
// tiles in turn).  A block stages a tile's
// rows and the queries through shared memory in 32-dimension slices (register prefetch of the
// next slice), each thread accumulates a register tile of RT rows x 4 queries with the metric's
// operator (L2 difference, dot, L1), and then either
//   * select: writes the 128 x nb distances to shared memory, where warp w feeds the queries
//     w, w + 8, ... through their WarpTopK selectors; at the end each (query, block) emits its
//     top-K' list and a merge kernel reduces the grid's lists ("final merge"), or
//   * write: stores the distances to a tile in device memory (large k, range).
// Distances are fp32 direct (not GEMM): the approximation bound is the tight direct one.
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/async_copy.cuh"
#include "cuda/utils/select.cuh"

#include <algorithm>

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

// ---- rows kernels: up to 32 queries, d % 4 == 0, a sampled threshold instead of selectors ----
//
// The selector variant of these kernels (per-(block, query) WarpTopK over a shared-memory tile of
// values, then a merge kernel over the grid's lists) spent 0.08 ms of a 16-query call in the merge
// and held 66 KB of shared memory per block.  Instead (launch_stream_filter): the keys of a sample
// of rows (runs of 32 spread over the set) give each query a threshold a little above its K'-th
// key (filter_select.cu: plan_filter, launch_threshold); the rows kernel compares every value with
// it in registers and appends the keys below it to the query's candidate buffer (one atomic per
// hit; ~rank / sample of the set per query); one block per query sorts them (launch_sort_candidates).
// A query whose threshold missed (fewer than K' or more than `cap` hits) comes back uncertified and
// the caller rescans it with the staged scan kernel above.  L2 is formed as ||x||^2 + ||y||^2 -
// 2 x.y (one FMA per element), IP and cosine from the dot, L1 directly.
//
// Three layouts, measured on an H100 (1M x 128, k = 10; docs/ENGINE.md):
//   * staged (5-32 queries, d <= 128; rows_staged_kernel below): whole-row tiles through shared
//     memory by cp.async, queries in registers (0.290 ms for 16 queries);
//   * lanes on rows (5-32 queries, larger d): a lane pair per row (lane e of the pair takes the 16-byte
//     pieces e, e + 2, ..., so a load instruction reads 16 rows' 32-byte sectors whole), each lane
//     streams two rows (8 pieces in flight) and applies every query float4 it reads from shared
//     memory to both; one shuffle per pair of values completes them (0.438 ms for 16 queries
//     against 0.449-0.465 with a lane per row and 0.550 with 4 lanes per row);
//   * lanes in groups of 8 per row (1-4 queries): lane = slot * 8 + g, slot one of 4 consecutive
//     rows, g the row's 16-byte pieces g, g + 8, ...: a load instruction reads 4 whole 128-byte
//     lines instead of touching 32; each lane takes 4 such rows, and a transposed butterfly over
//     the group's 8 lanes leaves each lane 2 complete values.  Faster for 1-4 queries (0.330
//     against 0.369 ms for one), slower from 16 on (0.54-0.77 against 0.45 ms) in every register /
//     rows-per-lane / loads-in-flight configuration tried.

constexpr int kRowLanes = 2;     // lanes per row of the lanes-on-rows kernel
constexpr int kRowsTR = kThreads / kRowLanes; // rows per block step (per row slot)
constexpr int kRowsLoads = 8;    // float4 loads in flight per lane (over its rows)
constexpr int kGroupQB = 4;      // queries of the group kernel
constexpr int kGroupRows = 4;    // rows per lane of the group kernel

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

// Queries (QB x d4 float4, zero past nb) to shared memory (no barrier).
template <int QB> __device__ __forceinline__ void stage_queries(const ScanArgs &a, float4 *Qs)
{
    const int d = a.rows.d, d4 = d >> 2;
    for (int i = threadIdx.x; i < QB * d4; i += kThreads)
    {
        int q = i / d4, c = i % d4;
        Qs[i] = q < a.nb ? __ldg(reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q) * d) + c)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// The queries and their thresholds (0 past nb: nothing is below it) to shared memory.
template <int QB>
__device__ __forceinline__ void rows_stage(const ScanArgs &a, float4 *Qs, uint64_t *Ts)
{
    stage_queries<QB>(a, Qs);
    grid_dependency_wait();
    for (int q = threadIdx.x; q < QB; q += kThreads)
        Ts[q] = q < a.nb ? a.thr[q] : 0;
    __syncthreads();
}

__device__ __forceinline__ void rows_append(const ScanArgs &a, int q, uint64_t key)
{
    const uint32_t at = atomicAdd(a.count + q, 1u);
    if (at < static_cast<uint32_t>(a.cap))
        a.cand[static_cast<size_t>(q) * a.cap + at] = key;
}

// Two blocks per SM (128 registers) except L1 with 32 queries, which would spill there.
template <int OP, int QB>
__global__ void __launch_bounds__(kThreads, OP == OP_L1 && QB >= 32 ? 1 : 2) rows_kernel(ScanArgs a)
{
    constexpr int P = kRowLanes, R = rows_per_lane(QB), SLOT = kThreads / P, TR = SLOT * R;
    constexpr int U = kRowsLoads / R;
    constexpr int QL = QB / P; // complete values per lane and row
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d = a.rows.d, d4 = d >> 2, dp = (d4 + P - 1) / P;
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw);
    uint64_t *Ts = reinterpret_cast<uint64_t *>(Qs + QB * d4);
    rows_stage<QB>(a, Qs, Ts);
    const int rl = threadIdx.x / P, e = threadIdx.x % P;
    const uint32_t n = a.rows.n, ntiles = (n + TR - 1) / TR;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x)
    {
        uint32_t row[R];
        bool on[R];
        const float4 *rp[R];
        float acc[R][QB];
#pragma unroll
        for (int h = 0; h < R; h++)
        {
            row[h] = tile * TR + h * SLOT + rl;
            on[h] = row[h] < n;
            rp[h] = reinterpret_cast<const float4 *>(a.rows.x + static_cast<size_t>(on[h] ? row[h] : 0) * d);
#pragma unroll
            for (int q = 0; q < QB; q++)
                acc[h][q] = 0.0f;
        }
        for (int c0 = 0; c0 < dp; c0 += U)
        {
            float4 v[R][U];
#pragma unroll
            for (int h = 0; h < R; h++)
#pragma unroll
                for (int u = 0; u < U; u++)
                {
                    const int c = P * (c0 + u) + e;
                    v[h][u] = on[h] && c < d4 ? __ldg(rp[h] + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
            for (int u = 0; u < U; u++)
            {
                const int c = P * (c0 + u) + e;
                if (c0 + u >= dp)
                    break;
                if (c < d4)
#pragma unroll
                    for (int q = 0; q < QB; q++)
                    {
                        const float4 qv = Qs[q * d4 + c];
#pragma unroll
                        for (int h = 0; h < R; h++)
                            acc[h][q] = op4<OP>(acc[h][q], v[h][u], qv);
                    }
            }
        }
        // Transposed butterfly over the row's P lanes: lane e ends with the complete values of
        // queries e * QL .. e * QL + QL - 1.
#pragma unroll
        for (int m = P >> 1, half = QB >> 1; m >= 1; m >>= 1, half >>= 1)
#pragma unroll
            for (int h = 0; h < R; h++)
#pragma unroll
                for (int i = 0; i < half; i++)
                {
                    const bool upper = (e & m) != 0;
                    const float keep = upper ? acc[h][i + half] : acc[h][i];
                    const float send = upper ? acc[h][i] : acc[h][i + half];
                    acc[h][i] = keep + __shfl_xor_sync(kFullMask, send, m);
                }
        // Almost no lane has a hit: one vote per row skips the appends.
#pragma unroll
        for (int h = 0; h < R; h++)
        {
            unsigned hits = 0;
#pragma unroll
            for (int i = 0; i < QL; i++)
            {
                const int q = e * QL + i;
                if (on[h] && q < a.nb)
                {
                    acc[h][i] = rows_value<OP>(a, acc[h][i], q, row[h]);
                    hits |= (make_key(acc[h][i], row[h]) < Ts[q] ? 1u : 0u) << i;
                }
            }
            if (__any_sync(kFullMask, hits != 0))
#pragma unroll
                for (int i = 0; i < QL; i++)
                    if ((hits >> i) & 1u)
                        rows_append(a, e * QL + i, make_key(acc[h][i], row[h]));
        }
    }
}

// Staged rows kernel (16 or 32 queries, d <= 128): the lanes-on-rows kernel above reads each row
// in 32-byte pieces into registers, so a load instruction touches 16 rows and a block's loads
// stride over its tile (0.36 ms for 16 queries; 0.29 here).  Here the block streams tiles of
// kStagedRows whole rows - one contiguous range of memory - and their norms into shared memory
// with cp.async, kStages tiles in flight, and a warp computes one row pair at a time: lane (g, s)
// holds queries 4g .. 4g + 3 (of its half of 16) for the pieces s, s + 8, s + 16, s + 24 in
// registers, so the 8 lanes of a piece share one broadcast shared-memory load, and a transposed
// butterfly over the 8 lanes of a group leaves lane s the complete value of (row s / 4 of the
// pair, query 4g + s % 4).  The arithmetic, not the copies, bounds it (docs/ENGINE.md).
constexpr int kStagedRows = 64; // rows per stage
constexpr int kStages = 3;      // stages in flight per block
constexpr int kStagedD4 = 32;   // pieces a lane group covers: d <= 128

__host__ __device__ constexpr size_t staged_smem_bytes(int d)
{
    return static_cast<size_t>(kStages) * kStagedRows * (d + 1) * sizeof(float);
}

template <int OP, int QB>
__global__ void __launch_bounds__(kThreads, 2) rows_staged_kernel(ScanArgs a)
{
    constexpr int QH = QB / 16;            // warps per row pair (halves of the queries)
    constexpr int WR = kThreads / 32 / QH; // row pairs a block computes at once
    constexpr int PIECES = kStagedD4 / 8;  // pieces per lane
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d4 = a.rows.d >> 2, pieces = kStagedRows * d4; // 16-byte pieces per stage
    float4 *Rs = reinterpret_cast<float4 *>(smem_raw);
    float *Ns = reinterpret_cast<float *>(Rs + kStages * pieces); // row norms per stage
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = lane & 7;
    const int q0 = (warp % QH) * 16 + (lane >> 3) * 4, wr = warp / QH;
    float4 qv[4][PIECES];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < PIECES; j++)
        {
            const int c = s + 8 * j;
            qv[i][j] = q0 + i < a.nb && c < d4
                           ? __ldg(reinterpret_cast<const float4 *>(a.q + static_cast<size_t>(q0 + i) * a.rows.d) + c)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    // This lane's query, its threshold and norm term; the rows' norm term comes with the tile.
    const int myq = q0 + (s & 3);
    const bool live = myq < a.nb;
    const bool cosine = a.metric == VS_METRIC_COSINE, ip = a.metric == VS_METRIC_IP;
    const float *norms = OP != OP_DOT || ip ? nullptr : (cosine ? a.rows.inv : a.rows.sq);
    const float qn = !live || norms == nullptr ? 0.0f : (cosine ? a.qinv[myq] : a.qsq[myq]);

    const uint32_t n = a.rows.n, ntiles = (n + kStagedRows - 1) / kStagedRows;
    const size_t total = static_cast<size_t>(n) * d4;
    const float4 *src = reinterpret_cast<const float4 *>(a.rows.x);
    auto issue = [&](uint32_t tile, int buf) {
        if (tile < ntiles)
        {
            const size_t base = static_cast<size_t>(tile) * pieces;
            float4 *dst = Rs + buf * pieces;
            for (int e = threadIdx.x; e < pieces; e += kThreads)
            {
                const bool valid = base + e < total;
                cp_async16(dst + e, src + (valid ? base + e : 0), valid ? 16 : 0);
            }
            const uint32_t r = tile * kStagedRows + threadIdx.x * 4;
            if (norms != nullptr && threadIdx.x < kStagedRows / 4)
                cp_async16(Ns + buf * kStagedRows + threadIdx.x * 4, norms + (r < n ? r : 0),
                           r < n ? static_cast<int>(min(4u, n - r)) * 4 : 0);
        }
        cp_async_commit(); // empty groups past the end keep the wait counts uniform
    };
#pragma unroll
    for (int st = 0; st < kStages - 1; st++)
        issue(blockIdx.x + st * gridDim.x, st);
    grid_dependency_wait(); // the thresholds and hit counters come from the kernel before
    const uint64_t thr = live ? a.thr[myq] : 0;
    const float thr_value = key_dist(thr); // !(v > thr_value) holds for every key below thr
    // Branch-free piece loads: past d4 a lane reads its row's last piece, which meets a zero
    // query piece (dot forms) or is zeroed (L1).
    int off[PIECES];
    bool in_row[PIECES];
#pragma unroll
    for (int j = 0; j < PIECES; j++)
    {
        in_row[j] = s + 8 * j < d4;
        off[j] = min(s + 8 * j, d4 - 1);
    }
    int it = 0;
    for (uint32_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x, it++)
    {
        cp_async_wait<kStages - 2>();
        __syncthreads(); // the tile is in; every warp is done with the buffer refilled next
        issue(tile + (kStages - 1) * gridDim.x, (it + kStages - 1) % kStages);
        const float4 *R = Rs + (it % kStages) * pieces;
        const float *N = Ns + (it % kStages) * kStagedRows;
        for (int p = wr; p < kStagedRows / 2; p += WR)
        {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = 0.0f;
            const float4 *r0 = R + (2 * p) * d4, *r1 = r0 + d4;
            float4 x0[PIECES], x1[PIECES];
#pragma unroll
            for (int j = 0; j < PIECES; j++)
            {
                x0[j] = r0[off[j]];
                x1[j] = r1[off[j]];
                if (OP == OP_L1 && !in_row[j])
                    x0[j] = x1[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < PIECES; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                {
                    v[i] = op4<OP>(v[i], x0[j], qv[i][j]);
                    v[4 + i] = op4<OP>(v[4 + i], x1[j], qv[i][j]);
                }
            // v[h * 4 + i] (row h, query i) summed over the group: lane s ends with v[s].
#pragma unroll
            for (int m = 4; m >= 1; m >>= 1)
#pragma unroll
                for (int i = 0; i < m; i++)
                {
                    const bool upper = (s & m) != 0;
                    const float keep = upper ? v[i + m] : v[i];
                    const float send = upper ? v[i] : v[i + m];
                    v[i] = keep + __shfl_xor_sync(kFullMask, send, m);
                }
            const int r = 2 * p + (s >> 2);
            const uint32_t row = tile * kStagedRows + r;
            float val = v[0]; // L1 (and the rows' norm-free forms below)
            if (OP == OP_DOT)
                val = cosine ? 1.0f - val * qn * N[r] : (ip ? -val : (qn + N[r]) - 2.0f * val);
            const bool hit = !(val > thr_value) && row < n && live && make_key(val, row) < thr;
            if (__any_sync(kFullMask, hit) && hit)
                rows_append(a, myq, make_key(val, row));
        }
    }
    cp_async_wait<0>();
}

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

template <int OP> __global__ void __launch_bounds__(kThreads, 2) rows_group_kernel(ScanArgs a)
{
    constexpr int QB = kGroupQB, R = kGroupRows, V = QB * R, VL = V / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int d = a.rows.d, d4 = d >> 2, steps = (d4 + 7) / 8;
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw);
    uint64_t *Ts = reinterpret_cast<uint64_t *>(Qs + QB * d4);
    rows_stage<QB>(a, Qs, Ts);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slot = lane >> 3, g = lane & 7;
    const uint32_t n = a.rows.n, step_rows = 4 * R, nchunks = (n + step_rows - 1) / step_rows;
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
        // The next step's pieces load while this step's are used.
        float4 v[R];
#pragma unroll
        for (int h = 0; h < R; h++)
            v[h] = on[h] && g < d4 ? __ldg(rp[h] + g) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < steps; j++)
        {
            const int c = g + 8 * j;
            float4 nv[R];
#pragma unroll
            for (int h = 0; h < R; h++)
                nv[h] = on[h] && c + 8 < d4 ? __ldg(rp[h] + c + 8) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (c < d4)
#pragma unroll
                for (int q = 0; q < QB; q++)
                {
                    const float4 qv = Qs[q * d4 + c];
#pragma unroll
                    for (int h = 0; h < R; h++)
                        acc[h * QB + q] = op4<OP>(acc[h * QB + q], v[h], qv);
                }
#pragma unroll
            for (int h = 0; h < R; h++)
                v[h] = nv[h];
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
                    rows_append(a, q, key);
            }
        }
    }
}

// Keys of the sampled rows (runs of 32 rows spread over the set) for the thresholds, the rows
// kernels' arithmetic: a team of `lanes` adjacent threads per (sampled row, group of 4 queries),
// each lane the row's pieces lane, lane + lanes, ..., so that the row is read from DRAM once in
// whole lines and a lane's chain of loads is d4 / lanes / 8 latencies long (a thread per row at
// 784 dimensions waited on 25 of them); the team's partial sums meet by shuffles.
template <int OP, int QB>
__global__ void __launch_bounds__(kThreads) rows_sample_kernel(ScanArgs a, int chunks, int lanes, uint64_t *keys)
{
    constexpr int G = QB / 4;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float4 *Qs = reinterpret_cast<float4 *>(smem_raw);
    const int d4 = a.rows.d >> 2;
    grid_dependents_launch(); // the threshold kernel, which waits for this one
    stage_queries<QB>(a, Qs);
    __syncthreads();
    const int S = chunks * 32, t = blockIdx.x * kThreads + threadIdx.x, team = t / lanes,
              lane = t % lanes, j = team / G, q0 = (team % G) * 4;
    // whole teams leave together: the shuffles below need every lane of a team
    const bool on = j < S && q0 < a.nb;
    if (__all_sync(kFullMask, !on))
        return;
    const uint32_t row = on ? static_cast<uint32_t>(static_cast<uint64_t>(j / 32) * a.rows.n / chunks) / 32 * 32 + j % 32 : 0;
    const float4 *x = reinterpret_cast<const float4 *>(a.rows.x + static_cast<size_t>(row) * a.rows.d);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    constexpr int U = 8; // loads in flight per lane
    for (int c0 = lane; c0 < d4; c0 += U * lanes)
    {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
        {
            const int c = c0 + u * lanes;
            v[u] = on && c < d4 ? __ldg(x + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
        {
            const int c = c0 + u * lanes;
            if (c < d4)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    acc[i] = op4<OP>(acc[i], v[u], Qs[(q0 + i) * d4 + c]);
        }
    }
    for (int m = lanes >> 1; m >= 1; m >>= 1)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[i] += __shfl_xor_sync(kFullMask, acc[i], m);
    if (on && lane == 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (q0 + i < a.nb)
                keys[static_cast<size_t>(q0 + i) * S + j] =
                    make_key(rows_value<OP>(a, acc[i], q0 + i, row), row);
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

// Lanes per sampled row: a row of up to 64 pieces is one or two loads deep per thread already.
int sample_lanes(int d) { return d / 4 > 64 ? 8 : 1; }

int rows_qb(int nb) { return nb <= kGroupQB ? kGroupQB : (nb <= 16 ? 16 : 32); }

// L2 goes through the dot-product kernels (one FMA per element instead of two).
template <int OP> const void *rows_for_qb(int qb)
{
    if (qb == kGroupQB)
        return reinterpret_cast<const void *>(rows_group_kernel<OP>);
    return qb == 16 ? reinterpret_cast<const void *>(rows_kernel<OP, 16>)
                    : reinterpret_cast<const void *>(rows_kernel<OP, 32>);
}

const void *rows_for(int nb, int op)
{
    return op == OP_L1 ? rows_for_qb<OP_L1>(rows_qb(nb)) : rows_for_qb<OP_DOT>(rows_qb(nb));
}

template <int OP> const void *rows_sample_for_qb(int qb)
{
    return qb == kGroupQB ? reinterpret_cast<const void *>(rows_sample_kernel<OP, kGroupQB>)
                          : (qb == 16 ? reinterpret_cast<const void *>(rows_sample_kernel<OP, 16>)
                                      : reinterpret_cast<const void *>(rows_sample_kernel<OP, 32>));
}

const void *rows_sample_for(int nb, int op)
{
    return op == OP_L1 ? rows_sample_for_qb<OP_L1>(rows_qb(nb)) : rows_sample_for_qb<OP_DOT>(rows_qb(nb));
}

// 5-32 queries with d <= 128 take the staged kernel.
bool rows_staged(int nb, int d) { return rows_qb(nb) >= 16 && d / 4 <= kStagedD4; }

template <int OP> const void *rows_staged_for_qb(int qb)
{
    return qb == 16 ? reinterpret_cast<const void *>(rows_staged_kernel<OP, 16>)
                    : reinterpret_cast<const void *>(rows_staged_kernel<OP, 32>);
}

const void *rows_staged_for(int nb, int op)
{
    return op == OP_L1 ? rows_staged_for_qb<OP_L1>(rows_qb(nb)) : rows_staged_for_qb<OP_DOT>(rows_qb(nb));
}

size_t rows_smem_bytes(int nb, int d)
{
    if (rows_staged(nb, d))
        return staged_smem_bytes(d);
    const size_t qb = static_cast<size_t>(rows_qb(nb));
    return qb * static_cast<size_t>(d) * sizeof(float) + qb * sizeof(uint64_t);
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
    const void *k = kernel_for(tier, OP_L2);
    set_smem(k, smem);
    return blocks_per_sm(k, kThreads, smem);
}

void launch_scan(const ScanArgs &a, int tier, cudaStream_t s)
{
    if (a.nb == 0 || a.rows.n == 0)
        return;
    int op = scan_op(a.metric);
    const void *k = kernel_for(tier, op);
    size_t smem = scan_smem_bytes(tier, a.select, a.nb, a.kp, a.bcap);
    set_smem(k, smem);
    ScanArgs args = a;
    void *params[] = {&args};
    VS_CUDA_CHECK(cudaLaunchKernel(k, dim3(a.grid), dim3(kThreads), params, smem, s));
}

bool stream_ok(int d, int nb) { return d % 4 == 0 && d <= 1024 && nb <= 32; }

bool stream_fits(int nb, int d, size_t smem_optin) { return rows_smem_bytes(nb, d) <= smem_optin; }

void launch_stream_filter(const ScanArgs &a, const FilterPlan &p, int sms, uint64_t *sample_keys,
                          uint64_t *state, cudaStream_t s)
{
    if (a.nb == 0 || a.rows.n == 0)
        return;
    const int op = scan_op(a.metric);
    const int S = p.chunks * 32;
    const void *sk = rows_sample_for(a.nb, op);
    const size_t qsmem = static_cast<size_t>(rows_qb(a.nb)) * a.rows.d * sizeof(float);
    set_smem(sk, qsmem);
    {
        ScanArgs args = a;
        int chunks = p.chunks;
        int lanes = sample_lanes(a.rows.d);
        void *params[] = {&args, &chunks, &lanes, &sample_keys};
        const int threads = S * (rows_qb(a.nb) / 4) * lanes;
        // A plain launch: the queries' upload (a copy, not a kernel) comes just before.
        VS_CUDA_CHECK(cudaLaunchKernel(sk, dim3((threads + kThreads - 1) / kThreads), dim3(kThreads),
                                       params, qsmem, s));
    }
    // the candidate buffer is free until the rows kernel, which waits for the threshold
    launch_threshold(sample_keys, a.nb, S, p.rank, a.thr, a.count, a.cand, a.cap, s);
    const bool staged = rows_staged(a.nb, a.rows.d);
    const void *k = staged ? rows_staged_for(a.nb, op) : rows_for(a.nb, op);
    const size_t smem = rows_smem_bytes(a.nb, a.rows.d);
    set_smem(k, smem);
    const int per_sm = blocks_per_sm(k, kThreads, smem);
    // Persistent grid, no more blocks than the kernel has tiles.
    const int qb = rows_qb(a.nb);
    const size_t tile_rows = staged ? kStagedRows : kRowsTR * rows_per_lane(qb);
    const size_t tiles = (a.rows.n + tile_rows - 1) / tile_rows;
    const int grid = static_cast<int>(std::max<size_t>(
        1, std::min<size_t>(tiles, static_cast<size_t>(sms) * std::max(1, per_sm))));
    ScanArgs args = a;
    void *params[] = {&args};
    launch_dependent(k, dim3(grid), dim3(kThreads), smem, s, params);
    launch_sort_candidates(a.count, a.cand, a.cap, a.kp, a.nb, state, s);
}

} // namespace vs::cuda
