/*
 * vs_ivfpq: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 *   1. Options are checked against the column (m must divide the dimension, store_vectors must
 *      fit a page, expressions need store_vectors).
 *   2. A heap scan counts the non-NULL rows and keeps a seeded reservoir sample of them (with their
 *      tids: when the whole table fits the sample, it is the table and no second scan is needed).
 *   3. lists defaults to round(sqrt(rows)) clamped to [1, rows]; the quantizer is trained on the
 *      sample with the engine (vs_ivfpq_train): in the GPU worker when it serves (the sample goes
 *      through the backend's DSM segment, at most 256 MB), else in this backend's CPU engine
 *      context (train_quantizer()).
 *   4. Every row is encoded (vs_ivfpq_encode, in chunks: up to 64k rows per request through the
 *      worker with the quantizer, else 4096 at a time here; flush_chunk()), and appended, here and
 *      in heap order, to its list's page, which is
 *      written (a full-image Generic WAL record) when full; pages of a list link to their
 *      predecessor.  Then the centroids, codebooks and the directory are written, and the
 *      metapage is filled in.
 *
 * Progress (pg_stat_progress_create_index): the phases of vs_ivfpq_buildphasename; tuples_done
 * counts the rows read while sampling and the rows encoded and written while encoding
 * (tuples_total: the rows found by the sampling scan), blocks the table scans.  Every long step
 * stops on a query cancel: the scans and the staging loop check for interrupts, the engine polls
 * them between blocks of its work (engine_cancel in search.c).
 *
 * An empty table, or fewer rows than a sub-quantizer has codewords (2^nbits), cannot be trained:
 * the index is built without a quantizer, its rows (and later inserts) go to the pending chain and
 * are searched exactly, with a WARNING that suggests a REINDEX after loading data.
 */
#include "postgres.h"

#include <math.h>

#include "access/generic_xlog.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "ivfpq.h"
#include "vsearch/engine.h"
#include "worker.h"

#define VS_IVFPQ_SEED			UINT64CONST(0x5653495650510001)
#define VS_IVFPQ_ENCODE_CHUNK	4096
/* rows per encode request to the worker: at most this many, and at most 32 MB of vectors */
#define VS_IVFPQ_WORKER_CHUNK	65536
#define VS_IVFPQ_WORKER_CHUNK_BYTES	((Size) 32 * 1024 * 1024)
/* training sample: at least this many rows per centroid / per codeword when the table has them */
#define VS_IVFPQ_SAMPLE_PER_LIST	64
#define VS_IVFPQ_SAMPLE_MIN		32768

/* CREATE INDEX progress subphases (PROGRESS_CREATEIDX_SUBPHASE; 1 is PostgreSQL's "initializing") */
#define VS_IVFPQ_PHASE_SAMPLE	2
#define VS_IVFPQ_PHASE_TRAIN	3
#define VS_IVFPQ_PHASE_ENCODE	4
#define VS_IVFPQ_PHASE_WRITE	5

typedef struct ListBuild
{
	Page		page;			/* page being filled (NULL until the first entry) */
	BlockNumber first;
	BlockNumber last;
	uint32		count;
	uint32		npages;
} ListBuild;

typedef struct IvfpqBuildState
{
	Relation	index;
	uint32		dim;			/* 0 until the first vector (unconstrained column) */
	bool		store_vectors;
	MemoryContext buildcxt;		/* the build's arrays and page images */
	MemoryContext tmpcxt;		/* per row */

	/* pass 1: count and sample */
	int64		nrows;
	int64		sample_cap;
	int64		nsample;
	float	   *sample;
	ItemPointerData *sample_tids;
	pg_prng_state rng;

	/* pass 2: encode and write */
	bool		trained;
	uint32		lists;
	vs_ivfpq   *ivf;
	VsIvfpqLayout layout;		/* list pages */
	VsIvfpqLayout playout;		/* pending pages */
	ListBuild  *lb;				/* per list */
	ListBuild	pending;
	float	   *chunk;
	ItemPointerData *chunk_tids;
	int			chunk_n;
	int			chunk_cap;		/* rows per chunk */
	int32	   *chunk_lists;
	uint8	   *chunk_codes;
	int64		nindexed;

	/* encoding through the worker (until it fails once: then in this backend) */
	bool		use_worker;
	VsIndexRef	ref;
	uint64		build_id;
	vs_ivfpq_params params;
	const float *centroids;
	const float *codebooks;
} IvfpqBuildState;

char *
vs_ivfpq_buildphasename(int64 phase)
{
	switch (phase)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case VS_IVFPQ_PHASE_SAMPLE:
			return "sampling table";
		case VS_IVFPQ_PHASE_TRAIN:
			return "training quantizer";
		case VS_IVFPQ_PHASE_ENCODE:
			return "encoding rows";
		case VS_IVFPQ_PHASE_WRITE:
			return "writing quantizer and directory";
		default:
			return NULL;
	}
}

/* Sets the progress subphase and its tuple counters. */
static void
report_phase(int64 phase, int64 tuples_total)
{
	const int	index[] = {PROGRESS_CREATEIDX_SUBPHASE, PROGRESS_CREATEIDX_TUPLES_TOTAL,
	PROGRESS_CREATEIDX_TUPLES_DONE};
	const int64 value[] = {phase, tuples_total, 0};

	pgstat_progress_update_multi_param(3, index, value);
}

/* Writes a page image as a new block of the index (full-page Generic WAL record). */
static BlockNumber
write_new_page(Relation index, Page image)
{
	Buffer		buf = vs_new_buffer(index, MAIN_FORKNUM);
	GenericXLogState *xlog = GenericXLogStart(index);
	Page		page = GenericXLogRegisterBuffer(xlog, buf, GENERIC_XLOG_FULL_IMAGE);
	BlockNumber blkno = BufferGetBlockNumber(buf);

	memcpy(page, image, BLCKSZ);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(buf);
	return blkno;
}

static void
flush_list(IvfpqBuildState *s, ListBuild *lb)
{
	BlockNumber blkno;
	uint32		list;
	uint16		flags;

	if (lb->page == NULL || VsIvfpqPageGetOpaque(lb->page)->nitems == 0)
		return;
	list = VsIvfpqPageGetOpaque(lb->page)->list;
	flags = VsIvfpqPageGetOpaque(lb->page)->flags;
	VsIvfpqPageGetOpaque(lb->page)->prev = lb->last;
	blkno = write_new_page(s->index, lb->page);
	if (!BlockNumberIsValid(lb->first))
		lb->first = blkno;
	lb->last = blkno;
	lb->npages++;
	vs_ivfpq_init_page(lb->page, flags, list, blkno);
}

static void
add_entry(IvfpqBuildState *s, uint32 list, ItemPointer tid, const uint8 *code, const float *vec)
{
	bool		pending = (list == VS_IVFPQ_PENDING_LIST);
	ListBuild  *lb = pending ? &s->pending : &s->lb[list];
	const VsIvfpqLayout *layout = pending ? &s->playout : &s->layout;
	int			n;

	if (lb->page == NULL)
	{
		lb->page = MemoryContextAlloc(s->buildcxt, BLCKSZ);
		vs_ivfpq_init_page(lb->page, pending ? VS_IVFPQ_PENDING : VS_IVFPQ_LIST, list,
						   InvalidBlockNumber);
	}
	n = VsIvfpqPageGetOpaque(lb->page)->nitems;
	VsIvfpqPageTids(lb->page)[n] = *tid;
	if (layout->code_size > 0)
		memcpy(VsIvfpqPageCodes(lb->page, layout) + (Size) n * layout->code_size, code,
			   layout->code_size);
	if (layout->vdim > 0)
		memcpy(VsIvfpqPageVecs(lb->page, layout) + (Size) n * layout->vdim, vec,
			   sizeof(float) * layout->vdim);
	vs_ivfpq_page_set_items(lb->page, n + 1);
	lb->count++;
	s->nindexed++;
	if (n + 1 >= layout->capacity)
		flush_list(s, lb);
}

/* Encodes the staged rows and appends them to their lists (or to the pending chain). */
static void
flush_chunk(IvfpqBuildState *s)
{
	if (s->chunk_n == 0)
		return;
	if (s->trained)
	{
		int			retries = 0;

		if (s->use_worker &&
			!vs_ivfpq_worker_encode(&s->ref, &s->params, s->build_id, s->centroids, s->codebooks,
									s->chunk, s->chunk_n, s->chunk_lists, s->chunk_codes))
			s->use_worker = false;	/* counted as a fallback; the rest encodes here */
		for (; !s->use_worker;)
		{
			vs_status	st = vs_ivfpq_encode(vs_build_engine(), s->ivf, s->chunk,
											 (size_t) s->chunk_n, s->chunk_lists, s->chunk_codes);

			if (st == VS_OK)
				break;
			if (st != VS_CANCELLED)
				vs_engine_error(vs_build_engine(), st);
			vs_engine_cancelled(&retries);
		}
		for (int i = 0; i < s->chunk_n; i++)
		{
			int32		l = s->chunk_lists[i];

			/* a cancel that came while the engine encoded (it may finish a chunk first) */
			if ((i & 4095) == 0)
				CHECK_FOR_INTERRUPTS();
			if (l < 0 || (uint32) l >= s->lists)
				elog(ERROR, "vsearch engine assigned a row to list %d of %u", l, s->lists);
			add_entry(s, (uint32) l, &s->chunk_tids[i],
					  s->chunk_codes + (Size) i * s->layout.code_size,
					  s->chunk + (Size) i * s->dim);
		}
	}
	else
	{
		for (int i = 0; i < s->chunk_n; i++)
			add_entry(s, VS_IVFPQ_PENDING_LIST, &s->chunk_tids[i], NULL,
					  s->chunk + (Size) i * s->dim);
	}
	s->chunk_n = 0;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, s->nindexed);
}

static void
stage_row(IvfpqBuildState *s, ItemPointer tid, const float *x)
{
	memcpy(s->chunk + (Size) s->chunk_n * s->dim, x, sizeof(float) * s->dim);
	s->chunk_tids[s->chunk_n] = *tid;
	s->chunk_n++;
	if (s->chunk_n >= s->chunk_cap)
		flush_chunk(s);
}

/* ERROR unless a vector of dim elements can go into an index of index_dim (0: any). */
static void
check_vector_dim(uint32 index_dim, int dim)
{
	if (index_dim != 0 && (uint32) dim != index_dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", index_dim, dim),
				 errhint("Every vector in a vs_ivfpq index has the dimension of the first one; "
						 "declare the column as vector(n).")));
}

static void
sample_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
				void *arg)
{
	IvfpqBuildState *s = (IvfpqBuildState *) arg;
	MemoryContext old;
	Vector	   *vec;
	int64		slot;

	if (isnull[0])
		return;
	old = MemoryContextSwitchTo(s->tmpcxt);
	vec = vs_datum_vector(values[0]);
	check_vector_dim(s->dim, vec->dim);
	if (s->dim == 0)
		s->dim = vec->dim;
	if (s->sample == NULL)
	{
		s->sample = MemoryContextAllocExtended(s->buildcxt,
											   sizeof(float) * s->dim * (Size) s->sample_cap,
											   MCXT_ALLOC_HUGE);
		s->sample_tids = MemoryContextAllocExtended(s->buildcxt,
													sizeof(ItemPointerData) * (Size) s->sample_cap,
													MCXT_ALLOC_HUGE);
	}

	/* reservoir sampling (Algorithm R), seeded */
	if (s->nrows < s->sample_cap)
		slot = s->nrows;
	else
	{
		slot = (int64) pg_prng_uint64_range(&s->rng, 0, (uint64) s->nrows);
		if (slot >= s->sample_cap)
			slot = -1;
	}
	if (slot >= 0)
	{
		memcpy(s->sample + (Size) slot * s->dim, vec->x, sizeof(float) * s->dim);
		s->sample_tids[slot] = *tid;
		if (slot == s->nsample)
			s->nsample++;
	}
	s->nrows++;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, s->nrows);

	MemoryContextSwitchTo(old);
	MemoryContextReset(s->tmpcxt);
}

static void
encode_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
				void *arg)
{
	IvfpqBuildState *s = (IvfpqBuildState *) arg;
	MemoryContext old;
	Vector	   *vec;

	if (isnull[0])
		return;
	old = MemoryContextSwitchTo(s->tmpcxt);
	vec = vs_datum_vector(values[0]);
	check_vector_dim(s->dim, vec->dim);
	if (s->dim == 0)
		s->dim = vec->dim;		/* only if the first pass saw no row */
	MemoryContextSwitchTo(old);
	if (s->chunk == NULL)
	{
		if (s->chunk_cap == 0)
			s->chunk_cap = VS_IVFPQ_ENCODE_CHUNK;	/* no row in the first pass: untrained */
		s->chunk = MemoryContextAllocHuge(s->buildcxt, sizeof(float) * s->dim * s->chunk_cap);
		s->chunk_tids = MemoryContextAllocHuge(s->buildcxt,
											   sizeof(ItemPointerData) * s->chunk_cap);
	}
	stage_row(s, tid, vec->x);
	MemoryContextReset(s->tmpcxt);
}

static void
options_of(Relation index, VsIvfpqOptions *opts)
{
	VsIvfpqOptions *o = (VsIvfpqOptions *) index->rd_options;

	if (o != NULL)
		*opts = *o;
	else
	{
		memset(opts, 0, sizeof(*opts));
		opts->nbits = 8;
	}
}

/* The divisors of dim up to 64, for hints. */
static char *
divisors_text(uint32 dim)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (uint32 d = 1; d <= Min(dim, 64); d++)
		if (dim % d == 0)
			appendStringInfo(&buf, "%s%u", buf.len ? ", " : "", d);
	return buf.data;
}

/* Checks that need the dimension: m, and that stored vectors fit a page. */
static void
check_dim_options(const VsIvfpqOptions *opts, uint32 dim, int code_size)
{
	if (opts->m > 0 && (dim % (uint32) opts->m != 0 || (uint32) opts->m > dim))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_ivfpq option m = %d does not divide the dimension %u", opts->m, dim),
				 errhint("m is the number of sub-vectors each vector is split into; choose a "
						 "divisor of %u (%s), or leave m out to get %d.",
						 dim, divisors_text(dim), vs_ivfpq_default_m((int) dim))));
	if (opts->store_vectors)
	{
		VsIvfpqLayout layout;

		vs_ivfpq_layout(code_size, (int) dim, &layout);
		if (layout.capacity < 1)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_ivfpq with store_vectors = on supports at most about %d dimensions, not %u",
							(int) ((VS_IVFPQ_PAGE_SPACE - 64) / sizeof(float)), dim),
					 errhint("Use store_vectors = off: candidates are then re-ranked from the table.")));
	}
}

/* The index, as the worker's build requests name it. */
static void
build_ref(Relation index, const vs_ivfpq_params *params, VsIndexRef *ref)
{
	vs_ref_init(index, VS_IVFPQ_KIND, ref);
	ref->metric = params->metric;
	ref->dim = (uint32) params->dim;
}

/*
 * Trains the quantizer on the sample: in the GPU worker when it serves (the sample goes through
 * this backend's DSM segment), else in this backend's CPU engine, with the same seed.
 */
static void
train_quantizer(Relation index, const vs_ivfpq_params *params, const float *sample, int64 n,
				float *centroids, float *codebooks)
{
	vs_ivfpq_train_params train;
	int			retries = 0;
	VsIndexRef	ref;

	build_ref(index, params, &ref);
	if (vs_ivfpq_worker_train(&ref, params, VS_IVFPQ_SEED, sample, n, centroids, codebooks))
		return;

	vs_ivfpq_train_params_init(&train);
	train.seed = VS_IVFPQ_SEED;
	train.sample_size = 0;		/* the sample is already drawn */
	for (;;)
	{
		vs_status	st = vs_ivfpq_train(vs_build_engine(), params, &train, sample, (size_t) n,
										centroids, codebooks);

		if (st == VS_OK)
			return;
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
}

/*
 * Writes nrows rows of rowlen floats over new consecutive pages, whole rows to a page (rows longer
 * than a page run on over the pages); returns the first block.
 */
static BlockNumber
write_rows(Relation index, const float *x, Size nrows, int rowlen, uint32 *npages)
{
	Page		page = palloc(BLCKSZ);
	BlockNumber first = InvalidBlockNumber;
	Size		n = nrows * (Size) rowlen;
	int			rows_per_page = VsIvfpqRowsPerPage(rowlen);
	Size		per_page = rows_per_page > 0 ? (Size) rows_per_page * rowlen
		: (Size) VS_IVFPQ_FLOATS_PER_PAGE;

	*npages = 0;
	for (Size done = 0; done < n;)
	{
		Size		k = Min(n - done, per_page);
		BlockNumber blkno;

		vs_ivfpq_init_page(page, VS_IVFPQ_FLOATS, 0, InvalidBlockNumber);
		memcpy(PageGetContents(page), x + done, sizeof(float) * k);
		vs_ivfpq_page_set_items(page, (int) k);
		blkno = write_new_page(index, page);
		if (!BlockNumberIsValid(first))
			first = blkno;
		else if (blkno != first + *npages)
			elog(ERROR, "vs_ivfpq build: quantizer pages are not consecutive");
		(*npages)++;
		done += k;
	}
	pfree(page);
	return first;
}

/*
 * The codebooks (m x 2^nbits x dim/m) packed as the lookup tables read them: dim rows of
 * VS_IVFPQ_TABLE_WIDTH(nbits) floats, row j * dim/m + t holding element t of sub-quantizer j's
 * codewords, zero-padded (ivfpq.h).
 */
static float *
pack_codebooks(const float *codebooks, uint32 dim, uint32 m, int nbits)
{
	Size		ksub = (Size) 1 << nbits;
	Size		dsub = dim / m;
	Size		width = VS_IVFPQ_TABLE_WIDTH(nbits);
	float	   *tables = palloc_extended(sizeof(float) * dim * width,
									 MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);

	for (Size j = 0; j < m; j++)
		for (Size c = 0; c < ksub; c++)
			for (Size t = 0; t < dsub; t++)
				tables[(j * dsub + t) * width + c] = codebooks[(j * ksub + c) * dsub + t];
	return tables;
}

static BlockNumber
write_directory(Relation index, const ListBuild *lb, uint32 lists, uint32 *npages)
{
	Page		page = palloc(BLCKSZ);
	BlockNumber first = InvalidBlockNumber;

	*npages = 0;
	for (uint32 done = 0; done < lists;)
	{
		uint32		k = Min(lists - done, (uint32) VS_IVFPQ_DIR_PER_PAGE);
		VsIvfpqListEntry *e;
		BlockNumber blkno;

		vs_ivfpq_init_page(page, VS_IVFPQ_DIRECTORY, 0, InvalidBlockNumber);
		e = (VsIvfpqListEntry *) PageGetContents(page);
		for (uint32 i = 0; i < k; i++)
		{
			e[i].first = lb[done + i].first;
			e[i].last = lb[done + i].last;
			e[i].count = lb[done + i].count;
			e[i].npages = lb[done + i].npages;
		}
		vs_ivfpq_page_set_items(page, (int) k);
		blkno = write_new_page(index, page);
		if (!BlockNumberIsValid(first))
			first = blkno;
		else if (blkno != first + *npages)
			elog(ERROR, "vs_ivfpq build: directory pages are not consecutive");
		(*npages)++;
		done += k;
	}
	pfree(page);
	return first;
}

IndexBuildResult *
vs_ivfpq_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	IvfpqBuildState s;
	VsIvfpqOptions opts;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsIvfpqMetaPage meta;
	double		reltuples;
	uint32		m = 0;
	int			code_size = 0;
	float	   *centroids = NULL;
	float	   *codebooks = NULL;
	BlockNumber centroid_start = InvalidBlockNumber,
				codebook_start = InvalidBlockNumber,
				directory_start = InvalidBlockNumber;
	uint32		ncentroid_pages = 0,
				ncodebook_pages = 0,
				ndirectory_pages = 0;
	uint32		empty_lists = 0;
	int64		mem_rows;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	options_of(index, &opts);
	metric = vs_opclass_metric(index);
	if (metric == VS_METRIC_L1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("vs_ivfpq does not support the L1 distance"),
				 errhint("Product quantization works in Euclidean and inner-product space; "
						 "search <+> with an exact index.")));
	if (indexInfo->ii_IndexAttrNumbers[0] == 0 && !opts.store_vectors)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a vs_ivfpq index on an expression needs store_vectors = on"),
				 errhint("The index re-ranks its candidates with exact distances read from the "
						 "table's column; for an expression it must keep its own copy: "
						 "WITH (store_vectors = on).")));

	memset(&s, 0, sizeof(s));
	s.index = index;
	s.buildcxt = CurrentMemoryContext;
	s.dim = vs_declared_dim(index);
	s.store_vectors = opts.store_vectors;
	if (s.dim > 0)
	{
		m = opts.m > 0 ? (uint32) opts.m : (uint32) vs_ivfpq_default_m((int) s.dim);
		check_dim_options(&opts, s.dim, (int) ((m * opts.nbits + 7) / 8));
	}

	/* Block 0: the metapage, so the index is readable whatever happens next. */
	metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == VS_IVFPQ_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	vs_ivfpq_init_metapage(metapage, s.dim, metric, opts.nbits, opts.store_vectors);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	/* Pass 1: count and sample. */
	s.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_ivfpq build", ALLOCSET_DEFAULT_SIZES);
	pg_prng_seed(&s.rng, VS_IVFPQ_SEED);
	{
		double		est = Max(heap->rd_rel->reltuples, 0.0);
		int64		want = Max((int64) VS_IVFPQ_SAMPLE_MIN,
							   (int64) VS_IVFPQ_SAMPLE_PER_LIST * Max(opts.lists, (int) sqrt(est) + 1));
		int			dim_guess = s.dim > 0 ? (int) s.dim : VECTOR_MAX_DIM;

		/* the sample may use half of maintenance_work_mem, and at least 16 MB */
		mem_rows = (int64) Max((Size) maintenance_work_mem * 1024 / 2, (Size) 16 * 1024 * 1024) /
			((int64) sizeof(float) * dim_guess + (int64) sizeof(ItemPointerData));
		s.sample_cap = Max(Min(want, mem_rows), 256);
	}
	report_phase(VS_IVFPQ_PHASE_SAMPLE, 0);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true, sample_callback, &s, NULL);

	if (s.dim > 0 && vs_declared_dim(index) == 0)
	{
		m = opts.m > 0 ? (uint32) opts.m : (uint32) vs_ivfpq_default_m((int) s.dim);
		check_dim_options(&opts, s.dim, (int) ((m * opts.nbits + 7) / 8));
	}
	if (opts.lists > 0 && s.nrows > 0 && opts.lists > s.nrows)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_ivfpq option lists = %d is larger than the table's %lld rows",
						opts.lists, (long long) s.nrows),
				 errhint("Each list needs at least one row to train its centroid; use about "
						 "sqrt(rows) lists (leave lists out to get %d), or load the data first.",
						 Max(1, (int) lround(sqrt((double) s.nrows))))));

	s.trained = s.nrows > 0 && s.nrows >= ((int64) 1 << opts.nbits);
	if (s.nrows == 0)
		ereport(WARNING,
				(errmsg("vs_ivfpq index \"%s\" built on an empty table: it has no quantizer",
						RelationGetRelationName(index)),
				 errdetail("Rows inserted later are kept unquantized and searched exactly."),
				 errhint("REINDEX after loading data to train the quantizer.")));
	else if (!s.trained)
		ereport(WARNING,
				(errmsg("vs_ivfpq index \"%s\" has too few rows to train its quantizer (%lld, "
						"it needs at least %d)",
						RelationGetRelationName(index), (long long) s.nrows, 1 << opts.nbits),
				 errdetail("Rows are kept unquantized and searched exactly."),
				 errhint("REINDEX after loading data to train the quantizer.")));

	if (s.trained)
	{
		vs_ivfpq_params params;
		Size		ncode;

		s.lists = opts.lists > 0 ? (uint32) opts.lists
			: (uint32) Min(Max(lround(sqrt((double) s.nrows)), 1L), (long) s.nrows);
		s.lists = Min(s.lists, (uint32) VS_IVFPQ_MAX_LISTS);
		if ((int64) s.lists > s.nsample)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_ivfpq training sample of %lld rows is smaller than lists = %u",
							(long long) s.nsample, s.lists),
					 errhint("Raise maintenance_work_mem or use fewer lists.")));
		code_size = (int) ((m * opts.nbits + 7) / 8);
		memset(&params, 0, sizeof(params));
		params.dim = s.dim;
		params.nlist = s.lists;
		params.m = m;
		params.nbits = opts.nbits;
		params.metric = metric;
		ncode = (Size) m * ((Size) 1 << opts.nbits) * (s.dim / m);
		centroids = palloc_extended(sizeof(float) * s.lists * (Size) s.dim, MCXT_ALLOC_HUGE);
		codebooks = palloc_extended(sizeof(float) * ncode, MCXT_ALLOC_HUGE);
		report_phase(VS_IVFPQ_PHASE_TRAIN, 0);
		train_quantizer(index, &params, s.sample, s.nsample, centroids, codebooks);
		{
			vs_status	st = vs_ivfpq_create(vs_build_engine(), &params, centroids, codebooks,
											 &s.ivf);

			if (st != VS_OK)
				vs_engine_error(vs_build_engine(), st);
		}
		s.lb = palloc0(sizeof(ListBuild) * s.lists);
		for (uint32 l = 0; l < s.lists; l++)
			s.lb[l].first = s.lb[l].last = InvalidBlockNumber;

		/* encode through the worker in large chunks unless vsearch.device = cpu */
		s.use_worker = vs_device_mode != VS_DEVICE_CPU;
		s.chunk_cap = VS_IVFPQ_ENCODE_CHUNK;
		if (s.use_worker)
		{
			build_ref(index, &params, &s.ref);
			s.build_id = ((uint64) MyProcPid << 32) ^ (uint64) GetCurrentTimestamp();
			if (s.build_id == 0)
				s.build_id = 1;
			s.params = params;
			s.centroids = centroids;
			s.codebooks = codebooks;
			s.chunk_cap = (int) Min((Size) VS_IVFPQ_WORKER_CHUNK,
									Max(VS_IVFPQ_WORKER_CHUNK_BYTES / (sizeof(float) * s.dim),
										(Size) 1));
		}
		s.chunk_lists = palloc_extended(sizeof(int32) * s.chunk_cap, MCXT_ALLOC_HUGE);
		s.chunk_codes = palloc_extended(Max((Size) code_size, 1) * s.chunk_cap, MCXT_ALLOC_HUGE);
	}
	s.pending.first = s.pending.last = InvalidBlockNumber;
	vs_ivfpq_layout(code_size, s.store_vectors ? (int) s.dim : 0, &s.layout);
	vs_ivfpq_layout(0, s.store_vectors ? (int) s.dim : 0, &s.playout);

	/* Pass 2: encode every row (from the sample when it holds the whole table). */
	report_phase(VS_IVFPQ_PHASE_ENCODE, s.nrows);
	PG_TRY();
	{
		if (s.chunk_cap == 0)
			s.chunk_cap = VS_IVFPQ_ENCODE_CHUNK;
		if (s.nrows > 0 && s.nsample == s.nrows)
		{
			s.chunk = palloc_extended(sizeof(float) * s.dim * s.chunk_cap, MCXT_ALLOC_HUGE);
			s.chunk_tids = palloc_extended(sizeof(ItemPointerData) * s.chunk_cap, MCXT_ALLOC_HUGE);
			for (int64 i = 0; i < s.nsample; i++)
			{
				CHECK_FOR_INTERRUPTS();
				stage_row(&s, &s.sample_tids[i], s.sample + (Size) i * s.dim);
			}
		}
		else if (s.nrows > 0)
		{
			pfree(s.sample);
			pfree(s.sample_tids);
			s.sample = NULL;
			(void) table_index_build_scan(heap, index, indexInfo, true, true, encode_callback,
										  &s, NULL);
		}
		flush_chunk(&s);
	}
	PG_CATCH();
	{
		if (s.ivf != NULL)
			vs_ivfpq_destroy(vs_build_engine(), s.ivf);
		vs_worker_build_end();
		PG_RE_THROW();
	}
	PG_END_TRY();
	vs_worker_build_end();
	if (s.ivf != NULL)
		vs_ivfpq_destroy(vs_build_engine(), s.ivf);
	s.ivf = NULL;

	report_phase(VS_IVFPQ_PHASE_WRITE, 0);
	for (uint32 l = 0; l < s.lists; l++)
	{
		CHECK_FOR_INTERRUPTS();
		flush_list(&s, &s.lb[l]);
		if (s.lb[l].count == 0)
			empty_lists++;
	}
	flush_list(&s, &s.pending);

	if (s.trained)
	{
		float	   *tables = pack_codebooks(codebooks, s.dim, m, opts.nbits);

		centroid_start = write_rows(index, centroids, s.lists, (int) s.dim, &ncentroid_pages);
		codebook_start = write_rows(index, tables, s.dim, VS_IVFPQ_TABLE_WIDTH(opts.nbits),
									&ncodebook_pages);
		pfree(tables);
		directory_start = write_directory(index, s.lb, s.lists, &ndirectory_pages);
		if (empty_lists > 0)
			ereport(WARNING,
					(errmsg("%u of the %u lists of vs_ivfpq index \"%s\" are empty",
							empty_lists, s.lists, RelationGetRelationName(index)),
					 errdetail("k-means found no row nearest to their centroids."),
					 errhint("Use fewer lists (about sqrt(rows) = %d).",
							 Max(1, (int) lround(sqrt((double) s.nrows))))));
	}

	/* Publish everything in the metapage. */
	metabuf = ReadBuffer(index, VS_IVFPQ_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_ivfpq_page_meta(metapage);
	meta->dim = s.dim;
	meta->trained = s.trained ? 1 : 0;
	meta->lists = s.trained ? s.lists : 0;
	meta->m = s.trained ? m : 0;
	meta->code_size = (uint32) code_size;
	meta->ntuples = (uint64) s.nindexed;
	meta->npending = s.pending.count;
	meta->centroid_start = centroid_start;
	meta->ncentroid_pages = ncentroid_pages;
	meta->codebook_start = codebook_start;
	meta->ncodebook_pages = ncodebook_pages;
	meta->directory_start = directory_start;
	meta->ndirectory_pages = ndirectory_pages;
	meta->pending_first = s.pending.first;
	meta->pending_last = s.pending.last;
	meta->empty_lists = empty_lists;
	meta->seed = VS_IVFPQ_SEED;
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	MemoryContextDelete(s.tmpcxt);

	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) s.nindexed;
	return result;
}

/* The init fork of an unlogged index: an empty metapage without a quantizer. */
void
vs_ivfpq_buildempty(Relation index)
{
	VsIvfpqOptions opts;
	vs_metric	metric = vs_opclass_metric(index);
	Buffer		buf;
	Page		page;

	options_of(index, &opts);
	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	vs_ivfpq_init_metapage(page, vs_declared_dim(index), metric, opts.nbits, opts.store_vectors);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
