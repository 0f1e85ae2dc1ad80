/*
 * vs_sss: cost estimates (amcostestimate).  A search computes the query's distance to every pivot,
 * tests every row's table entries (a few comparisons each, until a pivot discards it: about one
 * cpu_operator_cost per row) and compares the rows no pivot discards, a share that grows with the
 * range quals' selectivity (at least 5 %), all before its first row:
 *
 *   startup = searches * (pivots * distance_cost + rows * cpu_operator_cost
 *                         + rows * min(1, 0.05 + 10 * selectivity) * distance_cost) + pages
 *   total   = startup + returned rows * cpu_index_tuple_cost
 */
#include "postgres.h"

#include "optimizer/cost.h"
#include "optimizer/optimizer.h"

#include "sss.h"
#include "vector.h"

void
vs_sss_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					Cost *indexStartupCost, Cost *indexTotalCost,
					Selectivity *indexSelectivity, double *indexCorrelation,
					double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	VsCostBase	c;
	double		distance_cost;
	double		pivots;
	double		searches;
	double		page_cost;
	Cost		startup;

	if (!vs_cost_begin(root, path, loop_count, &c, indexStartupCost, indexTotalCost,
					   indexSelectivity, indexCorrelation, indexPages))
		return;
	distance_cost = ((int) c.ref.metric == VS_METRIC_LEVENSHTEIN ? 10.0 * cpu_operator_cost
					 : vs_distance_cost((int) Max(c.ref.dim, 1))) * c.search_factor;
	pivots = (double) c.ref.kind_info[0];
	searches = c.nranges + (c.ordered ? 1 : 0);
	page_cost = (double) index->pages * BLCKSZ <= (double) Max(vs_search_cache_mb, 0) * 1024 * 1024
		? 0.0 : index->pages * c.seq_page_cost;
	startup = page_cost + searches * (pivots * distance_cost + c.rows * cpu_operator_cost +
									  c.rows * Min(1.0, 0.05 + 10.0 * c.selectivity) * distance_cost);
	*indexStartupCost = startup;
	*indexTotalCost = startup + c.rows * c.selectivity * cpu_index_tuple_cost;
}
