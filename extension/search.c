/*
 * The search layer (search.h): index references, reading an index's pages without a relcache entry,
 * and kNN / range searches, sent to the GPU worker first (worker.h) and otherwise run here, in the
 * backend, on the engine's CPU backend, on the index kind's engine object (indexkind.h).
 *
 * In-backend execution
 *   - One engine context per backend (CPU backend, vs_search_cpu_threads threads, created on first
 *     use and kept for the backend's life, with the backend's object cache in it).  Its cancel
 *     callback reports a pending query cancel or termination; the engine stops, and
 *     CHECK_FOR_INTERRUPTS() raises the error.
 *   - A small cache of engine objects (objcache.h: four, together at most vs_search_cache_mb), one
 *     per index, keyed by relfilenode locator and kind and labelled with the metapage generation
 *     they reflect: a search whose reference is not newer uses it; a newer one first has the kind
 *     bring it up to date.  A relcache invalidation of the index (DROP, REINDEX, TRUNCATE,
 *     VACUUM's statistics update) drops it.
 *   - Engine memory is malloc'd: an object being built is destroyed if reading the index fails,
 *     range results go straight into palloc'd memory through the engine's allocator callback.
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/float.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "indexkind.h"
#include "objcache.h"
#include "search.h"
#include "vsearch/engine.h"
#include "worker.h"

vs_search_cost_hook_type vs_search_cost_hook = NULL;
int			vs_search_cpu_threads = 1;
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

int64
vs_sort_ids(int64 *ids, int64 n)
{
	int64		m = 0;

	if (n > 1)
		qsort(ids, n, sizeof(int64), vs_cmp_int64);
	for (int64 i = 0; i < n; i++)
		if (m == 0 || ids[m - 1] != ids[i])
			ids[m++] = ids[i];
	return m;
}

int64
vs_intersect_ids(int64 *a, int64 na, const int64 *b, int64 nb)
{
	int64		i = 0,
				j = 0,
				m = 0;

	while (i < na && j < nb)
	{
		if (a[i] < b[j])
			i++;
		else if (a[i] > b[j])
			j++;
		else
		{
			a[m++] = a[i];
			i++;
			j++;
		}
	}
	return m;
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
		engine_ctx = create_cpu_engine(Max(vs_search_cpu_threads, 1));
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
vs_engine_error(int status)
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
			 errmsg("vsearch engine: %s", vs_last_error(engine_ctx)),
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
		vs_engine_error(VS_CANCELLED);
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

void
vs_search_knn(const VsIndexRef *ref, const VsKindParams *params, const float *queries, int nq,
			  int k, int64 *ids, float *distances, int64 *counts)
{
	const VsIndexKind *kind = vs_ref_kind(ref);
	int			retries = 0;

	if (nq <= 0)
		return;
	if (params == NULL)
		params = &no_params;
	if (k <= 0)
	{
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	if (vs_worker_knn(ref, params, queries, nq, k, ids, distances, counts))
		return;

	if (ref->dim == 0)
	{
		/* an index that never held a vector */
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		for (size_t i = 0; i < (size_t) nq * k; i++)
		{
			ids[i] = -1;
			distances[i] = INFINITY;
		}
		return;
	}

	for (;;)
	{
		void	   *obj = vs_search_object(ref);
		int			st;

		st = kind->knn(engine_ctx, obj, params, queries, nq, k, ids, distances, counts);
		if (st == VS_OK)
		{
			vs_search_trim_cache();
			return;
		}
		if (st != VS_CANCELLED)
			vs_engine_error(st);
		vs_engine_cancelled(&retries);
	}
}

/* Range results go into the caller's memory context. */
static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

void
vs_search_range(const VsIndexRef *ref, const VsKindParams *params, const float *queries, int nq,
				double radius, VsRangeResult *out)
{
	const VsIndexKind *kind = vs_ref_kind(ref);
	int			retries = 0;

	memset(out, 0, sizeof(VsRangeResult));
	if (params == NULL)
		params = &no_params;
	if (isnan(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("range search radius is NaN")));
	if (nq > 0 && vs_worker_range(ref, params, queries, nq, radius, out))
		return;

	if (nq <= 0 || ref->dim == 0)
	{
		out->nq = Max(nq, 0);
		out->total = 0;
		out->offsets = palloc0(sizeof(int64) * (out->nq + 1));
		out->ids = NULL;
		out->distances = NULL;
		return;
	}

	for (;;)
	{
		void	   *obj = vs_search_object(ref);
		vs_range_result result;
		int			st;

		memset(&result, 0, sizeof(result));
		st = kind->range(engine_ctx, obj, params, queries, nq, radius, range_alloc, NULL, &result);
		if (st == VS_OK)
		{
			out->nq = nq;
			out->total = (int64) result.total;
			out->offsets = (int64 *) result.offsets;
			out->ids = (int64 *) result.ids;
			out->distances = result.distances;
			vs_search_trim_cache();
			return;
		}
		if (st == VS_OUT_OF_MEMORY)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("vsearch engine: %s", vs_last_error(engine_ctx))));
		if (st != VS_CANCELLED)
			vs_engine_error(st);
		vs_engine_cancelled(&retries);
	}
}

/* ---------------------------------------------------------------------------------------------
 * Bounds between the SQL operators' float distances and the engine's (search.h)
 *
 * The operators compute a float sum of dim terms (SIMD lanes, any order, FMA or not); the engine
 * computes the same sum in double and rounds the metric's value to float once.  For a float sum
 * of n terms |fl - exact| <= gamma_n * sum|terms| + (gradual underflow) n * 2^-149 with
 * gamma_n ~ n * 2^-24; we use twice that, with a few extra units for the products and
 * subtractions that form the terms:
 *   L2, L1: terms are non-negative, so the error is relative to the sum itself;
 *   IP: relative to sum |x_i q_i| <= |x| |q| (Cauchy-Schwarz), |x| <= the index's max_norm;
 *   cosine: dot, |x|^2, |q|^2 each off by about rel, so 1 - cos is off by ~2.5 (rel_dot +
 *   rel_norm); underflow is relative to the index's min_norm and the query's norm.
 */

#define VS_U		(1.0 / 16777216.0)	/* 2^-24, float unit roundoff */
#define VS_TINY		1.401298464324817e-45	/* 2^-149, the smallest float */

void
vs_distance_slack_init(VsDistanceSlack *slack, const VsIndexRef *ref, const float *query)
{
	double		n = (double) Max(ref->dim, 1);
	double		g = 2.0 * (n + 4.0) * VS_U;
	double		under = 2.0 * (n + 4.0) * VS_TINY;
	double		qnorm = vs_vector_norm(query, ref->dim);

	memset(slack, 0, sizeof(VsDistanceSlack));
	slack->metric = ref->metric;
	switch (ref->metric)
	{
		case VS_METRIC_L2SQ:
		case VS_METRIC_L2:
		case VS_METRIC_L1:
			slack->rel = g;
			slack->abs = under;
			break;
		case VS_METRIC_IP:
			slack->tail = g * qnorm * (ref->max_norm * (1.0 + 1e-9)) + under;
			break;
		case VS_METRIC_COSINE:
			if (qnorm == 0.0 || ref->min_norm <= 0.0)
				slack->tail = INFINITY;
			else
			{
				double		smallest = Min(qnorm, ref->min_norm);
				double		rho = g + under / (smallest * smallest);
				double		sigma = g + under / (qnorm * ref->min_norm);

				if (rho >= 0.1 || sigma >= 0.1)
					slack->tail = INFINITY;
				else
					slack->tail = 2.5 * (rho + sigma) + 8.0 * VS_U;
			}
			break;
	}
}

double
vs_distance_lower(const VsDistanceSlack *slack, float distance)
{
	double		x;

	if (isnan(distance))
		return get_float8_nan();
	/* a sum the engine rounded to +inf may be a float sum just below FLT_MAX */
	x = (isinf(distance) && distance > 0) ? (double) FLT_MAX : (double) distance;

	switch (slack->metric)
	{
		case VS_METRIC_L2:
			{
				/* the engine's sum >= x^2 / (1 + u)^2; the operator's float sum is off by rel */
				double		sum = x * x * (1.0 - 4.0 * VS_U) * (1.0 - slack->rel) - slack->abs;

				return sum > 0.0 ? sqrt(sum) * (1.0 - 4.0 * DBL_EPSILON) : 0.0;
			}
		case VS_METRIC_L2SQ:
		case VS_METRIC_L1:
			{
				double		v = x * (1.0 - 2.0 * VS_U) * (1.0 - slack->rel) - slack->abs;

				return v > 0.0 ? v : 0.0;
			}
		case VS_METRIC_IP:
			return x - 2.0 * VS_U * fabs(x) - slack->tail;
		case VS_METRIC_COSINE:
			return x - slack->tail;
	}
	return -INFINITY;
}

double
vs_radius_upper(const VsDistanceSlack *slack, double radius)
{
	switch (slack->metric)
	{
		case VS_METRIC_L2:
			{
				double		sum;

				if (radius < 0.0)
					return radius;
				sum = (radius * radius * (1.0 + 4.0 * DBL_EPSILON) + slack->abs) / (1.0 - slack->rel);
				return sqrt(sum) * (1.0 + 4.0 * VS_U);
			}
		case VS_METRIC_L2SQ:
		case VS_METRIC_L1:
			if (radius < 0.0)
				return radius;
			return (radius + slack->abs) / (1.0 - slack->rel) * (1.0 + 4.0 * VS_U);
		case VS_METRIC_IP:
			{
				double		t = radius + slack->tail;

				return t + 4.0 * VS_U * fabs(t);
			}
		case VS_METRIC_COSINE:
			return radius + slack->tail;
	}
	return INFINITY;
}

/* L2 norm in double (vectors are finite, so no overflow). */
double
vs_vector_norm(const float *x, int dim)
{
	double		sum = 0.0;

	for (int i = 0; i < dim; i++)
		sum += (double) x[i] * (double) x[i];
	return sqrt(sum);
}
