/*
 * vs_sss: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build reads every row into memory, has the engine choose the pivots (vs_sss_select: the
 * diameter by two sweeps, then one distance per row and pivot until a pivot is near: about
 * n * (2 + npivots) distances at most) and compute the table (n * npivots distances) -- each in the
 * GPU worker when it serves (metricworker.c: the host functions' results), else here -- and writes
 * the pivot pages, then the row pages (each row with its pivot distances), every page new and
 * logged whole (Generic WAL).  Progress: "loading rows", "choosing pivots", "computing the pivot
 * table and writing pages" (tuples_done: rows whose distances are computed).
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "sss.h"

static void
add_tuple(VsMetricBuild *st, Size pos, const float *dists, uint32 np)
{
	Size		len = st->offsets[pos + 1] - st->offsets[pos];
	Size		size = VS_SSS_TUPLE_SIZE(len, np);
	VsSssTuple *t = palloc0(size);

	vs_id_to_tid(st->ids[pos], &t->heap_tid);
	t->len = (uint32) len;
	t->npivots = np;
	memcpy(t->data, st->values + st->offsets[pos], sizeof(uint32) * len);
	if (np > 0)
		memcpy(VsSssTupleDistances(t), dists, sizeof(float) * np);
	vs_metric_build_add(st, (Item) t, size);
	pfree(t);
}

static void
init_metapage(Page page, Relation index, vs_metric metric, uint32 dim)
{
	VsSssOptions *opts = (VsSssOptions *) index->rd_options;
	VsSssMetaPage meta;

	vs_sss_init_page(page, VS_LC_META);
	meta = VsSssPageGetMeta(page);
	memset(meta, 0, sizeof(VsSssMetaPageData));
	meta->magic = VS_SSS_MAGIC;
	meta->version = VS_SSS_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->alpha = opts ? opts->alpha : VS_SSS_DEFAULT_ALPHA;
	meta->generation = vs_initial_generation();
	meta->pivot_head = meta->pivot_tail = InvalidBlockNumber;
	meta->row_head = meta->row_tail = InvalidBlockNumber;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsSssMetaPageData);
}

IndexBuildResult *
vs_sss_ambuild(Relation heap, Relation index, IndexInfo *indexInfo)
{
	VsSssOptions *opts = (VsSssOptions *) index->rd_options;
	IndexBuildResult *result;
	VsMetricBuild st;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsSssMetaPage meta;
	double		reltuples;
	double		alpha = opts ? opts->alpha : VS_SSS_DEFAULT_ALPHA;
	size_t		max_pivots = opts ? (size_t) opts->max_pivots : VS_SSS_MAX_PIVOTS;
	vs_mspace	space;
	vs_mspace	pspace;
	size_t	   *pivots;
	size_t		np = 0;
	double		diameter = 0.0;
	float	   *table;
	uint32	   *pvalues;
	uint64	   *poffsets;
	int			status;
	int			maxlen;
	BlockNumber pivot_head,
				pivot_tail;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));
	memset(&st, 0, sizeof(st));
	st.index = index;
	st.name = "vs_sss";
	st.page_id = VS_SSS_PAGE_ID;
	metric = vs_lc_opclass_metric(index);
	st.text = (int) metric == VS_METRIC_LEVENSHTEIN;
	st.dim = st.text ? 0 : vs_declared_dim(index);

	vs_metric_build_metapage(index, init_metapage, metric, st.dim);

	/* 1. every row into memory */
	reltuples = vs_metric_build_rows(&st, heap, index, indexInfo);

	/* 2. the pivots */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 3);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) st.n);
	space = vs_metric_build_space(&st, metric);
	pivots = palloc(sizeof(size_t) * VS_SSS_MAX_PIVOTS);
	max_pivots = Min(max_pivots, (size_t) VS_SSS_MAX_PIVOTS);
	if (vs_metric_worker_select_sss(&st, metric, alpha, (uint32) max_pivots, pivots, &np,
									&diameter))
		status = VS_OK;
	else
		status = vs_sss_select(&space, alpha, max_pivots, pivots, &np, &diameter, NULL);
	if (status != VS_OK)
		vs_engine_error(NULL, status);
	CHECK_FOR_INTERRUPTS();

	/* every row and its distances must fit on a page */
	maxlen = vs_sss_max_len((uint32) np);
	for (Size i = 0; i < st.n; i++)
		if (st.offsets[i + 1] - st.offsets[i] > (uint64) maxlen)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_sss cannot store an object of %zu elements with %zu pivot distances",
							(size_t) (st.offsets[i + 1] - st.offsets[i]), np),
					 errhint("Each row is stored on one %d-byte page with its distances to the "
							 "pivots: use fewer pivots (option max_pivots, or a larger alpha).",
							 BLCKSZ)));

	/* the pivots as a space of their own */
	pvalues = palloc_extended(sizeof(uint32) * (st.nvalues + 1), MCXT_ALLOC_HUGE);
	poffsets = palloc(sizeof(uint64) * (np + 1));
	poffsets[0] = 0;
	for (Size j = 0; j < np; j++)
	{
		Size		len = st.offsets[pivots[j] + 1] - st.offsets[pivots[j]];

		memcpy(pvalues + poffsets[j], st.values + st.offsets[pivots[j]], sizeof(uint32) * len);
		poffsets[j + 1] = poffsets[j] + len;
	}
	pspace = space;
	pspace.n = np;
	pspace.vectors = (const float *) pvalues;
	pspace.chars = pvalues;
	pspace.offsets = poffsets;

	/* 3. the table and the pages */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 4);
	table = palloc_extended(sizeof(float) * (st.n * np + 1), MCXT_ALLOC_HUGE);
	if (vs_metric_worker_table_sss(&st, metric, pivots, np, table))
	{
		status = VS_OK;
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) st.n);
	}
	else
		for (;;)
		{
			status = vs_sss_table(&pspace, &space, vs_metric_build_tick, NULL, table, NULL);
			if (status != VS_CANCELLED)
				break;
			CHECK_FOR_INTERRUPTS();
		}
	if (status != VS_OK)
		vs_engine_error(NULL, status);

	vs_metric_build_chain(&st, VS_LC_CENTERS);
	for (Size j = 0; j < np; j++)
		add_tuple(&st, pivots[j], NULL, 0);
	vs_metric_build_end_chain(&st);
	pivot_head = st.head;
	pivot_tail = st.tail;
	vs_metric_build_chain(&st, VS_LC_BUCKETS);
	for (Size i = 0; i < st.n; i++)
	{
		if (i % 4096 == 0)
			CHECK_FOR_INTERRUPTS();
		add_tuple(&st, i, table + i * np, (uint32) np);
	}
	vs_metric_build_end_chain(&st);

	metabuf = ReadBuffer(index, 0);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_sss_page_meta(metapage);
	meta->dim = st.dim;
	meta->npivots = (uint32) np;
	meta->diameter = diameter;
	meta->ntuples = st.n;
	meta->pivot_head = pivot_head;
	meta->pivot_tail = pivot_tail;
	meta->row_head = st.head;
	meta->row_tail = st.tail;
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	MemoryContextDelete(st.tmpcxt);
	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) st.n;
	return result;
}

void
vs_sss_ambuildempty(Relation index)
{
	vs_metric_buildempty(index, init_metapage);
}
