/*
 * vsearch engine: IVF-PQ, an index family of its own on top of engine.h (contexts, statuses,
 * range results).  Like engine.h it needs no PostgreSQL or CUDA headers and every call is
 * noexcept.
 */
#ifndef VSEARCH_ENGINE_IVFPQ_H
#define VSEARCH_ENGINE_IVFPQ_H

#include "vsearch/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IVF-PQ (inverted lists of product-quantized residuals) --------------------------------
 *
 * The quantizer: nlist coarse centroids (k-means) and a residual product quantizer of m
 * sub-quantizers with 2^nbits codewords each over dim/m dimensions.  A vector x is assigned to its
 * nearest centroid c (by the index metric: L2 for L2SQ/L2, largest inner product for IP, largest
 * cosine for COSINE) and coded as the nearest codeword of each sub-vector of x - c.  For COSINE the
 * engine normalizes every vector and query to unit length first (IP on the unit sphere).
 *
 * Codes are code_size = ceil(m * nbits / 8) bytes; with nbits = 4 sub-quantizer j is in byte j / 2,
 * low nibble for even j.  Codebooks are m x 2^nbits x (dim / m) floats, sub-quantizer major.
 *
 * An ivfpq object holds a quantizer and inverted lists of (id, code) on the context's backend
 * (device memory for CUDA).  Searches are approximate: they rank the rows of the nprobe lists
 * nearest to each query by asymmetric distance (the query against the decoded code, through
 * per-query lookup tables), in the metric's units (L2 is the root of the L2SQ estimate, IP is
 * -<q, c + r>, COSINE is 1 - <q/|q|, c + r>).  Callers re-rank with exact distances.  The CPU and
 * the CUDA backend return the same candidates for the same inputs (ties by smaller id; estimates
 * are summed in float over the m tables in order j = 0 .. m-1 on both). */

typedef struct vs_ivfpq vs_ivfpq;

typedef struct vs_ivfpq_params
{
    size_t dim;
    size_t nlist;       /* coarse centroids (lists), >= 1 */
    size_t m;           /* sub-quantizers; dim % m == 0 */
    int nbits;          /* 4 or 8 */
    vs_metric metric;   /* L2SQ, L2, IP or COSINE (L1 is VS_UNSUPPORTED) */
} vs_ivfpq_params;

typedef struct vs_ivfpq_train_params
{
    int coarse_iterations;  /* Lloyd iterations of the coarse k-means (default 20) */
    int pq_iterations;      /* Lloyd iterations per sub-quantizer (default 25) */
    uint64_t seed;
    size_t sample_size;     /* train on this many points drawn with the seed; 0 = all */
} vs_ivfpq_train_params;

void vs_ivfpq_train_params_init(vs_ivfpq_train_params *params) VS_NOEXCEPT;
size_t vs_ivfpq_code_size(const vs_ivfpq_params *params) VS_NOEXCEPT;

/* Trains the quantizer on n host vectors: centroids (nlist x dim floats) and codebooks
 * (m x 2^nbits x dim/m floats).  Needs n >= nlist and n >= 2^nbits.  Deterministic for a seed on
 * a given backend. */
vs_status vs_ivfpq_train(vs_context *ctx, const vs_ivfpq_params *params,
                         const vs_ivfpq_train_params *train, const float *data, size_t n,
                         float *centroids, float *codebooks) VS_NOEXCEPT;

/* An ivfpq object with this quantizer (copied) and empty lists. */
vs_status vs_ivfpq_create(vs_context *ctx, const vs_ivfpq_params *params, const float *centroids,
                          const float *codebooks, vs_ivfpq **out) VS_NOEXCEPT;
/* The same object, except that a CPU context reads the quantizer where it is instead of copying
 * it: the caller keeps centroids and codebooks unchanged until vs_ivfpq_destroy (a cache of an
 * index's quantizer for list scans, which then costs one copy of it, not two).  Other backends
 * copy it, as vs_ivfpq_create. */
vs_status vs_ivfpq_create_view(vs_context *ctx, const vs_ivfpq_params *params,
                               const float *centroids, const float *codebooks,
                               vs_ivfpq **out) VS_NOEXCEPT;
/* A CPU context's object for list scans (below) whose quantizer is read in place in pieces, e.g.
 * index pages in a buffer cache, with no copy: centroid l at centroid_rows[l] (dim floats), and the
 * codebooks already packed as the lookup tables read them: table_rows[j * (dim / m) + t] holds
 * element t of sub-quantizer j's 2^nbits codewords, then zeros up to vs_ivfpq_table_width(params)
 * floats.  The two pointer arrays (nlist and dim pointers) are copied; the floats must stay where
 * they are, unchanged, until vs_ivfpq_destroy.  Such an object cannot encode (VS_UNSUPPORTED);
 * its list scans' answers are bit for bit those of vs_ivfpq_create's object with the same
 * quantizer.  Other backends: VS_UNSUPPORTED. */
vs_status vs_ivfpq_create_rows(vs_context *ctx, const vs_ivfpq_params *params,
                               const float *const *centroid_rows, const float *const *table_rows,
                               vs_ivfpq **out) VS_NOEXCEPT;
/* Floats of a packed codebook row (vs_ivfpq_create_rows): 2^nbits rounded up to a multiple of 32;
 * 0 for invalid params. */
size_t vs_ivfpq_table_width(const vs_ivfpq_params *params) VS_NOEXCEPT;
void vs_ivfpq_destroy(vs_context *ctx, vs_ivfpq *ivf) VS_NOEXCEPT;

/* Assigns n host vectors to lists and encodes them: lists[n] (0 .. nlist-1) and codes
 * (n x code_size bytes).  Uses only the quantizer; the lists are not changed.  Vectors with a
 * zero norm under COSINE go to list 0 with code 0. */
vs_status vs_ivfpq_encode(vs_context *ctx, const vs_ivfpq *ivf, const float *vectors, size_t n,
                          int32_t *lists, uint8_t *codes) VS_NOEXCEPT;

/* Appends n (id, code) entries to list `list`.  Ids are not checked for uniqueness (the caller
 * owns them). */
vs_status vs_ivfpq_add(vs_context *ctx, vs_ivfpq *ivf, size_t list, const int64_t *ids,
                       const uint8_t *codes, size_t n) VS_NOEXCEPT;
/* Entries in all lists. */
size_t vs_ivfpq_size(const vs_ivfpq *ivf) VS_NOEXCEPT;

/* The lists of each query ranked by the coarse quantizer (nearest first), ranks
 * [probe_offset, probe_offset + nprobe) of them (clamped to nlist), are scanned; per query the k
 * entries with the smallest estimated distance come back sorted ascending (ties by smaller id),
 * padded with id -1 / +inf; out_counts (optional) says how many are real.  probe_offset lets a
 * scan continue with further lists when its caller wants more rows. */
vs_status vs_ivfpq_search(vs_context *ctx, const vs_ivfpq *ivf, const float *queries, size_t nq,
                          size_t probe_offset, size_t nprobe, size_t k, int64_t *out_ids,
                          float *out_distances, int64_t *out_counts) VS_NOEXCEPT;

/* Every entry of the probed lists whose estimated distance is <= radius, as CSR like vs_range
 * (ascending id within a query). */
vs_status vs_ivfpq_range(vs_context *ctx, const vs_ivfpq *ivf, const float *queries, size_t nq,
                         size_t probe_offset, size_t nprobe, float radius, vs_alloc_fn alloc,
                         void *alloc_arg, vs_range_result *out) VS_NOEXCEPT;

/* ---- List scans: lists the caller holds -------------------------------------------------------
 *
 * The lists of an index whose entries live outside the engine (e.g. index pages read in place in
 * a buffer cache) are searched with an ivfpq object that supplies only the quantizer (its own
 * lists are not read; it must belong to a CPU context).  A scan ranks the lists of every query as
 * vs_ivfpq_search does, says which lists its queries probe (vs_ivfpq_scan_lists), and takes their
 * entries in any number of vs_ivfpq_scan_add calls per list, in any order; entries of lists no
 * query probes are ignored.  Its answers are vs_ivfpq_search's / vs_ivfpq_range's over an object
 * holding the same entries, except that entries equal in id and estimate (one entry handed over
 * twice, e.g. seen again after a concurrent compaction moved it) count once.  Each entry may
 * carry a tag of the caller's (e.g. where it lies), returned with the kNN answer.  The scan runs
 * on the host's CPU threads (the context's num_threads); an add copies its arrays before it
 * returns, and the lists added are searched together, several at a time across the threads (at
 * the latest by the result call).  The table of a (query, list) pair is built once per add, so a
 * list is best handed over in few adds. */

typedef struct vs_ivfpq_scan vs_ivfpq_scan;

/* A kNN scan of nq queries (copied) over lists ranked [probe_offset, probe_offset + nprobe). */
vs_status vs_ivfpq_scan_knn_begin(vs_context *ctx, const vs_ivfpq *ivf, const float *queries,
                                  size_t nq, size_t probe_offset, size_t nprobe, size_t k,
                                  vs_ivfpq_scan **out) VS_NOEXCEPT;
/* A range scan: every entry of the probed lists whose estimate is <= radius. */
vs_status vs_ivfpq_scan_range_begin(vs_context *ctx, const vs_ivfpq *ivf, const float *queries,
                                    size_t nq, size_t probe_offset, size_t nprobe, float radius,
                                    vs_ivfpq_scan **out) VS_NOEXCEPT;
/* The lists the scan's queries probe, ascending, in *lists (valid while the scan lives). */
size_t vs_ivfpq_scan_lists(const vs_ivfpq_scan *scan, const uint32_t **lists) VS_NOEXCEPT;
/* n entries of list `list`: ids, codes (n x code_size bytes), tags (optional, n). */
vs_status vs_ivfpq_scan_add(vs_context *ctx, vs_ivfpq_scan *scan, size_t list, const int64_t *ids,
                            const uint8_t *codes, const uint64_t *tags, size_t n) VS_NOEXCEPT;
/* vs_ivfpq_search's answer over every entry added (nq x k); out_tags (optional) the entries'
 * tags (0 for padding), out_counts optional. */
vs_status vs_ivfpq_scan_knn_result(vs_context *ctx, vs_ivfpq_scan *scan, int64_t *out_ids,
                                   float *out_distances, uint64_t *out_tags,
                                   int64_t *out_counts) VS_NOEXCEPT;
/* vs_ivfpq_range's answer over every entry added. */
vs_status vs_ivfpq_scan_range_result(vs_context *ctx, vs_ivfpq_scan *scan, vs_alloc_fn alloc,
                                     void *alloc_arg, vs_range_result *out) VS_NOEXCEPT;
void vs_ivfpq_scan_destroy(vs_context *ctx, vs_ivfpq_scan *scan) VS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_ENGINE_IVFPQ_H */
