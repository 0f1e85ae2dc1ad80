/*
 * Running a batch of requests in the GPU worker (worker_proc.h): the requests are sorted so that
 * those one engine call can answer are neighbours (worker_intake.c), and each group -- up to
 * vsearch.batch_max queries on the same index, operation, metric, parameters (and radius) -- is
 * one call of the index kind's search on its cached object.  A build step (CREATE INDEX) is a group
 * of its own, run by the kind's build_step.  Every answer is then streamed (worker_answer.c).
 *
 * An ERROR while running a group fails its requests and the worker carries on; repeated device
 * errors end the process, whose replacement gets a fresh CUDA context.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "guc.h"
#include "indexkind.h"
#include "worker_proc.h"

/* After this many device errors in a row the worker exits, and comes back with a fresh context. */
#define VS_MAX_DEVICE_ERRORS	3

static void
count_call(int rc, Size queries)
{
	pg_atomic_fetch_add_u64(&vsw_shared->batches, 1);
	pg_atomic_fetch_add_u64(&vsw_shared->batch_queries, queries);
	vsw_device_errors = rc == VS_DEVICE_ERROR ? vsw_device_errors + 1 : 0;
	vsw_update_cache_stats();
	vsw_update_device_stats(false);
}

/*
 * The queries of a group, copied out of the requests' segments into one set (q0: each request's
 * first query in it).  Strings are checked as they are copied: offsets from 0, ascending, ending at
 * the characters the request's length leaves; a request whose offsets are not is answered INVALID
 * and left out.  Returns the requests kept.
 */
static int
gather_queries(VsActive **reqs, int n, VsQueries *out)
{
	const VsRequest *r0 = &reqs[0]->req;
	Size		nq = 0,
				nchars = 0;
	int			kept = 0;

	memset(out, 0, sizeof(*out));
	if (r0->qformat == VS_QUERIES_VECTORS)
	{
		float	   *v;

		for (int r = 0; r < n; r++)
		{
			reqs[r]->q0 = nq;
			nq += reqs[r]->req.nq;
		}
		v = MemoryContextAllocHuge(vsw_batch_cxt, nq * r0->dim * sizeof(float));
		for (int r = 0; r < n; r++)
			memcpy(v + reqs[r]->q0 * r0->dim, (char *) reqs[r]->hdr + reqs[r]->req.queries_off,
				   (Size) reqs[r]->req.nq * r0->dim * sizeof(float));
		out->nq = nq;
		out->vectors = v;
		return n;
	}

	for (int r = 0; r < n; r++)
	{
		nq += reqs[r]->req.nq;
		nchars += (reqs[r]->req.queries_len - (reqs[r]->req.nq + 1) * sizeof(uint64)) /
			sizeof(uint32);
	}
	{
		uint64	   *offsets = MemoryContextAllocHuge(vsw_batch_cxt, (nq + 1) * sizeof(uint64));
		uint32	   *chars = MemoryContextAllocHuge(vsw_batch_cxt, (nchars + 1) * sizeof(uint32));
		Size		q = 0,
					at = 0;

		offsets[0] = 0;
		for (int r = 0; r < n; r++)
		{
			const VsRequest *req = &reqs[r]->req;
			const char *base = (const char *) reqs[r]->hdr + req->queries_off;
			Size		len = (req->queries_len - (req->nq + 1) * sizeof(uint64)) / sizeof(uint32);
			uint64	   *off = offsets + q; /* this request's offsets, then rebased */
			bool		ok;

			memcpy(off, base, (req->nq + 1) * sizeof(uint64));
			ok = off[0] == 0 && off[req->nq] == len;
			for (uint32 i = 0; ok && i < req->nq; i++)
				ok = off[i + 1] >= off[i];
			if (!ok)
			{
				offsets[q] = at;
				vsw_finish_request(vsw_active_index(reqs[r]), VS_ANSWER_INVALID,
								   "string queries with malformed offsets");
				continue;
			}
			memcpy(chars + at, base + (req->nq + 1) * sizeof(uint64), len * sizeof(uint32));
			for (uint32 i = 0; i <= req->nq; i++)
				off[i] += at;
			reqs[r]->q0 = q;
			q += req->nq;
			at += len;
			reqs[kept++] = reqs[r];
		}
		out->nq = q;
		out->offsets = offsets;
		out->chars = chars;
	}
	return kept;
}

/* One engine call for search requests on the same index, operation, metric and parameters. */
static void
process_search(VsActive **reqs, int n)
{
	const VsRequest *r0 = &reqs[0]->req;
	const VsIndexKind *kind = vs_kind_by_id(r0->kind);	/* checked at intake */
	uint64		generation = 0;
	Size		nq;
	uint32		kmax = 0;
	VsCachedObject *entry;
	VsQueries	queries;
	VsResultBuf *buf;
	int			rc;
	bool		retried = false;
	char		err[256];
	uint64		engine_start,
				engine_end;

	n = gather_queries(reqs, n, &queries);
	if (n == 0)
		return;
	r0 = &reqs[0]->req;
	nq = queries.nq;
	for (int r = 0; r < n; r++)
	{
		generation = Max(generation, reqs[r]->req.generation);
		kmax = Max(kmax, reqs[r]->req.k);
	}

again:
	entry = vsw_cache_prepare(r0, generation, err, sizeof(err));
	if (!entry)
	{
		vsw_fail_group(reqs, n, err);
		return;
	}

	buf = MemoryContextAllocZero(vsw_result_cxt, sizeof(VsResultBuf));
	buf->refcount = 1;
	buf->is_range = r0->op == VS_OP_RANGE;
	vsw_set_cancel_group(reqs, n);
	engine_start = vs_clock_ns();
	if (!buf->is_range)
	{
		buf->ids = MemoryContextAllocHuge(vsw_result_cxt, nq * kmax * sizeof(int64));
		buf->distances = MemoryContextAllocHuge(vsw_result_cxt, nq * kmax * sizeof(float));
		buf->counts = MemoryContextAllocHuge(vsw_result_cxt, nq * sizeof(int64));
		for (;;)
		{
			rc = kind->knn(vsw_engine, entry->obj, &r0->params, &queries, kmax, buf->ids,
						   buf->distances, buf->counts);
			if (rc == VS_OUT_OF_MEMORY && vsw_cache_evict_one(entry))
				continue;
			break;
		}
	}
	else
	{
		for (;;)
		{
			rc = kind->range(vsw_engine, entry->obj, &r0->params, &queries, r0->radius, NULL,
							 NULL, &buf->range);
			if (rc != VS_OK)
				vs_range_result_free(&buf->range);
			if (rc == VS_OUT_OF_MEMORY && vsw_cache_evict_one(entry))
				continue;
			break;
		}
	}
	engine_end = vs_clock_ns();
	vsw_set_cancel_group(NULL, 0);
	/* the reason first: count_call's statistics are engine calls, which reset the last error */
	if (rc != VS_OK)
		snprintf(err, sizeof(err), "%s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(vsw_engine));
	count_call(rc, nq);

	/*
	 * A device of several was lost: the objects with rows on it are dropped and this group is
	 * answered once more from the devices left (loaded there again).
	 */
	if (rc == VS_DEVICE_ERROR && !retried && vs_context_device_count(vsw_engine) > 1 &&
		vs_context_live_devices(vsw_engine) > 0)
	{
		ereport(LOG,
				(errmsg("vsearch worker: a device was lost (%s); serving on the %d left",
						err, vs_context_live_devices(vsw_engine))));
		buf->is_range = false;	/* already freed */
		vsw_result_buf_release(buf);
		vsw_cache_clear();
		vsw_update_device_stats(true);
		vsw_device_errors = 0;
		retried = true;
		goto again;
	}

	if (rc != VS_OK)
	{
		if (rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: %s %s of index %u (%d queries) failed: %s",
								 kind->name, buf->is_range ? "range search" : "kNN",
								 r0->indexrelid, (int) nq, err)));
		vsw_fail_group(reqs, n, err);
		buf->is_range = false;	/* already freed */
		vsw_result_buf_release(buf);
		return;
	}
	for (int r = 0; r < n; r++)
	{
		reqs[r]->engine_start_ns = engine_start;
		reqs[r]->engine_end_ns = engine_end;
		vsw_answer_search(reqs[r], buf, kmax);
	}
	vsw_result_buf_release(buf);
}

/* A build step of CREATE INDEX (never grouped): the kind's build_step on the request's rows. */
static void
process_build(VsActive *a)
{
	const VsRequest *r = &a->req;
	const VsIndexKind *kind = vs_kind_by_id(r->kind);	/* checked at intake */
	const char *payload = r->payload_len > 0 ? (const char *) a->hdr + r->payload_off : NULL;
	char	   *answer = NULL;
	Size		len = 0;
	char		err[256] = "";
	MemoryContext old;
	int			rc;

	vsw_set_cancel_group(&a, 1);
	old = MemoryContextSwitchTo(vsw_result_cxt);
	rc = kind->build_step(vsw_engine, r, (const float *) ((char *) a->hdr + r->queries_off),
						  payload, &answer, &len, err, sizeof(err));
	MemoryContextSwitchTo(old);
	vsw_set_cancel_group(NULL, 0);
	count_call(rc, r->nq);
	if (rc != VS_OK)
	{
		if (rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: %s", err)));
		vsw_fail_group(&a, 1, err);
		return;
	}
	vsw_answer_bytes(a, answer, len);
}

/* A group, turning an ERROR into failed requests (the worker carries on). */
static void
process_group(VsActive **reqs, int n)
{
	MemoryContext old = CurrentMemoryContext;
	bool		failed = false;
	char		msg[256];
	int			live = 0;

	/* drop requests whose backends already gave up */
	for (int r = 0; r < n; r++)
	{
		if (vsw_slot_abandoned(vsw_active_index(reqs[r])))
			vsw_finish_request(vsw_active_index(reqs[r]), VS_ANSWER_ERROR, "abandoned");
		else
			reqs[live++] = reqs[r];
	}
	if (live == 0)
		return;

	PG_TRY();
	{
		if (reqs[0]->req.op == VS_OP_BUILD)
			process_build(reqs[0]);
		else
			process_search(reqs, live);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(old);
		edata = CopyErrorData();
		FlushErrorState();
		if (CurrentResourceOwner)
			vsw_load_cleanup(true);
		vsw_set_cancel_group(NULL, 0);
		strlcpy(msg, edata->message, sizeof(msg));
		ereport(LOG, (errmsg("vsearch worker: request failed: %s", msg)));
		failed = true;
	}
	PG_END_TRY();
	if (failed)
		vsw_fail_group(reqs, live, msg);
}

void
vsw_process_batch(VsActive **list, int n)
{
	int			start = 0;

	qsort(list, n, sizeof(VsActive *), vsw_request_cmp);
	while (start < n)
	{
		int			end = start + 1;
		Size		nq = list[start]->req.nq;

		while (end < n && vsw_same_group(&list[start]->req, &list[end]->req) &&
			   nq + list[end]->req.nq <= (Size) vs_batch_max)
			nq += list[end++]->req.nq;
		process_group(list + start, end - start);
		MemoryContextReset(vsw_batch_cxt);
		if (vsw_device_errors >= VS_MAX_DEVICE_ERRORS)
		{
			/* a CUDA context can be left unusable; a new process gets a new one */
			for (int r = end; r < n; r++)
				vsw_finish_request(vsw_active_index(list[r]), VS_ANSWER_ERROR,
								   "the worker is restarting");
			ereport(FATAL,
					(errmsg("vsearch worker: %d device errors in a row, restarting",
							vsw_device_errors)));
		}
		start = end;
		/* keep large answers moving between groups */
		vsw_pump_streams();
	}
}
