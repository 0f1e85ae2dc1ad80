/*
 * vs_graph: reading nodes through the buffer cache, the beam search, the pruning of one node's
 * candidates (inserts, VACUUM), and the range candidates.
 *
 * Beam search (HNSW's layer search, SONG's Alg 1 with a bounded result list): a min-heap of
 * candidates to expand and a max-heap of the best `ef` live nodes seen; pop the nearest candidate,
 * stop when it is farther than the worst of a full result list, else read its neighbour list and
 * compute the distance of every neighbour not yet visited (a bitmap over the node numbers).  With
 * `expand` = w > 1 a step pops up to w such candidates before any of their neighbours is
 * measured: the engine's search (gpu/cpu/graph.cpp, vs_graph_search), step for step, so that the
 * worker's answers and these agree for every w.  It is mirrored here rather than called: this one
 * reads nodes from the buffer cache as it goes (an ERROR may leave it at any page) and navigates
 * by the SIMD distance, the engine's takes host arrays.  Free
 * nodes (removed by VACUUM) are never results; nodes that VACUUM has not yet visited are results
 * even when their heap row is dead (the executor skips those rows).  The search navigates by the
 * SIMD float distance (nav_distance) and measures the nodes it returns with the engine's exact one
 * in rank units (search.h), so the SQL operator's value of a result is vs_rank_value(metric, d).
 *
 * Rank-based pruning (CAGRA): a node's candidates c_0, c_1, ... in ascending distance (their rank);
 * candidate c_i is "detourable" through c_j when j < i and c_i appears at position r < i in c_j's
 * own list (max(j, r) < i: a two-hop path whose hops both rank better).  Candidates are kept in
 * order of fewer detours, then rank; the first `degree` form the list.  It needs no distances
 * beyond the ranks, so the build prunes a kNN graph with it alone (the engine's
 * vs_graph_build_edges, on the build's threads), and inserts and VACUUM use it with the
 * candidates' current adjacency lists (vs_graph_prune_nodes, the engine's vs_graph_prune).
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "graph.h"
#include "recentpages.h"

/* ---------------------------------------------------------------------------------------------
 * Reading nodes
 */

void
vs_graph_reader_init(VsGraphReader *r, const VsIndexRef *ref, Relation rel, uint32 dim,
					 uint32 degree, uint32 storage, uint64 nnodes)
{
	r->ref = *ref;
	r->rel = rel;
	r->dim = dim;
	r->degree = degree;
	r->storage = storage;
	r->words = vs_store_words(dim, storage);
	r->per_page = VsGraphNodesPerPage(r->words, degree);
	r->nnodes = nnodes;
	r->recent = NULL;
	r->buf = InvalidBuffer;
	r->blkno = InvalidBlockNumber;
}

/*
 * Pins pages through the buffers this backend last found them in (recentpages.h), without the
 * look-up in the buffer mapping table: a scan's round reads the node page of each of its hits
 * (their heap tids), a page apiece, and those look-ups were about a third of what reading them
 * cost.  The buffers are not mapped ahead: a scan reads a few dozen of the index's pages, and
 * mapping all of them took a new session's first query from about 2 to 7-9 ms of CPU on 99 999 x
 * 128.  Temporary indexes (local buffers) have none.
 */
void
vs_graph_reader_use_recent(VsGraphReader *r)
{
	if (r->ref.relpersistence == RELPERSISTENCE_TEMP || r->per_page <= 0)
		return;
	r->recent = vs_recent_pages(&r->ref, (BlockNumber) (VS_GRAPH_FIRST_NODE_BLKNO +
													   (r->nnodes + r->per_page - 1) / r->per_page),
								false);
}

void
vs_graph_reader_end(VsGraphReader *r)
{
	if (BufferIsValid(r->buf))
		ReleaseBuffer(r->buf);
	r->buf = InvalidBuffer;
	r->blkno = InvalidBlockNumber;
}

/*
 * Copies a node's flags and tid, and its vector and neighbour list when x / nbrs are not NULL.
 * False when the node does not exist (beyond the reader's node count, or on a page not written).
 */
bool
vs_graph_read_node(VsGraphReader *r, uint32 node, VsGraphNodeCopy *out, float *x, uint32 *nbrs)
{
	BlockNumber blkno;
	int			slot;
	Page		page;
	bool		found = false;

	if (node == VS_GRAPH_NO_NODE || (uint64) node >= r->nnodes || r->per_page <= 0)
		return false;
	blkno = VS_GRAPH_FIRST_NODE_BLKNO + node / (uint32) r->per_page;
	slot = (int) (node % (uint32) r->per_page);
	if (blkno != r->blkno)
	{
		if (BufferIsValid(r->buf))
			ReleaseBuffer(r->buf);
		r->buf = vs_recent_pin(r->recent, &r->ref, r->rel, blkno, NULL);
		r->blkno = blkno;
	}
	LockBuffer(r->buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(r->buf);
	if (VsGraphIsNodePage(page) && slot < VsGraphPageGetOpaque(page)->nitems)
	{
		VsGraphNode *n = VsGraphPageGetNode(page, r->words, r->degree, slot);

		out->flags = n->flags;
		out->tid = n->heap_tid;
		if (x != NULL)
			vs_load_index_vector(n->x, x, r->dim, r->storage);
		if (nbrs != NULL)
			memcpy(nbrs, VsGraphNodeNbrs(n, r->words), sizeof(uint32) * r->degree);
		found = true;
	}
	LockBuffer(r->buf, BUFFER_LOCK_UNLOCK);
	return found;
}

/*
 * Starts fetching what reading a node touches first, when its page has a recent buffer: the
 * buffer header (the pin and the lock write it), the page header, the page's special space and the
 * node's head (tid and flags), and with with_vector its vector.  For nodes read one after the
 * other on pages of their own, whose cache misses would otherwise come one at a time.
 */
void
vs_graph_prefetch_node(const VsGraphReader *r, uint32 node, bool with_vector)
{
	const char *page;
	const VsGraphNode *n;

	if (r->recent == NULL || (uint64) node >= r->nnodes || r->per_page <= 0)
		return;
	page = vs_recent_prefetch(r->recent, VS_GRAPH_FIRST_NODE_BLKNO + node / (uint32) r->per_page);
	if (page == NULL)
		return;
	__builtin_prefetch(page);
	__builtin_prefetch(page + BLCKSZ - sizeof(VsGraphPageOpaqueData));
	n = VsGraphPageGetNode((Page) page, r->words, r->degree, node % (uint32) r->per_page);
	__builtin_prefetch(n);
	if (with_vector)
		for (Size off = 0; off < sizeof(float) * r->words; off += 64)
			__builtin_prefetch((const char *) n->x + off);
}

/* The engine's exact distance in rank units (search.h), as a float; NaN for a zero cosine norm. */
float
vs_graph_distance(vs_metric metric, const float *a, const float *b, uint32 dim)
{
	return (float) vs_exact_distance_f32(vs_rank_metric(metric), a, b, dim);
}

/*
 * The distance a search navigates by: the SIMD kernel with float accumulation
 * (vs_distance_f32), within a few ulps of the exact one and several times cheaper.  The results
 * a search returns are measured again with the exact one.
 */
static inline float
nav_distance(vs_metric metric, const float *a, const float *b, uint32 dim)
{
	return (float) vs_distance_f32(vs_rank_metric(metric), a, b, dim);
}

/* Hits in the engine's order: distance ascending (NaN last), then id. */
int
vs_graph_cmp_hit(const void *a, const void *b)
{
	const VsGraphHit *x = (const VsGraphHit *) a;
	const VsGraphHit *y = (const VsGraphHit *) b;

	return vs_cmp_engine_order(x->d, x->id, y->d, y->id);
}

/* ---------------------------------------------------------------------------------------------
 * Beam search
 */

typedef struct HeapItem
{
	float		key;			/* the distance, NaN as +inf */
	uint32		node;
} HeapItem;

/* a before b in a min-heap (ties: smaller node first, for determinism) */
static inline bool
item_less(const HeapItem *a, const HeapItem *b)
{
	return a->key < b->key || (a->key == b->key && a->node < b->node);
}

/* sign +1: min-heap; -1: max-heap */
static void
heap_push(HeapItem *h, int *n, HeapItem it, int sign)
{
	int			i = (*n)++;

	while (i > 0)
	{
		int			p = (i - 1) / 2;
		bool		up = sign > 0 ? item_less(&it, &h[p]) : item_less(&h[p], &it);

		if (!up)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = it;
}

static HeapItem
heap_pop(HeapItem *h, int *n, int sign)
{
	HeapItem	top = h[0];
	HeapItem	last = h[--(*n)];
	int			i = 0;

	for (;;)
	{
		int			c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n &&
			(sign > 0 ? item_less(&h[c + 1], &h[c]) : item_less(&h[c], &h[c + 1])))
			c++;
		if (sign > 0 ? !item_less(&h[c], &last) : !item_less(&last, &h[c]))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = last;
	return top;
}

static inline float
nan_last(float d)
{
	return isnan(d) ? INFINITY : d;
}

/* One beam search's state: the candidates to expand, the beam (the best live nodes), visited. */
typedef struct BeamSearch
{
	VsGraphReader *r;
	vs_metric	metric;
	const float *query;
	int			ef;
	uint8	   *visited;		/* a bit per node number */
	HeapItem   *cand;			/* min-heap */
	int			ncand;
	int			cap;
	HeapItem   *best;			/* max-heap of at most ef */
	int			nbest;
	float	   *x;				/* a node's vector, as read */
} BeamSearch;

/*
 * Measures node v unless it is no node, visited or free.  It becomes a candidate (and a result if
 * live) when the beam is not full or it beats the beam's worst: one that does not would never be
 * expanded, since the worst only gets nearer.
 */
static void
beam_consider(BeamSearch *b, uint32 v)
{
	VsGraphNodeCopy nc;
	HeapItem	it;

	if (v == VS_GRAPH_NO_NODE || (uint64) v >= b->r->nnodes ||
		(b->visited[v / 8] & (1 << (v % 8))))
		return;
	b->visited[v / 8] |= 1 << (v % 8);
	if (!vs_graph_read_node(b->r, v, &nc, b->x, NULL) || (nc.flags & VS_GRAPH_NODE_FREE))
		return;
	it.key = nan_last(nav_distance(b->metric, b->query, b->x, b->r->dim));
	it.node = v;
	if (b->nbest >= b->ef && !item_less(&it, &b->best[0]))
		return;
	if (b->ncand == b->cap)
	{
		b->cap *= 2;
		b->cand = repalloc_huge(b->cand, sizeof(HeapItem) * b->cap);
	}
	heap_push(b->cand, &b->ncand, it, 1);
	if (nc.flags & VS_GRAPH_NODE_LIVE)
	{
		heap_push(b->best, &b->nbest, it, -1);
		if (b->nbest > b->ef)
			(void) heap_pop(b->best, &b->nbest, -1);
	}
}

/*
 * Starts fetching the pages of the nodes of a step that beam_consider will read (those not yet
 * visited): each lies on a page of its own, and read one after the other their cache misses came
 * one at a time (reading nodes was half of a batch's CPU on 100 000 x 128).
 */
static void
prefetch_unvisited(const BeamSearch *b, const uint32 *nodes, int n)
{
	for (int i = 0; i < n; i++)
	{
		uint32		v = nodes[i];

		if (v != VS_GRAPH_NO_NODE && (uint64) v < b->r->nnodes &&
			!(b->visited[v / 8] & (1 << (v % 8))))
			vs_graph_prefetch_node(b->r, v, true);
	}
}

/*
 * The best `ef` live nodes (at most) a beam search from the start nodes finds for query,
 * expanding `expand` nodes per step (1 .. VS_GRAPH_MAX_EXPAND); they go to out (room for ef) in
 * the engine's order, with their true distances (NaN stays NaN).  Returns how many.
 */
int
vs_graph_beam_search(VsGraphReader *r, vs_metric metric, const uint32 *starts, int nstarts,
					 const float *query, int ef, int expand, VsGraphHit *out)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "vs_graph search",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	BeamSearch	b;
	uint32	   *nbrs;
	int			nout = 0;
	VsGraphNodeCopy nc;
	int			steps = 0;

	b.r = r;
	b.metric = metric;
	b.query = query;
	b.ef = ef;
	b.visited = palloc_extended((Size) (r->nnodes + 7) / 8 + 1,
								MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	b.cap = 1024 + nstarts;
	b.cand = palloc(sizeof(HeapItem) * b.cap);
	b.ncand = 0;
	b.best = palloc(sizeof(HeapItem) * (Max(ef, 0) + 1));
	b.nbest = 0;
	b.x = palloc(sizeof(float) * r->dim);
	expand = Max(1, Min(expand, VS_GRAPH_MAX_EXPAND));
	nbrs = palloc(sizeof(uint32) * r->degree * expand);
	if (ef < 1)
		goto done;
	/* every start node is a candidate (multi-start: one per region of the data) */
	prefetch_unvisited(&b, starts, nstarts);
	for (int s = 0; s < nstarts; s++)
		beam_consider(&b, starts[s]);

	for (;;)
	{
		uint32		picked[VS_GRAPH_MAX_EXPAND];
		int			npicked = 0;

		/* the step's nodes, all picked before the beam changes */
		while (npicked < expand && b.ncand > 0 &&
			   !(b.nbest >= ef && item_less(&b.best[0], &b.cand[0])))
			picked[npicked++] = heap_pop(b.cand, &b.ncand, 1).node;
		if (npicked == 0)
			break;
		if ((++steps & 63) == 0)
			CHECK_FOR_INTERRUPTS();
		for (int p = 0; p < npicked; p++)
		{
			uint32	   *mine = nbrs + (Size) p * r->degree;

			if (!vs_graph_read_node(r, picked[p], &nc, NULL, mine))
				memset(mine, 0xFF, sizeof(uint32) * r->degree); /* VS_GRAPH_NO_NODE */
		}
		prefetch_unvisited(&b, nbrs, npicked * (int) r->degree);
		for (int i = 0; i < npicked * (int) r->degree; i++)
			beam_consider(&b, nbrs[i]);
	}

	/* the results with their tids and true distances (NaN as read) */
	MemoryContextSwitchTo(old);
	for (int i = 0; i < b.nbest; i++)
	{
		if (!vs_graph_read_node(r, b.best[i].node, &nc, b.x, NULL))
			continue;
		out[nout].node = b.best[i].node;
		out[nout].d = vs_graph_distance(metric, query, b.x, r->dim);
		out[nout].id = vs_tid_to_id(&nc.tid);
		nout++;
	}
	if (nout > 1)
		qsort(out, nout, sizeof(VsGraphHit), vs_graph_cmp_hit);
done:
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return nout;
}

/* ---------------------------------------------------------------------------------------------
 * Range candidates: every live node within the radius, exactly (a pass over all node pages).
 */

void
vs_graph_range_candidates(const VsIndexRef *ref, const VsQueries *qs, double radius,
						  VsRangeConsumer consume, void *arg)
{
	const float *queries = qs->vectors;
	int			nq = (int) qs->nq;
	Relation	rel;
	VsGraphReader r;
	VsRangeStream out;
	float		rr = vs_rank_radius(ref->metric, radius);
	float	   *x;
	uint64		nnodes = VsGraphRefNodes(ref);

	if (ref->dim == 0 || nq <= 0)
		return;
	rel = vs_index_open_for_read(ref);
	x = palloc(sizeof(float) * ref->dim);
	vs_graph_reader_init(&r, ref, rel, ref->dim, VsGraphRefDegree(ref), VsGraphRefStorage(ref),
						 nnodes);
	vs_range_stream_begin(&out, nq, consume, arg);
	for (int q = 0; q < nq; q++)
	{
		const float *query = queries + (Size) q * ref->dim;

		for (uint64 n = 0; n < nnodes; n++)
		{
			VsGraphNodeCopy nc;
			float		d;

			if ((n & 1023) == 0)
				CHECK_FOR_INTERRUPTS();
			if (!vs_graph_read_node(&r, (uint32) n, &nc, x, NULL) ||
				!(nc.flags & VS_GRAPH_NODE_LIVE))
				continue;
			d = vs_graph_distance(ref->metric, query, x, ref->dim);
			if (d <= rr)
				vs_range_stream_add(&out, q, vs_tid_to_id(&nc.tid), d);
		}
	}
	vs_range_stream_end(&out);
	vs_graph_reader_end(&r);
	pfree(x);
	vs_index_close_for_read(rel);
}

/*
 * The neighbour lists of n nodes, degree entries each, into out (VS_GRAPH_NO_NODE for a node
 * that cannot be read).  Returns n.
 */
int
vs_graph_gather_nbrs(VsGraphReader *r, const uint32 *nodes, int n, uint32 *out)
{
	for (int i = 0; i < n; i++)
	{
		VsGraphNodeCopy nc;
		uint32	   *row = out + (Size) i * r->degree;

		if (!vs_graph_read_node(r, nodes[i], &nc, NULL, row))
			memset(row, 0xFF, sizeof(uint32) * r->degree);
	}
	return n;
}

/* The engine's vs_graph_prune of one node's candidates (graph.h), out of memory an ERROR. */
int
vs_graph_prune_nodes(const uint32 *cands, int ncands, const uint32 *cand_nbrs, int nbr_width,
					 int degree, uint32 *out)
{
	int			n = vs_graph_prune(cands, (size_t) Max(ncands, 0), cand_nbrs, (size_t) nbr_width,
								   (size_t) degree, out);

	if (n < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory pruning a vs_graph neighbour list of %d candidates",
						ncands)));
	return n;
}
