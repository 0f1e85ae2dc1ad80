/*
 * What a distance costs the planner.
 *
 * PostgreSQL charges a function cpu_operator_cost per call unless its support function says more.
 * A distance between two d-dimensional vectors is d multiply-adds, and a vector stored out of line
 * (TOAST: the type's default storage is `external`, and rows above ~2 kB are moved out) must first
 * be fetched through the TOAST table's index, chunk by chunk.  Without this, a sequential scan of
 * 784-dimensional vectors was estimated ~12x cheaper than an exact index search that ran 25x faster
 * (docs/INDEXES.md, Costs).  The index access methods use the same two figures for the distances
 * they compute (vs_distance_cost) and the heap rows they re-rank (vs_detoast_cost).
 */
#include "postgres.h"

#include <math.h>

#include "access/heaptoast.h"
#include "catalog/pg_attribute.h"
#include "nodes/nodeFuncs.h"
#include "nodes/supportnodes.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "utils/syscache.h"

#include "vector.h"

/* Dimensions whose distance costs one cpu_operator_cost more: a SIMD loop does ~128 in the time
 * of a function call. */
#define VS_DIMS_PER_OPERATOR_COST 128.0

double
vs_distance_cost(int dim)
{
	return cpu_operator_cost * (1.0 + Max(dim, 0) / VS_DIMS_PER_OPERATOR_COST);
}

double
vs_detoast_cost(Oid relid, AttrNumber attnum, int dim)
{
	HeapTuple	tp;
	char		storage;
	double		bytes = VARHDRSZ + 4.0 + sizeof(float) * (double) Max(dim, 0);
	double		chunks;

	if (!OidIsValid(relid) || attnum <= 0 || dim <= 0 || bytes <= TOAST_TUPLE_THRESHOLD)
		return 0.0;
	tp = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid), Int16GetDatum(attnum));
	if (!HeapTupleIsValid(tp))
		return 0.0;
	storage = ((Form_pg_attribute) GETSTRUCT(tp))->attstorage;
	ReleaseSysCache(tp);
	if (storage != TYPSTORAGE_EXTERNAL && storage != TYPSTORAGE_EXTENDED)
		return 0.0;				/* main or plain: kept in the row */

	/* a TOAST index probe, then the chunks: their tuples and their share of the TOAST pages */
	chunks = ceil(bytes / TOAST_MAX_CHUNK_SIZE);
	return cpu_index_tuple_cost + cpu_operator_cost * 4.0 + chunks * cpu_tuple_cost +
		(chunks * TOAST_MAX_CHUNK_SIZE / BLCKSZ) * seq_page_cost;
}

/* The dimension and TOAST cost of one operand as the planner sees it. */
static void
operand_cost(PlannerInfo *root, Node *arg, int *dim, double *detoast)
{
	int32		typmod = exprTypmod(arg);

	*dim = typmod > 0 ? typmod : 0;
	*detoast = 0.0;
	if (root != NULL && IsA(arg, Var) && ((Var *) arg)->varlevelsup == 0 &&
		((Var *) arg)->varno > 0 && ((Var *) arg)->varno <= list_length(root->parse->rtable))
	{
		RangeTblEntry *rte = planner_rt_fetch(((Var *) arg)->varno, root);

		if (rte->rtekind == RTE_RELATION)
			*detoast = vs_detoast_cost(rte->relid, ((Var *) arg)->varattno, *dim);
	}
}

/* Support function of the distance functions: their cost per call (SupportRequestCost). */
PG_FUNCTION_INFO_V1(vector_distance_support);
Datum
vector_distance_support(PG_FUNCTION_ARGS)
{
	Node	   *rawreq = (Node *) PG_GETARG_POINTER(0);
	SupportRequestCost *req;
	List	   *args;
	ListCell   *lc;
	int			dim = 0;
	double		detoast = 0.0;

	if (!IsA(rawreq, SupportRequestCost))
		PG_RETURN_POINTER(NULL);
	req = (SupportRequestCost *) rawreq;
	if (req->node == NULL)
		PG_RETURN_POINTER(NULL);	/* no call site: the default cost */
	if (IsA(req->node, FuncExpr))
		args = ((FuncExpr *) req->node)->args;
	else if (IsA(req->node, OpExpr))
		args = ((OpExpr *) req->node)->args;
	else
		PG_RETURN_POINTER(NULL);

	foreach(lc, args)
	{
		int			d;
		double		t;

		operand_cost(req->root, (Node *) lfirst(lc), &d, &t);
		dim = Max(dim, d);
		detoast += t;
	}
	req->startup = 0.0;
	req->per_tuple = vs_distance_cost(dim) + detoast;
	PG_RETURN_POINTER(req);
}
