/*
 * Batch searches in SQL:
 *
 *   vsearch_knn_batch(index regclass, queries vector[], k integer)
 *   vsearch_range_batch(index regclass, queries vector[], radius double precision)
 *     RETURNS TABLE (query integer, row_ctid tid, distance double precision)
 *
 * All queries go to the search layer together (one GPU batch when the worker serves).  The answer
 * is what the per-query SQL would return, visible rows only:
 *   knn:   for each query, the k rows of `ORDER BY col <op> q LIMIT k` through the index (fewer if
 *          the table has fewer visible rows), nearest first: for an exact index the
 *          sequential scan's distances and rows (any of the rows tied at the k-th distance), for
 *          an approximate one the rows its index scan returns first;
 *   range: for each query, the rows the index finds with `col <op> q <= radius` (<<op>>
 *          semantics), nearest first;
 * where <op> is the index's metric operator, `distance` is that operator's value and `query` the
 * query's 1-based position in the array.  Each candidate is checked against the caller's snapshot
 * like an index scan does (following HOT chains); row_ctid is the visible version's ctid, so
 * `JOIN items t ON t.ctid = b.row_ctid` finds it in the same statement.  Dead rows are skipped
 * and the search widened until k visible rows are found or the index is exhausted.  The distances
 * of an exact index, of vs_graph's kNN searches and of a vs_ivfpq index with store_vectors are its
 * search's (the operator's own values: search.h; indexkind.h, exact_distances), so only the rows'
 * visibility is read; other approximate indexes' candidates get the operator's distance from the
 * heap row.  How a kNN batch searches is the index kind's (indexkind.h, batch_knn); vs_batch_knn_exact
 * below serves kinds with exact searches: it takes each query's candidates in the engine's order
 * (distance, then id: the order an ORDER BY scan returns them in) until k of them are visible, so
 * the rows are those the per-query ORDER BY ... LIMIT k returns through the index, whose rows at
 * the k-th distance are any of the rows there (a sequential scan may keep others).
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
#include "catalog/pg_operator_d.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/tuplesort.h"
#include "utils/tuplestore.h"

#include "batch.h"
#include "indexkind.h"
#include "vector.h"

int
vs_cmp_hit(const VsHit *a, const VsHit *b)
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
	return vs_cmp_hit((const VsHit *) a, (const VsHit *) b);
}

/* ---------------------------------------------------------------------------------------------
 * Opening the index, checking the caller, reading the queries
 */

static void
open_index(Oid indexoid, VsBatch *bc)
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
	if (vs_kind_of_index(bc->index) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a %s index",
						RelationGetRelationName(bc->index), vs_kind_names("or")),
				 errhint("Batch searches need an index created USING %s.",
						 vs_kind_names("or"))));
	if (!bc->index->rd_index->indisvalid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" is not valid", RelationGetRelationName(bc->index)),
				 errhint("REINDEX it (a CREATE INDEX CONCURRENTLY may have failed).")));
	vs_index_ref(bc->index, &bc->ref);
}

/* The queries as nq x dim floats; ERROR for NULLs and dimension mismatches. */
static void
read_queries(ArrayType *array, VsBatch *bc)
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
	}
}

/* ---------------------------------------------------------------------------------------------
 * Candidate rows
 */

static void
too_many_pairs(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("batch search needs more than %u candidate rows in one pass", PG_UINT32_MAX),
			 errhint("Use fewer queries per call, or a smaller radius.")));
}

void
vs_batch_too_many(int64 limit)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("batch search needs more than " INT64_FORMAT " candidate rows", limit),
			 errhint("Many rows are dead: VACUUM the table, or use fewer queries per call.")));
}

void
vs_batch_add_pair(VsPair **pairs, Size *n, Size *cap, int64 id, int query, Size slot)
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

/*
 * At DEBUG1, where a batch call spent its time: SET client_min_messages = debug1 shows it (the
 * benchmark harness parses it).  "queries read" is from vs_batch_open to the search (the index's
 * checks and locks, the array's checks and copy); a range call forms its rows while it checks
 * them, so only kNN reports "answer rows" apart.  Rows on all-visible pages had only their line
 * pointer read (batchrows.c).
 */
static void
report_times(VsBatch *bc, const char *fn)
{
	instr_time	now;
	char		emit[64] = "";

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, bc->started);
	if (!INSTR_TIME_IS_ZERO(bc->emit_time))
		snprintf(emit, sizeof(emit), ", answer rows %.1f ms", INSTR_TIME_GET_MILLISEC(bc->emit_time));
	ereport(DEBUG1,
			(errmsg_internal("%s: %d queries, %d engine calls %.1f ms, " INT64_FORMAT " candidate rows read and checked %.1f ms; queries read %.1f ms%s, in all %.1f ms; " INT64_FORMAT " rows on all-visible pages",
							 fn, bc->nq, bc->rounds, INSTR_TIME_GET_MILLISEC(bc->search_time),
							 bc->reader.rows_read, INSTR_TIME_GET_MILLISEC(bc->heap_time),
							 INSTR_TIME_GET_MILLISEC(bc->read_time), emit,
							 INSTR_TIME_GET_MILLISEC(now), bc->reader.rows_all_visible)));
}

/* The time since the call began, less what the stages so far took: opening and reading. */
static void
note_read_time(VsBatch *bc)
{
	INSTR_TIME_SET_CURRENT(bc->read_time);
	INSTR_TIME_SUBTRACT(bc->read_time, bc->started);
}

/* ---------------------------------------------------------------------------------------------
 * kNN for kinds with exact searches
 */

/* Where a query stands: the last engine (distance, id) processed, and whether it is done. */
typedef struct ExactQuery
{
	bool		done;
	bool		have_last;
	float		last_dist;
	int64		last_id;
} ExactQuery;

/*
 * Checks, in one pass over the heap (vs_check_pairs), the pairs a kNN pass over one round
 * of engine candidates most likely needs: per query the candidates after the last one it used, as
 * many as it still lacks.  The answer of candidate j of todo entry t goes to
 * res[t * kk + j], with checked[t * kk + j] set; the pass checks the others (after dead rows)
 * itself.
 */
static void
check_round(VsBatch *bc, const ExactQuery *st, const int *todo, int ntodo, int kq,
			const int64 *ids, const float *dists, const int64 *counts, int64 kk,
			VsPairResult *res, bool *checked)
{
	VsPair	   *pairs = NULL;
	Size		n = 0,
				cap = 0;

	for (int t = 0; t < ntodo; t++)
	{
		const ExactQuery *s = &st[todo[t]];
		int			have = bc->answers[todo[t]].n;
		int64		count = Min(counts[t], kk);
		const int64 *qids = ids + (Size) t * kk;
		const float *qd = dists + (Size) t * kk;
		int64		j = 0,
					need = kq - have,
					taken = 0;

		if (s->have_last)
			while (j < count && vs_cmp_engine_order(qd[j], qids[j], s->last_dist, s->last_id) <= 0)
				j++;
		for (; j < count && taken < need; j++)
		{
			if (qids[j] < 0)
				continue;
			vs_batch_add_pair(&pairs, &n, &cap, qids[j], todo[t], (Size) t * kk + j);
			checked[(Size) t * kk + j] = true;
			taken++;
		}
	}
	if (n == 0)
		return;
	vs_check_pairs(&bc->reader, pairs, n, res);
	pfree(pairs);
}

VsQueries
vs_batch_queries(const VsBatch *bc, const int *which, int n)
{
	VsQueries	q;

	memset(&q, 0, sizeof(q));
	q.nq = n;
	if (bc->queries != NULL)
	{
		float	   *v;

		if (which == NULL)
		{
			q.vectors = bc->queries;
			return q;
		}
		v = palloc_extended(sizeof(float) * bc->ref.dim * (Size) Max(n, 1), MCXT_ALLOC_HUGE);
		for (int t = 0; t < n; t++)
			memcpy(v + (Size) t * bc->ref.dim, bc->queries + (Size) which[t] * bc->ref.dim,
				   sizeof(float) * bc->ref.dim);
		q.vectors = v;
	}
	else if (which == NULL)
	{
		q.offsets = bc->offsets;
		q.chars = bc->chars;
	}
	else
	{
		uint64	   *off = palloc_extended(sizeof(uint64) * ((Size) n + 1), MCXT_ALLOC_HUGE);
		uint32	   *chars;
		Size		total = 0;

		for (int t = 0; t < n; t++)
			total += bc->offsets[which[t] + 1] - bc->offsets[which[t]];
		chars = palloc_extended(sizeof(uint32) * (total + 1), MCXT_ALLOC_HUGE);
		off[0] = 0;
		for (int t = 0; t < n; t++)
		{
			uint64		a = bc->offsets[which[t]],
						len = bc->offsets[which[t] + 1] - a;

			memcpy(chars + off[t], bc->chars + a, sizeof(uint32) * len);
			off[t + 1] = off[t] + len;
		}
		q.offsets = off;
		q.chars = chars;
	}
	return q;
}

/* Frees a subset from vs_batch_queries. */
static void
free_queries(VsQueries *q)
{
	if (q->vectors)
		pfree((float *) q->vectors);
	if (q->offsets)
		pfree((uint64 *) q->offsets);
	if (q->chars)
		pfree((uint32 *) q->chars);
}

/*
 * One round of kNN: its engine answers (kk per todo entry) and the state of working on them.  The
 * entries are worked on in order, [0, done) so far, those not finished moved to todo[0, next).
 */
typedef struct ExactRound
{
	VsBatch    *bc;
	ExactQuery *st;
	int		   *todo;
	int			kq;
	int64		kk;
	int64	   *ids;
	float	   *dists;
	int64	   *counts;
	VsPairResult *res;
	bool	   *checked;
	int			done;
	int			next;
	instr_time	overlapped;		/* working on answers while the search went on */
} ExactRound;

/*
 * Works on the answers of todo entries [r->done, upto): their rows' checks, then each query's
 * hits in engine order until it has k visible rows.  That order is (distance, id), so every row
 * after the k-th visible one lies at its distance or beyond: rows tied with the k-th are
 * interchangeable (the tie rule of docs/RELIABILITY.md), and looking at them would only make
 * the work grow with the size of the tie.
 */
static void
round_answers(ExactRound *r, int upto)
{
	VsBatch    *bc = r->bc;
	int			t0 = r->done;
	int64		kk = r->kk;

	if (upto <= t0)
		return;
	check_round(bc, r->st, r->todo + t0, upto - t0, r->kq, r->ids + (Size) t0 * kk,
				r->dists + (Size) t0 * kk, r->counts + t0, kk, r->res + (Size) t0 * kk,
				r->checked + (Size) t0 * kk);
	for (int t = t0; t < upto; t++)
	{
		int			q = r->todo[t];
		ExactQuery *s = &r->st[q];
		VsBatchAnswer *a = &bc->answers[q];
		int64		count = Min(r->counts[t], kk);

		for (int64 j = 0; j < count && !s->done; j++)
		{
			Size		pos = (Size) t * kk + j;
			int64		id = r->ids[pos];
			float		d = r->dists[pos];

			if (id < 0)
				continue;
			if (s->have_last && vs_cmp_engine_order(d, id, s->last_dist, s->last_id) <= 0)
				continue;	/* seen in an earlier round */
			s->have_last = true;
			s->last_dist = d;
			s->last_id = id;
			if (!r->checked[pos])
				vs_check_pair(&bc->reader, id, q, &r->res[pos]);
			if (r->res[pos].visible)
			{
				a->hits[a->n].distance = vs_rank_value(bc->ref.metric, d);
				a->hits[a->n].tid = r->res[pos].tid;
				if (++a->n == r->kq)
					s->done = true;
			}
		}
		if (count < kk)
			s->done = true;		/* the index is exhausted */
		if (!s->done)
			r->todo[r->next++] = q;
	}
	r->done = upto;
}

/* The search's progress callback (vs_search_knn_overlapped): the answers of [0, upto) are in. */
static void
round_progress(void *arg, int upto)
{
	ExactRound *r = (ExactRound *) arg;
	instr_time	t0,
				t1;

	INSTR_TIME_SET_CURRENT(t0);
	round_answers(r, upto);
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(r->overlapped, t1, t0);
}

void
vs_batch_knn_exact(VsBatch *bc, int kq)
{
	ExactQuery *st = palloc0(sizeof(ExactQuery) * bc->nq);
	int		   *todo = palloc(sizeof(int) * bc->nq);
	int			ntodo = bc->nq;
	int64		kk;
	instr_time	t0,
				t1;

	for (int q = 0; q < bc->nq; q++)
		todo[q] = q;
	/* a row wanted by queries of several slices or rounds is read once */
	bc->reader.remember = true;

	/*
	 * A little beyond k, for a few dead rows.  Not much more: on clustered data the engine's
	 * exact certification of the k-th candidate gets dearer as k approaches its candidate list
	 * (H100, 10M x 96: k = 10 in 758 ms, k = 26 in 1 277 ms); queries that meet more dead rows
	 * go on in a wider round.
	 */
	kk = Min((int64) kq + Max(4, kq / 8), (int64) bc->ref.ntuples + 1);
	while (ntodo > 0)
	{
		VsQueries	queries;
		ExactRound	r;
		bool		subset;

		if ((double) ntodo * kk > 2.0 * VS_BATCH_MAX_RESULTS)
			vs_batch_too_many(2 * (int64) VS_BATCH_MAX_RESULTS);
		subset = ntodo != bc->nq;
		queries = vs_batch_queries(bc, subset ? todo : NULL, ntodo);
		memset(&r, 0, sizeof(r));
		r.bc = bc;
		r.st = st;
		r.todo = todo;
		r.kq = kq;
		r.kk = kk;
		r.ids = palloc_extended(sizeof(int64) * ntodo * kk, MCXT_ALLOC_HUGE);
		r.dists = palloc_extended(sizeof(float) * ntodo * kk, MCXT_ALLOC_HUGE);
		r.counts = palloc(sizeof(int64) * ntodo);
		r.res = palloc_extended(sizeof(VsPairResult) * ntodo * kk, MCXT_ALLOC_HUGE);
		r.checked = palloc_extended(sizeof(bool) * ntodo * kk, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);

		/* a large batch's rows are checked while the worker computes its later requests */
		INSTR_TIME_SET_CURRENT(t0);
		vs_search_knn_overlapped(&bc->ref, NULL, &queries, (int) kk, r.ids, r.dists, r.counts,
								 round_progress, &r);
		INSTR_TIME_SET_CURRENT(t1);
		INSTR_TIME_ACCUM_DIFF(bc->search_time, t1, t0);
		INSTR_TIME_SUBTRACT(bc->search_time, r.overlapped);
		INSTR_TIME_ADD(bc->heap_time, r.overlapped);
		round_answers(&r, ntodo);
		ntodo = r.next;
		INSTR_TIME_SET_CURRENT(t0);
		INSTR_TIME_ACCUM_DIFF(bc->heap_time, t0, t1);
		bc->rounds++;
		if (subset)
			free_queries(&queries);
		pfree(r.ids);
		pfree(r.dists);
		pfree(r.counts);
		pfree(r.res);
		pfree(r.checked);

		/* widen: x4, or just past the row count, which finishes every query */
		if (ntodo > 0 && kk == INT_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("batch search cannot look at more than %d rows per query", INT_MAX)));
		if (kk >= (int64) INT_MAX / 4)
			kk = INT_MAX;
		else if (kk * 4 > (int64) bc->ref.ntuples + 1 && kk < (int64) bc->ref.ntuples + 1)
			kk = (int64) bc->ref.ntuples + 1;
		else
			kk *= 4;
	}
	pfree(st);
	pfree(todo);
}

static void
emit(Tuplestorestate *store, TupleDesc desc, int q, const VsHit *hit)
{
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	values[0] = Int32GetDatum(q + 1);
	values[1] = PointerGetDatum(&hit->tid);
	values[2] = Float8GetDatum(hit->distance);
	tuplestore_putvalues(store, desc, values, nulls);
}

/* The caller's checks and the locks of every batch function (vs_lc's text twins too). */
void
vs_batch_open(Oid indexoid, VsBatch *bc)
{
	INSTR_TIME_SET_CURRENT(bc->started);
	open_index(indexoid, bc);
	/* in the index's statistics a call is one scan and its answer rows the tuples it read */
	pgstat_count_index_scan(bc->index);
}

/* ---------------------------------------------------------------------------------------------
 * The SQL functions
 */

/* Does the batch hold queries to search (vectors of an index that has a dimension, or text)? */
static bool
has_queries(const VsBatch *bc)
{
	return bc->nq > 0 && bc->ref.ntuples > 0 && (bc->queries != NULL || bc->chars != NULL);
}

static int
query_number(const VsBatch *bc, int q)
{
	return bc->numbers ? bc->numbers[q] : q;
}

void
vs_batch_knn_answer(ReturnSetInfo *rsinfo, VsBatch *bc, int k)
{
	int			kq;
	instr_time	t0,
				t1;

	note_read_time(bc);
	if (!has_queries(bc))
		goto done;

	/* k beyond the index's entries returns every row; rows visible to us are among them */
	kq = (int) Min((uint64) k, bc->ref.ntuples);
	if ((double) bc->nq * kq > VS_BATCH_MAX_RESULTS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("batch of %d queries with k = %d asks for more than %d rows",
						bc->nq, kq, VS_BATCH_MAX_RESULTS),
				 errhint("Split the queries over several calls or use a smaller k.")));

	bc->answers = palloc0(sizeof(VsBatchAnswer) * bc->nq);
	for (int q = 0; q < bc->nq; q++)
		bc->answers[q].hits = palloc(sizeof(VsHit) * kq);
	/* a search that gives the operator's distances leaves the rows' visibility to read */
	vs_row_reader_begin(&bc->reader, bc->heap, bc->index, bc->ref.dim, bc->ref.metric,
						vs_ref_kind(&bc->ref)->exact ||
						(vs_ref_kind(&bc->ref)->exact_distances &&
						 vs_ref_kind(&bc->ref)->exact_distances(&bc->ref))
						? NULL : bc->queries);
	vs_ref_kind(&bc->ref)->batch_knn(bc, kq);
	vs_row_reader_end(&bc->reader);

	INSTR_TIME_SET_CURRENT(t0);
	for (int q = 0; q < bc->nq; q++)
	{
		VsBatchAnswer *a = &bc->answers[q];

		qsort(a->hits, a->n, sizeof(VsHit), cmp_hit_qsort);
		for (int i = 0; i < a->n; i++)
			emit(rsinfo->setResult, rsinfo->setDesc, query_number(bc, q), &a->hits[i]);
	}
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(bc->emit_time, t1, t0);
	report_times(bc, "vsearch_knn_batch");

done:
	pgstat_count_index_tuples(bc->index, tuplestore_tuple_count(rsinfo->setResult));
	index_close(bc->index, NoLock);
	table_close(bc->heap, NoLock);
}

PG_FUNCTION_INFO_V1(vsearch_knn_batch);
Datum
vsearch_knn_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	int32		k = PG_GETARG_INT32(2);
	VsBatch		bc;

	if (k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", k)));

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	vs_batch_open(indexoid, &bc);
	read_queries(PG_GETARG_ARRAYTYPE_P(1), &bc);
	vs_batch_knn_answer(rsinfo, &bc, k);
	return (Datum) 0;
}

/*
 * vsearch_range_batch's consumer of the candidates' chunks (search.h, VsRangeChunk): each chunk's
 * (query, row) pairs are checked in one pass over the heap and its rows go to the SRF's store
 * (which spills to disk past work_mem) before the next chunk comes, so the backend holds one
 * chunk's pairs at a time, whatever the answer's size.  A query's rows come out nearest first:
 * sorted in memory, or, for a query whose candidates span several chunks, in a tuplesort of its
 * own (work_mem, then temporary files).
 */
typedef struct RangeBatch
{
	VsBatch    *bc;
	ReturnSetInfo *rsinfo;
	double		radius;
	bool		exact;
	/* a chunk's pairs, grown to the largest chunk */
	VsPair	   *pairs;
	double	   *found;			/* the pairs' distances as the search found them */
	VsPairResult *res;
	Size		maxpairs;
	Size	   *qfirst;			/* the chunk's queries: where their pairs start */
	int			maxq;
	VsHit	   *hits;			/* one query's rows */
	int64		maxhits;
	/* the query whose candidates span chunks: its rows sorted by (distance, row_ctid) */
	Tuplesortstate *split;
	TupleTableSlot *slot;
} RangeBatch;

static void
range_emit_split(RangeBatch *rb, int q, const VsHit *hit)
{
	TupleTableSlot *slot = rb->slot;

	ExecClearTuple(slot);
	slot->tts_values[0] = Int32GetDatum(query_number(rb->bc, q) + 1);
	slot->tts_values[1] = PointerGetDatum(&hit->tid);
	slot->tts_values[2] = Float8GetDatum(hit->distance);
	memset(slot->tts_isnull, false, sizeof(bool) * 3);
	ExecStoreVirtualTuple(slot);
	tuplesort_puttupleslot(rb->split, slot);
}

/* The rows of a query that spanned chunks, nearest first, into the store. */
static void
range_finish_split(RangeBatch *rb)
{
	tuplesort_performsort(rb->split);
	while (tuplesort_gettupleslot(rb->split, true, false, rb->slot, NULL))
		tuplestore_puttupleslot(rb->rsinfo->setResult, rb->slot);
	tuplesort_end(rb->split);
	rb->split = NULL;
}

static void
range_chunk(void *arg, const VsRangeChunk *chunk)
{
	RangeBatch *rb = (RangeBatch *) arg;
	VsBatch    *bc = rb->bc;
	Size		npairs = chunk->offsets[chunk->nq];
	Size		p = 0;
	instr_time	t0,
				t1;

	INSTR_TIME_SET_CURRENT(t0);
	if (npairs > PG_UINT32_MAX)
		too_many_pairs();
	if (npairs > rb->maxpairs)
	{
		if (rb->pairs)
		{
			pfree(rb->pairs);
			pfree(rb->found);
			pfree(rb->res);
		}
		rb->pairs = palloc_extended(sizeof(VsPair) * npairs, MCXT_ALLOC_HUGE);
		rb->found = palloc_extended(sizeof(double) * npairs, MCXT_ALLOC_HUGE);
		rb->res = palloc_extended(sizeof(VsPairResult) * npairs, MCXT_ALLOC_HUGE);
		rb->maxpairs = npairs;
	}
	if (chunk->nq > rb->maxq)
	{
		if (rb->qfirst)
			pfree(rb->qfirst);
		rb->qfirst = palloc(sizeof(Size) * ((Size) chunk->nq + 1));
		rb->maxq = chunk->nq;
	}
	for (int i = 0; i < chunk->nq; i++)
	{
		rb->qfirst[i] = p;
		for (int64 j = chunk->offsets[i]; j < chunk->offsets[i + 1]; j++)
			if (chunk->ids[j] >= 0)
			{
				rb->pairs[p].id = chunk->ids[j];
				rb->pairs[p].query = chunk->q0 + i;
				rb->pairs[p].slot = (uint32) p;
				rb->found[p] = vs_rank_value(bc->ref.metric, chunk->distances[j]);
				p++;
			}
	}
	rb->qfirst[chunk->nq] = p;
	vs_check_pairs(&bc->reader, rb->pairs, p, rb->res);

	p = 0;
	for (int i = 0; i < chunk->nq; i++)
	{
		int			q = chunk->q0 + i;
		bool		spans = (i == 0 && rb->split != NULL) || (chunk->more && i == chunk->nq - 1);
		int64		n = 0;

		for (; p < rb->qfirst[i + 1]; p++)
		{
			VsPairResult *r = &rb->res[p];

			/* an exact index found exactly the rows within the radius; else the operator's test */
			if (rb->exact && r->visible)
				r->distance = rb->found[p];
			if (!r->visible || !(r->distance <= rb->radius))
				continue;
			if (n == rb->maxhits)
			{
				rb->maxhits = Max(rb->maxhits * 2, 1024);
				rb->hits = rb->hits ? repalloc_huge(rb->hits, sizeof(VsHit) * rb->maxhits)
					: palloc_extended(sizeof(VsHit) * rb->maxhits, MCXT_ALLOC_HUGE);
			}
			rb->hits[n].distance = r->distance;
			rb->hits[n].tid = r->tid;
			n++;
		}
		if (spans)
		{
			if (rb->split == NULL)
			{
				AttrNumber	keys[2] = {3, 2};	/* distance, row_ctid */
				Oid			ops[2] = {Float8LessOperator, TIDLessOperator};
				Oid			colls[2] = {InvalidOid, InvalidOid};
				bool		nulls_first[2] = {false, false};

				rb->split = tuplesort_begin_heap(rb->rsinfo->setDesc, 2, keys, ops, colls,
												 nulls_first, work_mem, NULL, TUPLESORT_NONE);
			}
			for (int64 j = 0; j < n; j++)
				range_emit_split(rb, q, &rb->hits[j]);
			if (!(chunk->more && i == chunk->nq - 1))
				range_finish_split(rb);
			continue;
		}
		if (n > 1)
			qsort(rb->hits, n, sizeof(VsHit), cmp_hit_qsort);
		for (int64 j = 0; j < n; j++)
			emit(rb->rsinfo->setResult, rb->rsinfo->setDesc, query_number(bc, q), &rb->hits[j]);
	}
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(bc->heap_time, t1, t0);
}

void
vs_batch_range_answer(ReturnSetInfo *rsinfo, VsBatch *bc, double radius)
{
	VsQueries	queries;
	RangeBatch	rb;
	instr_time	t0,
				t1;

	note_read_time(bc);
	if (!has_queries(bc))
		goto done;

	memset(&rb, 0, sizeof(rb));
	rb.bc = bc;
	rb.rsinfo = rsinfo;
	rb.radius = radius;
	rb.exact = vs_ref_kind(&bc->ref)->exact;
	rb.slot = MakeSingleTupleTableSlot(rsinfo->setDesc, &TTSOpsMinimalTuple);
	vs_row_reader_begin(&bc->reader, bc->heap, bc->index, bc->ref.dim, bc->ref.metric,
						rb.exact ? NULL : bc->queries);

	/* every row the index may find within the radius, chunk by chunk; the operator decides */
	INSTR_TIME_SET_CURRENT(t0);
	queries = vs_batch_queries(bc, NULL, bc->nq);
	vs_ref_kind(&bc->ref)->range_candidates(&bc->ref, &queries, radius, range_chunk, &rb);
	if (rb.split != NULL)
		elog(ERROR, "vsearch: a range answer ended in the middle of a query");
	vs_search_trim_cache();
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(bc->search_time, t1, t0);
	INSTR_TIME_SUBTRACT(bc->search_time, bc->heap_time);
	bc->rounds = 1;
	report_times(bc, "vsearch_range_batch");
	vs_row_reader_end(&bc->reader);
	ExecDropSingleTupleTableSlot(rb.slot);
	if (rb.pairs)
	{
		pfree(rb.pairs);
		pfree(rb.found);
		pfree(rb.res);
	}
	if (rb.qfirst)
		pfree(rb.qfirst);
	if (rb.hits)
		pfree(rb.hits);

done:
	pgstat_count_index_tuples(bc->index, tuplestore_tuple_count(rsinfo->setResult));
	index_close(bc->index, NoLock);
	table_close(bc->heap, NoLock);
}

PG_FUNCTION_INFO_V1(vsearch_range_batch);
Datum
vsearch_range_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			indexoid = PG_GETARG_OID(0);
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(1);
	double		radius = PG_GETARG_FLOAT8(2);
	VsBatch		bc;

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	vs_batch_open(indexoid, &bc);
	vs_check_radius(bc.ref.metric, radius);
	read_queries(array, &bc);
	vs_batch_range_answer(rsinfo, &bc, radius);
	return (Datum) 0;
}
