/*
 * Reading the heap rows of index entries for the batch functions (batch.c): is the row visible to
 * the snapshot, which version is it (its ctid), and how far is its indexed vector from a query?
 */
#ifndef VSEARCH_BATCHROWS_H
#define VSEARCH_BATCHROWS_H

#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "nodes/execnodes.h"
#include "storage/buf.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/snapshot.h"

#include "vsearch/distance.h"

typedef struct VsRowReader
{
	Relation	heap;
	bool		direct;			/* a heap table and a plain column: read its pages directly */
	AttrNumber	attnum;			/* the indexed column (direct) */
	uint32		dim;
	bool		sparse;			/* a sparsevec column (vs_index_vector) */
	vs_metric	metric;
	const float *queries;		/* the batch's queries, dim floats each; NULL: visibility only */
	IndexInfo  *indexInfo;
	EState	   *estate;
	ExprContext *econtext;
	TupleTableSlot *slot;
	IndexFetchTableData *fetch;
	Snapshot	snapshot;
	bool		use_vm;			/* direct, MVCC and not serializable: rows on all-visible
								 * pages need no visibility check (nor the page's lock) */
	Buffer		vmbuf;			/* the visibility map page last read (use_vm) */
	int64		rows_read;		/* heap rows looked up so far */
	int64		rows_all_visible;	/* of which on all-visible pages (use_vm) */

	/*
	 * remember: keep what each row's check found for later passes (set by the caller; without
	 * queries only, where a row's answer is the same for every query): the rows checked so far,
	 * sorted by id
	 */
	bool		remember;
	struct VsSeenRow *seen;
	Size		nseen;

	/* vectors stored out of line: the TOAST table, its index and one scan, open for the call */
	MemoryContext cxt;			/* the reader's: where they live */
	Relation	toastrel;
	Relation	toastidx;
	IndexScanDesc toastscan;
	TupleTableSlot *toastslot;
	SnapshotData toastsnap;
	struct varlena *toastbuf;	/* the vector read last, whole */
	Size		toastcap;
} VsRowReader;

/* One (query, row) pair to check: the row of index entry id against query number query; the
 * answer goes to out[slot]. */
typedef struct VsPair
{
	int64		id;
	int32		query;
	uint32		slot;
} VsPair;

/* What a pair's check found: the row is visible as tid, at the SQL operator's distance. */
typedef struct VsPairResult
{
	double		distance;
	ItemPointerData tid;
	bool		visible;
} VsPairResult;

extern void vs_row_reader_begin(VsRowReader *r, Relation heap, Relation index, uint32 dim,
								vs_metric metric, const float *queries);
extern void vs_row_reader_end(VsRowReader *r);

/* The pair (id, query): true if the row is visible (when distances are computed, a NULL or
 * mis-sized vector counts as not visible), with its version's ctid and the SQL operator's
 * distance (NaN for a reader without queries, which reads no vector). */
extern bool vs_check_pair(VsRowReader *r, int64 id, int32 query, VsPairResult *out);

/* Checks n pairs (any order), reading each distinct row once, in heap order (and, for a reader
 * that remembers, not again in a later call); the pairs array is scratch space (left in no
 * particular order). */
extern void vs_check_pairs(VsRowReader *r, VsPair *pairs, Size n, VsPairResult *out);

#endif
