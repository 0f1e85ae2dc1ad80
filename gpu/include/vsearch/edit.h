/*
 * Edit (Levenshtein) distance on strings of code points: unit-cost insertions, deletions and
 * substitutions, the metric of the text operator classes (`text <~> text`).
 *
 * Strings are arrays of uint32 code points (the caller decodes its encoding: in UTF-8, 'año' is
 * three code points, so 'año' <~> 'ano' is 1).  Any length works:
 *   - when one side has at most VS_EDIT_MYERS_MAX (64) code points, Myers' bit-parallel algorithm
 *     (Myers 1999, in Hyyrö's formulation for the global distance) with that side as the pattern:
 *     one 64-bit word per column, O(n) word operations;
 *   - otherwise a dynamic program over two rows, O(m n) cells, which stops early when a bound is
 *     given and every cell of a row exceeds it, and asks an optional cancel callback every
 *     VS_EDIT_CANCEL_ROWS rows.
 * Plain C ABI, no allocation except the long path's two rows (malloc; SIZE_MAX when that fails).
 */
#ifndef VSEARCH_EDIT_H
#define VSEARCH_EDIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VS_EDIT_MYERS_MAX 64    /* longest pattern of the bit-parallel path */
#define VS_EDIT_CANCEL_ROWS 256 /* the long path asks the cancel callback this often */

/* Returned by the distances when the cancel callback asked to stop (or memory ran out). */
#define VS_EDIT_ABORTED SIZE_MAX

/* Nonzero: stop now. */
typedef int (*vs_edit_cancel_fn)(void *arg);

/*
 * A string prepared for many comparisons (the query of a search, the center of a cluster): the
 * match masks of Myers' algorithm when it has at most VS_EDIT_MYERS_MAX code points.  It points
 * into the caller's string, which must outlive it.  About 2.6 kB: put it on the stack or in a
 * struct, not in an array of thousands.
 */
typedef struct vs_edit_pattern
{
    const uint32_t *s;
    size_t n;
    uint64_t low[256];   /* match mask of code points < 256 */
    uint32_t high[VS_EDIT_MYERS_MAX]; /* other code points of the pattern, with their masks */
    uint64_t high_mask[VS_EDIT_MYERS_MAX];
    int nhigh;
    vs_edit_cancel_fn cancel; /* for the long path; NULL: never cancelled */
    void *cancel_arg;
} vs_edit_pattern;

void vs_edit_prepare(vs_edit_pattern *p, const uint32_t *s, size_t n);

/*
 * The distance between the pattern and t[0..nt).  With bound < SIZE_MAX the answer is exact when
 * it is <= bound, and otherwise some value > bound (the search may stop as soon as it knows);
 * VS_EDIT_ABORTED when cancelled.
 */
size_t vs_edit_pattern_distance(const vs_edit_pattern *p, const uint32_t *t, size_t nt,
                                size_t bound);

/* The distance of two strings (prepares the shorter one when it fits the bit-parallel path). */
size_t vs_edit_distance(const uint32_t *a, size_t na, const uint32_t *b, size_t nb);

/* The textbook dynamic program, O(m n) time and O(min(m, n)) memory: the reference of the tests
 * and the long path (SIZE_MAX if its row cannot be allocated). */
size_t vs_edit_distance_dp(const uint32_t *a, size_t na, const uint32_t *b, size_t nb);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_EDIT_H */
