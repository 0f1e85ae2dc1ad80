/*
 * The GPU worker process's own state and functions, shared by its files:
 *
 *   worker_main.c    the process: start, settings, the engine context, the loop
 *   worker_intake.c  taking requests from the slots: segments, validation, grouping order
 *   worker_batch.c   running a batch: one engine call per group of searches, build steps
 *   worker_cache.c   the device cache of index kinds' engine objects (load, refresh, evict)
 *   worker_lanes.c   threads that run search groups' engine calls while the loop goes on
 *   worker_answer.c  answers: streaming them through the result areas, finishing requests
 *
 * What is particular to an index kind is reached only through its operations (indexkind.h).
 */
#ifndef VSEARCH_WORKER_PROC_H
#define VSEARCH_WORKER_PROC_H

#include "postgres.h"

#include "vsearch/engine.h"

#include "objcache.h"
#include "worker_internal.h"

/* A search result shared by the answer streams of one engine call. */
typedef struct VsResultBuf
{
	int			refcount;
	bool		is_range;
	int64	   *ids;			/* kNN: nq x kmax */
	float	   *distances;
	int64	   *counts;
	vs_range_result range;		/* range: the engine's (vs_range_result_free) */
} VsResultBuf;

/*
 * An answer being streamed to a backend, sent in area-sized chunks: up to four byte ranges, or
 * for range the blocks laid out from the result (worker_internal.h, VsRangeBlock).
 */
typedef struct VsStream
{
	VsResultBuf *buf;			/* reference held while streaming */
	char	   *owned;			/* bytes built for this request (pfree'd at the end) */
	int			niov;
	const char *iov_base[4];
	uint64		iov_len[4];
	/* range: the request's queries' offsets into buf->range, the next query and its matches sent */
	const int64 *range_offsets;
	uint32		range_nq;
	uint32		range_q;
	int64		range_done;
	uint64		len;
	uint64		pos;
	uint64		produced;
} VsStream;

/* A request the worker took (one per slot). */
typedef struct VsActive
{
	bool		active;
	bool		streaming;
	uint64		request_id;
	int			procno;
	dsm_segment *seg;
	VsRequest  *hdr;			/* the segment's header: written, never trusted */
	VsRequest	req;			/* validated copy */
	Size		q0;				/* first row of its queries in the group matrix */
	uint64		taken_ns;		/* vs_clock_ns stamps (VsRequest.taken_ns ...) */
	uint64		engine_start_ns;
	uint64		engine_end_ns;
	VsStream	out;
} VsActive;

/*
 * One engine call of a search group: made ready and finished on the worker's thread
 * (worker_batch.c), run there or on a lane (worker_lanes.c).  Running touches nothing but the
 * kind's search operation, the engine and the fields below it.
 */
typedef struct VsSearchCall
{
	VsActive  **reqs;			/* the group */
	int			n;
	VsQueries	queries;
	uint32		kmax;
	uint64		generation;
	const struct VsIndexKind *kind;
	VsCachedObject *entry;		/* valid until the call ends (the cache waits for lanes) */
	VsResultBuf *buf;
	/* written by the run */
	int			rc;
	char		err[256];
	uint64		start_ns;
	uint64		end_ns;
} VsSearchCall;

/* ---- worker_main.c ---- */
extern VsWorkerShared *vsw_shared;
extern uint64 vsw_gen;			/* this worker's generation (VsWorkerShared.worker_gen) */
extern VsActive *vsw_active;	/* one per slot */
extern vs_context *vsw_engine;
extern MemoryContext vsw_batch_cxt;	/* reset after every group */
extern MemoryContext vsw_result_cxt;	/* answers being streamed */
extern int	vsw_device_errors;	/* consecutive VS_DEVICE_ERROR answers */

/* Shows the backends that the worker makes progress. */
static inline void
vsw_heartbeat(void)
{
	pg_atomic_fetch_add_u64(&vsw_shared->heartbeat, 1);
}

/*
 * The requests of the engine call the calling thread makes now (n = 0: none), for the engine's
 * cancel callback, which the engine polls on that thread (a lane's or the worker's).
 */
extern void vsw_set_cancel_group(VsActive **group, int n);

static inline int
vsw_active_index(VsActive *a)
{
	return (int) (a - vsw_active);
}

static inline bool
vsw_slot_abandoned(int i)
{
	return ((volatile VsSlot *) &vsw_shared->slots[i])->state == VS_SLOT_ABANDONED;
}

/* ---- worker_intake.c ---- */
extern void vsw_intake_init(void);
/* Takes every submitted request, appending to list; returns the new count. */
extern int	vsw_gather(VsActive **list, int n, Size *queries);
/* Unmaps segments their backends no longer use. */
extern void vsw_sweep_attachments(void);
/* qsort order that puts requests one engine call can answer next to each other. */
extern int	vsw_request_cmp(const void *a, const void *b);
/* Can requests a and b (sorted next to each other) share an engine call? */
extern bool vsw_same_group(const VsRequest *a, const VsRequest *b);

/* ---- worker_batch.c ---- */
extern void vsw_process_batch(VsActive **list, int n);
/* The engine call of a search (any thread: no PostgreSQL function). */
extern void vsw_search_run(VsSearchCall *call);
/* A search's outcome on the worker's thread: retries, statistics, answers or failures. */
extern void vsw_search_finish(VsSearchCall *call);
/* Exits (FATAL) after too many device errors in a row, failing the pending requests first. */
extern void vsw_check_device_errors(VsActive **pending, int n);

/* ---- worker_lanes.c ---- */
extern void vsw_lanes_start(int n);
extern void vsw_lanes_stop(void);
/* An idle lane's call to fill in (its memory context current; NULL when lanes are off), after
 * finishing done ones and waiting for one if all are busy. */
extern VsSearchCall *vsw_lane_take(MemoryContext *cxt);
/* Starts the call vsw_lane_take gave. */
extern void vsw_lane_submit(VsSearchCall *call);
/* Finishes the calls lanes completed; returns how many. */
extern int	vsw_lanes_finish_done(void);
/* Waits until no lane runs a call on entry's object (NULL: any call; before the cache changes
 * an object). */
extern void vsw_lanes_wait_idle(const VsCachedObject *entry);

/* ---- worker_cache.c ---- */
extern void vsw_cache_init(void);
extern void vsw_cache_start(vs_context *engine, Size limit);
extern void vsw_cache_clear(void);
/* The cached object of the request's index, at least as new as generation; NULL with err. */
extern VsCachedObject *vsw_cache_prepare(const VsRequest *req, uint64 generation, char *err,
										 Size errlen);
extern bool vsw_cache_evict_one(const VsCachedObject *keep);
extern void vsw_update_cache_stats(void);
/* The rows of vsearch_stat_devices, at most every 100 ms unless now (else marked stale). */
extern void vsw_update_device_stats(bool now);
extern bool vsw_device_stats_stale;
/* Releases what an index read holds (buffer pins, locks, files), after success or an error. */
extern void vsw_load_cleanup(bool error);

/* ---- worker_answer.c ---- */
extern void vsw_release_active(VsActive *a);
extern void vsw_finish_request(int i, VsAnswerStatus status, const char *msg);
extern void vsw_discard_request(int i);
extern bool vsw_pump_streams(void);
extern void vsw_fail_group(VsActive **reqs, int n, const char *msg);
extern void vsw_result_buf_release(VsResultBuf *buf);
/* Starts streaming a search answer: request a's part of the group's result. */
extern void vsw_answer_search(VsActive *a, VsResultBuf *buf, uint32 kmax);
/* Starts streaming bytes built for request a (owned: pfree'd when the answer is done). */
extern void vsw_answer_bytes(VsActive *a, char *bytes, Size len);

#endif							/* VSEARCH_WORKER_PROC_H */
