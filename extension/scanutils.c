/*
 * What every vsearch index scan shares (amutils.h): the scan's state and memory context, its keys,
 * the rows of its range quals, and bitmaps.
 */
#include "postgres.h"

#include "access/relscan.h"
#include "utils/memutils.h"

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
vs_scan_keys(IndexScanDesc scan, VsScanKeys *keys)
{
	VsScanBase *so = (VsScanBase *) scan->opaque;
	MemoryContext old;
	Vector	  **centers = NULL;
	bool		sparse = vs_index_is_sparsevec(scan->indexRelation);

	vs_scan_require_keys(scan);
	old = MemoryContextSwitchTo(so->cxt);
	so->started = true;
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

bool
vs_scan_range_rows(const VsIndexRef *ref, const VsScanKeys *keys, int64 **ids, int64 *n)
{
	const VsIndexKind *kind = vs_ref_kind(ref);

	*ids = NULL;
	*n = 0;
	for (int i = 0; i < keys->nranges; i++)
	{
		VsRangeResult result;
		VsQueries	q = vs_vector_queries(keys->centers[i], 1);
		int64		m;

		kind->range_candidates(ref, &q, keys->radii[i], &result);
		m = vs_sort_ids(result.ids, result.total);
		if (i == 0)
		{
			*ids = result.ids;
			*n = m;
		}
		else
		{
			*n = vs_intersect_ids(*ids, *n, result.ids, m);
			if (result.ids)
				pfree(result.ids);
		}
		if (result.distances)
			pfree(result.distances);
		pfree(result.offsets);
		if (*n == 0)
			return false;
	}
	return true;
}

int64
vs_scan_bitmap(TIDBitmap *tbm, const int64 *ids, int64 n, bool recheck)
{
	ItemPointerData tids[256];
	int			k = 0;

	for (int64 i = 0; i < n; i++)
	{
		vs_id_to_tid(ids[i], &tids[k++]);
		if (k == lengthof(tids))
		{
			tbm_add_tuples(tbm, tids, k, recheck);
			k = 0;
		}
	}
	if (k > 0)
		tbm_add_tuples(tbm, tids, k, recheck);
	return n;
}
