/*
 * vs_sss: inserting one row (aminsert).  Serialized by the metapage's exclusive lock: the row's
 * distances to the pivots are computed (one per pivot; an index built on an empty table has no
 * pivots, and its searches compare every row until REINDEX chooses some), and the tuple is
 * appended to the last row page or a new page linked from it; the metapage changes in the same
 * Generic WAL record.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "sss.h"

/* Distances from x to every pivot, in pivot order. */
static void
pivot_distances(Relation index, const VsSssMetaPageData *meta, VsLcValue x, float *out)
{
	BlockNumber blkno = meta->pivot_head;
	uint32		j = 0;

	while (blkno != InvalidBlockNumber)
	{
		Buffer		buf = ReadBuffer(index, blkno);
		Page		page;
		OffsetNumber maxoff;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff && j < meta->npivots; off++)
		{
			VsSssTuple *t = (VsSssTuple *) PageGetItem(page, PageGetItemId(page, off));
			VsLcValue	p;

			p.data = t->data;
			p.len = (int) t->len;
			out[j++] = (float) vs_lc_distance((vs_metric) meta->metric, meta->dim, x, p);
		}
		blkno = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
	}
	if (j != meta->npivots)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_sss index \"%s\" has %u pivots, its metapage says %u",
						RelationGetRelationName(index), j, meta->npivots),
				 errhint("REINDEX the index.")));
}

bool
vs_sss_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			  Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			  IndexInfo *indexInfo)
{
	Buffer		metabuf;
	VsSssMetaPageData meta;
	VsLcValue	x;
	uint32		dim;
	Size		size;
	VsSssTuple *t;
	Buffer		tailbuf = InvalidBuffer;
	Buffer		newbuf = InvalidBuffer;
	GenericXLogState *xlog;
	VsSssMetaPage m;
	Page		page;

	if (isnull[0])
		return false;
	metabuf = ReadBuffer(index, 0);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	memcpy(&meta, vs_sss_page_meta(BufferGetPage(metabuf)), sizeof(meta));
	dim = meta.dim;
	x = vs_lc_value(values[0], meta.metric == VS_METRIC_LEVENSHTEIN, &dim, "row");
	meta.dim = dim;
	if (x.len > vs_sss_max_len(meta.npivots))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_sss cannot store an object of %d elements with %u pivot distances",
						x.len, meta.npivots),
				 errhint("Each row is stored on one %d-byte page with its distances to the pivots.",
						 BLCKSZ)));

	size = VS_SSS_TUPLE_SIZE(x.len, meta.npivots);
	t = palloc0(size);
	t->heap_tid = *heap_tid;
	t->len = (uint32) x.len;
	t->npivots = meta.npivots;
	memcpy(t->data, x.data, sizeof(uint32) * x.len);
	pivot_distances(index, &meta, x, VsSssTupleDistances(t));

	if (meta.row_tail != InvalidBlockNumber)
	{
		tailbuf = ReadBuffer(index, meta.row_tail);
		LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	if (!BufferIsValid(tailbuf) || PageGetFreeSpace(BufferGetPage(tailbuf)) < size)
		newbuf = vs_new_buffer(index, MAIN_FORKNUM);

	xlog = GenericXLogStart(index);
	m = VsSssPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
	if (BufferIsValid(newbuf))
	{
		BlockNumber newblk = BufferGetBlockNumber(newbuf);

		page = GenericXLogRegisterBuffer(xlog, newbuf, GENERIC_XLOG_FULL_IMAGE);
		vs_sss_init_page(page, VS_LC_BUCKETS);
		if (BufferIsValid(tailbuf))
			VsLcPageGetOpaque(GenericXLogRegisterBuffer(xlog, tailbuf, 0))->next = newblk;
		else
			m->row_head = newblk;
		m->row_tail = newblk;
	}
	else
		page = GenericXLogRegisterBuffer(xlog, tailbuf, 0);
	if (PageAddItem(page, (Item) t, size, InvalidOffsetNumber, false, false) == InvalidOffsetNumber)
		elog(ERROR, "vs_sss: could not add a tuple of %zu bytes", size);
	m->dim = dim;
	m->ntuples++;
	m->generation++;
	GenericXLogFinish(xlog);

	if (BufferIsValid(newbuf))
		UnlockReleaseBuffer(newbuf);
	if (BufferIsValid(tailbuf))
		UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
	pfree(t);
	return false;
}
