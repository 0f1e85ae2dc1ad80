/*
 * The GPU worker's shared state and request format, shared by the backend side (worker_client.h),
 * the worker process (worker_*.c, worker_proc.h), the index kinds' checks of their requests
 * (indexkind.h) and the shared-memory setup and statistics (worker_shmem.c).  docs/WORKER.md
 * describes the protocol.
 *
 * Shared memory holds one VsWorkerShared: the worker's identity (pid, latch, generation), its
 * counters, and two request slots per PGPROC that can submit (MaxBackends).  A request itself
 * lives in a DSM segment created by the backend: a VsRequest header, the query vectors and a
 * result area through which the worker streams the answer in chunks.  Nothing the worker reads
 * from a segment is trusted: it copies the header once and checks every count, length and offset
 * against the segment's mapped size before using it.
 */
#ifndef VSEARCH_WORKER_INTERNAL_H
#define VSEARCH_WORKER_INTERNAL_H

#include "postgres.h"

#include <time.h>

#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "search.h"

#if PG_VERSION_NUM >= 170000
#define VS_MY_PROCNO			MyProcNumber
#else
#define VS_MY_PROCNO			(MyProc->pgprocno)
#endif

#define VS_SLOTS_PER_BACKEND	2

/* Slot states; see docs/WORKER.md for the transitions. */
typedef enum VsSlotState
{
	VS_SLOT_FREE = 0,			/* unused */
	VS_SLOT_SUBMITTED,			/* a request waits for the worker */
	VS_SLOT_RUNNING,			/* the worker took it (worker_gen says which worker) */
	VS_SLOT_DONE,				/* the answer (or an error status) is complete in the segment */
	VS_SLOT_ABANDONED			/* the backend gave up while the worker was busy with it */
} VsSlotState;

typedef struct VsSlot
{
	slock_t		mutex;			/* protects state, request_id, worker_gen */
	VsSlotState state;
	uint64		request_id;		/* backend-chosen, also in the segment header */
	uint64		worker_gen;		/* generation of the worker that took it */
	dsm_handle	handle;			/* segment of the request (DSM_HANDLE_INVALID when none) */
	int			procno;			/* the submitting backend's PGPROC (its latch) */
	TimestampTz submitted_at;
} VsSlot;

typedef enum VsWorkerState
{
	VS_WORKER_STOPPED = 0,		/* no worker process */
	VS_WORKER_STARTING,			/* creating its engine context */
	VS_WORKER_SERVING,			/* accepting requests */
	VS_WORKER_UNAVAILABLE,		/* running, but could not create its device context */
	VS_WORKER_DISABLED			/* running, vsearch.worker_device = off */
} VsWorkerState;

/* One device of the worker's engine context (vsearch_stat_devices), under VsWorkerShared.mutex. */
typedef struct VsDeviceStat
{
	int			ordinal;
	bool		alive;
	char		name[128];
	uint64		memory_budget;
	uint64		memory_in_use;
	uint64		calls;			/* engine calls it ran */
	uint64		datasets;		/* datasets with rows on it */
	uint64		ivfpq_objects;
	char		error[160];		/* why it was lost */
} VsDeviceStat;

/*
 * Where a served request's time goes (vsearch_stat_stages), from clock_gettime(CLOCK_MONOTONIC)
 * stamps that the backend and the worker take on the same clock.
 */
typedef enum VsStage
{
	VS_STAGE_SUBMIT = 0,		/* backend: writing the request, until it is submitted */
	VS_STAGE_QUEUE,				/* submitted until the worker took it */
	VS_STAGE_PREPARE,			/* taken until its engine call began: grouping, the cached copy */
	VS_STAGE_ENGINE,			/* the engine call that answered it (with its group) */
	VS_STAGE_ANSWER,			/* engine call done until the answer was complete in the segment */
	VS_STAGE_WAKEUP,			/* answer complete until the backend had copied it */
	VS_STAGE_COUNT
} VsStage;

static inline uint64
vs_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000000000 + (uint64) ts.tv_nsec;
}

typedef struct VsWorkerShared
{
	slock_t		mutex;			/* protects the fields up to device[] */
	pid_t		worker_pid;		/* 0 when no worker runs */
	int			worker_procno;	/* its PGPROC: SetLatch(&proc->procLatch) wakes it */
	uint64		worker_gen;		/* incremented by every worker start */
	VsWorkerState state;
	bool		on_gpu;			/* its engine context is CUDA */
	char		device[160];	/* device name, or why it serves nothing */

	pg_atomic_uint64 heartbeat; /* advanced by the worker while it makes progress */
	/*
	 * heartbeat + 1 at which a backend last gave up on the worker (vsearch.worker_timeout); 0:
	 * none.  While the heartbeat stays there, requests fall back at once instead of each waiting
	 * out the timeout (a hung engine call).
	 */
	pg_atomic_uint64 stalled_at;

	/* statistics (vsearch_stat) */
	pg_atomic_uint64 requests;	/* requests answered by the worker */
	pg_atomic_uint64 batches;	/* engine search calls */
	pg_atomic_uint64 batch_queries; /* queries in those calls */
	pg_atomic_uint64 waits;		/* answered requests whose wait the backends measured */
	pg_atomic_uint64 wait_us;	/* sum of those waits */
	pg_atomic_uint64 timed;		/* answered requests whose stages were timed */
	pg_atomic_uint64 stage_ns[VS_STAGE_COUNT];	/* sum of each stage over them */
	pg_atomic_uint64 fallbacks; /* searches answered on a backend's CPU instead */
	pg_atomic_uint64 errors;	/* requests the worker failed */
	pg_atomic_uint64 loads;		/* full index loads */
	pg_atomic_uint64 compressed_loads;	/* of those, vs_graph's compressed mode (graphobject.c) */
	pg_atomic_uint64 refreshes; /* incremental refreshes */
	pg_atomic_uint64 evictions; /* cache evictions */
	pg_atomic_uint64 starts;	/* worker starts */
	pg_atomic_uint64 memory_in_use; /* engine memory_in_use (device bytes) */
	pg_atomic_uint64 cache_bytes;	/* bytes of the cached index copies */
	pg_atomic_uint32 cached_indexes;

	int			ndevices;		/* devices[] in use, under mutex */
	VsDeviceStat devices[VS_MAX_DEVICES];

	int			nslots;
	VsSlot		slots[FLEXIBLE_ARRAY_MEMBER];
} VsWorkerShared;

/* NULL unless vsearch is in shared_preload_libraries. */
extern VsWorkerShared *vs_worker_shared;

/* ---- the request segment ------------------------------------------------------------------ */

#define VS_REQUEST_MAGIC		0x56535251	/* "VSRQ" */
#define VS_REQUEST_PROTOCOL		7

typedef enum VsRequestOp
{
	VS_OP_KNN = 1,
	VS_OP_RANGE = 2,
	VS_OP_BUILD = 3				/* a build step of the index's kind on the "queries" (its rows) */
} VsRequestOp;

/*
 * What a request's queries are (VsRequest.qformat):
 *   vectors: float4 queries[nq * dim];
 *   strings: uint64 offsets[nq + 1] | uint32 chars[offsets[nq]] -- the characters (pg_wchar) of
 *            nq texts back to back, offsets[0] = 0; dim is 0 (a text index's queries, search.h).
 */
typedef enum VsQueryFormat
{
	VS_QUERIES_VECTORS = 0,
	VS_QUERIES_STRINGS = 1
} VsQueryFormat;

/* Status of an answer, set by the worker before the slot becomes DONE. */
typedef enum VsAnswerStatus
{
	VS_ANSWER_NONE = 0,
	VS_ANSWER_OK = 1,
	VS_ANSWER_ERROR = 2,		/* errmsg says why; the backend may answer on its CPU */
	VS_ANSWER_INVALID = 3		/* the request was malformed (a bug) */
} VsAnswerStatus;

/* Most queries (or rows) one request may carry; a kind's max_k bounds k (the worker rejects more). */
#define VS_MAX_REQUEST_QUERIES	(1 << 24)
/* Most (query, neighbour) pairs of one kNN request. */
#define VS_MAX_KNN_RESULTS		((uint64) 1 << 28)
#define VS_MIN_AREA				4096

/*
 * A range answer is a sequence of blocks, one per result area: the matches of the request's
 * queries [q0, q0 + nq) -- `int64 offsets[nq + 1]` (from 0, offsets[nq] = count), `int64
 * ids[count]`, `float4 distances[count]`, padded to 8 bytes -- each block whole in one chunk, so
 * the backend hands it on in place.  Blocks come in query order; `more` (0 or 1) says the
 * block's last query goes on in the next block, which then starts with it.
 */
typedef struct VsRangeBlock
{
	int64		q0;
	int64		nq;
	int64		more;
	int64		count;
	/* offsets, ids, distances follow */
} VsRangeBlock;

/* Bytes of a block of nq queries and count matches. */
static inline uint64
vs_range_block_bytes(uint64 nq, uint64 count)
{
	return sizeof(VsRangeBlock) + (nq + 1) * sizeof(int64) + count * sizeof(int64) +
		TYPEALIGN(sizeof(int64), count * sizeof(float));
}

typedef struct VsRequest
{
	/* written by the backend before it submits */
	uint32		magic;
	uint32		protocol;
	uint64		request_id;
	uint32		op;				/* VsRequestOp */
	uint32		kind;			/* the index kind's id (indexkind.h) */
	uint32		metric;			/* vs_metric, or VS_METRIC_LEVENSHTEIN (strings) */
	uint32		qformat;		/* VsQueryFormat */
	uint32		dim;			/* vectors; 0 for strings */
	uint32		nq;
	uint32		k;				/* VS_OP_KNN */
	double		radius;			/* VS_OP_RANGE */
	VsKindParams params;		/* the kind's: search parameters, or the build step */
	uint64		generation;
	uint64		ntuples;		/* index entries the backend saw (sizes the load) */
	Oid			dbid;
	Oid			indexrelid;
	VsRelFileLocator locator;
	char		relpersistence;
	uint64		queries_off;	/* the queries (VsQueryFormat) */
	uint64		queries_len;	/* their bytes */
	uint64		payload_off;	/* VS_OP_BUILD: what the step needs besides the rows (0: none) */
	uint64		payload_len;
	uint64		area_off;		/* result area: the answer streams through it */
	uint64		area_len;

	/* written by the worker */
	uint32		status;			/* VsAnswerStatus */
	char		errmsg[256];
	uint64		stream_len;		/* bytes of the whole answer stream */
	uint64		chunk_off;		/* stream offset of the chunk now in the area */
	uint64		chunk_len;		/* its length */
	pg_atomic_uint64 produced;	/* chunks written (the worker increments after writing) */
	pg_atomic_uint64 consumed;	/* chunks read (the backend sets it to produced) */
	/* the worker's vs_clock_ns stamps of a search, written with the last chunk (VsStage) */
	uint64		taken_ns;
	uint64		engine_start_ns;
	uint64		engine_end_ns;
	uint64		answered_ns;
} VsRequest;

/*
 * The answer stream.
 *   kNN:   int64 counts[nq] | int64 ids[nq * k] | float4 distances[nq * k]
 *   range: int64 total | int64 offsets[nq + 1] | int64 ids[total] | float4 distances[total]
 *   build: the kind's build step's answer (its own header describes it)
 */

/* Wakes the worker, if one runs. */
extern void vs_worker_wake(void);

/* Latch of a PGPROC by number. */
static inline Latch *
vs_proc_latch(int procno)
{
	return &GetPGProcByNumber(procno)->procLatch;
}

/* Installs the planner cost hook (worker_client_calls.c), called from _PG_init while preloading. */
extern void vs_worker_client_init(void);

/* Shared-memory setup (worker_shmem.c), called from _PG_init while preloading. */
extern void vs_worker_shmem_register(void);

/* The background worker's entry point (worker_main.c) and its registration. */
extern void vs_worker_register(void);
extern PGDLLEXPORT void vs_worker_main(Datum arg);

#endif							/* VSEARCH_WORKER_INTERNAL_H */
