/*
 * vsearch_index_check (indexcheck.h): locking, the walk's page reads, the checks every kind shares
 * (heap tids valid, no row twice, heapallindexed) and the report.
 *
 * Locks: outside recovery the heap is locked AccessShareLock and the index ShareLock, which waits
 * for the transactions that are changing the index and keeps inserts and VACUUM out for the walk
 * (searches go on), so the metapage counters and the pages agree.  During recovery (a hot standby)
 * only AccessShareLock can be taken and replay may change pages under the walk: run it there when
 * replay is idle (docs/RELIABILITY.md).
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "indexcheck.h"
#include "indexkind.h"
#include "pgcompat.h"
#include "search.h"

void
vs_check_fail(VsCheck *c, BlockNumber blkno, const char *fmt,...)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	if (BlockNumberIsValid(blkno))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("index \"%s\" is corrupted: block %u: %s",
						RelationGetRelationName(c->index), blkno, buf.data),
				 errhint("REINDEX the index.")));
	ereport(ERROR,
			(errcode(ERRCODE_INDEX_CORRUPTED),
			 errmsg("index \"%s\" is corrupted: %s", RelationGetRelationName(c->index), buf.data),
			 errhint("REINDEX the index.")));
}

Page
vs_check_read(VsCheck *c, BlockNumber blkno)
{
	Buffer		buf = ReadBufferExtended(c->index, MAIN_FORKNUM, blkno, RBM_NORMAL, c->strategy);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(c->page, BufferGetPage(buf), BLCKSZ);
	UnlockReleaseBuffer(buf);
	return c->page;
}

Page
vs_check_page(VsCheck *c, BlockNumber blkno, Size opaque_size, uint16 page_id)
{
	PageHeader	hdr;
	uint16		found_id;

	CHECK_FOR_INTERRUPTS();
	if (blkno >= c->nblocks)
		vs_check_fail(c, InvalidBlockNumber, "a link points at block %u, the index has %u",
					  blkno, c->nblocks);
	if (c->reached[blkno])
		vs_check_fail(c, blkno, "reached twice (a cycle, or a page in two structures)");
	c->reached[blkno] = true;

	vs_check_read(c, blkno);
	hdr = (PageHeader) c->page;
	if (PageIsNew(c->page))
		vs_check_fail(c, blkno, "the page is not initialized");
	if (hdr->pd_lower < SizeOfPageHeaderData || hdr->pd_lower > hdr->pd_upper ||
		hdr->pd_upper > hdr->pd_special || hdr->pd_special > BLCKSZ)
		vs_check_fail(c, blkno, "bad page header (lower %u, upper %u, special %u)",
					  hdr->pd_lower, hdr->pd_upper, hdr->pd_special);
	found_id = *(uint16 *) ((char *) c->page + BLCKSZ - sizeof(uint16));
	if (found_id != page_id)
	{
		const VsIndexKind *other = vs_kind_by_page_id(found_id);

		if (other != NULL)
			vs_check_fail(c, blkno, "a %s page, not a page of this access method", other->name);
		vs_check_fail(c, blkno, "not a page of this access method (page id %04X, not %04X)",
					  found_id, page_id);
	}
	if (PageGetSpecialSize(c->page) != MAXALIGN(opaque_size))
		vs_check_fail(c, blkno, "not a page of this access method (special space of %u bytes)",
					  (unsigned) PageGetSpecialSize(c->page));
	return c->page;
}

void
vs_check_meta(VsCheck *c, Page page, uint32 magic, uint32 version)
{
	const uint32 *head = (const uint32 *) PageGetContents(page);

	if (head[0] != magic)
		vs_check_fail(c, 0, "the metapage's magic number is %08X, not %08X", head[0], magic);
	if (head[1] != version)
		vs_check_fail(c, 0, "the metapage's version is %u, this server reads %u", head[1],
					  version);
}

void *
vs_check_item(VsCheck *c, BlockNumber blkno, OffsetNumber off, Size min_size, Size *size)
{
	ItemId		itemid = PageGetItemId(c->page, off);
	PageHeader	hdr = (PageHeader) c->page;

	if (!ItemIdIsNormal(itemid) || ItemIdGetOffset(itemid) < hdr->pd_upper ||
		ItemIdGetOffset(itemid) + ItemIdGetLength(itemid) > hdr->pd_special ||
		ItemIdGetLength(itemid) < min_size)
		vs_check_fail(c, blkno, "line pointer %u is not a tuple of the page (offset %u, length %u)",
					  off, ItemIdGetOffset(itemid), ItemIdGetLength(itemid));
	*size = ItemIdGetLength(itemid);
	return PageGetItem(c->page, itemid);
}

void
vs_check_tid(VsCheck *c, BlockNumber blkno, ItemPointer tid, uint32 group)
{
	if (c->ntids == c->maxtids)
	{
		c->maxtids = Max(1024, c->maxtids * 2);
		c->tids = c->tids ? repalloc_huge(c->tids, sizeof(VsCheckTid) * c->maxtids)
			: palloc_extended(sizeof(VsCheckTid) * c->maxtids, MCXT_ALLOC_HUGE);
	}
	c->tids[c->ntids].id = vs_tid_to_id(tid);
	c->tids[c->ntids].group = group;
	c->tids[c->ntids].blkno = blkno;
	c->ntids++;
}

void
vs_check_floats(VsCheck *c, BlockNumber blkno, const float *x, Size n, const char *what)
{
	for (Size i = 0; i < n; i++)
		if (!isfinite(x[i]))
			vs_check_fail(c, blkno, "%s holds a non-finite element", what);
}

void
vs_check_report(VsCheck *c, const char *key, int64 value)
{
	appendStringInfo(&c->fields, ", \"%s\": " INT64_FORMAT, key, value);
}

static int
cmp_check_tid(const void *a, const void *b)
{
	const VsCheckTid *x = (const VsCheckTid *) a;
	const VsCheckTid *y = (const VsCheckTid *) b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->group < y->group ? -1 : x->group > y->group ? 1 : 0;
}

/* heapallindexed: each row the index should hold has an entry. */
typedef struct HeapRowsState
{
	VsCheck    *check;
	int64		rows;
} HeapRowsState;

static void
heap_row_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull,
				  bool tupleIsAlive, void *arg)
{
	HeapRowsState *st = (HeapRowsState *) arg;
	VsCheck    *c = st->check;
	VsCheckTid	key;

	if (isnull[0])
		return;					/* NULL keys are not indexed */
	key.id = vs_tid_to_id(tid);
	key.group = 0;
	st->rows++;
	/* the tids are sorted by (id, group): find any entry of this id */
	{
		int64		lo = 0,
					hi = c->ntids;

		while (lo < hi)
		{
			int64		mid = lo + (hi - lo) / 2;

			if (c->tids[mid].id < key.id)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == c->ntids || c->tids[lo].id != key.id)
			vs_check_fail(c, InvalidBlockNumber,
						  "heap row (%u,%u) is not in the index",
						  ItemPointerGetBlockNumber(tid), ItemPointerGetOffsetNumber(tid));
	}
}

static int64
check_heap_rows(VsCheck *c, Relation heap, Snapshot snapshot)
{
	IndexInfo  *info = BuildIndexInfo(c->index);
	TableScanDesc scan;
	HeapRowsState st = {c, 0};

	/* an MVCC scan: amcheck's way of asking for the rows a snapshot sees */
	info->ii_Concurrent = true;
	scan = table_beginscan_strat(heap, snapshot, 0, NULL, true, true);
	table_index_build_scan(heap, c->index, info, true, false, heap_row_callback, &st, scan);
	return st.rows;
}

PG_FUNCTION_INFO_V1(vsearch_index_check);
Datum
vsearch_index_check(PG_FUNCTION_ARGS)
{
	Oid			indexoid = PG_GETARG_OID(0);
	bool		heapallindexed = PG_GETARG_BOOL(1);
	LOCKMODE	lockmode = RecoveryInProgress() ? AccessShareLock : ShareLock;
	Oid			heapoid;
	Relation	heap;
	Relation	index;
	const VsIndexKind *kind;
	Snapshot	snapshot = NULL;
	VsCheck		c;
	BlockNumber heap_nblocks;
	int64		duplicates = 0;
	int64		unused = 0;
	int64		heap_rows = -1;
	StringInfoData out;

	/* the heap first, as every index user does (no deadlock with writers) */
	heapoid = IndexGetRelation(indexoid, true);
	if (!OidIsValid(heapoid) && get_rel_name(indexoid) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", indexoid)));
	if (!OidIsValid(heapoid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index", get_rel_name(indexoid)),
				 errhint("vsearch_index_check takes an index of access method %s.",
						 vs_kind_names("or"))));
	/* before any lock: another user's index must not be locked against its writers */
	if (!VsRelationOwnerCheck(indexoid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_INDEX, get_rel_name(indexoid));
	heap = table_open(heapoid, AccessShareLock);
	index = index_open(indexoid, lockmode);
	if (IndexGetRelation(indexoid, false) != heapoid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" changed its table while being locked",
						RelationGetRelationName(index))));
	if (index->rd_rel->relkind == RELKIND_PARTITIONED_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("index \"%s\" is a partitioned index", RelationGetRelationName(index)),
				 errhint("Check the index of each partition: SELECT vsearch_index_check(indexrelid) "
						 "FROM pg_partition_tree('%s') JOIN pg_index ON indexrelid = relid "
						 "WHERE isleaf;", RelationGetRelationName(index))));
	kind = vs_kind_of_index(index);
	if (kind == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("index \"%s\" is not a vsearch index", RelationGetRelationName(index)),
				 errhint("vsearch_index_check takes an index of access method %s.",
						 vs_kind_names("or"))));
	if (RELATION_IS_OTHER_TEMP(index))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot check temporary indexes of other sessions")));
	if (!index->rd_index->indisvalid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" is not valid", RelationGetRelationName(index)),
				 errhint("An interrupted CREATE INDEX CONCURRENTLY leaves an invalid index: "
						 "drop it or REINDEX it.")));

	/* rows visible to this snapshot were committed before the walk: their entries are there */
	if (heapallindexed)
		snapshot = RegisterSnapshot(GetLatestSnapshot());

	memset(&c, 0, sizeof(c));
	c.index = index;
	c.nblocks = RelationGetNumberOfBlocks(index);
	c.strategy = GetAccessStrategy(BAS_BULKREAD);
	c.reached = palloc_extended(Max(c.nblocks, 1) * sizeof(bool), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	c.page = palloc(BLCKSZ);
	initStringInfo(&c.fields);
	if (c.nblocks == 0)
		vs_check_fail(&c, InvalidBlockNumber, "the index has no metapage");

	kind->check(&c);

	/* blocks no structure reached must be new: extended by a change that never got logged */
	for (BlockNumber blkno = 0; blkno < c.nblocks; blkno++)
	{
		if (c.reached[blkno])
			continue;
		CHECK_FOR_INTERRUPTS();
		if (!PageIsNew(vs_check_read(&c, blkno)))
			vs_check_fail(&c, blkno, "an initialized page that no structure of the index reaches");
		unused++;
	}

	/* every tid valid and inside the heap; no row twice */
	heap_nblocks = RelationGetNumberOfBlocks(heap);
	if (c.ntids > 1)
		qsort(c.tids, c.ntids, sizeof(VsCheckTid), cmp_check_tid);
	for (int64 i = 0; i < c.ntids; i++)
	{
		ItemPointerData tid;

		if ((i & 0xFFFF) == 0)
			CHECK_FOR_INTERRUPTS();
		vs_id_to_tid(c.tids[i].id, &tid);
		if (!OffsetNumberIsValid(ItemPointerGetOffsetNumberNoCheck(&tid)) ||
			ItemPointerGetOffsetNumberNoCheck(&tid) > MaxHeapTuplesPerPage ||
			ItemPointerGetBlockNumberNoCheck(&tid) >= heap_nblocks)
			vs_check_fail(&c, c.tids[i].blkno,
						  "an entry names heap tid (%u,%u), outside the table's %u blocks",
						  ItemPointerGetBlockNumberNoCheck(&tid),
						  ItemPointerGetOffsetNumberNoCheck(&tid), heap_nblocks);
		if (i > 0 && c.tids[i].id == c.tids[i - 1].id)
		{
			if (!c.duplicates_in_group_ok || c.tids[i].group != c.tids[i - 1].group)
				vs_check_fail(&c, c.tids[i].blkno,
							  "heap tid (%u,%u) has two entries (the other on block %u)",
							  ItemPointerGetBlockNumberNoCheck(&tid),
							  ItemPointerGetOffsetNumberNoCheck(&tid), c.tids[i - 1].blkno);
			duplicates++;
		}
	}

	if (heapallindexed)
	{
		heap_rows = check_heap_rows(&c, heap, snapshot);
		UnregisterSnapshot(snapshot);
	}

	initStringInfo(&out);
	appendStringInfoString(&out, "{\"index\": ");
	escape_json(&out, RelationGetRelationName(index));
	appendStringInfoString(&out, ", \"access_method\": ");
	escape_json(&out, kind->name);
	appendStringInfo(&out, ", \"blocks\": %u, \"unused_blocks\": " INT64_FORMAT
					 ", \"entries\": " INT64_FORMAT ", \"duplicate_entries\": " INT64_FORMAT,
					 c.nblocks, unused, c.ntids, duplicates);
	appendStringInfoString(&out, c.fields.data);
	if (heapallindexed)
		appendStringInfo(&out, ", \"heap_rows\": " INT64_FORMAT, heap_rows);
	appendStringInfoString(&out, "}");

	FreeAccessStrategy(c.strategy);
	index_close(index, lockmode);
	table_close(heap, AccessShareLock);
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}
