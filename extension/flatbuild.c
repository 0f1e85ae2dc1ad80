/*
 * vs_flat: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build writes the metapage, then fills data pages in backend memory from the table scan and
 * writes each full one as a new page with a full-image Generic WAL record, and finally stores the
 * row count and last page in the metapage (Generic WAL too).  With sketches (flat.h), each group
 * of data pages is preceded by its sketch page, written empty when the group starts (so that it
 * takes its block first) and again, filled, when the group is complete.  A crash during the
 * build leaves an index that the aborted transaction never made visible.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "flat.h"

typedef struct FlatBuildState
{
	Relation	index;
	uint32		dim;			/* 0 until the first vector (unconstrained column) */
	int			capacity;		/* items per page, once dim is known */
	Page		page;			/* data page being filled */
	int			nitems;
	uint64		ntuples;
	BlockNumber last_block;
	MemoryContext tmpcxt;
	bool		sparse;			/* a sparsevec column, densified row by row */
	uint32		storage;		/* VS_STORE_F16 for a halfvec column */
	uint32		sketch_group;	/* data pages per sketch page (0: none), once dim is known */
	Page		sketch;			/* the group's sketch page being filled */
	BlockNumber sketch_block;
	int			group_pages;	/* data pages of the group written */
} FlatBuildState;

static int
items_per_page(const FlatBuildState *state)
{
	return VsFlatItemsPerPage(vs_store_words(state->dim, state->storage));
}

/* An empty sketch page image for the next group, its pd_lower past every slot (logged whole). */
static void
init_sketch_page(FlatBuildState *state)
{
	vs_flat_init_page(state->sketch, VS_FLAT_SKETCH);
	((PageHeader) state->sketch)->pd_lower = ((PageHeader) state->sketch)->pd_upper;
}

/* Once dim is known: the layout (items per page, sketches). */
static void
set_dim(FlatBuildState *state, uint32 dim)
{
	state->dim = dim;
	state->capacity = items_per_page(state);
	state->sketch_group = vs_flat_index_sketch_group(state->index, dim, state->storage);
}

/* Writes image as block blkno of the index (InvalidBlockNumber: a new block); its number. */
static BlockNumber
write_page(Relation index, BlockNumber blkno, Page image)
{
	Buffer		buf;
	GenericXLogState *xlog;
	Page		page;

	if (blkno == InvalidBlockNumber)
		buf = vs_new_buffer(index, MAIN_FORKNUM);
	else
	{
		buf = ReadBuffer(index, blkno);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	}
	xlog = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(xlog, buf, GENERIC_XLOG_FULL_IMAGE);
	memcpy(page, image, BLCKSZ);
	GenericXLogFinish(xlog);
	blkno = BufferGetBlockNumber(buf);
	UnlockReleaseBuffer(buf);
	return blkno;
}

/* Writes the group's sketch page, filled, over its empty one. */
static void
flush_sketches(FlatBuildState *state)
{
	if (state->group_pages == 0)
		return;
	(void) write_page(state->index, state->sketch_block, state->sketch);
	state->group_pages = 0;
}

/* Writes the page being filled as a new page of the index. */
static void
flush_page(FlatBuildState *state)
{
	if (state->nitems == 0)
		return;
	if (state->sketch_group > 0)
	{
		VsFlatSketchCounts(state->sketch)[state->group_pages] = state->nitems;
		if (state->group_pages == 0)
		{
			Page		empty = palloc(BLCKSZ);

			vs_flat_init_page(empty, VS_FLAT_SKETCH);
			state->sketch_block = write_page(state->index, InvalidBlockNumber, empty);
			pfree(empty);
		}
	}
	vs_flat_page_set_items(state->page, vs_store_words(state->dim, state->storage),
						   state->nitems);
	state->last_block = write_page(state->index, InvalidBlockNumber, state->page);
	if (state->sketch_group > 0)
	{
		Assert(VsFlatSketchBlockOf(state->sketch_group, state->last_block) == state->sketch_block);
		if (++state->group_pages == (int) state->sketch_group)
		{
			flush_sketches(state);
			init_sketch_page(state);
		}
	}

	vs_flat_init_page(state->page, VS_FLAT_DATA);
	state->nitems = 0;
}

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
			   void *arg)
{
	FlatBuildState *state = (FlatBuildState *) arg;
	MemoryContext old;
	Vector	   *vec;
	VsFlatItem *item;

	if (isnull[0])
		return;					/* NULL vectors are not indexed */

	old = MemoryContextSwitchTo(state->tmpcxt);
	vec = vs_index_vector(values[0], state->sparse);
	vs_flat_check_vector_dim(state->dim, vec->dim, state->storage);
	if (state->dim == 0)
		set_dim(state, vec->dim);
	if (state->nitems >= state->capacity)
		flush_page(state);

	item = VsFlatPageGetItem(state->page, vs_store_words(state->dim, state->storage),
							 state->nitems);
	item->heap_tid = *tid;
	item->unused = 0;
	vs_flat_store_row(item, vec->x, state->dim, state->storage);
	if (state->sketch_group > 0)
	{
		VsFlatMetaPageData layout = {.dim = state->dim, .storage = state->storage,
		.sketch_group = state->sketch_group};

		vs_flat_store_sketch(state->sketch, &layout, state->group_pages, state->nitems, vec->x);
	}
	state->nitems++;
	state->ntuples++;

	MemoryContextSwitchTo(old);
	MemoryContextReset(state->tmpcxt);
}

/* The dimension declared by the column's type modifier (checked), or 0 (vector without (n)). */
static uint32
declared_dim(Relation index, uint32 storage)
{
	uint32		dim = vs_declared_dim(index);

	if (dim > 0)
		vs_flat_check_dim((int) dim, storage);
	return dim;
}

IndexBuildResult *
vs_flat_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	FlatBuildState state;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsFlatMetaPage meta;
	double		reltuples;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	memset(&state, 0, sizeof(state));
	state.index = index;
	state.storage = vs_index_storage(index);
	state.sparse = vs_index_is_sparsevec(index);
	if (declared_dim(index, state.storage) > 0)
		set_dim(&state, declared_dim(index, state.storage));
	metric = vs_opclass_metric(index);

	/* Block 0: the metapage, so the index is readable even if the table is empty. */
	metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == VS_FLAT_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	vs_flat_init_metapage(metapage, state.dim, metric, state.storage);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	state.page = (Page) palloc(BLCKSZ);
	vs_flat_init_page(state.page, VS_FLAT_DATA);
	state.sketch = (Page) palloc(BLCKSZ);
	init_sketch_page(&state);
	state.last_block = VS_FLAT_METAPAGE_BLKNO;
	state.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_flat build",
										 ALLOCSET_DEFAULT_SIZES);

	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   build_callback, &state, NULL);
	flush_page(&state);
	flush_sketches(&state);

	/* Publish the data pages in the metapage. */
	metabuf = ReadBuffer(index, VS_FLAT_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_flat_page_meta(metapage);
	meta->dim = state.dim;
	meta->sketch_group = state.sketch_group;
	meta->ntuples = state.ntuples;
	meta->last_block = state.last_block;
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	MemoryContextDelete(state.tmpcxt);
	pfree(state.page);
	pfree(state.sketch);

	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) state.ntuples;
	return result;
}

/*
 * The init fork of an unlogged index: an empty metapage, WAL-logged unconditionally (the init
 * fork must survive a crash; the buffer manager handles the rest, as for hash indexes).
 */
void
vs_flat_buildempty(Relation index)
{
	uint32		storage = vs_index_storage(index);
	uint32		dim = declared_dim(index, storage);
	vs_metric	metric = vs_opclass_metric(index);
	Buffer		buf;
	Page		page;

	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	vs_flat_init_metapage(page, dim, metric, storage);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
