/*
 * vs_graph: inserting one row (aminsert).
 *
 * Under the index's writer lock (LockPage on the metapage's block, ExclusiveLock: inserts and
 * VACUUM one at a time; searches never wait for it):
 *
 *   1. a beam search of width 2 x build_degree from the start nodes finds the new row's
 *      candidates, which rank-based pruning (graphsearch.c) with their current lists cuts to
 *      `degree`;
 *   2. the node goes to a free slot (left by VACUUM) or after the last one, in one Generic WAL
 *      record with the metapage (node count, row count, generation; the entry if there was none);
 *   3. reverse edges: each chosen neighbour u gets the new node in an empty slot, or in place of
 *      the farthest of the second half of its list (the part the build filled with reverse and
 *      lower-ranked edges) when the new node is nearer to u than that one; one record per
 *      neighbour;
 *   4. the build's navigability rule (graphbuild.c, link_unfound): the VS_GRAPH_LINKS nearest
 *      rows the search found name the new node, in place of their farthest second-half edge if
 *      step 3 did not already link them.
 * An edge steps 3 and 4 replace may have been its node's only in-edge, leaving a node no search
 * reaches (until VACUUM relinks it): of the replaceable ones they take first an edge to a node the
 * new node's own list names, which stays reachable through the new node.
 *
 * A crash between the records leaves a valid graph (the new node with fewer in-edges).
 */
#include "postgres.h"

#include <math.h>

#include "access/generic_xlog.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"

#include "graph.h"

/* A free slot at or above the hint (VS_GRAPH_NO_NODE: none). */
static uint32
find_free(VsGraphReader *r, uint32 hint)
{
	for (uint64 n = hint; n < r->nnodes; n++)
	{
		VsGraphNodeCopy nc;

		if ((n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (vs_graph_read_node(r, (uint32) n, &nc, NULL, NULL) && (nc.flags & VS_GRAPH_NODE_FREE))
			return (uint32) n;
	}
	return VS_GRAPH_NO_NODE;
}

/* Writes the node and the metapage in one record. */
static void
write_node(Relation index, const VsGraphMetaPageData *meta, uint32 node, bool append,
		   ItemPointer tid, const float *x, const uint32 *nbrs)
{
	uint32		dim = meta->dim;
	uint32		degree = meta->degree;
	uint32		words = vs_store_words(dim, meta->storage);
	int			per_page = VsGraphNodesPerPage(words, degree);
	BlockNumber blkno = VS_GRAPH_FIRST_NODE_BLKNO + node / (uint32) per_page;
	int			slot = (int) (node % (uint32) per_page);
	BlockNumber nblocks = RelationGetNumberOfBlocks(index);
	bool		fresh = append && slot == 0;
	Buffer		metabuf;
	Buffer		buf;
	GenericXLogState *xlog;
	Page		page;
	VsGraphMetaPage m;
	VsGraphNode *n;

	if (blkno > nblocks)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_graph index \"%s\" lacks node pages before block %u",
						RelationGetRelationName(index), blkno),
				 errhint("REINDEX the index.")));
	if (blkno == nblocks)
		buf = vs_new_buffer(index, MAIN_FORKNUM);	/* locked */
	else
	{
		/* an existing page (or one an aborted insert added and never wrote) */
		buf = ReadBuffer(index, blkno);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	}
	metabuf = ReadBuffer(index, VS_GRAPH_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);

	xlog = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(xlog, buf, fresh ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (fresh)
		vs_graph_init_page(page, VS_GRAPH_NODES);
	else if (!VsGraphIsNodePage(page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_graph index \"%s\" block %u is not a node page",
						RelationGetRelationName(index), blkno),
				 errhint("REINDEX the index.")));
	n = VsGraphPageGetNode(page, words, degree, slot);
	n->heap_tid = *tid;
	n->flags = VS_GRAPH_NODE_LIVE;
	vs_store_index_vector(n->x, x, dim, meta->storage);
	memcpy(VsGraphNodeNbrs(n, words), nbrs, sizeof(uint32) * degree);
	if (append)
		vs_graph_page_set_items(page, words, degree,
								Max(slot + 1, (int) VsGraphPageGetOpaque(page)->nitems));

	m = vs_graph_page_meta(GenericXLogRegisterBuffer(xlog, metabuf, 0));
	m->dim = dim;
	if (append)
		m->nnodes = (uint64) node + 1;
	else
	{
		m->nfree = m->nfree > 0 ? m->nfree - 1 : 0;
		m->free_hint = node + 1;
	}
	m->ntuples++;
	if (m->entry == VS_GRAPH_NO_NODE)
		m->entry = node;
	m->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);
	UnlockReleaseBuffer(buf);
}

/*
 * Links node (vector x, list node_nbrs of nnode_nbrs entries) into u's list: an empty slot, or a
 * replaceable edge (the second half of the list) when node is nearer to u than its target (always,
 * with force): the farthest to a node that node's list names (u still reaches it through node),
 * else the farthest.  Returns whether u's list names node.  ux, tx (dim floats) and unbrs (degree)
 * are scratch.  Also VACUUM's (graphvacuum.c).
 */
bool
vs_graph_link_into(Relation index, VsGraphReader *r, vs_metric metric, uint32 u, uint32 node,
				   const float *x, const uint32 *node_nbrs, int nnode_nbrs, float *ux, float *tx,
				   uint32 *unbrs, bool force)
{
	VsGraphNodeCopy nc;
	int			degree = (int) r->degree;
	int			half = (degree + 1) / 2;
	int			slot = -1;
	float		worst = -INFINITY;
	float		d;

	if (!vs_graph_read_node(r, u, &nc, ux, unbrs) || !(nc.flags & VS_GRAPH_NODE_LIVE))
		return false;
	for (int p = 0; p < degree; p++)
		if (unbrs[p] == node)
			return true;
	for (int p = 0; p < degree && slot < 0; p++)
		if (unbrs[p] == VS_GRAPH_NO_NODE)
			slot = p;
	if (slot < 0)
	{
		int			stale = -1;
		int			covered = -1;
		float		covered_worst = -INFINITY;

		d = vs_graph_distance(metric, ux, x, r->dim);
		if (isnan(d) && !force)
			return false;
		for (int p = half; p < degree; p++)
		{
			float		dt;

			if (!vs_graph_read_node(r, unbrs[p], &nc, tx, NULL) || !(nc.flags & VS_GRAPH_NODE_LIVE))
			{
				stale = p;		/* an edge to a removed node: replace it first */
				break;
			}
			dt = vs_graph_distance(metric, ux, tx, r->dim);
			if (isnan(dt))
				dt = INFINITY;
			if (dt > worst)
			{
				worst = dt;
				slot = p;
			}
			/* an edge to a node that node's own list names: u -> node -> it replaces it */
			for (int q = 0; q < nnode_nbrs; q++)
				if (node_nbrs[q] == unbrs[p] && dt > covered_worst)
				{
					covered_worst = dt;
					covered = p;
				}
		}
		if (stale >= 0)
			slot = stale;
		else if (covered >= 0 && (d < covered_worst || force))
			slot = covered;
		else if (!(d < worst) && !force)
			slot = -1;
	}
	if (slot < 0)
		return false;
	unbrs[slot] = node;
	vs_graph_write_nbrs(index, r->words, r->degree, u, unbrs);
	return true;
}

bool
vs_graph_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
				Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
				IndexInfo *indexInfo)
{
	Vector	   *vec;
	VsGraphMetaPageData meta;
	VsIndexRef	ref;
	VsGraphReader r;
	vs_metric	metric;
	uint32		dim;
	uint32	   *sel;
	int			nsel = 0;
	VsGraphHit *hits = NULL;
	int			nh = 0;
	int			linked = 0;
	uint32		node;
	bool		append;
	float	   *ux;
	float	   *tx;
	uint32	   *unbrs;
	MemoryContext cxt;
	MemoryContext old;

	if (isnull[0])
		return false;			/* NULL vectors are not indexed */

	cxt = AllocSetContextCreate(CurrentMemoryContext, "vs_graph insert", ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	vec = vs_datum_vector(values[0]);

	LockPage(index, VS_GRAPH_METAPAGE_BLKNO, ExclusiveLock);
	vs_graph_read_meta(index, &meta);
	vs_graph_check_vector_dim(meta.dim, vec->dim, meta.degree, meta.storage);
	if (meta.dim == 0)
		vs_graph_check_pq_m(vs_graph_index_pq_m(index), vec->dim);
	dim = (uint32) vec->dim;
	meta.dim = dim;
	metric = (vs_metric) meta.metric;
	vs_ref_init(index, VS_GRAPH_KIND, &ref);
	vs_graph_reader_init(&r, &ref, index, dim, meta.degree, meta.storage, meta.nnodes);

	/* 1. the neighbours */
	sel = palloc(sizeof(uint32) * meta.degree);
	if (meta.entry != VS_GRAPH_NO_NODE)
	{
		int			ef = (int) Max(2 * meta.build_degree, meta.degree);
		uint32		starts[VS_GRAPH_MAX_SEEDS + 1];
		int			nstarts = vs_graph_starts(&meta, starts);
		uint32	   *cands;
		uint32	   *gather;

		hits = palloc(sizeof(VsGraphHit) * ef);
		/* one node per step: the graph does not depend on the session's graph_expand */
		nh = vs_graph_beam_search(&r, metric, starts, nstarts, vec->x, ef, 1, hits);
		cands = palloc(sizeof(uint32) * Max(nh, 1));
		gather = palloc(sizeof(uint32) * meta.degree * Max(nh, 1));
		for (int i = 0; i < nh; i++)
			cands[i] = hits[i].node;
		vs_graph_gather_nbrs(&r, cands, nh, gather);
		nsel = vs_graph_prune_nodes(cands, nh, gather, (int) meta.degree, (int) meta.degree,
									sel);
	}
	for (int i = nsel; i < (int) meta.degree; i++)
		sel[i] = VS_GRAPH_NO_NODE;

	/* 2. the node */
	node = VS_GRAPH_NO_NODE;
	if (meta.nfree > 0)
		node = find_free(&r, meta.free_hint);
	append = node == VS_GRAPH_NO_NODE;
	if (append)
	{
		if (meta.nnodes >= (uint64) VS_GRAPH_NO_NODE - 1)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_graph indexes hold at most %u nodes", VS_GRAPH_NO_NODE - 1),
					 errhint("VACUUM the table to free the nodes of deleted rows, or REINDEX.")));
		node = (uint32) meta.nnodes;
	}
	vs_graph_reader_end(&r);	/* no pin on a page write_node locks */
	write_node(index, &meta, node, append, heap_tid, vec->x, sel);

	/* 3. reverse edges */
	ux = palloc(sizeof(float) * dim);
	tx = palloc(sizeof(float) * dim);
	unbrs = palloc(sizeof(uint32) * meta.degree);
	vs_graph_reader_init(&r, &ref, index, dim, meta.degree, meta.storage,
						 append ? (uint64) node + 1 : meta.nnodes);
	for (int i = 0; i < nsel; i++)
	{
		CHECK_FOR_INTERRUPTS();
		vs_graph_link_into(index, &r, metric, sel[i], node, vec->x, sel, nsel, ux, tx, unbrs,
						   false);
		vs_graph_reader_end(&r);
	}

	/*
	 * 4. the build's navigability rule: the nearest VS_GRAPH_LINKS rows the search found link to
	 * the node, so that a search for it, which ends there, reaches it (reverse edges alone may
	 * give it none: a row far from every other has no neighbour it is nearer to than their own)
	 */
	for (int i = 0; i < nh && linked < VS_GRAPH_LINKS; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (hits[i].node != node)
			linked += vs_graph_link_into(index, &r, metric, hits[i].node, node, vec->x, sel,
										 nsel, ux, tx, unbrs, true);
		vs_graph_reader_end(&r);
	}
	vs_graph_reader_end(&r);

	UnlockPage(index, VS_GRAPH_METAPAGE_BLKNO, ExclusiveLock);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return false;
}
