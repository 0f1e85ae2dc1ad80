/*
 * vs_flat: cost estimates (amcostestimate).
 *
 * Every vs_flat search reads all index pages in order (or finds them in the search layer's cache)
 * and computes one distance per row before it returns its first row, so nearly all of the cost is
 * startup cost: the planner's LIMIT scaling then only discounts the heap fetches, and
 * `ORDER BY v <-> q LIMIT k` on a table of some size costs about one pass over the vectors, which
 * beats a seq scan that evaluates the operator and feeds a top-N sort per row.  Tiny tables keep
 * the seq scan (a search has a fixed cost), and so do full orderings without LIMIT when fetching
 * every heap row in distance order is dearer than sorting.
 *
 *   startup = index pages * seq_page_cost (unless cached) + searches * rows * distance_cost
 *             + search overhead
 *   total   = startup + (ORDER BY without LIMIT) the follow-up searches of a drained scan
 *             + rows returned * (cpu_index_tuple_cost + ORDER BY: executor reordering)
 *
 * Cached: a search reads the index pages only to load or refresh the search layer's copy (the
 * backend's dataset cache, up to vs_search_cache_mb, or the GPU worker's), not per query, so an
 * index that fits is charged no page reads; a larger one is read by every search.
 *
 * ORDER BY rows are rechecked (the executor recomputes the operator and passes every row through
 * its reorder queue, flatscan.c), which costs about what a sort of the returned rows costs: a full
 * ordering without LIMIT is then no cheaper than seq scan + sort and keeps the seq scan.
 *
 * distance_cost = vs_distance_cost(dim) * vs_search_distance_cost(index): the SQL operator's
 * dimension-proportional cost (vector_cost.c, the same as a seq scan is charged) and the hook the
 * GPU worker uses to make its searches cheaper (search.h).  The executor's recheck of returned rows
 * pays the operator's full cost, TOAST fetch included.
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "flat.h"
#include "search.h"
#include "vector.h"

/* Fixed overhead of one search (request, engine call, result handling), in seq page units. */
#define VS_FLAT_SEARCH_OVERHEAD		4.0
/* First batch and growth factor of an ORDER BY scan: keep in step with flatscan.c. */
#define VS_FLAT_COST_FIRST_BATCH	64.0
#define VS_FLAT_COST_GROWTH			4.0

void
vs_flat_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					 Cost *indexStartupCost, Cost *indexTotalCost,
					 Selectivity *indexSelectivity, double *indexCorrelation,
					 double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	GenericCosts costs;
	double		rows = Max(index->tuples, 1.0);
	int			nranges = list_length(path->indexclauses);
	bool		ordered = path->indexorderbys != NIL;
	double		search_factor = vs_search_distance_cost(index->indexoid);
	double		distance_cost;
	double		row_cost;		/* the operator on a heap row: the executor's recheck */
	double		page_cost;
	Oid			heapoid = planner_rt_fetch(index->rel->relid, root)->relid;
	AttrNumber	attnum = index->indexkeys[0];
	VsFlatMetaPageData meta;
	Relation	rel;
	double		spc_seq_page_cost;
	double		searches;
	Cost		startup;
	Cost		total;

	*indexCorrelation = 0.0;	/* heap rows come in distance order: random */
	*indexPages = index->pages;

	/* A scan with neither a range nor an ORDER BY would return every row: never worth it. */
	if (!ordered && nranges == 0)
	{
		*indexStartupCost = disable_cost;
		*indexTotalCost = disable_cost;
		*indexSelectivity = 1.0;
		return;
	}

	/* For the selectivity of the range quals (their operators' estimators). */
	MemSet(&costs, 0, sizeof(costs));
	costs.numIndexTuples = rows;
	genericcostestimate(root, path, loop_count, &costs);
	*indexSelectivity = costs.indexSelectivity;

	get_tablespace_page_costs(index->reltablespace, NULL, &spc_seq_page_cost);

	rel = index_open(index->indexoid, NoLock);	/* the planner holds a lock */
	vs_flat_read_meta(rel, &meta);
	index_close(rel, NoLock);
	distance_cost = vs_distance_cost((int) meta.dim) * search_factor;
	row_cost = vs_distance_cost((int) meta.dim) + vs_detoast_cost(heapoid, attnum, (int) meta.dim);
	page_cost = (search_factor < 1.0 ||
				 (double) index->pages * BLCKSZ <= (double) Max(vs_search_cache_mb, 0) * 1024 * 1024)
		? 0.0 : index->pages * spc_seq_page_cost;

	/* One range search per range qual, one kNN search for the ORDER BY. */
	searches = nranges + (ordered ? 1 : 0);
	startup = page_cost +
		searches * (rows * distance_cost + VS_FLAT_SEARCH_OVERHEAD * spc_seq_page_cost);
	total = startup;

	/*
	 * An ORDER BY scan drained to the end repeats its kNN search with k growing geometrically
	 * (flatscan.c); with a range qual the first search already covers the range.  This is run
	 * cost: a LIMIT discounts it.
	 */
	if (ordered && nranges == 0 && rows > VS_FLAT_COST_FIRST_BATCH)
	{
		double		more = ceil(log(rows / VS_FLAT_COST_FIRST_BATCH) / log(VS_FLAT_COST_GROWTH));

		total += more * (rows * distance_cost + VS_FLAT_SEARCH_OVERHEAD * spc_seq_page_cost);
	}
	total += rows * costs.indexSelectivity * cpu_index_tuple_cost;
	if (ordered)
	{
		double		returned = Max(rows * costs.indexSelectivity, 1.0);

		/* recheck the operator, then a pairing-heap push and pop per row */
		total += returned * (row_cost + cpu_operator_cost * 2.0 * log2(Max(returned, 2.0)));
	}

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
