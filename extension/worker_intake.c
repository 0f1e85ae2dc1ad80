/*
 * Taking requests (worker_proc.h): the worker maps each submitted request's segment, copies its
 * header once and checks everything in it before using it: the header, the segment layout and the
 * common limits here, the parameter block and what else is the index kind's own by the kind
 * (indexkind.h, check_request).  A malformed request gets an INVALID answer with the reason (and a
 * WARNING in the log); nothing in a segment can make the worker read or write outside it.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/dsm.h"
#include "utils/hsearch.h"

#include "indexkind.h"
#include "textdist.h"
#include "vector.h"
#include "worker_proc.h"

/* A mapped request segment, kept for the backend's next request. */
typedef struct VsAttachment
{
	dsm_handle	handle;
	dsm_segment *seg;
	int			slot;
} VsAttachment;

static HTAB *attachments;

void
vsw_intake_init(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(dsm_handle);
	ctl.entrysize = sizeof(VsAttachment);
	attachments = hash_create("vsearch attachments", 256, &ctl, HASH_ELEM | HASH_BLOBS);
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
void
vsw_sweep_attachments(void)
{
	HASH_SEQ_STATUS it;
	VsAttachment *att;

	hash_seq_init(&it, attachments);
	while ((att = hash_seq_search(&it)) != NULL)
	{
		VsSlot	   *slot = &vsw_shared->slots[att->slot];
		VsActive   *a = &vsw_active[att->slot];

		if (a->active && a->seg == att->seg)
			continue;
		if (slot->handle == att->handle)
			continue;
		dsm_detach(att->seg);
		hash_search(attachments, &att->handle, HASH_REMOVE, NULL);
	}
}

/* ---- validation ---------------------------------------------------------------------------- */

/* Does [off, off + len) lie within the segment, after the header, aligned to align? */
static bool
inside(uint64 off, uint64 len, Size seg_len, Size align)
{
	return off >= sizeof(VsRequest) && off % align == 0 && off <= seg_len && len <= seg_len - off;
}

static bool
disjoint(uint64 a_off, uint64 a_len, uint64 b_off, uint64 b_len)
{
	return a_off >= b_off + b_len || b_off >= a_off + a_len;
}

/*
 * The bytes a request's queries must take: vectors nq x dim floats; strings their offsets and at
 * least no characters (the characters' count is offsets[nq], checked when they are copied,
 * worker_batch.c).  0 for a malformed format.
 */
static uint64
min_query_bytes(const VsRequest *r)
{
	if (r->qformat == VS_QUERIES_VECTORS)
		return (uint64) r->nq * r->dim * sizeof(float);
	if (r->qformat == VS_QUERIES_STRINGS)
		return ((uint64) r->nq + 1) * sizeof(uint64);
	return 0;
}

static bool
validate_request(const VsRequest *r, Size seg_len, char *why, Size whylen)
{
	const VsIndexKind *kind = vs_kind_by_id(r->kind);
	uint64		qbytes = r->queries_len;
	bool		strings = r->qformat == VS_QUERIES_STRINGS;

	if (r->protocol != VS_REQUEST_PROTOCOL)
		snprintf(why, whylen, "protocol %u, the worker speaks %u", r->protocol, VS_REQUEST_PROTOCOL);
	else if (r->op != VS_OP_KNN && r->op != VS_OP_RANGE && r->op != VS_OP_BUILD)
		snprintf(why, whylen, "unknown operation %u", r->op);
	else if (kind == NULL)
		snprintf(why, whylen, "unknown index kind %u", r->kind);
	else if (r->op == VS_OP_BUILD && kind->build_step == NULL)
		snprintf(why, whylen, "%s has no build steps", kind->name);
	else if (r->qformat != VS_QUERIES_VECTORS && !strings)
		snprintf(why, whylen, "query format %u is not valid here", r->qformat);
	else if (strings ? r->metric != VS_METRIC_LEVENSHTEIN : r->metric >= VS_METRIC_COUNT)
		snprintf(why, whylen, "metric %u is not valid for %s queries", r->metric,
				 strings ? "string" : "vector");
	else if (strings ? r->dim != 0 : (r->dim < 1 || r->dim > VECTOR_MAX_DIM))
		snprintf(why, whylen, "dimension %u out of range", r->dim);
	else if (r->nq < 1 || r->nq > VS_MAX_REQUEST_QUERIES)
		snprintf(why, whylen, "%u queries out of range", r->nq);
	else if (r->op == VS_OP_KNN && (r->k < 1 || r->k > kind->max_k))
		snprintf(why, whylen, "k = %u out of range for %s", r->k, kind->name);
	else if (r->op == VS_OP_KNN && (uint64) r->nq * r->k > VS_MAX_KNN_RESULTS)
		snprintf(why, whylen, "%u queries x k = %u is too many results", r->nq, r->k);
	else if (r->op == VS_OP_RANGE && isnan(r->radius))
		snprintf(why, whylen, "radius is NaN");
	else if (r->op != VS_OP_BUILD && r->relpersistence != RELPERSISTENCE_PERMANENT &&
			 r->relpersistence != RELPERSISTENCE_UNLOGGED)
		snprintf(why, whylen, "relpersistence '%c' cannot be served", r->relpersistence);
	else if (r->op != VS_OP_BUILD && (r->payload_off != 0 || r->payload_len != 0))
		snprintf(why, whylen, "a search carries no payload");
	else if (strings ? (qbytes < min_query_bytes(r) ||
						(qbytes - min_query_bytes(r)) % sizeof(uint32) != 0)
			 : qbytes != min_query_bytes(r))
		snprintf(why, whylen, "%llu bytes of queries do not fit %u queries",
				 (unsigned long long) qbytes, r->nq);
	else if (!inside(r->queries_off, qbytes, seg_len, strings ? sizeof(uint64) : sizeof(float)))
		snprintf(why, whylen, "queries lie outside the segment");
	else if (!inside(r->area_off, r->area_len, seg_len, MAXIMUM_ALIGNOF) ||
			 r->area_len < VS_MIN_AREA)
		snprintf(why, whylen, "result area lies outside the segment");
	else if (!disjoint(r->area_off, r->area_len, r->queries_off, qbytes))
		snprintf(why, whylen, "result area overlaps the queries");
	else if (r->payload_len > 0 &&
			 (!inside(r->payload_off, r->payload_len, seg_len, sizeof(float)) ||
			  !disjoint(r->payload_off, r->payload_len, r->queries_off, qbytes) ||
			  !disjoint(r->payload_off, r->payload_len, r->area_off, r->area_len)))
		snprintf(why, whylen, "payload lies outside the segment or overlaps another part");
	else
		return kind->check_request(r, why, whylen);
	return false;
}

/* ---- taking requests ---------------------------------------------------------------------- */

/* Takes the request in slot i if one was submitted; true when it is valid and ours to answer. */
static bool
take_request(int i)
{
	VsSlot	   *slot = &vsw_shared->slots[i];
	VsActive   *a = &vsw_active[i];
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
	slot->worker_gen = vsw_gen;
	rid = slot->request_id;
	h = slot->handle;
	procno = slot->procno;
	SpinLockRelease(&slot->mutex);

	if (a->active)				/* cannot happen: the slot was not RUNNING for us */
		vsw_release_active(a);
	a->active = true;
	a->taken_ns = vs_clock_ns();
	a->request_id = rid;
	a->procno = procno;
	if (procno < 0 || procno >= MaxBackends || procno * VS_SLOTS_PER_BACKEND > i ||
		i >= (procno + 1) * VS_SLOTS_PER_BACKEND)
	{
		a->procno = i / VS_SLOTS_PER_BACKEND;
		vsw_discard_request(i);
		return false;
	}
	seg = attach_segment(i, h);
	if (!seg || dsm_segment_map_length(seg) < sizeof(VsRequest))
	{
		vsw_discard_request(i);
		return false;
	}
	a->seg = seg;
	memcpy(&a->req, dsm_segment_address(seg), sizeof(VsRequest));
	if (a->req.magic != VS_REQUEST_MAGIC || a->req.request_id != rid)
	{
		vsw_discard_request(i);
		return false;
	}
	a->hdr = dsm_segment_address(seg);
	if (!validate_request(&a->req, dsm_segment_map_length(seg), why, sizeof(why)))
	{
		elog(WARNING, "vsearch worker: malformed request from process %d: %s",
			 (int) (rid >> 32), why);
		vsw_finish_request(i, VS_ANSWER_INVALID, why);
		return false;
	}
	return true;
}

/* Takes every submitted request, appending to list; returns the new count. */
int
vsw_gather(VsActive **list, int n, Size *queries)
{
	for (int i = 0; i < vsw_shared->nslots; i++)
	{
		VsSlotState st = ((volatile VsSlot *) &vsw_shared->slots[i])->state;

		if (st == VS_SLOT_SUBMITTED)
		{
			if (take_request(i))
			{
				list[n++] = &vsw_active[i];
				*queries += vsw_active[i].req.nq;
			}
		}
		else if (st == VS_SLOT_ABANDONED && !vsw_active[i].active)
		{
			/* left over (e.g. from an earlier worker): nobody works on it */
			SpinLockAcquire(&vsw_shared->slots[i].mutex);
			if (vsw_shared->slots[i].state == VS_SLOT_ABANDONED)
			{
				vsw_shared->slots[i].state = VS_SLOT_FREE;
				vsw_shared->slots[i].handle = DSM_HANDLE_INVALID;
			}
			SpinLockRelease(&vsw_shared->slots[i].mutex);
		}
	}
	return n;
}

/* ---- grouping ------------------------------------------------------------------------------- */

/*
 * Requests one engine call can answer sort next to each other: the same operation, index (kind and
 * locator), dimension, metric, parameter block and, for range, radius.  kNN requests of a group
 * may differ in k (the call runs with the largest; results are sorted, so a prefix is the answer
 * for a smaller k).
 */
static int
cmp_requests(const VsRequest *a, const VsRequest *b)
{
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
	if (a->qformat != b->qformat)
		return a->qformat < b->qformat ? -1 : 1;
	if (a->op == VS_OP_RANGE && a->radius != b->radius)
		return a->radius < b->radius ? -1 : 1;
	return memcmp(&a->params, &b->params, sizeof(VsKindParams));
}

int
vsw_request_cmp(const void *pa, const void *pb)
{
	return cmp_requests(&(*(VsActive *const *) pa)->req, &(*(VsActive *const *) pb)->req);
}

bool
vsw_same_group(const VsRequest *a, const VsRequest *b)
{
	return a->op != VS_OP_BUILD && cmp_requests(a, b) == 0;
}
