/*
 * vs_flat: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build writes the metapage, then fills data pages in backend memory from the table scan and
 * writes each full one as a new page with a full-image Generic WAL record, and finally stores the
 * row count and last page in the metapage (Generic WAL too).  With sketches (flat.h), a run of
 * sketch pages takes its blocks (all zeros, not logged) before its groups' data pages, and the
 * sketch pages, filled in backend memory meanwhile, are written over them when the run is
 * complete.  A crash during the
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
	char	   *sketches;		/* the run's sketch pages being filled (VS_FLAT_SKETCH_RUN) */
	BlockNumber run_block;		/* the run's first block */
	int			run_pages;		/* data pages of the run written */
} FlatBuildState;

static int
items_per_page(const FlatBuildState *state)
{
	return VsFlatItemsPerPage(vs_store_words(state->dim, state->storage));
}

/* Sketch page k of the run being filled. */
static Page
run_sketch(FlatBuildState *state, int k)
{
	return (Page) (state->sketches + (Size) k * BLCKSZ);
}

/* Empty sketch page images for the next run, their pd_lower past every slot (logged whole). */
static void
init_sketch_pages(FlatBuildState *state)
{
	for (int k = 0; k < VS_FLAT_SKETCH_RUN; k++)
	{
		vs_flat_init_page(run_sketch(state, k), VS_FLAT_SKETCH);
		((PageHeader) run_sketch(state, k))->pd_lower = ((PageHeader) run_sketch(state, k))->pd_upper;
	}
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

/* Writes the run's sketch pages that have groups over their reserved blocks. */
static void
flush_sketches(FlatBuildState *state)
{
	int			used = (state->run_pages + (int) state->sketch_group - 1) / (int) state->sketch_group;

	for (int k = 0; k < used; k++)
		(void) write_page(state->index, state->run_block + k, run_sketch(state, k));
	init_sketch_pages(state);
	state->run_pages = 0;
}

/* Writes the page being filled as a new page of the index. */
static void
flush_page(FlatBuildState *state)
{
	if (state->nitems == 0)
		return;
	if (state->sketch_group > 0)
	{
		const int	group = (int) state->sketch_group;

		VsFlatSketchCounts(run_sketch(state, state->run_pages / group))[state->run_pages % group] =
			state->nitems;
		if (state->run_pages == 0)
			for (int k = 0; k < VS_FLAT_SKETCH_RUN; k++)
			{
				Buffer		buf = vs_new_buffer(state->index, MAIN_FORKNUM);

				if (k == 0)
					state->run_block = BufferGetBlockNumber(buf);
				UnlockReleaseBuffer(buf);
			}
	}
	vs_flat_page_set_items(state->page, vs_store_words(state->dim, state->storage),
						   state->nitems);
	state->last_block = write_page(state->index, InvalidBlockNumber, state->page);
	if (state->sketch_group > 0)
	{
		Assert(vs_flat_sketch_block_of(state->sketch_group, state->last_block) ==
			   state->run_block + state->run_pages / state->sketch_group);
		if (++state->run_pages == VS_FLAT_SKETCH_RUN * (int) state->sketch_group)
			flush_sketches(state);
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
		vs_flat_store_sketch(run_sketch(state, state->run_pages / (int) state->sketch_group),
							 state->sketch_group, state->dim,
							 (state->run_pages % (int) state->sketch_group) * state->capacity +
							 state->nitems, vec->x);
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
	uint32		dim;
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
	dim = declared_dim(index, state.storage);
	if (dim > 0)
		set_dim(&state, dim);
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
	state.sketches = palloc((Size) VS_FLAT_SKETCH_RUN * BLCKSZ);
	init_sketch_pages(&state);
	state.last_block = VS_FLAT_METAPAGE_BLKNO;
	state.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_flat build",
										 ALLOCSET_DEFAULT_SIZES);

	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   build_callback, &state, NULL);
	flush_page(&state);
	if (state.sketch_group > 0 && state.run_pages > 0)
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
	pfree(state.sketches);

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
