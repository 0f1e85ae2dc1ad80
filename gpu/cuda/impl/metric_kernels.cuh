// The CUDA backend's metric-space kernels (impl/metric_kernels.cu) as metric_cuda.cu launches
// them: an index's and a batch's arrays in device memory as the kernels read them, and the
// launchers.  Apart from metric_cuda.cu, which owns the objects and turns the engine's calls into
// launches, so that the kernels -- the search of each index type, Myers' distance -- read alone.
#ifndef VSEARCH_CUDA_IMPL_METRIC_KERNELS_CUH
#define VSEARCH_CUDA_IMPL_METRIC_KERNELS_CUH

#include "cuda/device_context.cuh"
#include "engine/metric_backend.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vs::cuda {

enum Mode
{
    kCount = 0, // range, counting pass
    kWrite = 1, // range, writing pass
    kKnn = 2
};

struct DevSpace
{
    int strings;
    vs_metric metric;
    int dim;
    size_t n;
    const float *vectors;
    const uint32_t *chars;
    const uint64_t *offsets;
    const int64_t *ids;
};

struct DevIndex
{
    DevSpace objs;                   // members (list), rows (pivots), objects (flat)
    DevSpace aux;                    // centers (list), pivots (pivots)
    const double *radii;             // list
    const uint64_t *bucket_offsets;  // list: aux.n + 1, into objs
    const float *table;              // pivots, vectors: table[j * objs.n + i] = d(pivot j, row i)
    const uint32_t *table8;          // pivots, strings: byte j % 4 of table8[j / 4 * objs.n + i] =
                                     // min(d(pivot j, row i), 255); 0 for the last word's padding
};

struct DevQueries
{
    size_t n;
    const float *vectors;    // n x dim
    const uint32_t *chars;   // strings
    const uint64_t *offsets; // n + 1
};

// Launches the search kernel of an index of `type` (its arrays: view) over the queries q on
// dev.main, a block per query: kCount writes each query's match count to counts, kWrite its
// matches from out_offsets[query] on, kKnn its k best to ids / dists (k each, padded) and counts.
template <int Mode>
void launch_metric(DeviceContext &dev, MetricIndex::Type type, const DevIndex &view,
                   const DevQueries &q, double radius, int k, const uint64_t *out_offsets,
                   uint64_t *counts, int64_t *ids, float *dists);

// Launches the builds' distances on s: out[i] = d(object from, object rows[i]) of a flat object's
// space (rows NULL: i), unbounded; a string `from` has at most VS_EDIT_MYERS_MAX code points.
void launch_build_distances(cudaStream_t s, const DevSpace &objs, size_t from,
                            const uint32_t *rows, size_t n, double *out);

} // namespace vs::cuda

#endif
