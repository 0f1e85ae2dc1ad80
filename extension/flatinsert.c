/*
 * vs_flat: inserting one row (aminsert).
 *
 * Inserts are serialized by the metapage's exclusive lock: the vector goes to the last data page,
 * or to the next page when that one is full (next_free_page), and the metapage's row count,
 * generation, last page and norm bounds change in the same Generic WAL record as the data page.
 * Readers lock the metapage only to copy it, so they see either the state before or after an
 * insert.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "storage/bufmgr.h"

#include "flat.h"

/*
 * The page after the last data page, locked: the relation's next block, or the one past
 * last_block when it exists and is all zeros -- a page a crash left behind: the relation was
 * extended (which no WAL record covers) but the record that filled the page and moved last_block
 * was lost.  Reusing it keeps the data pages contiguous; extending past it would leave it
 * between them for good.  Inserts hold the metapage's lock, so no one else extends.
 */
static Buffer
next_free_page(Relation index, BlockNumber last_block)
{
	if (RelationGetNumberOfBlocks(index) > last_block + 1)
	{
		Buffer		buf = ReadBuffer(index, last_block + 1);

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		if (PageIsNew(BufferGetPage(buf)))
			return buf;
		UnlockReleaseBuffer(buf);
	}
	return vs_new_buffer(index, MAIN_FORKNUM);
}

bool
vs_flat_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			   Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			   IndexInfo *indexInfo)
{
	Vector	   *vec;
	Buffer		metabuf;
	Buffer		buf = InvalidBuffer;
	bool		newpage = false;
	VsFlatMetaPage meta;
	uint32		dim;
	uint32		storage;
	uint32		words;			/* of a row (flat.h) */
	GenericXLogState *xlog;
	Page		metapage;
	Page		page;
	VsFlatItem *item;
	int			nitems;

	if (isnull[0])
		return false;			/* NULL vectors are not indexed */

	vec = vs_index_vector(values[0], vs_index_is_sparsevec(index));

	metabuf = ReadBuffer(index, VS_FLAT_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = vs_flat_page_meta(BufferGetPage(metabuf));
	vs_flat_check_vector_dim(meta->dim, vec->dim, meta->storage);
	dim = vec->dim;
	storage = meta->storage;
	words = vs_store_words(dim, storage);

	/* Room on the last data page? */
	if (meta->last_block != VS_FLAT_METAPAGE_BLKNO)
	{
		buf = ReadBuffer(index, meta->last_block);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (!VsFlatIsDataPage(page) || VsFlatPageGetOpaque(page)->nitems >= VsFlatItemsPerPage(words))
		{
			UnlockReleaseBuffer(buf);
			buf = InvalidBuffer;
		}
	}
	if (!BufferIsValid(buf))
	{
		buf = next_free_page(index, meta->last_block);
		newpage = true;
	}

	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	page = GenericXLogRegisterBuffer(xlog, buf, newpage ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (newpage)
		vs_flat_init_page(page, VS_FLAT_DATA);

	nitems = VsFlatPageGetOpaque(page)->nitems;
	item = VsFlatPageGetItem(page, words, nitems);
	item->heap_tid = *heap_tid;
	item->unused = 0;
	vs_flat_store_row(item, vec->x, dim, storage);
	vs_flat_page_set_items(page, words, nitems + 1);

	meta = VsFlatPageGetMeta(metapage);
	meta->dim = dim;
	meta->ntuples++;
	meta->generation++;
	meta->last_block = BufferGetBlockNumber(buf);

	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(buf);
	UnlockReleaseBuffer(metabuf);

	return false;
}
