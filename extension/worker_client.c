/*
 * Backend side of the GPU worker protocol.  Until the worker exists every request runs on the CPU
 * in the backend (search.c), which is also what a server without the worker does.
 */
#include "postgres.h"

#include "worker.h"

bool
vs_worker_knn(const VsIndexRef *ref, const float *queries, int nq, int k,
			  int64 *ids, float *distances, int64 *counts)
{
	return false;
}

bool
vs_worker_range(const VsIndexRef *ref, const float *queries, int nq, double radius,
				VsRangeResult *out)
{
	return false;
}
