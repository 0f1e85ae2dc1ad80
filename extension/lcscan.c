/*
 * vs_lc and vs_sss: index scans (amgettuple, amgetbitmap).  The searches go through the search
 * layer (search.h): to the GPU worker when it serves, else on this backend's CPU, on the kind's
 * engine object (lcsearch.c), with the query as a vector or the characters of a text.
 *
 * WHERE col <<->> sphere(q, r) / <<+>> / text: col <<~>> sphere('word'::text, r)
 *   One range search per qual (vsearch/lc.h, vsearch/sss.h), which finds exactly the rows the
 *   operator accepts; the rows found by every qual are the answer (no recheck).
 *
 * ORDER BY col <-> q / <+> / <~>
 *   kNN searches with k = 64, then k times 4 while the executor asks for more, skipping
 *   the rows already returned (searches order by (distance, row id), so everything at or before the
 *   last returned pair was returned).  The distances are the operators' own values, so the
 *   executor neither rechecks nor reorders.  With range quals too, the stream is filtered to their
 *   rows and ends once all of them have been returned.
 *
 * A NULL query or sphere (or one with a NULL part) matches no row; a vector query of another
 * dimension is an error (22000), an invalid radius too (22023), as with the operators.
 */
#include "postgres.h"

#include <limits.h>

#include "access/relscan.h"
#include "miscadmin.h"
#include "utils/float.h"
#include "utils/memutils.h"

#include "lc.h"
#include "vector.h"

#define VS_LC_FIRST_BATCH	64
#define VS_LC_GROWTH		4

typedef struct LcScanOpaqueData
{
	VsScanBase	base;			/* cxt, started, done, ref */
	bool		text;

	/* ORDER BY */
	bool		ordered;
	VsLcValue	query;
	uint64		query_offsets[2];
	int			k;
	bool		exhausted;
	int64	   *ids;
	float	   *dists;			/* rank units (search.h) */
	int64		count;
	int64		pos;
	bool		have_last;
	double		last_dist;
	int64		last_id;

	/* rows of the range quals, ascending ids */
	bool		has_range;		/* the rows passing every range qual: base.rows */
	int64	   *cand;			/* ordered: all of them, ascending */
	int64		ncand;
	int64		cand_returned;
} LcScanOpaqueData;

typedef LcScanOpaqueData *LcScanOpaque;

IndexScanDesc
vs_metric_beginscan(Relation index, int nkeys, int norderbys)
{
	return vs_scan_begin(index, nkeys, norderbys, sizeof(LcScanOpaqueData));
}

void
vs_metric_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	vs_scan_rescan(scan, keys, orderbys);	/* zeroes the opaque past its base */
}

VsQueries
vs_metric_query(bool text, VsLcValue q, uint64 *offsets)
{
	VsQueries	qs;

	memset(&qs, 0, sizeof(qs));
	qs.nq = 1;
	if (text)
	{
		offsets[0] = 0;
		offsets[1] = (uint64) q.len;
		qs.offsets = offsets;
		qs.chars = q.data;
	}
	else
		qs.vectors = q.data;
	return qs;
}

/* A query of the scan (a vector of the index's dimension, or a text's characters). */
static VsLcValue
query_value(LcScanOpaque so, Datum datum)
{
	VsLcValue	v;

	if (so->text)
	{
		v.data = vs_text_chars(DatumGetTextPP(datum), &v.len);
		return v;
	}
	else
	{
		Vector	   *vec = vs_datum_vector(datum);
		float	   *x;

		vector_check_same_dim(so->base.ref.dim, vec->dim);
		x = palloc(sizeof(float) * vec->dim);
		memcpy(x, vec->x, sizeof(float) * vec->dim);
		v.data = x;
		v.len = vec->dim;
	}
	return v;
}

static void
scan_start(IndexScanDesc scan)
{
	LcScanOpaque so = (LcScanOpaque) scan->opaque;
	MemoryContext old = MemoryContextSwitchTo(so->base.cxt);
	int			nranges = scan->numberOfKeys;
	Datum	   *centers = palloc0(sizeof(Datum) * (nranges + 1));
	double	   *radii = palloc0(sizeof(double) * (nranges + 1));
	bool		empty = false;
	bool		have_query = false;

	vs_scan_require_keys(scan);
	vs_scan_started(scan);
	vs_index_ref(scan->indexRelation, &so->base.ref);
	so->text = (int) so->base.ref.metric == VS_METRIC_LEVENSHTEIN;

	/* Check every key before searching: NULLs match nothing, bad radii are errors. */
	for (int i = 0; i < nranges; i++)
	{
		ScanKey		key = &scan->keyData[i];
		bool		ok;

		if (key->sk_strategy != VS_RANGE_STRATEGY)
			elog(ERROR, "vs_lc: unexpected scan strategy %d", key->sk_strategy);
		if (key->sk_flags & SK_ISNULL)
		{
			empty = true;
			continue;
		}
		if (so->text)
		{
			text	   *c;

			ok = vs_text_sphere_get(key->sk_argument, &c, &radii[i]);
			if (ok)
			{
				vs_check_text_radius(radii[i]);
				centers[i] = PointerGetDatum(c);
			}
		}
		else
		{
			Vector	   *c;

			ok = vs_sphere_get(key->sk_argument, &c, &radii[i]);
			if (ok)
			{
				vs_check_radius(so->base.ref.metric, radii[i]);
				centers[i] = PointerGetDatum(c);
			}
		}
		if (!ok)
			empty = true;
	}
	so->ordered = scan->numberOfOrderBys > 0;
	if (so->ordered)
	{
		ScanKey		key = &scan->orderByData[0];

		if (key->sk_flags & SK_ISNULL)
			empty = true;
		else
			have_query = true;
	}
	if (so->base.ref.ntuples == 0 || (!so->text && so->base.ref.dim == 0))
		empty = true;			/* an empty index, or one that never held a vector */
	if (empty)
	{
		so->base.done = true;
		MemoryContextSwitchTo(old);
		return;
	}
	if (have_query)
		so->query = query_value(so, scan->orderByData[0].sk_argument);

	/* One range search per qual; the rows every one of them found. */
	so->has_range = nranges > 0;
	if (so->has_range)
	{
		VsRangeRows *rows = vs_range_rows_begin(&so->base, nranges);

		for (int i = 0; i < nranges; i++)
		{
			uint64		offsets[2];
			VsQueries	q = vs_metric_query(so->text, query_value(so, centers[i]), offsets);

			vs_range_rows_add(rows, &q, radii[i]);
		}
		if (so->ordered)
		{
			so->cand = vs_range_rows_array(rows, &so->ncand);
			if (so->ncand == 0)
				so->base.done = true;
		}
	}
	MemoryContextSwitchTo(old);
}

static void
next_batch(LcScanOpaque so)
{
	MemoryContext old;
	int64		k;

	if (so->k == 0)
	{
		k = VS_LC_FIRST_BATCH;
		if (so->has_range)
			k = Max(k, so->ncand + VS_LC_FIRST_BATCH);
	}
	else
	{
		if (so->k == INT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("ordered scan cannot return more than %d rows", INT_MAX)));
		k = (int64) so->k * VS_LC_GROWTH;
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

	{
		VsQueries	q = vs_metric_query(so->text, so->query, so->query_offsets);
		int64		count = 0;

		vs_search_knn_queries(&so->base.ref, NULL, &q, (int) k, so->ids, so->dists, &count);
		so->count = count;
	}
	so->k = (int) k;
	so->pos = 0;
	so->exhausted = so->count < k;
}

static int
cmp_pair(double d1, int64 id1, double d2, int64 id2)
{
	if (d1 != d2)
		return d1 < d2 ? -1 : 1;
	return id1 < id2 ? -1 : (id1 > id2 ? 1 : 0);
}

static bool
next_ordered(LcScanOpaque so, int64 *id, double *dist)
{
	for (;;)
	{
		while (so->pos < so->count)
		{
			int64		i = so->ids[so->pos];
			double		d = vs_rank_value(so->base.ref.metric, so->dists[so->pos]);

			so->pos++;
			if (so->have_last && cmp_pair(d, i, so->last_dist, so->last_id) <= 0)
				continue;		/* returned by an earlier, smaller search */
			so->have_last = true;
			so->last_dist = d;
			so->last_id = i;
			if (so->has_range)
			{
				if (bsearch(&i, so->cand, so->ncand, sizeof(int64), vs_cmp_int64) == NULL)
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
		next_batch(so);
	}
}

bool
vs_metric_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	LcScanOpaque so = (LcScanOpaque) scan->opaque;
	int64		id;

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "%s indexes only scan forward", RelationGetRelationName(scan->indexRelation));
	if (!so->base.started)
		scan_start(scan);
	if (so->base.done)
		return false;

	if (so->ordered)
	{
		double		dist;

		if (!next_ordered(so, &id, &dist))
		{
			so->base.done = true;
			return false;
		}
		vs_id_to_tid(id, &scan->xs_heaptid);
		scan->xs_orderbyvals[0] = Float8GetDatum(dist);
		scan->xs_orderbynulls[0] = false;
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
vs_metric_getbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	LcScanOpaque so = (LcScanOpaque) scan->opaque;
	int64		n;

	if (!so->base.started)
		scan_start(scan);
	if (so->base.done || !so->has_range)
		return 0;
	n = vs_scan_bitmap(tbm, so->base.rows, false);
	so->base.done = true;
	return n;
}
