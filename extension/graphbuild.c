/*
 * vs_graph: CREATE INDEX / REINDEX (ambuild) and the init fork of unlogged indexes (ambuildempty).
 *
 * The build, in the backend on the engine's CPU backend (vs_build_engine: the CPU engine with
 * max_parallel_maintenance_workers + 1 threads) except for the nearest-neighbour queries, which
 * the GPU worker answers when it serves (graphworker.c), in phases reported in
 * pg_stat_progress_create_index:
 *
 *   loading tuples     the table scan copies every non-NULL vector and its tid into memory (node
 *                      numbers follow the scan's order);
 *   computing knn      the entry, the seeds and the build_degree nearest neighbours of every row,
 *                      exact or from IVF candidates (option build_knn; graphknn.c);
 *   pruning            the engine's vs_graph_build_edges on the build engine's threads: each kNN
 *                      list pruned to `degree` by rank (CAGRA's detour count), merged with the
 *                      reverse edges (the first half of a node's list is its best pruned
 *                      neighbours, then the nodes that chose it, by their rank of it, then the rest
 *                      of its pruned list), then every node that a search from the entry cannot
 *                      reach linked from a reached node of its kNN list (an empty slot, or one
 *                      whose target keeps another in-edge; on one thread), then the seeds
 *                      completed so that walks from the start nodes reach every island of the
 *                      graph (vs_graph_cover_starts, cover_starts below), then every row searched
 *                      for from the start nodes and, when the search does not reach it, linked
 *                      from and to the nearest rows the search found (vs_graph_link_unfound,
 *                      link_unfound below), then the seeds completed again;
 *   writing pages      node pages, each a full-page Generic WAL record, then the metapage.
 *
 * At DEBUG1 the build reports the seconds of its parts (BuildPart, graphbuild.h).
 *
 * Nothing is random: the same table in the same physical order gives the same index (the k-means
 * are seeded).  Memory: the vectors, the kNN lists (build_degree x 4 bytes per row) and the graph,
 * all in backend memory (and graphknn.c's).
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/tableam.h"
#include "access/xloginsert.h"
#include "catalog/index.h"
#include "commands/progress.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/bufmgr.h"
#include "utils/backend_progress.h"
#include "utils/memutils.h"

#include "graphbuild.h"

/* Build phases (PROGRESS_CREATEIDX_SUBPHASE); 1 is PostgreSQL's "initializing". */
#define GRAPH_PHASE_LOAD	2
#define GRAPH_PHASE_KNN		3
#define GRAPH_PHASE_PRUNE	4
#define GRAPH_PHASE_WRITE	5

char *
vs_graph_buildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case GRAPH_PHASE_LOAD:
			return "loading tuples";
		case GRAPH_PHASE_KNN:
			return "computing k-nearest-neighbour graph";
		case GRAPH_PHASE_PRUNE:
			return "pruning graph";
		case GRAPH_PHASE_WRITE:
			return "writing index pages";
	}
	return NULL;
}

/* A new phase with its tuple counts (total = the rows, none done), seen together. */
static void
set_phase(int64 phase, int64 total)
{
	const int	index[] = {PROGRESS_CREATEIDX_SUBPHASE, PROGRESS_CREATEIDX_TUPLES_TOTAL,
						   PROGRESS_CREATEIDX_TUPLES_DONE};
	const int64 value[] = {phase, total, 0};

	pgstat_progress_update_multi_param(3, index, value);
}

static const char *const part_names[NUM_PARTS] = {
	"load", "seeds", "upload", "lists", "knn", "prune", "edges", "links", "write"
};

static void
clock_start(BuildClock *c)
{
	memset(c, 0, sizeof(*c));
	INSTR_TIME_SET_CURRENT(c->last);
}

static void
clock_report(const BuildClock *c, int64 n, bool worker)
{
	char		buf[256];
	int			len = 0;

	for (int i = 0; i < NUM_PARTS; i++)
		len += snprintf(buf + len, sizeof(buf) - len, "%s%s %.3f s", i ? ", " : "",
						part_names[i], c->seconds[i]);
	elog(DEBUG1, "vs_graph build: %lld rows, kNN graph in the %s; %s", (long long) n,
		 worker ? "worker" : "backend", buf);
}

static void
build_callback(Relation index, ItemPointer tid, Datum *values, bool *isnull, bool tupleIsAlive,
			   void *arg)
{
	GraphBuildState *state = (GraphBuildState *) arg;
	MemoryContext old;
	Vector	   *vec;

	if (isnull[0])
		return;					/* NULL vectors are not indexed */

	old = MemoryContextSwitchTo(state->tmpcxt);
	vec = vs_datum_vector(values[0]);
	vs_graph_check_vector_dim(state->dim, vec->dim, state->degree, state->storage);
	MemoryContextSwitchTo(old);
	if (state->dim == 0)
	{
		vs_graph_check_pq_m(vs_graph_index_pq_m(state->index), vec->dim);
		state->dim = vec->dim;
	}
	if (state->n >= (int64) VS_GRAPH_NO_NODE - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_graph indexes hold at most %u rows", VS_GRAPH_NO_NODE - 1)));
	if (state->n == state->cap)
	{
		state->cap = Max(state->cap * 2, 1024);
		if (state->vectors == NULL)
		{
			state->vectors = palloc_extended(sizeof(float) * state->dim * state->cap,
											 MCXT_ALLOC_HUGE);
			state->tids = palloc_extended(sizeof(ItemPointerData) * state->cap, MCXT_ALLOC_HUGE);
		}
		else
		{
			state->vectors = repalloc_huge(state->vectors,
										   sizeof(float) * state->dim * state->cap);
			state->tids = repalloc_huge(state->tids, sizeof(ItemPointerData) * state->cap);
		}
	}
	memcpy(state->vectors + (Size) state->n * state->dim, vec->x, sizeof(float) * state->dim);
	state->tids[state->n] = *tid;
	state->n++;
	MemoryContextReset(state->tmpcxt);
}

/*
 * The final graph (n x degree) from the kNN lists: rank-based pruning, reverse edges, and links
 * to every node a search from entry could not reach (the engine's vs_graph_build_edges on the
 * build engine's threads; its pruning time goes to that part of the clock).
 */
static void
build_graph(const uint32 *knn, int K, int64 n, int degree, uint32 entry, uint32 *graph,
			BuildClock *clock)
{
	vs_graph_build_info info;
	int			retries = 0;

	for (;;)
	{
		vs_status	st = vs_graph_build_edges(vs_build_engine(), knn, (size_t) n, (size_t) K,
											  (size_t) degree, entry, graph, &info);

		if (st == VS_OK)
			break;
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
	clock_lap(clock, PART_EDGES);
	clock->seconds[PART_PRUNE] += info.prune_seconds;
	clock->seconds[PART_EDGES] -= info.prune_seconds;
	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, n);
	elog(DEBUG1, "vs_graph build: %llu nodes linked for reachability, %llu still unreached",
		 (unsigned long long) info.linked, (unsigned long long) info.unreached);
}

/*
 * Navigability (the engine's vs_graph_link_unfound on the build engine's threads): every row is
 * searched for from the entry and the seeds, as an index scan would search, and a row the
 * search does not reach gets edges from the nearest rows it found and back.  Exact kNN lists keep
 * each row's edges inside its cluster, so without this a query of a cluster without a seed stalls
 * at the rim of the cluster its search started in (issue 15).
 */
static void
link_unfound(GraphBuildState *s, vs_metric metric, uint32 *graph, uint32 entry,
			 const uint32 *seeds, uint32 nseeds, BuildClock *clock)
{
	uint32	   *starts = palloc(sizeof(uint32) * (nseeds + 1));
	vs_graph_link_params params;
	vs_graph_link_info info;
	int			retries = 0;

	starts[0] = entry;
	memcpy(starts + 1, seeds, sizeof(uint32) * nseeds);
	memset(&params, 0, sizeof(params));
	params.metric = vs_rank_metric(metric);
	params.width = VS_GRAPH_LINK_WIDTH;
	params.links = VS_GRAPH_LINKS;
	params.starts = starts;
	params.nstarts = nseeds + 1;
	for (;;)
	{
		vs_status	st = vs_graph_link_unfound(vs_build_engine(), graph, (size_t) s->n,
											   s->degree, s->vectors, s->dim, &params, &info);

		if (st == VS_OK)
			break;
		/* a cancel leaves the graph as it was: start over */
		if (st != VS_CANCELLED)
			vs_engine_error(vs_build_engine(), st);
		vs_engine_cancelled(&retries);
	}
	pfree(starts);
	clock_lap(clock, PART_LINKS);
	elog(DEBUG1, "vs_graph build: %llu nodes not found by their own search, %llu edges added",
		 (unsigned long long) info.unfound, (unsigned long long) info.linked);
}

/*
 * The seeds completed so that walks from the start nodes reach every node (the engine's
 * vs_graph_cover_starts): the kNN lists of clusters farther apart than build_degree rows reach
 * have no edge between them, and a cluster without a seed of its own was out of reach of every
 * search (issue 15).  The seeds that reach new nodes come first, then one node per unreached
 * island, then the other seeds, at most VS_GRAPH_MAX_SEEDS in all.  Called before the
 * navigability pass (islands get a start of their own, which also serves queries far from every
 * row) and after it (a slot it gave away may have been the way to a node); the second reports.
 */
static void
cover_starts(GraphBuildState *s, const uint32 *graph, uint32 entry, uint32 *seeds, uint32 *nseeds,
			 BuildClock *clock, bool report)
{
	uint32	   *out = palloc(sizeof(uint32) * VS_GRAPH_MAX_SEEDS);
	uint64		unreached = 0;
	int			m;

	CHECK_FOR_INTERRUPTS();
	m = vs_graph_cover_starts(graph, (size_t) s->n, s->degree, s->vectors, s->dim, &entry, 1,
							  seeds, *nseeds, out, VS_GRAPH_MAX_SEEDS, &unreached);
	if (m < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while choosing the start nodes of a vs_graph index")));
	memcpy(seeds, out, sizeof(uint32) * m);
	*nseeds = (uint32) m;
	pfree(out);
	clock_lap(clock, PART_EDGES);
	if (report)
		elog(DEBUG1, "vs_graph build: %d seeds, %llu nodes unreached from the start nodes",
			 m, (unsigned long long) unreached);
}

/* Writes the nodes as full node pages. */
static void
write_nodes(GraphBuildState *s, const uint32 *graph)
{
	uint32		words = vs_store_words(s->dim, s->storage);
	int			per_page = VsGraphNodesPerPage(words, s->degree);
	Page		tmp = (Page) palloc(BLCKSZ);

	pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_TOTAL, s->n);
	for (int64 first = 0; first < s->n; first += per_page)
	{
		int			nitems = (int) Min((int64) per_page, s->n - first);
		Buffer		buf;
		GenericXLogState *xlog;
		Page		page;

		CHECK_FOR_INTERRUPTS();
		vs_graph_init_page(tmp, VS_GRAPH_NODES);
		for (int i = 0; i < nitems; i++)
		{
			VsGraphNode *node = VsGraphPageGetNode(tmp, words, s->degree, i);
			int64		v = first + i;

			node->heap_tid = s->tids[v];
			node->flags = VS_GRAPH_NODE_LIVE;
			vs_store_index_vector(node->x, s->vectors + (Size) v * s->dim, s->dim, s->storage);
			memcpy(VsGraphNodeNbrs(node, words), graph + (Size) v * s->degree,
				   sizeof(uint32) * s->degree);
		}
		vs_graph_page_set_items(tmp, words, s->degree, nitems);

		buf = vs_new_buffer(s->index, MAIN_FORKNUM);
		Assert(BufferGetBlockNumber(buf) == VS_GRAPH_FIRST_NODE_BLKNO + first / per_page);
		xlog = GenericXLogStart(s->index);
		page = GenericXLogRegisterBuffer(xlog, buf, GENERIC_XLOG_FULL_IMAGE);
		memcpy(page, tmp, BLCKSZ);
		GenericXLogFinish(xlog);
		UnlockReleaseBuffer(buf);
		pgstat_progress_update_param(PROGRESS_CREATEIDX_TUPLES_DONE, first + nitems);
	}
	pfree(tmp);
}

/* The declared dimension (checked against the page size), or 0. */
static uint32
declared_dim(Relation index, uint32 degree)
{
	uint32		dim = vs_declared_dim(index);

	if (dim > 0)
	{
		vs_graph_check_dim((int) dim, degree, vs_index_storage(index));
		vs_graph_check_pq_m(vs_graph_index_pq_m(index), (int) dim);
	}
	return dim;
}

IndexBuildResult *
vs_graph_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result;
	GraphBuildState state;
	vs_metric	metric;
	Buffer		metabuf;
	GenericXLogState *xlog;
	Page		metapage;
	VsGraphMetaPage meta;
	double		reltuples;
	uint32		entry = VS_GRAPH_NO_NODE;
	uint32		seeds[VS_GRAPH_MAX_SEEDS];
	uint32		nseeds = 0;
	BuildClock	clock;
	bool		worker = false;

	if (RelationGetNumberOfBlocks(index) != 0)
		elog(ERROR, "index \"%s\" already contains data", RelationGetRelationName(index));

	memset(&state, 0, sizeof(state));
	state.index = index;
	vs_graph_index_options(index, &state.degree, &state.build_degree);
	state.storage = vs_index_storage(index);
	state.dim = declared_dim(index, state.degree);
	metric = vs_opclass_metric(index);

	/* Block 0: the metapage, so the index is readable even if the table is empty. */
	metabuf = vs_new_buffer(index, MAIN_FORKNUM);
	Assert(BufferGetBlockNumber(metabuf) == VS_GRAPH_METAPAGE_BLKNO);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, GENERIC_XLOG_FULL_IMAGE);
	vs_graph_init_metapage(metapage, state.dim, metric, state.degree, state.build_degree,
						   state.storage);
	VsGraphPageGetMeta(metapage)->pq_m = (uint32) vs_graph_index_pq_m(index);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);

	state.tmpcxt = AllocSetContextCreate(CurrentMemoryContext, "vs_graph build",
										 ALLOCSET_DEFAULT_SIZES);
	clock_start(&clock);
	pgstat_progress_update_param(PROGRESS_CREATEIDX_SUBPHASE, GRAPH_PHASE_LOAD);
	reltuples = table_index_build_scan(heap, index, indexInfo, true, true,
									   build_callback, &state, NULL);
	clock_lap(&clock, PART_LOAD);

	if (state.n > 0)
	{
		int			K = (int) Min((int64) state.build_degree, state.n - 1);
		uint32	   *knn = palloc_extended(sizeof(uint32) * Max(K, 1) * state.n, MCXT_ALLOC_HUGE);
		uint32	   *graph = palloc_extended(sizeof(uint32) * state.degree * state.n,
											MCXT_ALLOC_HUGE);

		set_phase(GRAPH_PHASE_KNN, state.n);
		vs_graph_compute_knn(&state, index, metric, K, knn, &entry, seeds, &nseeds, &clock,
							 &worker);
		set_phase(GRAPH_PHASE_PRUNE, state.n);
		build_graph(knn, K, state.n, (int) state.degree, entry, graph, &clock);
		pfree(knn);
		cover_starts(&state, graph, entry, seeds, &nseeds, &clock, false);
		link_unfound(&state, metric, graph, entry, seeds, nseeds, &clock);
		cover_starts(&state, graph, entry, seeds, &nseeds, &clock, true);
		set_phase(GRAPH_PHASE_WRITE, state.n);
		write_nodes(&state, graph);
		pfree(graph);
	}

	/* Publish the nodes in the metapage. */
	metabuf = ReadBuffer(index, VS_GRAPH_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = vs_graph_page_meta(metapage);
	meta->dim = state.dim;
	meta->nnodes = (uint64) state.n;
	meta->ntuples = (uint64) state.n;
	meta->entry = entry;
	meta->nseeds = nseeds;
	memcpy(meta->seeds, seeds, sizeof(uint32) * nseeds);
	meta->generation++;
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(metabuf);
	clock_lap(&clock, PART_WRITE);
	clock_report(&clock, state.n, worker);

	MemoryContextDelete(state.tmpcxt);
	if (state.vectors)
	{
		pfree(state.vectors);
		pfree(state.tids);
	}

	result = (IndexBuildResult *) palloc(sizeof(IndexBuildResult));
	result->heap_tuples = reltuples;
	result->index_tuples = (double) state.n;
	return result;
}

/*
 * The init fork of an unlogged index: an empty metapage, WAL-logged unconditionally.
 */
void
vs_graph_buildempty(Relation index)
{
	uint32		degree;
	uint32		build_degree;
	uint32		dim;
	vs_metric	metric = vs_opclass_metric(index);
	Buffer		buf;
	Page		page;

	vs_graph_index_options(index, &degree, &build_degree);
	dim = declared_dim(index, degree);
	buf = vs_new_buffer(index, INIT_FORKNUM);
	page = BufferGetPage(buf);
	START_CRIT_SECTION();
	vs_graph_init_metapage(page, dim, metric, degree, build_degree, vs_index_storage(index));
	VsGraphPageGetMeta(page)->pq_m = (uint32) vs_graph_index_pq_m(index);
	MarkBufferDirty(buf);
	log_newpage_buffer(buf, true);
	END_CRIT_SECTION();
	UnlockReleaseBuffer(buf);
}
