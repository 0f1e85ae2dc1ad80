/*
 * vs_graph: vsearch_index_check's walk (indexcheck.h).
 *
 * The metapage: the access method, the operator class's metric, the degree in range, a node that
 * fits a page, the entry and seeds naming node slots.  Node slots 0..nnodes-1 fill the node pages
 * in order (block 1 + i / per_page), each page's nitems and pd_lower covering exactly its slots;
 * every slot is either live (a heap tid, finite elements) or free, and every neighbour is an
 * empty slot or another node slot.  Counts: live + free = nnodes.  VACUUM frees nodes before it
 * lowers the metapage's row count and raises its free count, so live <= ntuples and free >= nfree
 * (equal unless a VACUUM was interrupted; then live lists may still name freed nodes, which
 * searches skip: reported as edges_to_free_nodes).  Reported besides: the live nodes no walk from
 * the start nodes reaches (unreachable_live_nodes; not an error, a measure of the graph).
 */
#include "postgres.h"

#include "miscadmin.h"

#include "graph.h"
#include "indexcheck.h"

/*
 * How many live nodes a search can reach: a walk from the entry and the seeds along the lists of
 * live nodes (a search never expands a free one), by passes over the node pages in order until one
 * reaches nothing new (a pass follows every path that runs forward through the pages).  A live
 * node it misses is found by no search but the pass over every node (graph_ef of the index's size
 * or more): inserts link a row from what a search finds and may leave it unnamed by any list.
 */
static uint64
reached_live(VsCheck *c, const VsGraphMetaPageData *meta, int per_page, const uint16 *flags)
{
	uint8	   *reached = palloc_extended((Size) (meta->nnodes + 7) / 8 + 1,
								  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	uint32		words = vs_store_words(meta->dim, meta->storage);
	uint64		count = 0;
	bool		changed = false;

#define REACHED(v) (reached[(v) / 8] & (1 << ((v) % 8)))
#define REACH(v) \
	do { \
		if ((v) < meta->nnodes && flags[v] == VS_GRAPH_NODE_LIVE && !REACHED(v)) \
		{ \
			reached[(v) / 8] |= 1 << ((v) % 8); \
			count++; \
			changed = true; \
		} \
	} while (0)

	REACH(meta->entry);
	for (uint32 i = 0; i < meta->nseeds; i++)
		REACH(meta->seeds[i]);
	while (changed)
	{
		changed = false;
		for (uint64 first = 0; first < meta->nnodes; first += per_page)
		{
			int			nitems = (int) Min((uint64) per_page, meta->nnodes - first);
			Page		page;

			CHECK_FOR_INTERRUPTS();
			page = vs_check_read(c, VS_GRAPH_FIRST_NODE_BLKNO + (BlockNumber) (first / per_page));
			for (int i = 0; i < nitems; i++)
			{
				VsGraphNode *node = VsGraphPageGetNode(page, words, meta->degree, i);
				uint32	   *nbrs = VsGraphNodeNbrs(node, words);

				if (!REACHED(first + i))
					continue;
				for (uint32 j = 0; j < meta->degree; j++)
					REACH(nbrs[j]);
			}
		}
	}
#undef REACH
#undef REACHED
	pfree(reached);
	return count;
}

void
vs_graph_check(VsCheck *c)
{
	Page		page;
	VsGraphMetaPageData meta;
	uint32		declared = vs_declared_dim(c->index);
	int			per_page = 0;
	uint64		live = 0;
	uint64		nfree = 0;
	int64		edges = 0;
	int64		edges_to_free = 0;
	uint64		unreachable;
	uint16	   *flags;
	uint32		words;
	float	   *x;

	/* the version first: a version-1 index's pages carry vs_lc's page id (graph.h) */
	vs_check_meta(c, vs_check_read(c, VS_GRAPH_METAPAGE_BLKNO), VS_GRAPH_MAGIC, VS_GRAPH_VERSION);
	page = vs_check_page(c, VS_GRAPH_METAPAGE_BLKNO, sizeof(VsGraphPageOpaqueData),
						 VS_GRAPH_PAGE_ID);
	memcpy(&meta, vs_graph_page_meta(page), sizeof(meta));
	if (VsGraphPageGetOpaque(page)->flags != VS_GRAPH_META)
		vs_check_fail(c, 0, "the metapage is not flagged as one");
	if (meta.metric != (uint32) vs_opclass_metric(c->index))
		vs_check_fail(c, 0, "metric %u, the operator class's is %d", meta.metric,
					  (int) vs_opclass_metric(c->index));
	if (meta.degree < VS_GRAPH_MIN_DEGREE || meta.degree > VS_GRAPH_MAX_DEGREE ||
		meta.build_degree > VS_GRAPH_MAX_BUILD_DEGREE)
		vs_check_fail(c, 0, "degree %u, build degree %u", meta.degree, meta.build_degree);
	/* binary16 vectors only for a halfvec column (every index built before has floats) */
	if (meta.storage > VS_STORE_F16 ||
		(meta.storage == VS_STORE_F16 && !vs_index_is_halfvec(c->index)))
		vs_check_fail(c, 0, "vector storage %u", meta.storage);
	words = vs_store_words(meta.dim, meta.storage);
	if ((declared != 0 && meta.dim != 0 && meta.dim != declared) ||
		VS_GRAPH_NODE_SIZE(words, meta.degree) > VS_GRAPH_PAGE_SPACE)
		vs_check_fail(c, 0, "dimension %u (the column declares %u)", meta.dim, declared);
	if (meta.dim == 0 && meta.nnodes > 0)
		vs_check_fail(c, 0, UINT64_FORMAT " nodes but no dimension", meta.nnodes);
	if (meta.nnodes >= VS_GRAPH_NO_NODE)
		vs_check_fail(c, 0, UINT64_FORMAT " nodes", meta.nnodes);
	if (meta.entry != VS_GRAPH_NO_NODE && meta.entry >= meta.nnodes)
		vs_check_fail(c, 0, "entry node %u of " UINT64_FORMAT, meta.entry, meta.nnodes);
	if (meta.nseeds > VS_GRAPH_MAX_SEEDS)
		vs_check_fail(c, 0, "%u seeds", meta.nseeds);
	for (uint32 i = 0; i < meta.nseeds; i++)
		if (meta.seeds[i] != VS_GRAPH_NO_NODE && meta.seeds[i] >= meta.nnodes)
			vs_check_fail(c, 0, "seed node %u of " UINT64_FORMAT, meta.seeds[i], meta.nnodes);

	/* the flags of every slot first, then the edges against them */
	flags = palloc_extended(sizeof(uint16) * Max(meta.nnodes, 1), MCXT_ALLOC_HUGE);
	x = palloc(sizeof(float) * Max(meta.dim, 1));
	if (meta.dim > 0)
		per_page = VsGraphNodesPerPage(words, meta.degree);
	for (int pass = 0; pass < 2; pass++)
	{
		for (uint64 first = 0; first < meta.nnodes; first += per_page)
		{
			BlockNumber blkno = VS_GRAPH_FIRST_NODE_BLKNO + (BlockNumber) (first / per_page);
			int			nitems = (int) Min((uint64) per_page, meta.nnodes - first);
			VsGraphPageOpaque opaque;

			if (pass == 1)
				c->reached[blkno] = false;	/* the second read of the same pages */
			page = vs_check_page(c, blkno, sizeof(VsGraphPageOpaqueData), VS_GRAPH_PAGE_ID);
			opaque = VsGraphPageGetOpaque(page);
			if (opaque->flags != VS_GRAPH_NODES || opaque->nitems != nitems ||
				((PageHeader) page)->pd_lower != MAXALIGN(SizeOfPageHeaderData) +
				(Size) nitems * VS_GRAPH_NODE_SIZE(words, meta.degree))
				vs_check_fail(c, blkno, "not the node page of slots " UINT64_FORMAT "..."
							  UINT64_FORMAT " (flags %u, %u slots)", first, first + nitems - 1,
							  opaque->flags, opaque->nitems);
			for (int i = 0; i < nitems; i++)
			{
				VsGraphNode *node = VsGraphPageGetNode(page, words, meta.degree, i);
				uint32		self = (uint32) (first + i);
				uint32	   *nbrs = VsGraphNodeNbrs(node, words);

				if (pass == 0)
				{
					flags[self] = node->flags;
					if (node->flags == VS_GRAPH_NODE_LIVE)
					{
						vs_check_tid(c, blkno, &node->heap_tid, 0);
						vs_load_index_vector(node->x, x, meta.dim, meta.storage);
						vs_check_floats(c, blkno, x, meta.dim, "a node");
						live++;
					}
					else if (node->flags == VS_GRAPH_NODE_FREE)
						nfree++;
					else
						vs_check_fail(c, blkno, "node %u has flags %u", self, node->flags);
					continue;
				}
				if (flags[self] != VS_GRAPH_NODE_LIVE)
					continue;
				for (uint32 j = 0; j < meta.degree; j++)
				{
					if (nbrs[j] == VS_GRAPH_NO_NODE)
						continue;
					if (nbrs[j] >= meta.nnodes || nbrs[j] == self)
						vs_check_fail(c, blkno, "node %u names neighbour %u of " UINT64_FORMAT,
									  self, nbrs[j], meta.nnodes);
					edges++;
					if (flags[nbrs[j]] != VS_GRAPH_NODE_LIVE)
						edges_to_free++;
				}
			}
		}
	}
	unreachable = live - reached_live(c, &meta, per_page, flags);
	if (live > meta.ntuples || nfree < meta.nfree)
		vs_check_fail(c, 0, "the metapage counts " UINT64_FORMAT " live and " UINT64_FORMAT
					  " free of " UINT64_FORMAT " nodes, the pages hold " UINT64_FORMAT
					  " live and " UINT64_FORMAT " free", meta.ntuples, meta.nfree, meta.nnodes,
					  live, nfree);
	pfree(flags);
	pfree(x);
	vs_check_report(c, "dimensions", meta.dim);
	vs_check_report(c, "degree", meta.degree);
	vs_check_report(c, "nodes", (int64) meta.nnodes);
	vs_check_report(c, "free_nodes", (int64) nfree);
	vs_check_report(c, "metapage_free_nodes", (int64) meta.nfree);
	vs_check_report(c, "edges", edges);
	vs_check_report(c, "edges_to_free_nodes", edges_to_free);
	vs_check_report(c, "unreachable_live_nodes", (int64) unreachable);
	vs_check_report(c, "metapage_entries", (int64) meta.ntuples);
}
