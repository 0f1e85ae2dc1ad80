/*
 * Backend side of the GPU worker protocol (docs/WORKER.md).
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

#include <math.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "guc.h"
#include "indexkind.h"
#include "worker.h"
#include "worker_internal.h"

/* Segments at most this large are kept for the next request. */
#define VS_KEEP_SEGMENT_MAX		((Size) 8 * 1024 * 1024)
#define VS_MIN_SEGMENT			((Size) 64 * 1024)
/* Largest result area (an answer larger than this streams in several chunks). */
#define VS_MAX_AREA				((Size) 4 * 1024 * 1024)
/* How often a waiting backend re-checks that the worker is alive and progressing. */
#define VS_POLL_MS				20

static dsm_segment *client_seg = NULL;
static bool exit_callback_registered = false;
static uint64 request_counter = 0;

/* Where the answer stream's bytes go: consecutive regions of caller memory. */
typedef struct VsSink
{
	VsRequestOp op;
	int			nq;
	int			k;
	uint64		stream_len;		/* expected total (0 until known, for range) */
	uint64		pos;			/* bytes received */
	int			nregions;
	struct
	{
		char	   *dst;
		uint64		len;
	}			regions[5];	/* kNN: 3; a build step: up to 5 (vs_lc) */
	/* range: blocks handed on to the consumer in place */
	VsRangeConsumer consume;
	void	   *arg;
	int			q_base;			/* the request's first query among the consumer's */
	int			next_q;			/* the first query whose matches are not all handed on */
	bool		split;			/* the last block's last query goes on */
	bool		consumed_any;	/* a block went to the consumer */
	char		bad[160];		/* why the answer does not match the request */
} VsSink;

/* Records why an answer is malformed; returns false for the caller to pass on. */
static bool pg_attribute_printf(2, 3)
sink_bad(VsSink *sink, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	vsnprintf(sink->bad, sizeof(sink->bad), fmt, args);
	va_end(args);
	return false;
}

static void
sink_add(VsSink *sink, void *dst, uint64 len)
{
	Assert(sink->nregions < lengthof(sink->regions));
	sink->regions[sink->nregions].dst = dst;
	sink->regions[sink->nregions].len = len;
	sink->nregions++;
}

/*
 * A block of a range answer (worker_internal.h, VsRangeBlock), checked against the request and
 * the blocks before it, then handed to the consumer where it lies.  The sink functions return
 * false (with sink->bad) for an answer that does not match its request.
 */
static bool
sink_range_block(VsSink *sink, const char *data, uint64 off, uint64 len)
{
	const VsRangeBlock *b = (const VsRangeBlock *) data;
	const int64 *offsets;
	VsRangeChunk chunk;

	if (off != sink->pos || len > sink->stream_len || off > sink->stream_len - len ||
		len < sizeof(VsRangeBlock))
		return sink_bad(sink, "range block at %llu+%llu does not follow %llu (of %llu)",
						(unsigned long long) off, (unsigned long long) len,
						(unsigned long long) sink->pos, (unsigned long long) sink->stream_len);
	if (b->q0 != sink->next_q || b->nq < 1 || b->nq > sink->nq - b->q0 ||
		(b->more != 0 && b->more != 1) || b->count < 0 ||
		(uint64) b->count > len / sizeof(int64) ||
		len != vs_range_block_bytes((uint64) b->nq, (uint64) b->count))
		return sink_bad(sink, "malformed range block (queries " INT64_FORMAT "+" INT64_FORMAT
						" after %d, " INT64_FORMAT " matches in %llu bytes)",
						b->q0, b->nq, sink->next_q, b->count, (unsigned long long) len);
	offsets = (const int64 *) (b + 1);
	if (offsets[0] != 0 || offsets[b->nq] != b->count)
		return sink_bad(sink, "inconsistent range block");
	for (int64 i = 0; i < b->nq; i++)
		if (offsets[i + 1] < offsets[i])
			return sink_bad(sink, "inconsistent range block");
	chunk.q0 = sink->q_base + (int) b->q0;
	chunk.nq = (int) b->nq;
	chunk.more = b->more != 0;
	chunk.offsets = offsets;
	chunk.ids = offsets + b->nq + 1;
	chunk.distances = (const float *) (chunk.ids + b->count);
	sink->pos += len;
	sink->next_q = (int) (b->q0 + b->nq - b->more);
	sink->split = chunk.more;
	if (b->count > 0)
	{
		sink->consumed_any = true;
		sink->consume(sink->arg, &chunk);
	}
	return true;
}

/* Copies the stream bytes [off, off + len) into the regions. */
static bool
sink_consume(VsSink *sink, const char *data, uint64 off, uint64 len)
{
	if (sink->op == VS_OP_RANGE)
		return sink_range_block(sink, data, off, len);
	if (off != sink->pos || len > sink->stream_len || off > sink->stream_len - len)
		return sink_bad(sink, "answer chunk at %llu+%llu does not follow %llu (of %llu)",
						(unsigned long long) off, (unsigned long long) len,
						(unsigned long long) sink->pos, (unsigned long long) sink->stream_len);
	while (len > 0)
	{
		uint64		start = 0;
		int			r;

		for (r = 0; r < sink->nregions; r++)
		{
			if (sink->pos < start + sink->regions[r].len)
				break;
			start += sink->regions[r].len;
		}
		if (r == sink->nregions)
			return sink_bad(sink, "answer longer than expected");
		{
			uint64		at = sink->pos - start;
			uint64		n = Min(len, sink->regions[r].len - at);

			memcpy(sink->regions[r].dst + at, data, n);
			data += n;
			len -= n;
			sink->pos += n;
		}
	}
	return true;
}

/* Checks a complete answer: the whole stream arrived and filled every region. */
static bool
sink_finish(VsSink *sink)
{
	uint64		expected = 0;

	if (sink->op == VS_OP_RANGE)
	{
		if (sink->pos != sink->stream_len || sink->next_q != sink->nq || sink->split)
			return sink_bad(sink, "range answer ended after %llu of %llu bytes, at query %d of %d",
							(unsigned long long) sink->pos,
							(unsigned long long) sink->stream_len, sink->next_q, sink->nq);
		return true;
	}
	for (int r = 0; r < sink->nregions; r++)
		expected += sink->regions[r].len;
	if (sink->pos != sink->stream_len || sink->pos != expected)
		return sink_bad(sink, "answer ended after %llu of %llu bytes, expected %llu",
						(unsigned long long) sink->pos, (unsigned long long) sink->stream_len,
						(unsigned long long) expected);
	return true;
}

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

/* What a request carries besides its queries (or rows). */
typedef struct VsCall
{
	VsRequestOp op;
	int			k;				/* kNN */
	double		radius;			/* range */
	const VsKindParams *params;
	const VsWorkerBuffer *payload;	/* build: parts, copied one after the other */
	int			npayload;
	Size		answer_len;		/* build: the answer's length */
	bool		keep_segment;	/* build: keep a large segment for the build's next step */
	const VsRequestPatch *patch;	/* test entry point: bytes over the header, or NULL */
	VsKnnProgress progress;		/* kNN: the caller's work while this request computes, or NULL */
	void	   *progress_arg;
	int			progress_upto;	/* queries whose answers are final before this request */
} VsCall;

Size
vs_request_patchable_bytes(void)
{
	return offsetof(VsRequest, status);
}

/*
 * Sends a request and waits for the answer, writing it through the sink.  Returns true on
 * success; false with a reason when the worker could not answer (the caller falls back).
 */
/* Bytes of a request's queries (worker_internal.h, VsQueryFormat). */
static Size
query_bytes(const VsIndexRef *ref, const VsQueries *queries)
{
	if (queries->vectors != NULL)
		return queries->nq * ref->dim * sizeof(float);
	return (queries->nq + 1) * sizeof(uint64) +
		(queries->offsets[queries->nq] - queries->offsets[0]) * sizeof(uint32);
}

static bool
worker_call(const VsIndexRef *ref, const VsCall *call, const VsQueries *queries,
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
	Size		qlen = query_bytes(ref, queries);

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
					malformed = !sink_bad(sink, "malformed answer chunk");
					break;
				}
				if (sink->stream_len == 0)
					sink->stream_len = slen;
				else if (sink->stream_len != slen)
				{
					malformed = !sink_bad(sink, "answer length changed");
					break;
				}
				if (!sink_consume(sink, (const char *) req + req->area_off, off, len))
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
						malformed = !sink_bad(sink, "empty answer");
					else if (!sink_finish(sink))
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
		 query_bytes(ref, queries) > MaxAllocHugeSize / 2))
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
		sink_add(&sink, counts + q0, (uint64) n * sizeof(int64));
		sink_add(&sink, ids + (Size) q0 * k, (uint64) n * k * sizeof(int64));
		sink_add(&sink, distances + (Size) q0 * k, (uint64) n * k * sizeof(float));
		if (!worker_call(ref, &call, &part, &sink, reason, sizeof(reason)))
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
		if (!worker_call(ref, &call, &part, &sink, reason, sizeof(reason)))
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
		sink_add(&sink, answer[i].data, answer[i].len);
		call.answer_len += answer[i].len;
	}
	if (!worker_call(ref, &call, rows, &sink, reason, sizeof(reason)))
		return vs_worker_decline(reason);
	return true;
}

/* After a build's last step: drop the segment if it is larger than the kept size. */
void
vs_worker_build_end(void)
{
	if (client_seg && dsm_segment_map_length(client_seg) > VS_KEEP_SEGMENT_MAX)
		drop_segment();
}
