/*
 * The GPU worker's entry points for a backend (worker.h): kNN, range and build requests, each
 * checked, sliced (vsearch.max_request_work, the kept segment, overlapped batches) and sent through
 * vs_worker_call with a sink laid out for its answer; the fallback when the worker cannot serve;
 * and the planner's cost of a distance while it serves on a GPU.  Apart from worker_client.c,
 * which moves one request of any kind through the session's segment.
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "utils/memutils.h"

#include "guc.h"
#include "indexkind.h"
#include "worker_client.h"

/*
 * The worker could not serve: ERROR under vsearch.device = gpu, else count a fallback and let the
 * caller search on the CPU.
 */
bool
vs_worker_decline(const char *reason)
{
	if (vs_device_mode == VS_DEVICE_GPU)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("vsearch.device is \"gpu\" but the GPU worker could not serve this search"),
				 errdetail("%s.", reason),
				 errhint("Set vsearch.device = auto to search on the CPU when the worker cannot "
						 "serve; vsearch_stat and the server log show the worker's state.")));
	if (vs_worker_shared)
		pg_atomic_fetch_add_u64(&vs_worker_shared->fallbacks, 1);
	elog(DEBUG1, "vsearch: searching on the CPU: %s", reason);
	return false;
}

/*
 * Planner hook (search.h): the cost of one distance computed for a search, relative to the
 * in-backend CPU engine.  While the worker serves on a GPU, this session's searches go there and a
 * distance costs VS_GPU_DISTANCE_COST; otherwise 1.
 */
#define VS_GPU_DISTANCE_COST	0.05

static double
worker_distance_cost(Oid indexrelid)
{
	VsWorkerShared *s = vs_worker_shared;
	bool		gpu;

	if (!s || vs_device_mode == VS_DEVICE_CPU)
		return 1.0;
	SpinLockAcquire(&s->mutex);
	gpu = s->state == VS_WORKER_SERVING && s->on_gpu;
	SpinLockRelease(&s->mutex);
	return gpu ? VS_GPU_DISTANCE_COST : 1.0;
}

void
vs_worker_client_init(void)
{
	if (vs_search_cost_hook == NULL)
		vs_search_cost_hook = worker_distance_cost;
}

/* Common checks; returns false (with a reason) when the request cannot go to the worker. */
static bool
worker_usable(const VsIndexRef *ref, const VsQueries *queries, char *reason, Size reasonlen)
{
	Size		nq = queries->nq;

	if (!vs_worker_shared)
	{
		snprintf(reason, reasonlen,
				 "vsearch is not in shared_preload_libraries, so no worker runs");
		return false;
	}
	if (ref->relpersistence == RELPERSISTENCE_TEMP)
	{
		snprintf(reason, reasonlen,
				 "temporary indexes live in backend-local buffers the worker cannot read");
		return false;
	}
	if (nq > VS_MAX_REQUEST_QUERIES ||
		(queries->vectors != NULL &&
		 (ref->dim < 1 || (uint64) nq * ref->dim > MaxAllocHugeSize / sizeof(float) / 2)) ||
		(queries->vectors == NULL &&
		 vs_request_query_bytes(ref, queries) > MaxAllocHugeSize / 2))
	{
		snprintf(reason, reasonlen, "the request is too large for the worker");
		return false;
	}
	if (pg_atomic_read_u64(&vs_worker_shared->stalled_at) ==
		pg_atomic_read_u64(&vs_worker_shared->heartbeat) + 1)
	{
		snprintf(reason, reasonlen,
				 "the vsearch worker has made no progress since a search gave up waiting for it "
				 "(vsearch.worker_timeout)");
		return false;
	}
	return true;
}

/*
 * Queries per request (vsearch.max_request_work): a session that is not a superuser's sends a
 * batch whose work -- its queries times the index's entries -- exceeds the setting as several
 * requests in turn, each within it (at least one query).  The worker takes the pending requests
 * of every backend on each pass, so other sessions' searches are answered between the slices
 * instead of after the whole batch.
 */
static int
queries_per_request(const VsIndexRef *ref, int nq)
{
	double		per;

	if (vs_max_request_work <= 0 || superuser())
		return nq;
	per = (double) vs_max_request_work * 1e6 / (double) Max(ref->ntuples, 1);
	return per >= nq ? nq : Max(1, (int) per);
}

/*
 * Most vector queries of one kNN request whose segment stays within the one a session keeps
 * (VS_KEEP_SEGMENT_MAX): a larger batch goes as several requests through the same segment,
 * mapped once on both sides, instead of a segment created for the call, faulted in by the
 * backend's copy and the worker's read, and dropped after it (10 000 queries of 784 dimensions
 * are a 33 MB segment: docs/WORKER.md, "Where a batch call's time goes").  The answer area is at
 * most VS_MAX_AREA, and at least VS_MIN_AREA, whatever the slice.
 */
static int
queries_per_segment(const VsIndexRef *ref, const VsQueries *queries, int k)
{
	Size		fixed = MAXALIGN(sizeof(VsRequest)) + 2 * MAXIMUM_ALIGNOF;
	Size		qsize = (Size) ref->dim * sizeof(float);
	Size		asize = sizeof(int64) + (Size) k * (sizeof(int64) + sizeof(float));
	Size		whole,
				capped;

	if (queries->vectors == NULL)
		return (int) queries->nq;
	/* answers within the area as sized for the slice, or the slice's queries beside a full area */
	whole = (VS_KEEP_SEGMENT_MAX - fixed - VS_MIN_AREA) / (qsize + asize);
	capped = (VS_KEEP_SEGMENT_MAX - fixed - VS_MAX_AREA) / qsize;
	return (int) Min((Size) queries->nq, Max(Max(whole, capped), 1));
}

/*
 * A batch answered with a progress callback goes as requests of at most a quarter of it (at
 * least VS_OVERLAP_MIN_QUERIES queries), so that the caller checks the rows of one while the
 * worker computes the next.
 */
#define VS_OVERLAP_MIN_QUERIES	1024

static bool
knn_call(const VsIndexRef *ref, const VsKindParams *params, const VsRequestPatch *patch,
		 const VsQueries *queries, int k, uint32 maxk, int64 *ids, float *distances,
		 int64 *counts, VsKnnProgress progress, void *progress_arg)
{
	char		reason[300];
	VsCall		call;
	int			nq = (int) queries->nq;
	int			slice;

	if (vs_device_mode == VS_DEVICE_CPU || nq == 0 || k <= 0 ||
		(queries->vectors != NULL && ref->dim == 0))
		return false;
	if (!worker_usable(ref, queries, reason, sizeof(reason)))
		return vs_worker_decline(reason);
	if ((uint32) k > maxk || (uint64) nq * k > VS_MAX_KNN_RESULTS)
		return vs_worker_decline("k is larger than the worker accepts");

	memset(&call, 0, sizeof(call));
	call.op = VS_OP_KNN;
	call.k = k;
	call.params = params;
	call.patch = patch;
	slice = Min(queries_per_request(ref, nq), queries_per_segment(ref, queries, k));
	if (progress != NULL)
		slice = Min(slice, Max(VS_OVERLAP_MIN_QUERIES, (nq + 3) / 4));
	for (int q0 = 0; q0 < nq; q0 += slice)
	{
		int			n = Min(slice, nq - q0);
		VsQueries	part = vs_queries_slice(queries, ref->dim, q0, n);
		VsSink		sink;

		call.progress = q0 > 0 ? progress : NULL;
		call.progress_arg = progress_arg;
		call.progress_upto = q0;

		memset(&sink, 0, sizeof(sink));
		sink.op = VS_OP_KNN;
		sink.nq = n;
		sink.k = k;
		vs_sink_add(&sink, counts + q0, (uint64) n * sizeof(int64));
		vs_sink_add(&sink, ids + (Size) q0 * k, (uint64) n * k * sizeof(int64));
		vs_sink_add(&sink, distances + (Size) q0 * k, (uint64) n * k * sizeof(float));
		if (!vs_worker_call(ref, &call, &part, &sink, reason, sizeof(reason)))
			return vs_worker_decline(reason);
		for (int i = q0; i < q0 + n; i++)
			if (counts[i] < 0 || counts[i] > k)
			{
				snprintf(reason, sizeof(reason),
						 "the worker's answer does not match the request: a count of "
						 INT64_FORMAT " for k = %d", counts[i], k);
				elog(WARNING, "vsearch: %s", reason);
				return vs_worker_decline(reason);
			}
	}
	return true;
}

bool
vs_worker_knn(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries, int k,
			  int64 *ids, float *distances, int64 *counts)
{
	return knn_call(ref, params, NULL, queries, k, vs_ref_kind(ref)->max_k, ids, distances, counts,
					NULL, NULL);
}

bool
vs_worker_knn_overlapped(const VsIndexRef *ref, const VsKindParams *params,
						 const VsQueries *queries, int k, int64 *ids, float *distances,
						 int64 *counts, VsKnnProgress progress, void *arg)
{
	return knn_call(ref, params, NULL, queries, k, vs_ref_kind(ref)->max_k, ids, distances, counts,
					progress, arg);
}

bool
vs_worker_raw_knn(const VsIndexRef *ref, const VsKindParams *params, const VsRequestPatch *patch,
				  const float *query, int k, int64 *ids, float *distances, int64 *counts)
{
	VsQueries	qs = vs_vector_queries(query, 1);

	return knn_call(ref, params, patch, &qs, k, PG_UINT32_MAX, ids, distances, counts, NULL, NULL);
}

/*
 * A range search in the worker, its answer streamed to consume block by block.  A batch split by
 * vsearch.max_request_work sends its slices in turn, each slice's answer handed on as it comes.
 * False when the worker did not answer all queries: *from says how many it did (their answers
 * were all handed on) and the caller searches the rest.  A worker that fails after part of a
 * query's matches were handed on cannot be taken over: that is an ERROR.
 */
bool
vs_worker_range(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries,
				double radius, VsRangeConsumer consume, void *arg, int *from)
{
	char		reason[300];
	VsCall		call;
	int			nq = (int) queries->nq;
	int			slice;

	*from = 0;
	if (vs_device_mode == VS_DEVICE_CPU || nq == 0 || isnan(radius) ||
		(queries->vectors != NULL && ref->dim == 0))
		return false;
	if (!worker_usable(ref, queries, reason, sizeof(reason)))
		return vs_worker_decline(reason);

	memset(&call, 0, sizeof(call));
	call.op = VS_OP_RANGE;
	call.radius = radius;
	call.params = params;
	slice = queries_per_request(ref, nq);
	for (int q0 = 0; q0 < nq; q0 += slice)
	{
		VsQueries	part = vs_queries_slice(queries, ref->dim, q0, Min(slice, nq - q0));
		VsSink		sink;

		memset(&sink, 0, sizeof(sink));
		sink.op = VS_OP_RANGE;
		sink.nq = (int) part.nq;
		sink.consume = consume;
		sink.arg = arg;
		sink.q_base = q0;
		if (!vs_worker_call(ref, &call, &part, &sink, reason, sizeof(reason)))
		{
			if (sink.split)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("the vsearch worker failed in the middle of a range answer"),
						 errdetail("%s.", reason),
						 errhint("Run the statement again; vsearch_stat and the server log show "
								 "the worker's state.")));
			*from = q0 + sink.next_q;
			return vs_worker_decline(reason);
		}
		*from = q0 + (int) part.nq;
	}
	return true;
}

/*
 * A build step in the worker: the rows and the payload go through this backend's DSM segment (a
 * sample or a chunk of rows larger than the kept size gets a segment of its own size, in whole
 * MB), the answer streams into the caller's parts.  The engine's CPU and CUDA backends are each
 * deterministic, but need not compute the same result, so a build done with the worker on a GPU
 * may differ from one done without it.
 */
bool
vs_worker_build(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *rows,
				const VsWorkerBuffer *payload, int npayload, const VsWorkerBuffer *answer,
				int nanswer, bool keep_segment)
{
	char		reason[300];
	VsSink		sink;
	VsCall		call;

	if (vs_device_mode == VS_DEVICE_CPU || rows->nq == 0 ||
		(rows->vectors != NULL && ref->dim == 0))
		return false;
	if (!vs_worker_shared)
		return vs_worker_decline("vsearch is not in shared_preload_libraries, so no worker runs");
	if (rows->nq > VS_MAX_REQUEST_QUERIES)
		return vs_worker_decline("the rows are more than the worker accepts");

	if (nanswer > (int) lengthof(sink.regions))
		elog(ERROR, "vsearch worker: a build step's answer has at most %d parts",
			 (int) lengthof(sink.regions));
	memset(&sink, 0, sizeof(sink));
	sink.op = VS_OP_BUILD;
	sink.nq = (int) rows->nq;
	memset(&call, 0, sizeof(call));
	call.op = VS_OP_BUILD;
	call.params = params;
	call.payload = payload;
	call.npayload = npayload;
	call.keep_segment = keep_segment;
	for (int i = 0; i < nanswer; i++)
	{
		vs_sink_add(&sink, answer[i].data, answer[i].len);
		call.answer_len += answer[i].len;
	}
	if (!vs_worker_call(ref, &call, rows, &sink, reason, sizeof(reason)))
		return vs_worker_decline(reason);
	return true;
}
