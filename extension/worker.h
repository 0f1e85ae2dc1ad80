/*
 * The GPU worker, seen from a backend: submit a search request and wait for its answer.
 *
 * Each function returns true with the answer filled in, or false when the request should run on
 * the CPU in this backend instead (no worker, no GPU, the worker failed, vsearch.device = cpu); the
 * fallback is counted in vsearch_stat.  With vsearch.device = gpu a failure is an ERROR instead.
 * Query cancel and statement_timeout interrupt the wait.
 */
#ifndef VSEARCH_WORKER_H
#define VSEARCH_WORKER_H

#include "search.h"

extern bool vs_worker_knn(const VsIndexRef *ref, const float *queries, int nq, int k,
						  int64 *ids, float *distances, int64 *counts);
extern bool vs_worker_range(const VsIndexRef *ref, const float *queries, int nq, double radius,
							VsRangeResult *out);

/*
 * vs_ivfpq candidates (ivfpqscan.c): the engine's vs_ivfpq_search / vs_ivfpq_range on the worker's
 * copy of the index, over the probe window [probe_offset, probe_offset + nprobe) of list ranks.
 * Estimated distances; the caller re-ranks exactly.  Same return convention as above.
 */
extern bool vs_worker_ivfpq_knn(const VsIndexRef *ref, const float *queries, int nq,
								int probe_offset, int nprobe, int k, int64 *ids,
								float *distances, int64 *counts);
extern bool vs_worker_ivfpq_range(const VsIndexRef *ref, const float *queries, int nq,
								  int probe_offset, int nprobe, float radius,
								  VsRangeResult *out);

/* Trains a vs_ivfpq quantizer in the worker (CREATE INDEX); false: train in the backend. */
extern bool vs_worker_ivfpq_train(const VsIndexRef *ref, int lists, int m, int nbits,
								  uint64 seed, const float *sample, int64 n, float *centroids,
								  float *codebooks);

/*
 * Assigns and encodes n rows of a vs_ivfpq build in the worker (CREATE INDEX): out_lists[n] and
 * out_codes[n x code_size]; false: encode in the backend.  build_id names the build (the worker
 * keeps its engine object for the next chunks); vs_worker_ivfpq_encode_end after the last chunk.
 */
extern bool vs_worker_ivfpq_encode(const VsIndexRef *ref, int lists, int m, int nbits,
								   uint64 build_id, const float *centroids,
								   const float *codebooks, const float *rows, int n,
								   int32 *out_lists, uint8 *out_codes);
extern void vs_worker_ivfpq_encode_end(void);

#endif							/* VSEARCH_WORKER_H */
