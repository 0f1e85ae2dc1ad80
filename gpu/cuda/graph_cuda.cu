// Batched beam search on a proximity graph, CUDA backend (vsearch/graph.h; the reference is
// gpu/cpu/graph.cpp).  One thread block per query (SONG's layout), everything of the query's
// search in shared memory:
//   beam     the best ef nodes seen, as keys (distance << 32 | node, engine/exact.h: NaN as +inf)
//            in ascending order, with an "expanded" flag each, double-buffered (the merge writes
//            the other buffer);
//   visited  an open-addressing hash table of node numbers holding at least the beam's nodes;
//            when it could pass half full it is cleared and refilled with the beam (a node outside
//            the beam lost to the beam's worst once and would lose again, so forgetting it only
//            costs a distance, never a duplicate);
//   fresh    the keys measured in the current step that may enter the beam.
// A step takes the `expand` nearest unexpanded beam nodes (none left: done) and measures their
// neighbours (the engine's exact distance), a team of T lanes per distance
// (utils/exact_team.cuh; T from the dimension, 4 lanes up to 128 dimensions), so that a block of
// 128 or 256 threads measures all of a hop's neighbours at once.  The neighbour lists have free
// slots and nodes not live folded into kEmpty when the object is created (no live flag read per
// hop).  The fresh keys are merged into the beam by rank (every key is distinct: a node is
// measured once while it can be in the beam); the merge finds the next nodes to expand and the
// step's counters alternate between two sets, so a step has two barriers.  The start nodes go in
// first, a chunk at a time, the same way; more of them than a step takes get their keys beforehand
// over the whole grid (by default only those that can be in the query's first beam,
// impl/start_cut.cu, the rest no key; or every pair by start_keys_kernel's teams or by tiles,
// impl/pair_keys.cu), and the search only selects among their keys.  This
// is the reference's search: the same beam after every step, so the same ids and bit-identical
// distances.  The results are the beam ordered by (distance, id), NaN last, the first k of them.
// VSEARCH_CUDA_GRAPH_KERNEL=team4 .. team32 forces the team size (for timings).
//
// A compressed object (graph.h, "compressed graph objects"; BANG) runs the same kernel with PQ set:
// the device holds the codes, the quantizer and the live flags; the vectors, the neighbour rows
// (folded as above, on the host) and the ids are in pinned host memory mapped into the device's
// address space, read by the kernel over PCIe as it goes (a hop's row, the final beam's vectors).
// The query's table (m x 256 floats) is built in shared memory first; a step measures each
// neighbour by one thread (the m table entries summed in order, engine/graph_pq.h) and the start
// nodes go in by chunks (no start_keys_kernel); the final beam is re-ranked by the exact distance
// with 32-lane teams.
#include "cuda/graph_cuda.cuh"

#include "cuda/impl/pair_keys.cuh"
#include "cuda/impl/start_cut.cuh"
#include "cuda/utils/error.cuh"
#include "cuda/utils/exact_team.cuh"
#include "cuda/utils/launch.cuh"
#include "engine/graph_pq.h"
#include "engine/host_common.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace vs::cuda {
namespace {

constexpr int kTeamMaxThreads = 256; // the largest block
constexpr size_t kQueryChunk = 8192; // most queries per launch (cancel is polled between launches)
constexpr size_t kQueryChunkMin = 1024;            // fewest, whatever the dimension
constexpr size_t kStagingBytes = size_t{16} << 20; // most bytes of queries per launch, but
                                                   // at least kQueryChunkMin queries
constexpr size_t kStartKeyBytes = size_t{32} << 20; // most bytes of start keys per launch
// Fewest queries of a call whose start nodes are cut by default: its GEMM, packing and per-query
// selection cost a call a fixed ~70-90 us, which measuring every start costs less than below
// ~400 queries (an H100, 1M x 128 with 973 starts: 0.92-0.96x at 256 queries, 1.17-1.46x at 1000;
// docs/BENCHMARKS.md, session 30).
constexpr size_t kStartCutMinQueries = 512;
constexpr uint32_t kEmpty = 0xFFFFFFFFu;

struct GraphView
{
    const float *vectors;    // n x dim
    const uint32_t *nbrs;    // n x degree
    const uint8_t *live;     // n, or null: every node
    const int64_t *ids;      // n, or null: node numbers
    uint32_t n;
    int dim;
    int degree;
    // a compressed object's (pq_m > 0): codes n x pq_m, center dim, codebooks m x 256 x dim / m
    const uint8_t *codes;
    const float *center;
    const float *codebooks;
    int pq_m;
};

constexpr int kPqLanes = 32; // the re-rank's team in a compressed object's search

__device__ __forceinline__ float nan_as_inf(float d) { return d != d ? INFINITY : d; }

// True when v was not in the table (it is now).  The table is never more than half full.
__device__ __forceinline__ bool visit(uint32_t *table, uint32_t mask, uint32_t v, int *count)
{
    uint32_t h = (v * 2654435761u) & mask;
    for (;;)
    {
        uint32_t prev = atomicCAS(&table[h], kEmpty, v);
        if (prev == kEmpty)
        {
            atomicAdd(count, 1);
            return true;
        }
        if (prev == v)
            return false;
        h = (h + 1) & mask;
    }
}

// Results before: (distance, id) ascending, NaN after every number, -0 == +0; then the beam
// position, so that ranks are distinct even where a caller's ids repeat.
__device__ __forceinline__ bool result_before(float da, int64_t ia, int pa, float db, int64_t ib,
                                              int pb)
{
    const bool na = da != da, nb = db != db;
    if (na != nb)
        return nb;
    if (!na && da != db)
        return da < db;
    return ia != ib ? ia < ib : pa < pb;
}

// Writes the block's results: the nb entries dist[] / ids[] (in shared memory) ranked by
// result_before by counting, the first k to the query's row, padded with -1 / +inf.
__device__ void write_results(const float *dist, const int64_t *ids, int nb, int k,
                              int64_t *__restrict__ out_ids, float *__restrict__ out_dists,
                              int64_t *__restrict__ out_counts)
{
    const int tid = threadIdx.x, nthreads = blockDim.x;
    const size_t out = static_cast<size_t>(blockIdx.x) * k;
    for (int i = tid; i < nb; i += nthreads)
    {
        int rank = 0;
        for (int j = 0; j < nb; j++)
            rank += result_before(dist[j], ids[j], j, dist[i], ids[i], i);
        if (rank < k)
        {
            out_ids[out + rank] = ids[i];
            out_dists[out + rank] = dist[i];
        }
    }
    for (int r = min(k, nb) + tid; r < k; r += nthreads)
    {
        out_ids[out + r] = -1;
        out_dists[out + r] = INFINITY;
    }
    if (tid == 0)
        out_counts[blockIdx.x] = min(k, nb);
}

// The shared memory of one query (offsets from the dynamic buffer; 8-byte arrays first).
// fresh_cap: the most keys a step measures (expand x degree, or a chunk of start nodes); pq_m:
// a compressed object's code bytes (its table and the query's residual), else 0.
struct TeamLayout
{
    int ef, fresh_cap, dim;
    uint32_t hash_size; // a power of two >= 4 (ef + fresh_cap)
    size_t beams, fresh, dist, hash, query, table, residual, expanded, bytes;

    TeamLayout(int ef_, int fresh_cap_, int dim_, int pq_m)
        : ef(ef_), fresh_cap(fresh_cap_), dim(dim_)
    {
        hash_size = 1;
        while (hash_size < 4u * static_cast<uint32_t>(ef + fresh_cap))
            hash_size <<= 1;
        size_t o = 0;
        beams = o, o += 16 * static_cast<size_t>(ef); // the beam and the merge's output, swapped
        fresh = o, o += 8 * static_cast<size_t>(fresh_cap);
        query = o, o += 8 * static_cast<size_t>(dim); // widened once: half the conversions
        dist = o, o += 4 * static_cast<size_t>(ef);
        hash = o, o += 4 * static_cast<size_t>(hash_size);
        table = o, o += 4 * static_cast<size_t>(pq_m) * VS_GRAPH_PQ_KSUB;
        residual = o, o += pq_m > 0 ? 4 * static_cast<size_t>(dim) : 0;
        expanded = o, o += 2 * static_cast<size_t>(ef); // a flag per key of either buffer
        bytes = o;
    }
};

// A compressed object's navigation distance of the node with this code: the query's table
// entries summed in order (graph_pq.h); codes read a word at a time when rows are word aligned.
__device__ __forceinline__ float pq_estimate(const float *table, const uint8_t *__restrict__ code,
                                             int m, bool inner)
{
    float acc = 0.0f;
    if ((m & 3) == 0)
        for (int j = 0; j < m; j += 4)
        {
            const uint32_t w = __ldg(reinterpret_cast<const uint32_t *>(code + j));
#pragma unroll
            for (int b = 0; b < 4; b++)
                acc = pq_add(acc, table[(j + b) * VS_GRAPH_PQ_KSUB + ((w >> (8 * b)) & 255)]);
        }
    else
        for (int j = 0; j < m; j++)
            acc = pq_add(acc, table[j * VS_GRAPH_PQ_KSUB + __ldg(code + j)]);
    return graph_pq_key_distance(inner, acc);
}

// The search with a team of T lanes per distance (the file's head).  g.nbrs must have its free
// slots and nodes not live folded into kEmpty (CudaGraph does it); start nodes are checked here.
// Base: the metric's base formula (L2SQ for L2 too), a constant so that each instance keeps the
// registers of its own formula only; metric: the output units.  PQ: a compressed object's search
// (navigation by estimates, one thread per node; T is the re-rank's team).
template <int T, vs_metric Base, bool PQ>
__global__ void __launch_bounds__(kTeamMaxThreads)
    team_search_kernel(GraphView g, vs_metric metric, const float *__restrict__ queries,
                       const uint32_t *__restrict__ starts, const uint64_t *__restrict__ start_keys,
                       int nstarts, int ef, int expand, int k, TeamLayout L,
                       int64_t *__restrict__ out_ids, float *__restrict__ out_dists,
                       int64_t *__restrict__ out_counts)
{
    extern __shared__ __align__(16) unsigned char smem[];
    // buffer c (0 or 1): beams + c * ef, its flags flags + c * ef
    uint64_t *beams = reinterpret_cast<uint64_t *>(smem + L.beams);
    uint8_t *flags = smem + L.expanded;
    uint64_t *fresh = reinterpret_cast<uint64_t *>(smem + L.fresh);
    float *dist = reinterpret_cast<float *>(smem + L.dist);
    uint32_t *table = reinterpret_cast<uint32_t *>(smem + L.hash);
    double *q = reinterpret_cast<double *>(smem + L.query);
    // a step's counters alternate between two sets (parity), so that the one the next step uses
    // is reset while this step's is read, without a barrier of its own
    __shared__ int nfresh[2], first_open[2], nvisited;

    const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31;
    const int t = tid & (T - 1), team = tid / T, teams = nthreads / T, leader = lane & ~(T - 1);
    const uint32_t mask = L.hash_size - 1;
    const float *query = queries + static_cast<size_t>(blockIdx.x) * g.dim;
    for (int i = tid; i < g.dim; i += nthreads)
        q[i] = query[i];
    for (uint32_t i = tid; i < L.hash_size; i += nthreads)
        table[i] = kEmpty;
    if (tid == 0)
    {
        nfresh[0] = nfresh[1] = 0;
        first_open[0] = first_open[1] = INT_MAX;
        nvisited = 0;
    }
    [[maybe_unused]] const bool inner = graph_pq_inner(metric);
    [[maybe_unused]] float *pq_table = reinterpret_cast<float *>(smem + L.table);
    if constexpr (PQ)
    {
        __shared__ double inv_norm; // COSINE: 1 / |q|, by one thread (the host's order)
        if (tid == 0)
            inv_norm = graph_pq_unit(metric) ? graph_pq_inv_norm(query, g.dim) : 0.0;
        __syncthreads();
        float *x = reinterpret_cast<float *>(smem + L.residual);
        for (int i = tid; i < g.dim; i += nthreads)
            x[i] = graph_pq_residual(metric, query, inv_norm, g.center, i);
        __syncthreads();
        const int dsub = g.dim / g.pq_m;
        for (int e = tid; e < g.pq_m * VS_GRAPH_PQ_KSUB; e += nthreads)
            pq_table[e] = graph_pq_table_entry(inner, x, g.codebooks, dsub, e);
    }
    __syncthreads();

    // Every thread holds the same copies of: the beam's size, which buffer holds it, the counter
    // set, the visited count as of the last merge, the first unexpanded beam position, and the
    // beam positions and nodes this step expands (npick <= expand; registers: indexed by unrolled
    // selects only).
    int nb = 0, cur = 0, par = 0, nv = 0, open = INT_MAX, npick = 0;
    int pick_pos[VS_GRAPH_MAX_EXPAND];
    uint32_t pick_node[VS_GRAPH_MAX_EXPAND];
#pragma unroll
    for (int x = 0; x < VS_GRAPH_MAX_EXPAND; x++)
        pick_pos[x] = -1, pick_node[x] = kEmpty;

    // Measures the nodes item(0 .. count) (count <= fresh_cap), or takes their keys from keys[]
    // when it is not null (start_keys_kernel's), and merges those that may enter the beam, the
    // beam's picked positions marked expanded.  Called by the whole block.
    auto step = [&](int count, bool check_live, auto &&item, const uint64_t *keys) {
        const uint64_t *beam = beams + cur * ef;
        if (nv + count > static_cast<int>(L.hash_size / 2))
        {
            // forget everything but the beam (nobody touches the table between the last
            // merge's barrier and here)
            for (uint32_t i = tid; i < L.hash_size; i += nthreads)
                table[i] = kEmpty;
            if (tid == 0)
                nvisited = 0;
            __syncthreads();
            for (int i = tid; i < nb; i += nthreads)
                visit(table, mask, key_row(beam[i]), &nvisited);
            __syncthreads();
        }
        if (keys != nullptr) // a key not kept is not marked: if reached again it loses again
            for (int i = tid; i < count; i += nthreads)
            {
                const uint64_t key = keys[i];
                if (key != kNoKey && (nb < ef || key < beam[nb - 1]) &&
                    visit(table, mask, key_row(key), &nvisited))
                    fresh[atomicAdd(&nfresh[par], 1)] = key;
            }
        // braces and an else, not a bare `if constexpr` followed by the team loop: nvcc dropped
        // that loop from the generic lambda's non-PQ instances (no node was ever measured)
        if constexpr (PQ)
        {
            for (int i = tid; keys == nullptr && i < count; i += nthreads)
            {
                const uint32_t v = item(i);
                if (v < g.n && (!check_live || g.live == nullptr || g.live[v] != 0) &&
                    visit(table, mask, v, &nvisited))
                {
                    const uint64_t key = make_key(
                        pq_estimate(pq_table, g.codes + static_cast<size_t>(v) * g.pq_m, g.pq_m,
                                    inner),
                        v);
                    if (nb < ef || key < beam[nb - 1])
                        fresh[atomicAdd(&nfresh[par], 1)] = key;
                }
            }
        }
        else
        {
            for (int base = 0; keys == nullptr && base < count; base += teams)
            {
                const int i = base + team;
                uint32_t v = kEmpty;
                int is_new = 0;
                if (t == 0 && i < count)
                {
                    v = item(i);
                    is_new = v < g.n && (!check_live || g.live == nullptr || g.live[v] != 0) &&
                             visit(table, mask, v, &nvisited);
                }
                is_new = __shfl_sync(0xffffffffu, is_new, leader);
                v = __shfl_sync(0xffffffffu, v, leader);
                const double b = team_exact_base<T>(
                    Base, q, g.vectors + static_cast<size_t>(is_new ? v : 0) * g.dim, g.dim, t,
                    is_new != 0);
                if (t == 0 && is_new)
                {
                    const uint64_t key = make_key(nan_as_inf(base_to_output(metric, b)), v);
                    if (nb < ef || key < beam[nb - 1])
                        fresh[atomicAdd(&nfresh[par], 1)] = key;
                }
            }
        }
        __syncthreads();
        const int m = nfresh[par];
        nv = nvisited;
        if (tid == 0)
        {
            nfresh[par ^ 1] = 0;
            first_open[par ^ 1] = INT_MAX;
        }
        // merge by rank into the other buffer: a key's place is its rank in its own list plus
        // the keys of the other list below it; the first unexpanded place is noted on the way
        const uint8_t *expanded = flags + cur * ef;
        uint64_t *merged = beams + (cur ^ 1) * ef;
        uint8_t *merged_expanded = flags + (cur ^ 1) * ef;
        int first = INT_MAX;
        for (int i = tid; i < nb; i += nthreads)
        {
            const uint64_t key = beam[i];
            int pos = i;
            for (int j = 0; j < m; j++)
                pos += fresh[j] < key;
            bool done = expanded[i];
#pragma unroll
            for (int x = 0; x < VS_GRAPH_MAX_EXPAND; x++)
                done |= x < npick && pick_pos[x] == i;
            if (pos < ef)
            {
                merged[pos] = key;
                merged_expanded[pos] = done;
                if (!done)
                    first = min(first, pos);
            }
        }
        for (int j = tid; j < m; j += nthreads)
        {
            const uint64_t key = fresh[j];
            int pos = 0;
            for (int x = 0; x < m; x++)
                pos += fresh[x] < key;
            int lo = 0, hi = nb; // beam keys below key
            while (lo < hi)
            {
                const int mid = (lo + hi) / 2;
                if (beam[mid] < key)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            pos += lo;
            if (pos < ef)
            {
                merged[pos] = key;
                merged_expanded[pos] = 0;
                first = min(first, pos);
            }
        }
        first = __reduce_min_sync(0xffffffffu, first);
        if (lane == 0 && first != INT_MAX)
            atomicMin(&first_open[par], first);
        __syncthreads();
        nb = min(ef, nb + m);
        open = first_open[par];
        cur ^= 1;
        par ^= 1;
        // the next step's nodes: the first `expand` unexpanded positions of the new beam (its
        // flags stay as they are until the merge after next)
        npick = 0;
        const uint64_t *now = beams + cur * ef;
        const uint8_t *now_expanded = flags + cur * ef;
        for (int i = open; i < nb && npick < expand; i++)
            if (!now_expanded[i])
            {
#pragma unroll
                for (int x = 0; x < VS_GRAPH_MAX_EXPAND; x++)
                    if (x == npick)
                        pick_pos[x] = i, pick_node[x] = key_row(now[i]);
                npick++;
            }
    };

    const uint64_t *my_keys =
        start_keys ? start_keys + static_cast<size_t>(blockIdx.x) * nstarts : nullptr;
    for (int s = 0; s < nstarts; s += L.fresh_cap)
    {
        npick = 0; // no node is expanded while the start nodes go in
        step(min(L.fresh_cap, nstarts - s), true, [&](int i) { return starts[s + i]; },
             my_keys ? my_keys + s : nullptr);
    }

    while (npick > 0)
        step(npick * g.degree, false, [&](int i) {
            const int w = i / g.degree;
            uint32_t node = pick_node[0];
#pragma unroll
            for (int x = 1; x < VS_GRAPH_MAX_EXPAND; x++)
                if (x == w)
                    node = pick_node[x];
            return g.nbrs[static_cast<size_t>(node) * g.degree + (i - w * g.degree)];
        }, nullptr);

    // the beam's distances (a key holds +inf for NaN: measure those again; a compressed object's
    // keys hold estimates: measure all) and ids
    const uint64_t *beam = beams + cur * ef;
    int64_t *ids = reinterpret_cast<int64_t *>(beams + (cur ^ 1) * ef);
    for (int base = 0; base < nb; base += teams)
    {
        const int i = base + team;
        const uint64_t key = i < nb ? beam[i] : 0;
        const uint32_t v = key_row(key);
        float d = key_dist(key);
        const bool again = i < nb && (PQ || isinf(d));
        const double b = team_exact_base<T>(
            Base, q, g.vectors + static_cast<size_t>(again ? v : 0) * g.dim, g.dim, t, again);
        if (again)
            d = base_to_output(metric, b);
        if (t == 0 && i < nb)
        {
            dist[i] = d;
            ids[i] = g.ids ? g.ids[v] : static_cast<int64_t>(v);
        }
    }
    __syncthreads();
    write_results(dist, ids, nb, k, out_ids, out_dists, out_counts);
}

// The keys of every (query, start node) pair, keys[q * nstarts + s] (kNoKey for a start node out
// of range or not live), a team of T lanes per pair over the whole grid: the search's start
// steps then only select, and a small batch measures its start nodes at once instead of a few
// per team per step.  A warp takes one start node for the 32 / T queries of a group, so its teams
// read the row in the same instructions (one L2 read for all of them), and consecutive warps take
// consecutive start nodes of the same group, whose queries stay in L1: the start rows' L2 traffic
// is divided by the group size.
template <int T, vs_metric Base>
__global__ void __launch_bounds__(256)
    start_keys_kernel(GraphView g, vs_metric metric, const float *__restrict__ queries, int nq,
                      const uint32_t *__restrict__ starts, int nstarts,
                      uint64_t *__restrict__ keys)
{
    constexpr int kGroup = 32 / T; // queries per warp
    const int lane = threadIdx.x & 31, t = lane & (T - 1);
    const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32,
                 warps = gridDim.x * static_cast<size_t>(blockDim.x) / 32,
                 groups = (static_cast<size_t>(nq) + kGroup - 1) / kGroup,
                 items = groups * nstarts;
    // warp-uniform trip count: the team's shuffles need the whole warp
    for (size_t item = warp; item < items; item += warps)
    {
        const size_t query = item / nstarts * kGroup + lane / T, s = item % nstarts;
        const bool in = query < static_cast<size_t>(nq);
        const uint32_t v = starts[s];
        const bool valid = in && v < g.n && (g.live == nullptr || g.live[v] != 0);
        const float *q = queries + (in ? query : 0) * g.dim;
        const double b = team_exact_base<T>(
            Base, q, g.vectors + static_cast<size_t>(valid ? v : 0) * g.dim, g.dim, t, valid);
        if (t == 0 && in)
            keys[query * nstarts + s] =
                valid ? make_key(nan_as_inf(base_to_output(metric, b)), v) : kNoKey;
    }
}

// Free slots (VS_GRAPH_NONE or out of range) and nodes not live, as kEmpty: the search's hops
// then need no live flag.
__global__ void fold_live_kernel(uint32_t *nbrs, size_t total, const uint8_t *live, uint32_t n)
{
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
    {
        const uint32_t v = nbrs[i];
        if (v != kEmpty && (v >= n || (live != nullptr && live[v] == 0)))
            nbrs[i] = kEmpty;
    }
}

// Pinned host memory mapped into the device's address space (a compressed object's arrays).
class MappedHost
{
public:
    MappedHost() = default;
    MappedHost(const MappedHost &) = delete;
    MappedHost &operator=(const MappedHost &) = delete;
    ~MappedHost()
    {
        if (host_)
            cudaFreeHost(host_);
    }
    void *allocate(size_t bytes)
    {
        if (cudaHostAlloc(&host_, std::max<size_t>(bytes, 1), cudaHostAllocMapped) != cudaSuccess)
        {
            host_ = nullptr;
            cudaGetLastError();
            throw Error(VS_OUT_OF_MEMORY, "out of pinned host memory (" + std::to_string(bytes) +
                                              " bytes for a compressed graph)");
        }
        VS_CUDA_CHECK(cudaHostGetDevicePointer(&device_, host_, 0));
        return host_;
    }
    template <typename T> const T *device() const { return static_cast<const T *>(device_); }

private:
    void *host_ = nullptr, *device_ = nullptr;
};

class CudaGraph final : public Graph
{
public:
    // A compressed object (the file's head): codes, quantizer and live flags to the device, the
    // rest to mapped host memory, the neighbour rows folded on the way.
    CudaGraph(DeviceContext &dev, const vs_graph_arrays &a, const vs_graph_pq &pq,
              const uint8_t *codes_in)
    {
        n_ = a.n;
        dim_ = a.dim;
        degree_ = a.degree;
        pq_metric_ = pq.metric;
        pq_m_ = pq.m;
        vs_graph_compressed_memory(a.n, a.dim, a.degree, pq.m, &memory_);
        cudaStream_t s = dev.main;
        const size_t n = std::max<size_t>(a.n, 1);
        codes = DeviceArray<uint8_t>(*dev.pool, n * pq.m, s);
        center = DeviceArray<float>(*dev.pool, a.dim, s);
        codebooks = DeviceArray<float>(*dev.pool, VS_GRAPH_PQ_KSUB * a.dim, s);
        VS_CUDA_CHECK(cudaMemcpyAsync(codes.get(), codes_in, a.n * pq.m, cudaMemcpyHostToDevice, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(center.get(), pq.center, a.dim * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
        VS_CUDA_CHECK(cudaMemcpyAsync(codebooks.get(), pq.codebooks,
                                      VS_GRAPH_PQ_KSUB * a.dim * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
        if (a.live)
        {
            live = DeviceArray<uint8_t>(*dev.pool, n, s);
            VS_CUDA_CHECK(cudaMemcpyAsync(live.get(), a.live, a.n, cudaMemcpyHostToDevice, s));
        }
        float *hv = static_cast<float *>(host_vectors.allocate(a.n * a.dim * sizeof(float)));
        if (a.n > 0)
            std::memcpy(hv, a.vectors, a.n * a.dim * sizeof(float));
        uint32_t *hn = static_cast<uint32_t *>(host_nbrs.allocate(a.n * a.degree * sizeof(uint32_t)));
        for (size_t i = 0; i < a.n * a.degree; i++)
        {
            const uint32_t v = a.neighbors[i];
            hn[i] = v >= a.n || (a.live != nullptr && a.live[v] == 0) ? kEmpty : v;
        }
        if (a.ids)
        {
            int64_t *hi = static_cast<int64_t *>(host_ids.allocate(a.n * sizeof(int64_t)));
            if (a.n > 0)
                std::memcpy(hi, a.ids, a.n * sizeof(int64_t));
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
    }

    CudaGraph(DeviceContext &dev, const vs_graph_arrays &a)
    {
        n_ = a.n;
        dim_ = a.dim;
        degree_ = a.degree;
        cudaStream_t s = dev.main;
        const size_t n = std::max<size_t>(a.n, 1);
        vectors = DeviceArray<float>(*dev.pool, n * a.dim, s);
        nbrs = DeviceArray<uint32_t>(*dev.pool, n * a.degree, s);
        if (a.n > 0)
        {
            VS_CUDA_CHECK(cudaMemcpyAsync(vectors.get(), a.vectors, a.n * a.dim * sizeof(float),
                                          cudaMemcpyHostToDevice, s));
            VS_CUDA_CHECK(cudaMemcpyAsync(nbrs.get(), a.neighbors,
                                          a.n * a.degree * sizeof(uint32_t),
                                          cudaMemcpyHostToDevice, s));
        }
        if (a.live)
        {
            live = DeviceArray<uint8_t>(*dev.pool, n, s);
            if (a.n > 0)
                VS_CUDA_CHECK(cudaMemcpyAsync(live.get(), a.live, a.n, cudaMemcpyHostToDevice, s));
        }
        if (a.ids)
        {
            ids = DeviceArray<int64_t>(*dev.pool, n, s);
            if (a.n > 0)
                VS_CUDA_CHECK(cudaMemcpyAsync(ids.get(), a.ids, a.n * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, s));
        }
        if (a.n > 0)
        {
            const size_t total = a.n * a.degree;
            const unsigned blocks = static_cast<unsigned>(std::min<size_t>((total + 255) / 256, 4096));
            fold_live_kernel<<<blocks, 256, 0, s>>>(nbrs.get(), total, a.live ? live.get() : nullptr,
                                                    static_cast<uint32_t>(a.n));
            VS_LAUNCH_CHECK();
        }
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
        memory_.device_bytes = vectors.bytes() + nbrs.bytes() + live.bytes() + ids.bytes();
    }

    GraphView view() const
    {
        const bool pq = pq_m_ > 0;
        GraphView v{};
        v.vectors = pq ? host_vectors.device<float>() : vectors.get();
        v.nbrs = pq ? host_nbrs.device<uint32_t>() : nbrs.get();
        v.live = live.size() ? live.get() : nullptr;
        v.ids = pq ? host_ids.device<int64_t>() : (ids.size() ? ids.get() : nullptr);
        v.n = static_cast<uint32_t>(n_);
        v.dim = static_cast<int>(dim_);
        v.degree = static_cast<int>(degree_);
        v.codes = codes.get();
        v.center = center.get();
        v.codebooks = codebooks.get();
        v.pq_m = static_cast<int>(pq_m_);
        return v;
    }

private:
    size_t pq_m_ = 0;
    DeviceArray<float> vectors;
    DeviceArray<uint32_t> nbrs;
    DeviceArray<uint8_t> live;
    DeviceArray<int64_t> ids;
    // a compressed object's
    DeviceArray<uint8_t> codes;
    DeviceArray<float> center, codebooks;
    MappedHost host_vectors, host_nbrs, host_ids;
};

const CudaGraph &as_cuda_graph(const Graph *g)
{
    auto *c = dynamic_cast<const CudaGraph *>(g);
    if (!c)
        throw Error(VS_INVALID_ARGUMENT, "graph object belongs to another backend");
    return *c;
}

// VSEARCH_CUDA_GRAPH_KERNEL, read per call for timings: "team" (or unset: lanes from the
// dimension), or "team4" .. "team32" (that many lanes per distance); returns 0 for the dimension's.
int forced_team_lanes()
{
    const char *v = std::getenv("VSEARCH_CUDA_GRAPH_KERNEL");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "team") == 0)
        return 0;
    for (int lanes : {4, 8, 16, 32})
        if (std::string(v) == "team" + std::to_string(lanes))
            return lanes;
    throw Error(VS_INVALID_ARGUMENT,
                std::string("VSEARCH_CUDA_GRAPH_KERNEL is team, team4, team8, team16 or team32, not ") +
                    v);
}

// How the start nodes' keys are measured when there are more of them than a step takes:
// VSEARCH_CUDA_GRAPH_STARTS, read per call for tests and timings: "teams" every (query, start)
// pair by start_keys_kernel, "tiles" every pair by impl/pair_keys.cu, "cut" only the starts that
// can be in a query's first beam (impl/start_cut.cu; L2 and IP, at most kStartCutMaxStarts
// starts: else teams); "auto" (or unset) is cut where it applies to a call of at least
// kStartCutMinQueries queries, else teams (docs/ENGINE.md, "Graphs").
enum class StartPass
{
    automatic,
    teams,
    tiles,
    cut
};

StartPass start_pass_asked()
{
    const char *v = std::getenv("VSEARCH_CUDA_GRAPH_STARTS");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0)
        return StartPass::automatic;
    if (std::strcmp(v, "teams") == 0)
        return StartPass::teams;
    if (std::strcmp(v, "tiles") == 0)
        return StartPass::tiles;
    if (std::strcmp(v, "cut") == 0)
        return StartPass::cut;
    throw Error(VS_INVALID_ARGUMENT,
                std::string("VSEARCH_CUDA_GRAPH_STARTS is auto, cut, tiles or teams, not ") + v);
}

using TeamKernel = void (*)(GraphView, vs_metric, const float *, const uint32_t *,
                            const uint64_t *, int, int, int, int, TeamLayout, int64_t *, float *,
                            int64_t *);
using StartKernel = void (*)(GraphView, vs_metric, const float *, int, const uint32_t *, int,
                             uint64_t *);

template <int T, bool PQ = false> TeamKernel team_kernel(vs_metric m)
{
    switch (m)
    {
    case VS_METRIC_IP:
        return team_search_kernel<T, VS_METRIC_IP, PQ>;
    case VS_METRIC_COSINE:
        return team_search_kernel<T, VS_METRIC_COSINE, PQ>;
    default: // L2SQ, L2 (the front end admits no other)
        return team_search_kernel<T, VS_METRIC_L2SQ, PQ>;
    }
}

template <int T> StartKernel start_kernel(vs_metric m)
{
    switch (m)
    {
    case VS_METRIC_IP:
        return start_keys_kernel<T, VS_METRIC_IP>;
    case VS_METRIC_COSINE:
        return start_keys_kernel<T, VS_METRIC_COSINE>;
    default:
        return start_keys_kernel<T, VS_METRIC_L2SQ>;
    }
}

// The kernel for a graph, metric and expansion: T lanes per distance (at most 32 floats
// each, at least 4 lanes), a block of 128 threads, or 256 where that gives more of a step's
// neighbours (expand x degree) a team; start nodes in chunks of 4 per team.  A compressed
// object's: a thread per neighbour, 32-lane teams for the re-rank, start nodes in chunks of one
// per thread.
struct TeamShape
{
    int lanes, threads, fresh_cap;
    TeamKernel kernel;
    StartKernel starts; // for more start nodes than a step takes

    TeamShape(int dim, int degree, int expand, vs_metric m, int forced_lanes, bool pq)
    {
        if (pq)
        {
            lanes = kPqLanes;
            threads = expand * degree > 128 ? kTeamMaxThreads : 128;
            fresh_cap = std::max(expand * degree, threads);
            kernel = team_kernel<kPqLanes, true>(m);
            starts = nullptr;
            return;
        }
        lanes = 4;
        while (lanes < 32 && lanes * 32 < dim)
            lanes <<= 1;
        if (forced_lanes)
            lanes = forced_lanes;
        threads = expand * degree * lanes > 128 ? kTeamMaxThreads : 128;
        fresh_cap = std::max(expand * degree, 4 * threads / lanes);
        kernel = lanes == 4    ? team_kernel<4>(m)
                 : lanes == 8  ? team_kernel<8>(m)
                 : lanes == 16 ? team_kernel<16>(m)
                               : team_kernel<32>(m);
        starts = lanes == 4    ? start_kernel<4>(m)
                 : lanes == 8  ? start_kernel<8>(m)
                 : lanes == 16 ? start_kernel<16>(m)
                               : start_kernel<32>(m);
    }
};

// Later repeats of a start node in list[0 .. count) replaced by kEmpty (no key), so that the cut
// counts each start once; entries >= n have no key anyway.
void repeats_as_empty(uint32_t *list, size_t count, uint32_t n)
{
    size_t size = 16;
    while (size < 2 * count)
        size <<= 1;
    std::vector<uint32_t> seen(size, kEmpty);
    for (size_t i = 0; i < count; i++)
    {
        const uint32_t v = list[i];
        if (v >= n)
            continue;
        size_t h = (v * 2654435761u) & (size - 1);
        while (seen[h] != kEmpty && seen[h] != v)
            h = (h + 1) & (size - 1);
        if (seen[h] == v)
            list[i] = kEmpty;
        else
            seen[h] = v;
    }
}

void graph_search(DeviceContext &dev, const CudaGraph &cg, const vs_graph_search_params &p,
                  const float *queries, size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts)
{
    const GraphView g = cg.view();
    if (p.ef > static_cast<size_t>(INT_MAX / 64) || cg.dim() > static_cast<size_t>(INT_MAX / 64))
        throw Error(VS_UNSUPPORTED, "the GPU graph search of width " + std::to_string(p.ef) +
                                        " does not fit shared memory");
    const int ef = static_cast<int>(p.ef), expand = static_cast<int>(std::max<size_t>(p.expand, 1));
    const bool pq = g.pq_m > 0;
    const TeamShape shape(g.dim, g.degree, expand, p.metric, pq ? 0 : forced_team_lanes(), pq);
    const TeamLayout TL(ef, shape.fresh_cap, g.dim, g.pq_m);
    const size_t bytes = TL.bytes;
    if (bytes > dev.smem_optin)
        throw Error(VS_UNSUPPORTED, "the GPU graph search of width " + std::to_string(p.ef) +
                                        (pq ? " and code bytes " + std::to_string(g.pq_m) : "") +
                                        " needs " + std::to_string(bytes) +
                                        " bytes of shared memory; the device has " +
                                        std::to_string(dev.smem_optin));
    set_smem(reinterpret_cast<const void *>(shape.kernel), bytes);
    cudaStream_t s = dev.main;
    // One upload (the start nodes with the first launch, each launch's queries) and one download
    // (ids, counts, distances) per launch, through pinned buffers: a pageable copy costs several
    // microseconds, which a one-query search would otherwise pay five times.
    // more start nodes than a step takes: their keys first, over the grid
    const bool start_pass = !pq && p.nstarts > static_cast<size_t>(shape.fresh_cap);
    // how: only the starts that can be in a query's first beam (impl/start_cut.cu) where that
    // applies, unless teams or tiles are asked for; by tiles (impl/pair_keys.cu: every value read
    // serves several pairs) when asked for; else by teams over the grid
    const StartPass asked = start_pass_asked();
    const PairKeyPlan tile_plan = pair_key_plan(g.dim);
    if (asked == StartPass::tiles && tile_plan.leaves == 0)
        throw Error(VS_UNSUPPORTED, "VSEARCH_CUDA_GRAPH_STARTS=tiles: no tile of dimension " +
                                        std::to_string(g.dim) + " fits shared memory");
    const bool tiles = start_pass && asked == StartPass::tiles;
    const bool cut = start_pass &&
                     (asked == StartPass::cut ||
                      (asked == StartPass::automatic && nq >= kStartCutMinQueries)) &&
                     p.metric != VS_METRIC_COSINE && p.nstarts > static_cast<size_t>(ef) &&
                     p.nstarts <= static_cast<size_t>(kStartCutMaxStarts);
    size_t chunk = std::min(
        nq, std::clamp<size_t>(kStagingBytes / (4 * cg.dim()), kQueryChunkMin, kQueryChunk));
    if (start_pass) // the keys, and the cut's products
        chunk = std::min(chunk, std::max<size_t>(kStartKeyBytes / ((cut ? 12 : 8) * p.nstarts), 1));
    const size_t starts_bytes = (p.nstarts * sizeof(uint32_t) + 15) / 16 * 16;
    const size_t in_bytes = starts_bytes + chunk * g.dim * sizeof(float);
    const size_t out_bytes = chunk * k * (sizeof(int64_t) + sizeof(float)) + chunk * sizeof(int64_t);
    DeviceArray<unsigned char> d_in(*dev.pool, in_bytes, s);
    DeviceArray<unsigned char> d_out(*dev.pool, out_bytes, s);
    DeviceArray<uint64_t> d_keys(*dev.pool, start_pass ? chunk * p.nstarts : 1, s);
    DeviceArray<double> d_norms(*dev.pool,
                                tiles && p.metric == VS_METRIC_COSINE ? chunk + p.nstarts : 1, s);
    // the cut's packed start rows, their squared norms, the largest norm, the products
    DeviceArray<float> d_packed(*dev.pool, cut ? p.nstarts * g.dim + p.nstarts : 1, s);
    DeviceArray<double> d_rmax(*dev.pool, 1, s);
    DeviceArray<float> d_products(*dev.pool, cut ? chunk * p.nstarts : 1, s);
    const uint32_t *d_starts = reinterpret_cast<const uint32_t *>(d_in.get());
    const float *d_queries = reinterpret_cast<const float *>(d_in.get() + starts_bytes);
    int64_t *d_ids = reinterpret_cast<int64_t *>(d_out.get());
    int64_t *d_counts = d_ids + chunk * k;
    float *d_dists = reinterpret_cast<float *>(d_counts + chunk);
    // the previous upload through the staging buffer must be done before it is rewritten (an
    // event never recorded counts as complete); later launches wait for their own results first
    VS_CUDA_CHECK(cudaEventSynchronize(dev.staging_copied));
    unsigned char *h_in = static_cast<unsigned char *>(dev.staging.ensure(in_bytes));
    unsigned char *h_out = static_cast<unsigned char *>(dev.pinned[0].ensure(out_bytes));
    if (p.nstarts > 0)
        std::memcpy(h_in, p.starts, p.nstarts * sizeof(uint32_t));
    if (cut) // the cut counts each start once
        repeats_as_empty(reinterpret_cast<uint32_t *>(h_in), p.nstarts, g.n);
    const PairKeyRows start_rows{g.vectors, g.n,      g.dim, g.live,
                                 d_starts,  static_cast<int>(p.nstarts)};
    // cuBLAS's first handle on this call's stream (it is the first work stream's otherwise)
    struct BlasOnStream
    {
        DeviceContext &dev;
        bool set;
        ~BlasOnStream()
        {
            if (set)
                cublasSetStream(dev.blas[0], dev.work[0]);
        }
    } blas_on_stream{dev, cut};
    if (cut)
        VS_CUBLAS_CHECK(cublasSetStream(dev.blas[0], s));
    for (size_t q0 = 0; q0 < nq; q0 += chunk)
    {
        check_cancel(dev.cfg);
        const size_t c = std::min(chunk, nq - q0);
        const size_t first = q0 == 0 ? 0 : starts_bytes; // the starts go up once
        std::memcpy(h_in + starts_bytes, queries + q0 * g.dim, c * g.dim * sizeof(float));
        VS_CUDA_CHECK(cudaMemcpyAsync(d_in.get() + first, h_in + first,
                                      starts_bytes - first + c * g.dim * sizeof(float),
                                      cudaMemcpyHostToDevice, s));
        VS_CUDA_CHECK(cudaEventRecord(dev.staging_copied, s));
        if (cut)
        {
            float *d_sqnorms = d_packed.get() + p.nstarts * g.dim;
            if (q0 == 0)
            {
                VS_CUDA_CHECK(cudaMemsetAsync(d_rmax.get(), 0, sizeof(double), s));
                pack_start_rows(start_rows, d_packed.get(), d_sqnorms, d_rmax.get(), s);
            }
            // products[q * nstarts + j] = <start j, query q> in plain fp32 (the cut's bound),
            // whatever the handle's TF32 setting
            const float one = 1.0f, zero = 0.0f;
            VS_CUBLAS_CHECK(cublasGemmEx(dev.blas[0], CUBLAS_OP_T, CUBLAS_OP_N,
                                         static_cast<int>(p.nstarts), static_cast<int>(c), g.dim,
                                         &one, d_packed.get(), CUDA_R_32F, g.dim, d_queries,
                                         CUDA_R_32F, g.dim, &zero, d_products.get(), CUDA_R_32F,
                                         static_cast<int>(p.nstarts), CUBLAS_COMPUTE_32F_PEDANTIC,
                                         CUBLAS_GEMM_DEFAULT));
            cut_start_keys(p.metric, shape.lanes, d_queries, static_cast<int>(c), start_rows,
                           d_products.get(), d_sqnorms, d_rmax.get(), ef, kExactKeyError,
                           d_keys.get(), s);
        }
        else if (tiles)
            exact_pair_keys(p.metric, d_queries, static_cast<int>(c), start_rows, tile_plan,
                            d_norms.get(), d_keys.get(), s);
        else if (start_pass)
        {
            const size_t group = 32 / shape.lanes, warps = (c + group - 1) / group * p.nstarts;
            const unsigned blocks = static_cast<unsigned>(std::min<size_t>((warps + 7) / 8, 8192));
            shape.starts<<<blocks, 256, 0, s>>>(g, p.metric, d_queries, static_cast<int>(c),
                                                 d_starts, static_cast<int>(p.nstarts),
                                                 d_keys.get());
            VS_LAUNCH_CHECK();
        }
        shape.kernel<<<static_cast<unsigned>(c), shape.threads, bytes, s>>>(
            g, p.metric, d_queries, d_starts, start_pass ? d_keys.get() : nullptr,
            static_cast<int>(p.nstarts), ef, expand, static_cast<int>(k), TL, d_ids, d_dists,
            d_counts);
        VS_LAUNCH_CHECK();
        VS_CUDA_CHECK(cudaMemcpyAsync(h_out, d_out.get(), out_bytes, cudaMemcpyDeviceToHost, s));
        VS_CUDA_CHECK(cudaStreamSynchronize(s));
        const int64_t *h_ids = reinterpret_cast<const int64_t *>(h_out);
        const int64_t *h_counts = h_ids + chunk * k;
        const float *h_dists = reinterpret_cast<const float *>(h_counts + chunk);
        std::memcpy(out_ids + q0 * k, h_ids, c * k * sizeof(int64_t));
        std::memcpy(out_dists + q0 * k, h_dists, c * k * sizeof(float));
        if (out_counts)
            std::memcpy(out_counts + q0, h_counts, c * sizeof(int64_t));
    }
}

class CudaGraphBackend final : public GraphBackend
{
public:
    explicit CudaGraphBackend(Lanes &lanes) : lanes_(lanes) {}

    Status create(const vs_graph_arrays &arrays, Graph **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaGraph(dev, arrays); });
    }

    Status create_compressed(const vs_graph_arrays &arrays, const vs_graph_pq &pq,
                             const uint8_t *codes, Graph **out) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) { *out = new CudaGraph(dev, arrays, pq, codes); });
    }

    Status search(const Graph *g, const vs_graph_search_params &params, const float *queries,
                  size_t nq, size_t k, int64_t *out_ids, float *out_dists,
                  int64_t *out_counts) noexcept override
    {
        return lanes_.run([&](DeviceContext &dev) {
            graph_search(dev, as_cuda_graph(g), params, queries, nq, k, out_ids, out_dists,
                         out_counts);
        });
    }

private:
    Lanes &lanes_;
};

} // namespace

std::unique_ptr<GraphBackend> make_cuda_graph(Lanes &lanes)
{
    return std::unique_ptr<GraphBackend>(new CudaGraphBackend(lanes));
}

} // namespace vs::cuda
