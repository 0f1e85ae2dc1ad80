/*
 * vs_flat: inserting one row (aminsert).
 *
 * Inserts are serialized by the metapage's exclusive lock: the vector goes to the last data page,
 * or to the next page when that one is full (next_free_page), and the metapage's row count,
 * generation and last page change in the same Generic WAL record as the data page.  With
 * sketches (flat.h), the row's sketch and its page's count go into the group's sketch page in the
 * same record; it is locked before the data page, and a group's first page brings its sketch page
 * to life (reserved, all zeros, when its run of sketch pages began: sketched_pages).
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

/*
 * Block blkno, new (all zeros), locked: an index with sketches finds its pages by arithmetic, so
 * the page must land exactly there (only a crash leaves zero pages past last_block).
 */
static Buffer
new_page_at(Relation index, BlockNumber blkno)
{
	Buffer		buf;

	if (blkno < RelationGetNumberOfBlocks(index))
	{
		buf = ReadBuffer(index, blkno);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	}
	else
		buf = vs_new_buffer(index, MAIN_FORKNUM);
	if (BufferGetBlockNumber(buf) != blkno || !PageIsNew(BufferGetPage(buf)))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_flat index \"%s\" has an unexpected page at block %u",
						RelationGetRelationName(index), BufferGetBlockNumber(buf)),
				 errhint("REINDEX the index.")));
	return buf;
}

/*
 * Locks the pages for a row of an index with sketches: *sbuf, the group's sketch page, then *buf,
 * the data page (new ones flagged: to be initialized in the insert's record).  A new run of
 * sketch pages (flat.h) takes all its blocks at once, the later ones left all zeros until their
 * group's first page comes.
 */
static void
sketched_pages(Relation index, const VsFlatMetaPageData *meta, int per_page, Buffer *sbuf,
			   bool *newsketch, Buffer *buf, bool *newpage)
{
	const uint32 group = meta->sketch_group;
	BlockNumber next;

	*newsketch = *newpage = false;
	if (meta->last_block != VS_FLAT_METAPAGE_BLKNO)
	{
		*sbuf = ReadBuffer(index, vs_flat_sketch_block_of(group, meta->last_block));
		LockBuffer(*sbuf, BUFFER_LOCK_EXCLUSIVE);
		*buf = ReadBuffer(index, meta->last_block);
		LockBuffer(*buf, BUFFER_LOCK_EXCLUSIVE);
		if (VsFlatIsDataPage(BufferGetPage(*buf)) &&
			VsFlatPageGetOpaque(BufferGetPage(*buf))->nitems < per_page)
			return;
		UnlockReleaseBuffer(*buf);
		next = meta->last_block + 1;
	}
	else
	{
		*sbuf = InvalidBuffer;
		next = VS_FLAT_FIRST_DATA_BLKNO;
	}
	*newpage = true;
	if (vs_flat_is_sketch_block(group, next))
	{
		/* a new run: its first sketch page, the others reserved, then the first data page */
		if (BufferIsValid(*sbuf))
			UnlockReleaseBuffer(*sbuf);
		*sbuf = new_page_at(index, next);
		*newsketch = true;
		for (int k = 1; k < VS_FLAT_SKETCH_RUN; k++)
			UnlockReleaseBuffer(new_page_at(index, next + k));
		next += VS_FLAT_SKETCH_RUN;
	}
	else if (vs_flat_group_page(group, next) == 0)
	{
		/* the first page of a group: its sketch page, reserved with the run, comes to life */
		if (BufferIsValid(*sbuf))
			UnlockReleaseBuffer(*sbuf);
		*sbuf = new_page_at(index, vs_flat_sketch_block_of(group, next));
		*newsketch = true;
	}
	*buf = new_page_at(index, next);
}

bool
vs_flat_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
			   Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
			   IndexInfo *indexInfo)
{
	Vector	   *vec;
	Buffer		metabuf;
	Buffer		buf = InvalidBuffer;
	Buffer		sbuf = InvalidBuffer;	/* the group's sketch page (sketches) */
	bool		newpage = false;
	bool		newsketch = false;
	Page		spage = NULL;
	int			per_page;
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
	per_page = VsFlatItemsPerPage(words);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = VsFlatPageGetMeta(metapage);
	/* the first row of an index without pages decides its layout (its option, its dim) */
	if (meta->last_block == VS_FLAT_METAPAGE_BLKNO)
		meta->sketch_group = vs_flat_index_sketch_group(index, dim, storage);

	if (meta->sketch_group > 0)
		sketched_pages(index, meta, per_page, &sbuf, &newsketch, &buf, &newpage);
	/* Room on the last data page? */
	else if (meta->last_block != VS_FLAT_METAPAGE_BLKNO)
	{
		buf = ReadBuffer(index, meta->last_block);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (!VsFlatIsDataPage(page) || VsFlatPageGetOpaque(page)->nitems >= per_page)
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

	if (BufferIsValid(sbuf))
	{
		spage = GenericXLogRegisterBuffer(xlog, sbuf, newsketch ? GENERIC_XLOG_FULL_IMAGE : 0);
		if (newsketch)
		{
			vs_flat_init_page(spage, VS_FLAT_SKETCH);
			((PageHeader) spage)->pd_lower = ((PageHeader) spage)->pd_upper;
		}
	}
	page = GenericXLogRegisterBuffer(xlog, buf, newpage ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (newpage)
		vs_flat_init_page(page, VS_FLAT_DATA);

	nitems = VsFlatPageGetOpaque(page)->nitems;
	item = VsFlatPageGetItem(page, words, nitems);
	item->heap_tid = *heap_tid;
	item->unused = 0;
	vs_flat_store_row(item, vec->x, dim, storage);
	vs_flat_page_set_items(page, words, nitems + 1);

	meta->dim = dim;
	if (spage != NULL)
	{
		int			group_page = vs_flat_group_page(meta->sketch_group, BufferGetBlockNumber(buf));

		vs_flat_store_sketch(spage, meta->sketch_group, dim, group_page * per_page + nitems, vec->x);
		VsFlatSketchCounts(spage)[group_page] = nitems + 1;
	}
	meta->ntuples++;
	meta->generation++;
	meta->last_block = BufferGetBlockNumber(buf);

	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(buf);
	if (BufferIsValid(sbuf))
		UnlockReleaseBuffer(sbuf);
	UnlockReleaseBuffer(metabuf);

	return false;
}
