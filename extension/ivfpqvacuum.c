/*
 * vs_ivfpq: VACUUM (ambulkdelete; amvacuumcleanup is every kind's, amutils.c).
 *
 * Each list (and the pending chain) is handled under the metapage's exclusive lock, which keeps
 * inserts out meanwhile: its live entries are read from the oldest page to the newest, and when
 * any entry was dead they are written back densely into the oldest pages, one Generic WAL record
 * per page, oldest first.  An entry therefore only ever moves to an older page of its own list, and
 * readers walk a chain from the newest page to the oldest, so a concurrent reader may see an entry
 * twice (it deduplicates) but never misses one.  The directory entry's `last` then points at the
 * newest page that still holds entries (inserts continue there); the pages emptied behind it keep
 * their links for readers that started before and are not reused (REINDEX returns the space).
 * The list's count, the metapage's row count and its generation change in one record.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"

#include "ivfpq.h"

typedef struct ChainResult
{
	uint32		live;
	uint32		removed;
	BlockNumber new_last;		/* valid if the chain's last page changed */
} ChainResult;

/*
 * Vacuums one chain (the caller holds the metapage's exclusive lock).  last: its newest page.
 */
static void
vacuum_chain(Relation index, BufferAccessStrategy strategy, BlockNumber last, uint32 list,
			 const VsIvfpqLayout *layout, IndexBulkDeleteCallback callback, void *callback_state,
			 ChainResult *res)
{
	BlockNumber *blocks = NULL;
	int			nblocks = 0;
	int			maxblocks = 0;
	ItemPointerData *tids = NULL;
	uint8	   *codes = NULL;
	float	   *vecs = NULL;
	int64		n = 0;
	int64		cap = 0;
	int64		pos = 0;
	int			lastfull = -1;

	memset(res, 0, sizeof(*res));
	res->new_last = InvalidBlockNumber;

	/* the chain's pages, newest first */
	for (BlockNumber blkno = last; BlockNumberIsValid(blkno);)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, strategy);
		Page		page;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (!VsIvfpqIsEntryPage(page) || VsIvfpqPageGetOpaque(page)->list != list)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index \"%s\": block %u is not a page of list %u",
							RelationGetRelationName(index), blkno, list),
					 errhint("REINDEX the index.")));
		if (nblocks == maxblocks)
		{
			maxblocks = Max(16, maxblocks * 2);
			blocks = blocks ? repalloc(blocks, sizeof(BlockNumber) * maxblocks)
				: palloc(sizeof(BlockNumber) * maxblocks);
		}
		blocks[nblocks++] = blkno;
		blkno = VsIvfpqPageGetOpaque(page)->prev;
		UnlockReleaseBuffer(buf);
	}
	if (nblocks == 0)
		return;

	/* live entries, oldest page first */
	for (int b = nblocks - 1; b >= 0; b--)
	{
		Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, blocks[b], RBM_NORMAL, strategy);
		Page		page;
		int			nitems;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		nitems = Min((int) VsIvfpqPageGetOpaque(page)->nitems, layout->capacity);
		if (n + nitems > cap)
		{
			cap = Max(cap * 2, n + nitems);
			tids = tids ? repalloc_huge(tids, sizeof(ItemPointerData) * cap)
				: palloc_extended(sizeof(ItemPointerData) * cap, MCXT_ALLOC_HUGE);
			codes = codes ? repalloc_huge(codes, Max((Size) layout->code_size * cap, 1))
				: palloc_extended(Max((Size) layout->code_size * cap, 1), MCXT_ALLOC_HUGE);
			if (layout->vdim > 0)
				vecs = vecs ? repalloc_huge(vecs, sizeof(float) * layout->vdim * cap)
					: palloc_extended(sizeof(float) * layout->vdim * cap, MCXT_ALLOC_HUGE);
		}
		for (int i = 0; i < nitems; i++)
		{
			ItemPointer tid = &VsIvfpqPageTids(page)[i];

			if (callback(tid, callback_state))
			{
				res->removed++;
				continue;
			}
			tids[n] = *tid;
			if (layout->code_size > 0)
				memcpy(codes + n * layout->code_size,
					   VsIvfpqPageCodes(page, layout) + (Size) i * layout->code_size,
					   layout->code_size);
			if (layout->vdim > 0)
				memcpy(vecs + n * layout->vdim,
					   VsIvfpqPageVecs(page, layout) + (Size) i * layout->vdim,
					   sizeof(float) * layout->vdim);
			n++;
		}
		UnlockReleaseBuffer(buf);
	}
	res->live = (uint32) n;

	if (res->removed > 0)
	{
		/* write back densely, oldest page first */
		for (int b = nblocks - 1; b >= 0; b--)
		{
			Buffer		buf = ReadBufferExtended(index, MAIN_FORKNUM, blocks[b], RBM_NORMAL,
												 strategy);
			GenericXLogState *xlog;
			Page		page;
			int			k = (int) Min((int64) layout->capacity, n - pos);
			int			old;

			LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
			old = VsIvfpqPageGetOpaque(BufferGetPage(buf))->nitems;
			if (k == 0 && old == 0)
			{
				UnlockReleaseBuffer(buf);
				continue;
			}
			xlog = GenericXLogStart(index);
			page = GenericXLogRegisterBuffer(xlog, buf, 0);
			if (k > 0)
			{
				memcpy(VsIvfpqPageTids(page), tids + pos, sizeof(ItemPointerData) * k);
				if (layout->code_size > 0)
					memcpy(VsIvfpqPageCodes(page, layout), codes + pos * layout->code_size,
						   (Size) layout->code_size * k);
				if (layout->vdim > 0)
					memcpy(VsIvfpqPageVecs(page, layout), vecs + pos * layout->vdim,
						   sizeof(float) * layout->vdim * k);
				lastfull = b;
			}
			vs_ivfpq_page_set_items(page, k);
			GenericXLogFinish(xlog);
			UnlockReleaseBuffer(buf);
			pos += k;
		}
		/* inserts continue on the newest page that holds entries (the oldest if none does) */
		res->new_last = blocks[lastfull >= 0 ? lastfull : nblocks - 1];
		if (res->new_last == last)
			res->new_last = InvalidBlockNumber;
	}
	pfree(blocks);
	if (tids)
	{
		pfree(tids);
		pfree(codes);
		if (vecs)
			pfree(vecs);
	}
}

IndexBulkDeleteResult *
vs_ivfpq_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
					IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	VsIvfpqMetaPageData snap;
	VsIvfpqLayout layout;
	VsIvfpqLayout playout;
	uint64		removed = 0;
	uint64		remaining = 0;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	vs_ivfpq_read_meta(index, &snap);
	vs_ivfpq_meta_layout(&snap, false, &layout);
	vs_ivfpq_meta_layout(&snap, true, &playout);

	/* lists (the pending chain is number `lists`) */
	for (uint32 l = 0; l <= (snap.trained ? snap.lists : 0); l++)
	{
		bool		is_pending = (l == (snap.trained ? snap.lists : 0));
		Buffer		metabuf;
		Buffer		dirbuf = InvalidBuffer;
		VsIvfpqMetaPage meta;
		VsIvfpqListEntry *entry = NULL;
		BlockNumber last;
		uint64		counted;		/* the chain's count before */
		ChainResult res;

		vacuum_delay_point();
		metabuf = ReadBufferExtended(index, MAIN_FORKNUM, VS_IVFPQ_METAPAGE_BLKNO, RBM_NORMAL,
									 info->strategy);
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		meta = vs_ivfpq_page_meta(BufferGetPage(metabuf));
		if (is_pending)
		{
			last = meta->pending_last;
			counted = meta->npending;
		}
		else
		{
			dirbuf = ReadBufferExtended(index, MAIN_FORKNUM,
										meta->directory_start + l / VS_IVFPQ_DIR_PER_PAGE,
										RBM_NORMAL, info->strategy);
			LockBuffer(dirbuf, BUFFER_LOCK_EXCLUSIVE);
			entry = (VsIvfpqListEntry *) PageGetContents(BufferGetPage(dirbuf)) +
				l % VS_IVFPQ_DIR_PER_PAGE;
			last = entry->last;
			counted = entry->count;
		}

		vacuum_chain(index, info->strategy, last, is_pending ? VS_IVFPQ_PENDING_LIST : l,
					 is_pending ? &playout : &layout, callback, callback_state, &res);
		removed += res.removed;
		remaining += res.live;

		if (res.removed > 0)
		{
			GenericXLogState *xlog = GenericXLogStart(index);

			meta = VsIvfpqPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
			if (is_pending)
			{
				meta->npending = res.live;
				if (BlockNumberIsValid(res.new_last))
					meta->pending_last = res.new_last;
			}
			else
			{
				entry = (VsIvfpqListEntry *) PageGetContents(GenericXLogRegisterBuffer(xlog, dirbuf, 0)) +
					l % VS_IVFPQ_DIR_PER_PAGE;
				entry->count = res.live;
				if (BlockNumberIsValid(res.new_last))
					entry->last = res.new_last;
			}
			/*
			 * The row count moves with the chain's count, so that it stays their sum even when the
			 * count no longer matched the pages (a VACUUM interrupted while compacting).
			 */
			meta->ntuples = meta->ntuples + res.live >= counted ?
				meta->ntuples + res.live - counted : 0;
			meta->generation++;
			GenericXLogFinish(xlog);
		}
		if (BufferIsValid(dirbuf))
			UnlockReleaseBuffer(dirbuf);
		UnlockReleaseBuffer(metabuf);
	}

	stats->num_pages = RelationGetNumberOfBlocks(index);
	stats->num_index_tuples = (double) remaining;
	stats->tuples_removed += (double) removed;
	stats->estimated_count = false;
	return stats;
}
