// Exact keys of every (query, row) pair, tiled (pair_keys.cuh).
//
// The exact formula (engine/exact.h) adds term i to partial sum p[i mod 32] in ascending i, then
// reduces the 32 partials by an xor butterfly.  The butterfly is a fixed binary tree: its first
// level pairs p[j] with p[j ^ 16], the last p[0]'s half with p[1]'s.  Visiting the leaves in
// bit-reversed order (m = 0 .. 31 visits p[bitrev5(m)]) makes that tree a post-order walk, so one
// thread computes a pair's value with a stack of five partial sums instead of 32 (after leaf m,
// fold as many levels as m has trailing one bits), with the same additions in the same order:
// the result is bit-identical to the warp and team versions.
//
// A block of 4 warps takes 16 queries x 64 rows; a thread 4 queries (the same for its warp: their
// shared-memory reads are broadcasts) x 2 rows (lane and lane + 32: consecutive doubles), 8 pairs
// in registers, so each value read from shared memory serves 2 or 4 pairs.  Shared memory holds the
// tile's vectors widened to double once (a conversion per value, not per pair), a pass of
// `leaves` partials at a time: for each leaf its terms i = j, j + 32, ... (zeros past the
// dimension, which add nothing: a partial sum is never -0).  Cosine's norms come from a pass of
// their own (a warp per vector, the same tree), so the tiles carry the dot product only.
#include "cuda/impl/pair_keys.cuh"

#include "cuda/utils/error.cuh"
#include "cuda/utils/exact_team.cuh"
#include "engine/exact.h"

#include <algorithm>

namespace vs::cuda {
namespace {

constexpr int kWarps = 4, kQueriesPerThread = 4, kRowsPerThread = 2;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileQueries = kWarps * kQueriesPerThread; // a block's queries
constexpr int kTileRows = 32 * kRowsPerThread;
constexpr int kTileVectors = kTileQueries + kTileRows;
constexpr int kLevels = 5; // log2 of the 32 partial sums
// a block's shared memory for the tile's values: the limit without the opt-in, so that a
// dimension's plan does not depend on the device; up to 2 432 dimensions (one leaf a pass)
constexpr size_t kTileSmem = (size_t{48} << 10) - 1024;

__host__ __device__ constexpr int leaf_partial(int m) // the partial sum leaf m is: m's bits reversed
{
    return ((m & 1) << 4) | ((m & 2) << 2) | (m & 4) | ((m & 8) >> 2) | ((m & 16) >> 4);
}

__host__ __device__ constexpr int trailing_ones(int m) { return (m & 1) ? 1 + trailing_ones(m >> 1) : 0; }

struct Pairs
{
    double v[kQueriesPerThread][kRowsPerThread];
};

// The tile's vectors (queries, then rows; null: padding or a row without a key) and, per
// pass, their values for the pass's leaves: tile[(slot * nr + r) * kTileVectors + vector].
struct Tile
{
    const float *const *vectors;
    double *values;
    int dim, nr, leaves;

    __device__ void load(int first_leaf) const
    {
        __syncthreads(); // the previous pass is read
        const int count = leaves * nr * kTileVectors;
        for (int e = threadIdx.x; e < count; e += kThreads)
        {
            const int v = e % kTileVectors, rs = e / kTileVectors;
            const int i = leaf_partial(first_leaf + rs / nr) + 32 * (rs % nr);
            const float *x = vectors[v];
            values[e] = x != nullptr && i < dim ? static_cast<double>(__ldg(x + i)) : 0.0;
        }
        __syncthreads();
    }
};

template <vs_metric Base> __device__ __forceinline__ double term(double x, double y)
{
    if constexpr (Base == VS_METRIC_L2SQ)
    {
        const double u = __dsub_rn(x, y);
        return __dmul_rn(u, u);
    }
    else
        return __dmul_rn(x, y); // IP and COSINE: the dot product
}

// Leaf M's partial sums of the thread's pairs, folded into the stack; then the next leaf.  After
// leaf 31, stack[kLevels] holds the sums.
template <vs_metric Base, int M>
__device__ __forceinline__ void walk_leaves(const Tile &tile, int qcol, int rcol,
                                            Pairs (&stack)[kLevels + 1])
{
    if constexpr (M < 32)
    {
        const int slot = M % tile.leaves;
        if (slot == 0)
            tile.load(M);
        Pairs leaf;
#pragma unroll
        for (int a = 0; a < kQueriesPerThread; a++)
#pragma unroll
            for (int b = 0; b < kRowsPerThread; b++)
                leaf.v[a][b] = 0.0;
        const double *at = tile.values + slot * tile.nr * kTileVectors;
        for (int r = 0; r < tile.nr; r++, at += kTileVectors)
        {
            double x[kQueriesPerThread], y[kRowsPerThread];
#pragma unroll
            for (int a = 0; a < kQueriesPerThread; a++)
                x[a] = at[qcol + a];
#pragma unroll
            for (int b = 0; b < kRowsPerThread; b++)
                y[b] = at[rcol + 32 * b];
#pragma unroll
            for (int a = 0; a < kQueriesPerThread; a++)
#pragma unroll
                for (int b = 0; b < kRowsPerThread; b++)
                    leaf.v[a][b] = __dadd_rn(leaf.v[a][b], term<Base>(x[a], y[b]));
        }
        constexpr int folds = trailing_ones(M);
#pragma unroll
        for (int l = 0; l < folds; l++)
#pragma unroll
            for (int a = 0; a < kQueriesPerThread; a++)
#pragma unroll
                for (int b = 0; b < kRowsPerThread; b++)
                    leaf.v[a][b] = __dadd_rn(stack[l].v[a][b], leaf.v[a][b]);
        stack[folds] = leaf;
        walk_leaves<Base, M + 1>(tile, qcol, rcol, stack);
    }
}

template <vs_metric Base>
__global__ void __launch_bounds__(kThreads)
    pair_keys_kernel(vs_metric metric, const float *__restrict__ queries, int nq, PairKeyRows R,
                     int leaves, const double *__restrict__ norms, uint64_t *__restrict__ keys)
{
    extern __shared__ double values[];
    __shared__ const float *vectors[kTileVectors];
    __shared__ uint32_t nodes[kTileRows];
    const int q0 = blockIdx.x * kTileQueries, s0 = blockIdx.y * kTileRows;
    for (int v = threadIdx.x; v < kTileVectors; v += kThreads)
    {
        if (v < kTileQueries)
            vectors[v] =
                q0 + v < nq ? queries + static_cast<size_t>(q0 + v) * R.dim : nullptr;
        else
        {
            const int s = s0 + v - kTileQueries;
            const uint32_t node = s < R.count ? R.list[s] : kNoRow;
            nodes[v - kTileQueries] = node;
            vectors[v] = s < R.count && pair_row_has_key(R, node)
                             ? R.vectors + static_cast<size_t>(node) * R.dim
                             : nullptr;
        }
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int qcol = warp * kQueriesPerThread, rcol = kTileQueries + lane;
    const Tile tile{vectors, values, R.dim, (R.dim + 31) / 32, leaves};
    Pairs stack[kLevels + 1];
    walk_leaves<Base, 0>(tile, qcol, rcol, stack); // its first load's barrier orders `vectors`
#pragma unroll
    for (int a = 0; a < kQueriesPerThread; a++)
#pragma unroll
        for (int b = 0; b < kRowsPerThread; b++)
        {
            const int q = q0 + qcol + a, s = s0 + lane + 32 * b;
            if (q >= nq || s >= R.count)
                continue;
            uint64_t key = kNoKey;
            if (vectors[rcol + 32 * b] != nullptr)
            {
                const double sum = stack[kLevels].v[a][b];
                const double base = Base == VS_METRIC_L2SQ ? sum
                                    : Base == VS_METRIC_IP ? -sum
                                                           : cosine_base(sum, norms[q], norms[nq + s]);
                const float d = base_to_output(metric, base);
                key = make_key(d != d ? INFINITY : d, nodes[lane + 32 * b]);
            }
            keys[static_cast<size_t>(q) * R.count + s] = key;
        }
}

// norms[w]: the squared norm of query w (w < nq) or of row list[w - nq] (0 without a key), by
// the exact formula (a warp per vector).
__global__ void __launch_bounds__(256)
    pair_norms_kernel(const float *__restrict__ queries, int nq, PairKeyRows R, double *norms)
{
    const int lane = threadIdx.x & 31;
    const size_t total = static_cast<size_t>(nq) + R.count;
    const size_t warps = gridDim.x * static_cast<size_t>(blockDim.x) / 32;
    for (size_t w = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32; w < total;
         w += warps) // warp-uniform: the team's shuffles need the whole warp
    {
        const float *x = R.vectors;
        bool valid = true;
        if (w < static_cast<size_t>(nq))
            x = queries + w * R.dim;
        else
        {
            const uint32_t v = R.list[w - nq];
            valid = pair_row_has_key(R, v);
            if (valid)
                x = R.vectors + static_cast<size_t>(v) * R.dim;
        }
        const double b = team_exact_base<32>(VS_METRIC_IP, x, x, R.dim, lane, valid);
        if (lane == 0)
            norms[w] = valid ? -b : 0.0;
    }
}

template <vs_metric Base> void launch(vs_metric metric, const float *queries, int nq,
                                      const PairKeyRows &R, const PairKeyPlan &plan,
                                      const double *norms, uint64_t *keys, cudaStream_t s)
{
    const dim3 grid((nq + kTileQueries - 1) / kTileQueries,
                    (R.count + kTileRows - 1) / kTileRows);
    pair_keys_kernel<Base><<<grid, kThreads, plan.bytes, s>>>(metric, queries, nq, R, plan.leaves,
                                                              norms, keys);
    VS_LAUNCH_CHECK();
}

} // namespace

PairKeyPlan pair_key_plan(int dim)
{
    const size_t per_leaf = static_cast<size_t>(kTileVectors) * ((dim + 31) / 32) * sizeof(double);
    for (int leaves = 32; leaves >= 1; leaves /= 2)
        if (leaves * per_leaf <= kTileSmem)
            return {leaves, leaves * per_leaf};
    return {0, 0};
}

void exact_pair_keys(vs_metric metric, const float *queries, int nq, const PairKeyRows &rows,
                     const PairKeyPlan &plan, double *norms, uint64_t *keys, cudaStream_t s)
{
    if (nq <= 0 || rows.count <= 0)
        return;
    switch (metric)
    {
    case VS_METRIC_IP:
        launch<VS_METRIC_IP>(metric, queries, nq, rows, plan, nullptr, keys, s);
        break;
    case VS_METRIC_COSINE:
    {
        const size_t warps = static_cast<size_t>(nq) + rows.count;
        const unsigned blocks = static_cast<unsigned>(std::min<size_t>((warps + 7) / 8, 4096));
        pair_norms_kernel<<<blocks, 256, 0, s>>>(queries, nq, rows, norms);
        VS_LAUNCH_CHECK();
        launch<VS_METRIC_COSINE>(metric, queries, nq, rows, plan, norms, keys, s);
        break;
    }
    default: // L2SQ, L2
        launch<VS_METRIC_L2SQ>(metric, queries, nq, rows, plan, nullptr, keys, s);
    }
}

} // namespace vs::cuda
