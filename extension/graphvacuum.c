/*
 * vs_graph: VACUUM (ambulkdelete; amvacuumcleanup is every kind's, amutils.c).
 *
 * Under the index's writer lock (graphinsert.c), in two passes:
 *
 *   1. every node page once: the live nodes whose heap tid the callback reports dead become free
 *      (one Generic WAL record per changed page); searches stop returning and traversing them;
 *   2. every live node whose list names a freed node gets a new list: the candidates are its
 *      other live neighbours and the live neighbours of the freed ones (their lists are intact),
 *      ranked by exact distance and cut to `degree` by rank-based pruning with their own lists
 *      (graphsearch.c); one record per repaired node;
 *   3. the build's navigability rule (graphbuild.c, link_unfound) for the live nodes that a walk
 *      from the start nodes no longer reaches (their ways in went through freed nodes and the
 *      repairs dropped them): in node order, each one still unreached is searched for from the
 *      start nodes, the VS_GRAPH_LINKS nearest nodes the search found link to it (graphinsert.c's
 *      vs_graph_link_into, as an insert links a row), and the walk goes on from it.
 *
 * Then the metapage: the live and free counts, a new entry if the old one went (its first live
 * neighbour, else the first live node), a new generation.  Between the passes a concurrent search
 * may miss rows reachable only through freed nodes (fewer results, never wrong ones).  A VACUUM
 * interrupted there (a crash) leaves free slots the metapage does not count and lists that name
 * them: the next VACUUM sees more free slots than counted and repairs those lists too (found by
 * vsearch_index_check's edges_to_free_nodes, tests/graph_crash).
 */
#include "postgres.h"

#include <math.h>

#include "access/generic_xlog.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"

#include "graph.h"

typedef struct RepairCand
{
	float		d;
	uint32		node;
} RepairCand;

static int
cmp_repair(const void *a, const void *b)
{
	const RepairCand *x = (const RepairCand *) a;
	const RepairCand *y = (const RepairCand *) b;

	return vs_cmp_engine_order(x->d, x->node, y->d, y->node);
}

/* A new list for live node u whose list names freed nodes; false when u needs none. */
static bool
repair_list(VsGraphReader *r, vs_metric metric, const uint8 *freed, uint32 u, uint32 *nbrs,
			float *ux, float *tx, uint32 *xnbrs, RepairCand *cands, uint32 *cand_nodes,
			uint32 *gather, int max_cands)
{
	int			degree = (int) r->degree;
	int			ncands = 0;
	bool		any = false;
	VsGraphNodeCopy nc;

	for (int p = 0; p < degree; p++)
		if (nbrs[p] != VS_GRAPH_NO_NODE && (uint64) nbrs[p] < r->nnodes && freed[nbrs[p]])
			any = true;
	if (!any)
		return false;

	/* candidates: live neighbours, and the live neighbours of freed neighbours */
	for (int p = 0; p < degree; p++)
	{
		uint32		v = nbrs[p];

		if (v == VS_GRAPH_NO_NODE || (uint64) v >= r->nnodes)
			continue;
		if (!freed[v])
		{
			cands[ncands++].node = v;
			continue;
		}
		if (!vs_graph_read_node(r, v, &nc, NULL, xnbrs))
			continue;
		for (int q = 0; q < degree; q++)
			if (xnbrs[q] != VS_GRAPH_NO_NODE && xnbrs[q] != u &&
				(uint64) xnbrs[q] < r->nnodes && !freed[xnbrs[q]])
				cands[ncands++].node = xnbrs[q];
	}
	/* distances; drop duplicates and nodes that are not live */
	{
		int			m = 0;

		for (int i = 0; i < ncands; i++)
		{
			bool		dup = false;

			for (int j = 0; j < m && !dup; j++)
				dup = cands[j].node == cands[i].node;
			if (dup || !vs_graph_read_node(r, cands[i].node, &nc, tx, NULL) ||
				!(nc.flags & VS_GRAPH_NODE_LIVE))
				continue;
			cands[m].node = cands[i].node;
			cands[m].d = vs_graph_distance(metric, ux, tx, r->dim);
			m++;
		}
		ncands = m;
	}
	if (ncands > 1)
		qsort(cands, ncands, sizeof(RepairCand), cmp_repair);
	ncands = Min(ncands, max_cands);	/* the nearest, as an insert's search would find */
	for (int i = 0; i < ncands; i++)
		cand_nodes[i] = cands[i].node;
	vs_graph_gather_nbrs(r, cand_nodes, ncands, gather);
	ncands = vs_graph_prune_nodes(cand_nodes, ncands, gather, degree, degree, nbrs);
	for (int p = ncands; p < degree; p++)
		nbrs[p] = VS_GRAPH_NO_NODE;
	return true;
}

/* Marks the live nodes a walk from `from` reaches (stack: room for every node; nbrs: degree). */
static void
walk_live(VsGraphReader *r, const uint8 *freed, uint32 from, uint8 *reached, uint32 *stack,
		  uint32 *nbrs)
{
	uint64		top = 0;

	if ((uint64) from >= r->nnodes || freed[from] || reached[from])
		return;
	reached[from] = 1;
	stack[top++] = from;
	while (top > 0)
	{
		VsGraphNodeCopy nc;
		uint32		u = stack[--top];

		if ((top & 1023) == 0)
			vacuum_delay_point();
		if (!vs_graph_read_node(r, u, &nc, NULL, nbrs))
			continue;
		for (uint32 p = 0; p < r->degree; p++)
		{
			uint32		t = nbrs[p];

			if (t != VS_GRAPH_NO_NODE && (uint64) t < r->nnodes && !freed[t] && !reached[t])
			{
				reached[t] = 1;
				stack[top++] = t;
			}
		}
	}
}

/* node, or when VACUUM freed it its first live neighbour (VS_GRAPH_NO_NODE: none). */
static uint32
replacement(VsGraphReader *r, const uint8 *freed, uint32 node, uint32 *nbrs)
{
	VsGraphNodeCopy nc;

	if (node == VS_GRAPH_NO_NODE || (uint64) node >= r->nnodes)
		return VS_GRAPH_NO_NODE;
	if (!freed[node])
		return node;
	if (!vs_graph_read_node(r, node, &nc, NULL, nbrs))
		return VS_GRAPH_NO_NODE;
	for (uint32 p = 0; p < r->degree; p++)
		if (nbrs[p] != VS_GRAPH_NO_NODE && (uint64) nbrs[p] < r->nnodes && !freed[nbrs[p]] &&
			vs_graph_read_node(r, nbrs[p], &nc, NULL, NULL) && (nc.flags & VS_GRAPH_NODE_LIVE))
			return nbrs[p];
	return VS_GRAPH_NO_NODE;
}

IndexBulkDeleteResult *
vs_graph_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				   IndexBulkDeleteCallback callback, void *callback_state)
{
	Relation	index = info->index;
	VsGraphMetaPageData meta;
	uint64		removed = 0;
	uint64		remaining = 0;
	uint64		already_free = 0;	/* free slots before this VACUUM */
	uint64		relinked = 0;		/* unreached live nodes step 3 linked */
	uint32		first_freed = VS_GRAPH_NO_NODE;
	uint8	   *freed = NULL;
	uint32		words;
	int			per_page;
	BlockNumber npages;

	if (stats == NULL)
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));

	LockPage(index, VS_GRAPH_METAPAGE_BLKNO, ExclusiveLock);
	vs_graph_read_meta(index, &meta);
	words = vs_store_words(meta.dim, meta.storage);
	per_page = meta.dim > 0 ? VsGraphNodesPerPage(words, meta.degree) : 0;
	npages = per_page > 0 ? (BlockNumber) ((meta.nnodes + per_page - 1) / per_page) : 0;
	if (meta.nnodes > 0)
		freed = palloc_extended(meta.nnodes, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);

	/* 1. free the nodes of dead rows */
	for (BlockNumber b = 0; b < npages; b++)
	{
		BlockNumber blkno = VS_GRAPH_FIRST_NODE_BLKNO + b;
		Buffer		buf;
		Page		page;
		int			nitems;
		bool		dead[BLCKSZ / sizeof(VsGraphNode) + 1];
		bool		any = false;

		vacuum_delay_point();
		buf = ReadBufferExtended(index, MAIN_FORKNUM, blkno, RBM_NORMAL, info->strategy);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (!VsGraphIsNodePage(page))
		{
			UnlockReleaseBuffer(buf);
			continue;
		}
		nitems = VsGraphPageGetOpaque(page)->nitems;
		for (int i = 0; i < nitems; i++)
		{
			VsGraphNode *n = VsGraphPageGetNode(page, words, meta.degree, i);

			dead[i] = (n->flags & VS_GRAPH_NODE_LIVE) && callback(&n->heap_tid, callback_state);
			any |= dead[i];
			if ((n->flags & VS_GRAPH_NODE_LIVE) && !dead[i])
				remaining++;
			if (n->flags & VS_GRAPH_NODE_FREE)
			{
				uint32		node = b * (uint32) per_page + i;

				/* freed earlier: a list naming it is repaired like one naming a node freed now */
				freed[node] = 1;
				already_free++;
				if (first_freed == VS_GRAPH_NO_NODE || node < first_freed)
					first_freed = node;
			}
		}
		if (any)
		{
			GenericXLogState *xlog = GenericXLogStart(index);

			page = GenericXLogRegisterBuffer(xlog, buf, 0);
			for (int i = 0; i < nitems; i++)
			{
				uint32		node = b * (uint32) per_page + i;

				if (!dead[i])
					continue;
				VsGraphPageGetNode(page, words, meta.degree, i)->flags = VS_GRAPH_NODE_FREE;
				freed[node] = 1;
				removed++;
				if (first_freed == VS_GRAPH_NO_NODE || node < first_freed)
					first_freed = node;
			}
			GenericXLogFinish(xlog);
		}
		UnlockReleaseBuffer(buf);
	}

	/*
	 * Every VACUUM that completes leaves the metapage counting every free slot; more free slots
	 * than it counts mean an earlier VACUUM was interrupted (a crash) between freeing nodes and
	 * repairing the lists that name them: this one repairs them, and sets the counts.
	 */
	if (removed > 0 || already_free > meta.nfree)
	{
		VsIndexRef	ref;
		VsGraphReader r;
		uint32		degree = meta.degree;
		uint32	   *nbrs = palloc(sizeof(uint32) * degree);
		uint32	   *xnbrs = palloc(sizeof(uint32) * degree);
		float	   *ux = palloc(sizeof(float) * meta.dim);
		float	   *tx = palloc(sizeof(float) * meta.dim);
		RepairCand *cands = palloc(sizeof(RepairCand) * degree * (degree + 1));
		uint32	   *cand_nodes = palloc(sizeof(uint32) * degree * (degree + 1));
		int			max_cands = (int) Max(meta.build_degree, degree);
		uint32	   *gather = palloc(sizeof(uint32) * degree * max_cands);
		uint32		entry = meta.entry;
		uint32		seeds[VS_GRAPH_MAX_SEEDS];
		uint32		nseeds = 0;
		Buffer		metabuf;
		GenericXLogState *xlog;
		VsGraphMetaPage m;

		/* 2. repair the lists that name freed nodes */
		vs_ref_init(index, VS_GRAPH_KIND, &ref);
		vs_graph_reader_init(&r, &ref, index, meta.dim, degree, meta.storage, meta.nnodes);
		for (uint64 u = 0; u < meta.nnodes; u++)
		{
			VsGraphNodeCopy nc;

			if ((u & 63) == 0)
				vacuum_delay_point();
			if (freed[u] || !vs_graph_read_node(&r, (uint32) u, &nc, ux, nbrs) ||
				!(nc.flags & VS_GRAPH_NODE_LIVE))
				continue;
			if (repair_list(&r, (vs_metric) meta.metric, freed, (uint32) u, nbrs, ux, tx, xnbrs,
							cands, cand_nodes, gather, max_cands))
			{
				vs_graph_reader_end(&r);
				vs_graph_write_nbrs(index, words, degree, (uint32) u, nbrs);
			}
		}

		/* a freed entry or seed gives way to its first live neighbour */
		entry = replacement(&r, freed, entry, xnbrs);
		for (uint32 i = 0; i < meta.nseeds && i < VS_GRAPH_MAX_SEEDS; i++)
		{
			uint32		sd = replacement(&r, freed, meta.seeds[i], xnbrs);

			if (sd != VS_GRAPH_NO_NODE)
				seeds[nseeds++] = sd;
		}
		/* no entry: the first live node */
		for (uint64 u = 0; u < meta.nnodes && entry == VS_GRAPH_NO_NODE; u++)
		{
			VsGraphNodeCopy nc;

			if (!freed[u] && vs_graph_read_node(&r, (uint32) u, &nc, NULL, NULL) &&
				(nc.flags & VS_GRAPH_NODE_LIVE))
				entry = (uint32) u;
		}
		vs_graph_reader_end(&r);

		/* 3. the live nodes the start nodes no longer reach: linked from where a search ends */
		if (entry != VS_GRAPH_NO_NODE)
		{
			uint32		starts[VS_GRAPH_MAX_SEEDS + 1];
			int			nstarts = 0;
			int			width = Max(VS_GRAPH_LINK_WIDTH, VS_GRAPH_LINKS + 1);
			VsGraphHit *hits = palloc(sizeof(VsGraphHit) * width);
			float	   *vx = palloc(sizeof(float) * meta.dim);
			uint8	   *reached = palloc_extended(meta.nnodes, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
			uint32	   *stack = palloc_extended(sizeof(uint32) * meta.nnodes, MCXT_ALLOC_HUGE);

			starts[nstarts++] = entry;
			memcpy(starts + nstarts, seeds, sizeof(uint32) * nseeds);
			nstarts += (int) nseeds;
			for (int i = 0; i < nstarts; i++)
				walk_live(&r, freed, starts[i], reached, stack, xnbrs);
			for (uint64 v = 0; v < meta.nnodes; v++)
			{
				VsGraphNodeCopy nc;
				int			nh;
				int			linked = 0;

				if (reached[v] || freed[v])
					continue;
				vacuum_delay_point();
				if (!vs_graph_read_node(&r, (uint32) v, &nc, vx, NULL) ||
					!(nc.flags & VS_GRAPH_NODE_LIVE))
					continue;
				nh = vs_graph_beam_search(&r, (vs_metric) meta.metric, starts, nstarts, vx, width,
										  1, hits);
				vs_graph_reader_end(&r);
				for (int i = 0; i < nh && linked < VS_GRAPH_LINKS; i++)
				{
					if (hits[i].node != (uint32) v)
						linked += vs_graph_link_into(index, &r, (vs_metric) meta.metric,
													 hits[i].node, (uint32) v, vx, NULL, 0,
													 ux, tx, xnbrs, true);
					vs_graph_reader_end(&r);
				}
				relinked++;
				walk_live(&r, freed, (uint32) v, reached, stack, xnbrs);
			}
			vs_graph_reader_end(&r);
			pfree(hits);
			pfree(vx);
			pfree(reached);
			pfree(stack);
		}

		metabuf = ReadBuffer(index, VS_GRAPH_METAPAGE_BLKNO);
		LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
		(void) vs_graph_page_meta(BufferGetPage(metabuf));
		xlog = GenericXLogStart(index);
		m = VsGraphPageGetMeta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
		m->ntuples = remaining;
		m->nfree = already_free + removed;
		if (first_freed < m->free_hint)
			m->free_hint = first_freed;
		m->entry = entry;
		m->nseeds = nseeds;
		memcpy(m->seeds, seeds, sizeof(uint32) * nseeds);
		m->generation++;
		GenericXLogFinish(xlog);
		UnlockReleaseBuffer(metabuf);
	}
	UnlockPage(index, VS_GRAPH_METAPAGE_BLKNO, ExclusiveLock);
	if (relinked > 0)
		elog(DEBUG1, "vs_graph vacuum: %llu nodes the start nodes no longer reached linked again",
			 (unsigned long long) relinked);

	stats->num_pages = RelationGetNumberOfBlocks(index);
	stats->num_index_tuples = (double) remaining;
	stats->tuples_removed += (double) removed;
	stats->estimated_count = false;
	return stats;
}
