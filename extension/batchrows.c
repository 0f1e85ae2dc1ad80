/*
 * Reading the heap rows of index entries for the batch functions.
 *
 * A batch call of 10 000 queries reads ~10^5 candidate rows (snapshot check along the HOT chain,
 * the indexed vector, detoasted when stored out of line), a few microseconds each: one backend
 * spends far longer on them than the GPU on the search.  vs_read_rows therefore splits a large
 * sorted set of rows among parallel workers (PostgreSQL's parallel contexts: the workers share the
 * leader's snapshot and locks) and the leader, each claiming chunks of consecutive ids — heap
 * pages in storage order — from an atomic counter and writing visibility, ctid and vector into the
 * shared segment.  Small sets, temporary tables, sessions already in parallel mode and
 * max_parallel_workers_per_gather = 0 read in the backend alone.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/parallel.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "port/atomics.h"
#include "storage/shm_toc.h"
#include "utils/snapmgr.h"

#include "batchrows.h"
#include "search.h"
#include "vector.h"

/* Fewest rows worth one parallel worker (a worker starts in a few milliseconds). */
#define VS_ROWS_PER_WORKER	4096
/* Ids one claim takes: consecutive, so mostly the same or neighbouring heap pages. */
#define VS_ROWS_CHUNK		256
/* Largest shared segment of one parallel read; more rows are read in several. */
#define VS_ROWS_SEGMENT_MAX	((Size) 512 * 1024 * 1024)

#define VS_ROWS_KEY_SHARED	UINT64CONST(0x7653524F57530001)

typedef struct VsRowsShared
{
	Oid			heaprelid;
	Oid			indexrelid;
	uint32		dim;
	Size		n;
	pg_atomic_uint64 next;		/* first unclaimed id */
	/* offsets from the start of this struct */
	Size		ids_off;
	Size		visible_off;
	Size		tids_off;
	Size		vectors_off;
} VsRowsShared;

PGDLLEXPORT void vs_read_rows_worker(dsm_segment *seg, shm_toc *toc);

void
vs_row_reader_begin(VsRowReader *r, Relation heap, Relation index, uint32 dim)
{
	r->heap = heap;
	r->index = index;
	r->dim = dim;
	r->indexInfo = BuildIndexInfo(index);
	r->estate = CreateExecutorState();
	r->econtext = GetPerTupleExprContext(r->estate);
	r->slot = table_slot_create(heap, NULL);
	r->econtext->ecxt_scantuple = r->slot;
	r->fetch = table_index_fetch_begin(heap);
	r->snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	r->workers = 0;
}

void
vs_row_reader_end(VsRowReader *r)
{
	table_index_fetch_end(r->fetch);
	ExecDropSingleTupleTableSlot(r->slot);
	FreeExecutorState(r->estate);
}

bool
vs_row_reader_read(VsRowReader *r, int64 id, ItemPointer tid, float *vec)
{
	ItemPointerData htid;
	bool		call_again = false;
	bool		all_dead = false;
	bool		visible = false;

	vs_id_to_tid(id, &htid);
	if (table_index_fetch_tuple(r->fetch, &htid, r->snapshot, r->slot, &call_again, &all_dead))
	{
		Datum		values[INDEX_MAX_KEYS];
		bool		isnull[INDEX_MAX_KEYS];
		MemoryContext old;

		ResetExprContext(r->econtext);
		old = MemoryContextSwitchTo(GetPerTupleMemoryContext(r->estate));
		FormIndexDatum(r->indexInfo, r->slot, r->estate, values, isnull);
		if (!isnull[0])
		{
			Vector	   *v = DatumGetVectorP(values[0]);

			if ((uint32) v->dim == r->dim)
			{
				memcpy(vec, v->x, sizeof(float) * r->dim);
				*tid = r->slot->tts_tid;
				visible = true;
			}
		}
		MemoryContextSwitchTo(old);
		ExecClearTuple(r->slot);
	}
	return visible;
}

/* Claims chunks of the shared ids until none is left. */
static void
read_shared(VsRowReader *r, VsRowsShared *sh)
{
	char	   *base = (char *) sh;
	const int64 *ids = (const int64 *) (base + sh->ids_off);
	bool	   *visible = (bool *) (base + sh->visible_off);
	ItemPointerData *tids = (ItemPointerData *) (base + sh->tids_off);
	float	   *vectors = (float *) (base + sh->vectors_off);

	for (;;)
	{
		uint64		from = pg_atomic_fetch_add_u64(&sh->next, VS_ROWS_CHUNK);
		uint64		to = Min(from + VS_ROWS_CHUNK, (uint64) sh->n);

		if (from >= sh->n)
			break;
		CHECK_FOR_INTERRUPTS();
		for (uint64 i = from; i < to; i++)
			visible[i] = vs_row_reader_read(r, ids[i], &tids[i], vectors + i * sh->dim);
	}
}

void
vs_read_rows_worker(dsm_segment *seg, shm_toc *toc)
{
	VsRowsShared *sh = shm_toc_lookup(toc, VS_ROWS_KEY_SHARED, false);
	Relation	heap = table_open(sh->heaprelid, AccessShareLock);
	Relation	index = index_open(sh->indexrelid, AccessShareLock);
	VsRowReader r;

	vs_row_reader_begin(&r, heap, index, sh->dim);
	read_shared(&r, sh);
	vs_row_reader_end(&r);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
}

/* One parallel read of n rows with up to nworkers workers; the leader reads too. */
static void
read_parallel(VsRowReader *r, const int64 *ids, Size n, int nworkers, bool *visible,
			  ItemPointerData *tids, float *vectors)
{
	ParallelContext *pcxt;
	VsRowsShared *sh;
	Size		ids_off = MAXALIGN(sizeof(VsRowsShared));
	Size		visible_off = ids_off + MAXALIGN(sizeof(int64) * n);
	Size		tids_off = visible_off + MAXALIGN(sizeof(bool) * n);
	Size		vectors_off = tids_off + MAXALIGN(sizeof(ItemPointerData) * n);
	Size		total = vectors_off + sizeof(float) * r->dim * n;
	char	   *base;

	EnterParallelMode();
	pcxt = CreateParallelContext("vsearch", "vs_read_rows_worker", nworkers);
	shm_toc_estimate_chunk(&pcxt->estimator, total);
	shm_toc_estimate_keys(&pcxt->estimator, 1);
	InitializeParallelDSM(pcxt);
	if (pcxt->seg == NULL)
	{
		/* no dynamic shared memory: read alone */
		DestroyParallelContext(pcxt);
		ExitParallelMode();
		for (Size i = 0; i < n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			visible[i] = vs_row_reader_read(r, ids[i], &tids[i], vectors + i * r->dim);
		}
		return;
	}
	sh = shm_toc_allocate(pcxt->toc, total);
	base = (char *) sh;
	sh->heaprelid = RelationGetRelid(r->heap);
	sh->indexrelid = RelationGetRelid(r->index);
	sh->dim = r->dim;
	sh->n = n;
	pg_atomic_init_u64(&sh->next, 0);
	sh->ids_off = ids_off;
	sh->visible_off = visible_off;
	sh->tids_off = tids_off;
	sh->vectors_off = vectors_off;
	memcpy(base + ids_off, ids, sizeof(int64) * n);
	shm_toc_insert(pcxt->toc, VS_ROWS_KEY_SHARED, sh);

	LaunchParallelWorkers(pcxt);
	r->workers += pcxt->nworkers_launched;
	read_shared(r, sh);
	WaitForParallelWorkersToFinish(pcxt);

	memcpy(visible, base + visible_off, sizeof(bool) * n);
	memcpy(tids, base + tids_off, sizeof(ItemPointerData) * n);
	memcpy(vectors, base + vectors_off, sizeof(float) * r->dim * n);
	DestroyParallelContext(pcxt);
	ExitParallelMode();
}

void
vs_read_rows(VsRowReader *r, const int64 *ids, Size n, bool *visible, ItemPointerData *tids,
			 float *vectors)
{
	Size		per_row = sizeof(int64) + sizeof(bool) + sizeof(ItemPointerData) +
		sizeof(float) * r->dim;
	Size		slice = Max(VS_ROWS_SEGMENT_MAX / per_row, (Size) VS_ROWS_PER_WORKER);
	bool		parallel = max_parallel_workers_per_gather > 0 && n >= 2 * VS_ROWS_PER_WORKER &&
		!IsInParallelMode() && !RelationUsesLocalBuffers(r->heap) &&
		!RelationUsesLocalBuffers(r->index);

	if (!parallel)
	{
		for (Size i = 0; i < n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			visible[i] = vs_row_reader_read(r, ids[i], &tids[i], vectors + i * r->dim);
		}
		return;
	}
	for (Size from = 0; from < n; from += slice)
	{
		Size		m = Min(slice, n - from);
		int			nworkers = (int) Min((Size) max_parallel_workers_per_gather,
										 m / VS_ROWS_PER_WORKER - 1);

		read_parallel(r, ids + from, m, Max(nworkers, 1), visible + from, tids + from,
					  vectors + from * r->dim);
	}
}
