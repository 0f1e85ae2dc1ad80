/*
 * vsearch_index_check(index, heapallindexed): a structural check of a vsearch index, in the spirit
 * of amcheck.  The driver (indexcheck.c) locks the heap and the index, hands the walk to the
 * kind's `check` operation (indexkind.h; <kind>check.c), then verifies what every kind shares:
 * each heap tid an entry names is valid and inside the heap, no row has two entries, and with
 * heapallindexed every row of an MVCC snapshot that the index should hold has an entry.  Any
 * violation is an ERROR with ERRCODE_INDEX_CORRUPTED; otherwise a jsonb report (docs/RELIABILITY.md).
 */
#ifndef VSEARCH_INDEXCHECK_H
#define VSEARCH_INDEXCHECK_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/itemptr.h"
#include "utils/rel.h"

/* A heap tid named by an index entry, and where. */
typedef struct VsCheckTid
{
	int64		id;				/* vs_tid_to_id */
	uint32		group;			/* the kind's structure holding it (an IVF list); else 0 */
	BlockNumber blkno;			/* index page of the entry */
} VsCheckTid;

typedef struct VsCheck
{
	Relation	index;
	BlockNumber nblocks;		/* index blocks when the walk began */
	BufferAccessStrategy strategy;
	bool	   *reached;		/* per index block: read by the walk as a page of the index */
	Page		page;			/* copy of the last page read */
	VsCheckTid *tids;
	int64		ntids;
	int64		maxtids;
	/*
	 * A tid twice in the same group is tolerated (vs_ivfpq: a VACUUM interrupted while compacting
	 * a list leaves copies that readers deduplicate); counted as a duplicate entry.
	 */
	bool		duplicates_in_group_ok;
	StringInfoData fields;		/* the kind's part of the report: `, "key": value` ... */
} VsCheck;

/*
 * A copy of index block blkno, read under a share lock, after checking that it lies inside the
 * index, that no earlier step of the walk read it (chains without cycles, structures without
 * shared pages), that it is initialized, its header is sane and its special space is the kind's
 * (opaque_size bytes ending in page_id).  Valid until the next call.
 */
extern Page vs_check_page(VsCheck *c, BlockNumber blkno, Size opaque_size, uint16 page_id);

/* ERROR unless a metapage (read with vs_check_page) starts with this magic number and version. */
extern void vs_check_meta(VsCheck *c, Page page, uint32 magic, uint32 version);

/* A copy of block blkno as it is (no check; the walk's own reads use vs_check_page). */
extern Page vs_check_read(VsCheck *c, BlockNumber blkno);

/*
 * The tuple at line pointer off of a page read with vs_check_page: a normal item lying between
 * pd_upper and the special space, at least min_size bytes; *size its length.
 */
extern void *vs_check_item(VsCheck *c, BlockNumber blkno, OffsetNumber off, Size min_size,
						   Size *size);

/* ERROR: index corrupted, naming the index and (if valid) the block. */
extern void vs_check_fail(VsCheck *c, BlockNumber blkno, const char *fmt,...)
			pg_attribute_printf(3, 4) pg_attribute_noreturn();

/* Records the heap tid of an entry on index block blkno (checked after the walk). */
extern void vs_check_tid(VsCheck *c, BlockNumber blkno, ItemPointer tid, uint32 group);

/* ERROR unless every element of a stored vector is finite (what the vector type admits). */
extern void vs_check_floats(VsCheck *c, BlockNumber blkno, const float *x, Size n,
							const char *what);

/* Adds `"key": value` to the report. */
extern void vs_check_report(VsCheck *c, const char *key, int64 value);

#endif							/* VSEARCH_INDEXCHECK_H */
