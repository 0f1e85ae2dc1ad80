/*
 * Exact search in metric spaces with the List of Clusters (Chávez & Navarro; the fixed-size
 * variant of Barrientos et al.): build and search on host arrays, the CPU path of the vs_lc
 * index.  Plain C ABI, no engine context: the caller (extension/lc*.c) reads the index pages into
 * the arrays below, in the dimension-major-ready order the GPU kernels will copy (centers with
 * radii, then every bucket back to back in creation order).
 *
 * Metric spaces: vectors under L2 or L1 (the SQL operators' values: engine exact distances,
 * L2 the root in double), or strings of code points under unit-cost edit distance (edit.h).
 *
 * List of Clusters, fixed bucket size k:
 *   - the first center is a random object (seeded); each next center is the remaining object
 *     maximising the sum of its distances to the previous centers;
 *   - a center's bucket is the k remaining objects nearest to it (ties by position), its covering
 *     radius r_c the largest of their distances (0 for an empty bucket); bucket and center leave
 *     the remaining set, so an object belongs to the first center that took it;
 *   - range (q, r): scan the centers in creation order; report a center within r; scan its bucket
 *     when d(q,c) <= r_c + r; stop after the first center with d(q,c) < r_c - r (the query ball
 *     lies inside that center's ball, and every object inside it is in this or an earlier bucket);
 *   - kNN: the same scan with r the k-th best distance so far (infinite until k are found).
 *
 * The invariant the search needs, kept by the build and by inserts (extension/lcinsert.c):
 * an object at distance < r_c from center c is in c's bucket or an earlier one.  With float
 * distances the tests leave a relative slack (VS_LC_SLACK) so that rounding never prunes a row
 * the operator would accept: the index stays exact, it only scans a little more.
 */
#ifndef VSEARCH_LC_H
#define VSEARCH_LC_H

#include <stddef.h>
#include <stdint.h>

#include "vsearch/distance.h"
#include "vsearch/edit.h"
#include "vsearch/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VS_LC_SLACK 1e-5 /* relative slack of the pruning tests on float distances */

typedef enum vs_mspace_kind
{
    VS_MSPACE_VECTORS = 0, /* n x dim floats, row-major; metric VS_METRIC_L2 or VS_METRIC_L1 */
    VS_MSPACE_STRINGS = 1  /* code points back to back, offsets[n + 1]; edit distance */
} vs_mspace_kind;

/* A set of objects of a metric space.  ids: what searches report (-1: never report the object,
 * e.g. a center whose row was deleted; NULL: the positions). */
typedef struct vs_mspace
{
    vs_mspace_kind kind;
    vs_metric metric;
    size_t dim;
    size_t n;
    const float *vectors;
    const uint32_t *chars;
    const uint64_t *offsets;
    const int64_t *ids;
} vs_mspace;

/* One object, the query: a vector of dim floats, or len code points. */
typedef struct vs_mobject
{
    const float *vector;
    const uint32_t *chars;
    size_t len;
} vs_mobject;

/* Object i of a space. */
vs_mobject vs_mspace_object(const vs_mspace *space, size_t i);

/* Distance of two objects of a space's kind (vectors: the SQL operator's value). */
double vs_mspace_distance(const vs_mspace *space, const vs_mobject *a, const vs_mobject *b);

/* Checks a space: kind, metric (L2 or L1 for vectors), arrays present, offsets ascending. */
int vs_mspace_check(const vs_mspace *space);

/* Between chunks of work: nonzero stops the call (VS_CANCELLED).  done: objects placed so far. */
typedef int (*vs_lc_tick_fn)(void *arg, size_t done);

/*
 * Builds the list over objects[0..n).  Outputs, sized by the caller: centers[n] (positions of the
 * centers, creation order), *ncenters, members[n] (positions of the bucket members, bucket after
 * bucket), bucket_offsets[n + 1] (bucket c is members[bucket_offsets[c] .. bucket_offsets[c+1])),
 * radii[n].  ndist (optional) gets the distance evaluations.  VS_OK, VS_INVALID_ARGUMENT,
 * VS_OUT_OF_MEMORY or VS_CANCELLED.
 */
int vs_lc_build(const vs_mspace *objects, size_t bucket_size, uint64_t seed, vs_lc_tick_fn tick,
                void *tick_arg, size_t *centers, size_t *ncenters, size_t *members,
                size_t *bucket_offsets, double *radii, uint64_t *ndist);

/* A built list, as the search reads it. */
typedef struct vs_lc
{
    vs_mspace centers;               /* creation order; ids -1 for deleted rows */
    const double *radii;             /* covering radius of each center */
    const uint64_t *bucket_offsets;  /* centers.n + 1, into members */
    vs_mspace members;               /* every bucket back to back */
} vs_lc;

/* Search results: (id, distance) pairs, malloc'd; free with vs_mhits_free. */
typedef struct vs_mhits
{
    int64_t *ids;
    double *distances;
    size_t n;
    size_t cap;
} vs_mhits;

void vs_mhits_free(vs_mhits *hits);

/*
 * Every object within radius of q (d <= radius), in scan order, appended to hits.  ndist
 * (optional) adds the distance evaluations.  VS_OK, VS_INVALID_ARGUMENT, VS_OUT_OF_MEMORY,
 * VS_CANCELLED (tick asked to stop; it is asked once per 64 centers with done = centers seen).
 */
int vs_lc_range(const vs_lc *lc, const vs_mobject *q, double radius, vs_lc_tick_fn tick,
                void *tick_arg, vs_mhits *hits, uint64_t *ndist);

/*
 * The k nearest objects of q, by (distance, id) ascending, into ids[k] / distances[k]; *count gets
 * how many (fewer than k when the list holds fewer reportable objects).
 */
int vs_lc_knn(const vs_lc *lc, const vs_mobject *q, size_t k, vs_lc_tick_fn tick, void *tick_arg,
              int64_t *ids, double *distances, size_t *count, uint64_t *ndist);

/* Brute force over a space (the reference and the baseline of the benchmarks). */
int vs_mspace_range(const vs_mspace *space, const vs_mobject *q, double radius, vs_mhits *hits,
                    uint64_t *ndist);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_LC_H */
