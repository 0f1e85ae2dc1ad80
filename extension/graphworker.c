/*
 * vs_graph: the GPU worker's side of the index kind (indexkind.h): checking requests (a search's
 * parameters are graphobject.c's), and the build steps of CREATE INDEX that the worker runs
 * (VS_OP_BUILD), so that the build's exact kNN graph -- O(rows^2 x dim), all but a little of a
 * CPU build's time -- is computed by the worker's engine (on the GPU: the exact kNN as GEMM
 * tiles).  The rest of the build (pruning, reverse edges, pages) stays in the backend; the
 * engine's kNN answers are the same on every backend (ids and distances, ties by id), so the
 * index is the same as a backend-only build's.
 *
 *   VS_GRAPH_LOAD  the request's rows are rows [first, first + n) of the build; the worker adds
 *                  them to a dataset of its engine kept for the build (ids = row numbers), which
 *                  must have exactly `first` rows already.  Answer: uint64 rows held.
 *   VS_GRAPH_KNN   the request's rows are queries; the worker answers int64 ids[n x k] of their k
 *                  nearest rows in the build's dataset, which must hold `total` rows (vs_knn, the
 *                  request's metric).
 *   VS_GRAPH_KNN_AMONG  the same among the rows named by the payload (int64 row numbers, each
 *                  once): the IVF kNN's query of a list's rows among its candidates (graphknn.c).
 *                  The engine copies those rows within the device into a dataset of their own
 *                  (vs_dataset_subset; ids = row numbers, so the answer is what a backend's engine
 *                  gives over the same rows), dropped after the answer.
 *
 * The backend side, vs_graph_worker_knn, sends them (worker.h, vs_worker_build).  A build's dataset
 * is dropped when another build needs the room (VS_GRAPH_DATASETS of them) or after
 * VS_GRAPH_DATASET_IDLE_MS without a request (the build ended or died).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "graph.h"
#include "guc.h"
#include "vector.h"
#include "worker.h"
#include "worker_internal.h"

#define VS_GRAPH_DATASETS			4	/* an IVF build holds two: its rows, its lists' centroids */
#define VS_GRAPH_DATASET_IDLE_MS	60000

typedef struct VsGraphDataset
{
	uint64		build_id;		/* 0: unused */
	uint32		dim;
	uint64		rows;
	vs_dataset *ds;
	TimestampTz last_used;
} VsGraphDataset;

static VsGraphDataset datasets[VS_GRAPH_DATASETS];

/* ---- checking requests --------------------------------------------------------------------- */

bool
vs_graph_check_request(const VsRequest *r, char *why, Size whylen)
{
	VsGraphBuildParams p;

	if (r->op != VS_OP_BUILD)
		return vs_graph_check_search(r, why, whylen);
	memcpy(&p, &r->params, sizeof(p));
	if (r->metric != VS_METRIC_L2 && r->metric != VS_METRIC_L2SQ && r->metric != VS_METRIC_IP &&
		r->metric != VS_METRIC_COSINE)
		snprintf(why, whylen, "vs_graph does not support metric %u", r->metric);
	else if (p.build_id == 0 || p.total == 0 || p.total >= VS_GRAPH_NO_NODE)
		snprintf(why, whylen, "invalid vs_graph build (id %llu, %llu rows)",
				 (unsigned long long) p.build_id, (unsigned long long) p.total);
	else if (p.step == VS_GRAPH_LOAD &&
			 (p.first + r->nq > p.total ||
			  (uint64) r->nq * r->dim * sizeof(float) > VS_GRAPH_MAX_STEP_BYTES))
		snprintf(why, whylen, "invalid vs_graph load step (rows %llu + %u of %llu)",
				 (unsigned long long) p.first, r->nq, (unsigned long long) p.total);
	else if ((p.step == VS_GRAPH_KNN || p.step == VS_GRAPH_KNN_AMONG) &&
			 (p.k < 1 || p.k > VS_GRAPH_MAX_BUILD_DEGREE + 1 || p.k > p.total ||
			  (uint64) r->nq * p.k * sizeof(int64) > VS_GRAPH_MAX_STEP_BYTES))
		snprintf(why, whylen, "invalid vs_graph kNN step (k %u, %u queries, %llu rows)",
				 p.k, r->nq, (unsigned long long) p.total);
	else if (p.step != VS_GRAPH_LOAD && p.step != VS_GRAPH_KNN && p.step != VS_GRAPH_KNN_AMONG)
		snprintf(why, whylen, "unknown vs_graph build step %u", p.step);
	else if (p.step == VS_GRAPH_KNN_AMONG &&
			 (r->payload_len == 0 || r->payload_len % sizeof(int64) != 0 ||
			  r->payload_len / sizeof(int64) < p.k ||
			  r->payload_len > VS_GRAPH_MAX_STEP_BYTES))
		snprintf(why, whylen, "invalid vs_graph kNN step among rows (%llu payload bytes, k %u)",
				 (unsigned long long) r->payload_len, p.k);
	else if (p.step != VS_GRAPH_KNN_AMONG && r->payload_len != 0)
		snprintf(why, whylen, "this vs_graph build step carries no payload");
	else
		return true;
	return false;
}

/* ---- the build's datasets ------------------------------------------------------------------ */

static void
dataset_drop(struct vs_context *engine, VsGraphDataset *d)
{
	if (d->ds && engine)
		vs_dataset_destroy(engine, d->ds);
	memset(d, 0, sizeof(*d));
}

/* Drops the datasets idle for VS_GRAPH_DATASET_IDLE_MS (all of them when stop is set). */
void
vs_graph_worker_tick(struct vs_context *engine, bool stop)
{
	TimestampTz now = 0;

	for (int i = 0; i < VS_GRAPH_DATASETS; i++)
	{
		if (datasets[i].build_id == 0)
			continue;
		if (!stop && now == 0)
			now = GetCurrentTimestamp();
		if (stop || TimestampDifferenceExceeds(datasets[i].last_used, now,
											   VS_GRAPH_DATASET_IDLE_MS))
			dataset_drop(engine, &datasets[i]);
	}
}

static VsGraphDataset *
dataset_find(uint64 build_id, uint32 dim)
{
	for (int i = 0; i < VS_GRAPH_DATASETS; i++)
		if (datasets[i].build_id == build_id && datasets[i].dim == dim)
			return &datasets[i];
	return NULL;
}

static int
load_step(struct vs_context *engine, const VsRequest *r, const VsGraphBuildParams *p,
		  const float *rows, char **answer, Size *answer_len, char *err, Size errlen)
{
	VsGraphDataset *d = dataset_find(p->build_id, r->dim);
	int64	   *ids;
	int			rc;

	if (p->first == 0)
	{
		/* a build's first rows: a new dataset, in a free slot or the least recently used one */
		if (d != NULL)
			dataset_drop(engine, d);
		for (int i = 0; i < VS_GRAPH_DATASETS; i++)
		{
			if (datasets[i].build_id == 0)
			{
				d = &datasets[i];
				break;
			}
			if (d == NULL || datasets[i].last_used < d->last_used)
				d = &datasets[i];
		}
		dataset_drop(engine, d);
		rc = vs_dataset_create(engine, r->dim, VS_DTYPE_F32, &d->ds);
		if (rc != VS_OK)
		{
			snprintf(err, errlen, "graph load: %s: %s", vs_status_name((vs_status) rc),
					 vs_last_error(engine));
			memset(d, 0, sizeof(*d));
			return rc;
		}
		d->build_id = p->build_id;
		d->dim = r->dim;
		d->rows = 0;
	}
	else if (d == NULL || d->rows != p->first)
	{
		snprintf(err, errlen, "graph load: the build's dataset holds %llu rows, not %llu",
				 d ? (unsigned long long) d->rows : 0ULL, (unsigned long long) p->first);
		return VS_INVALID_ARGUMENT;
	}
	ids = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(int64) * Max(r->nq, 1));
	for (uint32 i = 0; i < r->nq; i++)
		ids[i] = (int64) (p->first + i);
	rc = vs_dataset_add(engine, d->ds, rows, ids, r->nq);
	pfree(ids);
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "graph load: %s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(engine));
		dataset_drop(engine, d);
		return rc;
	}
	d->rows += r->nq;
	d->last_used = GetCurrentTimestamp();
	*answer_len = sizeof(uint64);
	*answer = MemoryContextAlloc(CurrentMemoryContext, sizeof(uint64));
	memcpy(*answer, &d->rows, sizeof(uint64));
	return VS_OK;
}

static int
knn_step(struct vs_context *engine, const VsRequest *r, const VsGraphBuildParams *p,
		 const float *rows, char **answer, Size *answer_len, char *err, Size errlen)
{
	VsGraphDataset *d = dataset_find(p->build_id, r->dim);
	int64	   *ids;
	float	   *dists;
	int			rc;

	if (d == NULL || d->rows != p->total)
	{
		snprintf(err, errlen, "graph kNN: the build's dataset holds %llu rows, not %llu",
				 d ? (unsigned long long) d->rows : 0ULL, (unsigned long long) p->total);
		return VS_INVALID_ARGUMENT;
	}
	*answer_len = sizeof(int64) * (Size) r->nq * p->k;
	ids = MemoryContextAllocHuge(CurrentMemoryContext, *answer_len);
	dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * (Size) r->nq * p->k);
	/* the queries are read in place: a backend that scribbles on them only spoils its own index */
	rc = vs_knn(engine, d->ds, rows, r->nq, p->k, (vs_metric) r->metric, NULL, ids, dists, NULL);
	pfree(dists);
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "graph kNN: %s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(engine));
		pfree(ids);
		if (rc == VS_DEVICE_ERROR)
			dataset_drop(engine, d);
		return rc;
	}
	d->last_used = GetCurrentTimestamp();
	*answer = (char *) ids;
	return VS_OK;
}

static int
knn_among_step(struct vs_context *engine, const VsRequest *r, const VsGraphBuildParams *p,
			   const float *queries, const int64 *among, char **answer, Size *answer_len,
			   char *err, Size errlen)
{
	VsGraphDataset *d = dataset_find(p->build_id, r->dim);
	Size		n = r->payload_len / sizeof(int64);
	float	   *dists;
	int64	   *ids;
	vs_dataset *ds = NULL;
	int			rc;

	if (d == NULL || d->rows != p->total)
	{
		snprintf(err, errlen, "graph kNN among rows: the build's dataset holds %llu rows, not %llu",
				 d ? (unsigned long long) d->rows : 0ULL, (unsigned long long) p->total);
		return VS_INVALID_ARGUMENT;
	}
	/* a row number outside the build, or one named twice, is the engine's VS_INVALID_ARGUMENT */
	rc = vs_dataset_subset(engine, d->ds, among, n, &ds);
	*answer_len = sizeof(int64) * (Size) r->nq * p->k;
	ids = MemoryContextAllocHuge(CurrentMemoryContext, *answer_len);
	dists = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(float) * (Size) r->nq * p->k);
	if (rc == VS_OK)
		rc = vs_knn(engine, ds, queries, r->nq, p->k, (vs_metric) r->metric, NULL, ids, dists,
					NULL);
	if (ds)
		vs_dataset_destroy(engine, ds);
	pfree(dists);
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "graph kNN among rows: %s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(engine));
		pfree(ids);
		if (rc == VS_DEVICE_ERROR)
			dataset_drop(engine, d);
		return rc;
	}
	d->last_used = GetCurrentTimestamp();
	*answer = (char *) ids;
	return VS_OK;
}

int
vs_graph_build_step(struct vs_context *engine, const VsRequest *req, const float *rows,
					const char *payload, char **answer, Size *answer_len, char *err, Size errlen)
{
	VsGraphBuildParams p;

	memcpy(&p, &req->params, sizeof(p));
	if (p.step == VS_GRAPH_LOAD)
		return load_step(engine, req, &p, rows, answer, answer_len, err, errlen);
	if (p.step == VS_GRAPH_KNN_AMONG)
		return knn_among_step(engine, req, &p, rows, (const int64 *) payload, answer, answer_len,
							  err, errlen);
	return knn_step(engine, req, &p, rows, answer, answer_len, err, errlen);
}

/* ---- asking the worker (backends) ---------------------------------------------------------- */

StaticAssertDecl(sizeof(VsGraphBuildParams) <= VS_KIND_PARAMS_SIZE,
				 "a build step's parameters fit a request's parameter block");

static void
step_params(VsGraphBuildStep step, uint64 build_id, uint64 total, uint64 first, uint32 k,
			VsKindParams *out)
{
	VsGraphBuildParams p;

	memset(&p, 0, sizeof(p));
	p.step = step;
	p.k = k;
	p.build_id = build_id;
	p.total = total;
	p.first = first;
	memset(out, 0, sizeof(*out));
	memcpy(out, &p, sizeof(p));
}

bool
vs_graph_worker_load(const VsIndexRef *ref, uint64 build_id, const float *rows, int64 n)
{
	int64		chunk;

	if (vs_device_mode == VS_DEVICE_CPU || n <= 0)
		return false;
	chunk = Max((int64) (VS_GRAPH_MAX_STEP_BYTES / (sizeof(float) * ref->dim)), 1);
	for (int64 first = 0; first < n; first += chunk)
	{
		int			nr = (int) Min(chunk, n - first);
		VsKindParams kp;
		uint64		held = 0;
		VsWorkerBuffer answer = {&held, sizeof(held)};
		VsQueries	qs = vs_vector_queries(rows + (Size) first * ref->dim, nr);

		CHECK_FOR_INTERRUPTS();
		step_params(VS_GRAPH_LOAD, build_id, (uint64) n, (uint64) first, 0, &kp);
		if (!vs_worker_build(ref, &kp, &qs, NULL, 0, &answer, 1, true))
			return false;
		if (held != (uint64) (first + nr))
			elog(ERROR, "vsearch worker: the graph build's dataset holds %llu rows, not %llu",
				 (unsigned long long) held, (unsigned long long) (first + nr));
	}
	return true;
}

bool
vs_graph_worker_knn(const VsIndexRef *ref, uint64 build_id, int64 total, const float *queries,
					int nq, int k, int64 *ids)
{
	VsKindParams kp;
	VsWorkerBuffer answer = {ids, sizeof(int64) * (Size) nq * k};
	VsQueries	qs = vs_vector_queries(queries, Max(nq, 0));

	if (vs_device_mode == VS_DEVICE_CPU || nq <= 0)
		return false;
	step_params(VS_GRAPH_KNN, build_id, (uint64) total, 0, (uint32) k, &kp);
	return vs_worker_build(ref, &kp, &qs, NULL, 0, &answer, 1, true);
}

bool
vs_graph_worker_knn_among(const VsIndexRef *ref, uint64 build_id, int64 total, const int64 *rows,
						  int64 nrows, const float *queries, int nq, int k, int64 *ids)
{
	VsKindParams kp;
	VsWorkerBuffer answer = {ids, sizeof(int64) * (Size) nq * k};
	VsWorkerBuffer payload = {(void *) rows, sizeof(int64) * (Size) nrows};
	VsQueries	qs = vs_vector_queries(queries, Max(nq, 0));

	if (vs_device_mode == VS_DEVICE_CPU || nq <= 0)
		return false;
	if (payload.len > VS_GRAPH_MAX_STEP_BYTES)
		return vs_worker_decline("the candidate rows are more than the worker accepts");
	step_params(VS_GRAPH_KNN_AMONG, build_id, (uint64) total, 0, (uint32) k, &kp);
	return vs_worker_build(ref, &kp, &qs, &payload, 1, &answer, 1, true);
}
