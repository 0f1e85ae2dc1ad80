/*
 * Exact search in metric spaces with Sparse Spatial Selection pivot tables (Brisaboa et al.; the
 * SSS-Index of Barrientos et al.): pivot selection, the pivot-distance table and range and kNN
 * search on host arrays, the CPU path of the vs_sss index.  Plain C ABI, no engine context;
 * objects and queries as in lc.h (vs_mspace, vs_mobject).
 *
 *   - M, the diameter, is estimated by two farthest-object sweeps (from the first object to the
 *     farthest one, then from that one): a lower bound of the true diameter, which only makes
 *     alpha M smaller and the pivots more numerous, never a search wrong;
 *   - the first object is the first pivot; scanning the objects in order, one becomes a pivot when
 *     its distance to every pivot so far is >= alpha M (at most max_pivots);
 *   - the table holds d(p_i, x) for every object x and pivot p_i (row-major: a row per object);
 *   - range (q, r): d(q, p_i) for every pivot; x is discarded when some pivot has
 *     |d(p_i, x) - d(p_i, q)| > r (the triangle inequality says d(q, x) > r), else compared;
 *   - kNN: the lower bound max_i |d(p_i, x) - d(p_i, q)| of every object, objects compared in
 *     increasing bound order until the bound exceeds the k-th best distance.
 * Float distances get the relative slack VS_LC_SLACK in the discard test, so rounding never
 * discards a row the operator accepts.
 */
#ifndef VSEARCH_SSS_H
#define VSEARCH_SSS_H

#include "vsearch/lc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VS_SSS_MAX_PIVOTS 512

/* Pivots of objects: positions into pivots[max_pivots], *npivots, the estimated diameter. */
int vs_sss_select(const vs_mspace *objects, double alpha, size_t max_pivots, size_t *pivots,
                  size_t *npivots, double *diameter, uint64_t *ndist);

/* table[i * pivots->n + j] = d(pivot j, object i); tick once per 1024 objects (done: objects). */
int vs_sss_table(const vs_mspace *pivots, const vs_mspace *objects, vs_lc_tick_fn tick,
                 void *tick_arg, float *table, uint64_t *ndist);

typedef struct vs_sss
{
    vs_mspace pivots;    /* ids unused */
    vs_mspace objects;   /* ids: what searches report */
    const float *table;  /* objects.n x pivots.n */
} vs_sss;

int vs_sss_range(const vs_sss *s, const vs_mobject *q, double radius, vs_lc_tick_fn tick,
                 void *tick_arg, vs_mhits *hits, uint64_t *ndist);

/* The k nearest by (distance, id) ascending. */
int vs_sss_knn(const vs_sss *s, const vs_mobject *q, size_t k, vs_lc_tick_fn tick, void *tick_arg,
               int64_t *ids, double *distances, size_t *count, uint64_t *ndist);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_SSS_H */
