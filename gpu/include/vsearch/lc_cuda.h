/*
 * The List of Clusters range search on a CUDA device (gpu/cuda/lc_cuda.cu), exported by
 * vsearch_cuda.so as a plain C function outside the backend interface (a first version: the GPU
 * worker does not call it yet).  Its CPU twin is vs_lc_range (vsearch/lc.h); the unit test
 * ListOfClustersCuda compares them query by query.
 *
 * One block per query (Barrientos et al.'s Algorithm 1) with shared memory that does not grow with
 * the index: the centers are taken in chunks of the block's size, each thread (strings) or warp
 * (vectors) computing one center's distance; the chunk's first containing center (d < r_c - r)
 * ends the scan; then the buckets of the chunk's centers within r_c + r are scanned, one member
 * per thread (strings: Myers' bit-parallel edit distance, the query's match masks in shared
 * memory) or per warp (vectors: the engine's exact distance, bit for bit the CPU's).  Output:
 * a counting pass, offsets (exclusive sums), then a writing pass: every match is written, none
 * dropped (order within a query is arbitrary).
 *
 * Limits: string queries of at most VS_EDIT_MYERS_MAX (64) characters (VS_UNSUPPORTED otherwise:
 * the caller answers those on the CPU); indexed strings of any length.
 */
#ifndef VSEARCH_LC_CUDA_H
#define VSEARCH_LC_CUDA_H

#include "vsearch/lc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VS_CUDA_LC_RANGE_SYMBOL "vs_cuda_lc_range_v1"

/*
 * Every object of lc within radius of each query (queries: a space of the list's kind and
 * dimension).  offsets[nq + 1] (caller's); *ids and *distances malloc'd (free()), offsets[nq]
 * long.  VS_OK, VS_INVALID_ARGUMENT, VS_UNSUPPORTED (no device, or a string query longer than 64
 * characters), VS_OUT_OF_MEMORY, VS_DEVICE_ERROR; err gets the reason.
 */
typedef int (*vs_cuda_lc_range_fn)(const vs_lc *lc, const vs_mspace *queries, double radius,
                                   uint64_t *offsets, int64_t **ids, double **distances,
                                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_LC_CUDA_H */
