/*
 * vs_ivfpq: index scans (amgettuple, amgetbitmap) and the candidate searches shared with the batch
 * functions.
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
#include "vsearch/engine.h"
#include "worker.h"

#define VS_IVFPQ_GROWTH		4

typedef struct Cand
{
	int64		id;
	double	   *d;				/* norderbys exact distances */
} Cand;

typedef struct IvfpqScanOpaqueData
{
	MemoryContext cxt;
	bool		started;
	bool		done;			/* nothing (more) to return */
	VsIndexRef	ref;
	VsIvfpqMetaPageData meta;

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

	/* range quals */
	bool		has_range;
	int64	   *cand_ids;		/* ascending */
	int64		ncand_ids;
	int64		cand_pos;

	/* heap access for the re-rank (store_vectors = off) */
	IndexFetchTableData *fetch;
	TupleTableSlot *slot;
	AttrNumber	attnum;
} IvfpqScanOpaqueData;

typedef IvfpqScanOpaqueData *IvfpqScanOpaque;

int			vs_ivfpq_probes = 10;
int			vs_ivfpq_rerank = 100;

/* ---------------------------------------------------------------------------------------------
 * Candidate searches
 */

static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

/*
 * The k entries with the smallest estimated distance in lists ranked [probe_offset,
 * probe_offset + nprobe) of each query (ids/dists nq x k, counts nq).  Pending entries are not
 * included (vs_ivfpq_pending_ids).  The GPU worker answers when it serves (worker.h, with
 * vs_flat's fallback rules); otherwise the backend's cached object, which stays until the caller's
 * vs_ivfpq_trim_cache().  Both return the same candidates (the engine's backends agree by
 * contract, and both objects are built from the pages by vs_ivfpq_contents_object).
 */
void
vs_ivfpq_search_candidates(const VsIndexRef *ref, const float *queries, int nq, int probe_offset,
						   int nprobe, int k, int64 *ids, float *dists, int64 *counts)
{
	VsIvfpqCached *c;
	int			retries = 0;

	if (ref->ivf_lists == 0 || k <= 0 || probe_offset < 0 || probe_offset >= (int) ref->ivf_lists)
	{
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	if (vs_worker_ivfpq_knn(ref, queries, nq, probe_offset, nprobe, k, ids, dists, counts))
		return;
	c = vs_ivfpq_get_cached(ref);
	if (c->ivf == NULL)
	{
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	for (;;)
	{
		vs_status	st = vs_ivfpq_search(vs_backend_engine(), c->ivf, queries, (size_t) nq,
										 (size_t) probe_offset, (size_t) nprobe, (size_t) k,
										 (int64_t *) ids, dists, (int64_t *) counts);

		if (st == VS_OK)
			return;
		if (st != VS_CANCELLED)
			vs_engine_error(st);
		vs_engine_cancelled(&retries);
	}
}

/*
 * The pending (unquantized) entries of the index as of ref: *n ids, palloc'd in the current context
 * (NULL when none).  Only an index without a quantizer has any (inserts into a trained index go to
 * its lists), so they come from the backend's cached copy, which for such an index holds nothing
 * else; the GPU worker never sees them.  Entries inserted after ref was taken are invisible to
 * the scan's snapshot, so ref's pending count decides whether there are any to take.
 */
int64 *
vs_ivfpq_pending_ids(const VsIndexRef *ref, int64 *n)
{
	VsIvfpqCached *c;
	int64	   *ids;

	*n = 0;
	if (ref->ivf_npending == 0)
		return NULL;
	c = vs_ivfpq_get_cached(ref);
	if (c->npending == 0)
		return NULL;
	ids = palloc_extended(sizeof(int64) * c->npending, MCXT_ALLOC_HUGE);
	memcpy(ids, c->pending_ids, sizeof(int64) * c->npending);
	*n = c->npending;
	return ids;
}

/* Every entry of the first nprobe lists whose estimate is <= radius, and every pending entry. */
void
vs_ivfpq_range_candidates(const VsIndexRef *ref, const float *queries, int nq, int nprobe,
						  double radius, VsRangeResult *out)
{
	vs_range_result res;
	VsRangeResult wres;
	bool		from_worker = false;
	int			retries = 0;
	float		fr;
	int64		total;
	int64		npending = 0;
	int64	   *pending;
	const int64 *roff = NULL;
	const int64 *rids = NULL;
	const float *rdist = NULL;
	int64		rtotal = 0;

	memset(&res, 0, sizeof(res));
	memset(&wres, 0, sizeof(wres));
	/* the smallest float >= radius: a candidate superset */
	if (radius >= (double) FLT_MAX)
		fr = INFINITY;
	else if (radius < -(double) FLT_MAX)
		fr = -FLT_MAX;
	else
	{
		fr = (float) radius;
		if ((double) fr < radius)
			fr = nextafterf(fr, INFINITY);
	}

	if (ref->ivf_lists > 0 && nq > 0)
	{
		if (vs_worker_ivfpq_range(ref, queries, nq, 0, nprobe, fr, &wres))
		{
			from_worker = true;
			roff = wres.offsets;
			rids = wres.ids;
			rdist = wres.distances;
			rtotal = wres.total;
		}
		else
		{
			VsIvfpqCached *c = vs_ivfpq_get_cached(ref);

			if (c->ivf != NULL)
			{
				for (;;)
				{
					vs_status	st = vs_ivfpq_range(vs_backend_engine(), c->ivf, queries,
													(size_t) nq, 0, (size_t) nprobe, fr,
													range_alloc, NULL, &res);

					if (st == VS_OK)
						break;
					if (st == VS_OUT_OF_MEMORY)
						ereport(ERROR,
								(errcode(ERRCODE_OUT_OF_MEMORY),
								 errmsg("out of memory"),
								 errdetail("vsearch engine: %s",
										   vs_last_error(vs_backend_engine()))));
					if (st != VS_CANCELLED)
						vs_engine_error(st);
					vs_engine_cancelled(&retries);
				}
				roff = (const int64 *) res.offsets;
				rids = (const int64 *) res.ids;
				rdist = res.distances;
				rtotal = (int64) res.total;
			}
		}
	}
	pending = vs_ivfpq_pending_ids(ref, &npending);

	/* add the pending entries to every query */
	total = rtotal + (int64) nq * npending;
	out->nq = nq;
	out->total = total;
	out->offsets = palloc(sizeof(int64) * (nq + 1));
	out->ids = palloc_extended(sizeof(int64) * Max(total, 1), MCXT_ALLOC_HUGE);
	out->distances = palloc_extended(sizeof(float) * Max(total, 1), MCXT_ALLOC_HUGE);
	out->offsets[0] = 0;
	for (int q = 0; q < nq; q++)
	{
		int64		o = out->offsets[q];

		if (roff != NULL)
		{
			int64		from = roff[q];
			int64		n = roff[q + 1] - from;

			memcpy(out->ids + o, rids + from, sizeof(int64) * n);
			memcpy(out->distances + o, rdist + from, sizeof(float) * n);
			o += n;
		}
		for (int64 i = 0; i < npending; i++)
		{
			out->ids[o] = pending[i];
			out->distances[o] = NAN;
			o++;
		}
		out->offsets[q + 1] = o;
	}
	if (pending)
		pfree(pending);
	if (from_worker)
	{
		pfree(wres.offsets);
		pfree(wres.ids);
		pfree(wres.distances);
	}
	if (res.offsets)
		pfree(res.offsets);
	if (res.ids)
		pfree(res.ids);
	if (res.distances)
		pfree(res.distances);
}

/* ---------------------------------------------------------------------------------------------
 * Scan setup
 */

IndexScanDesc
vs_ivfpq_beginscan(Relation index, int nkeys, int norderbys)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	IvfpqScanOpaque so = (IvfpqScanOpaque) palloc0(sizeof(IvfpqScanOpaqueData));

	so->cxt = AllocSetContextCreate(CurrentMemoryContext, "vs_ivfpq scan", ALLOCSET_DEFAULT_SIZES);
	scan->opaque = so;
	if (norderbys > 0)
	{
		scan->xs_orderbyvals = palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
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
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext cxt = so->cxt;

	release_fetch(so);
	MemoryContextReset(cxt);
	memset(so, 0, sizeof(IvfpqScanOpaqueData));
	so->cxt = cxt;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
}

void
vs_ivfpq_endscan(IndexScanDesc scan)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;

	release_fetch(so);
	MemoryContextDelete(so->cxt);
	pfree(so);
	scan->opaque = NULL;
}

static float *
query_floats(IvfpqScanOpaque so, Vector *vec)
{
	float	   *x;

	vector_check_same_dim(so->ref.dim, vec->dim);
	x = palloc(sizeof(float) * vec->dim);
	memcpy(x, vec->x, sizeof(float) * vec->dim);
	return x;
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

/*
 * Exact distances of candidate ids for every ORDER BY key, into so->cands (sorted).  Rows the scan's
 * snapshot cannot see are dropped when they are read from the heap.
 */
static void
rerank(IndexScanDesc scan, const int64 *ids, int64 n)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->cxt);
	VsIvfpqCached *c = NULL;
	uint32		dim = so->ref.dim;
	int			nkeys = Max(so->norderbys, 1);

	if (so->cands)
		pfree(so->cands);
	so->cands = palloc_extended(sizeof(Cand) * Max(n, 1), MCXT_ALLOC_HUGE);
	so->ncands = 0;
	so->pos = 0;

	if (so->meta.store_vectors)
		c = vs_ivfpq_get_cached(&so->ref);
	else if (so->fetch == NULL)
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
		const float *x = NULL;
		Vector	   *v = NULL;
		Pointer		raw = NULL;
		Cand	   *cand;

		if ((i & 255) == 0)
			CHECK_FOR_INTERRUPTS();
		if (c != NULL)
		{
			x = vs_ivfpq_cached_vector(c, ids[i]);
			if (x == NULL)
				continue;
		}
		else
		{
			ItemPointerData tid;
			bool		call_again = false;
			bool		all_dead = false;
			bool		isnull;
			Datum		value;

			vs_id_to_tid(ids[i], &tid);
			if (!table_index_fetch_tuple(so->fetch, &tid, scan->xs_snapshot, so->slot,
										 &call_again, &all_dead))
				continue;		/* invisible to the scan: the executor would skip it too */
			value = slot_getattr(so->slot, so->attnum, &isnull);
			if (isnull)
			{
				ExecClearTuple(so->slot);
				continue;
			}
			raw = DatumGetPointer(value);
			v = DatumGetVectorP(value);
			if ((uint32) v->dim != dim)
			{
				ExecClearTuple(so->slot);
				continue;
			}
			x = v->x;
		}
		cand = &so->cands[so->ncands++];
		cand->id = ids[i];
		cand->d = palloc(sizeof(double) * nkeys);
		for (int k = 0; k < nkeys; k++)
			cand->d[k] = so->queries && so->queries[k]
				? vs_distance_f32(so->ref.metric, x, so->queries[k], dim) : 0.0;
		if (v != NULL)
		{
			if ((Pointer) v != raw)
				pfree(v);		/* detoasted copy */
			ExecClearTuple(so->slot);
		}
	}
	if (so->ncands > 1)
		qsort_arg(so->cands, so->ncands, sizeof(Cand), cmp_cand, &nkeys);
	MemoryContextSwitchTo(old);
}

static void
scan_start(IndexScanDesc scan)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->cxt);
	Vector	  **centers = NULL;
	double	   *radii = NULL;

	so->started = true;
	vs_ivfpq_ref(scan->indexRelation, &so->ref, &so->meta);
	so->probes = Max(vs_ivfpq_probes, 1);
	so->rerank = Max(vs_ivfpq_rerank, 1);
	so->first_round = true;

	if (scan->numberOfKeys > 0)
	{
		centers = palloc(sizeof(Vector *) * scan->numberOfKeys);
		radii = palloc(sizeof(double) * scan->numberOfKeys);
	}
	for (int i = 0; i < scan->numberOfKeys; i++)
	{
		ScanKey		key = &scan->keyData[i];

		if (key->sk_strategy != VS_IVFPQ_RANGE_STRATEGY)
			elog(ERROR, "vs_ivfpq: unexpected scan strategy %d", key->sk_strategy);
		if ((key->sk_flags & SK_ISNULL) ||
			!vs_sphere_get(key->sk_argument, &centers[i], &radii[i]))
			so->done = true;
		else
			vs_check_radius(so->ref.metric, radii[i]);
	}
	if (scan->numberOfOrderBys > 0)
	{
		so->ordered = true;
		so->norderbys = scan->numberOfOrderBys;
		so->queries = palloc0(sizeof(float *) * so->norderbys);
		for (int i = 0; i < so->norderbys; i++)
		{
			ScanKey		key = &scan->orderByData[i];

			if (key->sk_flags & SK_ISNULL)
				so->done = true;
			else if (so->ref.dim > 0)
				so->queries[i] = query_floats(so, DatumGetVectorP(key->sk_argument));
		}
	}
	if (so->done || so->ref.dim == 0)
	{
		so->done = true;
		MemoryContextSwitchTo(old);
		return;
	}

	so->has_range = scan->numberOfKeys > 0;
	for (int i = 0; i < scan->numberOfKeys; i++)
	{
		float	   *center = query_floats(so, centers[i]);
		VsRangeResult result;
		int64		n;

		vs_ivfpq_range_candidates(&so->ref, center, 1, so->probes, radii[i], &result);
		n = vs_sort_ids(result.ids, result.total);
		if (i == 0)
		{
			so->cand_ids = result.ids;
			so->ncand_ids = n;
		}
		else
		{
			so->ncand_ids = vs_intersect_ids(so->cand_ids, so->ncand_ids, result.ids, n);
			pfree(result.ids);
		}
		pfree(result.distances);
		pfree(result.offsets);
		if (so->ncand_ids == 0)
		{
			so->done = true;
			break;
		}
	}
	if (so->has_range && so->ordered && !so->done)
	{
		/* one round: the range candidates in exact order */
		rerank(scan, so->cand_ids, so->ncand_ids);
		so->last_round = true;
	}
	else if (!so->has_range && !so->ordered)
	{
		/* neither (the planner avoids this): every entry, from the cached object */
		VsIvfpqContents contents;

		vs_ivfpq_read_index(&so->ref, false, &contents);
		so->cand_ids = palloc_extended(sizeof(int64) * Max(contents.n + contents.npending, 1),
									   MCXT_ALLOC_HUGE);
		if (contents.n > 0)
			memcpy(so->cand_ids, contents.ids, sizeof(int64) * contents.n);
		if (contents.npending > 0)
			memcpy(so->cand_ids + contents.n, contents.pending_ids,
				   sizeof(int64) * contents.npending);
		so->ncand_ids = vs_sort_ids(so->cand_ids, contents.n + contents.npending);
		so->has_range = true;	/* return them like range candidates */
	}
	if (so->ordered && !so->has_range)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(int64);
		ctl.entrysize = sizeof(int64);
		ctl.hcxt = so->cxt;
		so->seen = hash_create("vs_ivfpq seen", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	MemoryContextSwitchTo(old);
	vs_ivfpq_trim_cache();
}

/* The next round of an ORDER BY scan: new candidates, re-ranked.  False when none is left. */
static bool
next_round(IndexScanDesc scan)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;

	while (!so->last_round)
	{
		MemoryContext old = MemoryContextSwitchTo(so->cxt);
		int			lists = (int) so->ref.ivf_lists;
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
		int64		entries = (int64) Min(so->ref.ntuples, (uint64) INT_MAX);
		bool		window_done = true;

		CHECK_FOR_INTERRUPTS();
		if (lists > 0 && so->offset < lists)
		{
			k = so->stage_k == 0 ? so->rerank : so->stage_k * VS_IVFPQ_GROWTH;
			k = Min(k, entries + 1);
			k = Min(k, (int64) INT_MAX);
			ids = palloc_extended(sizeof(int64) * Max(k, 1), MCXT_ALLOC_HUGE);
			dists = palloc_extended(sizeof(float) * Max(k, 1), MCXT_ALLOC_HUGE);
			vs_ivfpq_search_candidates(&so->ref, so->queries[0], 1, so->offset, so->probes,
									   (int) k, ids, dists, &count);
			count = Min(count, k);
			window_done = count < k;
		}
		if (so->first_round)
			pending = vs_ivfpq_pending_ids(&so->ref, &npending);
		cap = count + npending;
		newids = palloc_extended(sizeof(int64) * Max(cap, 1), MCXT_ALLOC_HUGE);
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
				newids[nnew++] = ids[i];
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

		rerank(scan, newids, nnew);
		pfree(newids);
		vs_ivfpq_trim_cache();
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
	if (!so->started)
		scan_start(scan);
	if (so->done)
		return false;

	if (so->ordered)
	{
		Cand	   *cand;

		if (so->pos >= so->ncands && (so->has_range || !next_round(scan)))
		{
			so->done = true;
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

	if (so->cand_pos >= so->ncand_ids)
	{
		so->done = true;
		return false;
	}
	vs_id_to_tid(so->cand_ids[so->cand_pos++], &scan->xs_heaptid);
	scan->xs_recheck = true;
	return true;
}

int64
vs_ivfpq_getbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	IvfpqScanOpaque so = (IvfpqScanOpaque) scan->opaque;
	ItemPointerData tids[256];
	int64		total = 0;
	int			n = 0;

	if (!so->started)
		scan_start(scan);
	if (so->done || so->ordered)
		return 0;
	for (int64 i = 0; i < so->ncand_ids; i++)
	{
		vs_id_to_tid(so->cand_ids[i], &tids[n++]);
		if (n == lengthof(tids))
		{
			tbm_add_tuples(tbm, tids, n, true);
			total += n;
			n = 0;
		}
	}
	if (n > 0)
		tbm_add_tuples(tbm, tids, n, true);
	total += n;
	so->done = true;
	return total;
}
