/*
 * vs_graph's build: the kNN graph it starts from (graphbuild.c calls vs_graph_compute_knn in its
 * "computing knn" phase): the seeds' k-means (this backend's engine), the entry (the row nearest
 * (L2) the mean) and the seeds (the rows nearest the centroids), then the build_degree nearest
 * neighbours of every row in rank units (squared L2 for L2), by option build_knn (automatic: IVF
 * from VS_GRAPH_IVF_MIN_ROWS rows on a CPU, from VS_GRAPH_IVF_MIN_ROWS_GPU through a GPU worker):
 *
 *   exact       vs_knn over all rows, queries in chunks of VS_GRAPH_KNN_CHUNK rows,
 *               VS_GRAPH_WORKER_KNN_CHUNK through the worker;
 *   IVF         k-means lists (sqrt(rows) of them, at most VS_GRAPH_IVF_MAX_LISTS, trained here on
 *               a sample; every row's VS_GRAPH_IVF_ASSIGN nearest lists and every list's nearest
 *               lists by vs_knn over the centroids), then per list one dense vs_knn of its rows
 *               (those nearest its centroid) over its candidates: the rows with its list or one of
 *               the lists nearest its centroid (VS_GRAPH_IVF_NPROBE in all, more while there are
 *               fewer than 2 x build_degree) among their VS_GRAPH_IVF_ASSIGN nearest, so that a
 *               row on the border of two lists is a candidate of both.  Exact among the
 *               candidates; the rows' true neighbours outside them are missed (docs/BENCHMARKS.md:
 *               kNN-graph recall, and the index's recall against the exact build's).
 *
 * The exact kNN is O(rows^2 x dim) (the engine's blocked brute force on the CPU, GEMM tiles on the
 * GPU): seconds for 10^4..10^5 rows on a few cores, hours for 10^6 on a CPU.  The IVF kNN computes
 * about VS_GRAPH_IVF_ASSIGN x VS_GRAPH_IVF_NPROBE / lists of those distances, more with unequal
 * lists (a fifth at 10^5 rows, under a tenth from 10^6 on; reported at DEBUG1), plus the lists'
 * k-means and assignment (docs/INDEXES.md).  Memory besides the build's: the IVF lists (4 x (1 +
 * VS_GRAPH_IVF_ASSIGN) bytes per row) and, through the worker, a copy of the rows in the worker's
 * memory (graphworker.c).
 */
#include "postgres.h"

#include <math.h>

#include "commands/progress.h"
#include "miscadmin.h"
#include "utils/backend_progress.h"
#include "utils/timestamp.h"

#include "graphbuild.h"
#include "guc.h"
#include "worker.h"

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
 * Makes rows[0 .. n) the rows that source_knn and source_knn_among search (the worker's build
 * dataset replaced).
 */
static void
source_set_rows(KnnSource *src, const float *rows, int64 n)
{
	if (src->ds)
	{
		vs_dataset_destroy(src->ctx, src->ds);
		src->ds = NULL;
	}
	src->rows = rows;
	src->nrows = n;
	if (src->use_worker && !vs_graph_worker_load(&src->ref, src->build_id, rows, n))
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
 * The source must hold the build's rows (source_set_rows).
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
 * nearest of them and each list's nnear nearest lists (by the source lsrc, which searches the
 * centroids: the worker when it serves, beside the build's rows it keeps).
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
ivf_lists(KnnSource *lsrc, vs_metric rank, IvfLists *L)
{
	GraphBuildState *s = lsrc->s;
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
	source_set_rows(lsrc, centroids, nlist);
	for (int64 q0 = 0, nq = 0; q0 < n; q0 += nq)
	{
		nq = Min((int64) KNN_CHUNK(lsrc), n - q0);
		CHECK_FOR_INTERRUPTS();
		source_knn(lsrc, s->vectors + (Size) q0 * dim, (int) nq, nassign, rank,
				   assign + q0 * nassign);
	}
	source_knn(lsrc, centroids, nlist, L->nnear, rank, L->near);
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
 * source must hold all rows (source_set_rows).
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
 * rows on a CPU (the backend's engine, or a worker with vsearch.worker_device = cpu) and from
 * VS_GRAPH_IVF_MIN_ROWS_GPU through a GPU worker, whose exact kNN (a GEMM) is faster below it
 * (graph.h, docs/BENCHMARKS.md).
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
			return n >= (worker && vs_worker_device == VS_WORKER_DEVICE_GPU ?
						 VS_GRAPH_IVF_MIN_ROWS_GPU : VS_GRAPH_IVF_MIN_ROWS);
	}
}

void
vs_graph_compute_knn(GraphBuildState *s, Relation index, vs_metric metric, int K, uint32 *knn,
					 uint32 *entry, uint32 *seeds, uint32 *nseeds, BuildClock *clock,
					 bool *worker)
{
	KnnSource	src;
	KnnSource	lsrc;			/* the IVF kNN's lists: their centroids */
	int64		n = s->n;
	int			k = Min(K + 1, (int) n);
	bool		ivf;

	memset(&src, 0, sizeof(src));
	memset(&lsrc, 0, sizeof(lsrc));
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

		source_set_rows(&src, s->vectors, n);
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
			/* the lists, through a dataset of their centroids of its own (another build id for
			 * the worker, which keeps the rows that the queries among candidates read) */
			clock_lap(clock, PART_KNN);
			lsrc.s = s;
			lsrc.ref = src.ref;
			lsrc.build_id = src.build_id + 1 != 0 ? src.build_id + 1 : 1;
			lsrc.use_worker = src.use_worker;
			ivf_lists(&lsrc, vs_rank_metric(metric), &lists);
			/* the CPU path's queries among candidates copy their rows: free its copy of all */
			if (src.ds)
				vs_dataset_destroy(src.ctx, src.ds);
			src.ds = NULL;
			clock_lap(clock, PART_LISTS);
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
		if (lsrc.ds)
			vs_dataset_destroy(lsrc.ctx, lsrc.ds);
		vs_worker_build_end();
	}
	PG_END_TRY();
	if (src.dists)
		pfree(src.dists);
	if (lsrc.dists)
		pfree(lsrc.dists);
	if (src.among_rows)
		pfree(src.among_rows);
}
