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

#include "optimizer/cost.h"
#include "optimizer/optimizer.h"

#include "ivfpq.h"

#define VS_IVFPQ_SEARCH_OVERHEAD	2.0	/* seq page units */

void
vs_ivfpq_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					  Cost *indexStartupCost, Cost *indexTotalCost,
					  Selectivity *indexSelectivity, double *indexCorrelation,
					  double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	VsCostBase	c;
	uint32		lists;
	bool		store_vectors;
	double		distance_cost;
	/* exact distances of the re-rank: always in this backend */
	double		exact_cost;
	double		frac;
	double		rerank;
	double		heap_pages = Max(index->rel->pages, 1.0);
	double		fetch_pages;
	Cost		startup;
	Cost		total;

	if (!vs_cost_begin(root, path, loop_count, &c, indexStartupCost, indexTotalCost,
					   indexSelectivity, indexCorrelation, indexPages))
		return;
	lists = VsIvfpqRefLists(&c.ref);
	store_vectors = VsIvfpqRefStoreVectors(&c.ref);
	/* estimates: where the candidates are searched (the GPU worker, when it serves) */
	distance_cost = vs_distance_cost((int) c.ref.dim) * c.search_factor;
	exact_cost = vs_distance_cost((int) c.ref.dim) +
		(store_vectors ? 0.0 : vs_detoast_cost(c.heapoid, c.attnum, (int) c.ref.dim));

	if (lists > 0)
	{
		frac = Min(1.0, (double) Max(vs_ivfpq_probes, 1) / lists);
		rerank = Min(c.rows, (double) Max(vs_ivfpq_rerank, 1));
	}
	else
	{
		frac = 1.0;				/* pending rows: every one is re-ranked, in the backend */
		rerank = c.rows;
		distance_cost = exact_cost;
	}
	if (c.nranges > 0)
		rerank = Max(c.rows * c.selectivity, 1.0);
	/* heap pages the re-rank reads, as for an index scan returning `rerank` rows */
	fetch_pages = store_vectors ? 0.0
		: index_pages_fetched(rerank, (BlockNumber) heap_pages, heap_pages, root);

	startup = index->pages * frac * c.seq_page_cost +
		lists * distance_cost +
		c.rows * frac * distance_cost * 0.25 +
		rerank * (exact_cost + cpu_tuple_cost) +
		fetch_pages * c.random_page_cost +
		VS_IVFPQ_SEARCH_OVERHEAD * c.seq_page_cost * Max(c.nranges + (c.ordered ? 1 : 0), 1);
	total = startup;
	if (c.ordered && c.nranges == 0 && c.rows > rerank)
		total += (c.rows - rerank) * (distance_cost * 0.25 + exact_cost + cpu_tuple_cost) +
			(store_vectors ? 0.0 : (heap_pages - fetch_pages) * c.random_page_cost) +
			index->pages * (1.0 - frac) * c.seq_page_cost;
	total += c.rows * c.selectivity * cpu_index_tuple_cost;

	*indexStartupCost = startup;
	*indexTotalCost = total;
}
