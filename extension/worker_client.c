/*
 * Backend side of the GPU worker protocol (docs/WORKER.md): the session's segment and slots, and
 * one request sent and waited for (vs_worker_call).  The entry points that build the requests are
 * in worker_client_calls.c, the checks of the answer stream in worker_client_sink.c
 * (worker_client.h).
 *
 * A search request goes into a DSM segment this backend keeps for the session (reused while it
 * is large enough); one of this backend's two slots in shared memory points the worker at it.
 * The backend sleeps on its latch; the worker streams the answer back through the segment's
 * result area, one chunk at a time, and marks the slot DONE after the last one.  Query cancel and
 * statement_timeout set the latch, so the wait is interrupted at once; the backend then marks the
 * slot abandoned and drops its segment (the worker, which may still map it, discards the answer).
 *
 * Every way the worker can fail to answer (none running, no GPU, a worker error, a worker that
 * makes no progress for vsearch.worker_timeout, a restart) ends in vs_worker_* returning false:
 * the caller then runs the search on this backend's CPU, and the fallback is counted.  With
 * vsearch.device = gpu it is an ERROR instead.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/resowner.h"

#include "guc.h"
#include "worker_client.h"

#define VS_MIN_SEGMENT			((Size) 64 * 1024)
/* How often a waiting backend re-checks that the worker is alive and progressing. */
#define VS_POLL_MS				20

static dsm_segment *client_seg = NULL;
static bool exit_callback_registered = false;
static uint64 request_counter = 0;

/* ---- slots -------------------------------------------------------------------------------- */

static VsSlot *
my_slot(int i)
{
	return &vs_worker_shared->slots[VS_MY_PROCNO * VS_SLOTS_PER_BACKEND + i];
}

/*
 * Gives up a request: a slot the worker has not taken becomes free, one it is working on is
 * marked abandoned (the worker frees it).  Returns true when the worker may still map the segment.
 */
static bool
abandon_slot(VsSlot *slot, uint64 request_id)
{
	bool		worker_has_it = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == request_id)
	{
		if (slot->state == VS_SLOT_SUBMITTED || slot->state == VS_SLOT_DONE)
			slot->state = VS_SLOT_FREE;
		else if (slot->state == VS_SLOT_RUNNING)
		{
			slot->state = VS_SLOT_ABANDONED;
			worker_has_it = true;
		}
	}
	SpinLockRelease(&slot->mutex);
	if (worker_has_it)
		vs_worker_wake();
	return worker_has_it;
}

/* Detaches the session segment; slots that are free forget it. */
static void
drop_segment(void)
{
	if (!client_seg)
		return;
	if (vs_worker_shared)
	{
		dsm_handle	h = dsm_segment_handle(client_seg);

		for (int i = 0; i < VS_SLOTS_PER_BACKEND; i++)
		{
			VsSlot	   *slot = my_slot(i);

			SpinLockAcquire(&slot->mutex);
			if (slot->state == VS_SLOT_FREE && slot->handle == h)
				slot->handle = DSM_HANDLE_INVALID;
			SpinLockRelease(&slot->mutex);
		}
	}
	dsm_detach(client_seg);
	client_seg = NULL;
}

/* Process exit: release the slots so the worker never works for, or waits on, a dead backend. */
static void
client_exit(int code, Datum arg)
{
	if (!vs_worker_shared || VS_MY_PROCNO < 0 || VS_MY_PROCNO >= MaxBackends)
		return;
	for (int i = 0; i < VS_SLOTS_PER_BACKEND; i++)
	{
		VsSlot	   *slot = my_slot(i);
		bool		wake = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == VS_SLOT_SUBMITTED || slot->state == VS_SLOT_DONE)
			slot->state = VS_SLOT_FREE;
		else if (slot->state == VS_SLOT_RUNNING)
		{
			slot->state = VS_SLOT_ABANDONED;
			wake = true;
		}
		if (slot->state == VS_SLOT_FREE)
			slot->handle = DSM_HANDLE_INVALID;
		SpinLockRelease(&slot->mutex);
		if (wake)
			vs_worker_wake();
	}
}

/* A segment of at least size bytes for the next request, or NULL (no DSM slot left). */
static dsm_segment *
get_segment(Size size)
{
	ResourceOwner save;
	Size		alloc;

	if (client_seg && dsm_segment_map_length(client_seg) >= size)
		return client_seg;
	drop_segment();
	alloc = VS_MIN_SEGMENT;
	while (alloc < size)
		alloc *= 2;
	/* large one-off segments (training samples) take what they need, in whole MB */
	if (alloc > VS_KEEP_SEGMENT_MAX)
		alloc = TYPEALIGN((Size) 1024 * 1024, size);
	/* session lifetime: not owned by the current resource owner */
	save = CurrentResourceOwner;
	CurrentResourceOwner = NULL;
	PG_TRY();
	{
		client_seg = dsm_create(alloc, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = save;
	}
	PG_END_TRY();
	return client_seg;
}

/* ---- one request -------------------------------------------------------------------------- */

/*
 * Adds a served search's stages to vsearch_stat_stages, from this backend's stamps and the
 * worker's (in the segment, written before the slot became DONE).  Stamps out of order (a worker
 * of an older protocol cannot send any) leave the request untimed.
 */
static void
count_stages(const VsRequest *req, uint64 start_ns, uint64 submitted_ns, uint64 done_ns)
{
	uint64		t[VS_STAGE_COUNT + 1] = {start_ns, submitted_ns, req->taken_ns,
		req->engine_start_ns, req->engine_end_ns, req->answered_ns, done_ns};

	for (int i = 0; i < VS_STAGE_COUNT; i++)
		if (t[i + 1] < t[i])
			return;
	pg_atomic_fetch_add_u64(&vs_worker_shared->timed, 1);
	for (int i = 0; i < VS_STAGE_COUNT; i++)
		pg_atomic_fetch_add_u64(&vs_worker_shared->stage_ns[i], t[i + 1] - t[i]);
}

Size
vs_request_patchable_bytes(void)
{
	return offsetof(VsRequest, status);
}

/* Bytes of a request's queries (worker_internal.h, VsQueryFormat). */
Size
vs_request_query_bytes(const VsIndexRef *ref, const VsQueries *queries)
{
	if (queries->vectors != NULL)
		return queries->nq * ref->dim * sizeof(float);
	return (queries->nq + 1) * sizeof(uint64) +
		(queries->offsets[queries->nq] - queries->offsets[0]) * sizeof(uint32);
}

/*
 * Sends a request and waits for the answer, writing it through the sink.  Returns true on
 * success; false with a reason when the worker could not answer (the caller falls back).
 */
bool
vs_worker_call(const VsIndexRef *ref, const VsCall *call, const VsQueries *queries,
			VsSink *sink, char *reason, Size reasonlen)
{
	VsWorkerShared *s = vs_worker_shared;
	VsWorkerState state;
	VsSlot	   *slot = NULL;
	dsm_segment *seg;
	VsRequest  *req;
	Size		qbytes,
				plen = 0,
				zbytes,
				area,
				header,
				total;
	uint64		request_id;
	TimestampTz submitted;
	uint64		start_ns = vs_clock_ns(),
				submitted_ns;
	bool		ok = false;
	bool		malformed = false;	/* an answer that does not match the request */
	bool		strings = queries->vectors == NULL;
	Size		nq = queries->nq;
	Size		qlen = vs_request_query_bytes(ref, queries);

	SpinLockAcquire(&s->mutex);
	state = s->state;
	SpinLockRelease(&s->mutex);
	if (state != VS_WORKER_SERVING)
	{
		snprintf(reason, reasonlen, "the vsearch worker is %s",
				 state == VS_WORKER_STOPPED ? "not running" :
				 state == VS_WORKER_STARTING ? "starting" :
				 state == VS_WORKER_DISABLED ? "disabled (vsearch.worker_device = off)" :
				 "running but has no device (see vsearch_stat.device)");
		return false;
	}
	if (VS_MY_PROCNO < 0 || VS_MY_PROCNO >= MaxBackends)
	{
		snprintf(reason, reasonlen, "this process cannot submit requests");
		return false;
	}
	for (int i = 0; i < VS_SLOTS_PER_BACKEND; i++)
	{
		VsSlot	   *sl = my_slot(i);
		bool		free;

		SpinLockAcquire(&sl->mutex);
		free = sl->state == VS_SLOT_FREE;
		SpinLockRelease(&sl->mutex);
		if (free)
		{
			slot = sl;
			break;
		}
	}
	if (!slot)
	{
		snprintf(reason, reasonlen, "the worker is still busy with this session's cancelled requests");
		return false;
	}
	if (!exit_callback_registered)
	{
		before_shmem_exit(client_exit, (Datum) 0);
		exit_callback_registered = true;
	}

	/* the segment: header | queries | payload | result area */
	header = MAXALIGN(sizeof(VsRequest));
	qbytes = MAXALIGN(qlen);
	for (int i = 0; i < call->npayload; i++)
		plen += call->payload[i].len;
	zbytes = MAXALIGN(plen);
	if (call->op == VS_OP_KNN)
		area = (Size) nq * (sizeof(int64) + (Size) call->k * (sizeof(int64) + sizeof(float)));
	else if (call->op == VS_OP_BUILD)
		area = call->answer_len;
	else
		/* a range answer's blocks: a chunk of at most vs_range_chunk_matches() matches */
		area = vs_range_block_bytes(1, (uint64) vs_range_chunk_matches());
	area = MAXALIGN(Max(Min(area, VS_MAX_AREA), VS_MIN_AREA));
	total = header + qbytes + zbytes + area;
	seg = get_segment(total);
	if (!seg)
	{
		snprintf(reason, reasonlen, "no dynamic shared memory segment is available");
		return false;
	}

	req = dsm_segment_address(seg);
	memset(req, 0, sizeof(VsRequest));
	request_id = ((uint64) MyProcPid << 32) | (++request_counter & 0xFFFFFFFF);
	req->magic = VS_REQUEST_MAGIC;
	req->protocol = VS_REQUEST_PROTOCOL;
	req->request_id = request_id;
	req->op = call->op;
	req->kind = ref->kind;
	req->metric = ref->metric;
	req->qformat = strings ? VS_QUERIES_STRINGS : VS_QUERIES_VECTORS;
	req->dim = strings ? 0 : ref->dim;
	req->nq = (uint32) nq;
	req->k = call->op == VS_OP_KNN ? call->k : 0;
	req->radius = call->op == VS_OP_RANGE ? call->radius : 0;
	req->params = *call->params;
	req->generation = ref->generation;
	req->ntuples = ref->ntuples;
	req->dbid = ref->dbid;
	req->indexrelid = ref->indexrelid;
	req->locator = ref->locator;
	req->relpersistence = ref->relpersistence;
	req->queries_off = header;
	req->queries_len = qlen;
	req->payload_off = plen > 0 ? header + qbytes : 0;
	req->payload_len = plen;
	req->area_off = header + qbytes + zbytes;
	req->area_len = dsm_segment_map_length(seg) - req->area_off;
	if (req->area_len > VS_MAX_AREA)
		req->area_len = VS_MAX_AREA;
	if (call->op == VS_OP_RANGE && req->area_len > area)
		req->area_len = area;	/* the block size bounds what the consumer gets at once */
	req->status = VS_ANSWER_NONE;
	pg_atomic_init_u64(&req->produced, 0);
	pg_atomic_init_u64(&req->consumed, 0);
	if (strings)
	{
		uint64	   *offsets = (uint64 *) ((char *) req + header);
		uint64		first = queries->offsets[0];

		/* from 0 in the request, whatever slice of a larger set the queries are */
		for (Size i = 0; i <= nq; i++)
			offsets[i] = queries->offsets[i] - first;
		memcpy(offsets + nq + 1, queries->chars + first,
			   (queries->offsets[nq] - first) * sizeof(uint32));
	}
	else
		memcpy((char *) req + header, queries->vectors, qlen);
	for (Size i = 0, at = 0; i < (Size) call->npayload; at += call->payload[i++].len)
		memcpy((char *) req + req->payload_off + at, call->payload[i].data, call->payload[i].len);
	if (call->patch)
	{
		char		persistence = req->relpersistence;

		if ((Size) call->patch->offset + call->patch->len > vs_request_patchable_bytes())
			elog(ERROR, "vsearch: a request patch lies outside the request's header");
		memcpy((char *) req + call->patch->offset, call->patch->bytes, call->patch->len);

		/*
		 * The worker reads the index's pages with the persistence the request names: another valid
		 * one would bring a permanent index's pages into shared buffers unmarked as permanent
		 * (skipped by checkpoints).  The probe forges only values the worker must refuse there.
		 */
		if (req->relpersistence != persistence &&
			(req->relpersistence == RELPERSISTENCE_PERMANENT ||
			 req->relpersistence == RELPERSISTENCE_UNLOGGED))
			req->relpersistence = persistence;
	}

	submitted = GetCurrentTimestamp();
	submitted_ns = vs_clock_ns();
	SpinLockAcquire(&slot->mutex);
	slot->request_id = request_id;
	slot->handle = dsm_segment_handle(seg);
	slot->procno = VS_MY_PROCNO;
	slot->submitted_at = submitted;
	slot->worker_gen = 0;
	slot->state = VS_SLOT_SUBMITTED;	/* the spinlock orders the segment writes before this */
	SpinLockRelease(&slot->mutex);
	vs_worker_wake();

	PG_TRY();
	{
		uint64		consumed = 0;
		uint64		last_heartbeat;
		TimestampTz last_progress = submitted;

		/* the caller works on earlier answers while the worker computes this request */
		if (call->progress != NULL)
			call->progress(call->progress_arg, call->progress_upto);
		last_heartbeat = pg_atomic_read_u64(&s->heartbeat);

		for (;;)
		{
			VsSlotState st;
			uint64		slot_rid,
						slot_gen,
						produced;
			pid_t		wpid;
			uint64		wgen;
			VsWorkerState wstate;
			uint64		hb;
			TimestampTz now;

			SpinLockAcquire(&slot->mutex);
			st = slot->state;
			slot_rid = slot->request_id;
			slot_gen = slot->worker_gen;
			SpinLockRelease(&slot->mutex);

			if (slot_rid != request_id || st == VS_SLOT_FREE || st == VS_SLOT_ABANDONED)
			{
				snprintf(reason, reasonlen,
						 "the worker dropped the request (it restarted, or could not read the "
						 "request's header)");
				break;
			}

			/* a chunk of the answer waiting in the area? */
			produced = pg_atomic_read_u64(&req->produced);
			if (produced > consumed && (st == VS_SLOT_RUNNING || st == VS_SLOT_DONE))
			{
				uint64		off,
							len,
							slen;

				pg_read_barrier();
				off = req->chunk_off;
				len = req->chunk_len;
				slen = req->stream_len;
				if (produced != consumed + 1 || len > req->area_len)
				{
					malformed = !vs_sink_bad(sink, "malformed answer chunk");
					break;
				}
				if (sink->stream_len == 0)
					sink->stream_len = slen;
				else if (sink->stream_len != slen)
				{
					malformed = !vs_sink_bad(sink, "answer length changed");
					break;
				}
				if (!vs_sink_consume(sink, (const char *) req + req->area_off, off, len))
				{
					malformed = true;
					break;
				}
				consumed = produced;
				pg_memory_barrier();
				pg_atomic_write_u64(&req->consumed, consumed);
				if (st == VS_SLOT_RUNNING)
					vs_worker_wake();
				last_progress = GetCurrentTimestamp();
				continue;
			}

			if (st == VS_SLOT_DONE)
			{
				if (req->status == VS_ANSWER_OK)
				{
					if (call->op == VS_OP_KNN && sink->stream_len == 0 && consumed == 0)
						malformed = !vs_sink_bad(sink, "empty answer");
					else if (!vs_sink_finish(sink))
						malformed = true;
					else
						ok = true;
				}
				else
				{
					char		msg[sizeof(req->errmsg)];

					memcpy(msg, req->errmsg, sizeof(msg));
					msg[sizeof(msg) - 1] = '\0';
					snprintf(reason, reasonlen, "the worker failed: %s",
							 msg[0] ? msg : "unknown error");
				}
				SpinLockAcquire(&slot->mutex);
				if (slot->request_id == request_id && slot->state == VS_SLOT_DONE)
					slot->state = VS_SLOT_FREE;
				SpinLockRelease(&slot->mutex);
				break;
			}

			/* still waiting: is the worker alive and making progress? */
			SpinLockAcquire(&s->mutex);
			wpid = s->worker_pid;
			wgen = s->worker_gen;
			wstate = s->state;
			SpinLockRelease(&s->mutex);
			now = GetCurrentTimestamp();
			hb = pg_atomic_read_u64(&s->heartbeat);
			if (hb != last_heartbeat)
			{
				last_heartbeat = hb;
				last_progress = now;
			}
			if (wpid == 0 || wstate != VS_WORKER_SERVING ||
				(st == VS_SLOT_RUNNING && slot_gen != wgen))
			{
				abandon_slot(slot, request_id);
				drop_segment();
				snprintf(reason, reasonlen, "the vsearch worker stopped");
				break;
			}
			if (TimestampDifferenceExceeds(last_progress, now, vs_worker_timeout_ms))
			{
				pg_atomic_write_u64(&s->stalled_at, last_heartbeat + 1);
				if (abandon_slot(slot, request_id))
					drop_segment();
				snprintf(reason, reasonlen,
						 "the vsearch worker made no progress for %d ms (vsearch.worker_timeout)",
						 vs_worker_timeout_ms);
				break;
			}

			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 VS_POLL_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		/* cancel, statement_timeout, or a malformed answer: the worker discards the request */
		abandon_slot(slot, request_id);
		drop_segment();
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (malformed)
	{
		/* the request's answer cannot be used: the caller falls back or raises the ERROR */
		abandon_slot(slot, request_id);
		drop_segment();
		snprintf(reason, reasonlen, "the worker's answer does not match the request: %s",
				 sink->bad);
		elog(WARNING, "vsearch: %s", reason);
		return false;
	}
	if (ok)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		secs;
		int			usecs;

		TimestampDifference(submitted, now, &secs, &usecs);
		pg_atomic_fetch_add_u64(&s->waits, 1);
		pg_atomic_fetch_add_u64(&s->wait_us, (uint64) secs * 1000000 + usecs);
		if (call->op != VS_OP_BUILD)
			count_stages(req, start_ns, submitted_ns, vs_clock_ns());
	}
	/* keep no huge segment around (the worker unmaps it when it sees the slot forget it) */
	if (client_seg && dsm_segment_map_length(client_seg) > VS_KEEP_SEGMENT_MAX &&
		!(ok && call->keep_segment))
		drop_segment();
	return ok;
}

/* After a build's last step: drop the segment if it is larger than the kept size. */
void
vs_worker_build_end(void)
{
	if (client_seg && dsm_segment_map_length(client_seg) > VS_KEEP_SEGMENT_MAX)
		drop_segment();
}
