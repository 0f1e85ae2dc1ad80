/*
 * The backend side of the GPU worker protocol (worker.h; docs/WORKER.md), shared by its files:
 * worker_client.c (the session's segment and slots; one request sent and waited for),
 * worker_client_sink.c (the answer stream checked and copied into caller memory) and
 * worker_client_calls.c (the kNN, range and build entry points, the fallback, the planner's cost).
 */
#ifndef VSEARCH_WORKER_CLIENT_H
#define VSEARCH_WORKER_CLIENT_H

#include "worker.h"
#include "worker_internal.h"

/* Segments at most this large are kept for the next request. */
#define VS_KEEP_SEGMENT_MAX		((Size) 8 * 1024 * 1024)
/* Largest result area (an answer larger than this streams in several chunks). */
#define VS_MAX_AREA				((Size) 4 * 1024 * 1024)

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

/* The answer stream (worker_client_sink.c); those returning bool return false with sink->bad. */
extern bool vs_sink_bad(VsSink *sink, const char *fmt,...) pg_attribute_printf(2, 3);
extern void vs_sink_add(VsSink *sink, void *dst, uint64 len);
extern bool vs_sink_consume(VsSink *sink, const char *data, uint64 off, uint64 len);
extern bool vs_sink_finish(VsSink *sink);

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

/* Bytes of a request's queries (worker_internal.h, VsQueryFormat). */
extern Size vs_request_query_bytes(const VsIndexRef *ref, const VsQueries *queries);

/*
 * Sends a request and waits for the answer, writing it through the sink.  Returns true on
 * success; false with a reason when the worker could not answer (the caller falls back).
 */
extern bool vs_worker_call(const VsIndexRef *ref, const VsCall *call, const VsQueries *queries,
						   VsSink *sink, char *reason, Size reasonlen);

#endif							/* VSEARCH_WORKER_CLIENT_H */
