/*
 * The batch functions' text twins for vs_lc and vs_sss indexes on text (textdist.h):
 *
 *   vsearch_knn_batch(index regclass, queries text[], k integer)
 *   vsearch_range_batch(index regclass, queries text[], radius double precision)
 *
 * with the vector versions' output (query: the 1-based position in the array, row_ctid, distance:
 * the edit distance) and checks (batch.c's: SELECT on the table, no row level security, a valid
 * index).  Every query is searched in the backend on the cached object (lcsearch.c, ssssearch.c);
 * the rows' visibility is checked in heap order (batchrows.c); kNN asks for k rows, then 4 times
 * more while invisible rows leave fewer than k, as an ORDER BY scan does.  A NULL query matches
 * nothing.
 */
#include "postgres.h"

#include <limits.h>

#include "access/table.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

#include "batch.h"
#include "sss.h"

static const VsMetricSearchOps lc_ops = {vs_lc_search_range, vs_lc_search_knn};

/* The searches of a vs_lc or vs_sss index. */
static const VsMetricSearchOps *
ops_of(uint32 kind)
{
	return kind == VS_LC_KIND ? &lc_ops : &vs_sss_search_ops;
}

/* Opens a vs_lc or vs_sss index on text; its searches. */
static const VsMetricSearchOps *
open_text_index(Oid indexoid, VsBatch *bc)
{
	const VsIndexKind *kind;

	vs_batch_open(indexoid, bc);
	kind = vs_kind_of_index(bc->index);
	if ((kind->id != VS_LC_KIND && kind->id != VS_SSS_KIND) ||
		(int) bc->ref.metric != VS_METRIC_LEVENSHTEIN)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a vs_lc or vs_sss index on text",
						RelationGetRelationName(bc->index)),
				 errhint("Text queries need a vs_lc or vs_sss index with text_levenshtein_ops; "
						 "vector queries are passed as vector[].")));
	return ops_of(kind->id);
}

/* The queries' characters (len -1: a NULL query). */
static VsLcValue *
read_text_queries(ArrayType *array, int *nq)
{
	Datum	   *elems;
	bool	   *nulls;
	VsLcValue  *out;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("queries must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, nq);
	out = palloc(sizeof(VsLcValue) * (*nq + 1));
	for (int q = 0; q < *nq; q++)
	{
		if (nulls[q])
		{
			out[q].data = NULL;
			out[q].len = -1;
		}
		else
			out[q].data = vs_text_chars(DatumGetTextPP(elems[q]), &out[q].len);
	}
	return out;
}

static void
emit(ReturnSetInfo *rsinfo, int q, const VsHit *hit)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	values[0] = Int32GetDatum(q + 1);
	values[1] = PointerGetDatum(&hit->tid);
	values[2] = Float8GetDatum(hit->distance);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

static int
cmp_hit(const void *a, const void *b)
{
	return vs_cmp_hit((const VsHit *) a, (const VsHit *) b);
}

/* The visible rows among ids (in order), as hits; at most max of them (-1: all). */
static int64
visible_hits(VsRowReader *reader, const int64 *ids, const double *dists, int64 n, int64 max,
			 VsHit *hits)
{
	VsPair	   *pairs = palloc(sizeof(VsPair) * (n + 1));
	VsPairResult *res = palloc(sizeof(VsPairResult) * (n + 1));
	int64		m = 0;

	for (int64 i = 0; i < n; i++)
	{
		pairs[i].id = ids[i];
		pairs[i].query = 0;
		pairs[i].slot = (uint32) i;
	}
	vs_check_pairs(reader, pairs, n, res);
	for (int64 i = 0; i < n && (max < 0 || m < max); i++)
		if (res[i].visible)
		{
			hits[m].distance = dists[i];
			hits[m].tid = res[i].tid;
			m++;
		}
	pfree(pairs);
	pfree(res);
	return m;
}

PG_FUNCTION_INFO_V1(vsearch_range_batch_text);
Datum
vsearch_range_batch_text(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	double		radius = PG_GETARG_FLOAT8(2);
	VsBatch		bc;
	const VsMetricSearchOps *ops;
	VsLcValue  *queries;
	int			nq;

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	ops = open_text_index(PG_GETARG_OID(0), &bc);
	vs_check_text_radius(radius);
	queries = read_text_queries(PG_GETARG_ARRAYTYPE_P(1), &nq);
	if (bc.ref.ntuples > 0 && nq > 0)
	{
		vs_row_reader_begin(&bc.reader, bc.heap, bc.index, 0, bc.ref.metric, NULL);
		for (int q = 0; q < nq; q++)
		{
			int64	   *ids;
			double	   *dists;
			int64		n,
						m;
			VsHit	   *hits;

			CHECK_FOR_INTERRUPTS();
			if (queries[q].len < 0)
				continue;
			ops->range(vs_search_object(&bc.ref), queries[q], radius, &ids, &dists, &n);
			hits = palloc(sizeof(VsHit) * (n + 1));
			m = visible_hits(&bc.reader, ids, dists, n, -1, hits);
			if (m > 1)
				qsort(hits, m, sizeof(VsHit), cmp_hit);
			for (int64 i = 0; i < m; i++)
				emit(rsinfo, q, &hits[i]);
			pfree(ids);
			pfree(dists);
			pfree(hits);
		}
		vs_row_reader_end(&bc.reader);
		vs_search_trim_cache();
	}
	index_close(bc.index, NoLock);
	table_close(bc.heap, NoLock);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(vsearch_knn_batch_text);
Datum
vsearch_knn_batch_text(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		k = PG_GETARG_INT32(2);
	VsBatch		bc;
	const VsMetricSearchOps *ops;
	VsLcValue  *queries;
	int			nq;

	if (k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", k)));
	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	ops = open_text_index(PG_GETARG_OID(0), &bc);
	queries = read_text_queries(PG_GETARG_ARRAYTYPE_P(1), &nq);
	if (bc.ref.ntuples > 0 && nq > 0)
	{
		int64		kmax = Min((int64) k, (int64) bc.ref.ntuples);
		VsHit	   *hits = palloc_extended(sizeof(VsHit) * (kmax + 1), MCXT_ALLOC_HUGE);

		if ((double) nq * kmax > VS_BATCH_MAX_RESULTS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("batch of %d queries with k = %d asks for more than %d rows",
							nq, k, VS_BATCH_MAX_RESULTS),
					 errhint("Split the queries over several calls or use a smaller k.")));
		vs_row_reader_begin(&bc.reader, bc.heap, bc.index, 0, bc.ref.metric, NULL);
		for (int q = 0; q < nq; q++)
		{
			int64		kk = kmax;
			int64		m = 0;

			if (queries[q].len < 0)
				continue;
			for (;;)
			{
				int64	   *ids = palloc_extended(sizeof(int64) * kk, MCXT_ALLOC_HUGE);
				double	   *dists = palloc_extended(sizeof(double) * kk, MCXT_ALLOC_HUGE);
				int64		count;

				CHECK_FOR_INTERRUPTS();
				count = ops->knn(vs_search_object(&bc.ref), queries[q], (int) kk, ids, dists);
				m = visible_hits(&bc.reader, ids, dists, count, kmax, hits);
				pfree(ids);
				pfree(dists);
				/* enough visible rows, or the index has no more */
				if (m >= kmax || count < kk || kk >= (int64) bc.ref.ntuples || kk >= INT_MAX / 4)
					break;
				kk = Min(kk * 4, (int64) bc.ref.ntuples);
			}
			if (m > 1)
				qsort(hits, m, sizeof(VsHit), cmp_hit);
			for (int64 i = 0; i < m; i++)
				emit(rsinfo, q, &hits[i]);
		}
		vs_row_reader_end(&bc.reader);
		vs_search_trim_cache();
	}
	index_close(bc.index, NoLock);
	table_close(bc.heap, NoLock);
	return (Datum) 0;
}

/* ---------------------------------------------------------------------------------------------
 * The vector batch functions (batch.c) on vs_lc and vs_sss vector indexes: the kinds' range
 * candidates and kNN batches, searched in the backend on the cached object.
 */

/* A distance in the engine's rank units (search.h), from which vs_rank_value gives it back
 * exactly: (float) (d * d) is the exact float squared sum that d = sqrt((double) f) came from. */
static float
rank_units(vs_metric metric, double d)
{
	return metric == VS_METRIC_L2 ? (float) (d * d) : (float) d;
}

void
vs_metric_range_candidates(const VsIndexRef *ref, const float *queries, int nq, double radius,
						   VsRangeResult *out)
{
	const VsMetricSearchOps *ops = ops_of(ref->kind);
	int64	  **ids = palloc0(sizeof(int64 *) * (nq + 1));
	double	  **dists = palloc0(sizeof(double *) * (nq + 1));
	int64	   *n = palloc0(sizeof(int64) * (nq + 1));
	int64		total = 0;

	for (int q = 0; q < nq; q++)
	{
		VsLcValue	v;

		CHECK_FOR_INTERRUPTS();
		v.data = queries + (Size) q * ref->dim;
		v.len = (int) ref->dim;
		ops->range(vs_search_object(ref), v, radius, &ids[q], &dists[q], &n[q]);
		total += n[q];
	}
	out->nq = nq;
	out->total = total;
	out->offsets = palloc(sizeof(int64) * (nq + 1));
	out->ids = palloc_extended(sizeof(int64) * (total + 1), MCXT_ALLOC_HUGE);
	out->distances = palloc_extended(sizeof(float) * (total + 1), MCXT_ALLOC_HUGE);
	out->offsets[0] = 0;
	for (int q = 0; q < nq; q++)
	{
		int64		at = out->offsets[q];

		for (int64 i = 0; i < n[q]; i++)
		{
			out->ids[at + i] = ids[q][i];
			out->distances[at + i] = rank_units(ref->metric, dists[q][i]);
		}
		out->offsets[q + 1] = at + n[q];
		pfree(ids[q]);
		pfree(dists[q]);
	}
	pfree(ids);
	pfree(dists);
	pfree(n);
}

void
vs_metric_batch_knn(VsBatch *bc, int kq)
{
	const VsMetricSearchOps *ops = ops_of(bc->ref.kind);

	for (int q = 0; q < bc->nq; q++)
	{
		VsBatchAnswer *a = &bc->answers[q];
		VsLcValue	v;
		int64		kk = kq;

		v.data = bc->queries + (Size) q * bc->ref.dim;
		v.len = (int) bc->ref.dim;
		for (;;)
		{
			int64	   *ids = palloc_extended(sizeof(int64) * kk, MCXT_ALLOC_HUGE);
			double	   *dists = palloc_extended(sizeof(double) * kk, MCXT_ALLOC_HUGE);
			int64		count;

			CHECK_FOR_INTERRUPTS();
			count = ops->knn(vs_search_object(&bc->ref), v, (int) kk, ids, dists);
			a->n = (int) visible_hits(&bc->reader, ids, dists, count, kq, a->hits);
			pfree(ids);
			pfree(dists);
			bc->rounds++;
			if (a->n >= kq || count < kk || kk >= (int64) bc->ref.ntuples || kk >= INT_MAX / 4)
				break;
			kk = Min(kk * 4, (int64) bc->ref.ntuples);
		}
	}
	vs_search_trim_cache();
}
