/*
 * vs_lc: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build reads every row into memory (vectors, or the characters of each text), has the engine
 * build the List of Clusters (vs_lc_build: the distance evaluations are the whole cost, about
 * n^2 / (2 (bucket_size + 1))), and writes the pages in the order of lc.h: every center with its
 * covering radius, then every bucket back to back, each page new and logged whole (Generic WAL).
 * Progress (pg_stat_progress_create_index): "loading rows", "choosing centers and buckets" with
 * tuples_done counting the rows placed, "writing pages".
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

typedef struct LcBuildState
{
	Relation	index;
	bool		text;
	uint32		dim;
	Size		n;
	Size		cap;
	int64	   *ids;
	uint32	   *values;			/* floats or characters, back to back */
	Size		nvalues;
	Size		capvalues;
	uint64	   *offsets;		/* n + 1 */
	MemoryContext tmpcxt;
	/* writing */
	Page		page;
	uint16		page_flags;
	BlockNumber head;
	BlockNumber tail;
} LcBuildState;

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
			   void *arg)
{
	LcBuildState *st = (LcBuildState *) arg;
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

/* Progress and interrupts while the engine builds. */
static int
build_tick(void *arg, size_t done)
{
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) done);
	return InterruptPending ? 1 : 0;
}

/* Writes the page being filled as a new page; more: another page of the chain follows. */
static void
flush_page(LcBuildState *st, bool more)
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
	vs_lc_init_page(st->page, st->page_flags);
}

static void
add_tuple(LcBuildState *st, Size pos, uint32 cluster, double radius)
{
	Size		len = st->offsets[pos + 1] - st->offsets[pos];
	Size		size = VS_LC_TUPLE_SIZE(len);
	VsLcTuple  *t = palloc0(size);

	vs_id_to_tid(st->ids[pos], &t->heap_tid);
	t->cluster = cluster;
	t->len = (uint32) len;
	t->radius = radius;
	memcpy(t->data, st->values + st->offsets[pos], sizeof(uint32) * len);
	if (PageGetFreeSpace(st->page) < size)
		flush_page(st, true);
	if (PageAddItem(st->page, (Item) t, size, InvalidOffsetNumber, false, false) ==
		InvalidOffsetNumber)
		elog(ERROR, "vs_lc: could not add a tuple of %zu bytes to a new page", size);
	pfree(t);
}

void
vs_lc_init_metapage(Page page, Relation index, vs_metric metric, uint32 dim)
{
	VsLcOptions *opts = (VsLcOptions *) index->rd_options;
	VsLcMetaPage meta;
	int			bucket = opts ? opts->bucket_size : 0;

	if (bucket == 0)
		bucket = (int) metric == VS_METRIC_LEVENSHTEIN ? VS_LC_DEFAULT_BUCKET_TEXT
			: VS_LC_DEFAULT_BUCKET_VECTOR;
	vs_lc_init_page(page, VS_LC_META);
	meta = VsLcPageGetMeta(page);
	memset(meta, 0, sizeof(VsLcMetaPageData));
	meta->magic = VS_LC_MAGIC;
	meta->version = VS_LC_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->bucket_size = (uint32) bucket;
	meta->generation = vs_initial_generation();
	meta->center_head = meta->center_tail = InvalidBlockNumber;
	meta->bucket_head = meta->bucket_tail = InvalidBlockNumber;
	meta->seed = opts ? (uint64) opts->seed : 1;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsLcMetaPageData);
}

IndexBuildResult *
vs_lc_ambuild(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	LcBuildState st;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsLcMetaPage meta;
	VsLcMetaPageData m;
	double		reltuples;
	size_t	   *centers,
			   *members,
			   *offsets;
	double	   *radii;
	size_t		ncenters = 0;
	vs_mspace	space;
	int			status;
	BlockNumber center_head,
				center_tail;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	memset(&st, 0, sizeof(st));
	st.index = index;
	metric = vs_lc_opclass_metric(index);
	st.text = (int) metric == VS_METRIC_LEVENSHTEIN;
	st.dim = st.text ? 0 : vs_declared_dim(index);
	if (st.dim > (uint32) VS_LC_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_lc indexes support at most %d dimensions, not %u",
						VS_LC_MAX_LEN, st.dim),
				 errhint("Each vector is stored on one %d-byte page.", BLCKSZ)));

	/* Block 0: the metapage, so the index is readable even if the table is empty. */
	metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == VS_LC_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	vs_lc_init_metapage(metapage, index, metric, st.dim);
	memcpy(&m, VsLcPageGetMeta(metapage), sizeof(m));
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	/* 1. every row into memory */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 2);
	st.cap = 1024;
	st.ids = palloc_extended(sizeof(int64) * st.cap, MCXT_ALLOC_HUGE);
	st.offsets = palloc_extended(sizeof(uint64) * (st.cap + 1), MCXT_ALLOC_HUGE);
	st.offsets[0] = 0;
	st.capvalues = 16384;
	st.values = palloc_extended(sizeof(uint32) * st.capvalues, MCXT_ALLOC_HUGE);
	st.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_lc build", ALLOCSET_DEFAULT_SIZES);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true, build_callback, &st,
									   NULL);

	/* 2. the list */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 3);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) st.n);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, 0);
	memset(&space, 0, sizeof(space));
	space.kind = st.text ? VS_MSPACE_STRINGS : VS_MSPACE_VECTORS;
	space.metric = st.text ? VS_METRIC_L2 : metric;
	space.dim = st.dim;
	space.n = st.n;
	space.vectors = (const float *) st.values;
	space.chars = st.values;
	space.offsets = st.offsets;
	centers = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	members = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	offsets = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	radii = palloc_extended(sizeof(double) * (st.n + 1), MCXT_ALLOC_HUGE);
	for (;;)
	{
		status = vs_lc_build(&space, m.bucket_size, m.seed, build_tick, NULL, centers, &ncenters,
							 members, offsets, radii, NULL);
		if (status != VS_CANCELLED)
			break;
		CHECK_FOR_INTERRUPTS();	/* a spurious wakeup: start over */
	}
	if (status == VS_OUT_OF_MEMORY)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory building a vs_lc index over %zu rows", st.n)));
	if (status != VS_OK)
		vs_engine_error(NULL, status);

	/* 3. the pages: centers, then buckets */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 4);
	st.page = palloc(BLCKSZ);
	st.page_flags = VS_LC_CENTERS;
	st.head = st.tail = InvalidBlockNumber;
	vs_lc_init_page(st.page, st.page_flags);
	for (Size c = 0; c < ncenters; c++)
		add_tuple(&st, centers[c], (uint32) c, radii[c]);
	flush_page(&st, false);
	center_head = st.head;
	center_tail = st.tail;

	st.page_flags = VS_LC_BUCKETS;
	st.head = st.tail = InvalidBlockNumber;
	vs_lc_init_page(st.page, st.page_flags);
	for (Size c = 0; c < ncenters; c++)
	{
		CHECK_FOR_INTERRUPTS();
		for (Size i = offsets[c]; i < offsets[c + 1]; i++)
			add_tuple(&st, members[i], (uint32) c, 0.0);
	}
	flush_page(&st, false);

	/* Publish the chains in the metapage. */
	metabuf = ReadBuffer(index, VS_LC_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_lc_page_meta(metapage);
	meta->dim = st.dim;
	meta->ntuples = st.n;
	meta->ncenters = (uint32) ncenters;
	meta->center_head = center_head;
	meta->center_tail = center_tail;
	meta->bucket_head = st.head;
	meta->bucket_tail = st.tail;
	meta->last_count = ncenters > 0 ? (uint32) (offsets[ncenters] - offsets[ncenters - 1]) : 0;
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	MemoryContextDelete(st.tmpcxt);
	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) st.n;
	return result;
}

/* The init fork of an unlogged index: an empty metapage, WAL-logged unconditionally. */
void
vs_lc_ambuildempty(Relation index)
{
	vs_metric	metric = vs_lc_opclass_metric(index);
	uint32		dim = (int) metric == VS_METRIC_LEVENSHTEIN ? 0 : vs_declared_dim(index);
	Buffer		buf;
	Page		page;

	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	vs_lc_init_metapage(page, index, metric, dim);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
