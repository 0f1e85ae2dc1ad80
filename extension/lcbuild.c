/*
 * vs_lc: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build reads every row into memory (vectors, or the characters of each text), has the engine
 * build the List of Clusters (the distance evaluations are the whole cost, about
 * n^2 / (2 (bucket_size + 1))) -- in the GPU worker when it serves (metricworker.c: the same list
 * as vs_lc_build's), else here with vs_lc_build -- and writes the pages in the order of lc.h: every
 * center with its covering radius, then every bucket back to back, each page new and logged whole
 * (Generic WAL).  Progress (pg_stat_progress_create_index): "loading rows", "choosing centers and
 * buckets" with tuples_done counting the rows placed (all at once when the worker built), "writing
 * pages".
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "lc.h"

static void
add_tuple(VsMetricBuild *st, Size pos, uint32 cluster, double radius)
{
	Size		len = st->offsets[pos + 1] - st->offsets[pos];
	Size		size = VS_LC_TUPLE_SIZE(len);
	VsLcTuple  *t = palloc0(size);

	vs_id_to_tid(st->ids[pos], &t->heap_tid);
	t->cluster = cluster;
	t->len = (uint32) len;
	t->radius = radius;
	memcpy(t->data, st->values + st->offsets[pos], sizeof(uint32) * len);
	vs_metric_build_add(st, (Item) t, size);
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
	VsMetricBuild st;
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
	st.name = "vs_lc";
	st.page_id = VS_LC_PAGE_ID;
	metric = vs_lc_opclass_metric(index);
	st.text = (int) metric == VS_METRIC_LEVENSHTEIN;
	st.dim = st.text ? 0 : vs_declared_dim(index);
	if (st.dim > (uint32) VS_LC_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_lc indexes support at most %d dimensions, not %u",
						VS_LC_MAX_LEN, st.dim),
				 errhint("Each vector is stored on one %d-byte page.", BLCKSZ)));

	vs_metric_build_metapage(index, vs_lc_init_metapage, metric, st.dim);
	vs_lc_read_meta(index, &m);

	/* 1. every row into memory */
	reltuples = vs_metric_build_rows(&st, heap, index, indexInfo);

	/* 2. the list */
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, 3);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, (int64) st.n);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, 0);
	space = vs_metric_build_space(&st, metric);
	centers = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	members = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	offsets = palloc_extended(sizeof(size_t) * (st.n + 1), MCXT_ALLOC_HUGE);
	radii = palloc_extended(sizeof(double) * (st.n + 1), MCXT_ALLOC_HUGE);
	if (vs_metric_worker_lc(&st, metric, m.bucket_size, m.seed, centers, &ncenters, members,
							offsets, radii))
	{
		status = VS_OK;
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, (int64) st.n);
	}
	else
		for (;;)
		{
			status = vs_lc_build(&space, m.bucket_size, m.seed, vs_metric_build_tick, NULL,
								 centers, &ncenters, members, offsets, radii, NULL);
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
	vs_metric_build_chain(&st, VS_LC_CENTERS);
	for (Size c = 0; c < ncenters; c++)
		add_tuple(&st, centers[c], (uint32) c, radii[c]);
	vs_metric_build_end_chain(&st);
	center_head = st.head;
	center_tail = st.tail;

	vs_metric_build_chain(&st, VS_LC_BUCKETS);
	for (Size c = 0; c < ncenters; c++)
	{
		CHECK_FOR_INTERRUPTS();
		for (Size i = offsets[c]; i < offsets[c + 1]; i++)
			add_tuple(&st, members[i], (uint32) c, 0.0);
	}
	vs_metric_build_end_chain(&st);

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
	vs_metric_buildempty(index, vs_lc_init_metapage);
}
