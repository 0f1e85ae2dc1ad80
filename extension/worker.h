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

#endif							/* VSEARCH_WORKER_H */
