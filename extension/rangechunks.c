/*
 * Range results in chunks (search.h, VsRangeChunk): the bound on a chunk, one engine call's
 * result handed over in chunks, and chunks built a match at a time.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "search.h"

int64
vs_range_chunk_matches(void)
{
	return Max((int64) work_mem * 1024 / 64, 1024);
}

void
vs_range_deliver(const VsRangeResult *res, int q0, VsRangeConsumer consume, void *arg)
{
	int64		cap = vs_range_chunk_matches();
	int64	   *offsets;
	int			q = 0;
	int64		done = 0;		/* matches of query q already delivered */

	if (res->nq <= 0 || res->total <= 0)
		return;
	offsets = palloc(sizeof(int64) * ((Size) res->nq + 1));
	while (q < res->nq)
	{
		VsRangeChunk chunk;
		int64		start = res->offsets[q] + done;
		int64		n = 0;
		int			nq = 0;

		/* whole queries while they fit, then as much of the next one as fits */
		offsets[0] = 0;
		chunk.more = false;
		while (q + nq < res->nq)
		{
			int64		left = res->offsets[q + nq + 1] - res->offsets[q + nq] - (nq == 0 ? done : 0);

			if (n + left <= cap)
			{
				n += left;
				offsets[++nq] = n;
				continue;
			}
			offsets[++nq] = cap;
			n = cap;
			chunk.more = true;
			break;
		}
		chunk.q0 = q0 + q;
		chunk.nq = nq;
		chunk.offsets = offsets;
		chunk.ids = res->ids + start;
		chunk.distances = res->distances + start;
		if (n > 0)
			consume(arg, &chunk);
		if (chunk.more)
		{
			done = (nq == 1 ? done : 0) + offsets[nq] - offsets[nq - 1];
			q += nq - 1;
		}
		else
		{
			done = 0;
			q += nq;
		}
		CHECK_FOR_INTERRUPTS();
	}
	pfree(offsets);
}

void
vs_range_stream_begin(VsRangeStream *s, int nq, VsRangeConsumer consume, void *arg)
{
	memset(s, 0, sizeof(*s));
	s->consume = consume;
	s->arg = arg;
	s->nq = nq;
	s->cap = vs_range_chunk_matches();
	s->offsets = palloc(sizeof(int64) * ((Size) Max(nq, 0) + 1));
	s->offsets[0] = 0;
	s->ids = palloc_extended(sizeof(int64) * s->cap, MCXT_ALLOC_HUGE);
	s->distances = palloc_extended(sizeof(float) * s->cap, MCXT_ALLOC_HUGE);
}

/* Sends the pending chunk: queries q0 .. q, the last one going on when more. */
static void
stream_flush(VsRangeStream *s, bool more)
{
	VsRangeChunk chunk;

	s->offsets[s->q - s->q0 + 1] = s->n;
	chunk.q0 = s->q0;
	chunk.nq = s->q - s->q0 + 1;
	chunk.more = more;
	chunk.offsets = s->offsets;
	chunk.ids = s->ids;
	chunk.distances = s->distances;
	if (s->n > 0)
		s->consume(s->arg, &chunk);
	s->q0 = s->q;
	s->n = 0;
	s->offsets[0] = 0;
}

void
vs_range_stream_add(VsRangeStream *s, int q, int64 id, float distance)
{
	Assert(q >= s->q && q < s->nq);
	if (s->n == s->cap)
	{
		/* a full chunk: its last query goes on only if this match is that query's */
		if (q == s->q)
			stream_flush(s, true);
		else
		{
			stream_flush(s, false);
			s->q0 = s->q = q;
		}
	}
	while (s->q < q)
		s->offsets[++s->q - s->q0] = s->n;
	s->ids[s->n] = id;
	s->distances[s->n] = distance;
	s->n++;
}

void
vs_range_stream_end(VsRangeStream *s)
{
	if (s->n > 0)
		stream_flush(s, false);
	pfree(s->offsets);
	pfree(s->ids);
	pfree(s->distances);
}
