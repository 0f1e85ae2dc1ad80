/*
 * Search execution for vsearch indexes: the one place index scans and batch functions ask for kNN
 * and range results.  A request runs in the GPU worker when one serves (worker.h) and otherwise in
 * this backend on the engine's CPU backend; both read the same index pages and return the same
 * answer.
 *
 * Rows are named by int64 ids that encode heap item pointers (vs_tid_to_id), so results need no
 * translation between the worker and the backend.
 */
#ifndef VSEARCH_SEARCH_H
#define VSEARCH_SEARCH_H

#include "postgres.h"

#include "storage/itemptr.h"
#include "utils/rel.h"
#include "vsearch/distance.h"

#include "pgcompat.h"

/* Index access methods whose vector sets the search layer can read. */
typedef enum VsIndexKind
{
	VS_INDEX_FLAT = 1
} VsIndexKind;

/*
 * Everything needed to find and read an index's vectors without a relcache entry (the worker
 * serves every database of the cluster, but is connected to none of them).  Filled from the
 * metapage when a scan begins; `generation` is the metapage's change counter at that moment, so a
 * cached copy at least that new is good enough for the scan.
 */
typedef struct VsIndexRef
{
	Oid			dbid;
	Oid			indexrelid;
	VsRelFileLocator locator;	/* where the pages are */
	char		relpersistence;
	VsIndexKind kind;
	vs_metric	metric;
	uint32		dim;
	uint64		generation;
} VsIndexRef;

/* Range results: CSR in the caller's memory context. */
typedef struct VsRangeResult
{
	int			nq;
	int64		total;
	int64	   *offsets;		/* nq + 1 */
	int64	   *ids;			/* total */
	float	   *distances;		/* total */
} VsRangeResult;

static inline int64
vs_tid_to_id(ItemPointer tid)
{
	return ((int64) ItemPointerGetBlockNumberNoCheck(tid) << 16) |
		ItemPointerGetOffsetNumberNoCheck(tid);
}

static inline void
vs_id_to_tid(int64 id, ItemPointer tid)
{
	ItemPointerSet(tid, (BlockNumber) (id >> 16), (OffsetNumber) (id & 0xFFFF));
}

/* Fills ref from an open, locked index (reads its metapage). */
extern void vs_index_ref(Relation index, VsIndexRef *ref);

/*
 * Reads every vector of the index described by ref through the buffer manager, without a
 * relcache entry, handing them to consume in chunks.  The caller must make sure the relation
 * cannot be dropped meanwhile (a backend holds a lock on it while its request is served).
 */
typedef void (*VsVectorConsumer) (void *arg, const float *vectors, const int64 *ids, size_t n);
extern void vs_index_read_vectors(const VsIndexRef *ref, VsVectorConsumer consume, void *arg);

/* k nearest rows to each of nq queries: ids/distances nq x k, counts nq (rows found <= k). */
extern void vs_search_knn(const VsIndexRef *ref, const float *queries, int nq, int k,
						  int64 *ids, float *distances, int64 *counts);

/* Every row within radius of each query. */
extern void vs_search_range(const VsIndexRef *ref, const float *queries, int nq, double radius,
							VsRangeResult *out);

#endif							/* VSEARCH_SEARCH_H */
