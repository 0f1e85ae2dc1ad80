/*
 * Batch searches in SQL:
 *
 *   vsearch_knn_batch(index regclass, queries vector[], k integer)
 *   vsearch_range_batch(index regclass, queries vector[], radius double precision)
 *     RETURNS TABLE (query integer, row_ctid tid, distance double precision)
 *
 * All queries go to the search layer in one request (one GPU batch when the worker serves).  The
 * answer is what the per-query SQL would return, visible rows only:
 *   knn:   for each query, the k rows of `ORDER BY col <op> q LIMIT k` (fewer if the table has
 *          fewer visible rows), nearest first;
 *   range: for each query, the rows with `col <op> q <= radius` (<<op>> semantics), nearest first;
 * where <op> is the index's metric operator, `distance` is that operator's value and `query` the
 * query's 1-based position in the array.  Each candidate is checked against the caller's snapshot
 * like an index scan does (following HOT chains); row_ctid is the visible version's ctid, so
 * `JOIN items t ON t.ctid = b.row_ctid` finds it in the same statement.  Dead rows are skipped
 * and the search widened until k visible rows are found or the index is exhausted; distances are
 * recomputed from the heap row with the SQL operator, and the kNN search goes on until no unseen
 * row can beat the k-th (the same lower bounds as the index scan), so ties aside the rows are
 * exactly the per-query ones.
 *
 * The caller needs SELECT on the index's table; tables with row level security are refused (the
 * functions cannot apply its policies).
 */
#include "postgres.h"

#include <float.h>
#include <limits.h>
#include <math.h>

#include "access/relation.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/objectaddress.h"
#include "funcapi.h"
#include "portability/instr_time.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/tuplestore.h"

#include "batchrows.h"
#include "flat.h"
#include "ivfpq.h"
#include "search.h"
#include "vector.h"

/* Most (query, row) pairs one kNN batch call may produce. */
#define VS_BATCH_MAX_RESULTS	50000000

typedef struct BatchContext
{
	Relation	heap;
	Relation	index;
	VsIndexRef	ref;
	int			nq;
	float	   *queries;		/* nq x dim */
	VsDistanceSlack *slack;		/* per query */

	/* visibility checks and distances */
	VsRowReader reader;

	/* where the time went (reported at DEBUG1) */
	int			rounds;			/* engine calls */
	instr_time	search_time;	/* in the search layer: the worker or the backend's engine */
	instr_time	heap_time;		/* reading and checking candidate rows */
} BatchContext;


typedef struct Hit
{
	double		distance;
	ItemPointerData tid;
} Hit;

/* float8 order (NaN last), then tid. */
static int
cmp_hit(const Hit *a, const Hit *b)
{
	bool		nan_a = isnan(a->distance);
	bool		nan_b = isnan(b->distance);

	if (nan_a != nan_b)
		return nan_a ? 1 : -1;
	if (!nan_a)
	{
		if (a->distance < b->distance)
			return -1;
		if (a->distance > b->distance)
			return 1;
	}
	return ItemPointerCompare((ItemPointer) &a->tid, (ItemPointer) &b->tid);
}

static int
cmp_hit_qsort(const void *a, const void *b)
{
	return cmp_hit((const Hit *) a, (const Hit *) b);
}

/* ---------------------------------------------------------------------------------------------
 * Opening the index, checking the caller, reading the queries
 */

static void
open_index(Oid indexoid, BatchContext *bc)
{
	Oid			heapoid = IndexGetRelation(indexoid, true);
	AclResult	aclresult;

	if (!OidIsValid(heapoid))
	{
		char	   *name = get_rel_name(indexoid);

		if (name == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("relation with OID %u does not exist", indexoid)));
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index", name)));
	}

	/* permission checks stay in the backend, before any lock or search */
	aclresult = pg_class_aclcheck(heapoid, GetUserId(), ACL_SELECT);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, get_relkind_objtype(get_rel_relkind(heapoid)),
					   get_rel_name(heapoid));
	if (check_enable_rls(heapoid, InvalidOid, false) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("batch searches are not supported on table \"%s\", which has row level security",
						get_rel_name(heapoid)),
				 errhint("Search it with ORDER BY or the range operators, which apply its policies.")));

	/* locks until the end of the transaction: the index cannot go away under the search */
	bc->heap = table_open(heapoid, AccessShareLock);
	bc->index = index_open(indexoid, AccessShareLock);
	if (bc->index->rd_index->indrelid != heapoid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" changed while it was opened",
						RelationGetRelationName(bc->index))));
	if (!vs_is_flat_index(bc->index) && !vs_is_ivfpq_index(bc->index))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a vs_flat or vs_ivfpq index",
						RelationGetRelationName(bc->index)),
				 errhint("Batch searches need an index created USING vs_flat or vs_ivfpq.")));
	if (!bc->index->rd_index->indisvalid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" is not valid", RelationGetRelationName(bc->index)),
				 errhint("REINDEX it (a CREATE INDEX CONCURRENTLY may have failed).")));
	vs_index_ref(bc->index, &bc->ref);
}

/* The queries as nq x dim floats; ERROR for NULLs and dimension mismatches. */
static void
read_queries(ArrayType *array, BatchContext *bc)
{
	Oid			elemtype = ARR_ELEMTYPE(array);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("queries must be a one-dimensional array"),
				 errhint("Build it with ARRAY(SELECT v FROM queries ORDER BY id).")));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign, &elems, &nulls, &n);

	bc->nq = n;
	for (int i = 0; i < n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("query %d of the batch is NULL", i + 1),
					 errhint("Remove NULL vectors from the array; positions count from 1.")));
	if (n == 0 || bc->ref.dim == 0)
		return;

	bc->queries = palloc_extended(sizeof(float) * bc->ref.dim * (Size) n, MCXT_ALLOC_HUGE);
	bc->slack = palloc(sizeof(VsDistanceSlack) * n);
	for (int i = 0; i < n; i++)
	{
		Vector	   *v = DatumGetVectorP(elems[i]);
		float	   *q = bc->queries + (Size) i * bc->ref.dim;

		if ((uint32) v->dim != bc->ref.dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("different vector dimensions %u and %d", bc->ref.dim, v->dim),
					 errdetail("Query %d of the batch has %d dimensions, the index %u.",
							   i + 1, v->dim, bc->ref.dim)));
		memcpy(q, v->x, sizeof(float) * bc->ref.dim);
		vs_distance_slack_init(&bc->slack[i], &bc->ref, q);
	}
}

/* ---------------------------------------------------------------------------------------------
 * Visibility and distance: is the row of an index entry visible to the snapshot, and how far is
 * it from a query?  (batchrows.c)
 */

static void
begin_fetch(BatchContext *bc)
{
	vs_row_reader_begin(&bc->reader, bc->heap, bc->index, bc->ref.dim, bc->ref.metric, bc->queries);
}

static void
end_fetch(BatchContext *bc)
{
	vs_row_reader_end(&bc->reader);
}

static void
too_many_pairs(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("batch search needs more than %u candidate rows in one pass", PG_UINT32_MAX),
			 errhint("Use fewer queries per call, or a smaller radius.")));
}

/* Appends the pair (id, query), answered in slot, to a growing array. */
static void
add_pair(VsPair **pairs, Size *n, Size *cap, int64 id, int query, Size slot)
{
	if (slot > PG_UINT32_MAX)
		too_many_pairs();
	if (*n == *cap)
	{
		*cap = Max(*cap * 2, 1024);
		*pairs = *pairs ? repalloc_huge(*pairs, sizeof(VsPair) * *cap)
			: palloc_extended(sizeof(VsPair) * *cap, MCXT_ALLOC_HUGE);
	}
	(*pairs)[*n].id = id;
	(*pairs)[*n].query = query;
	(*pairs)[*n].slot = (uint32) slot;
	(*n)++;
}

/* At DEBUG1, where a batch call spent its time: SET client_min_messages = debug1 shows it. */
static void
report_times(const BatchContext *bc, const char *fn)
{
	ereport(DEBUG1,
			(errmsg_internal("%s: %d queries, %d engine calls %.1f ms, " INT64_FORMAT " candidate rows read and checked %.1f ms",
							 fn, bc->nq, bc->rounds, INSTR_TIME_GET_MILLISEC(bc->search_time),
							 bc->reader.rows_read, INSTR_TIME_GET_MILLISEC(bc->heap_time))));
}

/* ---------------------------------------------------------------------------------------------
 * kNN
 */

/* The k best hits of one query: a max-heap on cmp_hit (top = the k-th best so far). */
typedef struct QueryState
{
	Hit		   *heap;
	int			n;
	bool		done;
	bool		have_last;		/* last engine (distance, id) processed */
	float		last_dist;
	int64		last_id;
} QueryState;

static void
heap_sift_down(Hit *h, int n, int i)
{
	for (;;)
	{
		int			l = 2 * i + 1,
					r = l + 1,
					m = i;
		Hit			t;

		if (l < n && cmp_hit(&h[l], &h[m]) > 0)
			m = l;
		if (r < n && cmp_hit(&h[r], &h[m]) > 0)
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void
heap_offer(QueryState *qs, int k, const Hit *hit)
{
	if (qs->n < k)
	{
		int			i = qs->n++;

		qs->heap[i] = *hit;
		while (i > 0 && cmp_hit(&qs->heap[(i - 1) / 2], &qs->heap[i]) < 0)
		{
			Hit			t = qs->heap[i];

			qs->heap[i] = qs->heap[(i - 1) / 2];
			qs->heap[(i - 1) / 2] = t;
			i = (i - 1) / 2;
		}
	}
	else if (cmp_hit(hit, &qs->heap[0]) < 0)
	{
		qs->heap[0] = *hit;
		heap_sift_down(qs->heap, qs->n, 0);
	}
}

/* Engine order: distance ascending (NaN last), then id. */
static int
cmp_engine(float d1, int64 id1, float d2, int64 id2)
{
	bool		nan1 = isnan(d1);
	bool		nan2 = isnan(d2);

	if (nan1 != nan2)
		return nan1 ? 1 : -1;
	if (!nan1)
	{
		if (d1 < d2)
			return -1;
		if (d1 > d2)
			return 1;
	}
	return id1 < id2 ? -1 : (id1 > id2 ? 1 : 0);
}

/*
 * Checks, in one pass over the heap (vs_check_pairs), the pairs a vs_flat kNN pass over one round
 * of engine candidates most likely needs: per query the candidates after the last one it used, as
 * many as it still lacks, plus those within a relative 1e-5 of the last of them (near ties, where
 * the stop rule may ask for more).  The answer of candidate j of todo entry t goes to
 * res[t * kk + j], with checked[t * kk + j] set; the pass checks the others itself.
 */
static void
check_flat_round(BatchContext *bc, const QueryState *qs, const int *todo, int ntodo, int kq,
				 const int64 *ids, const float *dists, const int64 *counts, int64 kk,
				 VsPairResult *res, bool *checked)
{
	VsPair	   *pairs = NULL;
	Size		n = 0,
				cap = 0;

	for (int t = 0; t < ntodo; t++)
	{
		const QueryState *s = &qs[todo[t]];
		int64		count = Min(counts[t], kk);
		const int64 *qids = ids + (Size) t * kk;
		const float *qd = dists + (Size) t * kk;
		int64		j = 0,
					need = Max(kq - s->n, 1),
					taken = 0;
		float		last = 0;

		if (s->have_last)
			while (j < count && cmp_engine(qd[j], qids[j], s->last_dist, s->last_id) <= 0)
				j++;
		for (; j < count; j++)
		{
			if (taken >= need && !(qd[j] <= last + fabsf(last) * 1e-5f))
				break;
			if (qids[j] >= 0)
			{
				add_pair(&pairs, &n, &cap, qids[j], todo[t], (Size) t * kk + j);
				checked[(Size) t * kk + j] = true;
			}
			last = qd[j];
			taken++;
		}
	}
	if (n == 0)
		return;
	vs_check_pairs(&bc->reader, pairs, n, res);
	pfree(pairs);
}

static void
emit(Tuplestorestate *store, TupleDesc desc, int q, const Hit *hit)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	values[0] = Int32GetDatum(q + 1);
	values[1] = PointerGetDatum(&hit->tid);
	values[2] = Float8GetDatum(hit->distance);
	tuplestore_putvalues(store, desc, values, nulls);
}

/*
 * kNN on a vs_ivfpq index: for each query the rounds of the index scan (ivfpqscan.c): the
 * `vsearch.ivfpq_rerank` best estimates of the first `vsearch.ivfpq_probes` lists (and every pending
 * entry), then 4x as many of the same lists, then the next lists, ...; each round's visible rows in
 * exact order, until k rows.  So the rows are those of `ORDER BY col <op> q LIMIT k` through the
 * index, in its order.  Within a window a larger search's answer starts with the smaller one's
 * (estimates sorted, ties by id), so a round's new candidates are the ones after the previous
 * count.  The queries of a round that are at the same window and k share one engine call.
 */
typedef struct IvfpqQuery
{
	int			offset;			/* probe window */
	int64		k;				/* k of the last search in this window (0: none yet) */
	int64		prev;			/* candidates of the window already taken */
	bool		first;
	bool		done;
} IvfpqQuery;

typedef struct RoundKey
{
	int			offset;
	int64		k;
	int			q;
} RoundKey;

static int
cmp_round_key(const void *a, const void *b)
{
	const RoundKey *x = (const RoundKey *) a;
	const RoundKey *y = (const RoundKey *) b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return x->q < y->q ? -1 : (x->q > y->q ? 1 : 0);
}

typedef struct RoundHit
{
	Hit			hit;
	int64		id;
} RoundHit;

static int
cmp_round_hit(const void *a, const void *b)
{
	const RoundHit *x = (const RoundHit *) a;
	const RoundHit *y = (const RoundHit *) b;
	bool		nan_a = isnan(x->hit.distance);
	bool		nan_b = isnan(y->hit.distance);

	if (nan_a != nan_b)
		return nan_a ? 1 : -1;
	if (!nan_a)
	{
		if (x->hit.distance < y->hit.distance)
			return -1;
		if (x->hit.distance > y->hit.distance)
			return 1;
	}
	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

/* Checks the pairs one group of a vs_ivfpq round re-ranks: its new candidates (and, in a query's
 * first round, the pending entries), in the order the round takes them, ids < 0 left out; the
 * answers go to *res and their ids to *pair_ids (palloc'd), query i's from (*first)[i] to
 * (*first)[i + 1]. */
static void
check_ivfpq_group(BatchContext *bc, const IvfpqQuery *st, const RoundKey *keys, int ng, int64 k,
				  const int64 *ids, const int64 *counts, const int64 *pending, int64 npending,
				  int64 **pair_ids, VsPairResult **res, Size **first)
{
	VsPair	   *pairs = NULL;
	Size		n = 0,
				cap = 0;

	*first = palloc(sizeof(Size) * (ng + 1));
	for (int i = 0; i < ng; i++)
	{
		const IvfpqQuery *s = &st[keys[i].q];
		int64		count = k > 0 ? Min(counts[i], k) : 0;

		(*first)[i] = n;
		if (s->first)
			for (int64 j = 0; j < npending; j++)
				if (pending[j] >= 0)
					add_pair(&pairs, &n, &cap, pending[j], keys[i].q, n);
		for (int64 j = k > 0 ? Min(s->prev, count) : 0; j < count; j++)
			if (ids[(Size) i * k + j] >= 0)
				add_pair(&pairs, &n, &cap, ids[(Size) i * k + j], keys[i].q, n);
	}
	(*first)[ng] = n;
	*res = palloc_extended(sizeof(VsPairResult) * Max(n, 1), MCXT_ALLOC_HUGE);
	*pair_ids = palloc_extended(sizeof(int64) * Max(n, 1), MCXT_ALLOC_HUGE);
	for (Size i = 0; i < n; i++)
		(*pair_ids)[i] = pairs[i].id;
	vs_check_pairs(&bc->reader, pairs, n, *res);
	if (pairs)
		pfree(pairs);
}

static void
ivfpq_knn_rounds(BatchContext *bc, int kq, QueryState *qs)
{
	int			lists = (int) bc->ref.ivf_lists;
	int64		npending = 0;
	int64	   *pending = vs_ivfpq_pending_ids(&bc->ref, &npending);
	int			probes = Max(vs_ivfpq_probes, 1);
	int			rerank = Max(vs_ivfpq_rerank, 1);
	int64		maxk = (int64) bc->ref.ntuples + 1;
	IvfpqQuery *st = palloc0(sizeof(IvfpqQuery) * bc->nq);
	RoundKey   *keys = palloc(sizeof(RoundKey) * bc->nq);
	int			active = bc->nq;
	instr_time	t0,
				t1;

	for (int q = 0; q < bc->nq; q++)
		st[q].first = true;

	while (active > 0)
	{
		int			nkeys = 0;

		CHECK_FOR_INTERRUPTS();
		for (int q = 0; q < bc->nq; q++)
		{
			if (st[q].done)
				continue;
			keys[nkeys].offset = st[q].offset;
			keys[nkeys].k = (st[q].offset < lists)
				? Min(Min(st[q].k == 0 ? (int64) rerank : st[q].k * 4, maxk), (int64) INT_MAX) : 0;
			keys[nkeys].q = q;
			nkeys++;
		}
		qsort(keys, nkeys, sizeof(RoundKey), cmp_round_key);

		for (int g = 0; g < nkeys;)
		{
			int			h = g;
			int			ng;
			int64		k = keys[g].k;
			float	   *queries;
			int64	   *ids = NULL;
			float	   *dists = NULL;
			int64	   *counts;
			int64	   *pair_ids;
			VsPairResult *res;
			Size	   *first;

			while (h < nkeys && keys[h].offset == keys[g].offset && keys[h].k == k)
				h++;
			ng = h - g;
			counts = palloc0(sizeof(int64) * ng);
			if (k > 0)
			{
				if ((double) ng * k > 2.0 * VS_BATCH_MAX_RESULTS)
					ereport(ERROR,
							(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
							 errmsg("batch search needs more than %d candidate rows",
									2 * VS_BATCH_MAX_RESULTS),
							 errhint("Many rows are dead: VACUUM the table, or use fewer queries per call.")));
				queries = palloc_extended(sizeof(float) * bc->ref.dim * (Size) ng, MCXT_ALLOC_HUGE);
				for (int i = 0; i < ng; i++)
					memcpy(queries + (Size) i * bc->ref.dim,
						   bc->queries + (Size) keys[g + i].q * bc->ref.dim,
						   sizeof(float) * bc->ref.dim);
				ids = palloc_extended(sizeof(int64) * ng * k, MCXT_ALLOC_HUGE);
				dists = palloc_extended(sizeof(float) * ng * k, MCXT_ALLOC_HUGE);
				INSTR_TIME_SET_CURRENT(t0);
				vs_ivfpq_search_candidates(&bc->ref, queries, ng, keys[g].offset, probes, (int) k,
										   ids, dists, counts);
				INSTR_TIME_SET_CURRENT(t1);
				INSTR_TIME_ACCUM_DIFF(bc->search_time, t1, t0);
				bc->rounds++;
				pfree(queries);
			}
			else
				INSTR_TIME_SET_CURRENT(t1);
			check_ivfpq_group(bc, st, keys + g, ng, k, ids, counts, pending, npending,
							  &pair_ids, &res, &first);

			for (int i = 0; i < ng; i++)
			{
				int			q = keys[g + i].q;
				IvfpqQuery *s = &st[q];
				QueryState *out = &qs[q];
				int64		count = k > 0 ? Min(counts[i], k) : 0;
				RoundHit   *round = palloc_extended(sizeof(RoundHit) * Max(first[i + 1] - first[i], 1),
													MCXT_ALLOC_HUGE);
				int64		n = 0;

				for (Size j = first[i]; j < first[i + 1]; j++)
				{
					if (!res[j].visible)
						continue;
					round[n].hit.distance = res[j].distance;
					round[n].hit.tid = res[j].tid;
					round[n].id = pair_ids[j];
					n++;
				}
				if (n > 1)
					qsort(round, n, sizeof(RoundHit), cmp_round_hit);
				for (int64 j = 0; j < n && out->n < kq; j++)
				{
					if (j > 0 && round[j].id == round[j - 1].id)
						continue;
					out->heap[out->n++] = round[j].hit;
				}
				pfree(round);

				s->first = false;
				if (k == 0 || count < k)
				{
					s->offset += probes;
					s->k = 0;
					s->prev = 0;
				}
				else
				{
					s->k = k;
					s->prev = count;
				}
				if (out->n >= kq || s->offset >= lists)
				{
					s->done = true;
					active--;
				}
			}
			if (ids)
			{
				pfree(ids);
				pfree(dists);
			}
			pfree(pair_ids);
			pfree(res);
			pfree(first);
			pfree(counts);
			INSTR_TIME_SET_CURRENT(t0);
			INSTR_TIME_ACCUM_DIFF(bc->heap_time, t0, t1);
			g = h;
		}
		vs_ivfpq_trim_cache();
	}
	pfree(st);
	pfree(keys);
	if (pending)
		pfree(pending);
}

PG_FUNCTION_INFO_V1(vsearch_knn_batch);
Datum
vsearch_knn_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(1);
	int32		k = PG_GETARG_INT32(2);
	BatchContext bc;
	QueryState *qs;
	int			kq;
	int64		kk;
	int		   *todo;
	int			ntodo;
	instr_time	t0,
				t1;

	if (k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", k)));

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	open_index(indexoid, &bc);
	read_queries(array, &bc);
	if (bc.nq == 0 || bc.ref.dim == 0 || bc.ref.ntuples == 0)
		goto done;

	/* k beyond the index's entries returns every row; rows visible to us are among them */
	kq = (int) Min((uint64) k, bc.ref.ntuples);
	if ((double) bc.nq * kq > VS_BATCH_MAX_RESULTS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("batch of %d queries with k = %d asks for more than %d rows",
						bc.nq, kq, VS_BATCH_MAX_RESULTS),
				 errhint("Split the queries over several calls or use a smaller k.")));

	qs = palloc0(sizeof(QueryState) * bc.nq);
	todo = palloc(sizeof(int) * bc.nq);
	for (int q = 0; q < bc.nq; q++)
	{
		qs[q].heap = palloc(sizeof(Hit) * kq);
		todo[q] = q;
	}
	ntodo = bc.nq;
	begin_fetch(&bc);

	if (bc.ref.kind == VS_INDEX_IVFPQ)
	{
		/* the rows the index scan would return first, in its order (ivfpq_knn_rounds) */
		ivfpq_knn_rounds(&bc, kq, qs);
		report_times(&bc, "vsearch_knn_batch");
		end_fetch(&bc);
		for (int q = 0; q < bc.nq; q++)
		{
			qsort(qs[q].heap, qs[q].n, sizeof(Hit), cmp_hit_qsort);
			for (int i = 0; i < qs[q].n; i++)
				emit(rsinfo->setResult, rsinfo->setDesc, q, &qs[q].heap[i]);
		}
		goto done;
	}

	/*
	 * A little beyond k, to see that the next row cannot beat the k-th and for a few dead rows.
	 * Not much more: on clustered data the engine's exact certification of the k-th candidate
	 * gets dearer as k approaches its candidate list (H100, 10M x 96: k = 10 in 758 ms, k = 26 in
	 * 1 277 ms); queries that need more go on in a wider round.
	 */
	kk = Min((int64) kq + Max(4, kq / 8), (int64) bc.ref.ntuples + 1);
	while (ntodo > 0)
	{
		float	   *queries;
		int64	   *ids;
		float	   *dists;
		int64	   *counts;
		VsPairResult *res;
		bool	   *checked;
		int			next = 0;

		if ((double) ntodo * kk > 2.0 * VS_BATCH_MAX_RESULTS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("batch search needs more than %d candidate rows",
							2 * VS_BATCH_MAX_RESULTS),
					 errhint("Many rows are dead: VACUUM the table, or use fewer queries per call.")));
		if (ntodo == bc.nq)
			queries = bc.queries;	/* every query, in order */
		else
		{
			queries = palloc_extended(sizeof(float) * bc.ref.dim * (Size) ntodo, MCXT_ALLOC_HUGE);
			for (int t = 0; t < ntodo; t++)
				memcpy(queries + (Size) t * bc.ref.dim, bc.queries + (Size) todo[t] * bc.ref.dim,
					   sizeof(float) * bc.ref.dim);
		}
		ids = palloc_extended(sizeof(int64) * ntodo * kk, MCXT_ALLOC_HUGE);
		dists = palloc_extended(sizeof(float) * ntodo * kk, MCXT_ALLOC_HUGE);
		counts = palloc(sizeof(int64) * ntodo);

		INSTR_TIME_SET_CURRENT(t0);
		vs_search_knn(&bc.ref, queries, ntodo, (int) kk, ids, dists, counts);
		INSTR_TIME_SET_CURRENT(t1);
		INSTR_TIME_ACCUM_DIFF(bc.search_time, t1, t0);
		res = palloc_extended(sizeof(VsPairResult) * ntodo * kk, MCXT_ALLOC_HUGE);
		checked = palloc_extended(sizeof(bool) * ntodo * kk, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		check_flat_round(&bc, qs, todo, ntodo, kq, ids, dists, counts, kk, res, checked);

		for (int t = 0; t < ntodo; t++)
		{
			int			q = todo[t];
			QueryState *s = &qs[q];
			int64		count = Min(counts[t], kk);

			for (int64 j = 0; j < count && !s->done; j++)
			{
				Size		pos = (Size) t * kk + j;
				int64		id = ids[pos];
				float		d = dists[pos];

				if (id < 0)
					continue;
				if (s->have_last && cmp_engine(d, id, s->last_dist, s->last_id) <= 0)
					continue;	/* seen in an earlier round */
				s->have_last = true;
				s->last_dist = d;
				s->last_id = id;

				/* no row from here on can beat the k-th best */
				if (s->n == kq)
				{
					Hit			bound;

					bound.distance = vs_distance_lower(&bc.slack[q], d);
					ItemPointerSetInvalid(&bound.tid);
					if (!isnan(bound.distance) && !isnan(s->heap[0].distance) &&
						bound.distance > s->heap[0].distance)
					{
						s->done = true;
						break;
					}
				}
				if (!checked[pos])
					vs_check_pair(&bc.reader, id, q, &res[pos]);
				if (res[pos].visible)
				{
					Hit			hit;

					hit.distance = res[pos].distance;
					hit.tid = res[pos].tid;
					heap_offer(s, kq, &hit);
				}
			}
			if (count < kk)
				s->done = true; /* the index is exhausted */
			if (!s->done)
				todo[next++] = q;
		}
		ntodo = next;
		INSTR_TIME_SET_CURRENT(t0);
		INSTR_TIME_ACCUM_DIFF(bc.heap_time, t0, t1);
		bc.rounds++;
		if (queries != bc.queries)
			pfree(queries);
		pfree(ids);
		pfree(dists);
		pfree(counts);
		pfree(res);
		pfree(checked);

		/* widen: x4, or just past the row count, which finishes every query */
		if (ntodo > 0 && kk == INT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("batch search cannot look at more than %d rows per query", INT_MAX)));
		if (kk >= (int64) INT_MAX / 4)
			kk = INT_MAX;
		else if (kk * 4 > (int64) bc.ref.ntuples + 1 && kk < (int64) bc.ref.ntuples + 1)
			kk = (int64) bc.ref.ntuples + 1;
		else
			kk *= 4;
	}
	report_times(&bc, "vsearch_knn_batch");
	end_fetch(&bc);

	for (int q = 0; q < bc.nq; q++)
	{
		qsort(qs[q].heap, qs[q].n, sizeof(Hit), cmp_hit_qsort);
		for (int i = 0; i < qs[q].n; i++)
			emit(rsinfo->setResult, rsinfo->setDesc, q, &qs[q].heap[i]);
	}

done:
	index_close(bc.index, NoLock);
	table_close(bc.heap, NoLock);
	return (Datum) 0;
}

/* ---------------------------------------------------------------------------------------------
 * Range
 */

PG_FUNCTION_INFO_V1(vsearch_range_batch);
Datum
vsearch_range_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(1);
	double		radius = PG_GETARG_FLOAT8(2);
	BatchContext bc;
	double		search_radius = -INFINITY;
	VsRangeResult result;
	Hit		   *hits = NULL;
	int64		maxhits = 0;
	VsPair	   *pairs = NULL;
	VsPairResult *res = NULL;
	Size		maxpairs = 0,
				chunk;
	Size	   *qfirst;			/* a chunk's queries: where their pairs start */
	instr_time	t0,
				t1;

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	open_index(indexoid, &bc);
	vs_check_radius(bc.ref.metric, radius);
	read_queries(array, &bc);
	if (bc.nq == 0 || bc.ref.dim == 0 || bc.ref.ntuples == 0)
		goto done;

	INSTR_TIME_SET_CURRENT(t0);
	if (bc.ref.kind == VS_INDEX_IVFPQ)
	{
		/* candidates: estimates within the radius in the probed lists (approximate) */
		vs_ivfpq_range_candidates(&bc.ref, bc.queries, bc.nq, Max(vs_ivfpq_probes, 1), radius,
								  &result);
		vs_ivfpq_trim_cache();
	}
	else
	{
		/* one radius for the whole batch: wide enough for every query's operator matches */
		for (int q = 0; q < bc.nq; q++)
			search_radius = Max(search_radius, vs_radius_upper(&bc.slack[q], radius));
		vs_search_range(&bc.ref, bc.queries, bc.nq, search_radius, &result);
	}
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(bc.search_time, t1, t0);
	bc.rounds = 1;

	/*
	 * The candidates of as many queries as fit in work_mem (64 bytes a pair with the sort's
	 * scratch space), checked in one pass over the heap; a query with more goes alone.
	 */
	chunk = Max((Size) work_mem * 1024 / 64, 1024);
	qfirst = palloc_extended(sizeof(Size) * ((Size) bc.nq + 1), MCXT_ALLOC_HUGE);
	begin_fetch(&bc);
	for (int q0 = 0, q1; q0 < bc.nq; q0 = q1)
	{
		int64		from0 = result.offsets[q0];
		Size		npairs,
					p = 0;

		for (q1 = q0 + 1; q1 < bc.nq && (Size) (result.offsets[q1 + 1] - from0) <= chunk; q1++)
			;
		npairs = result.offsets[q1] - from0;
		if (npairs > PG_UINT32_MAX)
			too_many_pairs();
		if (npairs > maxpairs)
		{
			if (pairs)
			{
				pfree(pairs);
				res = repalloc_huge(res, sizeof(VsPairResult) * npairs);
			}
			else
				res = palloc_extended(sizeof(VsPairResult) * npairs, MCXT_ALLOC_HUGE);
			pairs = palloc_extended(sizeof(VsPair) * npairs, MCXT_ALLOC_HUGE);
			maxpairs = npairs;
		}
		for (int q = q0; q < q1; q++)
		{
			qfirst[q - q0] = p;
			for (int64 j = result.offsets[q]; j < result.offsets[q + 1]; j++)
				if (result.ids[j] >= 0)
				{
					pairs[p].id = result.ids[j];
					pairs[p].query = q;
					pairs[p].slot = (uint32) p;
					p++;
				}
		}
		qfirst[q1 - q0] = p;
		vs_check_pairs(&bc.reader, pairs, p, res);

		p = 0;
		for (int q = q0; q < q1; q++)
		{
			int64		n = 0;

			for (; p < qfirst[q + 1 - q0]; p++)
			{
				if (res[p].visible && res[p].distance <= radius)	/* exactly the operator's test */
				{
					if (n == maxhits)
					{
						maxhits = Max(maxhits * 2, 1024);
						hits = hits ? repalloc_huge(hits, sizeof(Hit) * maxhits)
							: palloc_extended(sizeof(Hit) * maxhits, MCXT_ALLOC_HUGE);
					}
					hits[n].distance = res[p].distance;
					hits[n].tid = res[p].tid;
					n++;
				}
			}
			if (n > 1)
				qsort(hits, n, sizeof(Hit), cmp_hit_qsort);
			for (int64 i = 0; i < n; i++)
				emit(rsinfo->setResult, rsinfo->setDesc, q, &hits[i]);
		}
	}
	INSTR_TIME_SET_CURRENT(t0);
	INSTR_TIME_ACCUM_DIFF(bc.heap_time, t0, t1);
	report_times(&bc, "vsearch_range_batch");
	end_fetch(&bc);
	if (pairs)
	{
		pfree(pairs);
		pfree(res);
	}
	if (hits)
		pfree(hits);
	pfree(qfirst);

done:
	index_close(bc.index, NoLock);
	table_close(bc.heap, NoLock);
	return (Datum) 0;
}
