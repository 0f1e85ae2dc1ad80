/*
 * vs_flat: cost estimates (amcostestimate).
 *
 * Every vs_flat search reads all index pages in order (in shared buffers, or the worker's copy)
 * and computes one distance per row before it returns its first row, so nearly all of the cost is
 * startup cost: the planner's LIMIT scaling then only discounts the heap fetches, and
 * `ORDER BY v <-> q LIMIT k` on a table of some size costs about one pass over the vectors, which
 * beats a seq scan that evaluates the operator and feeds a top-N sort per row.  Tiny tables keep
 * the seq scan (a search has a fixed cost), and so do full orderings without LIMIT when fetching
 * every heap row in distance order is dearer than sorting.
 *
 *   startup = index pages * seq_page_cost (unless resident) + searches * rows * distance_cost
 *             + search overhead
 *   total   = startup + (ORDER BY without LIMIT) the follow-up searches of a drained scan
 *             + rows returned * (cpu_index_tuple_cost + ORDER BY: executor reordering)
 *
 * Resident: the GPU worker searches its own copy, and a backend reads the pages in place in shared
 * buffers (flatpages.c), where an index of at most half of shared_buffers stays between searches
 * (pinning a page costs little beside its rows' distances), so such an index is charged no page
 * reads; a larger one is read through a ring by every search.
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

#include "optimizer/cost.h"
#include "optimizer/optimizer.h"

#include "flat.h"

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
	VsCostBase	c;
	double		distance_cost;
	double		row_cost;		/* the operator on a heap row: the executor's recheck */
	double		page_cost;
	double		searches;
	Cost		startup;
	Cost		total;

	if (!vs_cost_begin(root, path, loop_count, &c, indexStartupCost, indexTotalCost,
					   indexSelectivity, indexCorrelation, indexPages))
		return;
	distance_cost = vs_distance_cost((int) c.ref.dim) * c.search_factor;
	row_cost = vs_distance_cost((int) c.ref.dim) +
		vs_detoast_cost(c.heapoid, c.attnum, (int) c.ref.dim);
	page_cost = (c.search_factor < 1.0 || vs_flat_stays_resident((double) index->pages))
		? 0.0 : index->pages * c.seq_page_cost;

	/* One range search per range qual, one kNN search for the ORDER BY. */
	searches = c.nranges + (c.ordered ? 1 : 0);
	startup = page_cost +
		searches * (c.rows * distance_cost + VS_FLAT_SEARCH_OVERHEAD * c.seq_page_cost);
	total = startup;

	/*
	 * An ORDER BY scan drained to the end repeats its kNN search with k growing geometrically
	 * (flatscan.c); with a range qual the first search already covers the range.  This is run
	 * cost: a LIMIT discounts it.
	 */
	if (c.ordered && c.nranges == 0 && c.rows > VS_FLAT_COST_FIRST_BATCH)
	{
		double		more = ceil(log(c.rows / VS_FLAT_COST_FIRST_BATCH) / log(VS_FLAT_COST_GROWTH));

		total += more * (c.rows * distance_cost + VS_FLAT_SEARCH_OVERHEAD * c.seq_page_cost);
	}
	total += c.rows * c.selectivity * cpu_index_tuple_cost;
	if (c.ordered)
	{
		double		returned = Max(c.rows * c.selectivity, 1.0);

		/* recheck the operator, then a pairing-heap push and pop per row */
		total += returned * (row_cost + cpu_operator_cost * 2.0 * log2(Max(returned, 2.0)));
	}

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
