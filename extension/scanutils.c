/*
 * What every vsearch index scan shares (amutils.h): the scan's state and memory context, its keys,
 * the rows of its range quals, and bitmaps.
 */
#include "postgres.h"

#include "access/relscan.h"
#include "catalog/pg_operator_d.h"
#include "catalog/pg_type_d.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/tuplesort.h"

#include "amutils.h"

IndexScanDesc
vs_scan_begin(Relation index, int nkeys, int norderbys, Size opaque_size)
{
	IndexScanDesc scan = RelationGetIndexScan(index, nkeys, norderbys);
	VsScanBase *so = (VsScanBase *) palloc0(opaque_size);

	so->cxt = AllocSetContextCreate(CurrentMemoryContext, "vsearch index scan",
									ALLOCSET_DEFAULT_SIZES);
	so->size = opaque_size;
	scan->opaque = so;
	if (norderbys > 0)
	{
		/* the AM provides these (as GiST and SP-GiST do) */
		scan->xs_orderbyvals = palloc0(sizeof(Datum) * norderbys);
		scan->xs_orderbynulls = palloc(sizeof(bool) * norderbys);
		memset(scan->xs_orderbynulls, true, sizeof(bool) * norderbys);
	}
	return scan;
}

void
vs_scan_rescan(IndexScanDesc scan, ScanKey keys, ScanKey orderbys)
{
	VsScanBase *so = (VsScanBase *) scan->opaque;
	MemoryContext cxt = so->cxt;
	Size		size = so->size;

	if (so->rows)
		vs_range_rows_end(so->rows);
	MemoryContextReset(cxt);
	memset(so, 0, size);
	so->cxt = cxt;
	so->size = size;

	if (keys && scan->numberOfKeys > 0)
		memmove(scan->keyData, keys, scan->numberOfKeys * sizeof(ScanKeyData));
	if (orderbys && scan->numberOfOrderBys > 0)
		memmove(scan->orderByData, orderbys, scan->numberOfOrderBys * sizeof(ScanKeyData));
}

void
vs_scan_end(IndexScanDesc scan)
{
	VsScanBase *so = (VsScanBase *) scan->opaque;

	if (so->rows)
		vs_range_rows_end(so->rows);
	MemoryContextDelete(so->cxt);
	pfree(so);
	scan->opaque = NULL;
}

/* A query vector of the scan as float[dim]: ERROR 22000 if its dimension differs. */
static float *
query_floats(const VsIndexRef *ref, Vector *vec)
{
	float	   *x;

	vector_check_same_dim(ref->dim, vec->dim);
	x = palloc(sizeof(float) * vec->dim);
	memcpy(x, vec->x, sizeof(float) * vec->dim);
	return x;
}

void
vs_scan_require_keys(IndexScanDesc scan)
{
	const VsIndexKind *kind = vs_kind_of_index(scan->indexRelation);

	if (scan->numberOfKeys == 0 && scan->numberOfOrderBys == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s index \"%s\" cannot be scanned without an ORDER BY distance or a range condition",
						kind ? kind->name : "vsearch", RelationGetRelationName(scan->indexRelation)),
				 errdetail("Rows whose key is NULL have no entry in the index."),
				 errhint("Scan the table instead.")));
}

void
vs_scan_started(IndexScanDesc scan)
{
	((VsScanBase *) scan->opaque)->started = true;
	pgstat_count_index_scan(scan->indexRelation);
}

void
vs_scan_keys(IndexScanDesc scan, VsScanKeys *keys)
{
	VsScanBase *so = (VsScanBase *) scan->opaque;
	MemoryContext old;
	Vector	  **centers = NULL;
	bool		sparse = vs_index_is_sparsevec(scan->indexRelation);

	vs_scan_require_keys(scan);
	old = MemoryContextSwitchTo(so->cxt);
	vs_scan_started(scan);
	vs_index_ref(scan->indexRelation, &so->ref);
	memset(keys, 0, sizeof(*keys));

	/* Check every key before searching: NULLs match nothing, bad radii are errors. */
	keys->nranges = scan->numberOfKeys;
	if (keys->nranges > 0)
	{
		centers = palloc(sizeof(Vector *) * keys->nranges);
		keys->centers = palloc0(sizeof(float *) * keys->nranges);
		keys->radii = palloc(sizeof(double) * keys->nranges);
	}
	for (int i = 0; i < keys->nranges; i++)
	{
		ScanKey		key = &scan->keyData[i];

		if (key->sk_strategy != VS_RANGE_STRATEGY)
			elog(ERROR, "%s: unexpected scan strategy %d",
				 vs_ref_kind(&so->ref)->name, key->sk_strategy);
		if ((key->sk_flags & SK_ISNULL) ||
			!vs_sphere_get(key->sk_argument, &centers[i], &keys->radii[i]))
			keys->empty = true;
		else
			vs_check_radius(so->ref.metric, keys->radii[i]);
	}
	keys->norderbys = scan->numberOfOrderBys;
	if (keys->norderbys > 0)
		keys->queries = palloc0(sizeof(float *) * keys->norderbys);
	for (int i = 0; i < keys->norderbys; i++)
	{
		ScanKey		key = &scan->orderByData[i];

		if (key->sk_flags & SK_ISNULL)
			keys->empty = true;
		else if (so->ref.dim > 0)
			keys->queries[i] = query_floats(&so->ref, vs_index_vector(key->sk_argument, sparse));
	}
	if (so->ref.dim == 0)
		keys->empty = true;		/* an index that never held a vector */
	if (!keys->empty)
		for (int i = 0; i < keys->nranges; i++)
			keys->centers[i] = query_floats(&so->ref, centers[i]);
	MemoryContextSwitchTo(old);
}

/* ---- the rows of range quals ---- */

struct VsRangeRows
{
	const VsIndexRef *ref;
	int			nquals;
	int			nadded;
	Tuplesortstate **sorts;		/* one per qual */
	bool		sorted;
	bool		done;
	int64	   *cur;			/* per qual: its current row */
	bool		have_last;
	int64		last;			/* the last row returned */
};

VsRangeRows *
vs_range_rows_begin(VsScanBase *base, int nquals)
{
	MemoryContext old = MemoryContextSwitchTo(base->cxt);
	VsRangeRows *rows = palloc0(sizeof(VsRangeRows));

	rows->ref = &base->ref;
	rows->nquals = nquals;
	rows->sorts = palloc0(sizeof(Tuplesortstate *) * Max(nquals, 1));
	rows->cur = palloc0(sizeof(int64) * Max(nquals, 1));
	base->rows = rows;
	MemoryContextSwitchTo(old);
	return rows;
}

static void
sort_chunk(void *arg, const VsRangeChunk *chunk)
{
	Tuplesortstate *sort = (Tuplesortstate *) arg;
	int64		n = chunk->offsets[chunk->nq];

	for (int64 i = 0; i < n; i++)
	{
		if (chunk->ids[i] >= 0)
			tuplesort_putdatum(sort, Int64GetDatum(chunk->ids[i]), false);
		if ((i & 8191) == 8191)
			CHECK_FOR_INTERRUPTS();
	}
}

void
vs_range_rows_add(VsRangeRows *rows, const VsQueries *center, double radius)
{
	Tuplesortstate *sort;

	Assert(rows->nadded < rows->nquals && center->nq == 1);
	/* the sort lives in the scan's context, as rows do */
	sort = tuplesort_begin_datum(INT8OID, Int8LessOperator, InvalidOid, false, work_mem, NULL,
								 TUPLESORT_NONE);
	rows->sorts[rows->nadded++] = sort;
	vs_ref_kind(rows->ref)->range_candidates(rows->ref, center, radius, sort_chunk, sort);
}

/* The next row of qual i above `above` (any row when !have_above); false at its end. */
static bool
qual_next(VsRangeRows *rows, int i, bool have_above, int64 above)
{
	Datum		d;
	bool		isnull;

	for (;;)
	{
		if (!tuplesort_getdatum(rows->sorts[i], true, &d, &isnull, NULL))
			return false;
		rows->cur[i] = DatumGetInt64(d);
		if (!have_above || rows->cur[i] > above)
			return true;
	}
}

bool
vs_range_rows_next(VsRangeRows *rows, int64 *id)
{
	int64		target;
	bool		agree;

	if (rows->done || rows->nadded < rows->nquals || rows->nquals == 0)
		return false;
	if (!rows->sorted)
	{
		for (int i = 0; i < rows->nquals; i++)
			tuplesort_performsort(rows->sorts[i]);
		rows->sorted = true;
	}
	/* every qual's next row above the last one returned, until they all agree */
	for (int i = 0; i < rows->nquals; i++)
		if (!qual_next(rows, i, rows->have_last, rows->last))
		{
			rows->done = true;
			return false;
		}
	do
	{
		target = rows->cur[0];
		for (int i = 1; i < rows->nquals; i++)
			target = Max(target, rows->cur[i]);
		agree = true;
		for (int i = 0; i < rows->nquals; i++)
		{
			if (rows->cur[i] == target)
				continue;
			agree = false;
			if (!qual_next(rows, i, true, target - 1))
			{
				rows->done = true;
				return false;
			}
		}
	} while (!agree);
	rows->have_last = true;
	rows->last = target;
	*id = target;
	return true;
}

int64 *
vs_range_rows_array(VsRangeRows *rows, int64 *n)
{
	int64		cap = 1024;
	int64	   *ids = palloc(sizeof(int64) * cap);
	int64		id;

	*n = 0;
	while (vs_range_rows_next(rows, &id))
	{
		if (*n == cap)
		{
			cap *= 2;
			ids = repalloc_huge(ids, sizeof(int64) * cap);
		}
		ids[(*n)++] = id;
	}
	return ids;
}

void
vs_range_rows_end(VsRangeRows *rows)
{
	for (int i = 0; i < rows->nadded; i++)
		tuplesort_end(rows->sorts[i]);
	rows->nadded = 0;
	rows->done = true;
}

void
vs_scan_range_rows(VsScanBase *base, const VsScanKeys *keys)
{
	MemoryContext old = MemoryContextSwitchTo(base->cxt);
	VsRangeRows *rows = vs_range_rows_begin(base, keys->nranges);

	for (int i = 0; i < keys->nranges; i++)
	{
		VsQueries	q = vs_vector_queries(keys->centers[i], 1);

		vs_range_rows_add(rows, &q, keys->radii[i]);
	}
	MemoryContextSwitchTo(old);
}

int64
vs_scan_bitmap(TIDBitmap *tbm, VsRangeRows *rows, bool recheck)
{
	ItemPointerData tids[256];
	int			k = 0;
	int64		n = 0;
	int64		id;

	while (vs_range_rows_next(rows, &id))
	{
		vs_id_to_tid(id, &tids[k++]);
		n++;
		if (k == lengthof(tids))
		{
			tbm_add_tuples(tbm, tids, k, recheck);
			k = 0;
			CHECK_FOR_INTERRUPTS();
		}
	}
	if (k > 0)
		tbm_add_tuples(tbm, tids, k, recheck);
	return n;
}
