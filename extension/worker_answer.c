/*
 * The GPU worker's answers (worker_proc.h): each request's answer is a byte stream written into its
 * segment's result area one chunk at a time.  The worker writes a chunk only when the backend has
 * consumed the previous one (on a later pass of its loop), so it never waits for a backend, and a
 * request ends DONE (answer complete or an error status), or FREE when its backend gave up.
 */
#include "postgres.h"

#include "storage/latch.h"
#include "utils/memutils.h"

#include "worker_proc.h"

static int	nstreaming;			/* requests with more chunks to send */

void
vsw_result_buf_release(VsResultBuf *buf)
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

void
vsw_release_active(VsActive *a)
{
	if (a->streaming)
		nstreaming--;
	vsw_result_buf_release(a->out.buf);
	if (a->out.owned)
		pfree(a->out.owned);
	memset(a, 0, sizeof(*a));
}

/* Whether the backend of request_id still waits in slot (it has not given up). */
static bool
slot_awaited(VsSlot *slot, uint64 request_id)
{
	bool		awaited;

	SpinLockAcquire(&slot->mutex);
	awaited = slot->request_id == request_id && slot->state == VS_SLOT_RUNNING;
	SpinLockRelease(&slot->mutex);
	return awaited;
}

/*
 * Ends a request: writes the status (unless OK, which the last chunk carried), marks the slot DONE
 * and wakes its backend; a slot the backend abandoned becomes free instead.  The request is
 * counted in vsearch_stat first, so that a backend that reads the counters after its answer
 * finds it there.
 */
void
vsw_finish_request(int i, VsAnswerStatus status, const char *msg)
{
	VsActive   *a = &vsw_active[i];
	VsSlot	   *slot = &vsw_shared->slots[i];
	bool		wake = false;

	if (a->hdr && status != VS_ANSWER_OK)
	{
		a->hdr->status = status;
		strlcpy(a->hdr->errmsg, msg ? msg : "", sizeof(a->hdr->errmsg));
	}
	if (status == VS_ANSWER_OK)
		pg_atomic_fetch_add_u64(&vsw_shared->requests, 1);
	else if (slot_awaited(slot, a->request_id))
		pg_atomic_fetch_add_u64(&vsw_shared->errors, 1);
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
	vsw_release_active(a);
}

/* Drops a request without writing to its segment (it is not a request we can trust). */
void
vsw_discard_request(int i)
{
	VsActive   *a = &vsw_active[i];

	a->hdr = NULL;
	SpinLockAcquire(&vsw_shared->slots[i].mutex);
	if (vsw_shared->slots[i].request_id == a->request_id &&
		(vsw_shared->slots[i].state == VS_SLOT_RUNNING ||
		 vsw_shared->slots[i].state == VS_SLOT_ABANDONED))
	{
		if (vsw_shared->slots[i].state == VS_SLOT_ABANDONED)
			vsw_shared->slots[i].handle = DSM_HANDLE_INVALID;
		vsw_shared->slots[i].state = VS_SLOT_FREE;
	}
	SpinLockRelease(&vsw_shared->slots[i].mutex);
	SetLatch(vs_proc_latch(a->procno));
	vsw_release_active(a);
}

/*
 * The next block of a range answer (worker_internal.h, VsRangeBlock) from the cursor (*q, *done:
 * the next query, its matches already sent), at most cap bytes: whole queries while they fit,
 * then as many matches of the next one as fit.  Written to dst unless it is NULL; returns its
 * length and advances the cursor.  A block always makes progress (cap >= VS_MIN_AREA).
 */
static uint64
range_block(const VsStream *o, const VsResultBuf *buf, uint32 *q, int64 *done, char *dst,
			uint64 cap)
{
	const int64 *off = o->range_offsets;
	uint32		nq = 0;
	int64		n = 0;
	bool		more = false;
	int64		first = off[*q] + *done;

	while (*q + nq < o->range_nq)
	{
		int64		left = off[*q + nq + 1] - off[*q + nq] - (nq == 0 ? *done : 0);
		uint64		used = vs_range_block_bytes(nq + 1, n);
		int64		room;

		if (used > cap)
			break;
		room = (int64) ((cap - used) / (sizeof(int64) + sizeof(float)));
		/* the distances' padding may take 4 bytes more */
		while (room > 0 && vs_range_block_bytes(nq + 1, n + room) > cap)
			room--;
		if (left <= room)
		{
			n += left;
			nq++;
			continue;
		}
		if (room == 0 && nq > 0)
			break;
		n += room;
		nq++;
		more = true;
		break;
	}
	Assert(nq > 0 && vs_range_block_bytes(nq, n) <= cap);
	if (dst != NULL)
	{
		VsRangeBlock *b = (VsRangeBlock *) dst;
		int64	   *offsets = (int64 *) (b + 1);
		int64	   *ids = offsets + nq + 1;
		float	   *dists = (float *) (ids + n);

		b->q0 = *q;
		b->nq = nq;
		b->more = more;
		b->count = n;
		offsets[0] = 0;
		for (uint32 i = 0; i < nq; i++)
			offsets[i + 1] = Min(off[*q + i + 1] - first, n);
		memcpy(ids, buf->range.ids + first, n * sizeof(int64));
		memcpy(dists, buf->range.distances + first, n * sizeof(float));
		memset((char *) (dists + n), 0, vs_range_block_bytes(nq, n) -
			   ((char *) (dists + n) - dst));
	}
	if (more)
	{
		*done = (nq == 1 ? *done : 0) + (first + n) - Max(off[*q + nq - 1], first);
		*q += nq - 1;
	}
	else
	{
		*done = 0;
		*q += nq;
	}
	return vs_range_block_bytes(nq, n);
}

/* Writes the next chunk of a request's answer; the last one completes the request. */
static void
stream_chunk(int i)
{
	VsActive   *a = &vsw_active[i];
	VsStream   *o = &a->out;
	VsRequest  *hdr = a->hdr;
	char	   *area = (char *) hdr + a->req.area_off;
	uint64		n;

	if (o->range_offsets != NULL)
		n = range_block(o, o->buf, &o->range_q, &o->range_done, area, a->req.area_len);
	else
	{
		uint64		start = 0,
					done = 0;

		n = Min(a->req.area_len, o->len - o->pos);
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
	}
	hdr->chunk_off = o->pos;
	hdr->chunk_len = n;
	hdr->stream_len = o->len;
	o->pos += n;
	if (o->pos == o->len)
	{
		hdr->taken_ns = a->taken_ns;
		hdr->engine_start_ns = a->engine_start_ns;
		hdr->engine_end_ns = a->engine_end_ns;
		hdr->answered_ns = vs_clock_ns();
		hdr->status = VS_ANSWER_OK;
	}
	pg_write_barrier();
	pg_atomic_write_u64(&hdr->produced, ++o->produced);
	if (o->pos == o->len)
		vsw_finish_request(i, VS_ANSWER_OK, NULL);
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
bool
vsw_pump_streams(void)
{
	bool		did = false;

	if (nstreaming == 0)
		return false;
	for (int i = 0; i < vsw_shared->nslots && nstreaming > 0; i++)
	{
		VsActive   *a = &vsw_active[i];

		if (!a->active || !a->streaming)
			continue;
		if (vsw_slot_abandoned(i))
		{
			vsw_finish_request(i, VS_ANSWER_ERROR, "abandoned");
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

void
vsw_fail_group(VsActive **reqs, int n, const char *msg)
{
	for (int r = 0; r < n; r++)
		if (reqs[r]->active && !reqs[r]->streaming && reqs[r]->out.produced == 0)
			vsw_finish_request(vsw_active_index(reqs[r]), VS_ANSWER_ERROR, msg);
}

/* Builds the answer stream of request a from the group's result and starts sending it. */
void
vsw_answer_search(VsActive *a, VsResultBuf *buf, uint32 kmax)
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

			o->owned = MemoryContextAllocHuge(vsw_result_cxt, len);
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
		uint32		q = 0;
		int64		done = 0;

		/* the blocks' total length: the same layout, not written */
		o->range_offsets = buf->range.offsets + a->q0;
		o->range_nq = nq;
		o->len = 0;
		while (q < nq)
			o->len += range_block(o, buf, &q, &done, NULL, a->req.area_len);
	}
	if (!buf->is_range)
	{
		o->len = 0;
		for (int v = 0; v < o->niov; v++)
			o->len += o->iov_len[v];
	}
	o->pos = 0;
	o->produced = 0;
	stream_chunk(vsw_active_index(a));
}

void
vsw_answer_bytes(VsActive *a, char *bytes, Size len)
{
	a->out.owned = bytes;
	a->out.iov_base[0] = bytes;
	a->out.iov_len[0] = len;
	a->out.niov = 1;
	a->out.len = len;
	a->out.pos = 0;
	a->out.produced = 0;
	stream_chunk(vsw_active_index(a));
}
