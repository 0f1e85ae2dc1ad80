/*
 * vs_flat: VACUUM (ambulkdelete; amvacuumcleanup is every kind's, amutils.c).
 *
 * Bulk delete visits every data page once, removes the items whose heap tid the callback reports
 * dead and compacts the page in place (one Generic WAL record per changed page); items never move
 * to another page, so a concurrent reader never sees one twice.  Before the first page changes,
 * the metapage's epoch moves (bump_epoch), and again at the end: a reader catching up from a
 * position on a page (flatsearch.c) rechecks the epoch after its read and the heap tid at the
 * position before it, so it never trusts a position that compaction shifted under it.  The
 * metapage then gets the new row count and generation.  With sketches (flat.h), a page's sketches
 * move with its items, in the group's sketch page (locked first) and the same record.  Empty pages
 * stay in the index (inserts only append at the end); REINDEX returns the space.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "flat.h"

/* New epoch and generation, WAL-logged; called holding no data page lock (inserts lock the
 * metapage first). */
static void
bump_epoch(Relation index)
{
	Buffer		metabuf = ReadBuffer(index, VS_FLAT_METAPAGE_BLKNO);
	GenericXLogState *xlog;
	VsFlatMetaPage meta;

	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	meta = VsFlatPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
	meta->generation++;
	meta->epoch++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);
}

IndexBulkDeleteResult *
vs_flat_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				   IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	VsFlatMetaPageData meta;
	uint64		removed = 0;
	uint64		remaining = 0;
	Buffer		metabuf;
	GenericXLogState *xlog;
	VsFlatMetaPage newmeta;
	bool		epoch_bumped = false;
	uint32		words;			/* of a row (flat.h) */
	int			per_page;
	Size		sketch_bytes;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	vs_flat_read_meta(index, &meta);
	words = vs_store_words(meta.dim, meta.storage);
	per_page = meta.dim > 0 ? VsFlatItemsPerPage(words) : 0;
	sketch_bytes = vs_row_sketch_bytes(meta.dim);

	for (BlockNumber blkno = VS_FLAT_FIRST_DATA_BLKNO;
		 meta.dim > 0 && blkno <= meta.last_block && meta.last_block != VS_FLAT_METAPAGE_BLKNO;
		 blkno++)
	{
		Buffer		buf;
		Buffer		sbuf = InvalidBuffer;
		Page		page;
		Page		spage = NULL;
		int			group_page = 0;
		int			nitems;
		int			keep = 0;
		bool		any_dead = false;
		bool		dead[BLCKSZ / sizeof(VsFlatItem) + 1];

		if (vs_flat_is_sketch_block(meta.sketch_group, blkno))
			continue;
		vacuum_delay_point();
		if (meta.sketch_group > 0)
		{
			sbuf = ReadBufferExtended(index, MAIN_FORKNUM,
									  vs_flat_sketch_block_of(meta.sketch_group, blkno), RBM_NORMAL,
									  info->strategy);
			group_page = vs_flat_group_page(meta.sketch_group, blkno);
		}
		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, info->strategy);
again:
		if (BufferIsValid(sbuf))
			LockBuffer(sbuf, BUFFER_LOCK_EXCLUSIVE);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (!VsFlatIsDataPage(page))
		{
			UnlockReleaseBuffer(buf);
			if (BufferIsValid(sbuf))
				UnlockReleaseBuffer(sbuf);
			continue;
		}
		nitems = VsFlatPageGetOpaque(page)->nitems;
		any_dead = false;
		for (int i = 0; i < nitems; i++)
		{
			dead[i] = callback(&VsFlatPageGetItem(page, words, i)->heap_tid, callback_state);
			any_dead |= dead[i];
		}
		if (any_dead && !epoch_bumped)
		{
			/* readers must learn that items move before the first one does */
			LockBuffer(buf, BUFFER_LOCK_UNLOCK);
			if (BufferIsValid(sbuf))
				LockBuffer(sbuf, BUFFER_LOCK_UNLOCK);
			bump_epoch(index);
			epoch_bumped = true;
			goto again;
		}

		if (any_dead)
		{
			xlog = GenericXLogStart(index);
			if (BufferIsValid(sbuf))
				spage = GenericXLogRegisterBuffer(xlog, sbuf, 0);
			page = GenericXLogRegisterBuffer(xlog, buf, 0);
		}
		else
			xlog = NULL;

		for (int i = 0; i < nitems; i++)
		{
			VsFlatItem *item = VsFlatPageGetItem(page, words, i);

			if (dead[i])
			{
				removed++;
				continue;
			}
			if (keep != i)
			{
				memmove(VsFlatPageGetItem(page, words, keep), item, VS_FLAT_ITEM_SIZE(words));
				if (spage != NULL)
					memmove(VsFlatSketchAt(spage, meta.sketch_group, sketch_bytes,
										   group_page * per_page + keep),
							VsFlatSketchAt(spage, meta.sketch_group, sketch_bytes,
										   group_page * per_page + i),
							sketch_bytes);
			}
			keep++;
		}
		remaining += keep;

		if (xlog != NULL)
		{
			vs_flat_page_set_items(page, words, keep);
			if (spage != NULL)
				VsFlatSketchCounts(spage)[group_page] = keep;
			GenericXLogFinish(xlog);
		}
		UnlockReleaseBuffer(buf);
		if (BufferIsValid(sbuf))
			UnlockReleaseBuffer(sbuf);
	}

	/* The metapage: fewer rows, a new generation and epoch if any went. */
	if (removed > 0)
	{
		metabuf = ReadBuffer(index, VS_FLAT_METAPAGE_BLKNO);
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		(void) vs_flat_page_meta(BufferGetPage(metabuf));
		xlog = GenericXLogStart(index);
		newmeta = VsFlatPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
		newmeta->ntuples = newmeta->ntuples >= removed ? newmeta->ntuples - removed : 0;
		newmeta->generation++;
		newmeta->epoch++;
		GenericXLogFinish(xlog);
		UnlockReleaseBuffer(metabuf);
	}

	stats->num_pages = RelationGetNumberOfBlocks(index);
	stats->num_index_tuples = (double) remaining;
	stats->tuples_removed += (double) removed;
	stats->estimated_count = false;
	return stats;
}
