/*
 * Reading the heap rows of index entries for the batch functions.
 *
 * A batch call of 10 000 queries checks ~10^5 (query, row) pairs: the row's visibility to the
 * snapshot along the HOT chain and, for an approximate index, the SQL operator's distance from its
 * vector (an exact index's search already returned it: then no vector is read).  Each check is a
 * few dependent cache misses into shared buffers (buffer lookup, page header, line pointer,
 * tuple), and on the GPU machine they cost more than the search itself.  vs_check_pairs therefore
 * visits the rows in id (= heap) order, each once, and computes the distances of every query
 * wanting a row while its tuple is at hand: no copy of the vector is made or read back later.
 * On a heap table indexed on a plain column it reads the pages itself (what heapam's index fetch
 * does: pin, share lock, HOT chain search under the snapshot) and pins the pages of the next rows
 * ahead, prefetching their line pointers and tuples into the CPU cache while it works on the
 * current row: of the ~8 cache misses a row costs, those on the page then overlap with others.
 *
 * A row on a page the visibility map marks all-visible is visible to every MVCC snapshot, as for
 * an index-only scan: the check reads its line pointer (the version's tid, past a HOT redirect)
 * under the pin and without the page's lock or a visibility test, and when no distance is needed
 * (the index's search gave them: the exact kinds, vs_graph; also vs_check_pair one row at a time)
 * not even the tuple; a vector is read from the tuple in place, which the pin keeps where it is
 * and whose data no one changes.  Not under SERIALIZABLE, whose predicate locks need the tuple's
 * check.  A reader without distances may also remember each row's answer (VsRowReader.remember):
 * a kNN batch checks its queries' rows slice by slice while the worker searches (batch.c), and a
 * row wanted by queries of several slices is still read once.
 *
 * Tried and measured, then left out: the same reads split among parallel workers (a parallel
 * context sharing the leader's snapshot).  On an H100 host (16 cores, shared_buffers = 8GB, 1M x
 * 128 rows) six workers took the read of 91 282 rows from 238 to 188 ms only, and the re-rank of
 * an approximate index's candidates (357 000 rows) took 806-942 ms with them against 808 ms in one
 * backend the day before:
 * every new worker process takes a page fault on each shared-buffer page it touches
 * (docs/BENCHMARKS.md).
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/toast_internals.h"
#include "access/visibilitymap.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/predicate.h"
#include "utils/fmgroids.h"
#include "utils/snapmgr.h"

#include "batchrows.h"
#include "search.h"
#include "vector.h"

void
vs_row_reader_begin(VsRowReader *r, Relation heap, Relation index, uint32 dim, vs_metric metric,
					const float *queries)
{
	r->heap = heap;
	r->dim = dim;
	r->sparse = vs_index_is_sparsevec(index);
	r->metric = metric;
	r->queries = queries;
	r->indexInfo = BuildIndexInfo(index);
	r->estate = CreateExecutorState();
	r->econtext = GetPerTupleExprContext(r->estate);
	r->slot = table_slot_create(heap, NULL);
	r->econtext->ecxt_scantuple = r->slot;
	r->fetch = table_index_fetch_begin(heap);
	r->snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	r->rows_read = 0;
	r->rows_all_visible = 0;
	r->attnum = r->indexInfo->ii_IndexAttrNumbers[0];
	r->direct = heap->rd_tableam == GetHeapamTableAmRoutine() && r->attnum > 0 &&
		r->indexInfo->ii_Expressions == NIL;
	r->use_vm = r->direct && IsMVCCSnapshot(r->snapshot) && !IsolationIsSerializable();
	r->vmbuf = InvalidBuffer;
	r->remember = false;
	r->seen = NULL;
	r->nseen = 0;
	r->cxt = CurrentMemoryContext;
	r->toastrel = NULL;
	r->toastidx = NULL;
	r->toastscan = NULL;
	r->toastslot = NULL;
	r->toastbuf = NULL;
	r->toastcap = 0;
}

void
vs_row_reader_end(VsRowReader *r)
{
	if (BufferIsValid(r->vmbuf))
		ReleaseBuffer(r->vmbuf);
	r->vmbuf = InvalidBuffer;
	if (r->seen)
		pfree(r->seen);
	r->seen = NULL;
	r->nseen = 0;
	if (r->toastscan)
	{
		index_endscan(r->toastscan);
		ExecDropSingleTupleTableSlot(r->toastslot);
		index_close(r->toastidx, AccessShareLock);
		table_close(r->toastrel, AccessShareLock);
		pfree(r->toastbuf);
	}
	r->toastscan = NULL;
	table_index_fetch_end(r->fetch);
	ExecDropSingleTupleTableSlot(r->slot);
	FreeExecutorState(r->estate);
}

/*
 * A vector stored out of line (VARATT_IS_EXTERNAL_ONDISK), uncompressed (vector columns are
 * STORAGE external), read whole into r->toastbuf through one scan of the TOAST index kept open
 * for the call: what detoast_attr does for one value, without opening and closing the TOAST
 * table, its index and a scan per row (a batch on Fashion-MNIST re-ranks ~29 000 such rows).
 * NULL when it is compressed or its chunks are not as expected: the caller detoasts it the usual
 * way, which reports any damage.
 */
static struct varlena *
read_toasted_in(VsRowReader *r, struct varlena *attr)
{
	struct varatt_external ext;
	ScanKeyData key;
	TupleDesc	desc;
	int32		size,
				got = 0,
				seq = 0;

	VARATT_EXTERNAL_GET_POINTER(ext, attr);
	if (VARATT_EXTERNAL_IS_COMPRESSED(ext))
		return NULL;
	size = VARATT_EXTERNAL_GET_EXTSIZE(ext);
	if (r->toastscan == NULL)
	{
		if (ext.va_toastrelid != r->heap->rd_rel->reltoastrelid)
			return NULL;
		init_toast_snapshot(&r->toastsnap);
		r->toastrel = table_open(ext.va_toastrelid, AccessShareLock);
		r->toastidx = index_open(toast_get_valid_index(ext.va_toastrelid, AccessShareLock),
								 AccessShareLock);
		r->toastslot = table_slot_create(r->toastrel, NULL);
		r->toastscan = index_beginscan(r->toastrel, r->toastidx, &r->toastsnap, 1, 0);
		r->toastcap = VARHDRSZ + (Size) size;
		r->toastbuf = palloc(r->toastcap);
	}
	if (ext.va_toastrelid != RelationGetRelid(r->toastrel))
		return NULL;
	if (r->toastcap < VARHDRSZ + (Size) size)
	{
		r->toastcap = VARHDRSZ + (Size) size;
		r->toastbuf = repalloc(r->toastbuf, r->toastcap);
	}
	desc = RelationGetDescr(r->toastrel);
	ScanKeyInit(&key, (AttrNumber) 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext.va_valueid));
	index_rescan(r->toastscan, &key, 1, NULL, 0);
	/* the chunks come in chunk_seq order (the index is on chunk_id, chunk_seq) */
	while (index_getnext_slot(r->toastscan, ForwardScanDirection, r->toastslot))
	{
		bool		shouldfree;
		HeapTuple	tup = ExecFetchSlotHeapTuple(r->toastslot, false, &shouldfree);
		bool		null_seq,
					null_chunk;
		int32		chunk_seq = DatumGetInt32(fastgetattr(tup, 2, desc, &null_seq));
		Pointer		chunk = DatumGetPointer(fastgetattr(tup, 3, desc, &null_chunk));
		char	   *data;
		int32		len;

		if (null_seq || null_chunk || chunk_seq != seq || VARATT_IS_EXTERNAL(chunk) ||
			VARATT_IS_COMPRESSED(chunk))
			got = -1;
		else
		{
			data = VARATT_IS_SHORT(chunk) ? VARDATA_SHORT(chunk) : VARDATA(chunk);
			len = VARATT_IS_SHORT(chunk) ? VARSIZE_SHORT(chunk) - VARHDRSZ_SHORT
				: VARSIZE(chunk) - VARHDRSZ;
			if (len > size - got)
				got = -1;
			else
			{
				memcpy(VARDATA(r->toastbuf) + got, data, len);
				got += len;
				seq++;
			}
		}
		if (shouldfree)
			heap_freetuple(tup);
		ExecClearTuple(r->toastslot);
		if (got < 0)
			return NULL;
	}
	if (got != size)
		return NULL;
	SET_VARSIZE(r->toastbuf, VARHDRSZ + size);
	return r->toastbuf;
}

/* read_toasted_in for a value stored out of line, in the reader's memory context, which
 * outlives the per-row one; NULL for any other value */
static struct varlena *
read_toasted(VsRowReader *r, struct varlena *attr)
{
	MemoryContext old;
	struct varlena *v;

	if (!VARATT_IS_EXTERNAL_ONDISK(attr))
		return NULL;
	old = MemoryContextSwitchTo(r->cxt);
	v = read_toasted_in(r, attr);
	MemoryContextSwitchTo(old);
	return v;
}

/*
 * Fetches the row of index entry id: false if it is not visible (or, when the reader computes
 * distances, its vector is NULL or of another size); *tid is the visible version and *vec its
 * vector when distances are computed (valid, in the tuple's buffer or the per-tuple context, until
 * row_release).
 */
static bool
row_fetch(VsRowReader *r, int64 id, ItemPointer tid, const float **vec)
{
	ItemPointerData htid;
	bool		call_again = false;
	bool		all_dead = false;
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	MemoryContext old;
	Vector	   *v;

	r->rows_read++;
	vs_id_to_tid(id, &htid);
	if (!table_index_fetch_tuple(r->fetch, &htid, r->snapshot, r->slot, &call_again, &all_dead))
		return false;
	*tid = r->slot->tts_tid;
	if (r->queries == NULL)
		return true;
	old = MemoryContextSwitchTo(GetPerTupleMemoryContext(r->estate));
	FormIndexDatum(r->indexInfo, r->slot, r->estate, values, isnull);
	MemoryContextSwitchTo(old);
	if (isnull[0])
		return false;
	v = vs_index_vector(values[0], r->sparse);
	if ((uint32) v->dim != r->dim)
		return false;
	*vec = v->x;
	return true;
}

static void
row_release(VsRowReader *r)
{
	ResetExprContext(r->econtext);
	ExecClearTuple(r->slot);
}

static inline void
check_against(VsRowReader *r, bool visible, const float *vec, ItemPointer tid, int32 query,
			  VsPairResult *out)
{
	out->visible = visible;
	if (visible)
	{
		out->tid = *tid;
		out->distance = r->queries == NULL ? NAN :
			vs_operator_distance(r->metric, vec, r->queries + (Size) query * r->dim, r->dim);
	}
}

/*
 * The version of the row at offset off of an all-visible page, pinned: its line pointer, or the
 * one a HOT redirect leads to.  Read without the page's lock: while it is pinned no line pointer
 * an index entry leads to can change (pruning needs a cleanup lock; inserts only add ones).
 */
static bool
all_visible_version(Page page, OffsetNumber off, ItemPointer tid)
{
	OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
	ItemId		lp;

	if (off < FirstOffsetNumber || off > maxoff)
		return false;
	lp = PageGetItemId(page, off);
	if (ItemIdIsRedirected(lp))
	{
		off = ItemIdGetRedirect(lp);
		if (off < FirstOffsetNumber || off > maxoff)
			return false;
		lp = PageGetItemId(page, off);
	}
	if (!ItemIdIsNormal(lp))
		return false;
	ItemPointerSetOffsetNumber(tid, off);
	return true;
}

bool
vs_check_pair(VsRowReader *r, int64 id, int32 query, VsPairResult *out)
{
	ItemPointerData tid;
	const float *vec = NULL;
	bool		visible;

	vs_id_to_tid(id, &tid);
	/* as an index-only scan: the visibility map first, then only the line pointer */
	if (r->use_vm && r->queries == NULL &&
		VM_ALL_VISIBLE(r->heap, ItemPointerGetBlockNumber(&tid), &r->vmbuf))
	{
		Buffer		buf = ReadBuffer(r->heap, ItemPointerGetBlockNumber(&tid));

		r->rows_read++;
		r->rows_all_visible++;
		visible = all_visible_version(BufferGetPage(buf), ItemPointerGetOffsetNumber(&tid), &tid);
		ReleaseBuffer(buf);
		check_against(r, visible, NULL, &tid, query, out);
		return out->visible;
	}
	visible = row_fetch(r, id, &tid, &vec);
	check_against(r, visible, vec, &tid, query, out);
	row_release(r);
	return out->visible;
}

static int
cmp_pair(const void *a, const void *b)
{
	const VsPair *x = (const VsPair *) a;
	const VsPair *y = (const VsPair *) b;

	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

/* Sorts pairs by id with tmp as scratch space; returns the array (pairs or tmp) that holds the
 * result.  A byte-wise LSD radix sort skipping the bytes every id shares; qsort for short arrays. */
static VsPair *
sort_pairs(VsPair *pairs, VsPair *tmp, Size n)
{
	uint64		all_or = 0,
				all_and = ~(uint64) 0;

	if (n < 512)
	{
		qsort(pairs, n, sizeof(VsPair), cmp_pair);
		return pairs;
	}
	for (Size i = 0; i < n; i++)
	{
		all_or |= (uint64) pairs[i].id;
		all_and &= (uint64) pairs[i].id;
	}
	for (int shift = 0; shift < 64; shift += 8)
	{
		Size		start[256] = {0};
		Size		sum = 0;
		VsPair	   *t;

		if ((((all_or ^ all_and) >> shift) & 0xFF) == 0)
			continue;			/* every id has the same byte here */
		for (Size i = 0; i < n; i++)
			start[((uint64) pairs[i].id >> shift) & 0xFF]++;
		for (int b = 0; b < 256; b++)
		{
			Size		c = start[b];

			start[b] = sum;
			sum += c;
		}
		for (Size i = 0; i < n; i++)
			tmp[start[((uint64) pairs[i].id >> shift) & 0xFF]++] = pairs[i];
		t = pairs;
		pairs = tmp;
		tmp = t;
	}
	return pairs;
}

/* The pairs of one row: sorted[first .. next) share its id. */
typedef struct RowRun
{
	Size		first;
	Size		next;
	BlockNumber block;
	OffsetNumber offset;
	Buffer		buf;			/* pinned ahead */
	bool		all_visible;	/* the page is all-visible (reader's use_vm only) */
} RowRun;

#define VS_ROWS_AHEAD 4			/* ring of pinned rows: this many ahead of the current one */

static inline void
prefetch_range(const char *p, Size len)
{
	for (Size o = 0; o < len; o += 64)
		__builtin_prefetch(p + o);
}

/* Pins the page of run u, notes whether it is all-visible and prefetches its header and line
 * pointer. */
static void
pin_ahead(VsRowReader *r, RowRun *u, const RowRun *prev)
{
	Page		page;

	if (prev != NULL && prev->block == u->block)
	{
		IncrBufferRefCount(prev->buf);
		u->buf = prev->buf;
		u->all_visible = prev->all_visible;
	}
	else
	{
		u->buf = ReadBuffer(r->heap, u->block);
		/* read after our snapshot was taken: if set, every row on the page is visible to it */
		u->all_visible = r->use_vm && VM_ALL_VISIBLE(r->heap, u->block, &r->vmbuf);
	}
	page = BufferGetPage(u->buf);
	__builtin_prefetch(page);
	__builtin_prefetch(PageGetItemId(page, u->offset));
}

/* Prefetches the tuple of run u (its line pointer is in the cache by now; read without a lock, it
 * is only a hint); an all-visible row's tuple is read only for its vector. */
static void
prefetch_tuple(const VsRowReader *r, const RowRun *u)
{
	Page		page = BufferGetPage(u->buf);
	ItemId		lp;

	if ((u->all_visible && r->queries == NULL) || u->offset > PageGetMaxOffsetNumber(page))
		return;
	lp = PageGetItemId(page, u->offset);
	if (ItemIdIsNormal(lp) && ItemIdGetOffset(lp) + ItemIdGetLength(lp) <= BLCKSZ)
		prefetch_range((const char *) page + ItemIdGetOffset(lp), ItemIdGetLength(lp));
}

/*
 * The vector of a visible tuple of the pinned page: false when it is NULL or of another size.
 * *vec lies in the page or, for a TOASTed or copied value, in the reader's buffers or the
 * per-tuple context (*copied: reset it after use).
 */
static bool
tuple_vector(VsRowReader *r, HeapTuple tuple, const float **vec, bool *copied)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, r->attnum, RelationGetDescr(r->heap), &isnull);
	MemoryContext old;
	struct varlena *toasted;
	Vector	   *v;

	if (isnull)
		return false;
	old = MemoryContextSwitchTo(GetPerTupleMemoryContext(r->estate));
	toasted = r->sparse ? NULL : read_toasted(r, (struct varlena *) DatumGetPointer(d));
	/* the tuple stays in place while pinned; a TOASTed vector is read whole */
	if (toasted != NULL)
		d = PointerGetDatum(toasted);
	v = vs_index_vector(d, r->sparse);
	MemoryContextSwitchTo(old);
	*copied = (Pointer) v != DatumGetPointer(d);
	if ((uint32) v->dim != r->dim)
		return false;
	*vec = v->x;
	return true;
}

/* Checks the pairs of run u against its row, read from its pinned page; releases the pin.
 * prev_block: the page of the run checked before. */
static void
check_run_direct(VsRowReader *r, const RowRun *u, BlockNumber prev_block, const VsPair *sorted,
				 VsPairResult *out)
{
	ItemPointerData tid;
	HeapTupleData tuple;
	bool		all_dead = false;
	bool		found;
	bool		visible = false;
	const float *vec = NULL;
	bool		copied = false;

	r->rows_read++;
	ItemPointerSet(&tid, u->block, u->offset);
	if (u->all_visible)
	{
		Page		page = BufferGetPage(u->buf);

		r->rows_all_visible++;
		visible = all_visible_version(page, u->offset, &tid);
		if (visible && r->queries != NULL)
		{
			/* no lock: the pin keeps the tuple in place, and its data never changes */
			ItemId		lp = PageGetItemId(page, ItemPointerGetOffsetNumber(&tid));

			tuple.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tuple.t_len = ItemIdGetLength(lp);
			tuple.t_tableOid = RelationGetRelid(r->heap);
			tuple.t_self = tid;
			visible = tuple_vector(r, &tuple, &vec, &copied);
		}
		for (Size j = u->first; j < u->next; j++)
			check_against(r, visible, vec, &tid, sorted[j].query, &out[sorted[j].slot]);
		if (copied)
			ResetExprContext(r->econtext);
		ReleaseBuffer(u->buf);
		return;
	}
	if (prev_block != u->block)
		heap_page_prune_opt(r->heap, u->buf);	/* as heapam's index fetch does per page */
	LockBuffer(u->buf, BUFFER_LOCK_SHARE);
	found = heap_hot_search_buffer(&tid, r->heap, u->buf, r->snapshot, &tuple, &all_dead, true);
	LockBuffer(u->buf, BUFFER_LOCK_UNLOCK);
	if (found && r->queries == NULL)
		visible = true;
	else if (found)
		visible = tuple_vector(r, &tuple, &vec, &copied);
	for (Size j = u->first; j < u->next; j++)
		check_against(r, visible, vec, &tid, sorted[j].query, &out[sorted[j].slot]);
	if (copied)
		ResetExprContext(r->econtext);
	ReleaseBuffer(u->buf);
}

/* Checks pairs sorted by id, row by row, with the next VS_ROWS_AHEAD rows pinned and prefetched. */
static void
check_sorted_direct(VsRowReader *r, const VsPair *sorted, Size n, VsPairResult *out)
{
	RowRun		ring[VS_ROWS_AHEAD + 1];
	const uint64 size = VS_ROWS_AHEAD + 1;
	uint64		head = 0,
				tail = 0;		/* runs [tail, head) are pinned */
	Size		pos = 0;		/* the first pair in no run yet */
	BlockNumber prev_block = InvalidBlockNumber;

	for (;;)
	{
		while (head - tail < size && pos < n)
		{
			RowRun	   *u = &ring[head % size];
			ItemPointerData tid;

			u->first = pos;
			while (pos < n && sorted[pos].id == sorted[u->first].id)
				pos++;
			u->next = pos;
			vs_id_to_tid(sorted[u->first].id, &tid);
			u->block = ItemPointerGetBlockNumberNoCheck(&tid);
			u->offset = ItemPointerGetOffsetNumberNoCheck(&tid);
			pin_ahead(r, u, head > tail ? &ring[(head - 1) % size] : NULL);
			head++;
		}
		if (tail == head)
			break;
		if (head - tail > 1)
			prefetch_tuple(r, &ring[(tail + 1) % size]);
		if ((r->rows_read & 255) == 0)
			CHECK_FOR_INTERRUPTS();
		check_run_direct(r, &ring[tail % size], prev_block, sorted, out);
		prev_block = ring[tail % size].block;
		tail++;
	}
}

/* Checks pairs sorted by id, row by row, through the table AM's index fetch. */
static void
check_sorted_fetch(VsRowReader *r, const VsPair *sorted, Size n, VsPairResult *out)
{
	for (Size i = 0; i < n;)
	{
		ItemPointerData tid;
		const float *vec = NULL;
		bool		visible;
		Size		j = i;

		Assert(sorted[i].id >= 0);
		if ((r->rows_read & 255) == 0)
			CHECK_FOR_INTERRUPTS();
		visible = row_fetch(r, sorted[i].id, &tid, &vec);
		for (; j < n && sorted[j].id == sorted[i].id; j++)
			check_against(r, visible, vec, &tid, sorted[j].query, &out[sorted[j].slot]);
		row_release(r);
		i = j;
	}
}

/*
 * What a remembering reader found for a row: within one snapshot a row's visible version does not
 * change (pruning keeps line pointer numbers), so a later pass (the next slice of a batch's
 * queries: batch.c) need not read it again.
 */
typedef struct VsSeenRow
{
	int64		id;
	ItemPointerData tid;
	bool		visible;
} VsSeenRow;

/* Answers the pairs of rows checked before from r->seen and moves the others, in order, to the
 * front of sorted; returns how many are left. */
static Size
answer_seen(VsRowReader *r, VsPair *sorted, Size n, VsPairResult *out)
{
	Size		c = 0,
				left = 0;

	for (Size i = 0; i < n; i++)
	{
		while (c < r->nseen && r->seen[c].id < sorted[i].id)
			c++;
		if (c < r->nseen && r->seen[c].id == sorted[i].id)
			check_against(r, r->seen[c].visible, NULL, &r->seen[c].tid, sorted[i].query,
						  &out[sorted[i].slot]);
		else
			sorted[left++] = sorted[i];
	}
	return left;
}

/* Merges the rows of sorted[0, n), just checked, into r->seen. */
static void
remember_rows(VsRowReader *r, const VsPair *sorted, Size n, const VsPairResult *out)
{
	Size		nnew = 0,
				a = 0,
				m = 0;
	VsSeenRow  *merged;

	for (Size i = 0; i < n; i++)
		if (i == 0 || sorted[i].id != sorted[i - 1].id)
			nnew++;
	if (nnew == 0)
		return;
	merged = palloc_extended(sizeof(VsSeenRow) * (r->nseen + nnew), MCXT_ALLOC_HUGE);
	for (Size i = 0; i < n; i++)
	{
		const VsPairResult *o = &out[sorted[i].slot];

		if (i > 0 && sorted[i].id == sorted[i - 1].id)
			continue;
		while (a < r->nseen && r->seen[a].id < sorted[i].id)
			merged[m++] = r->seen[a++];
		merged[m].id = sorted[i].id;
		merged[m].visible = o->visible;
		if (o->visible)
			merged[m].tid = o->tid;
		else
			ItemPointerSetInvalid(&merged[m].tid);
		m++;
	}
	while (a < r->nseen)
		merged[m++] = r->seen[a++];
	if (r->seen)
		pfree(r->seen);
	r->seen = merged;
	r->nseen = m;
}

void
vs_check_pairs(VsRowReader *r, VsPair *pairs, Size n, VsPairResult *out)
{
	VsPair	   *tmp,
			   *sorted;
	bool		remember = r->remember && r->queries == NULL;

	if (n == 0)
		return;
	tmp = palloc_extended(sizeof(VsPair) * n, MCXT_ALLOC_HUGE);
	sorted = sort_pairs(pairs, tmp, n);
	if (remember)
		n = answer_seen(r, sorted, n, out);
	if (r->direct)
		check_sorted_direct(r, sorted, n, out);
	else
		check_sorted_fetch(r, sorted, n, out);
	if (remember)
		remember_rows(r, sorted, n, out);
	pfree(tmp);
}