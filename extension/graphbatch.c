/*
 * vs_graph: vsearch_knn_batch (the index kind's batch_knn, batch.h).
 *
 * Each query goes through the rounds of the index scan (graphscan.c): a beam search of width
 * vsearch.graph_ef, then 4x as wide, ..., and a pass over every node once the width reaches the
 * index's rows; each round's new rows in exact order, checked for visibility one by one, until k
 * visible rows.  So the rows are those of `ORDER BY col <op> q LIMIT k` through the index, in its
 * order.  The first rounds of up to VS_GRAPH_BATCH_HITS / graph_ef queries are one request to the
 * GPU worker when it serves (one batch of its beam search kernel; vs_graph_search_hits); the wider
 * rounds of a query that needs them follow query by query (to the worker while the width is
 * within its limit), and the pass over every node and the row checks run here.  A query reads
 * the node pages (heap tids) of the worker's hits only as far as it takes them: about k of a
 * round's graph_ef when the rows are visible.  The first round's first k hits of every query of a
 * chunk are read and checked together first (take_ahead: node pages prefetched ahead, rows in
 * heap order), the common case; take() goes on from there one hit at a time.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "portability/instr_time.h"
#include "utils/memutils.h"

#include "batch.h"
#include "graph.h"

/* Most hits of the first rounds of one chunk of queries (one worker request). */
#define VS_GRAPH_BATCH_HITS		(1 << 20)

/*
 * The nodes a query has taken or rejected: a bitmap over the node numbers, cleared between
 * queries through the list of the bits set (a query marks tens of nodes, the bitmap is an
 * eighth of a byte per node of the index).
 */
typedef struct SeenSet
{
	uint8	   *bits;
	uint32	   *marked;
	Size		n;
	Size		cap;
} SeenSet;

static inline bool
seen_has(const SeenSet *s, uint32 node)
{
	return (s->bits[node / 8] & (1 << (node % 8))) != 0;
}

static void
seen_mark(SeenSet *s, uint32 node)
{
	if (s->n == s->cap)
	{
		s->cap *= 2;
		s->marked = repalloc_huge(s->marked, sizeof(uint32) * s->cap);
	}
	s->marked[s->n++] = node;
	s->bits[node / 8] |= 1 << (node % 8);
}

static void
seen_clear(SeenSet *s)
{
	for (Size i = 0; i < s->n; i++)
		s->bits[s->marked[i] / 8] = 0;
	s->n = 0;
}

/*
 * Takes hits (sorted) not seen before, checking each row, until the answer has k rows; the ids
 * of hits the worker answered are read as they are reached (vs_graph_read_hit_ids).  The first
 * nchecked hits come read and checked (checked[i], take_ahead).  The time goes to the batch's row
 * checks (and the searches before it, since *since, to its search time).
 */
static void
take(VsBatch *bc, VsGraphReader *r, int q, int k, VsGraphHit *hits, int nh,
	 const VsPairResult *checked, int nchecked, SeenSet *seen, instr_time *since)
{
	VsBatchAnswer *a = &bc->answers[q];
	instr_time	t0,
				t1;

	INSTR_TIME_SET_CURRENT(t0);
	INSTR_TIME_ACCUM_DIFF(bc->search_time, t0, *since);

	for (int i = 0; i < nh && a->n < k; i++)
	{
		uint32		n;
		VsPairResult res;

		if (hits[i].id == VS_GRAPH_HIT_UNREAD)
			vs_graph_read_hit_ids(r, hits, i, nh);	/* its run of equal distances, in id order */
		n = hits[i].node;
		if (hits[i].id == VS_GRAPH_HIT_GONE || seen_has(seen, n))
			continue;
		seen_mark(seen, n);
		if (i < nchecked)
			res = checked[i];
		else
			vs_check_pair(&bc->reader, hits[i].id, q, &res);
		if (!res.visible)
			continue;
		/* the node's vector is the row's indexed value: its exact distance is the operator's */
		a->hits[a->n].distance = vs_rank_value(bc->ref.metric, hits[i].d);
		a->hits[a->n].tid = res.tid;
		a->n++;
	}
	INSTR_TIME_SET_CURRENT(t1);
	INSTR_TIME_ACCUM_DIFF(bc->heap_time, t1, t0);
	*since = t1;
}

/*
 * The common case of a chunk's first round, ahead of take(): each query's first k hits (to the end
 * of a run of equal distances, which vs_graph_read_hit_ids puts in id order) get their ids from
 * the node pages, read in turn with the next ones' prefetched, and their rows are checked
 * together in heap order (vs_check_pairs: pages pinned and prefetched ahead), not one by one as
 * take() would, each a few dependent cache misses (docs/BENCHMARKS.md, session 30).  ahead[q]
 * says how many of query q's hits were read and checked, into checked + first[q] (first: room for
 * each query's ef).  A hit take() would not reach is checked for nothing; the answers are the same.
 */
static void
take_ahead(VsBatch *bc, VsGraphReader *r, int q0, int nc, int k, int ef, VsGraphHit *hits,
		   const int *nhits, int *ahead, VsPairResult *checked)
{
	VsPair	   *pairs;
	Size		npairs = 0;
	int			total = 0;

	for (int q = 0; q < nc; q++)
	{
		/* the run of equal distances at the k-th hit goes whole */
		ahead[q] = k > 0 && nhits[q] > k ? vs_graph_run_end(hits + (Size) q * ef, k - 1, nhits[q])
			: Min(k, nhits[q]);
		total += ahead[q];
	}
	pairs = palloc(sizeof(VsPair) * Max(total, 1));
	for (int q = 0; q < nc; q++)
	{
		VsGraphHit *h = hits + (Size) q * ef;

		for (int i = 0; i < ahead[q];)
		{
			if (i + 4 < ahead[q])
				vs_graph_prefetch_node(r, h[i + 4].node, false);
			else if (q + 1 < nc && i + 4 - ahead[q] < ahead[q + 1])
				vs_graph_prefetch_node(r, h[ef + i + 4 - ahead[q]].node, false);
			i = h[i].id == VS_GRAPH_HIT_UNREAD ? vs_graph_read_hit_ids(r, h, i, ahead[q]) : i + 1;
		}
		for (int i = 0; i < ahead[q]; i++)
		{
			checked[(Size) q * ef + i].visible = false;
			if (h[i].id != VS_GRAPH_HIT_GONE)
			{
				pairs[npairs].id = h[i].id;
				pairs[npairs].query = q0 + q;
				pairs[npairs].slot = (uint32) ((Size) q * ef + i);
				npairs++;
			}
		}
	}
	vs_check_pairs(&bc->reader, pairs, npairs, checked);
	pfree(pairs);
}

void
vs_graph_batch_knn(VsBatch *bc, int k)
{
	uint64		nnodes = VsGraphRefNodes(&bc->ref);
	uint64		live = Max(bc->ref.ntuples, 1);
	uint32		dim = bc->ref.dim;
	int			ef1 = Max(vs_graph_ef, 1);
	VsGraphReader r;
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "vs_graph batch",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	float	   *x = palloc(sizeof(float) * dim);
	SeenSet		seen;
	VsGraphMetaPageData meta;
	uint32		starts[VS_GRAPH_MAX_SEEDS + 1];
	int			nstarts;
	int			chunk = Max(1, Min(bc->nq, VS_GRAPH_BATCH_HITS / ef1));
	VsGraphHit *first = palloc_extended(sizeof(VsGraphHit) * chunk * ef1, MCXT_ALLOC_HUGE);
	int		   *nfirst = palloc(sizeof(int) * chunk);
	VsPairResult *checked = palloc_extended(sizeof(VsPairResult) * chunk * ef1, MCXT_ALLOC_HUGE);
	int		   *ahead = palloc(sizeof(int) * chunk);

	seen.bits = palloc_extended((Size) (nnodes + 7) / 8 + 1, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	seen.cap = 1024;
	seen.marked = palloc(sizeof(uint32) * seen.cap);
	seen.n = 0;
	vs_graph_read_meta(bc->index, &meta);
	nstarts = vs_graph_starts(&meta, starts);

	vs_graph_reader_init(&r, &bc->ref, bc->index, dim, VsGraphRefDegree(&bc->ref),
						 VsGraphRefStorage(&bc->ref), nnodes);
	vs_graph_reader_use_recent(&r);
	for (int q0 = 0; q0 < bc->nq; q0 += chunk)
	{
		int			nc = Min(chunk, bc->nq - q0);
		instr_time	since,
					t0;

		INSTR_TIME_SET_CURRENT(since);

		/*
		 * the first round of a chunk of queries: one worker request when it serves; none when it
		 * is as wide as the index (the scan's first round is then the pass over every node)
		 */
		if ((uint64) ef1 >= live)
		{
			memset(nfirst, 0, sizeof(int) * nc);
			memset(ahead, 0, sizeof(int) * nc);
		}
		else
		{
			vs_graph_search_hits(&r, bc->ref.metric, starts, nstarts,
								 bc->queries + (Size) q0 * dim, nc, ef1, vs_graph_expand, true,
								 first, nfirst);
			INSTR_TIME_SET_CURRENT(t0);
			INSTR_TIME_ACCUM_DIFF(bc->search_time, t0, since);
			take_ahead(bc, &r, q0, nc, k, ef1, first, nfirst, ahead, checked);
			INSTR_TIME_SET_CURRENT(since);
			INSTR_TIME_ACCUM_DIFF(bc->heap_time, since, t0);
		}
		for (int q = q0; q < q0 + nc; q++)
		{
			const float *query = bc->queries + (Size) q * dim;
			int64		ef = (int64) ef1 * 4;

			CHECK_FOR_INTERRUPTS();
			seen_clear(&seen);
			bc->answers[q].n = 0;
			bc->rounds++;
			take(bc, &r, q, k, first + (Size) (q - q0) * ef1, nfirst[q - q0],
				 checked + (Size) (q - q0) * ef1, ahead[q - q0], &seen, &since);
			while (bc->answers[q].n < k)
			{
				VsGraphHit *hits;
				int			nh;

				CHECK_FOR_INTERRUPTS();
				bc->rounds++;
				if ((uint64) ef >= live)
				{
					/* as wide as the index: every node, in exact order */
					hits = palloc_extended(sizeof(VsGraphHit) * Max(nnodes, 1), MCXT_ALLOC_HUGE);
					nh = 0;
					for (uint64 n = 0; n < nnodes; n++)
					{
						VsGraphNodeCopy ncopy;

						if ((n & 1023) == 0)
							CHECK_FOR_INTERRUPTS();
						if (seen_has(&seen, (uint32) n) ||
							!vs_graph_read_node(&r, (uint32) n, &ncopy, x, NULL) ||
							!(ncopy.flags & VS_GRAPH_NODE_LIVE))
							continue;
						hits[nh].node = (uint32) n;
						hits[nh].id = vs_tid_to_id(&ncopy.tid);
						hits[nh].d = vs_graph_distance(bc->ref.metric, query, x, dim);
						nh++;
					}
					if (nh > 1)
						qsort(hits, nh, sizeof(VsGraphHit), vs_graph_cmp_hit);
					take(bc, &r, q, k, hits, nh, NULL, 0, &seen, &since);
					pfree(hits);
					break;
				}
				ef = Min(ef, (int64) 0x7FFFFFFF / (int64) sizeof(VsGraphHit));
				hits = palloc_extended(sizeof(VsGraphHit) * ef, MCXT_ALLOC_HUGE);
				vs_graph_search_hits(&r, bc->ref.metric, starts, nstarts, query, 1, (int) ef,
									 vs_graph_expand, true, hits, &nh);
				take(bc, &r, q, k, hits, nh, NULL, 0, &seen, &since);
				pfree(hits);
				ef *= 4;
			}
		}
	}
	vs_graph_reader_end(&r);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}
