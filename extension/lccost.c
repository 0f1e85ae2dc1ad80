/*
 * vs_lc: cost estimates (amcostestimate).
 *
 * A search computes the distance to every center up to the early stop, and to the members of the
 * buckets it cannot prune, all before its first row: startup cost.  How much is pruned depends on
 * the data and the radius; the estimate takes every center plus a share of the members that grows
 * with the range quals' selectivity (at least 10 %):
 *
 *   distances = searches * (centers + members * min(1, 0.1 + 10 * selectivity))
 *   startup   = distances * distance_cost + loading the pages (unless the backend cache holds them)
 *   total     = startup + returned rows * cpu_index_tuple_cost (+ the follow-up searches of an
 *               ORDER BY drained past its first 64 rows)
 *
 * distance_cost: the vector operators' dimension-proportional cost (vector_cost.c), or for text
 * about one cpu_operator_cost per character pair of a short word (Myers' bit-parallel step per
 * character: 10 operator costs).
 */
#include "postgres.h"

#include <math.h>

#include "optimizer/cost.h"
#include "optimizer/optimizer.h"

#include "lc.h"
#include "vector.h"

#define VS_LC_TEXT_DISTANCE_COST	10.0	/* in cpu_operator_cost */

void
vs_lc_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
				   Cost *indexStartupCost, Cost *indexTotalCost,
				   Selectivity *indexSelectivity, double *indexCorrelation,
				   double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	VsCostBase	c;
	bool		text;
	double		distance_cost;
	double		centers;
	double		members;
	double		searches;
	double		distances;
	double		page_cost;
	Cost		startup;
	Cost		total;

	if (!vs_cost_begin(root, path, loop_count, &c, indexStartupCost, indexTotalCost,
					   indexSelectivity, indexCorrelation, indexPages))
		return;
	text = (int) c.ref.metric == VS_METRIC_LEVENSHTEIN;
	distance_cost = (text ? VS_LC_TEXT_DISTANCE_COST * cpu_operator_cost
					 : vs_distance_cost((int) Max(c.ref.dim, 1))) * c.search_factor;
	centers = Max((double) c.ref.kind_info[0], 1.0);
	members = Max(c.rows - centers, 0.0);
	searches = c.nranges + (c.ordered ? 1 : 0);
	distances = searches * (centers + members * Min(1.0, 0.1 + 10.0 * c.selectivity));
	page_cost = (double) index->pages * BLCKSZ <= (double) Max(vs_search_cache_mb, 0) * 1024 * 1024
		? 0.0 : index->pages * c.seq_page_cost;

	startup = page_cost + distances * distance_cost;
	total = startup + c.rows * c.selectivity * cpu_index_tuple_cost;
	if (c.ordered && c.nranges == 0 && c.rows > 64.0)
		total += ceil(log(c.rows / 64.0) / log(4.0)) * (centers + members) * distance_cost;

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
