// The start nodes of a batch of graph searches, cut by products (graph_cuda.cu; the CPU twin is
// gpu/cpu/graph_starts.h).  A search keeps of its start nodes only the beam's width nearest, and
// a farther start is never expanded nor enters the beam later, so it needs the exact keys of just
// those.  An fp32 GEMM gives every (query, start) product; a rigorous bound on its rounding names
// the few starts that can be among the width nearest; only they get an exact key, the rest kNoKey
// (which the search's start steps skip and do not mark visited: reached again, such a node loses
// again).
#ifndef VSEARCH_CUDA_IMPL_START_CUT_CUH
#define VSEARCH_CUDA_IMPL_START_CUT_CUH

#include "cuda/impl/pair_keys.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vs::cuda {

// Most start nodes a cut takes (its kernel holds a value and a candidate slot per start in shared
// memory, 8 bytes each); more: measure them all.
constexpr int kStartCutMaxStarts = 12288;
size_t start_cut_smem(int count);

// The start rows packed for the GEMM: packed[s * dim ..] the vector of rows.list[s] (zeros for
// a start without a key), sqnorms[s] its squared norm rounded to float, *rmax (a double the
// caller zeroes first) a bound on their largest norm.
void pack_start_rows(const PairKeyRows &rows, float *packed, float *sqnorms, double *rmax,
                     cudaStream_t s);

// From products[q * rows.count + s] = <query q, row s> (an fp32 GEMM, any summation order):
// keys[q * rows.count + s] = the exact key of start s for query q (bit for bit
// start_keys_kernel's) when it can be among the `width` nearest starts with a key, else kNoKey;
// every start with a key is measured when there are at most `width` of them or a value is not
// finite.  metric: L2SQ, L2 or IP; lanes: the team size of the exact formula (4 .. 32);
// ref_err: the exact key's own rounding in gemm.h's units (kExactKeyError).  A start must appear
// in rows.list once (later repeats replaced by a node without a key).
void cut_start_keys(vs_metric metric, int lanes, const float *queries, int nq,
                    const PairKeyRows &rows, const float *products, const float *sqnorms,
                    const double *rmax, int width, double ref_err, uint64_t *keys,
                    cudaStream_t s);

} // namespace vs::cuda

#endif
