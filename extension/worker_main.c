/*
 * The vsearch background worker: one process that owns the GPU (the engine's CUDA context), keeps
 * copies of index vector sets on it, and answers the kNN and range requests of every backend in
 * batches.  docs/WORKER.md describes the protocol, the cache and the failure handling.
 *
 * The worker is attached to shared memory only (no database connection): it reads index pages of
 * any database through the buffer manager without a relcache entry (vs_index_read_vectors), using
 * the relfilenode locator a request carries.  The requesting backend holds a lock on the index
 * while it waits, so the relation cannot be dropped meanwhile.
 *
 * It never waits on a backend: answers are written chunk by chunk when the backend has consumed
 * the previous chunk, and a backend that gives up only marks its slot.  Engine calls poll a
 * cancel callback that notices SIGTERM and requests whose backends all gave up.
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_bswap.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/smgr.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "vsearch/engine.h"

#include "guc.h"
#include "ivfpq.h"
#include "vector.h"
#include "worker_internal.h"

/* ---- worker-local state ------------------------------------------------------------------- */

/* A search result shared by the answer streams of one engine call. */
typedef struct VsResultBuf
{
	int			refcount;
	bool		is_range;
	int64	   *ids;			/* kNN: nq x kmax */
	float	   *distances;
	int64	   *counts;
	vs_range_result range;		/* range: malloc'd by the engine */
} VsResultBuf;

/* An answer being streamed to a backend: up to four byte ranges, sent in area-sized chunks. */
typedef struct VsStream
{
	VsResultBuf *buf;			/* reference held while streaming */
	char	   *owned;			/* bytes built for this request (pfree'd at the end) */
	int			niov;
	const char *iov_base[4];
	uint64		iov_len[4];
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
	VsStream	out;
} VsActive;

/* A cached index vector set. */
typedef struct VsCacheKey
{
	VsRelFileLocator locator;
	uint32		kind;
} VsCacheKey;

typedef struct VsCacheEntry
{
	VsCacheKey	key;
	vs_dataset *ds;
	uint32		dim;
	bool		valid;
	uint64		generation;		/* the copy reflects the index at least as of this */
	Size		nrows;
	int64	   *ids;			/* sorted */
	uint64	   *hashes;			/* hash of each row's vector (change detection) */
	Size		bytes;			/* accounted device bytes */
	uint64		last_used;
	vs_ivfpq   *ivf;			/* VS_INDEX_IVFPQ: the engine object (quantizer and lists) */
} VsCacheEntry;

/* A mapped request segment, kept for the backend's next request. */
typedef struct VsAttachment
{
	dsm_handle	handle;
	dsm_segment *seg;
	int			slot;
} VsAttachment;

static VsWorkerShared *shared;
static uint64 my_gen;
static VsActive *active;
static int	nstreaming;
static HTAB *attachments;
static HTAB *cache;
static Size cache_total;
static Size cache_limit;		/* 0: no limit */
static uint64 lru_clock;
static uint64 vhash_seed;
static vs_context *engine;
static bool engine_on_gpu;
static int	engine_device = -1;
static int	engine_limit_mb = -1;
static char *cuda_library;
static MemoryContext batch_cxt;
static MemoryContext result_cxt;
static MemoryContext cache_cxt;
static MemoryContext sync_cxt;
static MemoryContext read_cxt;
static ResourceOwner load_owner;
static int	last_batch_requests;
static int	device_errors;		/* consecutive VS_DEVICE_ERROR answers */

/* After this many device errors in a row the worker exits, and comes back with a fresh context. */
#define VS_MAX_DEVICE_ERRORS	3

/* the group the engine is working on (for the cancel callback) */
static VsActive **cancel_group;
static int	cancel_group_n;
static uint32 cancel_polls;

static inline void
heartbeat(void)
{
	pg_atomic_fetch_add_u64(&shared->heartbeat, 1);
}

static void
set_state(VsWorkerState state, const char *device)
{
	SpinLockAcquire(&shared->mutex);
	shared->state = state;
	if (device)
		strlcpy(shared->device, device, sizeof(shared->device));
	shared->on_gpu = state == VS_WORKER_SERVING && engine_on_gpu;
	SpinLockRelease(&shared->mutex);
}

/* ---- segments ----------------------------------------------------------------------------- */

static dsm_segment *
attach_segment(int slot, dsm_handle h)
{
	VsAttachment *att;
	bool		found;
	dsm_segment *volatile seg = NULL;

	if (h == DSM_HANDLE_INVALID)
		return NULL;
	att = hash_search(attachments, &h, HASH_FIND, &found);
	if (found)
	{
		att->slot = slot;
		return att->seg;
	}
	PG_TRY();
	{
		seg = dsm_attach(h);
		if (seg)
			dsm_pin_mapping(seg);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		seg = NULL;
	}
	PG_END_TRY();
	if (!seg)
		return NULL;
	att = hash_search(attachments, &h, HASH_ENTER, &found);
	att->seg = seg;
	att->slot = slot;
	return seg;
}

/* Unmaps segments their backends no longer use (a new segment, or the backend exited). */
static void
sweep_attachments(void)
{
	HASH_SEQ_STATUS it;
	VsAttachment *att;

	hash_seq_init(&it, attachments);
	while ((att = hash_seq_search(&it)) != NULL)
	{
		VsSlot	   *slot = &shared->slots[att->slot];
		VsActive   *a = &active[att->slot];

		if (a->active && a->seg == att->seg)
			continue;
		if (slot->handle == att->handle)
			continue;
		dsm_detach(att->seg);
		hash_search(attachments, &att->handle, HASH_REMOVE, NULL);
	}
}

/* ---- answers ------------------------------------------------------------------------------ */

static void
result_buf_release(VsResultBuf *buf)
{
	if (!buf || --buf->refcount > 0)
		return;
	if (buf->ids)
		pfree(buf->ids);
	if (buf->distances)
		pfree(buf->distances);
	if (buf->counts)
		pfree(buf->counts);
	if (buf->is_range)
		vs_range_result_free(&buf->range);
	pfree(buf);
}

static void
release_active(VsActive *a)
{
	if (a->streaming)
		nstreaming--;
	result_buf_release(a->out.buf);
	if (a->out.owned)
		pfree(a->out.owned);
	memset(a, 0, sizeof(*a));
}

/*
 * Ends a request: writes the status (unless OK, which the last chunk carried), marks the slot DONE
 * and wakes its backend; a slot the backend abandoned becomes free instead.
 */
static void
finish_request(int i, VsAnswerStatus status, const char *msg)
{
	VsActive   *a = &active[i];
	VsSlot	   *slot = &shared->slots[i];
	bool		wake = false;

	if (a->hdr && status != VS_ANSWER_OK)
	{
		a->hdr->status = status;
		strlcpy(a->hdr->errmsg, msg ? msg : "", sizeof(a->hdr->errmsg));
	}
	SpinLockAcquire(&slot->mutex);
	if (slot->request_id == a->request_id)
	{
		if (slot->state == VS_SLOT_RUNNING)
		{
			slot->state = VS_SLOT_DONE;
			wake = true;
		}
		else if (slot->state == VS_SLOT_ABANDONED)
		{
			/* the backend dropped the segment when it gave up; unmap it at the next sweep */
			slot->state = VS_SLOT_FREE;
			slot->handle = DSM_HANDLE_INVALID;
		}
	}
	SpinLockRelease(&slot->mutex);
	if (wake)
		SetLatch(vs_proc_latch(a->procno));
	if (status == VS_ANSWER_OK)
		pg_atomic_fetch_add_u64(&shared->requests, 1);
	else if (wake)
		pg_atomic_fetch_add_u64(&shared->errors, 1);
	release_active(a);
}

/* Drops a request without writing to its segment (it is not a request we can trust). */
static void
discard_request(int i)
{
	VsActive   *a = &active[i];

	a->hdr = NULL;
	SpinLockAcquire(&shared->slots[i].mutex);
	if (shared->slots[i].request_id == a->request_id &&
		(shared->slots[i].state == VS_SLOT_RUNNING || shared->slots[i].state == VS_SLOT_ABANDONED))
	{
		if (shared->slots[i].state == VS_SLOT_ABANDONED)
			shared->slots[i].handle = DSM_HANDLE_INVALID;
		shared->slots[i].state = VS_SLOT_FREE;
	}
	SpinLockRelease(&shared->slots[i].mutex);
	SetLatch(vs_proc_latch(a->procno));
	release_active(a);
}

static inline bool
slot_abandoned(int i)
{
	return ((volatile VsSlot *) &shared->slots[i])->state == VS_SLOT_ABANDONED;
}

/* Writes the next chunk of a request's answer; the last one completes the request. */
static void
stream_chunk(int i)
{
	VsActive   *a = &active[i];
	VsStream   *o = &a->out;
	VsRequest  *hdr = a->hdr;
	char	   *area = (char *) hdr + a->req.area_off;
	uint64		n = Min(a->req.area_len, o->len - o->pos);
	uint64		start = 0,
				done = 0;

	for (int v = 0; v < o->niov && done < n; v++)
	{
		uint64		end = start + o->iov_len[v];

		if (o->pos + done < end)
		{
			uint64		at = o->pos + done - start;
			uint64		m = Min(n - done, o->iov_len[v] - at);

			memcpy(area + done, o->iov_base[v] + at, m);
			done += m;
		}
		start = end;
	}
	Assert(done == n);
	hdr->chunk_off = o->pos;
	hdr->chunk_len = n;
	hdr->stream_len = o->len;
	o->pos += n;
	if (o->pos == o->len)
		hdr->status = VS_ANSWER_OK;
	pg_write_barrier();
	pg_atomic_write_u64(&hdr->produced, ++o->produced);
	if (o->pos == o->len)
		finish_request(i, VS_ANSWER_OK, NULL);
	else
	{
		if (!a->streaming)
		{
			a->streaming = true;
			nstreaming++;
		}
		SetLatch(vs_proc_latch(a->procno));
	}
}

/* Continues answers larger than their result area; drops those whose backend gave up. */
static bool
pump_streams(void)
{
	bool		did = false;

	if (nstreaming == 0)
		return false;
	for (int i = 0; i < shared->nslots && nstreaming > 0; i++)
	{
		VsActive   *a = &active[i];

		if (!a->active || !a->streaming)
			continue;
		if (slot_abandoned(i))
		{
			finish_request(i, VS_ANSWER_ERROR, "abandoned");
			did = true;
		}
		else if (pg_atomic_read_u64(&a->hdr->consumed) == a->out.produced)
		{
			stream_chunk(i);
			did = true;
		}
	}
	return did;
}

/* ---- taking requests ---------------------------------------------------------------------- */

/* Requests of a CREATE INDEX: they carry their data and read no index. */
static inline bool
is_build_op(uint32 op)
{
	return op == VS_OP_IVFPQ_TRAIN || op == VS_OP_IVFPQ_ENCODE;
}

/* Bytes of an encode request's quantizer (fields validated first: no overflow). */
static inline uint64
quantizer_bytes(const VsRequest *r)
{
	return ((uint64) r->train_lists + ((uint64) 1 << r->train_nbits)) * r->dim * sizeof(float);
}

static bool
validate_request(const VsRequest *r, Size seg_len, char *why, Size whylen)
{
	uint64		qbytes;

	if (r->protocol != VS_REQUEST_PROTOCOL)
		snprintf(why, whylen, "protocol %u, the worker speaks %u", r->protocol, VS_REQUEST_PROTOCOL);
	else if (r->op != VS_OP_KNN && r->op != VS_OP_RANGE && r->op != VS_OP_IVFPQ_TRAIN &&
			 r->op != VS_OP_IVFPQ_ENCODE)
		snprintf(why, whylen, "unknown operation %u", r->op);
	else if (r->op == VS_OP_IVFPQ_TRAIN &&
			 (r->kind != VS_INDEX_IVFPQ || r->dim < 1 || r->dim > VECTOR_MAX_DIM ||
			  r->train_lists < 1 || r->train_lists > VS_MAX_IVFPQ_LISTS ||
			  (r->train_nbits != 4 && r->train_nbits != 8) ||
			  r->train_m < 1 || r->train_m > r->dim || r->dim % r->train_m != 0 ||
			  r->nq < r->train_lists || r->nq < (1u << r->train_nbits) ||
			  r->metric >= VS_METRIC_COUNT || r->metric == VS_METRIC_L1 ||
			  (uint64) r->nq * r->dim * sizeof(float) > VS_MAX_TRAIN_SAMPLE_BYTES))
		snprintf(why, whylen, "invalid training request (lists %u, m %u, nbits %u, %u x %u sample)",
				 r->train_lists, r->train_m, r->train_nbits, r->nq, r->dim);
	else if (r->op == VS_OP_IVFPQ_ENCODE &&
			 (r->kind != VS_INDEX_IVFPQ || r->dim < 1 || r->dim > VECTOR_MAX_DIM ||
			  r->train_lists < 1 || r->train_lists > VS_MAX_IVFPQ_LISTS ||
			  (r->train_nbits != 4 && r->train_nbits != 8) ||
			  r->train_m < 1 || r->train_m > r->dim || r->dim % r->train_m != 0 ||
			  r->nq < 1 || r->nq > VS_MAX_ENCODE_ROWS ||
			  r->metric >= VS_METRIC_COUNT || r->metric == VS_METRIC_L1 ||
			  ((uint64) r->nq + r->train_lists + (1u << r->train_nbits)) * r->dim * sizeof(float) >
			  VS_MAX_ENCODE_BYTES))
		snprintf(why, whylen, "invalid encode request (lists %u, m %u, nbits %u, %u x %u rows)",
				 r->train_lists, r->train_m, r->train_nbits, r->nq, r->dim);
	else if (r->op == VS_OP_IVFPQ_ENCODE &&
			 (r->quantizer_off < sizeof(VsRequest) || r->quantizer_off % sizeof(float) != 0 ||
			  r->quantizer_off > seg_len ||
			  quantizer_bytes(r) > seg_len - r->quantizer_off ||
			  !(r->quantizer_off >= r->queries_off + (uint64) r->nq * r->dim * sizeof(float) ||
				r->queries_off >= r->quantizer_off + quantizer_bytes(r)) ||
			  !(r->quantizer_off >= r->area_off + r->area_len ||
				r->area_off >= r->quantizer_off + quantizer_bytes(r))))
		snprintf(why, whylen, "quantizer lies outside the segment or overlaps another part");
	else if (r->kind != VS_INDEX_FLAT && r->kind != VS_INDEX_IVFPQ)
		snprintf(why, whylen, "unknown index kind %u", r->kind);
	else if (r->metric >= VS_METRIC_COUNT ||
			 (r->kind == VS_INDEX_IVFPQ && r->metric == VS_METRIC_L1))
		snprintf(why, whylen, "unknown metric %u", r->metric);
	else if (r->dim < 1 || r->dim > VECTOR_MAX_DIM)
		snprintf(why, whylen, "dimension %u out of range", r->dim);
	else if (r->nq < 1 || r->nq > VS_MAX_REQUEST_QUERIES)
		snprintf(why, whylen, "%u queries out of range", r->nq);
	else if (r->op == VS_OP_KNN &&
			 (r->k < 1 || r->k > (r->kind == VS_INDEX_IVFPQ ? VS_MAX_IVFPQ_K : VS_MAX_K)))
		snprintf(why, whylen, "k = %u out of range", r->k);
	else if (r->op == VS_OP_KNN && (uint64) r->nq * r->k > VS_MAX_KNN_RESULTS)
		snprintf(why, whylen, "%u queries x k = %u is too many results", r->nq, r->k);
	else if (r->op == VS_OP_RANGE && isnan(r->radius))
		snprintf(why, whylen, "radius is NaN");
	else if (r->kind == VS_INDEX_FLAT && (r->probe_offset != 0 || r->nprobe != 0))
		snprintf(why, whylen, "probe window on a vs_flat request");
	else if (r->kind == VS_INDEX_IVFPQ && !is_build_op(r->op) &&
			 (r->nprobe < 1 || r->nprobe > VS_MAX_IVFPQ_LISTS ||
			  r->probe_offset >= VS_MAX_IVFPQ_LISTS))
		snprintf(why, whylen, "probe window [%u, +%u) out of range", r->probe_offset, r->nprobe);
	else if (r->kind == VS_INDEX_IVFPQ && r->op == VS_OP_RANGE &&
			 (double) (float) r->radius != r->radius && !isinf(r->radius))
		snprintf(why, whylen, "vs_ivfpq radius is not a float value");
	else if (!is_build_op(r->op) && r->relpersistence != RELPERSISTENCE_PERMANENT &&
			 r->relpersistence != RELPERSISTENCE_UNLOGGED)
		snprintf(why, whylen, "relpersistence '%c' cannot be served", r->relpersistence);
	else
	{
		qbytes = (uint64) r->nq * r->dim * sizeof(float);
		if (r->queries_off < sizeof(VsRequest) || r->queries_off % sizeof(float) != 0 ||
			r->queries_off > seg_len || qbytes > seg_len - r->queries_off)
			snprintf(why, whylen, "queries lie outside the segment");
		else if (r->area_off < sizeof(VsRequest) || r->area_off % MAXIMUM_ALIGNOF != 0 ||
				 r->area_off > seg_len || r->area_len > seg_len - r->area_off ||
				 r->area_len < VS_MIN_AREA)
			snprintf(why, whylen, "result area lies outside the segment");
		else if (!(r->area_off >= r->queries_off + qbytes ||
				   r->queries_off >= r->area_off + r->area_len))
			snprintf(why, whylen, "result area overlaps the queries");
		else
			return true;
	}
	return false;
}

/* Takes the request in slot i if one was submitted; true when it is valid and ours to answer. */
static bool
take_request(int i)
{
	VsSlot	   *slot = &shared->slots[i];
	VsActive   *a = &active[i];
	uint64		rid;
	dsm_handle	h;
	int			procno;
	dsm_segment *seg;
	char		why[200];

	if (((volatile VsSlot *) slot)->state != VS_SLOT_SUBMITTED)
		return false;
	SpinLockAcquire(&slot->mutex);
	if (slot->state != VS_SLOT_SUBMITTED)
	{
		SpinLockRelease(&slot->mutex);
		return false;
	}
	slot->state = VS_SLOT_RUNNING;
	slot->worker_gen = my_gen;
	rid = slot->request_id;
	h = slot->handle;
	procno = slot->procno;
	SpinLockRelease(&slot->mutex);

	if (a->active)				/* cannot happen: the slot was not RUNNING for us */
		release_active(a);
	a->active = true;
	a->request_id = rid;
	a->procno = procno;
	if (procno < 0 || procno >= MaxBackends || procno * VS_SLOTS_PER_BACKEND > i ||
		i >= (procno + 1) * VS_SLOTS_PER_BACKEND)
	{
		a->procno = i / VS_SLOTS_PER_BACKEND;
		discard_request(i);
		return false;
	}
	seg = attach_segment(i, h);
	if (!seg || dsm_segment_map_length(seg) < sizeof(VsRequest))
	{
		discard_request(i);
		return false;
	}
	a->seg = seg;
	memcpy(&a->req, dsm_segment_address(seg), sizeof(VsRequest));
	if (a->req.magic != VS_REQUEST_MAGIC || a->req.request_id != rid)
	{
		discard_request(i);
		return false;
	}
	a->hdr = dsm_segment_address(seg);
	if (!validate_request(&a->req, dsm_segment_map_length(seg), why, sizeof(why)))
	{
		elog(WARNING, "vsearch worker: malformed request from process %d: %s",
			 (int) (rid >> 32), why);
		finish_request(i, VS_ANSWER_INVALID, why);
		return false;
	}
	return true;
}

/* Takes every submitted request, appending to list; returns the new count. */
static int
gather(VsActive **list, int n, Size *queries)
{
	for (int i = 0; i < shared->nslots; i++)
	{
		VsSlotState st = ((volatile VsSlot *) &shared->slots[i])->state;

		if (st == VS_SLOT_SUBMITTED)
		{
			if (take_request(i))
			{
				list[n++] = &active[i];
				*queries += active[i].req.nq;
			}
		}
		else if (st == VS_SLOT_ABANDONED && !active[i].active)
		{
			/* left over (e.g. from an earlier worker): nobody works on it */
			SpinLockAcquire(&shared->slots[i].mutex);
			if (shared->slots[i].state == VS_SLOT_ABANDONED)
			{
				shared->slots[i].state = VS_SLOT_FREE;
				shared->slots[i].handle = DSM_HANDLE_INVALID;
			}
			SpinLockRelease(&shared->slots[i].mutex);
		}
	}
	return n;
}

static inline int
active_index(VsActive *a)
{
	return (int) (a - active);
}

/* ---- the index cache ---------------------------------------------------------------------- */

static inline Size
row_bytes(uint32 dim)
{
	/* vector, id and cached norm on the device */
	return (Size) dim * sizeof(float) + 2 * sizeof(int64);
}

/* A keyed 64-bit hash of a vector's bytes, to notice rows whose vector changed. */
static inline uint64
vhash(const float *v, uint32 dim)
{
	const char *p = (const char *) v;
	Size		len = (Size) dim * sizeof(float);
	uint64		h = vhash_seed ^ (len * UINT64CONST(0x9E3779B97F4A7C15));
	Size		i = 0;

	for (; i + 8 <= len; i += 8)
	{
		uint64		x;

		memcpy(&x, p + i, 8);
		h ^= x;
		h *= UINT64CONST(0xBF58476D1CE4E5B9);
		h ^= h >> 31;
	}
	if (i < len)
	{
		uint32		x;

		memcpy(&x, p + i, 4);
		h ^= x;
		h *= UINT64CONST(0xBF58476D1CE4E5B9);
		h ^= h >> 31;
	}
	h ^= h >> 33;
	h *= UINT64CONST(0x94D049BB133111EB);
	h ^= h >> 29;
	return h;
}

static void
update_cache_stats(void)
{
	vs_context_info info;

	pg_atomic_write_u64(&shared->cache_bytes, cache_total);
	pg_atomic_write_u32(&shared->cached_indexes, cache ? hash_get_num_entries(cache) : 0);
	if (engine && vs_context_get_info(engine, &info) == VS_OK)
		pg_atomic_write_u64(&shared->memory_in_use, info.memory_in_use);
	else
		pg_atomic_write_u64(&shared->memory_in_use, 0);
}

static void
cache_drop_data(VsCacheEntry *e)
{
	if (e->ds)
		vs_dataset_destroy(engine, e->ds);
	e->ds = NULL;
	if (e->ivf)
		vs_ivfpq_destroy(engine, e->ivf);
	e->ivf = NULL;
	if (e->ids)
		pfree(e->ids);
	if (e->hashes)
		pfree(e->hashes);
	e->ids = NULL;
	e->hashes = NULL;
	e->nrows = 0;
	cache_total -= e->bytes;
	e->bytes = 0;
	e->valid = false;
	e->generation = 0;
}

static void
cache_remove(VsCacheEntry *e)
{
	VsCacheKey	key = e->key;

	cache_drop_data(e);
	hash_search(cache, &key, HASH_REMOVE, NULL);
	update_cache_stats();
}

/* Evicts the least recently used entry other than keep; false if there is none. */
static bool
cache_evict_one(VsCacheEntry *keep)
{
	HASH_SEQ_STATUS it;
	VsCacheEntry *e,
			   *victim = NULL;

	hash_seq_init(&it, cache);
	while ((e = hash_seq_search(&it)) != NULL)
		if (e != keep && (!victim || e->last_used < victim->last_used))
			victim = e;
	if (!victim)
		return false;
	elog(DEBUG1, "vsearch worker: evicting a cached index (%zu bytes)", victim->bytes);
	cache_remove(victim);
	pg_atomic_fetch_add_u64(&shared->evictions, 1);
	return true;
}

static void
cache_clear(void)
{
	HASH_SEQ_STATUS it;
	VsCacheEntry *e;

	if (!cache)
		return;
	hash_seq_init(&it, cache);
	while ((e = hash_seq_search(&it)) != NULL)
	{
		cache_drop_data(e);
		hash_search(cache, &e->key, HASH_REMOVE, NULL);
	}
	cache_total = 0;
	update_cache_stats();
}

/*
 * What a sync gathers while the index is read: rows to add, and which cached rows were seen
 * unchanged.  Positions in the read (1, 2, ...) order the copies of an id read twice.
 */
typedef struct VsSync
{
	VsCacheEntry *entry;
	uint32		dim;
	uint64	   *seen;			/* entry->nrows: read position of the row's last unchanged copy, 0 if none */
	float	   *vectors;		/* rows to add */
	int64	   *ids;
	uint64	   *hashes;
	uint64	   *order;			/* read position */
	Size		nadd;
	Size		cap;
	Size		rows;
} VsSync;

static Size
find_row(const int64 *ids, Size n, int64 id)
{
	Size		lo = 0,
				hi = n;

	while (lo < hi)
	{
		Size		mid = lo + (hi - lo) / 2;

		if (ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < n && ids[lo] == id) ? lo : (Size) -1;
}

static void
sync_grow(VsSync *st, Size need)
{
	Size		cap = Max(st->cap * 2, 4096);

	while (cap < need)
		cap *= 2;
	if (st->cap == 0)
	{
		st->vectors = MemoryContextAllocHuge(sync_cxt, cap * st->dim * sizeof(float));
		st->ids = MemoryContextAllocHuge(sync_cxt, cap * sizeof(int64));
		st->hashes = MemoryContextAllocHuge(sync_cxt, cap * sizeof(uint64));
		st->order = MemoryContextAllocHuge(sync_cxt, cap * sizeof(uint64));
	}
	else
	{
		st->vectors = repalloc_huge(st->vectors, cap * st->dim * sizeof(float));
		st->ids = repalloc_huge(st->ids, cap * sizeof(int64));
		st->hashes = repalloc_huge(st->hashes, cap * sizeof(uint64));
		st->order = repalloc_huge(st->order, cap * sizeof(uint64));
	}
	st->cap = cap;
}

static void
sync_consume(void *arg, const float *vectors, const int64 *ids, size_t n)
{
	VsSync	   *st = arg;
	VsCacheEntry *e = st->entry;

	heartbeat();
	CHECK_FOR_INTERRUPTS();
	if (cache_limit > 0 && (st->rows + n) * row_bytes(st->dim) > cache_limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the index holds more than the worker's cache may (%zu MB)",
						cache_limit >> 20)));
	for (size_t r = 0; r < n; r++)
	{
		const float *v = vectors + r * st->dim;
		uint64		h = vhash(v, st->dim);
		Size		pos = e->nrows ? find_row(e->ids, e->nrows, ids[r]) : (Size) -1;

		st->rows++;
		if (pos != (Size) -1 && e->hashes[pos] == h)
		{
			st->seen[pos] = st->rows;
			continue;
		}
		if (st->nadd == st->cap)
			sync_grow(st, st->nadd + 1);
		memcpy(st->vectors + st->nadd * st->dim, v, (Size) st->dim * sizeof(float));
		st->ids[st->nadd] = ids[r];
		st->hashes[st->nadd] = h;
		st->order[st->nadd] = st->rows;
		st->nadd++;
	}
}

typedef struct AddRef
{
	int64		id;
	uint64		order;
	Size		r;				/* index into the rows to add */
} AddRef;

static int
addref_cmp(const void *a, const void *b)
{
	const AddRef *x = a,
			   *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->order < y->order ? -1 : (x->order > y->order ? 1 : 0);
}

/*
 * An id read twice in one pass: VACUUM removed a dead row's entry after the read passed it, and a
 * new row reused the heap tid and was appended.  The copy read last is the row's (the earlier one
 * was removed because no snapshot can see it), so only that one stays: among the rows to add, and
 * against a cached row seen unchanged.
 */
static void
sync_keep_last_copies(VsSync *st)
{
	VsCacheEntry *e = st->entry;
	AddRef	   *refs;
	bool	   *drop;
	bool		sorted = true;
	Size		o = 0;

	if (st->nadd == 0)
		return;
	refs = MemoryContextAllocHuge(sync_cxt, st->nadd * sizeof(AddRef));
	drop = MemoryContextAllocHuge(sync_cxt, st->nadd);
	memset(drop, 0, st->nadd);
	for (Size r = 0; r < st->nadd; r++)
	{
		refs[r].id = st->ids[r];
		refs[r].order = st->order[r];
		refs[r].r = r;
		if (r > 0 && refs[r].id <= refs[r - 1].id)
			sorted = false;
	}
	if (!sorted)
		qsort(refs, st->nadd, sizeof(AddRef), addref_cmp);
	for (Size i = 0; i < st->nadd; i++)
	{
		Size		pos;

		if (i + 1 < st->nadd && refs[i + 1].id == refs[i].id)
		{
			drop[refs[i].r] = true; /* read again later */
			continue;
		}
		pos = e->nrows ? find_row(e->ids, e->nrows, refs[i].id) : (Size) -1;
		if (pos != (Size) -1 && st->seen[pos] != 0)
		{
			if (st->seen[pos] > refs[i].order)
				drop[refs[i].r] = true; /* the cached copy was read last: keep it */
			else
				st->seen[pos] = 0;	/* replaced: the cached copy goes */
		}
	}
	for (Size r = 0; r < st->nadd; r++)
	{
		if (drop[r])
			continue;
		if (o != r)
		{
			memcpy(st->vectors + o * st->dim, st->vectors + r * st->dim, (Size) st->dim * sizeof(float));
			st->ids[o] = st->ids[r];
			st->hashes[o] = st->hashes[r];
			st->order[o] = st->order[r];
		}
		o++;
	}
	st->nadd = o;
	pfree(refs);
	pfree(drop);
}

/* Releases what an index read holds (buffer pins, locks, files), after success or an error. */
static void
load_cleanup(bool error)
{
	if (error)
	{
		LWLockReleaseAll();
		ConditionVariableCancelSleep();
		pgstat_report_wait_end();
#if PG_VERSION_NUM < 160000
		AbortBufferIO();
#endif
		UnlockBuffers();
	}
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_BEFORE_LOCKS, !error, true);
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_LOCKS, !error, true);
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_AFTER_LOCKS, !error, true);
	CurrentResourceOwner = NULL;
	if (error)
	{
		AtEOXact_Buffers(false);
		AtEOXact_Files(false);
	}
	/* no file stays open on a relation that may be dropped later */
	smgrcloseall();
}

typedef struct IdHash
{
	int64		id;
	uint64		hash;
} IdHash;

static int
idhash_cmp(const void *a, const void *b)
{
	int64		x = ((const IdHash *) a)->id,
				y = ((const IdHash *) b)->id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Brings the cached copy up to date: reads the index, removes the rows that disappeared or
 * changed, adds the new ones.  A first load is the same with an empty copy.
 */
static bool
cache_sync(VsCacheEntry *e, const VsRequest *req, uint64 generation, char *err, Size errlen)
{
	VsSync		st;
	VsIndexRef	ref;
	bool		first = !e->valid;
	bool		failed = false;
	Size		nremove = 0,
				nkeep,
				need;
	int64	   *remove;
	vs_status	rc;

	MemoryContextReset(sync_cxt);
	if (cache_limit > 0 && req->ntuples * row_bytes(req->dim) > cache_limit)
	{
		snprintf(err, errlen, "index %u needs about %llu MB, more than the worker's cache may hold (%zu MB)",
				 req->indexrelid, (unsigned long long) ((req->ntuples * row_bytes(req->dim)) >> 20),
				 cache_limit >> 20);
		return false;
	}
	memset(&st, 0, sizeof(st));
	st.entry = e;
	st.dim = req->dim;
	st.seen = MemoryContextAllocHuge(sync_cxt, Max(e->nrows, 1) * sizeof(uint64));
	memset(st.seen, 0, Max(e->nrows, 1) * sizeof(uint64));

	memset(&ref, 0, sizeof(ref));
	ref.dbid = req->dbid;
	ref.indexrelid = req->indexrelid;
	ref.locator = req->locator;
	ref.relpersistence = req->relpersistence;
	ref.kind = (VsIndexKind) req->kind;
	ref.metric = (vs_metric) req->metric;
	ref.dim = req->dim;
	ref.generation = generation;

	CurrentResourceOwner = load_owner;
	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(read_cxt);

		vs_index_read_vectors(&ref, sync_consume, &st);
		MemoryContextSwitchTo(old);
	}
	PG_CATCH();
	{
		MemoryContext old = MemoryContextSwitchTo(batch_cxt);
		ErrorData  *edata = CopyErrorData();

		MemoryContextSwitchTo(old);
		FlushErrorState();
		load_cleanup(true);
		snprintf(err, errlen, "reading index %u failed: %s", req->indexrelid, edata->message);
		ereport(LOG, (errmsg("vsearch worker: %s", err)));
		failed = true;
	}
	PG_END_TRY();
	MemoryContextReset(read_cxt);
	if (failed)
		return false;
	load_cleanup(false);
	heartbeat();
	sync_keep_last_copies(&st);

	/* rows to remove: cached rows not seen unchanged */
	remove = MemoryContextAllocHuge(sync_cxt, Max(e->nrows, 1) * sizeof(int64));
	for (Size r = 0; r < e->nrows; r++)
		if (!st.seen[r])
			remove[nremove++] = e->ids[r];
	nkeep = e->nrows - nremove;

	/* room in the cache */
	need = (nkeep + st.nadd) * row_bytes(st.dim);
	if (cache_limit > 0 && need > cache_limit)
	{
		snprintf(err, errlen, "index %u needs %zu MB, more than the worker's cache may hold (%zu MB)",
				 req->indexrelid, need >> 20, cache_limit >> 20);
		return false;
	}
	while (cache_limit > 0 && cache_total - e->bytes + need > cache_limit)
		if (!cache_evict_one(e))
			break;

	if (!e->ds)
	{
		rc = vs_dataset_create(engine, st.dim, VS_DTYPE_F32, &e->ds);
		if (rc != VS_OK)
		{
			snprintf(err, errlen, "creating a dataset failed: %s", vs_last_error(engine));
			return false;
		}
	}
	if (nremove > 0)
	{
		rc = vs_dataset_remove(engine, e->ds, remove, nremove, NULL);
		if (rc != VS_OK)
		{
			snprintf(err, errlen, "removing rows failed: %s", vs_last_error(engine));
			return false;
		}
	}
	if (st.nadd > 0)
	{
		for (;;)
		{
			rc = vs_dataset_add(engine, e->ds, st.vectors, st.ids, st.nadd);
			if (rc == VS_OUT_OF_MEMORY && cache_evict_one(e))
				continue;
			break;
		}
		if (rc != VS_OK)
		{
			snprintf(err, errlen, "loading %zu rows failed: %s: %s", st.nadd,
					 vs_status_name(rc), vs_last_error(engine));
			return false;
		}
	}

	/* the new (id, hash) list: kept rows (sorted) merged with the added ones (sorted here) */
	{
		IdHash	   *add = MemoryContextAllocHuge(sync_cxt, Max(st.nadd, 1) * sizeof(IdHash));
		Size		n = nkeep + st.nadd;
		int64	   *ids = MemoryContextAllocHuge(cache_cxt, Max(n, 1) * sizeof(int64));
		uint64	   *hashes = MemoryContextAllocHuge(cache_cxt, Max(n, 1) * sizeof(uint64));
		bool		sorted = true;
		Size		i = 0,
					j = 0,
					o = 0;

		for (Size r = 0; r < st.nadd; r++)
		{
			add[r].id = st.ids[r];
			add[r].hash = st.hashes[r];
			if (r > 0 && add[r].id < add[r - 1].id)
				sorted = false;
		}
		if (!sorted)
			qsort(add, st.nadd, sizeof(IdHash), idhash_cmp);
		while (i < e->nrows || j < st.nadd)
		{
			if (i < e->nrows && !st.seen[i])
			{
				i++;
				continue;
			}
			if (j == st.nadd || (i < e->nrows && e->ids[i] < add[j].id))
			{
				ids[o] = e->ids[i];
				hashes[o++] = e->hashes[i++];
			}
			else
			{
				ids[o] = add[j].id;
				hashes[o++] = add[j++].hash;
			}
		}
		Assert(o == n);
		if (e->ids)
			pfree(e->ids);
		if (e->hashes)
			pfree(e->hashes);
		e->ids = ids;
		e->hashes = hashes;
		e->nrows = n;
	}
	cache_total = cache_total - e->bytes + need;
	e->bytes = need;
	e->dim = st.dim;
	e->valid = true;
	e->generation = Max(e->generation, generation);
	pg_atomic_fetch_add_u64(first ? &shared->loads : &shared->refreshes, 1);
	elog(DEBUG1, "vsearch worker: %s index %u: %zu rows read, %zu added, %zu removed",
		 first ? "loaded" : "refreshed", req->indexrelid, st.rows, st.nadd, nremove);
	MemoryContextReset(sync_cxt);
	update_cache_stats();
	return true;
}

static void
request_ref(const VsRequest *req, uint64 generation, VsIndexRef *ref)
{
	memset(ref, 0, sizeof(*ref));
	ref->dbid = req->dbid;
	ref->indexrelid = req->indexrelid;
	ref->locator = req->locator;
	ref->relpersistence = req->relpersistence;
	ref->kind = (VsIndexKind) req->kind;
	ref->metric = (vs_metric) req->metric;
	ref->dim = req->dim;
	ref->generation = generation;
}

/*
 * (Re)builds the engine object of a vs_ivfpq index: reads the whole index with the backends' reader
 * (vs_ivfpq_read_index, by locator, no relcache) and builds the object with the backends' builder
 * (vs_ivfpq_contents_object), so both paths search the same entries.  There is no incremental
 * refresh: a newer generation reads the index again.  Pending (unquantized) entries are not
 * loaded: the backends take them from the metapage's pending chain themselves (only an index
 * without a quantizer has any, and such an index sends no request).
 */
static bool
ivfpq_sync(VsCacheEntry *e, const VsRequest *req, uint64 generation, char *err, Size errlen)
{
	VsIndexRef	ref;
	VsIvfpqContents contents;
	bool		first = !e->valid;
	bool		failed = false;
	Size		need = 0;
	vs_ivfpq   *ivf = NULL;
	int			rc = VS_OK;

	/* entries are at least 8 bytes of id: refuse what cannot fit before reading it */
	if (cache_limit > 0 && req->ntuples * sizeof(int64) > cache_limit)
	{
		snprintf(err, errlen, "index %u needs more than the worker's cache may hold (%zu MB)",
				 req->indexrelid, cache_limit >> 20);
		return false;
	}
	request_ref(req, generation, &ref);
	memset(&contents, 0, sizeof(contents));

	CurrentResourceOwner = load_owner;
	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(read_cxt);

		vs_ivfpq_read_index(&ref, false, &contents);
		MemoryContextSwitchTo(old);
	}
	PG_CATCH();
	{
		MemoryContext old = MemoryContextSwitchTo(batch_cxt);
		ErrorData  *edata = CopyErrorData();

		MemoryContextSwitchTo(old);
		FlushErrorState();
		load_cleanup(true);
		snprintf(err, errlen, "reading index %u failed: %s", req->indexrelid, edata->message);
		ereport(LOG, (errmsg("vsearch worker: %s", err)));
		failed = true;
	}
	PG_END_TRY();
	if (failed)
	{
		MemoryContextReset(read_cxt);
		return false;
	}
	load_cleanup(false);
	heartbeat();

	if (!contents.meta.trained || contents.meta.dim != req->dim ||
		contents.meta.metric != req->metric || contents.meta.lists < 1)
	{
		snprintf(err, errlen, "index %u is not a trained vs_ivfpq index of dimension %u and metric %u",
				 req->indexrelid, req->dim, req->metric);
		failed = true;
	}
	else
	{
		need = vs_ivfpq_object_bytes(&contents.meta, contents.n);
		if (cache_limit > 0 && need > cache_limit)
		{
			snprintf(err, errlen, "index %u needs %zu MB, more than the worker's cache may hold (%zu MB)",
					 req->indexrelid, need >> 20, cache_limit >> 20);
			failed = true;
		}
	}
	if (!failed)
	{
		/* the old object goes first: the new one replaces it */
		cache_drop_data(e);
		while (cache_limit > 0 && cache_total + need > cache_limit)
			if (!cache_evict_one(e))
				break;
		for (;;)
		{
			rc = vs_ivfpq_contents_object(engine, &contents, &ivf);
			if (rc == VS_OUT_OF_MEMORY && cache_evict_one(e))
				continue;
			break;
		}
		if (rc != VS_OK)
		{
			snprintf(err, errlen, "loading index %u failed: %s: %s", req->indexrelid,
					 vs_status_name((vs_status) rc), vs_last_error(engine));
			failed = true;
		}
	}
	MemoryContextReset(read_cxt);
	heartbeat();
	if (failed)
		return false;

	e->ivf = ivf;
	e->nrows = (Size) contents.n;
	e->bytes = need;
	cache_total += need;
	e->dim = req->dim;
	e->valid = true;
	e->generation = Max(contents.meta.generation, generation);
	pg_atomic_fetch_add_u64(first ? &shared->loads : &shared->refreshes, 1);
	elog(DEBUG1, "vsearch worker: %s vs_ivfpq index %u: %lld entries",
		 first ? "loaded" : "reloaded", req->indexrelid, (long long) contents.n);
	update_cache_stats();
	return true;
}

/* The cached copy of the request's index, at least as new as generation; NULL with err. */
static VsCacheEntry *
cache_prepare(const VsRequest *req, uint64 generation, char *err, Size errlen)
{
	VsCacheKey	key;
	VsCacheEntry *e;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.locator = req->locator;
	key.kind = req->kind;
	e = hash_search(cache, &key, HASH_ENTER, &found);
	if (!found)
	{
		memset((char *) e + sizeof(VsCacheKey), 0, sizeof(VsCacheEntry) - sizeof(VsCacheKey));
		e->dim = req->dim;
	}
	else if (e->dim != req->dim)
	{
		cache_drop_data(e);
		e->dim = req->dim;
	}
	e->last_used = ++lru_clock;
	if (e->valid && e->generation >= generation)
		return e;
	if (!(req->kind == VS_INDEX_IVFPQ ? ivfpq_sync(e, req, generation, err, errlen)
		  : cache_sync(e, req, generation, err, errlen)))
	{
		cache_remove(e);
		return NULL;
	}
	return e;
}

/* ---- batches ------------------------------------------------------------------------------ */

static int
engine_cancel(void *arg)
{
	heartbeat();
	if (ProcDiePending)
		return 1;
	/* every 64th poll: stop if every backend of the group gave up */
	if (cancel_group_n > 0 && (++cancel_polls & 63) == 0)
	{
		for (int i = 0; i < cancel_group_n; i++)
			if (!slot_abandoned(active_index(cancel_group[i])))
				return 0;
		return 1;
	}
	return 0;
}

static int
request_cmp(const void *pa, const void *pb)
{
	const VsRequest *a = &(*(VsActive *const *) pa)->req;
	const VsRequest *b = &(*(VsActive *const *) pb)->req;
	int			c;

	if (a->op != b->op)
		return a->op < b->op ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	c = memcmp(&a->locator, &b->locator, sizeof(a->locator));
	if (c != 0)
		return c;
	if (a->dim != b->dim)
		return a->dim < b->dim ? -1 : 1;
	if (a->metric != b->metric)
		return a->metric < b->metric ? -1 : 1;
	if (a->op == VS_OP_RANGE && a->radius != b->radius)
		return a->radius < b->radius ? -1 : 1;
	if (a->probe_offset != b->probe_offset)
		return a->probe_offset < b->probe_offset ? -1 : 1;
	if (a->nprobe != b->nprobe)
		return a->nprobe < b->nprobe ? -1 : 1;
	return 0;
}

static void
fail_group(VsActive **reqs, int n, const char *msg)
{
	for (int r = 0; r < n; r++)
		if (reqs[r]->active && !reqs[r]->streaming && reqs[r]->out.produced == 0)
			finish_request(active_index(reqs[r]), VS_ANSWER_ERROR, msg);
}

/* Builds the answer stream of request a from the group's result and starts sending it. */
static void
start_answer(VsActive *a, VsResultBuf *buf, uint32 kmax)
{
	VsStream   *o = &a->out;
	uint32		nq = a->req.nq;

	o->buf = buf;
	buf->refcount++;
	if (!buf->is_range)
	{
		uint32		k = a->req.k;
		const int64 *counts = buf->counts + a->q0;

		if (k == kmax)
		{
			o->iov_base[0] = (const char *) counts;
			o->iov_len[0] = (uint64) nq * sizeof(int64);
			o->iov_base[1] = (const char *) (buf->ids + a->q0 * kmax);
			o->iov_len[1] = (uint64) nq * k * sizeof(int64);
			o->iov_base[2] = (const char *) (buf->distances + a->q0 * kmax);
			o->iov_len[2] = (uint64) nq * k * sizeof(float);
			o->niov = 3;
		}
		else
		{
			Size		len = (Size) nq * (sizeof(int64) + (Size) k * (sizeof(int64) + sizeof(float)));
			int64	   *c;
			int64	   *ids;
			float	   *d;

			o->owned = MemoryContextAllocHuge(result_cxt, len);
			c = (int64 *) o->owned;
			ids = c + nq;
			d = (float *) (ids + (Size) nq * k);
			for (uint32 q = 0; q < nq; q++)
			{
				c[q] = Min(counts[q], (int64) k);
				memcpy(ids + (Size) q * k, buf->ids + (a->q0 + q) * kmax, k * sizeof(int64));
				memcpy(d + (Size) q * k, buf->distances + (a->q0 + q) * kmax, k * sizeof(float));
			}
			o->iov_base[0] = o->owned;
			o->iov_len[0] = len;
			o->niov = 1;
		}
	}
	else
	{
		const int64 *off = buf->range.offsets + a->q0;
		int64		base = off[0];
		int64		total = off[nq] - base;
		int64	   *h;

		o->owned = MemoryContextAllocHuge(result_cxt, (Size) (nq + 2) * sizeof(int64));
		h = (int64 *) o->owned;
		h[0] = total;
		for (uint32 q = 0; q <= nq; q++)
			h[q + 1] = off[q] - base;
		o->iov_base[0] = o->owned;
		o->iov_len[0] = (uint64) (nq + 2) * sizeof(int64);
		o->iov_base[1] = (const char *) (buf->range.ids + base);
		o->iov_len[1] = (uint64) total * sizeof(int64);
		o->iov_base[2] = (const char *) (buf->range.distances + base);
		o->iov_len[2] = (uint64) total * sizeof(float);
		o->niov = 3;
	}
	o->len = 0;
	for (int v = 0; v < o->niov; v++)
		o->len += o->iov_len[v];
	o->pos = 0;
	o->produced = 0;
	stream_chunk(active_index(a));
}

/*
 * Trains a vs_ivfpq quantizer (CREATE INDEX) on the sample in the request's segment: one engine
 * call, not cached, never grouped.  The answer is the centroids and the codebooks.
 */
static void
process_train(VsActive *a)
{
	const VsRequest *r = &a->req;
	vs_ivfpq_params params;
	vs_ivfpq_train_params train;
	Size		ncent = (Size) r->train_lists * r->dim;
	Size		ncode = ((Size) 1 << r->train_nbits) * r->dim;
	float	   *out;
	vs_status	rc;
	char		err[256];
	VsActive   *group[1];

	memset(&params, 0, sizeof(params));
	params.dim = r->dim;
	params.nlist = r->train_lists;
	params.m = r->train_m;
	params.nbits = (int) r->train_nbits;
	params.metric = (vs_metric) r->metric;
	vs_ivfpq_train_params_init(&train);
	train.seed = r->train_seed;
	train.sample_size = 0;		/* the backend drew the sample */

	out = MemoryContextAllocHuge(result_cxt, (ncent + ncode) * sizeof(float));
	group[0] = a;
	cancel_group = group;
	cancel_group_n = 1;
	/* the sample is read in place: a backend that scribbles on it only spoils its own index */
	rc = vs_ivfpq_train(engine, &params, &train,
						(const float *) ((char *) a->hdr + r->queries_off), r->nq,
						out, out + ncent);
	cancel_group_n = 0;
	pg_atomic_fetch_add_u64(&shared->batches, 1);
	pg_atomic_fetch_add_u64(&shared->batch_queries, r->nq);
	update_cache_stats();
	if (rc != VS_OK)
	{
		snprintf(err, sizeof(err), "training: %s: %s", vs_status_name(rc), vs_last_error(engine));
		if (rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: %s", err)));
		pfree(out);
		fail_group(group, 1, err);
		device_errors = rc == VS_DEVICE_ERROR ? device_errors + 1 : 0;
		return;
	}
	device_errors = 0;
	a->out.owned = (char *) out;
	a->out.iov_base[0] = (const char *) out;
	a->out.iov_len[0] = (uint64) (ncent + ncode) * sizeof(float);
	a->out.niov = 1;
	a->out.len = a->out.iov_len[0];
	a->out.pos = 0;
	a->out.produced = 0;
	stream_chunk(active_index(a));
}

/*
 * Encoders of CREATE INDEX builds (VS_OP_IVFPQ_ENCODE): an engine object per build, made from the
 * quantizer of its first chunk and kept for the next ones.  Every request carries the quantizer
 * again, and an encoder is used only when its copy equals it byte for byte, so a stale or
 * mismatched one is never used (a worker restart just creates it again).  The least recently
 * used one makes room; one idle for VS_ENCODER_IDLE_MS is dropped (the build ended or died).
 */
#define VS_ENCODERS				4
#define VS_ENCODER_IDLE_MS		60000

typedef struct VsEncoder
{
	uint64		build_id;		/* 0: unused */
	vs_ivfpq_params params;
	float	   *quantizer;		/* centroids | codebooks, as received */
	Size		qbytes;
	vs_ivfpq   *ivf;
	TimestampTz last_used;
} VsEncoder;

static VsEncoder encoders[VS_ENCODERS];

static void
encoder_drop(VsEncoder *e)
{
	if (e->ivf && engine)
		vs_ivfpq_destroy(engine, e->ivf);
	if (e->quantizer)
		pfree(e->quantizer);
	memset(e, 0, sizeof(*e));
}

/* Drops the encoders idle for VS_ENCODER_IDLE_MS (all of them when all is set). */
static void
encoders_expire(bool all)
{
	TimestampTz now = 0;

	for (int i = 0; i < VS_ENCODERS; i++)
	{
		if (encoders[i].build_id == 0)
			continue;
		if (!all && now == 0)
			now = GetCurrentTimestamp();
		if (all || TimestampDifferenceExceeds(encoders[i].last_used, now, VS_ENCODER_IDLE_MS))
			encoder_drop(&encoders[i]);
	}
}

/* The encoder of this request's build and quantizer, created when there is none. */
static VsEncoder *
encoder_get(const VsRequest *r, const vs_ivfpq_params *params, const float *quantizer,
			char *err, Size errlen)
{
	Size		qbytes = (Size) quantizer_bytes(r);
	Size		ncent = (Size) r->train_lists * r->dim;
	VsEncoder  *e = NULL;
	vs_status	rc;

	for (int i = 0; i < VS_ENCODERS; i++)
	{
		VsEncoder  *c = &encoders[i];

		if (c->build_id != r->build_id || c->build_id == 0)
			continue;
		if (c->qbytes == qbytes && memcmp(&c->params, params, sizeof(*params)) == 0 &&
			memcmp(c->quantizer, quantizer, qbytes) == 0)
		{
			c->last_used = GetCurrentTimestamp();
			return c;
		}
		encoder_drop(c);		/* the same build with another quantizer: replace it */
	}
	/* a free entry, else the least recently used */
	for (int i = 0; i < VS_ENCODERS; i++)
	{
		if (encoders[i].build_id == 0)
		{
			e = &encoders[i];
			break;
		}
		if (!e || encoders[i].last_used < e->last_used)
			e = &encoders[i];
	}
	encoder_drop(e);
	/* the engine works on a private copy: the backend may rewrite its segment meanwhile */
	e->quantizer = MemoryContextAllocHuge(cache_cxt, qbytes);
	memcpy(e->quantizer, quantizer, qbytes);
	e->qbytes = qbytes;
	e->params = *params;
	rc = vs_ivfpq_create(engine, params, e->quantizer, e->quantizer + ncent, &e->ivf);
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "encode: %s: %s", vs_status_name(rc), vs_last_error(engine));
		e->ivf = NULL;
		encoder_drop(e);
		if (rc == VS_DEVICE_ERROR)
			device_errors++;
		return NULL;
	}
	e->build_id = r->build_id ? r->build_id : 1;
	e->last_used = GetCurrentTimestamp();
	return e;
}

/*
 * Assigns and encodes the rows of a CREATE INDEX chunk (VS_OP_IVFPQ_ENCODE) with the request's
 * quantizer: never grouped.  The answer is the list numbers and the codes.
 */
static void
process_encode(VsActive *a)
{
	const VsRequest *r = &a->req;
	vs_ivfpq_params params;
	VsEncoder  *e;
	Size		code_size;
	char	   *out;
	vs_status	rc;
	char		err[256];
	VsActive   *group[1];

	memset(&params, 0, sizeof(params));
	params.dim = r->dim;
	params.nlist = r->train_lists;
	params.m = r->train_m;
	params.nbits = (int) r->train_nbits;
	params.metric = (vs_metric) r->metric;
	code_size = vs_ivfpq_code_size(&params);
	group[0] = a;

	e = encoder_get(r, &params, (const float *) ((char *) a->hdr + r->quantizer_off), err,
					sizeof(err));
	if (!e)
	{
		ereport(LOG, (errmsg("vsearch worker: %s", err)));
		fail_group(group, 1, err);
		return;
	}
	out = MemoryContextAllocHuge(result_cxt, (Size) r->nq * (sizeof(int32) + code_size));
	cancel_group = group;
	cancel_group_n = 1;
	/* the rows are read in place: a backend that scribbles on them only spoils its own index */
	rc = vs_ivfpq_encode(engine, e->ivf, (const float *) ((char *) a->hdr + r->queries_off),
						 r->nq, (int32_t *) out, (uint8_t *) out + (Size) r->nq * sizeof(int32));
	cancel_group_n = 0;
	pg_atomic_fetch_add_u64(&shared->batches, 1);
	pg_atomic_fetch_add_u64(&shared->batch_queries, r->nq);
	update_cache_stats();
	if (rc != VS_OK)
	{
		snprintf(err, sizeof(err), "encode: %s: %s", vs_status_name(rc), vs_last_error(engine));
		if (rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: %s", err)));
		pfree(out);
		if (rc == VS_DEVICE_ERROR)
			encoder_drop(e);
		fail_group(group, 1, err);
		device_errors = rc == VS_DEVICE_ERROR ? device_errors + 1 : 0;
		return;
	}
	device_errors = 0;
	a->out.owned = out;
	a->out.iov_base[0] = out;
	a->out.iov_len[0] = (uint64) r->nq * (sizeof(int32) + code_size);
	a->out.niov = 1;
	a->out.len = a->out.iov_len[0];
	a->out.pos = 0;
	a->out.produced = 0;
	stream_chunk(active_index(a));
}

/* One engine call for requests on the same index, metric and operation. */
static void
process_group(VsActive **reqs, int n)
{
	const VsRequest *r0;
	uint64		generation = 0;
	Size		nq = 0;
	uint32		kmax = 0;
	VsCacheEntry *entry;
	float	   *queries;
	VsResultBuf *buf;
	vs_status	rc;
	char		err[256];
	int			live = 0;

	/* drop requests whose backends already gave up */
	for (int r = 0; r < n; r++)
	{
		if (slot_abandoned(active_index(reqs[r])))
			finish_request(active_index(reqs[r]), VS_ANSWER_ERROR, "abandoned");
		else
			reqs[live++] = reqs[r];
	}
	n = live;
	if (n == 0)
		return;
	r0 = &reqs[0]->req;
	if (r0->op == VS_OP_IVFPQ_TRAIN)
	{
		for (int r = 0; r < n; r++)
			process_train(reqs[r]);
		return;
	}
	if (r0->op == VS_OP_IVFPQ_ENCODE)
	{
		for (int r = 0; r < n; r++)
			process_encode(reqs[r]);
		return;
	}
	for (int r = 0; r < n; r++)
	{
		generation = Max(generation, reqs[r]->req.generation);
		reqs[r]->q0 = nq;
		nq += reqs[r]->req.nq;
		kmax = Max(kmax, reqs[r]->req.k);
	}

	entry = cache_prepare(r0, generation, err, sizeof(err));
	if (!entry)
	{
		fail_group(reqs, n, err);
		return;
	}

	queries = MemoryContextAllocHuge(batch_cxt, nq * r0->dim * sizeof(float));
	for (int r = 0; r < n; r++)
		memcpy(queries + reqs[r]->q0 * r0->dim, (char *) reqs[r]->hdr + reqs[r]->req.queries_off,
			   (Size) reqs[r]->req.nq * r0->dim * sizeof(float));

	buf = MemoryContextAllocZero(result_cxt, sizeof(VsResultBuf));
	buf->refcount = 1;
	buf->is_range = r0->op == VS_OP_RANGE;
	cancel_group = reqs;
	cancel_group_n = n;
	if (!buf->is_range)
	{
		buf->ids = MemoryContextAllocHuge(result_cxt, nq * kmax * sizeof(int64));
		buf->distances = MemoryContextAllocHuge(result_cxt, nq * kmax * sizeof(float));
		buf->counts = MemoryContextAllocHuge(result_cxt, nq * sizeof(int64));
		for (;;)
		{
			if (r0->kind == VS_INDEX_IVFPQ)
				rc = vs_ivfpq_search(engine, entry->ivf, queries, nq, r0->probe_offset,
									 r0->nprobe, kmax, buf->ids, buf->distances, buf->counts);
			else
				rc = vs_knn(engine, entry->ds, queries, nq, kmax, (vs_metric) r0->metric, NULL,
							buf->ids, buf->distances, buf->counts);
			if (rc == VS_OUT_OF_MEMORY && cache_evict_one(entry))
				continue;
			break;
		}
	}
	else
	{
		for (;;)
		{
			if (r0->kind == VS_INDEX_IVFPQ)
				rc = vs_ivfpq_range(engine, entry->ivf, queries, nq, r0->probe_offset,
									r0->nprobe, (float) r0->radius, NULL, NULL, &buf->range);
			else
				rc = vs_range(engine, entry->ds, queries, nq, (float) r0->radius,
							  (vs_metric) r0->metric, NULL, NULL, NULL, &buf->range);
			if (rc != VS_OK)
				vs_range_result_free(&buf->range);
			if (rc == VS_OUT_OF_MEMORY && cache_evict_one(entry))
				continue;
			break;
		}
	}
	cancel_group_n = 0;
	pg_atomic_fetch_add_u64(&shared->batches, 1);
	pg_atomic_fetch_add_u64(&shared->batch_queries, nq);
	update_cache_stats();

	if (rc != VS_OK)
	{
		snprintf(err, sizeof(err), "%s: %s", vs_status_name(rc), vs_last_error(engine));
		if (rc != VS_CANCELLED)
			ereport(LOG, (errmsg("vsearch worker: search failed: %s", err)));
		fail_group(reqs, n, err);
		buf->is_range = false;	/* already freed */
		result_buf_release(buf);
		device_errors = rc == VS_DEVICE_ERROR ? device_errors + 1 : 0;
		return;
	}
	device_errors = 0;
	for (int r = 0; r < n; r++)
		start_answer(reqs[r], buf, kmax);
	result_buf_release(buf);
}

/* process_group, turning an ERROR into failed requests (the worker carries on). */
static void
process_group_guarded(VsActive **reqs, int n)
{
	MemoryContext old = CurrentMemoryContext;
	bool		failed = false;
	char		msg[256];

	PG_TRY();
	{
		process_group(reqs, n);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(old);
		edata = CopyErrorData();
		FlushErrorState();
		if (CurrentResourceOwner)
			load_cleanup(true);
		cancel_group_n = 0;
		strlcpy(msg, edata->message, sizeof(msg));
		ereport(LOG, (errmsg("vsearch worker: request failed: %s", msg)));
		failed = true;
	}
	PG_END_TRY();
	if (failed)
		fail_group(reqs, n, msg);
}

static void
process_batch(VsActive **list, int n)
{
	int			start = 0;

	qsort(list, n, sizeof(VsActive *), request_cmp);
	while (start < n)
	{
		int			end = start + 1;
		Size		nq = list[start]->req.nq;

		while (end < n && !is_build_op(list[start]->req.op) &&
			   request_cmp(&list[start], &list[end]) == 0 &&
			   nq + list[end]->req.nq <= (Size) vs_batch_max)
			nq += list[end++]->req.nq;
		process_group_guarded(list + start, end - start);
		MemoryContextReset(batch_cxt);
		if (device_errors >= VS_MAX_DEVICE_ERRORS)
		{
			/* a CUDA context can be left unusable; a new process gets a new one */
			for (int r = end; r < n; r++)
				finish_request(active_index(list[r]), VS_ANSWER_ERROR, "the worker is restarting");
			ereport(FATAL,
					(errmsg("vsearch worker: %d device errors in a row, restarting", device_errors)));
		}
		start = end;
		/* keep large answers moving between groups */
		pump_streams();
	}
}

/* Answers requests that arrive while the worker cannot serve. */
static void
refuse_all(VsActive **list, int n, const char *why)
{
	for (int r = 0; r < n; r++)
		finish_request(active_index(list[r]), VS_ANSWER_ERROR, why);
}

/* ---- the engine context ------------------------------------------------------------------- */

static void
engine_stop(void)
{
	encoders_expire(true);
	cache_clear();
	if (engine)
		vs_context_destroy(engine);
	engine = NULL;
	engine_on_gpu = false;
	update_cache_stats();
}

static void
engine_start(void)
{
	vs_context_options o;
	vs_context_info info;
	char		errbuf[256] = "";
	vs_status	rc;
	size_t		budget;

	engine_device = vs_worker_device;
	engine_limit_mb = vs_gpu_memory_limit_mb;
	if (engine_device == VS_WORKER_DEVICE_OFF)
	{
		set_state(VS_WORKER_DISABLED, "none (vsearch.worker_device = off)");
		return;
	}
	set_state(VS_WORKER_STARTING, "starting");
	vs_context_options_init(&o);
	o.backend = engine_device == VS_WORKER_DEVICE_GPU ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
	o.cuda_library = cuda_library;
	o.device_memory_budget = (size_t) engine_limit_mb * 1024 * 1024;
	o.cancel = engine_cancel;
	o.cancel_arg = NULL;
	rc = vs_context_create(&o, &engine, errbuf, sizeof(errbuf));
	if (rc != VS_OK || !engine)
	{
		char		device[160];

		engine = NULL;
		snprintf(device, sizeof(device), "unavailable: %s", errbuf[0] ? errbuf : vs_status_name(rc));
		ereport(LOG,
				(errmsg("vsearch worker: no %s context: %s",
						engine_device == VS_WORKER_DEVICE_GPU ? "GPU" : "CPU", errbuf),
				 errhint("Searches run on the CPU in their backends.  Set vsearch.worker_device "
						 "= cpu to have the worker serve on the CPU.")));
		set_state(VS_WORKER_UNAVAILABLE, device);
		return;
	}
	memset(&info, 0, sizeof(info));
	(void) vs_context_get_info(engine, &info);
	info.device_name[sizeof(info.device_name) - 1] = '\0';
	engine_on_gpu = info.backend == VS_BACKEND_CUDA;

	/* the cache may take 80% of the device budget; the rest is search scratch */
	budget = engine_limit_mb > 0 ? (size_t) engine_limit_mb * 1024 * 1024 :
		engine_on_gpu ? info.memory_budget : 0;
	cache_limit = engine_on_gpu ? budget / 10 * 8 : budget;
	if (cache_limit > 0)
		ereport(LOG, (errmsg("vsearch worker serving on %s (index cache limit %zu MB)",
							 info.device_name, cache_limit >> 20)));
	else
		ereport(LOG, (errmsg("vsearch worker serving on %s", info.device_name)));
	set_state(VS_WORKER_SERVING, info.device_name);
	update_cache_stats();
}

/* ---- the process -------------------------------------------------------------------------- */

static void
worker_exit(int code, Datum arg)
{
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	shared->worker_pid = 0;
	shared->worker_procno = -1;
	shared->state = VS_WORKER_STOPPED;
	shared->on_gpu = false;
	strlcpy(shared->device, "none (the worker exited)", sizeof(shared->device));
	SpinLockRelease(&shared->mutex);
	/* wake whoever waits, so they fall back at once */
	for (int i = 0; i < shared->nslots; i++)
	{
		VsSlot	   *slot = &shared->slots[i];
		VsSlotState st = ((volatile VsSlot *) slot)->state;

		if (st == VS_SLOT_SUBMITTED || st == VS_SLOT_RUNNING)
			SetLatch(vs_proc_latch(i / VS_SLOTS_PER_BACKEND));
	}
}

static void
worker_init(void)
{
	HASHCTL		ctl;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	vs_ivfpq_read_progress = heartbeat;
	BackgroundWorkerUnblockSignals();

	shared = vs_worker_shared;
	if (!shared)
		elog(FATAL, "vsearch worker: shared memory is not initialized");

	batch_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch batch", ALLOCSET_DEFAULT_SIZES);
	result_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch results", ALLOCSET_DEFAULT_SIZES);
	cache_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch cache", ALLOCSET_DEFAULT_SIZES);
	sync_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch sync", ALLOCSET_DEFAULT_SIZES);
	read_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch read", ALLOCSET_DEFAULT_SIZES);
	load_owner = ResourceOwnerCreate(NULL, "vsearch worker index read");
	CurrentResourceOwner = NULL;

	active = MemoryContextAllocZero(TopMemoryContext, sizeof(VsActive) * shared->nslots);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(dsm_handle);
	ctl.entrysize = sizeof(VsAttachment);
	attachments = hash_create("vsearch attachments", 256, &ctl, HASH_ELEM | HASH_BLOBS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(VsCacheKey);
	ctl.entrysize = sizeof(VsCacheEntry);
	cache = hash_create("vsearch cache", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	if (!pg_strong_random(&vhash_seed, sizeof(vhash_seed)))
		vhash_seed = (uint64) MyProcPid * UINT64CONST(0x9E3779B97F4A7C15) ^ (uint64) GetCurrentTimestamp();
	cuda_library = MemoryContextStrdup(TopMemoryContext,
									   psprintf("%s/vsearch_cuda.so", pkglib_path));

	on_shmem_exit(worker_exit, (Datum) 0);
	SpinLockAcquire(&shared->mutex);
	shared->worker_pid = MyProcPid;
	shared->worker_procno = VS_MY_PROCNO;
	my_gen = ++shared->worker_gen;
	shared->state = VS_WORKER_STARTING;
	SpinLockRelease(&shared->mutex);
	pg_atomic_fetch_add_u64(&shared->starts, 1);

	/* requests an earlier worker took are lost: free them (their backends fall back) */
	for (int i = 0; i < shared->nslots; i++)
	{
		VsSlot	   *slot = &shared->slots[i];
		bool		wake = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == VS_SLOT_RUNNING || slot->state == VS_SLOT_ABANDONED)
		{
			wake = slot->state == VS_SLOT_RUNNING;
			if (slot->state == VS_SLOT_ABANDONED)
				slot->handle = DSM_HANDLE_INVALID;
			slot->state = VS_SLOT_FREE;
		}
		SpinLockRelease(&slot->mutex);
		if (wake)
			SetLatch(vs_proc_latch(i / VS_SLOTS_PER_BACKEND));
	}
}

void
vs_worker_main(Datum arg)
{
	VsActive  **list;

	worker_init();
	engine_start();
	list = MemoryContextAlloc(TopMemoryContext, sizeof(VsActive *) * shared->nslots);
	/* whatever is not allocated in a named context lives for one iteration */
	MemoryContextSwitchTo(batch_cxt);

	for (;;)
	{
		bool		did = false;
		int			n;
		Size		nq = 0;
		VsWorkerState state;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (vs_worker_device != engine_device || vs_gpu_memory_limit_mb != engine_limit_mb)
			{
				ereport(LOG, (errmsg("vsearch worker: device settings changed, restarting the engine")));
				engine_stop();
				engine_start();
			}
		}
		heartbeat();
		did |= pump_streams();

		n = gather(list, 0, &nq);
		if (n > 0)
		{
			SpinLockAcquire(&shared->mutex);
			state = shared->state;
			SpinLockRelease(&shared->mutex);
			if (state != VS_WORKER_SERVING)
				refuse_all(list, n, "the worker is not serving");
			else
			{
				/* under concurrent load, wait briefly for more requests to fill the batch */
				if (vs_batch_wait_ms > 0 && last_batch_requests > 1 && nq < (Size) vs_batch_max)
				{
					TimestampTz deadline = GetCurrentTimestamp() +
						(TimestampTz) (vs_batch_wait_ms * 1000.0);

					while (nq < (Size) vs_batch_max && GetCurrentTimestamp() < deadline)
					{
						pg_usleep(20);
						n = gather(list, n, &nq);
					}
				}
				last_batch_requests = n;
				process_batch(list, n);
			}
			did = true;
		}

		sweep_attachments();
		encoders_expire(false);
		MemoryContextReset(batch_cxt);
		if (!did)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

void
vs_worker_register(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS;
	bgw.bgw_start_time = BgWorkerStart_ConsistentState;
	bgw.bgw_restart_time = 2;
	strlcpy(bgw.bgw_library_name, "vsearch", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "vs_worker_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "vsearch gpu worker", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "vsearch gpu worker", BGW_MAXLEN);
	bgw.bgw_main_arg = (Datum) 0;
	bgw.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&bgw);
}
