/*
 * vs_sss: VACUUM (ambulkdelete; amvacuumcleanup is every kind's, amutils.c).  The row pages are
 * visited once; dead rows are deleted from their page (PageIndexMultiDelete, one Generic WAL
 * record per changed page), then the metapage gets the new row count and generation.  Pivots are
 * copies, not rows: they stay.  One page is locked at a time and never with the metapage.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "storage/bufmgr.h"

#include "sss.h"

IndexBulkDeleteResult *
vs_sss_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				  IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	VsSssMetaPageData meta;
	uint64		removed = 0;
	uint64		remaining = 0;
	BlockNumber blkno;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));
	vs_sss_read_meta(index, &meta);

	for (blkno = meta.row_head; blkno != InvalidBlockNumber;)
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
			VsSssTuple *t = (VsSssTuple *) PageGetItem(page, PageGetItemId(page, off));

			if (callback(&t->heap_tid, callback_state))
				dead[ndead++] = off;
			else
				remaining++;
		}
		if (ndead > 0)
		{
			GenericXLogState *xlog = GenericXLogStart(index);

			PageIndexMultiDelete(GenericXLogRegisterBuffer(xlog, buf, 0), dead, ndead);
			GenericXLogFinish(xlog);
			removed += ndead;
		}
		next = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
		blkno = next;
	}

	if (removed > 0)
	{
		Buffer		metabuf = ReadBuffer(index, 0);
		GenericXLogState *xlog;
		VsSssMetaPage m;

		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		(void) vs_sss_page_meta(BufferGetPage(metabuf));
		xlog = GenericXLogStart(index);
		m = VsSssPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
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
