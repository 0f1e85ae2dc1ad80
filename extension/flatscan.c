/*
 * vs_flat: index scans (amgettuple, amgetbitmap).
 *
 * ORDER BY col <-> q (any metric of the operator class)
 *   The first amgettuple builds a VsIndexRef and asks the search layer for the k nearest rows.
 *   PostgreSQL does not tell an index about LIMIT, so k is a guess: a little more than the rows
 *   this backend's last ordered scans of the index returned (a pool repeats the same statement),
 *   VS_FLAT_FIRST_BATCH before the first.  A GPU's selection costs more for a larger k (twice
 *   for k = 64 against 10 on the GEMM path).  When the executor
 *   wants more (a WHERE filter rejected rows, rows were dead), the search runs again with k
 *   multiplied by VS_FLAT_GROWTH, and the rows already returned are skipped: the engine orders
 *   by (distance, id), so every row at or before the last returned (distance, id) was returned.
 *   The scan ends only when a search returns fewer than k rows, i.e. the index is exhausted.
 *
 *   The engine's distances are the operator's own values (search.h), so the scan returns each
 *   row's exact value in engine order without xs_recheckorderby: the executor neither recomputes
 *   the operator (which for a vector stored out of line means fetching it from TOAST) nor
 *   reorders, and the output order is exactly the seq scan's (up to ties).  Further ORDER BY keys
 *   (another query vector) are left to the executor: -inf for them, with the recheck.
 *
 * WHERE col <<->> sphere(c, r) (and <<#>>, <<=>>, <<+>>)
 *   One range search per qual, which finds exactly the rows the operator accepts; the rows found
 *   by every qual are the answer (no xs_recheck).  With an ORDER BY too, the kNN stream above is
 *   filtered to them and ends once all of them have been returned.
 *
 * A NULL query vector or sphere (or a sphere with a NULL center or radius) matches no row.  A
 * query whose dimension differs from the index's is an error (22000), as with the operators.
 * The scan holds the executor's lock on the index for its whole life, so the index cannot be
 * dropped or rebuilt under it.
 */
#include "postgres.h"

#include <float.h>
#include <limits.h>
#include <math.h>

#include "access/relscan.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "utils/float.h"
#include "utils/memutils.h"

#include "flat.h"

#define VS_FLAT_FIRST_BATCH	64
#define VS_FLAT_GROWTH		4

typedef struct FlatScanOpaqueData
{
	VsScanBase	base;			/* cxt, started, done, ref */

	/* ORDER BY */
	bool		ordered;
	float	   *query;
	int			k;				/* k of the last kNN search, 0 before the first */
	bool		exhausted;		/* the last search found fewer than k rows */
	int64	   *ids;
	float	   *dists;
	int64		count;
	int64		pos;
	int64		returned;		/* rows the ordered stream returned */
	bool		have_last;		/* (last_dist, last_id): the last row returned */
	float		last_dist;
	int64		last_id;

	/* range quals: the rows passing every one (base.rows); ordered, in memory, ascending */
	bool		has_range;
	int64	   *cand;
	int64		ncand;
	int64		cand_returned;	/* ordered: candidates returned so far */
} FlatScanOpaqueData;

typedef FlatScanOpaqueData *FlatScanOpaque;

/* Rows this backend's recent ordered scans of an index returned (the index's rd_amcache). */
typedef struct FlatScanHint
{
	int64		rows;
} FlatScanHint;

/* k of an ordered scan's first search. */
static int64
first_k(Relation index)
{
	FlatScanHint *hint = (FlatScanHint *) index->rd_amcache;

	if (hint == NULL || hint->rows <= 0)
		return VS_FLAT_FIRST_BATCH;
	return hint->rows + hint->rows / 4 + 2;
}

/* After an ordered scan: its row count, or a quarter less than the last guess if that is more. */
static void
remember_rows(IndexScanDesc scan)
{
	FlatScanOpaque so = (FlatScanOpaque) scan->opaque;
	Relation	index = scan->indexRelation;
	FlatScanHint *hint;

	if (so == NULL || !so->ordered || so->returned == 0)
		return;
	if (index->rd_amcache == NULL)
		index->rd_amcache = MemoryContextAllocZero(index->rd_indexcxt, sizeof(FlatScanHint));
	hint = (FlatScanHint *) index->rd_amcache;
	hint->rows = Max(so->returned, hint->rows - hint->rows / 4);
}

IndexScanDesc
vs_flat_beginscan(Relation index, int nkeys, int norderbys)
{
	return vs_scan_begin(index, nkeys, norderbys, sizeof(FlatScanOpaqueData));
}

void
vs_flat_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	remember_rows(scan);
	vs_scan_rescan(scan, keys, orderbys);
}

void
vs_flat_endscan(IndexScanDesc scan)
{
	remember_rows(scan);
	vs_scan_end(scan);
}

static bool
is_candidate(FlatScanOpaque so, int64 id)
{
	return bsearch(&id, so->cand, so->ncand, sizeof(int64), vs_cmp_int64) != NULL;
}

/* Range quals -> candidates; first use of the scan keys, ERRORs for invalid ones. */
static void
scan_start(IndexScanDesc scan)
{
	FlatScanOpaque so = (FlatScanOpaque) scan->opaque;
	MemoryContext old;
	VsScanKeys	keys;

	vs_scan_keys(scan, &keys);
	if (keys.empty)
	{
		so->base.done = true;	/* NULL keys, or an index that never held a vector */
		return;
	}
	old = MemoryContextSwitchTo(so->base.cxt);
	so->ordered = keys.norderbys > 0;
	so->query = so->ordered ? keys.queries[0] : NULL;

	/* One range search per qual; candidates are the rows every one of them found. */
	so->has_range = keys.nranges > 0;
	if (so->has_range)
	{
		vs_scan_range_rows(&so->base, &keys);
		if (so->ordered)
		{
			so->cand = vs_range_rows_array(so->base.rows, &so->ncand);
			if (so->ncand == 0)
				so->base.done = true;
		}
	}
	MemoryContextSwitchTo(old);
}

/* The next kNN search of an ORDER BY scan, with a larger k. */
static void
next_batch(FlatScanOpaque so, Relation index)
{
	MemoryContext old;
	int64		k;
	int64		count = 0;

	if (so->k == 0)
	{
		k = first_k(index);
		/* with range quals the candidates usually come first: ask for all of them */
		if (so->has_range)
			k = Max(k, so->ncand + VS_FLAT_FIRST_BATCH);
	}
	else
	{
		if (so->k == INT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_flat ordered scan cannot return more than %d rows", INT_MAX)));
		k = (int64) so->k * VS_FLAT_GROWTH;
		/* just past the row count finishes the scan in one more search */
		if (k > (int64) so->base.ref.ntuples + 1 && (int64) so->base.ref.ntuples + 1 > so->k)
			k = (int64) so->base.ref.ntuples + 1;
	}
	k = Min(k, (int64) INT_MAX);

	old = MemoryContextSwitchTo(so->base.cxt);
	if (so->ids)
		pfree(so->ids);
	if (so->dists)
		pfree(so->dists);
	so->ids = palloc_extended(sizeof(int64) * k, MCXT_ALLOC_HUGE);
	so->dists = palloc_extended(sizeof(float) * k, MCXT_ALLOC_HUGE);
	MemoryContextSwitchTo(old);

	vs_search_knn(&so->base.ref, NULL, so->query, 1, (int) k, so->ids, so->dists, &count);
	so->k = (int) k;
	so->count = Min(count, k);
	so->pos = 0;
	so->exhausted = count < k;
}

/* The next row of an ORDER BY scan in engine order; false at the end. */
static bool
next_ordered(FlatScanOpaque so, Relation index, int64 *id, float *dist)
{
	for (;;)
	{
		while (so->pos < so->count)
		{
			int64		i = so->ids[so->pos];
			float		d = so->dists[so->pos];

			so->pos++;
			if (i < 0)
				continue;
			if (so->have_last && vs_cmp_engine_order(d, i, so->last_dist, so->last_id) <= 0)
				continue;		/* returned by an earlier, smaller search */
			so->have_last = true;
			so->last_dist = d;
			so->last_id = i;
			so->returned++;
			if (so->has_range)
			{
				if (!is_candidate(so, i))
					continue;
				so->cand_returned++;
			}
			*id = i;
			*dist = d;
			return true;
		}
		if (so->exhausted || (so->has_range && so->cand_returned >= so->ncand))
			return false;
		CHECK_FOR_INTERRUPTS();
		next_batch(so, index);
	}
}

bool
vs_flat_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	FlatScanOpaque so = (FlatScanOpaque) scan->opaque;
	int64		id;

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "vs_flat indexes only scan forward");
	if (!so->base.started)
		scan_start(scan);
	if (so->base.done)
		return false;

	if (so->ordered)
	{
		float		dist;

		if (!next_ordered(so, scan->indexRelation, &id, &dist))
		{
			so->base.done = true;
			return false;
		}
		vs_id_to_tid(id, &scan->xs_heaptid);
		scan->xs_orderbyvals[0] = Float8GetDatum(vs_rank_value(so->base.ref.metric, dist));
		scan->xs_orderbynulls[0] = false;
		/* further ORDER BY keys (another query vector): -inf bounds anything */
		for (int i = 1; i < scan->numberOfOrderBys; i++)
		{
			scan->xs_orderbyvals[i] = Float8GetDatum(-get_float8_infinity());
			scan->xs_orderbynulls[i] = false;
		}
		scan->xs_recheckorderby = scan->numberOfOrderBys > 1;
		scan->xs_recheck = false;
		return true;
	}

	if (!vs_range_rows_next(so->base.rows, &id))
	{
		so->base.done = true;
		return false;
	}
	vs_id_to_tid(id, &scan->xs_heaptid);
	scan->xs_recheck = false;
	return true;
}

int64
vs_flat_getbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	FlatScanOpaque so = (FlatScanOpaque) scan->opaque;
	int64		n;

	if (!so->base.started)
		scan_start(scan);
	if (so->base.done || !so->has_range)
		return 0;
	n = vs_scan_bitmap(tbm, so->base.rows, false);
	so->base.done = true;
	return n;
}
