/*
 * The GPU worker, seen from a backend: submit a request for an index and wait for its answer.
 *
 * Each function returns true with the answer filled in, or false when the request should run on
 * the CPU in this backend instead (no worker, no GPU, the worker failed, vsearch.device = cpu); the
 * fallback is counted in vsearch_stat.  With vsearch.device = gpu a failure is an ERROR instead.
 * Query cancel and statement_timeout interrupt the wait.  A request names its index kind and
 * carries the kind's parameter block (indexkind.h), which the worker has that kind check, and its
 * queries: vectors, or the strings of a text index (search.h, VsQueries).
 */
#ifndef VSEARCH_WORKER_H
#define VSEARCH_WORKER_H

#include "search.h"

extern bool vs_worker_knn(const VsIndexRef *ref, const VsKindParams *params,
						  const VsQueries *queries, int k, int64 *ids, float *distances,
						  int64 *counts);
/* The same, a large batch in several requests with progress called between them
 * (vs_search_knn_overlapped). */
extern bool vs_worker_knn_overlapped(const VsIndexRef *ref, const VsKindParams *params,
									 const VsQueries *queries, int k, int64 *ids,
									 float *distances, int64 *counts, VsKnnProgress progress,
									 void *arg);
/*
 * Range: the answer goes to consume in chunks as it streams in (search.h, VsRangeChunk).  When it
 * returns false, *from queries were answered and handed on whole, and the caller searches the
 * rest; a failure in the middle of a query's matches is an ERROR.
 */
extern bool vs_worker_range(const VsIndexRef *ref, const VsKindParams *params,
							const VsQueries *queries, double radius, VsRangeConsumer consume,
							void *arg, int *from);

/* Consecutive bytes of caller memory (parts of a build request's payload or answer). */
typedef struct VsWorkerBuffer
{
	void	   *data;
	Size		len;
} VsWorkerBuffer;

/*
 * A build step of the index's kind run in the worker (CREATE INDEX): the rows (vectors of the
 * ref's dimension, or strings: VsQueries) and the payload parts go through this backend's DSM
 * segment, the kind's answer comes back into the answer parts (their lengths must add up to the
 * answer's).  keep_segment keeps a segment larger than usual for the build's next step;
 * vs_worker_build_end after the last one drops it.
 */
extern bool vs_worker_build(const VsIndexRef *ref, const VsKindParams *params,
							const VsQueries *rows, const VsWorkerBuffer *payload, int npayload,
							const VsWorkerBuffer *answer, int nanswer, bool keep_segment);
extern void vs_worker_build_end(void);

/*
 * For a caller that finds a request too large for the worker before sending it: ERROR under
 * vsearch.device = gpu, else counts a fallback and returns false.
 */
extern bool vs_worker_decline(const char *reason);

/*
 * Bytes written over a request's header after the backend filled it in, before it is submitted
 * (vsearch_worker_probe): offset + len lie within the fields the backend writes
 * (vs_request_patchable_bytes()).
 */
typedef struct VsRequestPatch
{
	uint32		offset;
	uint32		len;
	const char *bytes;
} VsRequestPatch;

/* Bytes of a request's header that a patch may overwrite: those the backend writes. */
extern Size vs_request_patchable_bytes(void);

/*
 * Sends one kNN request with the given kind id and raw parameter block for an index's reference,
 * its header patched when patch is not NULL (the test entry point vsearch_worker_probe): true if
 * the worker answered, false if it refused or failed (with vsearch.device = gpu, an ERROR with
 * its reason).
 */
extern bool vs_worker_raw_knn(const VsIndexRef *ref, const VsKindParams *params,
							  const VsRequestPatch *patch, const float *query, int k, int64 *ids,
							  float *distances, int64 *counts);

#endif							/* VSEARCH_WORKER_H */
