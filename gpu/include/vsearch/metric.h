/*
 * Metric-space index objects in a context: a List of Clusters (lc.h), an SSS pivot table (sss.h)
 * or a plain set of objects searched by brute force, copied into the context's backend (device
 * memory on CUDA) and searched there in batches, exactly: every answer is the one the host
 * functions of lc.h / sss.h give (vs_lc_knn, vs_lc_range, vs_sss_knn, vs_sss_range,
 * vs_mspace_range), on every backend.  These are the objects the vs_lc and vs_sss indexes load in
 * a backend (CPU) and in the GPU worker (extension/lcsearch.c, ssssearch.c).
 *
 * Queries are a vs_mspace of the index's kind (vectors of its dimension, or strings; the queries'
 * metric and ids are ignored).  Results:
 *   - distances are floats, the metric's "base": the edit distance for strings, the L1 distance,
 *     and for L2 the exact squared sum (the engine's L2SQ value), whose root in double,
 *     sqrt((double) d), is the distance the host functions and the SQL operator give;
 *   - kNN: per query the k nearest by (distance, id) ascending -- ties by the smaller id, so the
 *     answer is unique -- padded with id -1 and +inf; out_counts (optional) says how many are real;
 *   - range: every object with distance <= radius (radius in the metric's own units: L2 is not
 *     squared), as CSR (vs_range_result), ascending ids within a query;
 *   - objects whose id is negative (a deleted center of a List of Clusters) route searches but are
 *     never reported.
 *
 * The CUDA backend searches on the device with one thread block per query and shared memory that
 * does not grow with the index (Barrientos et al.'s layout: docs/ENGINE.md, "Metric indexes");
 * string queries longer than VS_EDIT_MYERS_MAX code points and kNN with k above
 * VS_METRIC_GPU_MAX_K are answered by the host functions on a host copy of the index that the
 * object keeps, on the calling thread: never wrong, only slower.
 */
#ifndef VSEARCH_ENGINE_METRIC_H
#define VSEARCH_ENGINE_METRIC_H

#include <stddef.h>
#include <stdint.h>

#include "vsearch/engine.h"
#include "vsearch/lc.h"
#include "vsearch/sss.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest k the CUDA kNN kernel keeps in shared memory (larger k: the host path). */
#define VS_METRIC_GPU_MAX_K 1024

typedef struct vs_metric_index vs_metric_index;

/*
 * An object with a copy of the arrays.  VS_INVALID_ARGUMENT (a space that fails vs_mspace_check,
 * centers and members of different kinds or dimensions, a NULL array, bucket offsets that do not
 * cover the members in order, a table without pivots' rows), VS_OUT_OF_MEMORY.  Ids NULL: the
 * positions.
 */
vs_status vs_metric_index_lc(vs_context *ctx, const vs_lc *lc, vs_metric_index **out) VS_NOEXCEPT;
vs_status vs_metric_index_sss(vs_context *ctx, const vs_sss *sss,
                              vs_metric_index **out) VS_NOEXCEPT;
vs_status vs_metric_index_flat(vs_context *ctx, const vs_mspace *objects,
                               vs_metric_index **out) VS_NOEXCEPT;
void vs_metric_index_destroy(vs_context *ctx, vs_metric_index *index) VS_NOEXCEPT;

/* Objects of the index (centers and members, or rows), reported or not. */
size_t vs_metric_index_size(const vs_metric_index *index) VS_NOEXCEPT;

vs_status vs_metric_index_knn(vs_context *ctx, const vs_metric_index *index,
                              const vs_mspace *queries, size_t k, int64_t *out_ids,
                              float *out_distances, int64_t *out_counts) VS_NOEXCEPT;

vs_status vs_metric_index_range(vs_context *ctx, const vs_metric_index *index,
                                const vs_mspace *queries, double radius, vs_alloc_fn alloc,
                                void *alloc_arg, vs_range_result *out) VS_NOEXCEPT;

/*
 * Builds in a context: the distances on its backend (the CPU backend's threads, or the GPU: a
 * launch per center or pivot, computing its distances to every object still in play; strings by
 * Myers' algorithm when the center has at most VS_EDIT_MYERS_MAX code points, else on the host),
 * the selections on the calling thread, and exactly the host functions' results:
 *   - vs_metric_build_lc: vs_lc_build's centers, members, bucket offsets and radii (outputs sized
 *     as its), for the same bucket_size and seed;
 *   - vs_metric_select_sss: vs_sss_select's pivots (pivots[max_pivots]) and diameter (optional);
 *   - vs_metric_table_sss: vs_sss_table's table (objects->n x npivots, row-major) for the pivots
 *     at positions pivots[0 .. npivots) of objects.
 * The objects' ids are ignored (positions).  VS_INVALID_ARGUMENT, VS_OUT_OF_MEMORY, VS_CANCELLED
 * (the context's cancel callback, polled between distance calls), VS_DEVICE_ERROR.
 */
vs_status vs_metric_build_lc(vs_context *ctx, const vs_mspace *objects, size_t bucket_size,
                             uint64_t seed, size_t *centers, size_t *ncenters, size_t *members,
                             size_t *bucket_offsets, double *radii) VS_NOEXCEPT;
vs_status vs_metric_select_sss(vs_context *ctx, const vs_mspace *objects, double alpha,
                               size_t max_pivots, size_t *pivots, size_t *npivots,
                               double *diameter) VS_NOEXCEPT;
vs_status vs_metric_table_sss(vs_context *ctx, const vs_mspace *objects, const size_t *pivots,
                              size_t npivots, float *table) VS_NOEXCEPT;

/* The base of a host distance (lc.h's values) as these searches report it. */
static inline float vs_metric_base(const vs_mspace *space, double d)
{
    if (space->kind == VS_MSPACE_VECTORS && space->metric == VS_METRIC_L2)
        return (float) (d * d);
    return (float) d;
}

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_ENGINE_METRIC_H */
