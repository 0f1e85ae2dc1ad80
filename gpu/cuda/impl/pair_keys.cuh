// Exact keys (engine/exact.h) of every (query, row) pair of a batch against a list of rows, as
// tiles of 16 queries x 64 rows a block, for the graph search's start nodes (graph_cuda.cu, with
// VSEARCH_CUDA_GRAPH_STARTS=tiles: not the default, docs/ENGINE.md "Graphs").
#ifndef VSEARCH_CUDA_IMPL_PAIR_KEYS_CUH
#define VSEARCH_CUDA_IMPL_PAIR_KEYS_CUH

#include "vsearch/distance.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vs::cuda {

// The rows: list[s] indexes vectors (n x dim); an entry >= n or not live (live[v] == 0, when
// live is not null) gets kNoKey.
struct PairKeyRows
{
    const float *vectors;
    uint32_t n;
    int dim;
    const uint8_t *live;
    const uint32_t *list;
    int count;
};

__device__ __forceinline__ bool pair_row_has_key(const PairKeyRows &R, uint32_t v)
{
    return v < R.n && (R.live == nullptr || R.live[v] != 0);
}

// How a dimension's tiles are staged: `leaves` of the formula's 32 partial sums per pass through
// shared memory (`bytes` of it a block); leaves == 0 above 2 432 dimensions, where one leaf's
// values would not fit.
struct PairKeyPlan
{
    int leaves;
    size_t bytes;
};
PairKeyPlan pair_key_plan(int dim);

// keys[q * rows.count + s] = make_key(distance of query q to row list[s], +inf for NaN, list[s])
// in `metric`'s output units (L2SQ, L2, IP or COSINE), bit for bit the engine's exact distance.
// norms: scratch for nq + rows.count doubles (COSINE only; else may be null).  queries: nq x dim
// on the device.
void exact_pair_keys(vs_metric metric, const float *queries, int nq, const PairKeyRows &rows,
                     const PairKeyPlan &plan, double *norms, uint64_t *keys, cudaStream_t s);

} // namespace vs::cuda

#endif
