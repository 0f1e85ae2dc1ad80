/*
 * The search layer (search.h): index references, reading an index's vectors without a relcache
 * entry, and kNN / range searches, sent to the GPU worker first (worker.h) and otherwise run here,
 * in the backend, on the engine's CPU backend.
 *
 * In-backend execution
 *   - One engine context per backend (CPU backend, vs_search_cpu_threads threads, created on first
 *     use and kept for the backend's life).  Its cancel callback reports a pending query cancel or
 *     termination; the engine stops, and CHECK_FOR_INTERRUPTS() raises the error.
 *   - A small cache of engine datasets (two, together at most vs_search_cache_mb), one per index,
 *     keyed by (database, index, relfilenode, dimension) and labelled with the metapage generation
 *     they were read at: a search whose reference is not newer uses it; a newer one first reads
 *     the rows appended since (or everything again after VACUUM moved items or a rebuild).  A
 *     relcache invalidation of the index (DROP, REINDEX, TRUNCATE, VACUUM's statistics update)
 *     drops it.
 *   - Engine memory is malloc'd: a dataset being built is destroyed if reading the index fails,
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

#include "flat.h"
#include "ivfpq.h"
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
 * Index references and reading vectors
 */

void
vs_index_ref(Relation index, VsIndexRef *ref)
{
	VsFlatMetaPageData meta;

	if (vs_is_ivfpq_index(index))
	{
		VsIvfpqMetaPageData imeta;

		vs_ivfpq_ref(index, ref, &imeta);
		return;
	}
	if (!vs_is_flat_index(index))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a vsearch index", RelationGetRelationName(index))));
	vs_flat_read_meta(index, &meta);

	memset(ref, 0, sizeof(VsIndexRef));
	ref->dbid = MyDatabaseId;
	ref->indexrelid = RelationGetRelid(index);
	ref->locator = VsRelationGetLocator(index);
	ref->relpersistence = index->rd_rel->relpersistence;
	ref->kind = VS_INDEX_FLAT;
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	ref->max_norm = meta.max_norm;
	ref->min_norm = meta.min_norm;
}

/*
 * Temporary indexes live in this backend's local buffers, which only the relcache path reaches;
 * every other index is read by its locator.
 */
Buffer
vs_index_read_block(const VsIndexRef *ref, Relation rel, BlockNumber blkno, BufferAccessStrategy bas)
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

/* Chunks handed to the consumer: about this many bytes of vectors (at least one page). */
#define VS_READ_CHUNK_BYTES (4 * 1024 * 1024)

/*
 * Where a read of a vs_flat index stopped: the metapage state it started from and the last item it
 * read.  Until the metapage's `epoch` changes, everything after that item is new.
 */
typedef struct FlatMark
{
	uint64		generation;		/* metapage generation before the pages were read */
	uint64		epoch;
	BlockNumber block;			/* last data page read (VS_FLAT_METAPAGE_BLKNO: none) */
	int			nitems;			/* items read on it */
} FlatMark;

/*
 * Reads a vs_flat index through the buffer manager: all of it (from == NULL), or only the items
 * after `from` (false, having read nothing, if VACUUM moved items or the index was rebuilt
 * since).  Sets *to.
 */
static bool
read_flat_items(const VsIndexRef *ref, const FlatMark *from, FlatMark *to,
				VsVectorConsumer consume, void *arg)
{
	Relation	rel = NULL;
	BufferAccessStrategy bas;
	Buffer		buf;
	VsFlatMetaPageData meta;
	uint32		dim;
	int			per_page;
	size_t		chunk_rows;
	size_t		n = 0;
	float	   *vectors = NULL;
	int64	   *ids = NULL;
	BlockNumber first;
	bool		ok = true;

	rel = vs_index_open_for_read(ref);
	bas = GetAccessStrategy(BAS_BULKREAD);

	buf = vs_index_read_block(ref, rel, VS_FLAT_METAPAGE_BLKNO, bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_flat_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);

	dim = meta.dim;
	if (ref->dim != 0 && dim != 0 && dim != ref->dim)
		elog(ERROR, "vs_flat index %u changed dimension from %u to %u",
			 ref->indexrelid, ref->dim, dim);
	to->generation = meta.generation;
	to->epoch = meta.epoch;
	to->block = from ? from->block : VS_FLAT_METAPAGE_BLKNO;
	to->nitems = from ? from->nitems : 0;
	if (from != NULL &&
		(meta.epoch != from->epoch ||
		 (from->block != VS_FLAT_METAPAGE_BLKNO && meta.last_block < from->block)))
	{
		ok = false;				/* items moved (VACUUM) or the index was rebuilt */
		goto done;
	}
	if (dim == 0 || meta.last_block == VS_FLAT_METAPAGE_BLKNO)
		goto done;

	per_page = VsFlatItemsPerPage(dim);
	chunk_rows = Max((size_t) per_page, VS_READ_CHUNK_BYTES / (sizeof(float) * dim));
	vectors = palloc(sizeof(float) * dim * chunk_rows);
	ids = palloc(sizeof(int64) * chunk_rows);

	first = (from && from->block != VS_FLAT_METAPAGE_BLKNO) ? from->block : VS_FLAT_FIRST_DATA_BLKNO;
	for (BlockNumber blkno = first; blkno <= meta.last_block; blkno++)
	{
		Page		page;
		int			skip = 0;

		CHECK_FOR_INTERRUPTS();
		if (n + per_page > chunk_rows)
		{
			consume(arg, vectors, ids, n);
			n = 0;
		}
		if (from && blkno == from->block)
			skip = from->nitems;	/* read before */
		buf = vs_index_read_block(ref, rel, blkno, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (VsFlatIsDataPage(page))
		{
			int			nitems = Min(VsFlatPageGetOpaque(page)->nitems, per_page);

			for (int i = skip; i < nitems; i++)
			{
				VsFlatItem *item = VsFlatPageGetItem(page, dim, i);

				ids[n] = vs_tid_to_id(&item->heap_tid);
				memcpy(vectors + (size_t) n * dim, item->x, sizeof(float) * dim);
				n++;
			}
			to->block = blkno;
			to->nitems = Max(nitems, skip);
		}
		UnlockReleaseBuffer(buf);
	}
	if (n > 0)
		consume(arg, vectors, ids, n);

	/*
	 * A VACUUM that started compacting pages after we read the metapage has moved its epoch
	 * (flatvacuum.c bumps it before changing any page): the rows skipped on from's page may then
	 * have shifted below the skip, so this catch-up cannot be trusted.
	 */
	if (from != NULL)
	{
		uint64		epoch;

		buf = vs_index_read_block(ref, rel, VS_FLAT_METAPAGE_BLKNO, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		epoch = vs_flat_page_meta(BufferGetPage(buf))->epoch;
		UnlockReleaseBuffer(buf);
		if (epoch != meta.epoch)
			ok = false;
	}

done:
	if (vectors)
		pfree(vectors);
	if (ids)
		pfree(ids);
	vs_index_close_for_read(rel);
	FreeAccessStrategy(bas);
	return ok;
}

void
vs_index_read_vectors(const VsIndexRef *ref, VsVectorConsumer consume, void *arg)
{
	FlatMark	mark;

	switch (ref->kind)
	{
		case VS_INDEX_FLAT:
			(void) read_flat_items(ref, NULL, &mark, consume, arg);
			return;
		case VS_INDEX_IVFPQ:
			break;				/* read with vs_ivfpq_read_index (ivfpq.h) */
	}
	elog(ERROR, "unknown vsearch index kind %d", (int) ref->kind);
}

/* ---------------------------------------------------------------------------------------------
 * The backend's engine context and dataset cache
 */

#define VS_DATASET_CACHE_ENTRIES 2

typedef struct CachedDataset
{
	bool		used;
	Oid			dbid;
	Oid			indexrelid;
	VsRelFileLocator locator;
	uint32		dim;
	uint64		generation;		/* metapage generation read before the pages */
	FlatMark	mark;			/* where the read stopped: the next refresh reads what follows */
	uint64		last_use;
	size_t		bytes;			/* engine memory, about */
	vs_dataset *ds;
} CachedDataset;

static vs_context *engine_ctx = NULL;
static int	engine_ctx_threads = 0;
static CachedDataset dataset_cache[VS_DATASET_CACHE_ENTRIES];
static uint64 dataset_clock = 0;
static bool relcache_callback_registered = false;

static void
drop_dataset(CachedDataset *entry)
{
	if (entry->used && entry->ds != NULL)
		vs_dataset_destroy(engine_ctx, entry->ds);
	memset(entry, 0, sizeof(CachedDataset));
}

/* Keeps the cached datasets within vs_search_cache_mb, dropping the least recently used. */
static void
trim_cache(void)
{
	for (;;)
	{
		size_t		total = 0;
		CachedDataset *lru = NULL;

		for (int i = 0; i < VS_DATASET_CACHE_ENTRIES; i++)
		{
			CachedDataset *e = &dataset_cache[i];

			if (!e->used)
				continue;
			total += e->bytes;
			if (lru == NULL || e->last_use < lru->last_use)
				lru = e;
		}
		if (lru == NULL || total <= (size_t) Max(vs_search_cache_mb, 0) * 1024 * 1024)
			return;
		drop_dataset(lru);
	}
}

static void
relcache_callback(Datum arg, Oid relid)
{
	for (int i = 0; i < VS_DATASET_CACHE_ENTRIES; i++)
		if (dataset_cache[i].used &&
			(relid == InvalidOid || dataset_cache[i].indexrelid == relid))
			drop_dataset(&dataset_cache[i]);
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

static vs_context *
get_engine(void)
{
	int			threads = Max(vs_search_cpu_threads, 1);

	if (engine_ctx != NULL && engine_ctx_threads != threads)
	{
		vs_ivfpq_cache_reset();	/* its objects live in this context */
		for (int i = 0; i < VS_DATASET_CACHE_ENTRIES; i++)
			drop_dataset(&dataset_cache[i]);
		vs_context_destroy(engine_ctx);
		engine_ctx = NULL;
	}
	if (engine_ctx == NULL)
	{
		engine_ctx = create_cpu_engine(threads);
		engine_ctx_threads = threads;
	}
	if (!relcache_callback_registered)
	{
		CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
		relcache_callback_registered = true;
	}
	return engine_ctx;
}

static void engine_cancelled(int *retries);
static void engine_error(vs_status st) pg_attribute_noreturn();

struct vs_context *
vs_backend_engine(void)
{
	return get_engine();
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
	engine_error((vs_status) status);
}

void
vs_engine_cancelled(int *retries)
{
	engine_cancelled(retries);
}

static void pg_attribute_noreturn()
engine_error(vs_status st)
{
	int			code;

	switch (st)
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
			 errdetail("The engine returned %s.", vs_status_name(st))));
}

/*
 * After VS_CANCELLED: raise the pending cancel or termination.  Returns if there was none to
 * raise after all, and the caller retries (the callback then reports nothing until the next
 * signal).
 */
static void
engine_cancelled(int *retries)
{
	CHECK_FOR_INTERRUPTS();
	if (++(*retries) > 100)
		engine_error(VS_CANCELLED);
}

/*
 * Rows on their way into a dataset.  They are staged in a buffer sized for the whole index (the
 * metapage's row count) and added in one vs_dataset_add call: each call may copy the dataset
 * (the CPU backend grows its arrays to the exact new size), so many small calls would cost
 * O(n^2).  When more rows arrive than expected, batches grow geometrically.
 */
typedef struct DatasetBuild
{
	vs_context *ctx;
	vs_dataset *ds;
	uint32		dim;
	float	   *vectors;
	int64	   *ids;
	size_t		n;
	size_t		cap;
	size_t		added;			/* rows already in ds */
} DatasetBuild;

typedef struct StagedRow
{
	int64		id;
	size_t		pos;
} StagedRow;

static int
cmp_staged(const void *a, const void *b)
{
	const StagedRow *x = (const StagedRow *) a;
	const StagedRow *y = (const StagedRow *) b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->pos < y->pos ? -1 : (x->pos > y->pos ? 1 : 0);
}

static int
cmp_staged_pos(const void *a, const void *b)
{
	size_t		x = ((const StagedRow *) a)->pos;
	size_t		y = ((const StagedRow *) b)->pos;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Keeps the last staged copy of every id.  An id is read twice when VACUUM removed a dead entry
 * from a page read earlier, the heap reused its tid and an insert appended the new row to a later
 * page: the later copy is the live one.
 */
static void
dedupe_stage(DatasetBuild *b)
{
	StagedRow  *rows = palloc_extended(sizeof(StagedRow) * b->n, MCXT_ALLOC_HUGE);
	size_t		m = 0;

	for (size_t i = 0; i < b->n; i++)
	{
		rows[i].id = b->ids[i];
		rows[i].pos = i;
	}
	qsort(rows, b->n, sizeof(StagedRow), cmp_staged);
	for (size_t i = 0; i < b->n; i++)
	{
		if (i + 1 < b->n && rows[i + 1].id == rows[i].id)
			continue;			/* a later copy follows */
		rows[m++] = rows[i];
	}
	/* compact in position order (positions only shrink, so in place is safe) */
	qsort(rows, m, sizeof(StagedRow), cmp_staged_pos);
	for (size_t i = 0; i < m; i++)
	{
		if (rows[i].pos != i)
			memcpy(b->vectors + i * b->dim, b->vectors + rows[i].pos * b->dim,
				   sizeof(float) * b->dim);
		b->ids[i] = rows[i].id;
	}
	b->n = m;
	pfree(rows);
}

static void
flush_stage(DatasetBuild *b)
{
	vs_status	st;

	if (b->n == 0)
		return;
	st = vs_dataset_add(b->ctx, b->ds, b->vectors, (const int64_t *) b->ids, b->n);
	if (st == VS_INVALID_ARGUMENT)
	{
		/* an id twice in the batch, or already in the dataset: keep the latest copy */
		dedupe_stage(b);
		st = vs_dataset_remove(b->ctx, b->ds, (const int64_t *) b->ids, b->n, NULL);
		if (st == VS_OK)
			st = vs_dataset_add(b->ctx, b->ds, b->vectors, (const int64_t *) b->ids, b->n);
	}
	if (st != VS_OK)
		engine_error(st);
	b->added += b->n;
	b->n = 0;
}

static void
stage_rows(void *arg, const float *vectors, const int64 *ids, size_t n)
{
	DatasetBuild *b = (DatasetBuild *) arg;

	/* full: hand the batch over if it is at least as large as what the dataset holds */
	if (b->n + n > b->cap && b->n > 0 && b->n >= b->added)
		flush_stage(b);
	if (b->n + n > b->cap)
	{
		size_t		cap = Max(Max(b->cap * 2, b->n + n), b->added);

		if (b->vectors == NULL)
		{
			b->vectors = palloc_extended(sizeof(float) * b->dim * cap, MCXT_ALLOC_HUGE);
			b->ids = palloc_extended(sizeof(int64) * cap, MCXT_ALLOC_HUGE);
		}
		else
		{
			b->vectors = repalloc_huge(b->vectors, sizeof(float) * b->dim * cap);
			b->ids = repalloc_huge(b->ids, sizeof(int64) * cap);
		}
		b->cap = cap;
	}
	memcpy(b->vectors + b->n * b->dim, vectors, sizeof(float) * b->dim * n);
	memcpy(b->ids + b->n, ids, sizeof(int64) * n);
	b->n += n;
}

/*
 * Reads index rows into ds: all of them, or those after `from`.  False if `from` is too old (a
 * VACUUM moved items or the index was rebuilt since); ds may then hold part of the new rows.
 */
static bool
load_rows(vs_context *ctx, vs_dataset *ds, const VsIndexRef *ref, const FlatMark *from,
		  FlatMark *to)
{
	DatasetBuild b;
	bool		ok;

	memset(&b, 0, sizeof(b));
	b.ctx = ctx;
	b.ds = ds;
	b.dim = ref->dim;
	b.added = from ? vs_dataset_size(ds) : 0;
	if (from == NULL && ref->ntuples > 0)
	{
		/* room for every row the metapage counted, and a few inserted meanwhile */
		b.cap = (size_t) ref->ntuples + 1024;
		b.vectors = palloc_extended(sizeof(float) * b.dim * b.cap, MCXT_ALLOC_HUGE);
		b.ids = palloc_extended(sizeof(int64) * b.cap, MCXT_ALLOC_HUGE);
	}
	ok = read_flat_items(ref, from, to, stage_rows, &b);
	if (ok)
		flush_stage(&b);
	if (b.vectors)
	{
		pfree(b.vectors);
		pfree(b.ids);
	}
	return ok;
}

/*
 * The cached dataset of the index, at least as new as ref: read now if missing; if older, brought
 * up to date by reading the rows appended since (or all of them again after a VACUUM).
 */
static CachedDataset *
get_dataset(const VsIndexRef *ref)
{
	vs_context *ctx = get_engine();
	CachedDataset *entry = NULL;
	vs_dataset *ds = NULL;
	FlatMark	mark;
	vs_status	st;

	for (int i = 0; i < VS_DATASET_CACHE_ENTRIES; i++)
	{
		CachedDataset *e = &dataset_cache[i];

		if (e->used && e->dbid == ref->dbid && e->indexrelid == ref->indexrelid &&
			memcmp(&e->locator, &ref->locator, sizeof(VsRelFileLocator)) == 0 &&
			e->dim == ref->dim)
		{
			bool		ok = false;

			e->last_use = ++dataset_clock;
			if (e->generation >= ref->generation)
				return e;

			/* catch up with the rows appended since; on any error forget the entry */
			PG_TRY();
			{
				ok = load_rows(ctx, e->ds, ref, &e->mark, &mark);
			}
			PG_CATCH();
			{
				drop_dataset(e);
				PG_RE_THROW();
			}
			PG_END_TRY();
			if (ok)
			{
				e->mark = mark;
				e->generation = Max(mark.generation, ref->generation);
				e->bytes = vs_dataset_size(e->ds) * (sizeof(float) * e->dim + 16);
				return e;
			}
			drop_dataset(e);	/* compacted by VACUUM: read it all again */
			entry = e;
			break;
		}
	}
	if (entry == NULL)
	{
		for (int i = 0; i < VS_DATASET_CACHE_ENTRIES; i++)
		{
			CachedDataset *e = &dataset_cache[i];

			if (!e->used)
			{
				entry = e;
				break;
			}
			if (entry == NULL || e->last_use < entry->last_use)
				entry = e;
		}
		drop_dataset(entry);
	}

	st = vs_dataset_create(ctx, ref->dim, VS_DTYPE_F32, &ds);
	if (st != VS_OK)
		engine_error(st);
	PG_TRY();
	{
		(void) load_rows(ctx, ds, ref, NULL, &mark);
	}
	PG_CATCH();
	{
		vs_dataset_destroy(ctx, ds);
		PG_RE_THROW();
	}
	PG_END_TRY();

	entry->used = true;
	entry->dbid = ref->dbid;
	entry->indexrelid = ref->indexrelid;
	entry->locator = ref->locator;
	entry->dim = ref->dim;
	entry->generation = Max(mark.generation, ref->generation);
	entry->mark = mark;
	entry->last_use = ++dataset_clock;
	entry->ds = ds;
	entry->bytes = vs_dataset_size(ds) * (sizeof(float) * entry->dim + 16);
	return entry;
}

/* ---------------------------------------------------------------------------------------------
 * Searches
 */

void
vs_search_knn(const VsIndexRef *ref, const float *queries, int nq, int k,
			  int64 *ids, float *distances, int64 *counts)
{
	int			retries = 0;

	if (nq <= 0)
		return;
	if (k <= 0)
	{
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	if (vs_worker_knn(ref, queries, nq, k, ids, distances, counts))
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
		CachedDataset *entry = get_dataset(ref);
		vs_status	st;

		st = vs_knn(engine_ctx, entry->ds, queries, nq, k, ref->metric, NULL,
					(int64_t *) ids, distances, (int64_t *) counts);
		if (st == VS_OK)
		{
			trim_cache();
			return;
		}
		if (st != VS_CANCELLED)
			engine_error(st);
		engine_cancelled(&retries);
	}
}

/* Range results go into the caller's memory context. */
static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

/* The largest float <= radius: engine distances are floats, so `d <= radius` is unchanged. */
static float
radius_to_float(double radius)
{
	float		f;

	if (radius >= (double) FLT_MAX)
		return isinf(radius) ? INFINITY : FLT_MAX;
	if (radius < -(double) FLT_MAX)
		return -INFINITY;
	f = (float) radius;
	if ((double) f > radius)
		f = nextafterf(f, -INFINITY);
	return f;
}

void
vs_search_range(const VsIndexRef *ref, const float *queries, int nq, double radius,
				VsRangeResult *out)
{
	int			retries = 0;

	memset(out, 0, sizeof(VsRangeResult));
	if (isnan(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("range search radius is NaN")));
	if (nq > 0 && vs_worker_range(ref, queries, nq, radius, out))
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
		CachedDataset *entry = get_dataset(ref);
		vs_range_result result;
		vs_status	st;

		st = vs_range(engine_ctx, entry->ds, queries, nq, radius_to_float(radius), ref->metric,
					  NULL, range_alloc, NULL, &result);
		if (st == VS_OK)
		{
			out->nq = nq;
			out->total = (int64) result.total;
			out->offsets = (int64 *) result.offsets;
			out->ids = (int64 *) result.ids;
			out->distances = result.distances;
			trim_cache();
			return;
		}
		if (st == VS_OUT_OF_MEMORY)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("vsearch engine: %s", vs_last_error(engine_ctx))));
		if (st != VS_CANCELLED)
			engine_error(st);
		engine_cancelled(&retries);
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
