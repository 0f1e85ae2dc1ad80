/*
 * The GPU worker's answers, seen from a backend (worker_client.h): the stream the worker writes
 * into the segment's result area, checked against the request chunk by chunk and copied into the
 * caller's memory (kNN, a build step) or handed to the caller's consumer in place (range).  The
 * worker is not trusted: an answer that does not match its request is refused here, and the
 * caller falls back.  Apart from worker_client.c, which sends the request and waits, so that what
 * an answer may be can be read in one place.
 */
#include "postgres.h"

#include "worker_client.h"

/* Records why an answer is malformed; returns false for the caller to pass on. */
bool
vs_sink_bad(VsSink *sink, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	vsnprintf(sink->bad, sizeof(sink->bad), fmt, args);
	va_end(args);
	return false;
}

void
vs_sink_add(VsSink *sink, void *dst, uint64 len)
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
		return vs_sink_bad(sink, "range block at %llu+%llu does not follow %llu (of %llu)",
						(unsigned long long) off, (unsigned long long) len,
						(unsigned long long) sink->pos, (unsigned long long) sink->stream_len);
	if (b->q0 != sink->next_q || b->nq < 1 || b->nq > sink->nq - b->q0 ||
		(b->more != 0 && b->more != 1) || b->count < 0 ||
		(uint64) b->count > len / sizeof(int64) ||
		len != vs_range_block_bytes((uint64) b->nq, (uint64) b->count))
		return vs_sink_bad(sink, "malformed range block (queries " INT64_FORMAT "+" INT64_FORMAT
						" after %d, " INT64_FORMAT " matches in %llu bytes)",
						b->q0, b->nq, sink->next_q, b->count, (unsigned long long) len);
	offsets = (const int64 *) (b + 1);
	if (offsets[0] != 0 || offsets[b->nq] != b->count)
		return vs_sink_bad(sink, "inconsistent range block");
	for (int64 i = 0; i < b->nq; i++)
		if (offsets[i + 1] < offsets[i])
			return vs_sink_bad(sink, "inconsistent range block");
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
bool
vs_sink_consume(VsSink *sink, const char *data, uint64 off, uint64 len)
{
	if (sink->op == VS_OP_RANGE)
		return sink_range_block(sink, data, off, len);
	if (off != sink->pos || len > sink->stream_len || off > sink->stream_len - len)
		return vs_sink_bad(sink, "answer chunk at %llu+%llu does not follow %llu (of %llu)",
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
			return vs_sink_bad(sink, "answer longer than expected");
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
bool
vs_sink_finish(VsSink *sink)
{
	uint64		expected = 0;

	if (sink->op == VS_OP_RANGE)
	{
		if (sink->pos != sink->stream_len || sink->next_q != sink->nq || sink->split)
			return vs_sink_bad(sink, "range answer ended after %llu of %llu bytes, at query %d of %d",
							(unsigned long long) sink->pos,
							(unsigned long long) sink->stream_len, sink->next_q, sink->nq);
		return true;
	}
	for (int r = 0; r < sink->nregions; r++)
		expected += sink->regions[r].len;
	if (sink->pos != sink->stream_len || sink->pos != expected)
		return vs_sink_bad(sink, "answer ended after %llu of %llu bytes, expected %llu",
						(unsigned long long) sink->pos, (unsigned long long) sink->stream_len,
						(unsigned long long) expected);
	return true;
}
