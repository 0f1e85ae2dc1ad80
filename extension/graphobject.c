/*
 * vs_graph: the engine object the GPU worker searches (the index kind's load / destroy / knn /
 * check of a search request), and the backend's side of it, vs_graph_search_hits.
 *
 * The object is the engine's vs_graph (vsearch/graph.h): every node slot's vector and neighbour
 * list, copied from the node pages, with free slots (and slots of unwritten pages) marked not live
 * so that the engine's search skips them as graphsearch.c's does, and the start nodes of the
 * metapage.  Node numbers are the object's ids: the worker answers node numbers, and the backend
 * reads each answered node's heap tid from its page (a few buffer reads per search, the search
 * itself having run in the worker).  There is no refresh in place: a newer generation is read
 * again (inserts and VACUUM change adjacency lists anywhere in the graph).
 *
 * An index whose object would take more than the cache's limit is loaded in the compressed mode
 * when that fits (vsearch/graph.h, "compressed graph objects"; BANG): the engine's compressed
 * object keeps PQ codes of pq_m bytes per node (the option as the build stored it in the
 * metapage, or vs_graph_auto_pq_m) on the device
 * and the vectors, neighbour rows and ids in pinned host memory, searched the same way but
 * navigated by the codes' estimates, the final beam re-ranked exactly.  The cache accounts its
 * device bytes; its pinned host bytes may take at most half of the machine's memory.  Each such
 * load counts in vsearch_stat.compressed_loads and is logged (LOG).
 *
 * A search request carries the beam width and the nodes expanded per step (VsGraphSearchParams);
 * the worker runs vs_graph_knn with them on its object (on the GPU: one thread block per query),
 * which is graphsearch.c's beam search but for its navigation distance (the engine navigates by the exact distance, the backend
 * by the SIMD float one, within a few ulps of it): both return the beam's best rows with exact
 * distances in rank units.
 */
#include "postgres.h"

#include <math.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "graph.h"
#include "indexkind.h"
#include "worker.h"
#include "worker_internal.h"

/* What the worker's cache holds for an index. */
typedef struct VsGraphObject
{
	vs_graph   *graph;
	vs_metric	metric;			/* the index's (results in its rank units) */
	int			nstarts;
	uint32		starts[VS_GRAPH_MAX_SEEDS + 1];
} VsGraphObject;

/* Accounted bytes of an object of n nodes. */
static Size
object_bytes(uint64 n, uint32 dim, uint32 degree)
{
	return (Size) n * (sizeof(float) * dim + sizeof(uint32) * degree + 1) + sizeof(VsGraphObject);
}

/* Most pinned host memory a compressed object may take: half of the machine's memory. */
static Size
pinned_host_limit(void)
{
	long		pages = sysconf(_SC_PHYS_PAGES);
	long		page_size = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || page_size <= 0)
		return 0;
	return (Size) pages * (Size) page_size / 2;
}

/*
 * The compressed mode for an index whose object needs more than env->limit: its code bytes, and
 * in *need its accounted (device) bytes; ERROR when even that does not fit, or its pinned host
 * memory would pass pinned_host_limit.
 */
static int
choose_compressed(const VsLoadEnv *env, Oid indexrelid, const VsGraphMetaPageData *meta,
				  int option_pq_m, Size *need)
{
	int			m = option_pq_m;
	vs_graph_memory mem;
	Size		host_limit = pinned_host_limit();

	if (m <= 0 || m > (int) meta->dim || meta->dim % m != 0)
		m = vs_graph_auto_pq_m((int) meta->dim); /* 0: automatic */
	vs_graph_compressed_memory(meta->nnodes, meta->dim, meta->degree, m, &mem);
	*need = mem.device_bytes + sizeof(VsGraphObject);
	if (*need > env->limit)
		vs_load_too_large(env, indexrelid, *need);
	if (host_limit > 0 && mem.host_bytes > host_limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("index %u needs %zu MB of pinned host memory in the compressed mode, "
						"more than half of this machine's memory (%zu MB)",
						indexrelid, mem.host_bytes >> 20, host_limit >> 10 >> 10),
				 errhint("The compressed mode keeps the vectors and neighbour lists in pinned "
						 "host memory; raise vsearch.gpu_memory_limit to load the index whole.")));
	return m;
}

/* The compressed object of arrays (quantizer trained on the engine, seeded). */
static int
create_compressed(const VsLoadEnv *env, const vs_graph_arrays *arrays, int m, vs_metric metric,
				  vs_graph **out)
{
	float	   *center = palloc(sizeof(float) * arrays->dim);
	float	   *codebooks = palloc_extended(sizeof(float) * VS_GRAPH_PQ_KSUB * arrays->dim,
											MCXT_ALLOC_HUGE);
	vs_graph_pq_train_params tp;
	vs_graph_pq pq;
	int			rc;

	memset(&tp, 0, sizeof(tp));
	tp.seed = 42;
	rc = vs_graph_pq_train(env->engine, arrays, (size_t) m, metric, &tp, center, codebooks);
	if (rc == VS_OK)
	{
		pq.m = (size_t) m;
		pq.metric = metric;
		pq.center = center;
		pq.codebooks = codebooks;
		for (;;)
		{
			rc = vs_graph_create_compressed(env->engine, arrays, &pq, out);
			if (rc == VS_OUT_OF_MEMORY && env->evict_one && env->evict_one(env->arg))
				continue;
			break;
		}
	}
	pfree(center);
	pfree(codebooks);
	return rc;
}

void *
vs_graph_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
			  uint64 *generation)
{
	Relation	rel;
	BufferAccessStrategy bas;
	Buffer		buf;
	VsGraphMetaPageData meta;
	VsGraphObject *o;
	vs_graph_arrays arrays;
	float	   *vectors;
	uint32	   *nbrs;
	uint8	   *live;
	uint32		words;
	int			per_page;
	BlockNumber nblocks;
	Size		need;
	int			pq_m = 0;		/* > 0: the compressed mode */
	int			rc;

	if (obj != NULL)
		return NULL;			/* no refresh in place: read the index again */
	rel = vs_index_open_for_read(ref);
	bas = GetAccessStrategy(BAS_BULKREAD);
	buf = vs_index_read_block(ref, rel, VS_GRAPH_METAPAGE_BLKNO, bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_graph_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);
	if (meta.dim == 0 || meta.dim != ref->dim || meta.metric != (uint32) ref->metric ||
		meta.degree < VS_GRAPH_MIN_DEGREE || meta.degree > VS_GRAPH_MAX_DEGREE ||
		meta.nnodes >= VS_GRAPH_NO_NODE || meta.storage > VS_STORE_F16)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index %u is not a vs_graph index of dimension %u and metric %u",
						ref->indexrelid, ref->dim, (uint32) ref->metric)));
	need = object_bytes(meta.nnodes, meta.dim, meta.degree);
	if (env->limit > 0 && need > env->limit)
		pq_m = choose_compressed(env, ref->indexrelid, &meta, (int) meta.pq_m, &need);

	/* every slot: free ones and those of pages not written yet stay not live, without edges */
	vectors = palloc_extended(sizeof(float) * Max(meta.nnodes, 1) * meta.dim,
							  MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	nbrs = palloc_extended(sizeof(uint32) * Max(meta.nnodes, 1) * meta.degree, MCXT_ALLOC_HUGE);
	memset(nbrs, 0xFF, sizeof(uint32) * Max(meta.nnodes, 1) * meta.degree);
	live = palloc_extended(Max(meta.nnodes, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	words = vs_store_words(meta.dim, meta.storage);
	per_page = VsGraphNodesPerPage(words, meta.degree);
	nblocks = (BlockNumber) ((meta.nnodes + per_page - 1) / per_page);
	for (BlockNumber b = 0; b < nblocks; b++)
	{
		Page		page;

		if ((b & 63) == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if (env->progress)
				env->progress();
		}
		buf = vs_index_read_block(ref, rel, VS_GRAPH_FIRST_NODE_BLKNO + b, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (VsGraphIsNodePage(page))
		{
			int			nitems = VsGraphPageGetOpaque(page)->nitems;

			for (int i = 0; i < nitems && i < per_page; i++)
			{
				uint64		node = (uint64) b * per_page + i;
				VsGraphNode *n = VsGraphPageGetNode(page, words, meta.degree, i);

				if (node >= meta.nnodes || !(n->flags & VS_GRAPH_NODE_LIVE))
					continue;
				live[node] = 1;
				vs_load_index_vector(n->x, vectors + node * meta.dim, meta.dim, meta.storage);
				memcpy(nbrs + node * meta.degree, VsGraphNodeNbrs(n, words),
					   sizeof(uint32) * meta.degree);
			}
		}
		UnlockReleaseBuffer(buf);
	}
	FreeAccessStrategy(bas);
	vs_index_close_for_read(rel);

	o = MemoryContextAllocZero(env->cxt, sizeof(VsGraphObject));
	o->metric = (vs_metric) meta.metric;
	o->nstarts = vs_graph_starts(&meta, o->starts);
	memset(&arrays, 0, sizeof(arrays));
	arrays.n = meta.nnodes;
	arrays.dim = meta.dim;
	arrays.degree = meta.degree;
	arrays.vectors = vectors;
	arrays.neighbors = nbrs;
	arrays.live = live;
	arrays.ids = NULL;			/* node numbers */
	if (env->reserve)
		(void) env->reserve(env->arg, need);
	if (pq_m > 0)
		rc = create_compressed(env, &arrays, pq_m, vs_rank_metric(o->metric), &o->graph);
	else
		for (;;)
		{
			rc = vs_graph_create(env->engine, &arrays, &o->graph);
			if (rc == VS_OUT_OF_MEMORY && env->evict_one && env->evict_one(env->arg))
				continue;
			break;
		}
	if (rc != VS_OK)
		vs_load_failed(env, ref->indexrelid, rc);
	if (pq_m > 0)
	{
		vs_graph_memory mem;

		vs_graph_get_memory(o->graph, &mem);
		if (vs_worker_shared)
			pg_atomic_fetch_add_u64(&vs_worker_shared->compressed_loads, 1);
		ereport(LOG,
				(errmsg("vsearch: vs_graph index %u loaded in the compressed mode: %d-byte codes, "
						"%zu kB on the device, %zu kB of pinned host memory (the whole object "
						"would take %zu kB, the limit is %zu kB)",
						ref->indexrelid, pq_m, mem.device_bytes >> 10, mem.host_bytes >> 10,
						object_bytes(meta.nnodes, meta.dim, meta.degree) >> 10,
						env->limit >> 10)));
	}
	pfree(vectors);
	pfree(nbrs);
	pfree(live);
	*bytes = need;
	*generation = meta.generation;
	return o;
}

void
vs_graph_destroy_object(struct vs_context *engine, void *obj)
{
	VsGraphObject *o = (VsGraphObject *) obj;

	if (o->graph != NULL)
		vs_graph_destroy(engine, o->graph);
}

int
vs_graph_knn_object(struct vs_context *engine, void *obj, const VsKindParams *params,
					const VsQueries *queries, Size k, int64 *ids, float *distances,
					int64 *counts)
{
	VsGraphObject *o = (VsGraphObject *) obj;
	VsGraphSearchParams p;
	vs_graph_search_params sp;

	memcpy(&p, params, sizeof(p));
	sp.metric = vs_rank_metric(o->metric);
	sp.ef = p.ef;
	sp.starts = o->starts;
	sp.nstarts = o->nstarts;
	sp.expand = p.expand;
	return vs_graph_knn(engine, o->graph, &sp, queries->vectors, queries->nq, k,
						(int64_t *) ids, distances, (int64_t *) counts);
}

/*
 * A search request: a kNN request (range searches run in the backend) with a valid width and
 * expansion.
 */
bool
vs_graph_check_search(const VsRequest *r, char *why, Size whylen)
{
	VsGraphSearchParams p;

	memcpy(&p, &r->params, sizeof(p));
	if (r->op != VS_OP_KNN)
		snprintf(why, whylen, "vs_graph range searches run in the backend, not in the worker");
	else if (r->metric != VS_METRIC_L2 && r->metric != VS_METRIC_IP &&
			 r->metric != VS_METRIC_COSINE)
		snprintf(why, whylen, "vs_graph does not support metric %u", r->metric);
	else if (p.ef < 1 || p.ef > VS_GRAPH_MAX_WORKER_EF || r->k > p.ef)
		snprintf(why, whylen, "vs_graph search width %u out of range (k %u, at most %d)", p.ef,
				 r->k, VS_GRAPH_MAX_WORKER_EF);
	else if (p.expand < 1 || p.expand > VS_GRAPH_MAX_EXPAND)
		snprintf(why, whylen, "vs_graph nodes expanded per step %u out of range (1 .. %d)",
				 p.expand, VS_GRAPH_MAX_EXPAND);
	else
	{
		for (int i = sizeof(p); i < VS_KIND_PARAMS_SIZE; i++)
		{
			if (((const char *) &r->params)[i] != 0)
			{
				snprintf(why, whylen, "vs_graph search parameters have stray bytes");
				return false;
			}
		}
		return true;
	}
	return false;
}

/* Queries whose starts are picked at a time (their positions: this many x the starts). */
#define VS_GRAPH_CUT_GROUP			64
/* Start cuts a backend keeps (search_here), the least recently used replaced. */
#define VS_GRAPH_CUT_CACHED			4

/*
 * A start cut of one index generation, width and metric: the live start nodes read from their
 * pages (kept), the engine's packed copy of their vectors (cut).  A generation's start list and
 * its nodes' vectors do not change (a node freed and reused is a new generation), so a backend
 * makes it once and every later search of that generation, a single scan's included, measures
 * only the starts that can be in its first beam instead of reading and measuring every start
 * (docs/BENCHMARKS.md, session 30).  Backend-local (TopMemoryContext), not in the relcache entry,
 * whose rd_amcache PostgreSQL may free without running anything of ours.
 */
typedef struct CachedCut
{
	VsRelFileLocator locator;
	uint64		generation;		/* 0: an empty slot */
	vs_metric	metric;
	int			ef;
	int			nstarts;		/* the start list it was made from */
	uint64		used;			/* the last use, in cut_clock */
	vs_graph_start_cut *cut;	/* NULL: no cut applies (too few starts that can be results) */
	int			nkept;
	uint32	   *kept;
} CachedCut;

static CachedCut cut_cache[VS_GRAPH_CUT_CACHED];
static uint64 cut_clock;

static void
cut_clear(CachedCut *c)
{
	if (c->cut != NULL)
		vs_graph_start_cut_destroy(c->cut);
	if (c->kept != NULL)
		pfree(c->kept);
	memset(c, 0, sizeof(*c));
}

/*
 * The start cut of r's index generation for width ef under nav (L2SQ or IP) from the start list
 * (nstarts of them), made and kept when this backend has none; NULL when no cut applies (no more
 * starts that can be results than ef).  The starts are read as the search would read them (no
 * node, out of range, unreadable or free: never measured), the live ones the results.
 */
static const CachedCut *
cached_cut(VsGraphReader *r, vs_metric nav, const uint32 *starts, int nstarts, int ef)
{
	CachedCut  *c = NULL;
	float	   *rows;
	uint8	   *results;
	uint32	   *kept;
	int			nkept = 0;

	for (int i = 0; i < VS_GRAPH_CUT_CACHED; i++)
	{
		CachedCut  *e = &cut_cache[i];

		if (e->generation == r->ref.generation && e->metric == nav && e->ef == ef &&
			e->nstarts == nstarts && memcmp(&e->locator, &r->ref.locator, sizeof(e->locator)) == 0)
		{
			e->used = ++cut_clock;
			return e->cut != NULL ? e : NULL;
		}
		if (c == NULL || e->used < c->used)
			c = e;
	}
	cut_clear(c);
	rows = palloc_extended(sizeof(float) * nstarts * r->dim, MCXT_ALLOC_HUGE);
	results = palloc(Max(nstarts, 1));
	kept = palloc(sizeof(uint32) * Max(nstarts, 1));
	for (int s = 0; s < nstarts; s++)
	{
		VsGraphNodeCopy nc;

		if (starts[s] == VS_GRAPH_NO_NODE || (uint64) starts[s] >= r->nnodes ||
			!vs_graph_read_node(r, starts[s], &nc, rows + (Size) nkept * r->dim, NULL) ||
			(nc.flags & VS_GRAPH_NODE_FREE))
			continue;
		results[nkept] = (nc.flags & VS_GRAPH_NODE_LIVE) != 0;
		kept[nkept++] = starts[s];
	}
	c->kept = MemoryContextAlloc(TopMemoryContext, sizeof(uint32) * Max(nkept, 1));
	memcpy(c->kept, kept, sizeof(uint32) * nkept);
	c->cut = vs_graph_start_cut_create(nav, rows, results, nkept, r->dim, ef);
	pfree(rows);
	pfree(results);
	pfree(kept);
	c->nkept = nkept;
	c->locator = r->ref.locator;
	c->metric = nav;
	c->ef = ef;
	c->nstarts = nstarts;
	c->used = ++cut_clock;
	c->generation = r->ref.generation;
	return c->cut != NULL ? c : NULL;
}

/*
 * vs_graph_search_hits' searches in this backend, one query after the other.  Under L2 or IP with
 * more start nodes that can be results than ef, each query searches from the starts that can be
 * in its first beam (vs_graph_start_cut_*: the same search, which measures a thousand starts at a
 * million rows before it walks a few hundred nodes), by the backend's cut of the generation
 * (cached_cut).
 */
static void
search_here(VsGraphReader *r, vs_metric metric, const uint32 *starts, int nstarts,
			const float *queries, int nq, int ef, int expand, VsGraphHit *out, int *counts)
{
	vs_metric	nav = vs_rank_metric(metric);
	const CachedCut *c = NULL;
	int			group;
	uint32	   *picked;
	size_t	   *npicked;
	uint32	   *subset;

	if (nstarts > ef && (nav == VS_METRIC_L2SQ || nav == VS_METRIC_IP))
		c = cached_cut(r, nav, starts, nstarts, ef);
	if (c == NULL)
	{
		for (int q = 0; q < nq; q++)
			counts[q] = vs_graph_beam_search(r, metric, starts, nstarts,
											 queries + (Size) q * r->dim, ef, expand,
											 out + (Size) q * ef);
		return;
	}
	group = Min(nq, VS_GRAPH_CUT_GROUP);
	picked = palloc_extended(sizeof(uint32) * group * c->nkept, MCXT_ALLOC_HUGE);
	npicked = palloc(sizeof(size_t) * group);
	subset = palloc(sizeof(uint32) * c->nkept);
	for (int q0 = 0; q0 < nq; q0 += group)
	{
		int			nc = Min(group, nq - q0);

		if (vs_graph_start_cut_pick(c->cut, queries + (Size) q0 * r->dim, nc, picked,
									npicked) != VS_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
							errmsg("out of memory picking a vs_graph batch's start nodes")));
		for (int q = q0; q < q0 + nc; q++)
		{
			const uint32 *mine = picked + (Size) (q - q0) * c->nkept;
			int			n = (int) npicked[q - q0];

			for (int i = 0; i < n; i++)
				subset[i] = c->kept[mine[i]];
			counts[q] = vs_graph_beam_search(r, metric, subset, n,
											 queries + (Size) q * r->dim, ef, expand,
											 out + (Size) q * ef);
		}
	}
	pfree(picked);
	pfree(npicked);
	pfree(subset);
}

/*
 * nq beam searches of width ef expanding `expand` nodes per step (a scan round, a batch's first
 * round): in the GPU worker when it serves and ef is within its limit, as one request, else
 * graphsearch.c's in this backend, one query after the other (search_here).  Query i's hits go to
 * out + i x ef and counts[i] says how many: as
 * vs_graph_beam_search, the best ef live nodes found, in the engine's order, with exact distances
 * in rank units and their tids.  A node the worker answered that is no longer live when its page
 * is read (VACUUM freed it meanwhile) is left out.
 *
 * With unread_ids, the worker's hits come as it answered them, in the order (distance, node),
 * their ids VS_GRAPH_HIT_UNREAD: a caller that takes hits in order until it has enough reads
 * only the pages of the nodes it takes (vs_graph_read_hit_ids), not all ef of them.
 */
void
vs_graph_search_hits(VsGraphReader *r, vs_metric metric, const uint32 *starts, int nstarts,
					 const float *queries, int nq, int ef, int expand, bool unread_ids,
					 VsGraphHit *out, int *counts)
{
	VsGraphSearchParams p;
	VsKindParams params;
	int64	   *ids;
	float	   *dists;
	int64	   *found;
	VsQueries	qs;

	if (ef >= 1 && ef <= VS_GRAPH_MAX_WORKER_EF && nstarts > 0 && nq > 0)
	{
		memset(&params, 0, sizeof(params));
		memset(&p, 0, sizeof(p));
		p.ef = (uint32) ef;
		p.expand = (uint32) expand;
		memcpy(&params, &p, sizeof(p));
		ids = palloc_extended(sizeof(int64) * nq * ef, MCXT_ALLOC_HUGE);
		dists = palloc_extended(sizeof(float) * nq * ef, MCXT_ALLOC_HUGE);
		found = palloc(sizeof(int64) * nq);
		qs = vs_vector_queries(queries, nq);
		if (vs_worker_knn(&r->ref, &params, &qs, ef, ids, dists, found))
		{
			for (int q = 0; q < nq; q++)
			{
				VsGraphHit *h = out + (Size) q * ef;
				int			n = 0;

				if (!unread_ids)
					for (int64 i = 0; i < found[q]; i++)
						vs_graph_prefetch_node(r, (uint32) ids[(Size) q * ef + i], false);
				for (int64 i = 0; i < found[q]; i++)
				{
					int64		node = ids[(Size) q * ef + i];
					VsGraphNodeCopy nc;

					if (node < 0 || node >= VS_GRAPH_NO_NODE)
						elog(ERROR, "vsearch worker: vs_graph answer names node " INT64_FORMAT,
							 node);
					if (unread_ids)
					{
						h[n].node = (uint32) node;
						h[n].d = dists[(Size) q * ef + i];
						h[n].id = VS_GRAPH_HIT_UNREAD;
						n++;
						continue;
					}
					if (!vs_graph_read_node(r, (uint32) node, &nc, NULL, NULL) ||
						!(nc.flags & VS_GRAPH_NODE_LIVE))
						continue;
					h[n].node = (uint32) node;
					h[n].d = dists[(Size) q * ef + i];
					h[n].id = vs_tid_to_id(&nc.tid);
					n++;
				}
				if (n > 1 && !unread_ids)
					qsort(h, n, sizeof(VsGraphHit), vs_graph_cmp_hit);
				counts[q] = n;
			}
			pfree(ids);
			pfree(dists);
			pfree(found);
			return;
		}
		pfree(ids);
		pfree(dists);
		pfree(found);
	}
	search_here(r, metric, starts, nstarts, queries, nq, ef, expand, out, counts);
}

static bool
same_distance(float a, float b)
{
	return a == b || (isnan(a) && isnan(b));
}

/* The end of the run of hits from i with hits[i]'s distance. */
int
vs_graph_run_end(const VsGraphHit *hits, int i, int nh)
{
	int			end = i + 1;

	while (end < nh && same_distance(hits[end].d, hits[i].d))
		end++;
	return end;
}

/*
 * For hits of vs_graph_search_hits with unread_ids, hits[i] unread: reads the ids of the run of
 * hits from i with the same distance (VS_GRAPH_HIT_GONE for a node that is no longer live) and
 * sorts the run by id, so that the hits taken in order are those, and in the order, that reading
 * every id first would have given.  Returns the end of the run.
 */
int
vs_graph_read_hit_ids(VsGraphReader *r, VsGraphHit *hits, int i, int nh)
{
	int			end = vs_graph_run_end(hits, i, nh);

	for (int t = i; t < end; t++)
	{
		VsGraphNodeCopy nc;

		if (vs_graph_read_node(r, hits[t].node, &nc, NULL, NULL) &&
			(nc.flags & VS_GRAPH_NODE_LIVE))
			hits[t].id = vs_tid_to_id(&nc.tid);
		else
			hits[t].id = VS_GRAPH_HIT_GONE;
	}
	if (end - i > 1)
		qsort(hits + i, end - i, sizeof(VsGraphHit), vs_graph_cmp_hit);
	return end;
}
