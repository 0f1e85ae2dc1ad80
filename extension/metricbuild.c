/*
 * What the builds of vs_lc and vs_sss share (lcbuild.c, sssbuild.c): every row read into memory
 * (vectors, or the characters of each text, back to back), the engine's progress callback, page
 * chains written page by page (each page new and logged whole: Generic WAL; nothing else extends
 * the index during its build) and the init fork of an unlogged index.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "lc.h"

void
vs_metric_init_page(Page page, uint16 flags, uint16 page_id)
{
	VsLcPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(VsLcPageOpaqueData));
	opaque = VsLcPageGetOpaque(page);
	opaque->next = InvalidBlockNumber;
	opaque->flags = flags;
	opaque->page_id = page_id;
}

/* Block 0, the metapage (init_metapage's), so the index is readable even if the table is empty. */
void
vs_metric_build_metapage(Relation index, VsMetricInitMeta init_metapage, vs_metric metric,
						 uint32 dim)
{
	Buffer		metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	GenericXLogState *xlog;
	Page		metapage;

	Assert(BufferGetBlockNumber(metabuf) == VS_LC_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	init_metapage(metapage, index, metric, dim);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);
}

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
			   void *arg)
{
	VsMetricBuild *st = (VsMetricBuild *) arg;
	MemoryContext old;
	VsLcValue	v;

	if (isnull[0])
		return;					/* NULLs are not indexed */
	old = MemoryContextSwitchTo(st->tmpcxt);
	v = vs_lc_value(values[0], st->text, &st->dim, "row");
	MemoryContextSwitchTo(old);

	if (st->n + 1 >= st->cap)
	{
		st->cap *= 2;
		st->ids = repalloc_huge(st->ids, sizeof(int64) * st->cap);
		st->offsets = repalloc_huge(st->offsets, sizeof(uint64) * (st->cap + 1));
	}
	while (st->nvalues + v.len > st->capvalues)
	{
		st->capvalues *= 2;
		st->values = repalloc_huge(st->values, sizeof(uint32) * st->capvalues);
	}
	st->ids[st->n] = vs_tid_to_id(tid);
	memcpy(st->values + st->nvalues, v.data, sizeof(uint32) * v.len);
	st->nvalues += v.len;
	st->n++;
	st->offsets[st->n] = st->nvalues;
	MemoryContextReset(st->tmpcxt);
	if (st->n % 1024 == 0)
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, st->n);
}

/*
 * Phase 2, "loading rows": every row of the table into st (index, text, dim and name set by the
 * caller); returns the heap's tuple count.
 */
double
vs_metric_build_rows(VsMetricBuild *st, Relation heap, Relation index, IndexInfo *indexInfo)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 2);
	st->cap = 1024;
	st->ids = palloc_extended(sizeof(int64) * st->cap, MCXT_ALLOC_HUGE);
	st->offsets = palloc_extended(sizeof(uint64) * (st->cap + 1), MCXT_ALLOC_HUGE);
	st->offsets[0] = 0;
	st->capvalues = 16384;
	st->values = palloc_extended(sizeof(uint32) * st->capvalues, MCXT_ALLOC_HUGE);
	st->tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_lc / vs_sss build",
									   ALLOCSET_DEFAULT_SIZES);
	return table_index_build_scan(heap, index, indexInfo, true, true, build_callback, st, NULL);
}

/* The rows as the engine's space (strings, or vectors under metric). */
vs_mspace
vs_metric_build_space(const VsMetricBuild *st, vs_metric metric)
{
	vs_mspace	space;

	memset(&space, 0, sizeof(space));
	space.kind = st->text ? VS_MSPACE_STRINGS : VS_MSPACE_VECTORS;
	space.metric = st->text ? VS_METRIC_L2 : metric;
	space.dim = st->dim;
	space.n = st->n;
	space.vectors = (const float *) st->values;
	space.chars = st->values;
	space.offsets = st->offsets;
	return space;
}

/* Progress and interrupts while the engine builds. */
int
vs_metric_build_tick(void *arg, size_t done)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) done);
	return InterruptPending ? 1 : 0;
}

/* Writes the page being filled as a new page; more: another page of the chain follows. */
static void
flush_page(VsMetricBuild *st, bool more)
{
	Buffer		buf;
	GenericXLogState *xlog;
	Page		page;
	BlockNumber blkno;

	if (PageGetMaxOffsetNumber(st->page) == 0)
		return;
	buf = vs_new_buffer(st->index, MAIN_FORKNUM);
	blkno = BufferGetBlockNumber(buf);
	/* nothing else extends the index during its build: the chain's next page is the next block */
	VsLcPageGetOpaque(st->page)->next = more ? blkno + 1 : InvalidBlockNumber;
	xlog = GenericXLogStart(st->index);
	page = GenericXLogRegisterBuffer(xlog, buf, GENERIC_XLOG_FULL_IMAGE);
	memcpy(page, st->page, BLCKSZ);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(buf);
	if (st->head == InvalidBlockNumber)
		st->head = blkno;
	st->tail = blkno;
	vs_metric_init_page(st->page, st->page_flags, st->page_id);
}

/* Starts a chain of pages of these flags (st->head, st->tail: its ends once it is finished). */
void
vs_metric_build_chain(VsMetricBuild *st, uint16 flags)
{
	if (st->page == NULL)
		st->page = palloc(BLCKSZ);
	st->page_flags = flags;
	st->head = st->tail = InvalidBlockNumber;
	vs_metric_init_page(st->page, flags, st->page_id);
}

/* Appends a tuple to the chain, on a new page when the current one is full. */
void
vs_metric_build_add(VsMetricBuild *st, Item tuple, Size size)
{
	if (PageGetFreeSpace(st->page) < size)
		flush_page(st, true);
	if (PageAddItem(st->page, tuple, size, InvalidOffsetNumber, false, false) ==
		InvalidOffsetNumber)
		elog(ERROR, "%s: could not add a tuple of %zu bytes to a new page", st->name, size);
}

void
vs_metric_build_end_chain(VsMetricBuild *st)
{
	flush_page(st, false);
}

/* The init fork of an unlogged index: an empty metapage, WAL-logged unconditionally. */
void
vs_metric_buildempty(Relation index, VsMetricInitMeta init_metapage)
{
	vs_metric	metric = vs_lc_opclass_metric(index);
	uint32		dim = (int) metric == VS_METRIC_LEVENSHTEIN ? 0 : vs_declared_dim(index);
	Buffer		buf;
	Page		page;

	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	init_metapage(page, index, metric, dim);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
