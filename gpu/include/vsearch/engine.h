/*
 * vsearch engine: exact batched kNN, range search and k-means over resident vector sets, with a
 * CPU backend and a CUDA backend behind one C ABI.
 *
 * No PostgreSQL (or CUDA) headers are needed to use it.  Every function is noexcept: C++ exceptions
 * are caught at this boundary and turned into a vs_status, with a message readable through
 * vs_last_error() on the context.  A context (and the datasets created in it) may be used by one
 * thread at a time; distinct contexts are independent.
 *
 * Results
 *   - kNN: per query, k (id, distance) pairs sorted by ascending distance, ties broken by the
 *     smaller id.  IP distances are negative inner products, so ascending = most similar first.
 *     If fewer than k candidates exist the tail is padded with id -1 and distance +inf, and the
 *     per-query count says how many are real.
 *   - Range: every row with distance <= radius, as CSR (offsets[nq + 1], ids, distances); within a
 *     query the matches are in ascending id order.  The three arrays are obtained from a caller
 *     allocator callback (e.g. palloc_extended(..., MCXT_ALLOC_NO_OOM) in a PostgreSQL backend), or
 *     by the engine when none is given (free them with vs_range_result_free, never free()).
 *   - Distances are in the metric's own units (L2 is the square root of L2SQ; COSINE is
 *     1 - cos, NaN when a norm is zero; IP is -<x, y>).  Every returned distance is computed from
 *     the float32 inputs with double accumulation in a fixed order (the same on every backend) and
 *     rounded to float once, so the CPU and the CUDA backend return the same ids and the same
 *     distances; rows whose distance is NaN sort after every number and never match a range.
 *
 * Exactness: the CUDA backend may use TF32 tensor-core GEMMs to find candidates; every candidate
 * set is certified against a rigorous bound on the GEMM's rounding error and re-searched with
 * exact fp32 kernels when the bound cannot prove it complete, so results never depend on it.
 */
#ifndef VSEARCH_ENGINE_H
#define VSEARCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "vsearch/distance.h" /* vs_metric */

#if defined(__cplusplus)
#define VS_NOEXCEPT noexcept
#else
#define VS_NOEXCEPT
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define VS_ENGINE_ABI_VERSION 1

typedef enum vs_status
{
    VS_OK = 0,
    VS_INVALID_ARGUMENT = 1, /* a null pointer, a size out of range, a duplicate id, ... */
    VS_OUT_OF_MEMORY = 2,    /* host or device memory, or the context's device memory budget */
    VS_DEVICE_ERROR = 3,     /* the CUDA driver or runtime failed; the context stays usable */
    VS_UNSUPPORTED = 4,      /* no such backend here, a storage type not implemented, ... */
    VS_CANCELLED = 5,        /* the cancel callback asked to stop */
    VS_INTERNAL = 6          /* a bug */
} vs_status;

typedef enum vs_backend_kind
{
    VS_BACKEND_AUTO = 0, /* CUDA if the library loads and a device exists, else CPU */
    VS_BACKEND_CPU = 1,
    VS_BACKEND_CUDA = 2
} vs_backend_kind;

/* How the CUDA backend's GEMMs find candidates (results are exact either way). */
typedef enum vs_gemm_precision
{
    VS_GEMM_TF32 = 0, /* tensor cores; candidates re-ranked exactly (default) */
    VS_GEMM_FP32 = 1  /* plain fp32 SGEMM */
} vs_gemm_precision;

/* Storage type of a dataset's vectors.  F16 (IEEE binary16, `halfvec`) keeps half the bytes on
 * the device; its distances are the exact distances of the half values, the same bits as an F32
 * dataset holding those values widened.  BF16 is reserved (VS_UNSUPPORTED). */
typedef enum vs_dtype
{
    VS_DTYPE_F32 = 0,
    VS_DTYPE_F16 = 1,
    VS_DTYPE_BF16 = 2
} vs_dtype;

typedef struct vs_context vs_context;
typedef struct vs_dataset vs_dataset;

/* Where a dataset of a context over several devices lives (decided at its first add). */
typedef enum vs_placement
{
    VS_PLACEMENT_AUTO = 0,       /* sharded if the first add reaches shard_min_bytes or half of
                                  * the smallest device budget, else replicated */
    VS_PLACEMENT_REPLICATED = 1, /* every device holds every row */
    VS_PLACEMENT_SHARDED = 2     /* each device holds the rows whose id hashes to it */
} vs_placement;

typedef struct vs_context_options
{
    vs_backend_kind backend;
    /* Path of vsearch_cuda.so.  NULL: $VSEARCH_CUDA_LIBRARY, else "vsearch_cuda.so" (the dynamic
     * loader's search path).  A process that never asks for CUDA never opens it. */
    const char *cuda_library;
    int device;                  /* CUDA device ordinal */
    size_t device_memory_budget; /* bytes the CUDA backend may hold; 0 = 90% of free memory */
    int num_threads;             /* CPU backend threads; 0 = all hardware threads */
    vs_gemm_precision gemm_precision;
    /* Polled by the calling thread between blocks of work; nonzero stops the call with
     * VS_CANCELLED.  It must only read a flag (never longjmp or throw). */
    int (*cancel)(void *arg);
    void *cancel_arg;
    /* Several devices (one backend each, device ignored): ndevices ordinals in devices, or
     * ndevices = -1 for every visible device of the backend's kind.  0 (default): one device.
     * With the CPU backend the ordinals only count contexts (the test twin of several GPUs), each
     * with num_threads / ndevices threads. */
    const int *devices;
    int ndevices;
    vs_placement placement;      /* of new datasets (AUTO by default) */
    size_t shard_min_bytes;      /* AUTO shards datasets at least this large; 0 = 1 GiB */
    /* Calls that may run at once from different threads (vs_context_lanes): a CUDA lane has its
     * own streams, cuBLAS handles and staging buffers, while datasets, index objects and the
     * memory pool are shared.  0 = 1 (calls from several threads must then be serialised by the
     * caller).  Over several devices each device's backend has one lane. */
    int lanes;
} vs_context_options;

/* Fills in the defaults (AUTO backend, device 0, everything else 0/NULL). */
void vs_context_options_init(vs_context_options *options) VS_NOEXCEPT;

/* Creates a context.  On failure *out is NULL and, if errbuf is not NULL, a message is written to
 * it (NUL-terminated, truncated to errlen). */
vs_status vs_context_create(const vs_context_options *options, vs_context **out, char *errbuf,
                            size_t errlen) VS_NOEXCEPT;
void vs_context_destroy(vs_context *ctx) VS_NOEXCEPT;

/* Calls that may run at once on this context from different threads: its lanes (options).  Any
 * call takes a free lane (or waits for one); over several devices a replicated call of fewer than
 * 256 queries takes the device with the fewest calls in flight.  A dataset or index object must
 * not change while another call uses it. */
int vs_context_lanes(const vs_context *ctx) VS_NOEXCEPT;

/* Message of the last failed call of the calling thread on this context ("" if none); valid
 * until that thread's next call. */
const char *vs_last_error(const vs_context *ctx) VS_NOEXCEPT;
/* Name of a status code ("VS_OK", ...). */
const char *vs_status_name(vs_status status) VS_NOEXCEPT;

typedef struct vs_context_info
{
    vs_backend_kind backend; /* CPU or CUDA, never AUTO */
    char device_name[128];   /* "cpu (avx512f, 16 threads)", "NVIDIA H100 80GB HBM3", ... */
    size_t memory_budget;    /* device bytes the pool may hold (0 for CPU) */
    size_t memory_in_use;    /* device bytes held now (datasets and cached scratch) */
    int device_count;        /* devices of this backend's kind the process sees (CPU: 1) */
} vs_context_info;

/* For a context over several devices: the sums of its live devices' budgets and use. */
vs_status vs_context_get_info(vs_context *ctx, vs_context_info *info) VS_NOEXCEPT;

/* ---- several devices ---------------------------------------------------------------------- */

typedef struct vs_device_info
{
    int device;              /* ordinal */
    int alive;               /* 0 once a device error (or vs_context_fail_device) took it out */
    vs_context_info info;    /* its backend's information (zeros once lost) */
    uint64_t calls;          /* engine calls it ran */
    size_t datasets;         /* datasets with rows on it (replicas and shards) */
    size_t ivfpq_objects;    /* IVF-PQ objects on it */
    char error[160];         /* why it was lost ("" while alive) */
} vs_device_info;

/* Devices of the context (1 for a single-device context) and how many still serve. */
int vs_context_device_count(const vs_context *ctx) VS_NOEXCEPT;
int vs_context_live_devices(const vs_context *ctx) VS_NOEXCEPT;
vs_status vs_context_get_device_info(vs_context *ctx, int i, vs_device_info *info) VS_NOEXCEPT;
/* Test aid: takes device i out as a device error would (datasets with rows on it then fail with
 * VS_DEVICE_ERROR and must be loaded again; new ones use the other devices). */
vs_status vs_context_fail_device(vs_context *ctx, int i) VS_NOEXCEPT;

/* ---- fault points (test aid) ---------------------------------------------------------------- */

/* What an injected fault does to a call that reaches a backend (a copy to the device, a search, a
 * build step: every entry point below that calls the backend, after checking its arguments).  The
 * fault points sit in the front end, so they behave the same over the CPU and the CUDA backend. */
typedef enum vs_fault
{
    VS_FAULT_NONE = 0,
    VS_FAULT_OUT_OF_MEMORY = 1, /* the call fails with VS_OUT_OF_MEMORY, as a full device would */
    VS_FAULT_DEVICE_ERROR = 2,  /* the call fails with VS_DEVICE_ERROR, as a kernel or copy would */
    VS_FAULT_HANG = 3,          /* the call blocks for ms without polling the cancel callback, as
                                 * a wedged driver would, then fails with VS_DEVICE_ERROR */
    VS_FAULT_SLOW = 4,          /* the call first waits ms polling the cancel callback (a long
                                 * call: VS_CANCELLED if it says stop), then runs */
} vs_fault;

/* Test aid: the context's next count calls (-1: every call until VS_FAULT_NONE is injected) meet
 * fault.  ms: the wait of HANG and SLOW, at most 600000.  Only the thread that makes the calls may
 * inject (the state is not synchronized). */
vs_status vs_context_inject_fault(vs_context *ctx, vs_fault fault, int count, unsigned ms) VS_NOEXCEPT;

/* ---- resident datasets ----------------------------------------------------------------- */

/* An empty dataset of dim-dimensional vectors, stored on the context's backend (device memory for
 * CUDA).  Rows are kept in ascending id order. */
vs_status vs_dataset_create(vs_context *ctx, size_t dim, vs_dtype storage, vs_dataset **out) VS_NOEXCEPT;
/* Appends n vectors (n x dim floats, row-major) with their ids.  Ids are unique within a dataset:
 * an id already present, or repeated in the call, is VS_INVALID_ARGUMENT and nothing is added.
 * An F16 dataset stores each value rounded to the nearest half (ties to even); a value that
 * rounds to infinity (magnitude >= 65520) or a NaN is VS_INVALID_ARGUMENT. */
vs_status vs_dataset_add(vs_context *ctx, vs_dataset *ds, const float *vectors, const int64_t *ids,
                         size_t n) VS_NOEXCEPT;
/* The same with n x dim binary16 values (raw bits, vsearch/half.h), into a dataset of either
 * storage type (an F32 dataset stores them widened, which is exact); an infinite or NaN half is
 * VS_INVALID_ARGUMENT. */
vs_status vs_dataset_add_f16(vs_context *ctx, vs_dataset *ds, const uint16_t *vectors,
                             const int64_t *ids, size_t n) VS_NOEXCEPT;
/* Removes the rows with these ids; ids not present are ignored.  *removed (optional) gets the
 * number of rows removed. */
vs_status vs_dataset_remove(vs_context *ctx, vs_dataset *ds, const int64_t *ids, size_t n,
                            size_t *removed) VS_NOEXCEPT;
/* A new dataset of src's rows with these ids (each in src, none repeated), in src's storage and
 * placement, copied within the backend (device to device on CUDA): a search among part of a
 * resident dataset without sending its rows again. */
vs_status vs_dataset_subset(vs_context *ctx, const vs_dataset *src, const int64_t *ids, size_t n,
                            vs_dataset **out) VS_NOEXCEPT;
size_t vs_dataset_size(const vs_dataset *ds) VS_NOEXCEPT;
size_t vs_dataset_dim(const vs_dataset *ds) VS_NOEXCEPT;
vs_dtype vs_dataset_storage(const vs_dataset *ds) VS_NOEXCEPT;
/* Destroys a dataset.  Datasets should be destroyed before their context; vs_context_destroy
 * releases the memory of any still alive, leaving handles that vs_dataset_destroy alone accepts. */
void vs_dataset_destroy(vs_context *ctx, vs_dataset *ds) VS_NOEXCEPT;
/* The placement of a dataset (REPLICATED for a single-device context; AUTO before the first add). */
vs_placement vs_dataset_placement(const vs_context *ctx, const vs_dataset *ds) VS_NOEXCEPT;

/* ---- search ------------------------------------------------------------------------------ */

/* Optional per-query candidate subsets, CSR: the candidates of query i are
 * ids[offsets[i] .. offsets[i + 1]).  Ids not in the dataset are ignored, repeats count once. */
typedef struct vs_subsets
{
    const int64_t *offsets; /* nq + 1 entries, offsets[0] = 0, non-decreasing */
    const int64_t *ids;
} vs_subsets;

/* Exact k nearest neighbours of nq queries (nq x dim floats, row-major).  out_ids and
 * out_distances hold nq x k entries; out_counts (optional) nq entries. */
vs_status vs_knn(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq, size_t k,
                 vs_metric metric, const vs_subsets *subsets, int64_t *out_ids,
                 float *out_distances, int64_t *out_counts) VS_NOEXCEPT;

/* Allocator for range results: returns bytes of memory, or NULL on failure (then the call fails
 * with VS_OUT_OF_MEMORY and whatever it returned before is the caller's to free).  It is called
 * from the calling thread only, after the search, never while the engine holds other state. */
typedef void *(*vs_alloc_fn)(void *arg, size_t bytes);

typedef struct vs_range_result
{
    size_t nq;
    size_t total;      /* number of matches = offsets[nq] */
    int64_t *offsets;  /* nq + 1 */
    int64_t *ids;      /* total (NULL-able when total = 0 only if the allocator returns NULL) */
    float *distances;  /* total */
} vs_range_result;

/* Every row within radius (distance <= radius) of each query. */
vs_status vs_range(vs_context *ctx, const vs_dataset *ds, const float *queries, size_t nq,
                   float radius, vs_metric metric, const vs_subsets *subsets, vs_alloc_fn alloc,
                   void *alloc_arg, vs_range_result *out) VS_NOEXCEPT;
/* Frees a result whose arrays the engine allocated (alloc == NULL). */
void vs_range_result_free(vs_range_result *result) VS_NOEXCEPT;

/* ---- k-means ----------------------------------------------------------------------------- */

typedef enum vs_kmeans_init
{
    VS_KMEANS_INIT_RANDOM = 0,   /* k distinct training points drawn with the seed */
    VS_KMEANS_INIT_PLUSPLUS = 1  /* k-means++ (D^2 sampling) with the seed */
} vs_kmeans_init;

typedef struct vs_kmeans_params
{
    size_t k;
    int iterations;     /* Lloyd iterations (default 20) */
    vs_kmeans_init init;
    uint64_t seed;
    size_t sample_size; /* train on this many points drawn with the seed; 0 = all */
    vs_metric metric;   /* L2SQ or L2: Euclidean; IP or COSINE: spherical (unit centroids) */
} vs_kmeans_params;

typedef struct vs_kmeans_info
{
    double objective;      /* sum over the training points of their distance to the centroid
                              they were assigned to in the last iteration: squared L2 (L2SQ, L2),
                              -<x, c> (IP) or 1 - cos (COSINE) */
    int iterations;        /* iterations run */
    size_t empty_repaired; /* empty clusters re-seeded, over all iterations */
} vs_kmeans_info;

void vs_kmeans_params_init(vs_kmeans_params *params) VS_NOEXCEPT;

/* Trains k centroids (k x dim floats into centroids) on n host vectors.  Deterministic for a seed
 * on a given backend.  Needs n >= k. */
vs_status vs_kmeans(vs_context *ctx, const float *data, size_t n, size_t dim,
                    const vs_kmeans_params *params, float *centroids, vs_kmeans_info *info) VS_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif /* VSEARCH_ENGINE_H */
