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
/* Most queries of a group a lane takes. */
#define VS_LANE_MAX_QUERIES		1024

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
 * and left out.  Allocated in cxt.  Returns the requests kept.
 */
static int
gather_queries(VsActive **reqs, int n, VsQueries *out, MemoryContext cxt)
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
		v = MemoryContextAllocHuge(cxt, nq * r0->dim * sizeof(float));
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
		uint64	   *offsets = MemoryContextAllocHuge(cxt, (nq + 1) * sizeof(uint64));
		uint32	   *chars = MemoryContextAllocHuge(cxt, (nchars + 1) * sizeof(uint32));
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

/*
 * The cached object of the call's index (loaded or refreshed if need be); false when it cannot be
 * had, the group failed.
 */
static bool
search_prepare(VsSearchCall *c)
{
	c->entry = vsw_cache_prepare(&c->reqs[0]->req, c->generation, c->err, sizeof(c->err));
	if (!c->entry)
	{
		vsw_fail_group(c->reqs, c->n, c->err);
		return false;
	}
	return true;
}

void
vsw_search_run(VsSearchCall *c)
{
	const VsRequest *r0 = &c->reqs[0]->req;
	VsResultBuf *buf = c->buf;

	vsw_set_cancel_group(c->reqs, c->n);
	c->start_ns = vs_clock_ns();
	if (!buf->is_range)
		c->rc = c->kind->knn(vsw_engine, c->entry->obj, &r0->params, &c->queries, c->kmax,
							 buf->ids, buf->distances, buf->counts);
	else
	{
		c->rc = c->kind->range(vsw_engine, c->entry->obj, &r0->params, &c->queries, r0->radius,
							   NULL, NULL, &buf->range);
		if (c->rc != VS_OK)
			vs_range_result_free(&buf->range);
	}
	c->end_ns = vs_clock_ns();
	vsw_set_cancel_group(NULL, 0);
	/* this thread's reason, before any other engine call resets it */
	if (c->rc != VS_OK)
		snprintf(c->err, sizeof(c->err), "%s: %s", vs_status_name((vs_status) c->rc),
				 vs_last_error(vsw_engine));
}

void
vsw_search_finish(VsSearchCall *c)
{
	VsResultBuf *buf = c->buf;
	bool		retried = false;

	for (;;)
	{
		/* room for the call's scratch: another object goes, and the call runs again here */
		if (c->rc == VS_OUT_OF_MEMORY)
		{
			if (!search_prepare(c))
				goto release;
			if (vsw_cache_evict_one(c->entry))
			{
				vsw_search_run(c);
				continue;
			}
		}
		count_call(c->rc, c->queries.nq);

		/*
		 * A device of several was lost: the objects with rows on it are dropped and this group is
		 * answered once more from the devices left (loaded there again).
		 */
		if (c->rc == VS_DEVICE_ERROR && !retried && vs_context_device_count(vsw_engine) > 1 &&
			vs_context_live_devices(vsw_engine) > 0)
		{
			ereport(LOG,
					(errmsg("vsearch worker: a device was lost (%s); serving on the %d left",
							c->err, vs_context_live_devices(vsw_engine))));
			vsw_cache_clear();
			vsw_update_device_stats(true);
			vsw_device_errors = 0;
			retried = true;
			if (!search_prepare(c))
				goto release;
			vsw_search_run(c);
			continue;
		}
		break;
	}

	if (c->rc != VS_OK)
	{
		if (c->rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: %s %s of index %u (%d queries) failed: %s",
								 c->kind->name, buf->is_range ? "range search" : "kNN",
								 c->reqs[0]->req.indexrelid, (int) c->queries.nq, c->err)));
		vsw_fail_group(c->reqs, c->n, c->err);
		goto release;
	}
	for (int r = 0; r < c->n; r++)
	{
		c->reqs[r]->engine_start_ns = c->start_ns;
		c->reqs[r]->engine_end_ns = c->end_ns;
		vsw_answer_search(c->reqs[r], buf, c->kmax);
	}
release:
	if (c->rc != VS_OK)
		buf->is_range = false;	/* a failed range result is freed already */
	vsw_result_buf_release(buf);
	c->buf = NULL;
}

/*
 * One engine call for search requests on the same index, operation, metric and parameters: on an
 * idle lane when lanes serve and the group is small (the serving path; large batches keep the
 * worker's thread and the device to themselves), else here.
 */
static void
process_search(VsActive **reqs, int n)
{
	VsSearchCall local;
	VsSearchCall *c = NULL;
	MemoryContext cxt = vsw_batch_cxt;
	Size		nq = 0;

	for (int r = 0; r < n; r++)
		nq += reqs[r]->req.nq;
	if (nq <= VS_LANE_MAX_QUERIES)
		c = vsw_lane_take(&cxt);
	if (c == NULL)
		c = &local;
	memset(c, 0, sizeof(*c));
	c->reqs = MemoryContextAlloc(cxt, sizeof(VsActive *) * n);
	memcpy(c->reqs, reqs, sizeof(VsActive *) * n);
	c->n = gather_queries(c->reqs, n, &c->queries, cxt);
	if (c->n == 0)
		return;					/* the lane stays idle */
	c->kind = vs_kind_by_id(c->reqs[0]->req.kind);	/* checked at intake */
	for (int r = 0; r < c->n; r++)
	{
		c->generation = Max(c->generation, c->reqs[r]->req.generation);
		c->kmax = Max(c->kmax, c->reqs[r]->req.k);
	}
	if (!search_prepare(c))
		return;

	c->buf = MemoryContextAllocZero(vsw_result_cxt, sizeof(VsResultBuf));
	c->buf->refcount = 1;
	c->buf->is_range = c->reqs[0]->req.op == VS_OP_RANGE;
	if (!c->buf->is_range)
	{
		nq = c->queries.nq;
		c->buf->ids = MemoryContextAllocHuge(vsw_result_cxt, nq * c->kmax * sizeof(int64));
		c->buf->distances = MemoryContextAllocHuge(vsw_result_cxt, nq * c->kmax * sizeof(float));
		c->buf->counts = MemoryContextAllocHuge(vsw_result_cxt, nq * sizeof(int64));
	}
	if (c != &local)
	{
		vsw_lane_submit(c);
		return;
	}
	vsw_search_run(c);
	vsw_search_finish(c);
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

void
vsw_check_device_errors(VsActive **pending, int n)
{
	if (vsw_device_errors < VS_MAX_DEVICE_ERRORS)
		return;
	/* a CUDA context can be left unusable; a new process gets a new one */
	for (int r = 0; r < n; r++)
		vsw_finish_request(vsw_active_index(pending[r]), VS_ANSWER_ERROR,
						   "the worker is restarting");
	ereport(FATAL,
			(errmsg("vsearch worker: %d device errors in a row, restarting",
					vsw_device_errors)));
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
		vsw_check_device_errors(list + end, n - end);
		start = end;
		/* keep large answers moving between groups */
		vsw_pump_streams();
	}
}
