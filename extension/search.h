/*
 * Search execution for vsearch indexes: the one place index scans and batch functions ask for kNN
 * and range results.  A request runs in the GPU worker when one serves (worker.h) and otherwise in
 * this backend on the engine's CPU backend, on the index kind's engine object (indexkind.h); both
 * read the same index pages and return the same answer.
 *
 * Rows are named by int64 ids that encode heap item pointers (vs_tid_to_id), so results need no
 * translation between the worker and the backend.
 */
#ifndef VSEARCH_SEARCH_H
#define VSEARCH_SEARCH_H

#include "postgres.h"

#include <math.h>

#include "storage/bufmgr.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "vsearch/distance.h"

#include "pgcompat.h"

/*
 * A kind's own search parameters (a probe window, a search width, ...) or worker build step: an
 * opaque block that each kind lays out, fills and checks itself.  Unused bytes are zero, so equal
 * parameters compare equal with memcmp (the worker groups requests that way).
 */
#define VS_KIND_PARAMS_SIZE 48

typedef struct VsKindParams
{
	uint64		words[VS_KIND_PARAMS_SIZE / sizeof(uint64)];
} VsKindParams;

/*
 * Everything needed to find and read an index without a relcache entry (the worker serves every
 * database of the cluster, but is connected to none of them).  Filled from the metapage when a
 * scan begins (vs_index_ref); `generation` is the metapage's change counter at that moment, so a
 * cached copy at least that new is good enough for the scan.
 */
typedef struct VsIndexRef
{
	Oid			dbid;
	Oid			indexrelid;
	VsRelFileLocator locator;	/* where the pages are */
	char		relpersistence;
	uint32		kind;			/* the index kind's id (indexkind.h) */
	vs_metric	metric;
	uint32		dim;			/* 0: the index has never held a vector (it is empty) */
	uint64		generation;
	uint64		ntuples;		/* index entries when the ref was taken (dead ones included) */
	uint64		kind_info[4];	/* the kind's own, from its metapage */
} VsIndexRef;

/*
 * The queries of a search: nq vectors of the index's dimension (every vector index), or nq strings
 * of characters (the text indexes of vs_lc and vs_sss: pg_wchar code points, textdist.h) back to
 * back, string i being chars[offsets[i] .. offsets[i + 1]).
 */
typedef struct VsQueries
{
	Size		nq;
	const float *vectors;		/* nq x dim; NULL for strings */
	const uint64 *offsets;		/* strings: nq + 1 */
	const uint32 *chars;
} VsQueries;

static inline VsQueries
vs_vector_queries(const float *vectors, Size nq)
{
	VsQueries	q;

	q.nq = nq;
	q.vectors = vectors;
	q.offsets = NULL;
	q.chars = NULL;
	return q;
}

/*
 * Queries [q0, q0 + n) of a set of dim-dimensional vectors or of strings (strings keep the set's
 * characters: offsets are not rebased).
 */
static inline VsQueries
vs_queries_slice(const VsQueries *queries, uint32 dim, int q0, int n)
{
	VsQueries	s = *queries;

	s.nq = n;
	if (s.vectors != NULL)
		s.vectors += (Size) q0 * dim;
	else
		s.offsets += q0;
	return s;
}

/* Range results of one engine call: CSR in the caller's memory context. */
typedef struct VsRangeResult
{
	int			nq;
	int64		total;
	int64	   *offsets;		/* nq + 1 */
	int64	   *ids;			/* total */
	float	   *distances;		/* total */
} VsRangeResult;

/*
 * Range results as they reach SQL: a stream of chunks handed to a consumer, so that no answer is
 * held whole in the backend whatever its size.  A chunk holds the matches of the consecutive
 * queries [q0, q0 + nq) (positions in the search's queries) in CSR form, offsets from 0, at most
 * vs_range_chunk_matches() of them.  Chunks come in query order; a query in no chunk has no
 * match.  A query whose matches do not fit one chunk is split: `more` says the chunk's last query
 * goes on, and the next chunk starts with it.  The arrays are valid during the call only.  A
 * consumer may raise an ERROR (the search is abandoned) but must not start another search.
 */
typedef struct VsRangeChunk
{
	int			q0;
	int			nq;
	bool		more;			/* query q0 + nq - 1 continues in the next chunk */
	const int64 *offsets;		/* nq + 1 */
	const int64 *ids;
	const float *distances;
} VsRangeChunk;

typedef void (*VsRangeConsumer) (void *arg, const VsRangeChunk *chunk);

/* Most matches of a chunk: work_mem at 64 bytes a match (what a consumer spends on one), at
 * least 1024. */
extern int64 vs_range_chunk_matches(void);

/* Hands one engine call's result, its queries numbered from q0, to a consumer in chunks. */
extern void vs_range_deliver(const VsRangeResult *res, int q0, VsRangeConsumer consume,
							 void *arg);

/*
 * Chunks built a match at a time (a kind's own pass over its pages, candidates added to an
 * engine's answer): matches are added in query order, and a full chunk goes to the consumer.
 */
typedef struct VsRangeStream
{
	VsRangeConsumer consume;
	void	   *arg;
	int			nq;				/* queries of the search */
	int64		cap;			/* matches a chunk holds */
	int			q0;				/* the pending chunk's first query */
	int			q;				/* the query being added (q0 .. nq) */
	int64		n;				/* matches pending */
	int64	   *offsets;		/* nq + 1: offsets[i] for queries q0 + i <= q */
	int64	   *ids;			/* cap */
	float	   *distances;
} VsRangeStream;

extern void vs_range_stream_begin(VsRangeStream *s, int nq, VsRangeConsumer consume, void *arg);
/* Adds a match of query q (>= the last query added). */
extern void vs_range_stream_add(VsRangeStream *s, int q, int64 id, float distance);
/* Sends what is pending and frees the stream. */
extern void vs_range_stream_end(VsRangeStream *s);

static inline int64
vs_tid_to_id(ItemPointer tid)
{
	return ((int64) ItemPointerGetBlockNumberNoCheck(tid) << 16) |
		ItemPointerGetOffsetNumberNoCheck(tid);
}

static inline void
vs_id_to_tid(int64 id, ItemPointer tid)
{
	ItemPointerSet(tid, (BlockNumber) (id >> 16), (OffsetNumber) (id & 0xFFFF));
}

/* The engine's order of results: distance ascending (NaN last, -0 = +0), then id. */
static inline int
vs_cmp_engine_order(float d1, int64 id1, float d2, int64 id2)
{
	bool		nan1 = d1 != d1;
	bool		nan2 = d2 != d2;

	if (nan1 != nan2)
		return nan1 ? 1 : -1;
	if (!nan1)
	{
		if (d1 < d2)
			return -1;
		if (d1 > d2)
			return 1;
	}
	return id1 < id2 ? -1 : (id1 > id2 ? 1 : 0);
}

/* The qsort/bsearch order of row ids. */
extern int	vs_cmp_int64(const void *a, const void *b);

/* Fills ref from an open, locked vsearch index (its kind reads its metapage); ERROR otherwise. */
extern void vs_index_ref(Relation index, VsIndexRef *ref);
/* For the kinds' read_ref: the fields that come from the relation, the rest zeroed. */
extern void vs_ref_init(Relation index, uint32 kind, VsIndexRef *ref);

/*
 * Reading pages by ref: a temporary index is opened through the relcache (its pages are in this
 * backend's local buffers), any other is read by locator.  vs_index_open_for_read returns the
 * relation to pass to vs_index_read_block (NULL for non-temporary indexes) and
 * vs_index_close_for_read closes it.
 */
extern Relation vs_index_open_for_read(const VsIndexRef *ref);
extern void vs_index_close_for_read(Relation rel);
extern Buffer vs_index_read_block(const VsIndexRef *ref, Relation rel, BlockNumber blkno,
								  BufferAccessStrategy bas);

/*
 * The backend's engine CPU context (created on first use, kept for the backend's life), and
 * errors: vs_engine_error raises an engine status as an ERROR with the message of the context the
 * failed call ran in (NULL for the context-free calls: the status's name); after VS_CANCELLED call
 * vs_engine_cancelled, which raises the pending cancel (or gives up after many retries).
 */
struct vs_context;
extern struct vs_context *vs_backend_engine(void);
/* The CPU engine of an index build in this backend (max_parallel_maintenance_workers + 1 threads). */
extern struct vs_context *vs_build_engine(void);
extern void vs_engine_error(const struct vs_context *ctx, int status) pg_attribute_noreturn();
extern void vs_engine_cancelled(int *retries);

/*
 * The searches, with the kind's parameters (params NULL: all zero).  In the worker when it
 * serves, else in this backend: over the pages in place when the kind has backend searches
 * (indexkind.h), otherwise on this backend's cached engine object of the index.
 *   kNN:   ids/distances nq x k, counts nq (rows found <= k);
 *   range: every row within radius of each query, in chunks to consume (VsRangeChunk).
 * vs_search_knn takes vectors; the _queries forms strings too (VsQueries).
 */
extern void vs_search_knn(const VsIndexRef *ref, const VsKindParams *params, const float *queries,
						  int nq, int k, int64 *ids, float *distances, int64 *counts);
extern void vs_search_knn_queries(const VsIndexRef *ref, const VsKindParams *params,
								  const VsQueries *queries, int k, int64 *ids, float *distances,
								  int64 *counts);

/*
 * kNN whose answers the caller works on while the search goes on: when the worker answers a large
 * batch in several requests, progress(arg, upto) runs while each request after the first
 * computes, with the answers of queries [0, upto) final in the caller's arrays; the caller works
 * on the rest after the call returns.  Otherwise it is vs_search_knn_queries (no progress call).
 * progress must not search.
 */
typedef void (*VsKnnProgress) (void *arg, int upto);
extern void vs_search_knn_overlapped(const VsIndexRef *ref, const VsKindParams *params,
									 const VsQueries *queries, int k, int64 *ids,
									 float *distances, int64 *counts, VsKnnProgress progress,
									 void *arg);
extern void vs_search_range_queries(const VsIndexRef *ref, const VsKindParams *params,
									const VsQueries *queries, double radius,
									VsRangeConsumer consume, void *arg);

/* The range_candidates of an exact kind (indexkind.h): its search finds exactly the rows within
 * the radius, with the operator's distances. */
extern void vs_search_range_candidates(const VsIndexRef *ref, const VsQueries *queries,
									   double radius, VsRangeConsumer consume, void *arg);

/*
 * This backend's engine object of the index (the kind's), at least as new as ref: for a kind's
 * own use of it (an exact re-rank from stored vectors, ...).  It stays valid until
 * vs_search_trim_cache(), which keeps the cached objects within vs_search_cache_mb.
 */
extern void *vs_search_object(const VsIndexRef *ref);
extern void vs_search_trim_cache(void);

/*
 * Distances.  Every vsearch distance is the engine's exact one (vsearch/distance.h,
 * vs_exact_distance_f32: terms in double, rounded once to float), the same bits in the SQL
 * operators, the CPU engine and the GPU; so an exact index returns the operator's very value and
 * the executor rechecks nothing.  L2 is ranked by its square: searches run on the exact squared sum
 * (a float) and the operator's value is its root in double, sqrt((double) sum), as pgvector
 * computes it.  "Rank units" are what searches return: the squared sum for L2, the metric's value
 * for the others.
 */
static inline vs_metric
vs_rank_metric(vs_metric metric)
{
	return metric == VS_METRIC_L2 ? VS_METRIC_L2SQ : metric;
}

/* The operator's value of a distance in rank units (NaN stays NaN). */
static inline double
vs_rank_value(vs_metric metric, float distance)
{
	return metric == VS_METRIC_L2 ? sqrt((double) distance) : (double) distance;
}

/* The largest rank-unit distance whose operator value is <= radius (-inf: none). */
extern float vs_rank_radius(vs_metric metric, double radius);

/* The SQL operator of a metric on two vectors of dim elements. */
extern double vs_operator_distance(vs_metric metric, const float *a, const float *b, int dim);

/* The same for two sparse vectors (nnz non-zero values at strictly increasing 0-based indices, one
 * dimension): the very value vs_operator_distance gives for their dense forms. */
extern double vs_operator_distance_sparse(vs_metric metric, const int32 *a_idx, const float *a_val,
										  int a_nnz, const int32 *b_idx, const float *b_val,
										  int b_nnz);

/*
 * Range queries in SQL (range.c): a `sphere` is the composite (center vector, radius float8)
 * built by sphere(vector, float8); `col <<->> sphere` and its siblings are true iff the metric's
 * operator distance between col and center is <= radius.
 */
struct Vector;

/* Center and radius of a sphere datum; false if either is NULL (then nothing matches). */
extern bool vs_sphere_get(Datum sphere, struct Vector **center, double *radius);
/* ERROR 22023 unless radius is a valid radius for the metric (finite; >= 0 except for IP). */
extern void vs_check_radius(vs_metric metric, double radius);
/* The SQL operator of a metric ("<->", ...) and the metric's name ("L2", ...), for messages. */
extern const char *vs_metric_operator(vs_metric metric);
extern const char *vs_metric_name(vs_metric metric);

/*
 * Planner hook: the cost of one distance computed by a search on this index, as a multiple of
 * cpu_operator_cost (the in-backend CPU engine is 1.0).  NULL means 1.0.  The GPU worker installs
 * one that returns less when it serves the index's database.
 */
typedef double (*vs_search_cost_hook_type) (Oid indexrelid);
extern PGDLLIMPORT vs_search_cost_hook_type vs_search_cost_hook;
extern double vs_search_distance_cost(Oid indexrelid);

/*
 * Threads of the in-backend CPU engine (default 1: one process per query, as PostgreSQL plans
 * it; engine threads would also receive signals meant for the backend).  Read when the backend's
 * engine context is created.
 */
extern PGDLLIMPORT int vs_search_cpu_threads;

/*
 * Most memory (MB) a backend keeps in cached engine objects between in-backend searches (default
 * 1024); a larger index is read again for every search.  Each backend that searches on the CPU has
 * its own cache, so this is per backend.
 */
extern PGDLLIMPORT int vs_search_cache_mb;

/* Installs the planner hook that drops unread ORDER BY distances (orderby.c); from _PG_init. */
extern void vs_orderby_init(void);

#endif							/* VSEARCH_SEARCH_H */
