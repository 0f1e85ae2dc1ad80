/*
 * vs_graph: index scans (amgettuple, amgetbitmap).
 *
 * ORDER BY col <op> q
 *   The scan works in rounds.  Round r is a beam search of width vsearch.graph_ef x 4^r from the
 *   start nodes, in the GPU worker when it serves and the width is within its limit, else in this
 *   backend over the buffer cache (vs_graph_search_hits, graphobject.c); its results not returned
 *   before come back in exact ascending order, each with the SQL operator's own value
 *   (xs_recheckorderby = false).  When the executor wants more rows than a round gave (a filter
 *   rejected rows, rows were dead), the next, wider round runs; once the width reaches the index's
 *   rows, the last round is a pass over every node, so the scan never stops early and a drained
 *   scan returns every row.  Across rounds the order is not monotone: that, and the rows a round's
 *   beam misses, is the approximation.
 *
 * WHERE col <<op>> sphere(c, r)
 *   A pass over every node with the exact distance: the rows within every radius, exactly (the
 *   executor rechecks nothing that could differ).  With an ORDER BY too, they come in exact order
 *   (one round).  The pass reads the whole index: vs_graph is not a range index.
 */
#include "postgres.h"

#include <math.h>

#include "access/relscan.h"
#include "miscadmin.h"
#include "nodes/tidbitmap.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "graph.h"

#define VS_GRAPH_GROWTH		4

typedef struct Cand
{
	int64		id;
	double	   *d;				/* norderbys operator distances */
} Cand;

/*
 * The nodes a scan has returned: open addressing over node numbers (empty slots
 * VS_GRAPH_NO_NODE, never a node), at most half full.  A bitmap over every node cost a scan
 * nnodes / 8 bytes zeroed (125 kB at 1M rows) to return its first 10 rows.
 */
typedef struct NodeSet
{
	uint32	   *slots;			/* NULL: empty */
	int			bits;			/* log2 of the slots */
	uint64		count;
} NodeSet;

typedef struct GraphScanOpaqueData
{
	VsScanBase	base;			/* cxt, started, done, ref */

	VsScanKeys	keys;
	bool		ordered;
	int			norderbys;
	int64		ef;				/* width of the last round (0: none yet) */
	bool		last_round;
	NodeSet		seen;			/* nodes returned by the rounds before the last */
	uint64		nnodes;
	VsGraphReader reader;
	bool		reader_open;
	uint32	   *starts;
	int			nstarts;
	float	   *x;

	Cand	   *cands;
	int64		ncands;
	int64		pos;

	/* range quals, without ORDER BY */
	bool		has_range;		/* unordered: the rows passing every range qual (base.rows) */
} GraphScanOpaqueData;

typedef GraphScanOpaqueData *GraphScanOpaque;

IndexScanDesc
vs_graph_beginscan(Relation index, int nkeys, int norderbys)
{
	return vs_scan_begin(index, nkeys, norderbys, sizeof(GraphScanOpaqueData));
}

static void
release_reader(GraphScanOpaque so)
{
	if (so->reader_open)
		vs_graph_reader_end(&so->reader);
	so->reader_open = false;
}

void
vs_graph_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys, int norderbys)
{
	release_reader((GraphScanOpaque) scan->opaque);
	vs_scan_rescan(scan, keys, orderbys);
}

void
vs_graph_endscan(IndexScanDesc scan)
{
	release_reader((GraphScanOpaque) scan->opaque);
	vs_scan_end(scan);
}

static inline uint32
nodeset_slot(const NodeSet *s, uint32 node)
{
	return (uint32) ((node * UINT64CONST(0x9E3779B97F4A7C15)) >> (64 - s->bits));
}

static bool
nodeset_has(const NodeSet *s, uint32 node)
{
	uint32		mask;

	if (s->slots == NULL)
		return false;
	mask = ((uint32) 1 << s->bits) - 1;
	for (uint32 i = nodeset_slot(s, node);; i = (i + 1) & mask)
	{
		if (s->slots[i] == node)
			return true;
		if (s->slots[i] == VS_GRAPH_NO_NODE)
			return false;
	}
}

static void
nodeset_insert(NodeSet *s, uint32 node)
{
	uint32		mask = ((uint32) 1 << s->bits) - 1;
	uint32		i = nodeset_slot(s, node);

	while (s->slots[i] != VS_GRAPH_NO_NODE)
		i = (i + 1) & mask;
	s->slots[i] = node;
	s->count++;
}

/* Room for n more nodes (in the current memory context); rehashes into a larger table. */
static void
nodeset_reserve(NodeSet *s, uint64 n)
{
	uint32	   *old = s->slots;
	uint64		oldsize = old ? (uint64) 1 << s->bits : 0;
	int			bits = Max(s->bits, 6);

	while (((uint64) 1 << bits) < 2 * (s->count + n))
		bits++;
	if (old != NULL && bits == s->bits)
		return;
	s->slots = palloc_extended(sizeof(uint32) * ((Size) 1 << bits), MCXT_ALLOC_HUGE);
	memset(s->slots, 0xFF, sizeof(uint32) * ((Size) 1 << bits));
	s->bits = bits;
	s->count = 0;
	for (uint64 i = 0; i < oldsize; i++)
		if (old[i] != VS_GRAPH_NO_NODE)
			nodeset_insert(s, old[i]);
	if (old)
		pfree(old);
}

/* float8 order of the SQL operators: NaN after every number. */
static int
cmp_float8_nan(double a, double b)
{
	bool		na = isnan(a);
	bool		nb = isnan(b);

	if (na || nb)
		return na == nb ? 0 : (na ? 1 : -1);
	return a < b ? -1 : (a > b ? 1 : 0);
}

static int
cmp_cand(const void *a, const void *b, void *arg)
{
	const Cand *x = (const Cand *) a;
	const Cand *y = (const Cand *) b;
	int			nkeys = *(int *) arg;

	for (int i = 0; i < nkeys; i++)
	{
		int			c = cmp_float8_nan(x->d[i], y->d[i]);

		if (c != 0)
			return c;
	}
	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

/* Adds a candidate with the operator distances of vector x for every ORDER BY key. */
static void
add_cand(GraphScanOpaque so, int64 *cap, int64 id, const float *x)
{
	Cand	   *c;
	int			nkeys = Max(so->norderbys, 1);

	if (so->ncands == *cap)
	{
		*cap = Max(*cap * 2, 64);
		so->cands = so->cands ? repalloc_huge(so->cands, sizeof(Cand) * *cap)
			: palloc_extended(sizeof(Cand) * *cap, MCXT_ALLOC_HUGE);
	}
	c = &so->cands[so->ncands++];
	c->id = id;
	c->d = palloc(sizeof(double) * nkeys);
	for (int k = 0; k < nkeys; k++)
		c->d[k] = x != NULL && so->keys.queries && so->keys.queries[k]
			? vs_operator_distance(so->base.ref.metric, x, so->keys.queries[k], so->base.ref.dim)
			: 0.0;
}

/* True when x lies within every range qual. */
static bool
in_ranges(GraphScanOpaque so, const float *x)
{
	for (int i = 0; i < so->keys.nranges; i++)
		if (!(vs_operator_distance(so->base.ref.metric, x, so->keys.centers[i],
								   so->base.ref.dim) <= so->keys.radii[i]))
			return false;
	return true;
}

static void
sort_cands(GraphScanOpaque so)
{
	int			nkeys = Max(so->norderbys, 1);

	if (so->ncands > 1)
		qsort_arg(so->cands, so->ncands, sizeof(Cand), cmp_cand, &nkeys);
	so->pos = 0;
}

/*
 * A pass over every node: the live ones not returned yet (within the range quals), sorted.  It is
 * a scan's last round, so what it returns is not added to the set.
 */
static void
sweep(GraphScanOpaque so)
{
	int64		cap = 0;

	so->ncands = 0;
	so->cands = NULL;
	for (uint64 n = 0; n < so->nnodes; n++)
	{
		VsGraphNodeCopy nc;

		if ((n & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (nodeset_has(&so->seen, (uint32) n))
			continue;
		if (!vs_graph_read_node(&so->reader, (uint32) n, &nc, so->x, NULL) ||
			!(nc.flags & VS_GRAPH_NODE_LIVE))
			continue;
		if (so->keys.nranges > 0 && !in_ranges(so, so->x))
			continue;
		add_cand(so, &cap, vs_tid_to_id(&nc.tid), so->x);
	}
	sort_cands(so);
}

static void
scan_start(IndexScanDesc scan)
{
	GraphScanOpaque so = (GraphScanOpaque) scan->opaque;
	MemoryContext old;

	vs_scan_keys(scan, &so->keys);
	if (so->keys.empty)
	{
		so->base.done = true;
		return;
	}
	old = MemoryContextSwitchTo(so->base.cxt);
	so->ordered = so->keys.norderbys > 0;
	so->norderbys = so->keys.norderbys;
	so->nnodes = VsGraphRefNodes(&so->base.ref);
	so->x = palloc(sizeof(float) * so->base.ref.dim);
	vs_graph_reader_init(&so->reader, &so->base.ref, scan->indexRelation, so->base.ref.dim,
						 VsGraphRefDegree(&so->base.ref), VsGraphRefStorage(&so->base.ref),
						 so->nnodes);
	vs_graph_reader_use_recent(&so->reader);
	so->reader_open = true;
	so->starts = vs_graph_ref_starts(scan->indexRelation, &so->base.ref, &so->nstarts);

	if (so->keys.nranges > 0 && so->ordered)
	{
		/* one round: the rows within the ranges, in exact order */
		sweep(so);
		so->last_round = true;
	}
	else if (so->keys.nranges > 0)
	{
		so->has_range = true;
		vs_scan_range_rows(&so->base, &so->keys);
	}
	MemoryContextSwitchTo(old);
}

/* The next round of an ORDER BY scan.  False when no row is left. */
static bool
next_round(IndexScanDesc scan)
{
	GraphScanOpaque so = (GraphScanOpaque) scan->opaque;

	while (!so->last_round)
	{
		MemoryContext old = MemoryContextSwitchTo(so->base.cxt);
		uint64		live = Max(so->base.ref.ntuples, 1);
		int64		ef = so->ef == 0 ? Max(vs_graph_ef, 1) : so->ef * VS_GRAPH_GROWTH;

		CHECK_FOR_INTERRUPTS();
		if (so->cands)
			pfree(so->cands);
		so->cands = NULL;
		so->ncands = 0;
		if ((uint64) ef >= live)
		{
			/*
			 * as wide as the index: every node not returned yet (a first round too: a beam that
			 * wide costs as much, and misses a node no live list points to)
			 */
			sweep(so);
			so->last_round = true;
		}
		else
		{
			VsGraphHit *hits;
			int			nh;
			int64		cap = 0;

			ef = Min(ef, (int64) 0x7FFFFFFF / (int64) sizeof(VsGraphHit));
			hits = palloc_extended(sizeof(VsGraphHit) * ef, MCXT_ALLOC_HUGE);
			vs_graph_search_hits(&so->reader, so->base.ref.metric, so->starts, so->nstarts,
								 so->keys.queries[0], 1, (int) ef, vs_graph_expand, false, hits,
								 &nh);
			nodeset_reserve(&so->seen, (uint64) nh);
			for (int i = 0; i < nh; i++)
			{
				uint32		n = hits[i].node;
				VsGraphNodeCopy nc;

				if (nodeset_has(&so->seen, n))
					continue;
				nodeset_insert(&so->seen, n);
				if (so->norderbys <= 1)
				{
					/* the search's exact distance is the operator's value */
					Cand	   *c;

					add_cand(so, &cap, hits[i].id, NULL);
					c = &so->cands[so->ncands - 1];
					c->d[0] = vs_rank_value(so->base.ref.metric, hits[i].d);
				}
				else if (vs_graph_read_node(&so->reader, n, &nc, so->x, NULL))
					add_cand(so, &cap, hits[i].id, so->x);
			}
			pfree(hits);
			sort_cands(so);
			so->ef = ef;		/* the next round is wider, or the sweep */
		}
		MemoryContextSwitchTo(old);
		if (so->ncands > 0)
			return true;
	}
	return false;
}

bool
vs_graph_gettuple(IndexScanDesc scan, ScanDirection dir)
{
	GraphScanOpaque so = (GraphScanOpaque) scan->opaque;

	if (!ScanDirectionIsForward(dir))
		elog(ERROR, "vs_graph indexes only scan forward");
	if (!so->base.started)
		scan_start(scan);
	if (so->base.done)
		return false;

	if (so->ordered)
	{
		Cand	   *cand;

		if (so->cands == NULL || so->pos >= so->ncands)
		{
			if (!next_round(scan))
			{
				so->base.done = true;
				return false;
			}
		}
		cand = &so->cands[so->pos++];
		vs_id_to_tid(cand->id, &scan->xs_heaptid);
		for (int i = 0; i < scan->numberOfOrderBys; i++)
		{
			scan->xs_orderbyvals[i] = Float8GetDatum(cand->d[i]);
			scan->xs_orderbynulls[i] = false;
		}
		scan->xs_recheckorderby = false;
		scan->xs_recheck = false;
		return true;
	}

	{
		int64		id;

		if (!vs_range_rows_next(so->base.rows, &id))
		{
			so->base.done = true;
			return false;
		}
		vs_id_to_tid(id, &scan->xs_heaptid);
	}
	scan->xs_recheck = true;
	return true;
}

int64
vs_graph_getbitmap(IndexScanDesc scan, TIDBitmap *tbm)
{
	GraphScanOpaque so = (GraphScanOpaque) scan->opaque;
	int64		n;

	if (!so->base.started)
		scan_start(scan);
	if (so->base.done || !so->has_range)
		return 0;
	n = vs_scan_bitmap(tbm, so->base.rows, true);
	so->base.done = true;
	return n;
}
