/*
 * vs_graph: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build, in the backend on the engine's CPU backend (vs_build_engine: the CPU engine with
 * max_parallel_maintenance_workers + 1 threads) except for the nearest-neighbour queries, which
 * the GPU worker answers when it serves (graphworker.c), in phases reported in
 * pg_stat_progress_create_index:
 *
 *   loading tuples     the table scan copies every non-NULL vector and its tid into memory (node
 *                      numbers follow the scan's order);
 *   computing knn      the seeds' k-means (this backend's engine), then the build_degree nearest
 *                      neighbours of every row in rank units (squared L2 for L2), by option
 *                      build_knn (automatic: IVF from VS_GRAPH_IVF_MIN_ROWS rows on a CPU,
 *                      exact through a GPU worker):
 *                      exact       vs_knn over all rows, queries in chunks of VS_GRAPH_KNN_CHUNK
 *                                  rows, VS_GRAPH_WORKER_KNN_CHUNK through the worker;
 *                      IVF         k-means lists (sqrt(rows) of them, at most
 *                                  VS_GRAPH_IVF_MAX_LISTS, trained here on a sample; every row's
 *                                  VS_GRAPH_IVF_ASSIGN nearest lists and every list's nearest lists
 *                                  by vs_knn over the centroids), then per list one dense vs_knn of
 *                                  its rows (those nearest its centroid) over its candidates: the
 *                                  rows with its list or one of the lists nearest its centroid
 *                                  (VS_GRAPH_IVF_NPROBE in all, more while there are fewer than
 *                                  2 x build_degree) among their VS_GRAPH_IVF_ASSIGN nearest, so
 *                                  that a row on the border of two lists is a candidate of both.
 *                                  Exact among the candidates; the rows' true neighbours outside
 *                                  them are missed (docs/BENCHMARKS.md: kNN-graph recall, and the
 *                                  index's recall against the exact build's);
 *   pruning            the engine's vs_graph_build_edges on the build engine's threads: each kNN
 *                      list pruned to `degree` by rank (CAGRA's detour count), merged with the
 *                      reverse edges (the first half of a node's list is its best pruned
 *                      neighbours, then the nodes that chose it, by their rank of it, then the rest
 *                      of its pruned list), then every node that a search from the entry cannot
 *                      reach linked from a reached node of its kNN list (an empty slot, or one
 *                      whose target keeps another in-edge; on one thread), then the seeds
 *                      completed so that walks from the start nodes reach every island of the
 *                      graph (vs_graph_cover_starts, cover_starts below), then every row searched
 *                      for from the start nodes and, when the search does not reach it, linked
 *                      from and to the nearest rows the search found (vs_graph_link_unfound,
 *                      link_unfound below), then the seeds completed again;
 *   writing pages      node pages, each a full-page Generic WAL record, then the metapage.
 *
 * At DEBUG1 the build reports the seconds of its parts (BuildPart).
 *
 * The entry node is the row nearest (L2) to the mean of all rows.  Nothing is random: the same
 * table in the same physical order gives the same index (the k-means are seeded).  The exact kNN
 * is O(rows^2 x dim) (the engine's blocked brute force on the CPU, GEMM tiles on the GPU): seconds
 * for 10^4..10^5 rows on a few cores, hours for 10^6 on a CPU.  The IVF kNN computes about
 * VS_GRAPH_IVF_ASSIGN x VS_GRAPH_IVF_NPROBE / lists of those distances, more with unequal lists (a
 * fifth at 10^5 rows, under a tenth from 10^6 on; reported at DEBUG1), plus the lists' k-means and
 * assignment (docs/INDEXES.md).  Memory: the vectors, the kNN
 * lists (build_degree x 4 bytes per row) and the graph, all in backend memory; the IVF lists (4 x
 * (1 + VS_GRAPH_IVF_ASSIGN) bytes per row) and, through the worker, a copy of the rows in the
 * worker's memory (graphworker.c).
 */
#include "postgres.h"

#include <math.h>

#include "access/generic_xlog.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "utils/backend_progress.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "graph.h"
#include "guc.h"
#include "worker.h"

/* Build phases (PROGRESS_CREATEIDX_SUBPHASE); 1 is PostgreSQL's "initializing". */
#define GRAPH_PHASE_LOAD	2
#define GRAPH_PHASE_KNN		3
#define GRAPH_PHASE_PRUNE	4
#define GRAPH_PHASE_WRITE	5

char *
vs_graph_buildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case GRAPH_PHASE_LOAD:
			return "loading tuples";
		case GRAPH_PHASE_KNN:
			return "computing k-nearest-neighbour graph";
		case GRAPH_PHASE_PRUNE:
			return "pruning graph";
		case GRAPH_PHASE_WRITE:
			return "writing index pages";
	}
	return NULL;
}

/* A new phase with its tuple counts (total = the rows, none done), seen together. */
static void
set_phase(int64 phase, int64 total)
{
	const int	index[] = {PROGRESS_CREATEIDX_SUBPHASE, PROGRESS_CREATEIDX_TUPLES_TOTAL,
						   PROGRESS_CREATEIDX_TUPLES_DONE};
	const int64 value[] = {phase, total, 0};

	pgstat_progress_update_multi_param(3, index, value);
}

typedef struct GraphBuildState
{
	Relation	index;
	uint32		dim;			/* 0 until the first vector (unconstrained column) */
	uint32		degree;
	uint32		build_degree;
	float	   *vectors;
	ItemPointerData *tids;
	int64		n;
	int64		cap;
	MemoryContext tmpcxt;
} GraphBuildState;

/*
 * Seconds spent in each part of a build, reported at DEBUG1 (SET client_min_messages = debug1
 * shows them; bench/harness.py --graph prints them).
 */
typedef enum BuildPart
{
	PART_LOAD,					/* the table scan */
	PART_SEEDS,					/* k-means for the seeds, the mean (this backend's CPU engine) */
	PART_UPLOAD,				/* the rows into the worker's dataset */
	PART_LISTS,					/* the IVF kNN's lists: k-means, every row's list */
	PART_KNN,					/* the entry, the seeds and the kNN lists (worker or backend) */
	PART_PRUNE,					/* rank-based pruning */
	PART_EDGES,					/* reverse edges, merge, reachability, the seeds for islands */
	PART_LINKS,					/* the navigability pass */
	PART_WRITE,					/* node pages and their WAL */
	NUM_PARTS
} BuildPart;

static const char *const part_names[NUM_PARTS] = {
	"load", "seeds", "upload", "lists", "knn", "prune", "edges", "links", "write"
};

typedef struct BuildClock
{
	instr_time	last;
	double		seconds[NUM_PARTS];
} BuildClock;

static void
clock_start(BuildClock *c)
{
	memset(c, 0, sizeof(*c));
	INSTR_TIME_SET_CURRENT(c->last);
}

/* The time since the last lap goes to part. */
static void
clock_lap(BuildClock *c, BuildPart part)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	c->seconds[part] += INSTR_TIME_GET_DOUBLE(now) - INSTR_TIME_GET_DOUBLE(c->last);
	c->last = now;
}

static void
clock_report(const BuildClock *c, int64 n, bool worker)
{
	char		buf[256];
	int			len = 0;

	for (int i = 0; i < NUM_PARTS; i++)
		len += snprintf(buf + len, sizeof(buf) - len, "%s%s %.3f s", i ? ", " : "",
						part_names[i], c->seconds[i]);
	elog(DEBUG1, "vs_graph build: %lld rows, kNN graph in the %s; %s", (long long) n,
		 worker ? "worker" : "backend", buf);
}

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
			   void *arg)
{
	GraphBuildState *state = (GraphBuildState *) arg;
	MemoryContext old;
	Vector	   *vec;

	if (isnull[0])
		return;					/* NULL vectors are not indexed */

	old = MemoryContextSwitchTo(state->tmpcxt);
	vec = vs_datum_vector(values[0]);
	vs_graph_check_vector_dim(state->dim, vec->dim, state->degree);
	MemoryContextSwitchTo(old);
	if (state->dim == 0)
	{
		vs_graph_check_pq_m(vs_graph_index_pq_m(state->index), vec->dim);
		state->dim = vec->dim;
	}
	if (state->n >= (int64) VS_GRAPH_NO_NODE - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_graph indexes hold at most %u rows", VS_GRAPH_NO_NODE - 1)));
	if (state->n == state->cap)
	{
		state->cap = Max(state->cap * 2, 1024);
		if (state->vectors == NULL)
		{
			state->vectors = palloc_extended(sizeof(float) * state->dim * state->cap,
											 MCXT_ALLOC_HUGE);
			state->tids = palloc_extended(sizeof(ItemPointerData) * state->cap, MCXT_ALLOC_HUGE);
		}
		else
		{
			state->vectors = repalloc_huge(state->vectors,
										   sizeof(float) * state->dim * state->cap);
			state->tids = repalloc_huge(state->tids, sizeof(ItemPointerData) * state->cap);
		}
	}
	memcpy(state->vectors + (Size) state->n * state->dim, vec->x, sizeof(float) * state->dim);
	state->tids[state->n] = *tid;
	state->n++;
	MemoryContextReset(state->tmpcxt);
}

/* The k nearest rows of `queries` among the dataset, retried after a handled cancel. */
static void
engine_knn(vs_context *ctx, vs_dataset *ds, const float *queries, size_t nq, size_t k,
		   vs_metric metric, int64 *ids, float *dists)
{
	int			retries = 0;

	for (;;)
	{
		vs_status	st = vs_knn(ctx, ds, queries, nq, k, metric, NULL, ids, dists, NULL);

		if (st == VS_OK)
			return;
		if (st != VS_CANCELLED)
			vs_engine_error(ctx, st);
		vs_engine_cancelled(&retries);
	}
}

/*
 * Where the build's nearest-neighbour queries run: the GPU worker when it serves (the rows searched
 * are loaded into a dataset of its engine, graphworker.c), else this backend's CPU engine (a
 * dataset made on first use, also when the worker stops answering mid-build).  Both return the
 * engine's exact answer, so the graph is the same.  The rows searched are all the build's rows
 * (ids: row numbers), or for the IVF kNN's lists their centroids; the IVF kNN's queries among a
 * list's candidates (source_knn_among) search a dataset of those rows alone (ids: row numbers).
 */
typedef struct KnnSource
{
	GraphBuildState *s;
	VsIndexRef	ref;			/* for worker requests (its metric is set per query) */
	uint64		build_id;
	bool		use_worker;
	const float *rows;			/* the rows searched */
	int64		nrows;
	vs_context *ctx;
	vs_dataset *ds;				/* the CPU dataset of rows, once made */
	vs_dataset *among_ds;		/* the CPU dataset of the candidates of ... */
	int			among_list;		/* ... this list */
	float	   *among_rows;		/* scratch of the CPU path */
	Size		among_cap;
	float	   *dists;			/* scratch of the CPU path */
	Size		ndists;
} KnnSource;

/*
 * Makes rows[0 .. n) the rows that source_knn searches (the worker's build dataset replaced;
 * keep_rows: the worker keeps a copy for source_knn_among).
 */
static void
source_set_rows(KnnSource *src, const float *rows, int64 n, bool keep_rows)
{
	if (src->ds)
	{
		vs_dataset_destroy(src->ctx, src->ds);
		src->ds = NULL;
	}
	src->rows = rows;
	src->nrows = n;
	if (src->use_worker && !vs_graph_worker_load(&src->ref, src->build_id, rows, n, keep_rows))
		src->use_worker = false;	/* counted as a fallback; the rest runs here */
}

/* A CPU dataset of rows (n x dim) with these ids. */
static vs_dataset *
cpu_dataset(KnnSource *src, const float *rows, const int64 *ids, int64 n)
{
	vs_dataset *ds;
	vs_status	st;

	src->ctx = vs_build_engine();
	st = vs_dataset_create(src->ctx, src->s->dim, VS_DTYPE_F32, &ds);
	if (st != VS_OK)
		vs_engine_error(src->ctx, st);
	st = vs_dataset_add(src->ctx, ds, rows, ids, (size_t) n);
	if (st != VS_OK)
	{
		vs_dataset_destroy(src->ctx, ds);
		vs_engine_error(src->ctx, st);
	}
	return ds;
}

/* The CPU path's distances for nq x k answers. */
static float *
scratch_dists(KnnSource *src, int nq, int k)
{
	if (src->ndists < (Size) nq * k)
	{
		if (src->dists)
			pfree(src->dists);
		src->ndists = (Size) nq * k;
		src->dists = palloc_extended(sizeof(float) * src->ndists, MCXT_ALLOC_HUGE);
	}
	return src->dists;
}

/* ids (nq x k) of the k nearest rows of each query, by metric. */
static void
source_knn(KnnSource *src, const float *queries, int nq, int k, vs_metric metric, int64 *ids)
{
	if (src->use_worker)
	{
		src->ref.metric = metric;
		if (vs_graph_worker_knn(&src->ref, src->build_id, src->nrows, queries, nq, k, ids))
			return;
		src->use_worker = false;	/* counted as a fallback; the rest runs here */
	}
	if (src->ds == NULL)
	{
		int64	   *rowids = palloc_extended(sizeof(int64) * src->nrows, MCXT_ALLOC_HUGE);

		for (int64 i = 0; i < src->nrows; i++)
			rowids[i] = i;
		src->ds = cpu_dataset(src, src->rows, rowids, src->nrows);
		pfree(rowids);
	}
	engine_knn(src->ctx, src->ds, queries, nq, k, metric, ids, scratch_dists(src, nq, k));
}

/*
 * ids (nq x k, row numbers) of the k nearest of the build's rows among[0 .. n) (each once) to each
 * query, by metric; list names the candidate set (the CPU path makes its dataset once per list).
 * The worker must hold the build's rows with a copy (source_set_rows, keep_rows).
 */
static void
source_knn_among(KnnSource *src, int list, const int64 *among, int64 n, const float *queries,
				 int nq, int k, vs_metric metric, int64 *ids)
{
	GraphBuildState *s = src->s;

	if (src->use_worker)
	{
		src->ref.metric = metric;
		if (vs_graph_worker_knn_among(&src->ref, src->build_id, s->n, among, n, queries, nq, k,
									  ids))
			return;
		src->use_worker = false;	/* counted as a fallback; the rest runs here */
	}
	if (src->among_ds == NULL || src->among_list != list)
	{
		if (src->among_ds)
			vs_dataset_destroy(src->ctx, src->among_ds);
		src->among_ds = NULL;
		if (src->among_cap < (Size) n)
		{
			if (src->among_rows)
				pfree(src->among_rows);
			src->among_cap = Max((Size) n, src->among_cap * 2);
			src->among_rows = palloc_extended(sizeof(float) * s->dim * src->among_cap,
											  MCXT_ALLOC_HUGE);
		}
		for (int64 i = 0; i < n; i++)
			memcpy(src->among_rows + (Size) i * s->dim, s->vectors + (Size) among[i] * s->dim,
				   sizeof(float) * s->dim);
		src->among_ds = cpu_dataset(src, src->among_rows, among, n);
		src->among_list = list;
	}
	engine_knn(src->ctx, src->among_ds, queries, nq, k, metric, ids, scratch_dists(src, nq, k));
}

/* Queries per kNN call: per worker request, or per engine call in the backend. */
#define KNN_CHUNK(src) ((src)->use_worker ? VS_GRAPH_WORKER_KNN_CHUNK : VS_GRAPH_KNN_CHUNK)

/* k-means centroids (nc x dim) of the build's rows on this backend's engine, seeded. */
static void
train_centroids(GraphBuildState *s, int nc, vs_metric metric, uint64 seed, float *centroids)
{
	vs_kmeans_params kp;
	int			retries = 0;

	vs_kmeans_params_init(&kp);
	kp.k = (size_t) nc;
	kp.iterations = 10;
	kp.init = VS_KMEANS_INIT_PLUSPLUS;
	kp.seed = seed;
	kp.sample_size = (size_t) Min(s->n, (int64) nc * 64);
	kp.metric = metric;
	for (;;)
	{
		vs_status	st = vs_kmeans(vs_build_engine(), s->vectors, (size_t) s->n, s->dim, &kp,
								   centroids, NULL);

		if (st == VS_OK)
			return;
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
}

/*
 * The K nearest other rows of the queries (rows qrows[0 .. nq), NULL: q0 ..) from the answer ids
 * (nq x k, row numbers), nearest first, VS_GRAPH_NO_NODE padded.
 */
static void
store_knn(uint32 *knn, int K, const int64 *ids, int nq, int k, int64 n, const uint32 *qrows,
		  int64 q0)
{
	for (int q = 0; q < nq; q++)
	{
		int64		self = qrows ? qrows[q] : q0 + q;
		uint32	   *row = knn + (Size) self * K;
		int			m = 0;

		for (int j = 0; j < k && m < K; j++)
		{
			int64		id = ids[(Size) q * k + j];

			if (id < 0 || id >= n || id == self)
				continue;
			row[m++] = (uint32) id;
		}
		for (; m < K; m++)
			row[m] = VS_GRAPH_NO_NODE;
	}
}

/*
 * The IVF kNN's lists: nlist k-means centroids of the rows (sqrt(rows), at most
 * VS_GRAPH_IVF_MAX_LISTS, trained on this backend's engine), each row's VS_GRAPH_IVF_ASSIGN
 * nearest of them and each list's nnear nearest lists (by the source: the worker when it serves).
 * A list's queries are the rows nearest its centroid; its candidates are the rows that have one of
 * the probed lists among their VS_GRAPH_IVF_ASSIGN nearest, so that a row near the border of two
 * lists is a candidate of both.
 */
typedef struct IvfLists
{
	int			nlist;
	int64	   *offsets;		/* nlist + 1: the queries of list c are */
	uint32	   *members;		/* members[offsets[c] .. offsets[c + 1]) */
	int64	   *coffsets;		/* nlist + 1: its candidate rows */
	uint32	   *cmembers;		/* cmembers[coffsets[c] .. coffsets[c + 1]) */
	int			nnear;
	int64	   *near;			/* nlist x nnear: the lists nearest each list, nearest first */
	int64		maxlist;		/* most queries of a list */
} IvfLists;

static void
ivf_lists(KnnSource *src, vs_metric rank, IvfLists *L)
{
	GraphBuildState *s = src->s;
	int64		n = s->n;
	uint32		dim = s->dim;
	int			nlist = (int) Min((int64) VS_GRAPH_IVF_MAX_LISTS,
								  Max((int64) 1, (int64) sqrt((double) n)));
	int			nassign = Min(VS_GRAPH_IVF_ASSIGN, nlist);
	float	   *centroids = palloc(sizeof(float) * dim * nlist);
	int64	   *assign = palloc_extended(sizeof(int64) * n * nassign, MCXT_ALLOC_HUGE);
	int64	   *fill;

	L->nlist = nlist;
	L->nnear = Min(4 * VS_GRAPH_IVF_NPROBE, nlist);
	L->offsets = palloc0(sizeof(int64) * (nlist + 1));
	L->coffsets = palloc0(sizeof(int64) * (nlist + 1));
	L->members = palloc_extended(sizeof(uint32) * n, MCXT_ALLOC_HUGE);
	L->cmembers = palloc_extended(sizeof(uint32) * n * nassign, MCXT_ALLOC_HUGE);
	L->near = palloc(sizeof(int64) * nlist * L->nnear);
	L->maxlist = 0;

	train_centroids(s, nlist, rank, VS_GRAPH_IVF_SEED, centroids);
	source_set_rows(src, centroids, nlist, false);
	for (int64 q0 = 0, nq = 0; q0 < n; q0 += nq)
	{
		nq = Min((int64) KNN_CHUNK(src), n - q0);
		CHECK_FOR_INTERRUPTS();
		source_knn(src, s->vectors + (Size) q0 * dim, (int) nq, nassign, rank,
				   assign + q0 * nassign);
	}
	source_knn(src, centroids, nlist, L->nnear, rank, L->near);
	pfree(centroids);

	/* a row without an answer (NaN distances) goes to list 0 */
	for (int64 i = 0; i < n * nassign; i++)
		if (assign[i] < 0 || assign[i] >= nlist)
			assign[i] = i % nassign == 0 ? 0 : -1;
	for (int64 i = 0; i < n; i++)
	{
		L->offsets[assign[i * nassign] + 1]++;
		for (int a = 0; a < nassign; a++)
			if (assign[i * nassign + a] >= 0)
				L->coffsets[assign[i * nassign + a] + 1]++;
	}
	for (int c = 0; c < nlist; c++)
	{
		L->maxlist = Max(L->maxlist, L->offsets[c + 1]);
		L->offsets[c + 1] += L->offsets[c];
		L->coffsets[c + 1] += L->coffsets[c];
	}
	/* in row order */
	fill = palloc(sizeof(int64) * 2 * nlist);
	memcpy(fill, L->offsets, sizeof(int64) * nlist);
	memcpy(fill + nlist, L->coffsets, sizeof(int64) * nlist);
	for (int64 i = 0; i < n; i++)
	{
		L->members[fill[assign[i * nassign]]++] = (uint32) i;
		for (int a = 0; a < nassign; a++)
			if (assign[i * nassign + a] >= 0)
				L->cmembers[fill[nlist + assign[i * nassign + a]]++] = (uint32) i;
	}
	pfree(fill);
	pfree(assign);
}

/*
 * The IVF kNN (option build_knn): each list's rows are searched among its candidates, the
 * candidate rows of the list itself and of the VS_GRAPH_IVF_NPROBE lists nearest its centroid
 * (more while there are fewer than 2k): one dense kNN per list, exact among the candidates.  The
 * source must hold all rows (source_set_rows, keep_rows).
 */
static void
ivf_knn(KnnSource *src, const IvfLists *L, vs_metric rank, int K, int k, uint32 *knn)
{
	GraphBuildState *s = src->s;
	int64		n = s->n;
	uint32		dim = s->dim;
	const int	maxchunk = Max(VS_GRAPH_WORKER_KNN_CHUNK, VS_GRAPH_KNN_CHUNK);
	int64	   *cand = palloc_extended(sizeof(int64) * n, MCXT_ALLOC_HUGE);
	int32	   *stamp = palloc_extended(sizeof(int32) * n, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	float	   *qrows = palloc_extended(sizeof(float) * dim * Min(L->maxlist, (int64) maxchunk),
										MCXT_ALLOC_HUGE);
	int64	   *ids = palloc_extended(sizeof(int64) * (Size) maxchunk * k, MCXT_ALLOC_HUGE);
	int64		done = 0;
	double		pairs = 0;

	/* the CPU dataset of all rows (the entry's and the seeds' lookups) is not needed again */
	if (src->ds)
	{
		vs_dataset_destroy(src->ctx, src->ds);
		src->ds = NULL;
	}
	for (int c = 0; c < L->nlist; c++)
	{
		int64		m = L->offsets[c + 1] - L->offsets[c];
		const uint32 *queries = L->members + L->offsets[c];
		int64		ncand = 0;
		int			probed = 0;
		int			kk;

		if (m == 0)
			continue;
		CHECK_FOR_INTERRUPTS();
		/* the candidates: list c's, then those of the lists nearest its centroid, each once */
		for (int j = -1; j < L->nnear; j++)
		{
			int64		l = j < 0 ? c : L->near[(Size) c * L->nnear + j];

			if (j >= 0 && (l == c || l < 0 || l >= L->nlist))
				continue;
			if (probed >= VS_GRAPH_IVF_NPROBE && ncand >= 2 * (int64) k)
				break;
			for (int64 i = L->coffsets[l]; i < L->coffsets[l + 1]; i++)
				if (stamp[L->cmembers[i]] != c + 1)
				{
					stamp[L->cmembers[i]] = c + 1;
					cand[ncand++] = L->cmembers[i];
				}
			probed++;
		}
		kk = (int) Min((int64) k, ncand);
		pairs += (double) m * ncand;

		/* list c's rows are the queries */
		for (int64 q0 = 0, nq = 0; q0 < m; q0 += nq)
		{
			nq = Min((int64) KNN_CHUNK(src), m - q0);
			CHECK_FOR_INTERRUPTS();
			for (int q = 0; q < nq; q++)
				memcpy(qrows + (Size) q * dim, s->vectors + (Size) queries[q0 + q] * dim,
					   sizeof(float) * dim);
			source_knn_among(src, c, cand, ncand, qrows, (int) nq, kk, rank, ids);
			store_knn(knn, K, ids, (int) nq, kk, n, queries + q0, 0);
			done += nq;
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, done);
		}
	}
	elog(DEBUG1, "vs_graph build: IVF kNN over %d lists (largest %lld rows), %.1f %% of the "
		 "exact kNN's distances", L->nlist, (long long) L->maxlist,
		 100.0 * pairs / ((double) n * n));
	pfree(cand);
	pfree(stamp);
	pfree(qrows);
	pfree(ids);
}

/*
 * Whether the build's kNN is the IVF one: the option, or automatic from VS_GRAPH_IVF_MIN_ROWS
 * rows on a CPU (the backend's engine, or a worker with vsearch.worker_device = cpu); never
 * automatic through a GPU worker, whose exact kNN (a GEMM) measured 13x faster at 1M x 128 than
 * the IVF kNN's per-list requests, each of which copies and uploads its candidate rows
 * (docs/BENCHMARKS.md, session 23).
 */
static bool
use_ivf_knn(Relation index, int64 n, bool worker)
{
	switch (vs_graph_index_build_knn(index))
	{
		case VS_GRAPH_BUILD_KNN_EXACT:
			return false;
		case VS_GRAPH_BUILD_KNN_IVF:
			return true;
		default:
			return !(worker && vs_worker_device == VS_WORKER_DEVICE_GPU) &&
				n >= VS_GRAPH_IVF_MIN_ROWS;
	}
}

/*
 * knn (n x K): the K nearest other rows of every row, nearest first (VS_GRAPH_NO_NODE padded),
 * exact or by IVF candidates (use_ivf_knn); *entry: the row nearest the mean; seeds: the rows
 * nearest to k-means centroids.
 */
static void
compute_knn(GraphBuildState *s, Relation index, vs_metric metric, int K, uint32 *knn,
			uint32 *entry, uint32 *seeds, uint32 *nseeds, BuildClock *clock, bool *worker)
{
	KnnSource	src;
	int64		n = s->n;
	int			k = Min(K + 1, (int) n);
	bool		ivf;

	memset(&src, 0, sizeof(src));
	src.s = s;
	vs_ref_init(index, VS_GRAPH_KIND, &src.ref);
	src.ref.dim = s->dim;
	src.ref.metric = vs_rank_metric(metric);
	src.build_id = ((uint64) MyProcPid << 32) ^ (uint64) GetCurrentTimestamp();
	if (src.build_id == 0)
		src.build_id = 1;
	src.use_worker = true;		/* until it declines */

	PG_TRY();
	{
		int			chunk;
		int			nc;
		int64	   *ids;
		float	   *centroids;
		double	   *sum = palloc0(sizeof(double) * s->dim);
		float	   *mean = palloc(sizeof(float) * s->dim);
		IvfLists	lists;

		/* the seeds' centroids first (this backend's CPU engine): a worker that serves gets its
		 * lookups right after the rows, with no pause in which it could drop them */
		nc = vs_graph_index_seeds(index);
		if (nc > 0)
			nc = (int) Min((int64) nc, n);
		else
			nc = (int) Min(Min((int64) VS_GRAPH_DEFAULT_MAX_SEEDS, n),
						   (int64) ceil(2.0 * sqrt((double) n)));
		centroids = palloc(sizeof(float) * s->dim * nc);
		train_centroids(s, nc, VS_METRIC_L2SQ, VS_GRAPH_SEED, centroids);
		for (int64 i = 0; i < n; i++)
			for (uint32 d = 0; d < s->dim; d++)
				sum[d] += s->vectors[(Size) i * s->dim + d];
		for (uint32 d = 0; d < s->dim; d++)
			mean[d] = (float) (sum[d] / (double) n);
		clock_lap(clock, PART_SEEDS);

		source_set_rows(&src, s->vectors, n, false);
		clock_lap(clock, PART_UPLOAD);
		ivf = K > 0 && use_ivf_knn(index, n, src.use_worker);
		chunk = KNN_CHUNK(&src);
		ids = palloc_extended(sizeof(int64) * (Size) Max(chunk, VS_GRAPH_MAX_SEEDS) * Max(k, 1),
							  MCXT_ALLOC_HUGE);

		/* the entry: the row nearest the mean */
		source_knn(&src, mean, 1, 1, VS_METRIC_L2SQ, ids);
		*entry = ids[0] >= 0 && ids[0] < n ? (uint32) ids[0] : 0;

		/* the seeds: the rows nearest to the k-means centroids */
		*nseeds = 0;
		source_knn(&src, centroids, nc, 1, VS_METRIC_L2SQ, ids);
		for (int c = 0; c < nc; c++)
		{
			bool		dup = ids[c] < 0 || ids[c] >= n || (uint32) ids[c] == *entry;

			for (uint32 j = 0; j < *nseeds && !dup; j++)
				dup = seeds[j] == (uint32) ids[c];
			if (!dup)
				seeds[(*nseeds)++] = (uint32) ids[c];
		}
		pfree(centroids);

		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, n);
		if (ivf)
		{
			/* the lists (the worker's dataset: their centroids), then the rows again, with the
			 * worker's copy that its queries among candidates read */
			clock_lap(clock, PART_KNN);
			ivf_lists(&src, vs_rank_metric(metric), &lists);
			clock_lap(clock, PART_LISTS);
			source_set_rows(&src, s->vectors, n, true);
			clock_lap(clock, PART_UPLOAD);
			ivf_knn(&src, &lists, vs_rank_metric(metric), K, k, knn);
		}
		for (int64 q0 = 0; q0 < n && K > 0 && !ivf; q0 += chunk)
		{
			int			nq = (int) Min((int64) chunk, n - q0);

			CHECK_FOR_INTERRUPTS();
			source_knn(&src, s->vectors + (Size) q0 * s->dim, nq, k, vs_rank_metric(metric), ids);
			store_knn(knn, K, ids, nq, k, n, NULL, q0);
			pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, q0 + nq);
		}
		*worker = src.use_worker;
		clock_lap(clock, PART_KNN);

		pfree(ids);
	}
	PG_FINALLY();
	{
		if (src.ds)
			vs_dataset_destroy(src.ctx, src.ds);
		if (src.among_ds)
			vs_dataset_destroy(src.ctx, src.among_ds);
		vs_worker_build_end();
	}
	PG_END_TRY();
	if (src.dists)
		pfree(src.dists);
	if (src.among_rows)
		pfree(src.among_rows);
}

/*
 * The final graph (n x degree) from the kNN lists: rank-based pruning, reverse edges, and links
 * to every node a search from entry could not reach (the engine's vs_graph_build_edges on the
 * build engine's threads; its pruning time goes to that part of the clock).
 */
static void
build_graph(const uint32 *knn, int K, int64 n, int degree, uint32 entry, uint32 *graph,
			BuildClock *clock)
{
	vs_graph_build_info info;
	int			retries = 0;

	for (;;)
	{
		vs_status	st = vs_graph_build_edges(vs_build_engine(), knn, (size_t) n, (size_t) K,
											  (size_t) degree, entry, graph, &info);

		if (st == VS_OK)
			break;
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
	clock_lap(clock, PART_EDGES);
	clock->seconds[PART_PRUNE] += info.prune_seconds;
	clock->seconds[PART_EDGES] -= info.prune_seconds;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, n);
	elog(DEBUG1, "vs_graph build: %llu nodes linked for reachability, %llu still unreached",
		 (unsigned long long) info.linked, (unsigned long long) info.unreached);
}

/*
 * Navigability (the engine's vs_graph_link_unfound on the build engine's threads): every row is
 * searched for from the entry and the seeds, as an index scan would search, and a row the
 * search does not reach gets edges from the nearest rows it found and back.  Exact kNN lists keep
 * each row's edges inside its cluster, so without this a query of a cluster without a seed stalls
 * at the rim of the cluster its search started in (issue 15).
 */
static void
link_unfound(GraphBuildState *s, vs_metric metric, uint32 *graph, uint32 entry,
			 const uint32 *seeds, uint32 nseeds, BuildClock *clock)
{
	uint32	   *starts = palloc(sizeof(uint32) * (nseeds + 1));
	vs_graph_link_params params;
	vs_graph_link_info info;
	int			retries = 0;

	starts[0] = entry;
	memcpy(starts + 1, seeds, sizeof(uint32) * nseeds);
	memset(&params, 0, sizeof(params));
	params.metric = vs_rank_metric(metric);
	params.width = VS_GRAPH_LINK_WIDTH;
	params.links = VS_GRAPH_LINKS;
	params.starts = starts;
	params.nstarts = nseeds + 1;
	for (;;)
	{
		vs_status	st = vs_graph_link_unfound(vs_build_engine(), graph, (size_t) s->n,
											   s->degree, s->vectors, s->dim, &params, &info);

		if (st == VS_OK)
			break;
		/* a cancel leaves the graph as it was: start over */
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
	pfree(starts);
	clock_lap(clock, PART_LINKS);
	elog(DEBUG1, "vs_graph build: %llu nodes not found by their own search, %llu edges added",
		 (unsigned long long) info.unfound, (unsigned long long) info.linked);
}

/*
 * The seeds completed so that walks from the start nodes reach every node (the engine's
 * vs_graph_cover_starts): the kNN lists of clusters farther apart than build_degree rows reach
 * have no edge between them, and a cluster without a seed of its own was out of reach of every
 * search (issue 15).  The seeds that reach new nodes come first, then one node per unreached
 * island, then the other seeds, at most VS_GRAPH_MAX_SEEDS in all.  Called before the
 * navigability pass (islands get a start of their own, which also serves queries far from every
 * row) and after it (a slot it gave away may have been the way to a node); the second reports.
 */
static void
cover_starts(GraphBuildState *s, const uint32 *graph, uint32 entry, uint32 *seeds, uint32 *nseeds,
			 BuildClock *clock, bool report)
{
	uint32	   *out = palloc(sizeof(uint32) * VS_GRAPH_MAX_SEEDS);
	uint64		unreached = 0;
	int			m;

	CHECK_FOR_INTERRUPTS();
	m = vs_graph_cover_starts(graph, (size_t) s->n, s->degree, s->vectors, s->dim, &entry, 1,
							  seeds, *nseeds, out, VS_GRAPH_MAX_SEEDS, &unreached);
	if (m < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while choosing the start nodes of a vs_graph index")));
	memcpy(seeds, out, sizeof(uint32) * m);
	*nseeds = (uint32) m;
	pfree(out);
	clock_lap(clock, PART_EDGES);
	if (report)
		elog(DEBUG1, "vs_graph build: %d seeds, %llu nodes unreached from the start nodes",
			 m, (unsigned long long) unreached);
}

/* Writes the nodes as full node pages. */
static void
write_nodes(GraphBuildState *s, const uint32 *graph)
{
	int			per_page = VsGraphNodesPerPage(s->dim, s->degree);
	Page		tmp = (Page) palloc(BLCKSZ);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, s->n);
	for (int64 first = 0; first < s->n; first += per_page)
	{
		int			nitems = (int) Min((int64) per_page, s->n - first);
		Buffer		buf;
		GenericXLogState *xlog;
		Page		page;

		CHECK_FOR_INTERRUPTS();
		vs_graph_init_page(tmp, VS_GRAPH_NODES);
		for (int i = 0; i < nitems; i++)
		{
			VsGraphNode *node = VsGraphPageGetNode(tmp, s->dim, s->degree, i);
			int64		v = first + i;

			node->heap_tid = s->tids[v];
			node->flags = VS_GRAPH_NODE_LIVE;
			memcpy(node->x, s->vectors + (Size) v * s->dim, sizeof(float) * s->dim);
			memcpy(VsGraphNodeNbrs(node, s->dim), graph + (Size) v * s->degree,
				   sizeof(uint32) * s->degree);
		}
		vs_graph_page_set_items(tmp, s->dim, s->degree, nitems);

		buf = vs_new_buffer(s->index, MAIN_FORKNUM);
		Assert(BufferGetBlockNumber(buf) == VS_GRAPH_FIRST_NODE_BLKNO + first / per_page);
		xlog = GenericXLogStart(s->index);
		page = GenericXLogRegisterBuffer(xlog, buf, GENERIC_XLOG_FULL_IMAGE);
		memcpy(page, tmp, BLCKSZ);
		GenericXLogFinish(xlog);
		UnlockReleaseBuffer(buf);
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, first + nitems);
	}
	pfree(tmp);
}

/* The declared dimension (checked against the page size), or 0. */
static uint32
declared_dim(Relation index, uint32 degree)
{
	uint32		dim = vs_declared_dim(index);

	if (dim > 0)
	{
		vs_graph_check_dim((int) dim, degree);
		vs_graph_check_pq_m(vs_graph_index_pq_m(index), (int) dim);
	}
	return dim;
}

IndexBuildResult *
vs_graph_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	GraphBuildState state;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsGraphMetaPage meta;
	double		reltuples;
	uint32		entry = VS_GRAPH_NO_NODE;
	uint32		seeds[VS_GRAPH_MAX_SEEDS];
	uint32		nseeds = 0;
	BuildClock	clock;
	bool		worker = false;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	memset(&state, 0, sizeof(state));
	state.index = index;
	vs_graph_index_options(index, &state.degree, &state.build_degree);
	state.dim = declared_dim(index, state.degree);
	metric = vs_opclass_metric(index);

	/* Block 0: the metapage, so the index is readable even if the table is empty. */
	metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == VS_GRAPH_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	vs_graph_init_metapage(metapage, state.dim, metric, state.degree, state.build_degree);
	VsGraphPageGetMeta(metapage)->pq_m = (uint32) vs_graph_index_pq_m(index);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	state.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_graph build",
										 ALLOCSET_DEFAULT_SIZES);
	clock_start(&clock);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, GRAPH_PHASE_LOAD);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   build_callback, &state, NULL);
	clock_lap(&clock, PART_LOAD);

	if (state.n > 0)
	{
		int			K = (int) Min((int64) state.build_degree, state.n - 1);
		uint32	   *knn = palloc_extended(sizeof(uint32) * Max(K, 1) * state.n, MCXT_ALLOC_HUGE);
		uint32	   *graph = palloc_extended(sizeof(uint32) * state.degree * state.n,
											MCXT_ALLOC_HUGE);

		set_phase(GRAPH_PHASE_KNN, state.n);
		compute_knn(&state, index, metric, K, knn, &entry, seeds, &nseeds, &clock, &worker);
		set_phase(GRAPH_PHASE_PRUNE, state.n);
		build_graph(knn, K, state.n, (int) state.degree, entry, graph, &clock);
		pfree(knn);
		cover_starts(&state, graph, entry, seeds, &nseeds, &clock, false);
		link_unfound(&state, metric, graph, entry, seeds, nseeds, &clock);
		cover_starts(&state, graph, entry, seeds, &nseeds, &clock, true);
		set_phase(GRAPH_PHASE_WRITE, state.n);
		write_nodes(&state, graph);
		pfree(graph);
	}

	/* Publish the nodes in the metapage. */
	metabuf = ReadBuffer(index, VS_GRAPH_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_graph_page_meta(metapage);
	meta->dim = state.dim;
	meta->nnodes = (uint64) state.n;
	meta->ntuples = (uint64) state.n;
	meta->entry = entry;
	meta->nseeds = nseeds;
	memcpy(meta->seeds, seeds, sizeof(uint32) * nseeds);
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);
	clock_lap(&clock, PART_WRITE);
	clock_report(&clock, state.n, worker);

	MemoryContextDelete(state.tmpcxt);
	if (state.vectors)
	{
		pfree(state.vectors);
		pfree(state.tids);
	}

	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) state.n;
	return result;
}

/*
 * The init fork of an unlogged index: an empty metapage, WAL-logged unconditionally.
 */
void
vs_graph_buildempty(Relation index)
{
	uint32		degree;
	uint32		build_degree;
	uint32		dim;
	vs_metric	metric = vs_opclass_metric(index);
	Buffer		buf;
	Page		page;

	vs_graph_index_options(index, &degree, &build_degree);
	dim = declared_dim(index, degree);
	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	vs_graph_init_metapage(page, dim, metric, degree, build_degree);
	VsGraphPageGetMeta(page)->pq_m = (uint32) vs_graph_index_pq_m(index);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
