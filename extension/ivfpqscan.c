/*
 * vs_ivfpq: index scans (amgettuple, amgetbitmap).
 *
 * ORDER BY col <op> q
 *   The scan works in rounds.  A round asks the engine for the `vsearch.ivfpq_rerank` entries
 *   with the smallest estimated (ADC) distance in the probe window, the lists ranked
 *   [offset, offset + vsearch.ivfpq_probes) by their centroid's distance to q.  When the executor
 *   wants more rows (a filter rejected rows, rows were dead), the next round asks the same window
 *   for 4x as many and takes those not seen before, until the window is exhausted; then the window
 *   moves on (offset += probes), until every list has been scanned: the scan never stops early.
 *   The first round also takes every pending entry (rows of an index without a quantizer).
 *
 *   Each round's candidates are re-ranked with the exact distance, the value the SQL operator
 *   computes: from the index's copy of the vector (store_vectors = on) or from the heap row visible
 *   to the scan's snapshot (rows it cannot see are dropped here).  A round's rows come out in
 *   exact ascending order with their exact distance in xs_orderbyvals and xs_recheckorderby =
 *   false.  Across rounds the order is not monotone: that is the approximation.  With
 *   probes >= lists and rerank >= rows the first round holds every row and the scan returns
 *   exactly the sequential scan's order.
 *
 * WHERE col <<op>> sphere(c, r)
 *   One range search per qual over the first probe window (estimated distances <= r), plus every
 *   pending entry; the rows found by every qual are the candidates, returned with xs_recheck so
 *   the executor applies the operator exactly.  Approximate: a row within the radius whose
 *   estimate is above it, or whose list is not probed, is missed.  With an ORDER BY too, the
 *   candidates are re-ranked exactly and returned in that order (one round).
 */
#include "postgres.h"

#include <float.h>
#include <limits.h>
#include <math.h>

#include "access/relscan.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "utils/float.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "ivfpq.h"

#define VS_IVFPQ_GROWTH		4

typedef struct Cand
{
	int64		id;
	double	   *d;				/* norderbys exact distances */
} Cand;

typedef struct IvfpqScanOpaqueData
{
	VsScanBase	base;			/* cxt, started, done, ref */

	/* ORDER BY */
	bool		ordered;
	int			norderbys;
	float	  **queries;		/* per ORDER BY key */
	int			offset;			/* probe window */
	int			probes;
	int			rerank;
	int64		stage_k;		/* k of the last search in this window, 0: none yet */
	bool		first_round;
	bool		last_round;		/* every list and the pending entries are covered */
	HTAB	   *seen;
	Cand	   *cands;
	int64		ncands;
	int64		pos;

	/* range quals: the rows passing every one (base.rows) */
	bool		has_range;

	/* heap access for the re-rank (store_vectors = off) */
	IndexFetchTableData *fetch;
	TupleTableSlot *slot;
	AttrNumber	attnum;
} IvfpqScanOpaqueData;

typedef IvfpqScanOpaqueData *IvfpqScanOpaque;

/* ---------------------------------------------------------------------------------------------
 * Scan setup
 */

IndexScanDesc
vs_ivfpq_beginscan(Relation index, int nkeys, int norderbys)
{
	return vs_scan_begin(index, nkeys, norderbys, sizeof(IvfpqScanOpaqueData));
}

static void
release_fetch(IvfpqScanOpaque so)
{
	if (so->fetch != NULL)
	{
		table_index_fetch_end(so->fetch);
		so->fetch = NULL;
	}
	if (so->slot != NULL)
	{
		ExecDropSingleTupleTableSlot(so->slot);
		so->slot = NULL;
	}
}

void
vs_ivfpq_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	release_fetch((IvfpqScanOpaque) scan->opaque);
	vs_scan_rescan(scan, keys, orderbys);
}

void
vs_ivfpq_endscan(IndexScanDesc scan)
{
	release_fetch((IvfpqScanOpaque) scan->opaque);
	vs_scan_end(scan);
}

/* float8 order of the SQL operators: NaN after every number. */
static int
cmp_float8_nan(double a, double b)
{
	bool		na = isnan(a);
	bool		nb = isnan(b);

	if (na || nb)
		return na == nb ? 0 : (na ? 1 : -1);
	return a < b ? -1 : (a > b ? 1 : 0);
}

static int
cmp_cand(const void *a, const void *b, void *arg)
{
	const Cand *x = (const Cand *) a;
	const Cand *y = (const Cand *) b;
	int			nkeys = *(int *) arg;

	for (int i = 0; i < nkeys; i++)
	{
		int			c = cmp_float8_nan(x->d[i], y->d[i]);

		if (c != 0)
			return c;
	}
	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

/* A candidate with its exact distance to every ORDER BY key, appended to so->cands. */
static void
add_cand(IvfpqScanOpaque so, int64 id, const float *x)
{
	Cand	   *cand = &so->cands[so->ncands++];
	int			nkeys = Max(so->norderbys, 1);

	cand->id = id;
	cand->d = palloc(sizeof(double) * nkeys);
	for (int k = 0; k < nkeys; k++)
		cand->d[k] = so->queries && so->queries[k]
			? vs_operator_distance(so->base.ref.metric, x, so->queries[k], so->base.ref.dim) : 0.0;
}

typedef struct StoredRerank
{
	IvfpqScanOpaque so;
	const int64 *ids;
} StoredRerank;

static void
add_stored_cand(void *arg, int64 pos, const float *x)
{
	StoredRerank *r = (StoredRerank *) arg;

	add_cand(r->so, r->ids[pos], x);
}

/*
 * Exact distances of candidate ids (distinct) for every ORDER BY key, into so->cands (sorted).
 * Rows the scan's snapshot cannot see are dropped when they are read from the heap.  With
 * store_vectors the index's copies are read in a walk of its pages (ivfpqpages.c): the cases the
 * search cannot re-rank itself (several ORDER BY keys, pending entries, range candidates).
 */
static void
rerank(IndexScanDesc scan, const int64 *ids, int64 n)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->base.cxt);
	uint32		dim = so->base.ref.dim;
	int			nkeys = Max(so->norderbys, 1);

	if (so->cands)
		pfree(so->cands);
	so->cands = palloc_extended(sizeof(Cand) * Max(n, 1), MCXT_ALLOC_HUGE);
	so->ncands = 0;
	so->pos = 0;

	if (VsIvfpqRefStoreVectors(&so->base.ref))
	{
		StoredRerank r = {so, ids};

		vs_ivfpq_stored_vectors(&so->base.ref, ids, n, add_stored_cand, &r);
		if (so->ncands > 1)
			qsort_arg(so->cands, so->ncands, sizeof(Cand), cmp_cand, &nkeys);
		MemoryContextSwitchTo(old);
		return;
	}
	if (so->fetch == NULL)
	{
		Relation	heap = scan->heapRelation;

		if (heap == NULL)
			elog(ERROR, "vs_ivfpq ordered scan without a heap relation");
		so->fetch = table_index_fetch_begin(heap);
		so->slot = table_slot_create(heap, NULL);
		so->attnum = scan->indexRelation->rd_index->indkey.values[0];
		if (so->attnum <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("vs_ivfpq index \"%s\" on an expression has no stored vectors",
							RelationGetRelationName(scan->indexRelation)),
					 errhint("Rebuild it WITH (store_vectors = on).")));
	}

	for (int64 i = 0; i < n; i++)
	{
		ItemPointerData tid;
		bool		call_again = false;
		bool		all_dead = false;
		bool		isnull;
		Datum		value;
		Vector	   *v;
		Pointer		raw;

		if ((i & 255) == 0)
			CHECK_FOR_INTERRUPTS();
		vs_id_to_tid(ids[i], &tid);
		if (!table_index_fetch_tuple(so->fetch, &tid, scan->xs_snapshot, so->slot,
									 &call_again, &all_dead))
			continue;			/* invisible to the scan: the executor would skip it too */
		value = slot_getattr(so->slot, so->attnum, &isnull);
		if (isnull)
		{
			ExecClearTuple(so->slot);
			continue;
		}
		raw = DatumGetPointer(value);
		v = vs_datum_vector(value);
		if ((uint32) v->dim == dim)
			add_cand(so, ids[i], v->x);
		if ((Pointer) v != raw)
			pfree(v);			/* detoasted copy */
		ExecClearTuple(so->slot);
	}
	if (so->ncands > 1)
		qsort_arg(so->cands, so->ncands, sizeof(Cand), cmp_cand, &nkeys);
	MemoryContextSwitchTo(old);
}

/* A round's candidates as the search re-ranked them (exact distances in rank units, sorted). */
static void
take_exact(IndexScanDesc scan, const int64 *ids, const float *dists, int64 n)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->base.cxt);

	if (so->cands)
		pfree(so->cands);
	so->cands = palloc_extended(sizeof(Cand) * Max(n, 1), MCXT_ALLOC_HUGE);
	so->ncands = n;
	so->pos = 0;
	for (int64 i = 0; i < n; i++)
	{
		so->cands[i].id = ids[i];
		so->cands[i].d = palloc(sizeof(double));
		so->cands[i].d[0] = vs_rank_value(so->base.ref.metric, dists[i]);
	}
	MemoryContextSwitchTo(old);
}

static void
scan_start(IndexScanDesc scan)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext old;
	VsScanKeys	keys;

	vs_scan_keys(scan, &keys);
	if (keys.empty)
	{
		so->base.done = true;
		return;
	}
	old = MemoryContextSwitchTo(so->base.cxt);
	so->probes = Max(vs_ivfpq_probes, 1);
	so->rerank = Max(vs_ivfpq_rerank, 1);
	so->first_round = true;
	so->ordered = keys.norderbys > 0;
	so->norderbys = keys.norderbys;
	so->queries = keys.queries;

	so->has_range = keys.nranges > 0;
	if (so->has_range)
		vs_scan_range_rows(&so->base, &keys);
	if (so->has_range && so->ordered)
	{
		int64		ncand;
		int64	   *cand = vs_range_rows_array(so->base.rows, &ncand);

		/* one round: the range candidates in exact order */
		if (ncand == 0)
			so->base.done = true;
		else
			rerank(scan, cand, ncand);
		pfree(cand);
		so->last_round = true;
	}
	if (so->ordered && !so->has_range)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(int64);
		ctl.hcxt = so->base.cxt;
		so->seen = hash_create("vs_ivfpq seen", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	MemoryContextSwitchTo(old);
	vs_search_trim_cache();
}

/* The next round of an ORDER BY scan: new candidates, re-ranked.  False when none is left. */
static bool
next_round(IndexScanDesc scan)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;

	while (!so->last_round)
	{
		MemoryContext old = MemoryContextSwitchTo(so->base.cxt);
		int			lists = (int) VsIvfpqRefLists(&so->base.ref);
		int64	   *newids;
		int64		nnew = 0;
		int64		cap;
		int64		k = 0;
		int64		count = 0;
		int64	   *ids = NULL;
		float	   *dists = NULL;
		int64	   *pending = NULL;
		int64		npending = 0;
		/* more than the index held when the scan began: the window is exhausted below k */
		int64		entries = (int64) Min(so->base.ref.ntuples, (uint64) INT_MAX);
		bool		window_done = true;
		float	   *newdists;
		/* the search itself re-ranks from the stored vectors (pending entries need the backend's) */
		bool		exact = vs_ivfpq_exact_rerank(&so->base.ref) && so->norderbys == 1;

		CHECK_FOR_INTERRUPTS();
		if (lists > 0 && so->offset < lists)
		{
			/*
			 * The round asks for `want` entries, first for no more than the index held when the
			 * scan began (+1 to see the window end), then for more while that bound is what cut
			 * it: concurrent inserts (and dead entries not yet vacuumed) can make the window hold
			 * more, and an entry left out of this round would come after its rows, out of order.
			 */
			int64		want = so->stage_k == 0 ? so->rerank : so->stage_k * VS_IVFPQ_GROWTH;

			want = Min(want, (int64) INT_MAX);
			k = Min(want, entries + 1);
			for (;;)
			{
				ids = palloc_extended(sizeof(int64) * Max(k, 1), MCXT_ALLOC_HUGE);
				dists = palloc_extended(sizeof(float) * Max(k, 1), MCXT_ALLOC_HUGE);
				vs_ivfpq_search_candidates(&so->base.ref, so->queries[0], 1, so->offset,
										   so->probes, (int) k, exact, ids, dists, &count);
				count = Min(count, k);
				if (count < k || k >= want)
					break;
				pfree(ids);
				pfree(dists);
				k = Min(want, k * VS_IVFPQ_GROWTH);
			}
			window_done = count < k;
		}
		if (so->first_round)
			pending = vs_ivfpq_pending_ids(&so->base.ref, &npending);
		cap = count + npending;
		newids = palloc_extended(sizeof(int64) * Max(cap, 1), MCXT_ALLOC_HUGE);
		newdists = palloc_extended(sizeof(float) * Max(cap, 1), MCXT_ALLOC_HUGE);
		for (int64 i = 0; i < npending; i++)
		{
			bool		found;

			hash_search(so->seen, &pending[i], HASH_ENTER, &found);
			if (!found)
				newids[nnew++] = pending[i];
		}
		if (pending)
			pfree(pending);
		for (int64 i = 0; i < count; i++)
		{
			bool		found;

			if (ids[i] < 0)
				continue;
			hash_search(so->seen, &ids[i], HASH_ENTER, &found);
			if (!found)
			{
				newdists[nnew] = dists[i];
				newids[nnew++] = ids[i];
			}
		}
		so->first_round = false;
		if (window_done)
		{
			so->offset += so->probes;
			so->stage_k = 0;
			if (lists == 0 || so->offset >= lists)
				so->last_round = true;
		}
		else
			so->stage_k = k;
		if (ids)
		{
			pfree(ids);
			pfree(dists);
		}
		MemoryContextSwitchTo(old);

		if (exact)
			take_exact(scan, newids, newdists, nnew);
		else
			rerank(scan, newids, nnew);
		pfree(newids);
		pfree(newdists);
		vs_search_trim_cache();
		if (so->ncands > 0)
			return true;
	}
	return false;
}

bool
vs_ivfpq_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "vs_ivfpq indexes only scan forward");
	if (!so->base.started)
		scan_start(scan);
	if (so->base.done)
		return false;

	if (so->ordered)
	{
		Cand	   *cand;

		if (so->pos >= so->ncands && (so->has_range || !next_round(scan)))
		{
			so->base.done = true;
			return false;
		}
		cand = &so->cands[so->pos++];
		vs_id_to_tid(cand->id, &scan->xs_heaptid);
		for (int i = 0; i < scan->numberOfOrderBys; i++)
		{
			scan->xs_orderbyvals[i] = Float8GetDatum(cand->d[i]);
			scan->xs_orderbynulls[i] = false;
		}
		scan->xs_recheckorderby = false;
		scan->xs_recheck = so->has_range;
		return true;
	}

	{
		int64		id;

		if (!vs_range_rows_next(so->base.rows, &id))
		{
			so->base.done = true;
			return false;
		}
		vs_id_to_tid(id, &scan->xs_heaptid);
	}
	scan->xs_recheck = true;
	return true;
}

int64
vs_ivfpq_getbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	int64		n;

	if (!so->base.started)
		scan_start(scan);
	if (so->base.done || so->ordered)
		return 0;
	n = vs_scan_bitmap(tbm, so->base.rows, true);
	so->base.done = true;
	return n;
}
