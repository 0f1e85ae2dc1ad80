/*
 * vs_ivfpq: cost estimates (amcostestimate).
 *
 * A search ranks the lists by their centroid (lists distances), scans the probed fraction of the
 * entries with table lookups (cheaper than a distance: a quarter of one here) and re-ranks
 * `vsearch.ivfpq_rerank` candidates exactly, which without store_vectors means reading their heap
 * rows.  All of that happens before the first row comes back, so it is startup cost, and under a
 * LIMIT the planner only adds the fraction of the run cost it needs.  Draining the scan (no LIMIT,
 * or a selective filter) goes on through every list: the run cost covers re-ranking every row.
 *
 *   startup = probed pages * seq_page_cost + lists * distance_cost
 *             + probed rows * distance_cost / 4 + rerank * (exact_cost + cpu_tuple_cost)
 *             + heap pages read by the re-rank (index_pages_fetched: with caching) *
 *               random_page_cost + search overhead
 *   total   = startup + (rows - rerank) * (distance_cost / 4 + exact_cost + cpu_tuple_cost
 *                                          + fetch share)
 *             + rows returned * cpu_index_tuple_cost
 *
 * distance_cost = vs_distance_cost(dim) * vs_search_distance_cost(index) (vector_cost.c,
 * search.h): less when the GPU worker serves, which finds the candidates; exact_cost =
 * vs_distance_cost(dim) plus, without store_vectors, the TOAST fetch of a heap vector stored out of
 * line (vs_detoast_cost), since the re-rank (and the pending rows of an index without a quantizer)
 * is always computed in the backend.
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "utils/rel.h"
#include "utils/selfuncs.h"
#include "utils/spccache.h"

#include "ivfpq.h"
#include "search.h"
#include "vector.h"

#define VS_IVFPQ_SEARCH_OVERHEAD	2.0	/* seq page units */

void
vs_ivfpq_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					  Cost *indexStartupCost, Cost *indexTotalCost,
					  Selectivity *indexSelectivity, double *indexCorrelation,
					  double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	GenericCosts costs;
	double		rows = Max(index->tuples, 1.0);
	int			nranges = list_length(path->indexclauses);
	bool		ordered = path->indexorderbys != NIL;
	/* estimates: where the candidates are searched (the GPU worker, when it serves) */
	double		search_factor = vs_search_distance_cost(index->indexoid);
	double		distance_cost;
	/* exact distances of the re-rank: always in this backend */
	double		exact_cost;
	double		spc_seq_page_cost;
	double		spc_random_page_cost;
	VsIvfpqMetaPageData meta;
	Relation	rel;
	double		frac;
	double		rerank;
	double		heap_pages = Max(index->rel->pages, 1.0);
	double		fetch_pages;
	Cost		startup;
	Cost		total;

	*indexCorrelation = 0.0;
	*indexPages = index->pages;

	if (!ordered && nranges == 0)
	{
		*indexStartupCost = disable_cost;
		*indexTotalCost = disable_cost;
		*indexSelectivity = 1.0;
		return;
	}

	MemSet(&costs, 0, sizeof(costs));
	costs.numIndexTuples = rows;
	genericcostestimate(root, path, loop_count, &costs);
	*indexSelectivity = costs.indexSelectivity;
	get_tablespace_page_costs(index->reltablespace, &spc_random_page_cost, &spc_seq_page_cost);

	rel = index_open(index->indexoid, NoLock);	/* the planner holds a lock */
	vs_ivfpq_read_meta(rel, &meta);
	index_close(rel, NoLock);
	distance_cost = vs_distance_cost((int) meta.dim) * search_factor;
	exact_cost = vs_distance_cost((int) meta.dim) +
		(meta.store_vectors ? 0.0
		 : vs_detoast_cost(planner_rt_fetch(index->rel->relid, root)->relid, index->indexkeys[0],
						   (int) meta.dim));

	if (meta.trained && meta.lists > 0)
	{
		frac = Min(1.0, (double) Max(vs_ivfpq_probes, 1) / meta.lists);
		rerank = Min(rows, (double) Max(vs_ivfpq_rerank, 1));
	}
	else
	{
		frac = 1.0;				/* pending rows: every one is re-ranked, in the backend */
		rerank = rows;
		distance_cost = exact_cost;
	}
	if (nranges > 0)
		rerank = Max(rows * costs.indexSelectivity, 1.0);
	/* heap pages the re-rank reads, as for an index scan returning `rerank` rows */
	fetch_pages = meta.store_vectors ? 0.0
		: index_pages_fetched(rerank, (BlockNumber) heap_pages, heap_pages, root);

	startup = index->pages * frac * spc_seq_page_cost +
		meta.lists * distance_cost +
		rows * frac * distance_cost * 0.25 +
		rerank * (exact_cost + cpu_tuple_cost) +
		fetch_pages * spc_random_page_cost +
		VS_IVFPQ_SEARCH_OVERHEAD * spc_seq_page_cost * Max(nranges + (ordered ? 1 : 0), 1);
	total = startup;
	if (ordered && nranges == 0 && rows > rerank)
		total += (rows - rerank) * (distance_cost * 0.25 + exact_cost + cpu_tuple_cost) +
			(meta.store_vectors ? 0.0 : (heap_pages - fetch_pages) * spc_random_page_cost) +
			index->pages * (1.0 - frac) * spc_seq_page_cost;
	total += rows * costs.indexSelectivity * cpu_index_tuple_cost;

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
