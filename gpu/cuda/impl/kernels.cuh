// Kernel launchers of the CUDA backend (host declarations) and the small device helpers they
// share.  Kernels take the metric as a run-time value (a uniform branch) except the fused scan,
// which is instantiated per distance operator; see docs/ENGINE.md for the pipeline.
#ifndef VSEARCH_CUDA_IMPL_KERNELS_CUH
#define VSEARCH_CUDA_IMPL_KERNELS_CUH

#include "cuda/utils/exact_warp.cuh"
#include "cuda/utils/launch.cuh"
#include "cuda/utils/memory_pool.cuh"
#include "engine/exact.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vs::cuda {

// How a stored tile value becomes an approximate base value (engine/exact.h units).
enum ApproxMode
{
    MODE_RAW = 0,     // the value already is the base value (direct kernels)
    MODE_L2_GEMM = 1, // v = <x, y>: ||x||^2 + ||y||^2 - 2 v
    MODE_IP_GEMM = 2, // -v
    MODE_COS_GEMM = 3 // 1 - v / (||x|| ||y||)
};

__host__ __device__ __forceinline__ float approx_value(int mode, float v, float xsq, float xinv,
                                                       float ysq, float yinv)
{
    switch (mode)
    {
    case MODE_L2_GEMM:
        return (xsq + ysq) - 2.0f * v;
    case MODE_IP_GEMM:
        return -v;
    case MODE_COS_GEMM:
        return 1.0f - v * xinv * yinv;
    default:
        return v;
    }
}

// A resident dataset as kernels see it (rows in ascending id order).
struct DeviceRows
{
    const float *x;     // n x d (null for binary16 rows)
    const uint16_t *xh; // n x d binary16 (F16 datasets; null for float rows)
    const int64_t *ids; // n
    const float *sq;    // ||y||^2
    const float *inv;   // 1 / ||y|| (inf for a zero row)
    uint32_t n;
    int d;
};

// Base value (engine/exact.h) of query x against row r, whichever type the rows are stored in.
__device__ __forceinline__ double warp_exact_row(vs_metric m, const float *x, const DeviceRows &R,
                                                 uint32_t r, int lane)
{
    const size_t o = static_cast<size_t>(r) * R.d;
    return R.xh ? warp_exact_base(m, x, R.xh + o, R.d, lane)
                : warp_exact_base(m, x, R.x + o, R.d, lane);
}

// Per-query data of a batch (queries contiguous, d floats each).
struct DeviceQueries
{
    const float *x;
    const float *sq;
    const float *inv;
    const double *norm; // ||x|| for the error bounds
    int n;
    const double *qrel; // APPROX_GEMM_F16: ||x - x'|| / ||x|| bounds (x' in binary16), else null
};

// ---- selection over GEMM / direct tiles ----------------------------------------------------

struct TileSelectArgs
{
    const float *tile; // tq rows of ld floats: tile[q * ld + c] for column c
    int64_t ld;
    int tq;
    int col0, col1; // columns processed by this launch
    int P;          // segments per row
    int seg_len;    // multiple of 128
    uint32_t row0;  // dataset row of column 0
    int mode;
    const float *xsq, *xinv; // per query of the tile
    const float *ysq, *yinv; // per dataset row (indexed by row0 + c)
    const uint64_t *state;   // tq x kp thresholds (last entry) or null
    uint64_t *partial;       // (tq x P) x kp
    int kp, bcap;
};
void launch_tile_select(const TileSelectArgs &a, cudaStream_t s);

// Selection over tiles of whole rows (filter_select.cu): a sampled threshold, a filter pass and a
// sort of the survivors in place of the warp selectors.
struct FilterPlan
{
    bool on;    // false: use the warp selectors
    int chunks; // sample: runs of 32 columns spread over the row
    int rank;   // the threshold is the rank-th smallest sample key
    int cap;    // candidate buffer per query (a power of two)
};
// Sample of at most max_chunks runs of 32 rows (columns) out of tn; off when the candidate
// buffer would need more than max_cap keys per query.
FilterPlan plan_filter(int kp, uint32_t tn, int max_chunks, int max_cap);
constexpr int kFilterSortMax = 8192; // candidates sorted in one block's shared memory (64 KB)

struct FilterArgs
{
    const float *tile; // tq rows of ld floats, columns 0 .. tn = dataset rows 0 .. tn
    int64_t ld;
    int tq;
    uint32_t tn;
    int mode;
    const float *xsq, *xinv; // per query of the tile
    const float *ysq, *yinv; // per dataset row (padded to a multiple of 4)
    int chunks, rank, cap, kp;
    uint64_t *thr;    // tq scratch
    uint32_t *count;  // tq scratch (zeroed by the sample kernel)
    uint64_t *cand;   // tq x cap scratch
    uint64_t *state;  // tq x kp: the K' smallest keys, sorted (all kNoKey: not found, fall back)
};
void launch_filter_select(const FilterArgs &a, cudaStream_t s);
// Steps 1 and 2 only (the large-k path sorts in global memory): thr[q] = the sampled threshold,
// count[q] keys below it at cand + q * cap (the first cap of them).
void launch_filter_candidates(const FilterArgs &a, cudaStream_t s);
// state[q] = the kp smallest of the count[q] keys at cand + q * cap, sorted, when kp <= count[q]
// <= cap; else kp x kNoKey (not found).
void launch_sort_candidates(const uint32_t *count, const uint64_t *cand, int cap, int kp, int nq,
                            uint64_t *state, cudaStream_t s);
// thr[q] = the rank-th smallest of keys[q * S .. q * S + S) (rank <= S); count[q] = 0.  A small
// batch ranks parts of each query's keys in parallel first, into scratch (room keys per query).
void launch_threshold(const uint64_t *keys, int nq, int S, int rank, uint64_t *thr,
                      uint32_t *count, uint64_t *scratch, int room, cudaStream_t s);
// thr[q] = the rank-th smallest of keys[q * ld .. q * ld + S), S a multiple of 32; count[q] = 0.
void launch_threshold_lists(const uint64_t *keys, int nq, int ld, int S, int rank, uint64_t *thr,
                            uint32_t *count, cudaStream_t s);

// The GEMM and the filter in one kernel (fused_filter.cu): tensor-core products of qn queries
// against the dataset's rows, each turned into its approximate key in registers.  With keys set
// (the sample), columns are the runs of 32 rows of plan_filter's sample and every key goes to
// keys[q * cols + c]; else columns are the rows and the keys below thr[q] are appended to
// cand + q * cap (count[q] of them, the first cap kept), as the filter pass of a tile would.
struct FusedArgs
{
    const void *x; // qn x d queries: floats (TF32 products), or binary16 for a binary16 dataset
    const void *y; // n x d rows, the same type
    int d, qn;
    uint32_t n;    // rows in the dataset
    uint32_t cols; // tile columns: 32 x chunks (sample) or n
    int chunks;    // > 0: the sample's runs
    int mode;
    const float *xsq, *xinv; // per query
    const float *ysq, *yinv; // per dataset row
    uint64_t *keys;          // sample: qn x cols
    const uint64_t *thr;     // filter: per query
    uint32_t *count;
    uint64_t *cand;
    int cap;
    uint32_t unit_tiles; // binary16 filter pass: row tiles a block takes at once (0: its choice)
    bool wgmma;          // binary16 filter pass: Hopper's wgmma kernel where the device runs it
};
// Whether rows of d elements take the fused kernel: read in 16-byte pieces, and short enough that
// it beats cuBLAS and the tile (measured crossover: fused_filter.cu).
bool fused_filter_fits(int d, bool half);
void launch_fused(const FusedArgs &a, bool half, cudaStream_t s);

// state[q] (kp sorted keys, or empty if !state_valid) merged with P sorted lists per query.
void launch_merge_lists(uint64_t *state, bool state_valid, const uint64_t *lists, int nq, int P,
                        int kp, int bcap, cudaStream_t s);

// out[q * kp + i] = exact key of the row of cand[q * kp + i] (kNoKey stays kNoKey).
void launch_exact_keys(const uint64_t *cand, int nq, int kp, DeviceQueries q, DeviceRows rows,
                       vs_metric m, uint64_t *out, cudaStream_t s);

struct FinalizeArgs
{
    const uint64_t *sorted; // nq segments of seg keys, exact, ascending
    int64_t seg;
    const uint64_t *approx; // nq x kp approximate candidate keys (null: exact, no certification)
    int kp;
    // Instead of approx: every row outside query q's candidates has an approximate key >= bound[q]
    // (certified against it); null: as approx says.
    const uint64_t *bound;
    int nq, k;
    vs_metric metric;
    int kind; // ApproxKind of the approximate keys
    int d;
    const double *qnorm;
    const double *qrel; // APPROX_GEMM_F16 (DeviceQueries::qrel), else null
    double maxnorm;
    const int64_t *ids;
    int64_t *out_ids; // nq x k
    float *out_d;
    int64_t *out_counts;
    int *out_ok;
};
void launch_finalize(const FinalizeArgs &a, cudaStream_t s);

// Fused re-rank for kp <= kRerankMax: per query, exact keys of the kp candidates (approximate
// keys in cand, kNoKey for none), a block-wide bitonic sort in shared memory, certification and
// output (as launch_finalize).
constexpr int kRerankMax = 4096;
struct RerankArgs
{
    const uint64_t *cand; // nq x kp approximate keys
    int kp, nq, k;
    DeviceQueries q;
    DeviceRows rows;
    vs_metric metric;
    int kind;
    double maxnorm;
    int64_t *out_ids;
    float *out_d;
    int64_t *out_counts;
    int *out_ok;
};
void launch_rerank(const RerankArgs &a, cudaStream_t s);

// Exact keys of every row for nq queries: out[q * n + r].
void launch_exact_all(DeviceQueries q, DeviceRows rows, vs_metric m, uint64_t *out,
                      cudaStream_t s);

// out[q * ld + r] = the exact base value of every row rounded to float (MODE_RAW values within
// APPROX_DIRECT_F32's bound): the direct tile of rows the scan kernels cannot read (binary16).
void launch_exact_tile(DeviceQueries q, DeviceRows rows, vs_metric m, float *out, int64_t ld,
                       cudaStream_t s);

// Large k, for the queries whose filter missed (count[q] < k or > stride): the kp smallest
// approximate keys of the full row (unsorted) at cand + q * stride, kNoKey up to stride, count[q]
// = kp and bound[q] = the kp-th key's value (rows outside have keys at or above it).  Other
// queries are left as they are.
void launch_radix_select(const float *tile, int64_t ld, int nq, uint32_t n, int mode,
                         const float *xsq, const float *xinv, const float *ysq, const float *yinv,
                         int kp, int k, int stride, uint32_t *count, uint64_t *bound,
                         uint64_t *cand, cudaStream_t s);
// Segments of the large-k candidates: begin[q] = q * stride, end[q] = begin[q] + min(count[q],
// stride).
void launch_segment_bounds(const uint32_t *count, int nq, int stride, int *begin, int *end,
                           cudaStream_t s);

// ---- fused direct scan (small batches, L1, fallback) ------------------------------------

enum ScanOp
{
    OP_L2 = 0,
    OP_DOT = 1,
    OP_L1 = 2
};

struct ScanArgs
{
    DeviceRows rows;
    const float *q;    // nb queries x d
    const float *qinv; // per query (cosine)
    const float *qsq;  // per query ||x||^2 (streaming kernel, L2 in dot form)
    int nb;            // queries in this launch (<= scan_max_queries(tier))
    vs_metric metric;
    bool select;       // true: top-kp per (query, block) into partial; false: write values
    int kp, bcap;
    uint64_t *partial; // nb x grid x kp
    // rows kernels: thresholds in, candidates out (launch_stream_filter)
    uint64_t *thr;       // nb
    uint32_t *count;     // nb
    uint64_t *cand;      // nb x cap
    int cap;
    float *out;        // write mode: out[q * ldo + row]
    int64_t ldo;
    int grid;          // blocks (persistent)
};
int scan_op(vs_metric m);
int scan_tier_queries(int tier); // 16 or 64 queries
size_t scan_smem_bytes(int tier, bool select, int nb, int kp, int bcap);
void launch_scan(const ScanArgs &a, int tier, cudaStream_t s);
int scan_blocks_per_sm(int tier, size_t smem); // occupancy
// The rows kernels for <= 32 queries, d % 4 == 0, d <= 1024 (scan.cu): sample keys (p.chunks x 32
// rows per query, into sample_keys), thresholds (a.thr), the filter pass (a.count, a.cand, a.cap)
// and the sort of the survivors into state (nb x kp; all kNoKey where the threshold missed).
bool stream_ok(int d, int nb);
bool stream_fits(int nb, int d, size_t smem_optin);
void launch_stream_filter(const ScanArgs &a, const FilterPlan &p, int sms, uint64_t *sample_keys,
                          uint64_t *state, cudaStream_t s);

// ---- range (range_kernels.cu) -----------------------------------------------------------

// Candidates of queries [qa, qb) x columns [ca, cb) of a tile: approximate value <= thr[q] (or
// NaN), as keys (q << cbits | column; columns < 2^cbits) in no particular order; the first `cap`
// are stored, *total counts all of them, count[q] (when not null) each query's.
struct RangeFilterArgs
{
    const float *tile; // tile[q * ld + c]
    int64_t ld;        // a multiple of 4
    int mode;
    const float *xsq, *xinv; // per query of the tile
    const float *ysq, *yinv; // per column of the tile (padded to a multiple of 4)
    const float *thr;        // per query of the tile
    int qa, qb;
    uint32_t ca, cb;         // ca a multiple of 4
    int cbits;
    uint32_t *count;
    unsigned long long *total;
    uint64_t *cand;
    uint64_t cap;
};
void launch_range_filter(const RangeFilterArgs &a, cudaStream_t s);
// Exact distances of n candidate keys (q << cbits | column; dataset row row0 + column; query q
// of q): keys[i] = the key if the distance is <= radius, else kNoKey; vals[i] = its float bits.
void launch_range_check(const uint64_t *cand, size_t n, int cbits, uint32_t row0, DeviceQueries q,
                        DeviceRows rows, vs_metric m, float radius, uint64_t *keys, uint32_t *vals,
                        cudaStream_t s);
// From the n keys sorted ascending (matches of queries qa .. qa + nq - 1, then kNoKey):
// offsets[j] (j <= nq) = where query qa + j starts, so offsets[nq] matches, written as
// out_ids = ids[row0 + column] and out_d.
void launch_range_output(const uint64_t *sorted, const uint32_t *vals, size_t n, int cbits, int qa,
                         int nq, uint32_t row0, const int64_t *ids, int64_t *offsets,
                         int64_t *out_ids, float *out_d, cudaStream_t s);

// ---- subsets -----------------------------------------------------------------------------

// rows[i] for the candidate ids of each query (kNoRow when unknown); qidx[i] = query.
void launch_subset_rows(const int64_t *offsets, int nq, const int64_t *cand_ids,
                        const int64_t *ids, uint32_t n, uint32_t *rows, int *qidx,
                        cudaStream_t s);
// Keys per candidate: knn: exact key (dist, row); range: (row << 32 | dist bits) if within
// radius, else kNoKey.
void launch_subset_keys(const uint32_t *rows, const int *qidx, size_t nc, DeviceQueries q,
                        DeviceRows ds, vs_metric m, bool range, float radius, uint64_t *keys,
                        cudaStream_t s);
// Unique valid keys per sorted segment: counts (knn: capped at k).
void launch_subset_count(const uint64_t *keys, const int64_t *offsets, int nq, int64_t cap,
                         int64_t *counts, cudaStream_t s);
// Writes them: knn at q * k (padded); range at out_off[q].
void launch_subset_write(const uint64_t *keys, const int64_t *offsets, int nq, bool range,
                         int64_t k, const int64_t *out_off, const int64_t *ids, int64_t *out_ids,
                         float *out_d, cudaStream_t s);

// ---- datasets and misc -----------------------------------------------------------------

// Rows of row_bytes bytes (a multiple of 2): dst row r = old row map[r] (map[r] >= 0) or fresh row
// -map[r] - 1.
void launch_gather_rows(void *dst, const void *old, const void *fresh, const int64_t *map,
                        size_t n, size_t row_bytes, cudaStream_t s);
// offs[i] = i * stride for i <= nseg
void launch_fill_offsets(int *offs, int nseg, int stride, cudaStream_t s);

// ---- k-means -----------------------------------------------------------------------------

// GEMM tile (np points x k centroids: tile[p * ld + c] = <x_p, c_c>) to assignments.
void launch_kmeans_argmin(const float *tile, int64_t ld, int np, int k, bool spherical,
                          vs_metric metric, const float *csq, const float *xsq, uint32_t *assign,
                          float *obj, cudaStream_t s);
void launch_kmeans_mind(const float *x, size_t m, int d, const float *c, bool first,
                        double *mind, cudaStream_t s);
void launch_kmeans_pick(const double *prefix, size_t m, double u, uint32_t *out, cudaStream_t s);
void launch_kmeans_counts(const uint32_t *assign, size_t m, int *counts, cudaStream_t s);
void launch_kmeans_sums(const float *x, int d, const uint32_t *perm, const int *offsets,
                        const int *counts, int k, float *centroids, cudaStream_t s);

// ---- IVF-PQ (ivfpq_kernels.cu) ------------------------------------------------------------

// keys[q * nlist + l] = (exact coarse distance under cm, list l).
void launch_coarse_keys(const float *q, int nq, const float *centroids, int nlist, int d,
                        vs_metric cm, uint64_t *keys, cudaStream_t s);
// From each query's sorted coarse keys: ranks [first, first + np) as lists and coarse distances.
void launch_probe_window(const uint64_t *sorted, int nq, int nlist, int first, int np,
                         int32_t *probes, float *coarse, cudaStream_t s);
// Nearest list of each vector (ties: smaller list).
void launch_assign(const float *x, size_t n, const float *centroids, int nlist, int d,
                   vs_metric cm, int32_t *lists, cudaStream_t s);
// PQ codes of the residuals x - centroids[lists[i]].
void launch_pq_encode(const float *x, size_t n, const float *centroids, const int32_t *lists,
                      const float *codebooks, int d, int m, int nbits, int code_size,
                      uint8_t *codes, cudaStream_t s);

// One probed list of one query: its candidates go to keys/ids[out ..), scan positions pos0 ..
struct PqPair
{
    int32_t query; // within the chunk
    int32_t list;  // -1: nothing to scan
    float term;    // the list term (engine/ivfpq_math.h)
    uint32_t pos0;
    int64_t out;
};
struct PqScanArgs
{
    const PqPair *pairs;
    const float *queries; // chunk queries, d floats each
    const float *centroids, *codebooks;
    const uint8_t *const *list_codes;
    const int64_t *const *list_ids;
    const uint32_t *list_len;
    int d, m, nbits, code_size;
    vs_metric metric;
    uint64_t *keys; // (estimate, scan position)
    int64_t *ids;
};
size_t pq_scan_smem_bytes(int m, int nbits, int d);
void launch_pq_scan(const PqScanArgs &a, int npairs, cudaStream_t s);
// k best per query from its sorted segment [seg[q], seg[q + 1]) of keys, ties by (id, position).
void launch_pq_topk(const uint64_t *sorted, const int64_t *seg, const int64_t *cand_ids, int nq,
                    int64_t k, int64_t *out_ids, float *out_d, int64_t *out_counts, cudaStream_t s);
void launch_pq_range_flags(const uint64_t *keys, size_t n, float radius, uint8_t *flags,
                           cudaStream_t s);
void launch_pq_range_gather(const uint32_t *sel, size_t n, const uint64_t *keys,
                            const int64_t *cand_ids, int64_t *ids, float *dists, uint32_t *pos,
                            cudaStream_t s);

// ---- CUB wrappers (one instantiation each) -------------------------------------------------

void segmented_sort_keys(DevicePool &pool, const uint64_t *in, uint64_t *out, int n, int nseg,
                         const int *begin, const int *end, cudaStream_t s);
void segmented_sort_keys64(DevicePool &pool, const uint64_t *in, uint64_t *out, int n, int nseg,
                           const int64_t *offsets, cudaStream_t s);
void inclusive_sum(DevicePool &pool, const double *in, double *out, size_t n, cudaStream_t s);
void sort_pairs_u32(DevicePool &pool, const uint32_t *kin, uint32_t *kout, const uint32_t *vin,
                    uint32_t *vout, size_t n, int end_bit, cudaStream_t s);
// 64-bit keys (bits [0, end_bit)) with 32-bit values (range matches).
void sort_pairs_u64(DevicePool &pool, const uint64_t *kin, uint64_t *kout, const uint32_t *vin,
                    uint32_t *vout, size_t n, int end_bit, cudaStream_t s);
// Indices i < n with flags[i] != 0, in order, into out; returns how many.
size_t select_flagged_indices(DevicePool &pool, const uint8_t *flags, size_t n, uint32_t *out,
                              cudaStream_t s);

} // namespace vs::cuda

#endif
