/*
 * vs_lc: inserting one row (aminsert).
 *
 * Inserts are serialized by the metapage's exclusive lock.  The row is compared with the centers
 * in creation order and goes
 *   - into the bucket of the first center whose ball holds it (d <= r_c), or else
 *   - into the last cluster while it has fewer than bucket_size members, whose covering radius
 *     grows to reach it (no later cluster exists, so no later bucket can hold a row inside the
 *     grown ball), or else
 *   - becomes a new center, radius 0, at the end of the list.
 * Each keeps the search's invariant (lc.h).  The tuple is appended to the tail page of its chain
 * (or a new page linked from it); the metapage (row count, generation, tails), the page and, for a
 * grown radius, the center's page change in one Generic WAL record.  Cost: one distance per center
 * until the first that holds the row.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "lc.h"

typedef struct CenterWalk
{
	int			found;			/* first center whose ball holds the row, -1: none */
	uint32		ncenters;
	BlockNumber last_blkno;		/* the last center */
	OffsetNumber last_off;
	double		last_distance;
	double		last_radius;
} CenterWalk;

static void
walk_centers(Relation index, const VsLcMetaPageData *meta, VsLcValue x, CenterWalk *w)
{
	BlockNumber blkno = meta->center_head;
	uint32		c = 0;

	w->found = -1;
	while (blkno != InvalidBlockNumber)
	{
		Buffer		buf = ReadBuffer(index, blkno);
		Page		page;
		OffsetNumber maxoff;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++)
		{
			VsLcTuple  *t = (VsLcTuple *) PageGetItem(page, PageGetItemId(page, off));
			double		d = vs_lc_distance((vs_metric) meta->metric, meta->dim, x,
										   vs_lc_tuple_value(t));

			if (d <= t->radius)
			{
				w->found = (int) c;
				UnlockReleaseBuffer(buf);
				return;
			}
			w->last_blkno = blkno;
			w->last_off = off;
			w->last_distance = d;
			w->last_radius = t->radius;
			c++;
		}
		blkno = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
	}
	w->ncenters = c;
}

bool
vs_lc_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			 IndexInfo *indexInfo)
{
	Buffer		metabuf;
	VsLcMetaPageData meta;
	VsLcValue	x;
	uint32		dim;
	CenterWalk	w;
	bool		center;
	uint32		cluster;
	Size		size;
	VsLcTuple  *t;
	BlockNumber tailblk;
	Buffer		tailbuf = InvalidBuffer;
	Buffer		newbuf = InvalidBuffer;
	Buffer		centerbuf = InvalidBuffer;
	GenericXLogState *xlog;
	VsLcMetaPage m;
	Page		page;

	if (isnull[0])
		return false;			/* NULLs are not indexed */

	metabuf = ReadBuffer(index, VS_LC_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	memcpy(&meta, vs_lc_page_meta(BufferGetPage(metabuf)), sizeof(meta));
	dim = meta.dim;
	x = vs_lc_value(values[0], meta.metric == VS_METRIC_LEVENSHTEIN, &dim, "row");
	meta.dim = dim;

	memset(&w, 0, sizeof(w));
	walk_centers(index, &meta, x, &w);
	if (w.found >= 0)
	{
		center = false;
		cluster = (uint32) w.found;
	}
	else if (meta.ncenters > 0 && meta.last_count < meta.bucket_size)
	{
		center = false;
		cluster = meta.ncenters - 1;
	}
	else
	{
		center = true;
		cluster = meta.ncenters;
	}

	size = VS_LC_TUPLE_SIZE(x.len);
	t = palloc0(size);
	t->heap_tid = *heap_tid;
	t->cluster = cluster;
	t->len = (uint32) x.len;
	t->radius = 0.0;
	memcpy(t->data, x.data, sizeof(uint32) * x.len);

	/* the chain's tail page, or a new one */
	tailblk = center ? meta.center_tail : meta.bucket_tail;
	if (tailblk != InvalidBlockNumber)
	{
		tailbuf = ReadBuffer(index, tailblk);
		LockBuffer(tailbuf, BUFFER_LOCK_EXCLUSIVE);
	}
	if (tailblk == InvalidBlockNumber || PageGetFreeSpace(BufferGetPage(tailbuf)) < size)
		newbuf = vs_new_buffer(index, MAIN_FORKNUM);
	/* the last center's radius grows (its page is not a bucket page: no lock conflict) */
	if (!center && w.found < 0 && w.last_distance > w.last_radius)
	{
		centerbuf = ReadBuffer(index, w.last_blkno);
		LockBuffer(centerbuf, BUFFER_LOCK_EXCLUSIVE);
	}

	xlog = GenericXLogStart(index);
	m = VsLcPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
	if (BufferIsValid(newbuf))
	{
		BlockNumber newblk = BufferGetBlockNumber(newbuf);

		page = GenericXLogRegisterBuffer(xlog, newbuf, GENERIC_XLOG_FULL_IMAGE);
		vs_lc_init_page(page, center ? VS_LC_CENTERS : VS_LC_BUCKETS);
		if (BufferIsValid(tailbuf))
			VsLcPageGetOpaque(GenericXLogRegisterBuffer(xlog, tailbuf, 0))->next = newblk;
		else if (center)
			m->center_head = newblk;
		else
			m->bucket_head = newblk;
		if (center)
			m->center_tail = newblk;
		else
			m->bucket_tail = newblk;
	}
	else
		page = GenericXLogRegisterBuffer(xlog, tailbuf, 0);
	if (PageAddItem(page, (Item) t, size, InvalidOffsetNumber, false, false) == InvalidOffsetNumber)
		elog(ERROR, "vs_lc: could not add a tuple of %zu bytes", size);
	if (BufferIsValid(centerbuf))
	{
		Page		cpage = GenericXLogRegisterBuffer(xlog, centerbuf, 0);
		VsLcTuple  *ct = (VsLcTuple *) PageGetItem(cpage, PageGetItemId(cpage, w.last_off));

		ct->radius = Max(ct->radius, w.last_distance);
	}
	m->dim = dim;
	m->ntuples++;
	m->generation++;
	if (center)
	{
		m->ncenters++;
		m->last_count = 0;
	}
	else if (cluster == meta.ncenters - 1)
		m->last_count++;
	GenericXLogFinish(xlog);

	if (BufferIsValid(centerbuf))
		UnlockReleaseBuffer(centerbuf);
	if (BufferIsValid(newbuf))
		UnlockReleaseBuffer(newbuf);
	if (BufferIsValid(tailbuf))
		UnlockReleaseBuffer(tailbuf);
	UnlockReleaseBuffer(metabuf);
	pfree(t);
	return false;
}
