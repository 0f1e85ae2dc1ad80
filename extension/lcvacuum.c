/*
 * vs_lc: VACUUM (ambulkdelete; amvacuumcleanup is every kind's, amutils.c).
 *
 * Bucket pages: the members whose heap tid the callback reports dead are deleted from their page
 * (PageIndexMultiDelete, one Generic WAL record per changed page).  Center pages: a center whose
 * row died stays (the list routes through it: removing it would break the invariant of the later
 * clusters) and is flagged VS_LC_DEAD, so that searches never report it and later VACUUMs never
 * ask about its tid again (the heap may reuse it).  Then the metapage gets the new row count and a
 * new generation.  One page is locked at a time and never together with the metapage, so VACUUM
 * cannot deadlock with inserts (which lock the metapage first).  Empty pages stay in their chain;
 * REINDEX rebuilds the list and returns the space.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "lc.h"

/* One chain: returns the rows removed (members) or flagged (centers); *remaining the others. */
static uint64
vacuum_chain(IndexVacuumInfo *info, BlockNumber blkno, bool centers,
			 IndexBulkDeleteCallback callback, void *callback_state, uint64 *remaining)
{
	Relation	index = info->index;
	uint64		removed = 0;

	while (blkno != InvalidBlockNumber)
	{
		Buffer		buf;
		Page		page;
		OffsetNumber maxoff;
		OffsetNumber dead[MaxIndexTuplesPerPage];
		int			ndead = 0;
		BlockNumber next;

		vacuum_delay_point();
		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, info->strategy);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++)
		{
			VsLcTuple  *t = (VsLcTuple *) PageGetItem(page, PageGetItemId(page, off));

			if (t->flags & VS_LC_DEAD)
				continue;
			if (callback(&t->heap_tid, callback_state))
				dead[ndead++] = off;
			else
				(*remaining)++;
		}
		if (ndead > 0)
		{
			GenericXLogState *xlog = GenericXLogStart(index);
			Page		wpage = GenericXLogRegisterBuffer(xlog, buf, 0);

			if (centers)
				for (int i = 0; i < ndead; i++)
					((VsLcTuple *) PageGetItem(wpage, PageGetItemId(wpage, dead[i])))->flags |=
						VS_LC_DEAD;
			else
				PageIndexMultiDelete(wpage, dead, ndead);
			GenericXLogFinish(xlog);
			removed += ndead;
		}
		next = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
		blkno = next;
	}
	return removed;
}

IndexBulkDeleteResult *
vs_lc_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				 IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	VsLcMetaPageData meta;
	uint64		removed;
	uint64		remaining = 0;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	vs_lc_read_meta(index, &meta);
	removed = vacuum_chain(info, meta.center_head, true, callback, callback_state, &remaining);
	/* rows that concurrent inserts append while the chains are walked are seen alive */
	removed += vacuum_chain(info, meta.bucket_head, false, callback, callback_state, &remaining);

	if (removed > 0)
	{
		Buffer		metabuf = ReadBuffer(index, VS_LC_METAPAGE_BLKNO);
		GenericXLogState *xlog;
		VsLcMetaPage m;

		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		(void) vs_lc_page_meta(BufferGetPage(metabuf));
		xlog = GenericXLogStart(index);
		m = VsLcPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
		m->ntuples = m->ntuples >= removed ? m->ntuples - removed : 0;
		m->generation++;
		GenericXLogFinish(xlog);
		UnlockReleaseBuffer(metabuf);
	}

	stats->num_pages = RelationGetNumberOfBlocks(index);
	stats->num_index_tuples = (double) remaining;
	stats->tuples_removed += (double) removed;
	stats->estimated_count = false;
	return stats;
}
