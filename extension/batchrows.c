/*
 * Reading the heap rows of index entries for the batch functions.
 *
 * A batch call of 10 000 queries reads ~10^5 candidate rows (snapshot check along the HOT chain,
 * the indexed vector, detoasted when stored out of line): on the GPU machine that costs more
 * than the search itself.  vs_read_rows reads a set of rows in id order — heap pages in storage
 * order, each once — into one block of vectors instead of one allocation per row.
 *
 * Tried and measured, then left out: the same reads split among parallel workers (a parallel
 * context sharing the leader's snapshot).  On an H100 host (16 cores, shared_buffers = 8GB, 1M x
 * 128 rows) six workers took the read of 91 282 rows from 238 to 188 ms only, and the re-rank of
 * vs_ivfpq (357 000 rows) took 806-942 ms with them against 808 ms in one backend the day before:
 * every new worker process takes a page fault on each shared-buffer page it touches
 * (docs/BENCHMARKS.md).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/snapmgr.h"

#include "batchrows.h"
#include "search.h"
#include "vector.h"

void
vs_row_reader_begin(VsRowReader *r, Relation heap, Relation index, uint32 dim)
{
	r->dim = dim;
	r->indexInfo = BuildIndexInfo(index);
	r->estate = CreateExecutorState();
	r->econtext = GetPerTupleExprContext(r->estate);
	r->slot = table_slot_create(heap, NULL);
	r->econtext->ecxt_scantuple = r->slot;
	r->fetch = table_index_fetch_begin(heap);
	r->snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
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

void
vs_read_rows(VsRowReader *r, const int64 *ids, Size n, bool *visible, ItemPointerData *tids,
			 float *vectors)
{
	for (Size i = 0; i < n; i++)
	{
		if ((i & 255) == 0)
			CHECK_FOR_INTERRUPTS();
		visible[i] = vs_row_reader_read(r, ids[i], &tids[i], vectors + i * r->dim);
	}
}
