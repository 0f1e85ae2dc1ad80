/*
 * Reading the heap rows of index entries for the batch functions (batch.c): is the row visible to
 * the snapshot, which version is it (its ctid), and what is its indexed vector?
 */
#ifndef VSEARCH_BATCHROWS_H
#define VSEARCH_BATCHROWS_H

#include "postgres.h"

#include "access/relscan.h"
#include "nodes/execnodes.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/snapshot.h"

typedef struct VsRowReader
{
	uint32		dim;
	IndexInfo  *indexInfo;
	EState	   *estate;
	ExprContext *econtext;
	TupleTableSlot *slot;
	IndexFetchTableData *fetch;
	Snapshot	snapshot;
} VsRowReader;

extern void vs_row_reader_begin(VsRowReader *r, Relation heap, Relation index, uint32 dim);
extern void vs_row_reader_end(VsRowReader *r);

/* The row of index entry id (a heap tid): true if visible, with its version's ctid and its vector
 * (dim floats; a NULL or mis-sized vector counts as not visible). */
extern bool vs_row_reader_read(VsRowReader *r, int64 id, ItemPointer tid, float *vec);

/* Reads n rows (ids ascending, distinct): visible[i], tids[i] and vectors + i * dim. */
extern void vs_read_rows(VsRowReader *r, const int64 *ids, Size n, bool *visible,
						 ItemPointerData *tids, float *vectors);

#endif
