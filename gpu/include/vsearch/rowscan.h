/*
 * vsearch engine: exact kNN and range search over rows the caller holds in its own memory and hands
 * over in blocks (a "row scan"), e.g. the pages of a buffer cache read in place, so that nothing is
 * copied into an engine dataset.
 *
 * The answers are those of vs_knn / vs_range on a dataset of the same rows (the same ids, the same
 * exact distances, ties broken by the smaller id, range matches in ascending id order), whatever
 * the blocks' order and size.  Each vs_rowscan_add reads its blocks before it returns and keeps
 * no pointer into them.  The work of an add is split over the context's CPU threads (num_threads)
 * when it is large enough; only the calling thread polls the cancel callback, once per add.  The
 * scan runs on the host's CPU whatever the context's backend.
 *
 * Per row, a SIMD float kernel's distance with a rigorous bound on its rounding error
 * (engine/exact.h) decides whether the exact distance is needed: for kNN only rows that may enter
 * the current top k, for range only rows that may lie within the radius.
 */
#ifndef VSEARCH_ROWSCAN_H
#define VSEARCH_ROWSCAN_H

#include "vsearch/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* n rows of dim floats: row i starts at (const char *) rows + i * stride (stride a multiple of 4,
 * at least dim * 4), its id is ids[i].  Ids are unique within a scan. */
typedef struct vs_row_block
{
    const float *rows;
    size_t stride;
    size_t n;
    const int64_t *ids;
} vs_row_block;

typedef struct vs_rowscan vs_rowscan;

/* A kNN scan of nq queries (nq x dim floats, copied). */
vs_status vs_rowscan_knn_begin(vs_context *ctx, size_t dim, vs_metric metric, const float *queries,
                               size_t nq, size_t k, vs_rowscan **out) VS_NOEXCEPT;
/* A range scan: every row within radius of each query. */
vs_status vs_rowscan_range_begin(vs_context *ctx, size_t dim, vs_metric metric,
                                 const float *queries, size_t nq, float radius,
                                 vs_rowscan **out) VS_NOEXCEPT;
/* Scans nblocks blocks of rows. */
vs_status vs_rowscan_add(vs_context *ctx, vs_rowscan *scan, const vs_row_block *blocks,
                         size_t nblocks) VS_NOEXCEPT;
/* The same, and while it scans it fetches the rows of `ahead` into the CPU's caches: blocks the
 * caller will add next (or where they will lie: a block's n may count rows a page could hold).
 * Their rows are only prefetched, never read, so they may change or go away meanwhile; rows that
 * arrive one run of pages at a time are then not each waited for. */
vs_status vs_rowscan_add_ahead(vs_context *ctx, vs_rowscan *scan, const vs_row_block *blocks,
                               size_t nblocks, const vs_row_block *ahead,
                               size_t nahead) VS_NOEXCEPT;
/*
 * Row sketches: a row's values as 8-bit codes on the row's own grid (lo + step * code), with the
 * distance from the row to its grid point, so that a scan can rule a row out from its sketch (a
 * quarter of a float row's bytes) without reading the row.  The bound is rigorous: a row is
 * ruled out only where its exact distance cannot enter the answer, so the answers are those of a
 * scan without sketches.  Sketches are plain bytes (vs_row_sketch_bytes(dim) each, a multiple of
 * 8), made by vs_row_sketch_make from the row's floats and kept by the caller beside its rows.
 */
size_t vs_row_sketch_bytes(size_t dim) VS_NOEXCEPT;
void vs_row_sketch_make(const float *row, size_t dim, void *sketch) VS_NOEXCEPT;
/* need[i] = 1 where the row of sketch i (at (const char *) sketches + i * stride, of this scan's
 * dim) may enter the answer of one of the scan's queries given the rows added so far, 0 where
 * none of them can use it (its rows need not be added then).  L1 rows are always needed. */
vs_status vs_rowscan_sketch_filter(vs_context *ctx, vs_rowscan *scan, const void *sketches,
                                   size_t stride, size_t n, unsigned char *need) VS_NOEXCEPT;
/* The kNN answer over every row added (vs_knn's conventions: nq x k ids and distances, counts
 * optional). */
vs_status vs_rowscan_knn_result(vs_context *ctx, vs_rowscan *scan, int64_t *out_ids,
                                float *out_distances, int64_t *out_counts) VS_NOEXCEPT;
/* The range answer over every row added (vs_range's conventions). */
vs_status vs_rowscan_range_result(vs_context *ctx, vs_rowscan *scan, vs_alloc_fn alloc,
                                  void *alloc_arg, vs_range_result *out) VS_NOEXCEPT;
void vs_rowscan_destroy(vs_context *ctx, vs_rowscan *scan) VS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_ROWSCAN_H */
