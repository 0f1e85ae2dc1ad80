/*
 * The search layer (search.h): index references, reading an index's pages without a relcache entry,
 * and kNN / range searches, sent to the GPU worker first (worker.h) and otherwise run here, in the
 * backend, on the engine's CPU backend, on the index kind's engine object (indexkind.h).
 *
 * In-backend execution
 *   - One engine context per backend (CPU backend, vsearch.cpu_threads threads, created on first
 *     use and kept for the backend's life, with the backend's object cache in it).  Its cancel
 *     callback reports a pending query cancel or termination; the engine stops, and
 *     CHECK_FOR_INTERRUPTS() raises the error.
 *   - A kind with its own in-backend searches (backend_knn / backend_range: vs_flat and vs_ivfpq,
 *     which read their pages in shared buffers in place) is searched through them; the others
 *     through a small cache of engine objects (objcache.h: four, together at most
 *     vs_search_cache_mb), one per index, keyed by relfilenode locator and kind and labelled with
 *     the metapage generation they reflect: a search whose reference is not newer uses it; a newer
 *     one first has the kind bring it up to date.  A relcache invalidation of the index (DROP,
 *     REINDEX, TRUNCATE, VACUUM's statistics update) drops it.
 *   - Engine memory is malloc'd: an object being built is destroyed if reading the index fails,
 *     range results go straight into palloc'd memory through the engine's allocator callback and
 *     are handed to the caller's consumer in chunks (search.h, VsRangeChunk), then freed.
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "indexkind.h"
#include "objcache.h"
#include "search.h"
#include "vsearch/distance.h"
#include "vsearch/engine.h"
#include "worker.h"

vs_search_cost_hook_type vs_search_cost_hook = NULL;
int			vs_search_cpu_threads = 0;	/* vsearch.cpu_threads: 0 = every CPU */
int			vs_search_cache_mb = 1024;

double
vs_search_distance_cost(Oid indexrelid)
{
	if (vs_search_cost_hook != NULL)
		return vs_search_cost_hook(indexrelid);
	return 1.0;
}

int
vs_cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* ---------------------------------------------------------------------------------------------
 * Index references and reading pages
 */

void
vs_index_ref(Relation index, VsIndexRef *ref)
{
	const VsIndexKind *kind = vs_kind_of_index(index);

	if (kind == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a vsearch index", RelationGetRelationName(index))));
	kind->read_ref(index, ref);
}

void
vs_ref_init(Relation index, uint32 kind, VsIndexRef *ref)
{
	memset(ref, 0, sizeof(VsIndexRef));
	ref->dbid = MyDatabaseId;
	ref->indexrelid = RelationGetRelid(index);
	ref->locator = VsRelationGetLocator(index);
	ref->relpersistence = index->rd_rel->relpersistence;
	ref->kind = kind;
}

/*
 * Temporary indexes live in this backend's local buffers, which only the relcache path reaches;
 * every other index is read by its locator.
 */
Buffer
vs_index_read_block(const VsIndexRef *ref, Relation rel, BlockNumber blkno,
					BufferAccessStrategy bas)
{
	if (rel != NULL)
		return ReadBufferExtended(rel, MAIN_FORKNUM, blkno, RBM_NORMAL, bas);
	return ReadBufferWithoutRelcache(ref->locator, MAIN_FORKNUM, blkno, RBM_NORMAL, bas,
									 ref->relpersistence == RELPERSISTENCE_PERMANENT);
}

Relation
vs_index_open_for_read(const VsIndexRef *ref)
{
	if (ref->relpersistence != RELPERSISTENCE_TEMP)
		return NULL;
	if (ref->dbid != MyDatabaseId || !IsTransactionState())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("temporary index %u can only be read by its own session",
						ref->indexrelid)));
	return relation_open(ref->indexrelid, NoLock);	/* the caller holds a lock */
}

void
vs_index_close_for_read(Relation rel)
{
	if (rel != NULL)
		relation_close(rel, NoLock);
}

/* ---------------------------------------------------------------------------------------------
 * The backend's engine contexts and object cache
 */

#define VS_BACKEND_CACHE_ENTRIES 4

static vs_context *engine_ctx = NULL;
static VsObjectCache backend_cache;

static void
relcache_callback(Datum arg, Oid relid)
{
	vs_objcache_drop_index(&backend_cache, relid);
}

/*
 * Polled by the engine on the calling thread: stop when CHECK_FOR_INTERRUPTS() would raise a query
 * cancel (statement_timeout included) or terminate the backend.
 */
static int
engine_cancel(void *arg)
{
	return InterruptPending && (QueryCancelPending || ProcDiePending) &&
		INTERRUPTS_CAN_BE_PROCESSED();
}

/* A CPU engine context of this backend (never CUDA in a backend: the GPU belongs to the worker). */
static vs_context *
create_cpu_engine(int threads)
{
	vs_context_options options;
	vs_context *ctx = NULL;
	char		err[256] = "";
	vs_status	st;

	vs_context_options_init(&options);
	options.backend = VS_BACKEND_CPU;
	options.num_threads = threads;
	options.cancel = engine_cancel;
	options.cancel_arg = NULL;
	st = vs_context_create(&options, &ctx, err, sizeof(err));
	if (st != VS_OK || ctx == NULL)
		ereport(ERROR,
				(errcode(st == VS_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
				 errmsg("could not start the vsearch CPU engine: %s", err)));
	return ctx;
}

struct vs_context *
vs_backend_engine(void)
{
	if (engine_ctx == NULL)
	{
		engine_ctx = create_cpu_engine(Max(vs_search_cpu_threads, 0));	/* 0: every CPU */
		vs_objcache_init(&backend_cache, TopMemoryContext, VS_BACKEND_CACHE_ENTRIES, false);
		backend_cache.engine = engine_ctx;
		CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
	}
	return engine_ctx;
}

/*
 * The engine of a CREATE INDEX in this backend: max_parallel_maintenance_workers + 1 CPU threads
 * (PostgreSQL's parallelism setting for index builds), apart from the search context so that a
 * build never drops the search caches.  The CPU engine's results do not depend on its thread
 * count, so the index is the same.
 */
static vs_context *build_ctx = NULL;
static int	build_ctx_threads = 0;

struct vs_context *
vs_build_engine(void)
{
	int			threads = Max(max_parallel_maintenance_workers, 0) + 1;

	if (build_ctx != NULL && build_ctx_threads != threads)
	{
		vs_context_destroy(build_ctx);
		build_ctx = NULL;
	}
	if (build_ctx == NULL)
	{
		build_ctx = create_cpu_engine(threads);
		build_ctx_threads = threads;
	}
	return build_ctx;
}

void
vs_engine_error(const vs_context *ctx, int status)
{
	int			code;

	switch ((vs_status) status)
	{
		case VS_OUT_OF_MEMORY:
			code = ERRCODE_OUT_OF_MEMORY;
			break;
		case VS_INVALID_ARGUMENT:
			code = ERRCODE_INVALID_PARAMETER_VALUE;
			break;
		case VS_UNSUPPORTED:
			code = ERRCODE_FEATURE_NOT_SUPPORTED;
			break;
		case VS_CANCELLED:
			code = ERRCODE_QUERY_CANCELED;
			break;
		default:
			code = ERRCODE_INTERNAL_ERROR;
			break;
	}
	ereport(ERROR,
			(errcode(code),
			 errmsg("vsearch engine: %s",
					ctx ? vs_last_error(ctx) : vs_status_name((vs_status) status)),
			 errdetail("The engine returned %s.", vs_status_name((vs_status) status))));
}

/*
 * After VS_CANCELLED: raise the pending cancel or termination.  Returns if there was none to
 * raise after all, and the caller retries (the callback then reports nothing until the next
 * signal).
 */
void
vs_engine_cancelled(int *retries)
{
	CHECK_FOR_INTERRUPTS();
	if (++(*retries) > 100)
		vs_engine_error(NULL, VS_CANCELLED);
}

void *
vs_search_object(const VsIndexRef *ref)
{
	(void) vs_backend_engine();
	return vs_objcache_get(&backend_cache, ref, NULL)->obj;
}

void
vs_search_trim_cache(void)
{
	vs_objcache_trim(&backend_cache, (Size) Max(vs_search_cache_mb, 0) * 1024 * 1024);
}

/* ---------------------------------------------------------------------------------------------
 * Searches
 */

static const VsKindParams no_params;

/* A vector index that never held a vector has no dimension: its searches find nothing. */
static bool
never_held_a_vector(const VsIndexRef *ref, const VsQueries *queries)
{
	return queries->vectors != NULL && ref->dim == 0;
}

void
vs_search_knn(const VsIndexRef *ref, const VsKindParams *params, const float *queries, int nq,
			  int k, int64 *ids, float *distances, int64 *counts)
{
	VsQueries	qs = vs_vector_queries(queries, Max(nq, 0));

	vs_search_knn_queries(ref, params, &qs, k, ids, distances, counts);
}

void
vs_search_knn_queries(const VsIndexRef *ref, const VsKindParams *params,
					  const VsQueries *queries, int k, int64 *ids, float *distances, int64 *counts)
{
	vs_search_knn_overlapped(ref, params, queries, k, ids, distances, counts, NULL, NULL);
}

void
vs_search_knn_overlapped(const VsIndexRef *ref, const VsKindParams *params,
						 const VsQueries *queries, int k, int64 *ids, float *distances,
						 int64 *counts, VsKnnProgress progress, void *arg)
{
	const VsIndexKind *kind = vs_ref_kind(ref);
	Size		nq = queries->nq;
	int			retries = 0;

	if (nq == 0)
		return;
	if (params == NULL)
		params = &no_params;
	if (k <= 0)
	{
		for (Size q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	if (vs_worker_knn_overlapped(ref, params, queries, k, ids, distances, counts, progress, arg))
		return;

	if (never_held_a_vector(ref, queries))
	{
		for (Size q = 0; q < nq; q++)
			counts[q] = 0;
		for (Size i = 0; i < nq * k; i++)
		{
			ids[i] = -1;
			distances[i] = INFINITY;
		}
		return;
	}
	if (kind->backend_knn != NULL)
	{
		kind->backend_knn(ref, params, queries, k, ids, distances, counts);
		return;
	}

	for (;;)
	{
		void	   *obj = vs_search_object(ref);
		int			st;

		st = kind->knn(engine_ctx, obj, params, queries, k, ids, distances, counts);
		if (st == VS_OK)
		{
			vs_search_trim_cache();
			return;
		}
		if (st != VS_CANCELLED)
			vs_engine_error(engine_ctx, st);
		vs_engine_cancelled(&retries);
	}
}

/* An engine call's range result goes into palloc'd memory, freed once it is delivered. */
static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

static void
range_result_free(VsRangeResult *res)
{
	if (res->offsets)
		pfree(res->offsets);
	if (res->ids)
		pfree(res->ids);
	if (res->distances)
		pfree(res->distances);
}

/* One engine call of a range search in this backend, its answer whole in out. */
static void
backend_range_call(const VsIndexRef *ref, const VsIndexKind *kind, const VsKindParams *params,
				   const VsQueries *queries, double radius, VsRangeResult *out)
{
	int			retries = 0;

	memset(out, 0, sizeof(*out));
	if (kind->backend_range != NULL)
	{
		kind->backend_range(ref, params, queries, radius, out);
		return;
	}
	for (;;)
	{
		void	   *obj = vs_search_object(ref);
		vs_range_result result;
		int			st;

		memset(&result, 0, sizeof(result));
		st = kind->range(engine_ctx, obj, params, queries, radius, range_alloc, NULL, &result);
		if (st == VS_OK)
		{
			out->nq = (int) queries->nq;
			out->total = (int64) result.total;
			out->offsets = (int64 *) result.offsets;
			out->ids = (int64 *) result.ids;
			out->distances = result.distances;
			return;
		}
		if (st == VS_OUT_OF_MEMORY)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("vsearch engine: %s", vs_last_error(engine_ctx))));
		if (st != VS_CANCELLED)
			vs_engine_error(engine_ctx, st);
		vs_engine_cancelled(&retries);
	}
}

/*
 * Without the worker an engine call's answer is held whole until it is handed on (the CPU engine
 * sorts each query's matches by id at the end of its pass), so the queries go in groups: the
 * first alone, each next one as many as the matches per query seen so far put within
 * VS_RANGE_GROUP_CHUNKS chunks.  A group is one more pass over the index for the kinds that scan
 * their pages (vs_flat, vs_ivfpq's probed lists).
 */
#define VS_RANGE_GROUP_CHUNKS 8

void
vs_search_range_queries(const VsIndexRef *ref, const VsKindParams *params,
						const VsQueries *queries, double radius, VsRangeConsumer consume,
						void *arg)
{
	const VsIndexKind *kind = vs_ref_kind(ref);
	int			nq = (int) queries->nq;
	int			q = 0;			/* queries answered */
	int			group = 1;
	int64		budget = vs_range_chunk_matches() * VS_RANGE_GROUP_CHUNKS;
	int64		matches = 0;
	int			searched = 0;

	if (params == NULL)
		params = &no_params;
	if (isnan(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("range search radius is NaN")));
	if (nq <= 0 || never_held_a_vector(ref, queries))
		return;
	/* the worker answers all, or the first q queries before it failed between two of them */
	if (vs_worker_range(ref, params, queries, radius, consume, arg, &q))
		return;

	while (q < nq)
	{
		int			n = Min(group, nq - q);
		VsQueries	part = vs_queries_slice(queries, ref->dim, q, n);
		VsRangeResult out;

		backend_range_call(ref, kind, params, &part, radius, &out);
		vs_range_deliver(&out, q, consume, arg);
		matches += out.total;
		range_result_free(&out);
		q += n;
		searched += n;
		group = (int) Min((int64) nq, Max(budget / Max(matches / searched, 1), 1));
	}
	vs_search_trim_cache();
}

void
vs_search_range_candidates(const VsIndexRef *ref, const VsQueries *queries, double radius,
						   VsRangeConsumer consume, void *arg)
{
	vs_search_range_queries(ref, NULL, queries, radius, consume, arg);
}

/* ---------------------------------------------------------------------------------------------
 * Distances (search.h)
 */

double
vs_operator_distance(vs_metric metric, const float *a, const float *b, int dim)
{
	return vs_rank_value(metric,
						 (float) vs_exact_distance_f32(vs_rank_metric(metric), a, b, dim));
}

double
vs_operator_distance_sparse(vs_metric metric, const int32 *a_idx, const float *a_val, int a_nnz,
							const int32 *b_idx, const float *b_val, int b_nnz)
{
	StaticAssertStmt(sizeof(int32) == sizeof(int), "the engine takes int indices");
	return vs_rank_value(metric,
						 (float) vs_exact_distance_sparse_f32(vs_rank_metric(metric),
															  (const int *) a_idx, a_val, a_nnz,
															  (const int *) b_idx, b_val, b_nnz));
}

float
vs_rank_radius(vs_metric metric, double radius)
{
	float		f;

	if (isnan(radius))
		return -INFINITY;
	if (metric != VS_METRIC_L2)
	{
		/* the largest float <= radius: rank values are floats, so `d <= radius` is unchanged */
		if (radius >= (double) FLT_MAX)
			return isinf(radius) ? INFINITY : FLT_MAX;
		if (radius < -(double) FLT_MAX)
			return -INFINITY;
		f = (float) radius;
		if ((double) f > radius)
			f = nextafterf(f, -INFINITY);
		return f;
	}
	if (radius < 0.0)
		return -INFINITY;
	if (radius * radius >= (double) FLT_MAX)
		return isinf(radius) ? INFINITY : FLT_MAX;
	/* the largest float s with sqrt(s) <= radius: start at the float nearest radius^2 */
	f = (float) (radius * radius);
	while (f > 0.0f && sqrt((double) f) > radius)
		f = nextafterf(f, -INFINITY);
	while (sqrt((double) nextafterf(f, INFINITY)) <= radius)
		f = nextafterf(f, INFINITY);
	return f;
}
