/*
 * vs_graph: cost estimates (amcostestimate).
 *
 * An ORDER BY search is a beam search of width ef = vsearch.graph_ef: it expands about ef nodes
 * (a few more while the beam fills) and computes the distance of each one's unvisited neighbours,
 * about half of `degree` once the search is under way, so about ef x degree / 2 + degree distances,
 * more when it expands several nodes per step (vsearch.graph_expand, expand_factor below),
 * plus one per start node (the entry and the seeds the metapage names: by default about
 * 2 sqrt(rows), or the option `seeds`), each reading a node from the buffer cache (an index page,
 * mostly cached: seq_page_cost per distinct page, at most the index's pages).  All of it happens before the first row: startup
 * cost.  Draining the scan (no LIMIT, or a selective filter) goes on with wider rounds and finally
 * a pass over every node: the run cost covers that pass.  Range quals are a pass over every node.
 *
 *   visits  = min(rows, (ef x degree / 2 + degree) x expand_factor + start nodes)
 *   startup = visits * (distance_cost + cpu_operator_cost) + min(visits, pages) * seq_page_cost
 *   total   = startup + [drained] rows * distance_cost + pages * seq_page_cost
 *             + rows returned * cpu_index_tuple_cost
 *
 * distance_cost = vs_distance_cost(dim); a beam search's distances are multiplied by
 * vs_search_distance_cost(index) (less while the GPU worker serves, which runs the beam searches
 * of width up to VS_GRAPH_MAX_WORKER_EF); the pass over every node runs in this backend.
 */
#include "postgres.h"


#include "optimizer/cost.h"
#include "optimizer/optimizer.h"

#include "graph.h"

/*
 * The beam's distances at vsearch.graph_expand = w, relative to w = 1: a step measures the
 * neighbours of all w nodes before the beam changes, some of which a search of one node per step
 * would not have expanded; the start nodes are measured once either way.  On the engine's CPU
 * reference set (ENGINE.md, "Graphs": 20 000 x 32, degree 32, 268 start nodes) a query's
 * distances beyond its start nodes' were 111 / 127 / 178 at width 10 with w = 1 / 2 / 4
 * (x 1.14 / 1.60) and 142 / 157 / 206 at width 64 (x 1.11 / 1.45); 1 + 0.17 (w - 1) is the
 * least-squares fit of those four ratios by a line through 1 at w = 1.  It counts distances, as
 * the rest of the estimate does: on a GPU the fewer steps make one query faster all the same.
 */
#define VS_GRAPH_EXPAND_EXTRA	0.17

static double
expand_factor(int expand)
{
	return 1.0 + VS_GRAPH_EXPAND_EXTRA * (expand - 1);
}

void
vs_graph_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					  Cost *indexStartupCost, Cost *indexTotalCost,
					  Selectivity *indexSelectivity, double *indexCorrelation,
					  double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	VsCostBase	c;
	double		distance_cost;
	double		degree;
	double		visits;
	double		pages = Max(index->pages, 1.0);
	Cost		startup;
	Cost		total;

	if (!vs_cost_begin(root, path, loop_count, &c, indexStartupCost, indexTotalCost,
					   indexSelectivity, indexCorrelation, indexPages))
		return;
	distance_cost = vs_distance_cost((int) Max(c.ref.dim, 1));
	degree = Max((double) VsGraphRefDegree(&c.ref), 1.0);

	if (c.nranges > 0)
	{
		/* a pass over every node, each range qual's distance */
		startup = c.rows * (distance_cost * c.nranges + cpu_operator_cost) +
			pages * c.seq_page_cost;
		if (c.ordered)
			startup += c.rows * c.selectivity * distance_cost;
		total = startup;
	}
	else
	{
		double		search_cost = distance_cost;

		if (vs_graph_ef <= VS_GRAPH_MAX_WORKER_EF)
			search_cost *= vs_search_distance_cost(index->indexoid);
		visits = Min(c.rows, (Max(vs_graph_ef, 1) * degree * 0.5 + degree) *
					 expand_factor(vs_graph_expand) + (double) VsGraphRefStarts(&c.ref));
		startup = visits * (search_cost + cpu_operator_cost) +
			Min(visits, pages) * c.seq_page_cost;
		total = startup + c.rows * distance_cost + pages * c.seq_page_cost;
	}
	total += c.rows * c.selectivity * cpu_index_tuple_cost;

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
