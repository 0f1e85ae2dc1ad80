// k-selection over a tile of whole GEMM rows: estimate a threshold, filter, sort the survivors.
//
// The warp selectors keep K' keys per warp in shared memory; at K' = 1536 (k = 1024 with the TF32
// margin) that is 26 KB a warp, so few warps fit on an SM and the pass stops being bound by the
// tile reads (k = 1024 cost 5x k = 10).  Here, per query:
//   1. sample: a block reads `chunks` runs of 32 consecutive columns spread evenly over the row
//      and keeps the `rank` smallest keys (WarpTopK per warp, then merged); the rank-th is the
//      threshold T.  rank is the
//      sample's expected count below the K'-th key plus a margin (host: plan_filter), so T lies a
//      little above the row's K'-th key;
//   2. filter: every warp of a full-occupancy grid streams a segment of the row and appends the
//      keys below T to the query's candidate buffer (gathered in shared memory per warp, then
//      one atomic per kFilterBuffer keys);
//   3. select: one block sorts the candidates in shared memory and keeps the K' smallest.
// If fewer than K' or more than `cap` keys fell below T (a sample unlike its row), the query's
// candidate list is left empty: the re-rank then cannot certify it and the backend's fallback
// (fp32 GEMM with the warp selectors, then the direct scan) answers it.  This is the thesis'
// multi-pass large-k selection (Sample Select for the k-th value, then a filter pass) with one
// sample and a checked guess in place of the recursion.  Measured faster than the warp
// selectors for every K' (H100, 10 000 x 1M x 128: k = 10 56.9 against 59.8 ms, k = 1024 81.5
// against 307.6 ms), so the GEMM path uses it whenever a tile holds whole rows.
#include "cuda/impl/kernels.cuh"
#include "cuda/utils/select.cuh"

#include <algorithm>
#include <cmath>

namespace vs::cuda {

namespace {

constexpr int kSampleWarpsMin = 4, kSampleWarpsMax = 32;
constexpr int kFilterThreads = 256;
constexpr int kFilterSegmentMax = 16384; // columns per filter warp
constexpr int kFilterBuffer = 128;       // keys a filter warp gathers before it reserves slots
constexpr int kSortThreads = 512;

__device__ __forceinline__ uint32_t chunk_col(int j, int chunks, uint32_t tn)
{
    return static_cast<uint32_t>(static_cast<uint64_t>(j) * tn / chunks) & ~31u;
}

__device__ __forceinline__ uint64_t tile_key(const FilterArgs &a, float xs, float xi, float v,
                                             uint32_t c)
{
    const float ys = a.mode == MODE_L2_GEMM ? a.ysq[c] : 0.0f;
    const float yi = a.mode == MODE_COS_GEMM ? a.yinv[c] : 0.0f;
    return make_key(approx_value(a.mode, v, xs, xi, ys, yi), c);
}

// The rank-th smallest of a query's `items` x 32 keys (key_at(j, lane): key `lane` of item j), by
// the block's warps: each keeps the rank smallest of its items (four items' loads in flight), then
// the warps' lists are combined.  One warp alone waited on one load per item; a small batch has
// a block per query only, so its latency is the items per warp (sample_warps).  Into *out (if
// not null) the rank-th key, into list[0 .. rank) (if not null) the rank smallest in order,
// kNoKey where fewer exist.
template <typename KeyAt>
__device__ void block_rank_key(KeyAt key_at, int items, int rank, uint64_t *smem, uint64_t *out,
                               uint64_t *list = nullptr)
{
    __shared__ uint64_t *s_top[kSampleWarpsMax];
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bcap = warp_topk_bcap(rank);
    WarpTopK t;
    t.init(smem + static_cast<size_t>(warp) * warp_topk_words(rank, bcap), rank, bcap, kNoKey, lane);
    for (int j0 = warp * 4; j0 < items; j0 += warps * 4)
    {
        uint64_t k[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            k[u] = j0 + u < items ? key_at(j0 + u, lane) : kNoKey;
#pragma unroll
        for (int u = 0; u < 4; u++)
            t.add(k[u], lane);
    }
    t.flush(lane);
    if (lane == 0)
        s_top[warp] = t.top;
    __syncthreads();
    const int listed = warps * rank;
    if (listed <= 4 * static_cast<int>(blockDim.x))
    {
        // The rank-th smallest of the warps' sorted lists is the key with rank - 1 keys below it
        // in all of them: each thread counts for a few keys by binary searches, in parallel,
        // where warp 0 merging the lists one after another took ~30 us for 32 warps.  Keys are
        // distinct, so one thread finds it; none does when fewer than rank keys exist (kNoKey:
        // every key passes, the candidate buffer overflows and the query falls back).
        __shared__ uint64_t s_found;
        if (threadIdx.x == 0)
            s_found = kNoKey;
        if (list)
            for (int i = threadIdx.x; i < rank; i += blockDim.x)
                list[i] = kNoKey;
        __syncthreads();
        for (int i = threadIdx.x; i < listed; i += blockDim.x)
        {
            const uint64_t key = s_top[i / rank][i % rank];
            if (key == kNoKey)
                continue;
            int below = 0;
            for (int w = 0; w < warps; w++)
                below += count_less(s_top[w], rank, key);
            if (list && below < rank)
                list[below] = key;
            if (below == rank - 1)
                s_found = key;
        }
        __syncthreads();
        if (threadIdx.x == 0 && out)
            *out = s_found;
        return;
    }
    if (warp != 0)
        return;
    for (int w = 1; w < warps; w++)
        t.add_sorted(s_top[w], 0, rank, lane);
    t.flush(lane);
    if (list)
        for (int i = lane; i < rank; i += 32)
            list[i] = t.top[i];
    if (lane == 0 && out)
        *out = t.top[rank - 1];
}

// As many warps as fit 48 KB of selectors (at least kSampleWarpsMin), and no more than give each
// four items.
int sample_warps(int rank, int items)
{
    const size_t per_warp = static_cast<size_t>(warp_topk_words(rank, warp_topk_bcap(rank))) * 8;
    int w = kSampleWarpsMax;
    while (w > kSampleWarpsMin && (w * per_warp > (48u << 10) || w * 4 > items))
        w >>= 1;
    return w;
}

size_t rank_smem_bytes(int rank, int warps)
{
    return static_cast<size_t>(warps) * warp_topk_words(rank, warp_topk_bcap(rank)) * 8;
}

// Parts to split each query's sample into so that a small batch's ranking spreads over about two
// blocks per SM, each part at least 8 runs, the parts' lists within `room` keys per query (the
// scratch they go to); 1: a block per query.
int sample_parts(int nq, int items, int rank, int room)
{
    int parts = std::min((2 * sm_count() + nq - 1) / nq, items / 8);
    while (parts > 1 && (parts * rank + 31) / 32 * 32 > room)
        parts--;
    return std::max(parts, 1);
}

// Columns per filter warp: enough warps for a few per SM lane group even for one query (a small
// batch's filter is otherwise a handful of warps walking 16 384 columns each).
int filter_segment(int tq, uint32_t tn)
{
    const long want_warps = static_cast<long>(sm_count()) * 32;
    long seg = (static_cast<long>(tn) * tq + want_warps - 1) / want_warps;
    seg = (seg + 511) / 512 * 512;
    return static_cast<int>(std::min<long>(std::max<long>(seg, 512), kFilterSegmentMax));
}

// Block per query: the threshold from runs of 32 columns spread over the row.
__global__ void sample_kernel(FilterArgs a)
{
    extern __shared__ uint64_t smem[];
    const int q = blockIdx.x;
    const float *row = a.tile + static_cast<size_t>(q) * a.ld;
    const float xs = a.xsq ? a.xsq[q] : 0.0f, xi = a.xinv ? a.xinv[q] : 0.0f;
    auto key_at = [&](int j, int lane) {
        const uint32_t c = chunk_col(j, a.chunks, a.tn) + lane;
        return c < a.tn ? tile_key(a, xs, xi, row[c], c) : kNoKey;
    };
    block_rank_key(key_at, a.chunks, a.rank, smem, a.thr + q);
    if (threadIdx.x == 0)
        a.count[q] = 0;
}

// Block per query: the threshold from S precomputed keys (query q's at keys + q * ld).
__global__ void threshold_kernel(const uint64_t *keys, int ld, int S, int rank, uint64_t *thr,
                                 uint32_t *count)
{
    extern __shared__ uint64_t smem[];
    grid_dependents_launch(); // the rows kernel prefetches its first tiles meanwhile
    grid_dependency_wait();
    const uint64_t *in = keys + static_cast<size_t>(blockIdx.x) * ld;
    auto key_at = [&](int j, int lane) { return in[j * 32 + lane]; };
    block_rank_key(key_at, S / 32, rank, smem, thr + blockIdx.x);
    if (threadIdx.x == 0)
        count[blockIdx.x] = 0;
}

// Small batches: one block per query ranks its whole sample on a few SMs (16 queries: 16 of 132,
// issuing on 62 % of their cycles), so the sample is split.  Block (b, q) ranks part b of query
// q's runs and writes its `rank` smallest, sorted, to lists + q * stride + b * rank; block 0
// also pads the list to stride with kNoKey; threshold_kernel then takes the rank-th of the
// parts' lists, which is the rank-th of the whole sample.
__global__ void sample_part_kernel(FilterArgs a, int parts, uint64_t *lists, int stride)
{
    extern __shared__ uint64_t smem[];
    const int q = blockIdx.y, b = blockIdx.x;
    const int j0 = static_cast<int>(static_cast<long>(b) * a.chunks / parts);
    const int j1 = static_cast<int>(static_cast<long>(b + 1) * a.chunks / parts);
    const float *row = a.tile + static_cast<size_t>(q) * a.ld;
    const float xs = a.xsq ? a.xsq[q] : 0.0f, xi = a.xinv ? a.xinv[q] : 0.0f;
    auto key_at = [&](int j, int lane) {
        const uint32_t c = chunk_col(j0 + j, a.chunks, a.tn) + lane;
        return c < a.tn ? tile_key(a, xs, xi, row[c], c) : kNoKey;
    };
    uint64_t *list = lists + static_cast<size_t>(q) * stride;
    if (b == 0)
        for (int i = parts * a.rank + threadIdx.x; i < stride; i += blockDim.x)
            list[i] = kNoKey;
    block_rank_key(key_at, j1 - j0, a.rank, smem, nullptr, list + b * a.rank);
}

// The same over S precomputed keys per query (the rows kernels' sample).
__global__ void threshold_part_kernel(const uint64_t *keys, int S, int rank, int parts,
                                      uint64_t *lists, int stride)
{
    extern __shared__ uint64_t smem[];
    const int q = blockIdx.y, b = blockIdx.x, items = S / 32;
    const int j0 = static_cast<int>(static_cast<long>(b) * items / parts);
    const int j1 = static_cast<int>(static_cast<long>(b + 1) * items / parts);
    const uint64_t *in = keys + static_cast<size_t>(q) * S + static_cast<size_t>(j0) * 32;
    auto key_at = [&](int j, int lane) { return in[j * 32 + lane]; };
    uint64_t *list = lists + static_cast<size_t>(q) * stride;
    if (b == 0)
        for (int i = parts * rank + threadIdx.x; i < stride; i += blockDim.x)
            list[i] = kNoKey;
    block_rank_key(key_at, j1 - j0, rank, smem, nullptr, list + b * rank);
}

// Warp per (query, segment): 4 float4 loads per lane in flight (512 columns a step); the step's
// keys below T are placed by a warp prefix sum of the lanes' hit counts into the warp's buffer in
// shared memory, which goes to the candidate buffer with one atomic on the query's count when
// the next step might not fit (and at the end).  Before, each hit position of a step took a
// ballot and an atomic whose result the warp waited for: at K' = 15 000 (~1.8e7 keys kept of
// 1 000 x 1M, about 7 positions with a hit per step) ~1.4e7 atomics on the tile's adjacent
// counters, and the filter step took 11.9 ms where its 4 GB of tile reads take ~1.3; now about
// one atomic per 128 keys.
__global__ void __launch_bounds__(kFilterThreads) filter_kernel(FilterArgs a, int P, int seg)
{
    __shared__ uint64_t s_buf[kFilterThreads / 32][kFilterBuffer];
    const int lane = threadIdx.x & 31;
    const long gw = (static_cast<long>(blockIdx.x) * kFilterThreads + threadIdx.x) >> 5;
    if (gw >= static_cast<long>(a.tq) * P)
        return;
    const int q = static_cast<int>(gw / P), p = static_cast<int>(gw % P);
    const uint64_t T = a.thr[q];
    const uint32_t c_begin = static_cast<uint32_t>(p) * seg;
    const uint32_t c_end = min(a.tn, c_begin + seg);
    const float *row = a.tile + static_cast<size_t>(q) * a.ld;
    const float xs = a.xsq ? a.xsq[q] : 0.0f, xi = a.xinv ? a.xinv[q] : 0.0f;
    uint64_t *out = a.cand + static_cast<size_t>(q) * a.cap;
    const uint32_t cap = static_cast<uint32_t>(a.cap);
    uint64_t *buf = s_buf[threadIdx.x >> 5];
    uint32_t held = 0; // keys in buf (the same in every lane)
    auto flush = [&]() {
        uint32_t at = 0;
        if (lane == 0)
            at = atomicAdd(a.count + q, held);
        at = __shfl_sync(kFullMask, at, 0);
        __syncwarp();
        for (uint32_t i = lane; i < held; i += 32)
            if (at + i < cap)
                out[at + i] = buf[i];
        __syncwarp();
        held = 0;
    };
    for (uint32_t base = c_begin; base < c_end; base += 512)
    {
        float4 v[4], ys[4], yi[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            v[u] = ys[u] = yi[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const uint32_t c = base + u * 128 + lane * 4;
            if (c < c_end)
            {
                // ld and the norm arrays are padded to a multiple of 4 columns
                v[u] = __ldg(reinterpret_cast<const float4 *>(row + c));
                if (a.mode == MODE_L2_GEMM)
                    ys[u] = __ldg(reinterpret_cast<const float4 *>(a.ysq + c));
                if (a.mode == MODE_COS_GEMM)
                    yi[u] = __ldg(reinterpret_cast<const float4 *>(a.yinv + c));
            }
        }
        uint64_t key[16];
        unsigned hits = 0;
#pragma unroll
        for (int u = 0; u < 4; u++)
        {
            const float vv[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
            const float ss[4] = {ys[u].x, ys[u].y, ys[u].z, ys[u].w};
            const float ii[4] = {yi[u].x, yi[u].y, yi[u].z, yi[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
            {
                const uint32_t c = base + u * 128 + lane * 4 + e;
                const uint64_t kk =
                    c < c_end ? make_key(approx_value(a.mode, vv[e], xs, xi, ss[e], ii[e]), c) : kNoKey;
                key[u * 4 + e] = kk;
                hits |= (kk < T ? 1u : 0u) << (u * 4 + e);
            }
        }
        // Almost every step of a small K' has no hit at all: one vote decides.
        const unsigned h = __popc(hits);
        if (!__any_sync(kFullMask, h != 0))
            continue;
        unsigned incl = h;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1)
        {
            const unsigned t = __shfl_up_sync(kFullMask, incl, o);
            if (lane >= o)
                incl += t;
        }
        const unsigned step = __shfl_sync(kFullMask, incl, 31);
        if (held + step > kFilterBuffer)
            flush();
        if (step > kFilterBuffer)
        {
            // a step denser than the buffer: its keys go out at once
            uint32_t at = 0;
            if (lane == 31)
                at = atomicAdd(a.count + q, step);
            at = __shfl_sync(kFullMask, at, 31) + (incl - h);
#pragma unroll
            for (int e = 0; e < 16; e++)
                if ((hits >> e) & 1u)
                {
                    if (at < cap)
                        out[at] = key[e];
                    at++;
                }
            continue;
        }
        uint32_t at = held + (incl - h);
#pragma unroll
        for (int e = 0; e < 16; e++)
            if ((hits >> e) & 1u)
                buf[at++] = key[e];
        held += step;
        __syncwarp();
    }
    if (held)
        flush();
}

__global__ void __launch_bounds__(kSortThreads)
    sort_kernel(const uint32_t *count, const uint64_t *cand, int cap, int kp, uint64_t *state_all)
{
    extern __shared__ uint64_t keys[];
    grid_dependency_wait();
    const int q = blockIdx.x;
    const uint32_t cnt = count[q];
    uint64_t *state = state_all + static_cast<size_t>(q) * kp;
    if (cnt < static_cast<uint32_t>(kp) || cnt > static_cast<uint32_t>(cap))
    {
        for (int i = threadIdx.x; i < kp; i += kSortThreads)
            state[i] = kNoKey;
        return;
    }
    const uint64_t *in = cand + static_cast<size_t>(q) * cap;
    if (cnt <= 2u * kSortThreads)
    {
        // Few candidates (a small batch's usual case): each key's place is the number of keys
        // below it (keys are distinct), one pass over them in shared memory instead of the
        // bitonic network's ~45 barriers.
        for (int i = threadIdx.x; i < static_cast<int>(cnt); i += kSortThreads)
            keys[i] = in[i];
        __syncthreads();
        for (int i = threadIdx.x; i < static_cast<int>(cnt); i += kSortThreads)
        {
            const uint64_t key = keys[i];
            int place = 0;
            for (int j = 0; j < static_cast<int>(cnt); j++)
                place += keys[j] < key ? 1 : 0;
            if (place < kp)
                state[place] = key;
        }
        return;
    }
    int S = 64;
    while (S < static_cast<int>(cnt))
        S <<= 1;
    for (int i = threadIdx.x; i < S; i += kSortThreads)
        keys[i] = i < static_cast<int>(cnt) ? in[i] : kNoKey;
    __syncthreads();
    for (int k = 2; k <= S; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1)
        {
            for (int i = threadIdx.x; i < (S >> 1); i += kSortThreads)
            {
                const int l = 2 * i - (i & (j - 1)), r = l + j;
                const bool asc = (l & k) == 0;
                const uint64_t x = keys[l], y = keys[r];
                if ((x > y) == asc)
                {
                    keys[l] = y;
                    keys[r] = x;
                }
            }
            __syncthreads();
        }
    for (int i = threadIdx.x; i < kp; i += kSortThreads)
        state[i] = keys[i];
}


} // namespace

FilterPlan plan_filter(int kp, uint32_t tn, int max_chunks, int max_cap)
{
    FilterPlan p{};
    const int chunks = static_cast<int>(std::min<uint32_t>(max_chunks, tn / 256));
    if (chunks < 16)
        return p;
    // The sample's count below the row's K'-th key is ~binomial with mean mu: four standard
    // deviations above it, T is below the K'-th key with probability < 1e-4 for a row in random
    // order; the survivors then number ~ rank / S of the row, with relative spread 1 / sqrt(rank).
    const double S = 32.0 * chunks, mu = kp * S / tn;
    const int rank = static_cast<int>(std::ceil(mu + 4.0 * std::sqrt(mu) + 4.0));
    const double expect = rank / S * tn;
    int cap = 64;
    while (cap < kp || cap < expect * (1.0 + 6.0 / std::sqrt(static_cast<double>(rank))))
        cap <<= 1;
    // rank <= 2048 keeps the sample's selectors within an sm_80 block's shared memory
    if (cap > max_cap || rank > static_cast<int>(S) || rank > 2048)
        return p;
    p.on = true;
    p.chunks = chunks;
    p.rank = rank;
    p.cap = cap;
    return p;
}

void launch_filter_select(const FilterArgs &a, cudaStream_t s)
{
    if (a.tq == 0)
        return;
    launch_filter_candidates(a, s);
    launch_sort_candidates(a.count, a.cand, a.cap, a.kp, a.tq, a.state, s);
}

void launch_filter_candidates(const FilterArgs &a, cudaStream_t s)
{
    if (a.tq == 0)
        return;
    // The parts' lists go to the candidate buffer, which the filter fills only after the
    // threshold kernel has read them.
    const int parts = sample_parts(a.tq, a.chunks, a.rank, a.cap);
    if (parts > 1)
    {
        const int stride = (parts * a.rank + 31) / 32 * 32;
        const int sw = sample_warps(a.rank, a.chunks / parts);
        const size_t smem = rank_smem_bytes(a.rank, sw);
        set_smem(reinterpret_cast<const void *>(sample_part_kernel), smem);
        sample_part_kernel<<<dim3(parts, a.tq), sw * 32, smem, s>>>(a, parts, a.cand, a.cap);
        VS_LAUNCH_CHECK();
        launch_threshold_lists(a.cand, a.tq, a.cap, stride, a.rank, a.thr, a.count, s);
    }
    else
    {
        const int sw = sample_warps(a.rank, a.chunks);
        const size_t smem = rank_smem_bytes(a.rank, sw);
        set_smem(reinterpret_cast<const void *>(sample_kernel), smem);
        sample_kernel<<<a.tq, sw * 32, smem, s>>>(a);
        VS_LAUNCH_CHECK();
    }
    const int seg = filter_segment(a.tq, a.tn);
    const int P = static_cast<int>((a.tn + seg - 1) / seg);
    const long warps = static_cast<long>(a.tq) * P;
    filter_kernel<<<static_cast<int>((warps * 32 + kFilterThreads - 1) / kFilterThreads),
                    kFilterThreads, 0, s>>>(a, P, seg);
    VS_LAUNCH_CHECK();
}

void launch_threshold(const uint64_t *keys, int nq, int S, int rank, uint64_t *thr,
                      uint32_t *count, uint64_t *scratch, int room, cudaStream_t s)
{
    if (nq == 0)
        return;
    const int parts = sample_parts(nq, S / 32, rank, room);
    if (parts > 1)
    {
        const int stride = (parts * rank + 31) / 32 * 32;
        const int sw = sample_warps(rank, S / 32 / parts);
        const size_t smem = rank_smem_bytes(rank, sw);
        set_smem(reinterpret_cast<const void *>(threshold_part_kernel), smem);
        threshold_part_kernel<<<dim3(parts, nq), sw * 32, smem, s>>>(keys, S, rank, parts,
                                                                       scratch, room);
        VS_LAUNCH_CHECK();
        launch_threshold_lists(scratch, nq, room, stride, rank, thr, count, s);
        return;
    }
    launch_threshold_lists(keys, nq, S, S, rank, thr, count, s);
}

void launch_threshold_lists(const uint64_t *keys, int nq, int ld, int S, int rank, uint64_t *thr,
                            uint32_t *count, cudaStream_t s)
{
    const int sw = sample_warps(rank, S / 32);
    const size_t smem = rank_smem_bytes(rank, sw);
    set_smem(reinterpret_cast<const void *>(threshold_kernel), smem);
    void *params[] = {&keys, &ld, &S, &rank, &thr, &count};
    launch_dependent(reinterpret_cast<const void *>(threshold_kernel), dim3(nq), dim3(sw * 32),
                     smem, s, params);
}

void launch_sort_candidates(const uint32_t *count, const uint64_t *cand, int cap, int kp, int nq,
                            uint64_t *state, cudaStream_t s)
{
    if (nq == 0)
        return;
    const size_t smem = static_cast<size_t>(cap) * 8;
    set_smem(reinterpret_cast<const void *>(sort_kernel), smem);
    void *params[] = {&count, &cand, &cap, &kp, &state};
    launch_dependent(reinterpret_cast<const void *>(sort_kernel), dim3(nq), dim3(kSortThreads),
                     smem, s, params);
}

} // namespace vs::cuda
