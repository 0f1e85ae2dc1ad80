/*
 * vs_graph: the index kind (indexkind.h) and its access method handler, options and settings,
 * page and metapage helpers.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/reloptions.h"
#include "fmgr.h"
#include "storage/bufmgr.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "graph.h"

int			vs_graph_ef = 40;
int			vs_graph_expand = 2;

static relopt_kind graph_relopt_kind;

static relopt_enum_elt_def build_knn_values[] = {
	{"auto", VS_GRAPH_BUILD_KNN_AUTO},
	{"exact", VS_GRAPH_BUILD_KNN_EXACT},
	{"ivf", VS_GRAPH_BUILD_KNN_IVF},
	{NULL}
};

/* Registers the options and the settings; from _PG_init. */
static void
graph_init(void)
{
	graph_relopt_kind = add_reloption_kind();
	add_int_reloption(graph_relopt_kind, "degree",
					  "Out-neighbours of every node of the graph",
					  VS_GRAPH_DEFAULT_DEGREE, VS_GRAPH_MIN_DEGREE, VS_GRAPH_MAX_DEGREE,
					  AccessExclusiveLock);
	add_int_reloption(graph_relopt_kind, "build_degree",
					  "Neighbours per row of the k-nearest-neighbour graph the build prunes "
					  "(inserts search twice as wide); 0 chooses 2 x degree",
					  0, 0, VS_GRAPH_MAX_BUILD_DEGREE, AccessExclusiveLock);
	add_int_reloption(graph_relopt_kind, "seeds",
					  "Start nodes the build places at k-means centroids (every search measures "
					  "them); 0 chooses 2 sqrt(rows), at most 1024",
					  0, 0, VS_GRAPH_MAX_SEEDS, AccessExclusiveLock);
	add_int_reloption(graph_relopt_kind, "pq_m",
					  "Bytes of each row's PQ code in the worker's compressed mode (an index "
					  "larger than vsearch.gpu_memory_limit); a divisor of the dimension, 0 "
					  "chooses the largest divisor up to min(64, dim / 2)",
					  0, 0, VS_GRAPH_MAX_PQ_M, AccessExclusiveLock);
	add_enum_reloption(graph_relopt_kind, "build_knn",
					   "How the build finds each row's build_degree nearest rows: exact (every "
					   "pair of rows), ivf (the rows of the nearest k-means lists) or auto (ivf "
					   "from 50000 rows on a CPU)",
					   build_knn_values, VS_GRAPH_BUILD_KNN_AUTO,
					   "Valid values are \"auto\", \"exact\" and \"ivf\".",
					   AccessExclusiveLock);

	DefineCustomIntVariable("vsearch.graph_ef",
							"Search width of vs_graph searches: nodes kept in the beam.",
							"A search keeps the best graph_ef nodes it has reached and stops when "
							"no unexpanded node can improve them; the first round of an index "
							"scan returns those graph_ef rows (at least the LIMIT's k is not "
							"known to the index, so set it to at least k).  Larger finds more of "
							"the true nearest rows (recall) at the cost of more distances.",
							&vs_graph_ef,
							40,
							1, 100000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("vsearch.graph_expand",
							"Nodes a vs_graph search expands per step (CAGRA's search width).",
							"Each step of a search takes this many of the nearest unexpanded "
							"nodes of the beam and measures the neighbours of all of them before "
							"the beam changes: fewer sequential steps (what a GPU search's latency "
							"is made of) for a few more distances, and a slightly different "
							"answer.  The worker's search and the backend's expand alike.",
							&vs_graph_expand,
							2,
							1, VS_GRAPH_MAX_EXPAND,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);
}

bytea *
vs_graph_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"degree", RELOPT_TYPE_INT, offsetof(VsGraphOptions, degree)},
		{"build_degree", RELOPT_TYPE_INT, offsetof(VsGraphOptions, build_degree)},
		{"seeds", RELOPT_TYPE_INT, offsetof(VsGraphOptions, seeds)},
		{"pq_m", RELOPT_TYPE_INT, offsetof(VsGraphOptions, pq_m)},
		{"build_knn", RELOPT_TYPE_ENUM, offsetof(VsGraphOptions, build_knn)},
	};
	VsGraphOptions *opts;

	opts = (VsGraphOptions *) build_reloptions(reloptions, validate, graph_relopt_kind,
											   sizeof(VsGraphOptions), tab, lengthof(tab));
	if (validate && opts != NULL && opts->build_degree != 0 && opts->build_degree < opts->degree)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_graph option build_degree (%d) must be at least degree (%d)",
						opts->build_degree, opts->degree),
				 errhint("build_degree is the number of nearest neighbours per row the build "
						 "computes before pruning them to degree; 0 chooses 2 x degree.")));
	return (bytea *) opts;
}

/* The options of an index (defaults when it has none). */
void
vs_graph_index_options(Relation index, uint32 *degree, uint32 *build_degree)
{
	VsGraphOptions *opts = (VsGraphOptions *) index->rd_options;
	int			d = opts ? opts->degree : VS_GRAPH_DEFAULT_DEGREE;
	int			b = opts ? opts->build_degree : 0;

	*degree = (uint32) d;
	*build_degree = (uint32) (b == 0 ? Min(2 * d, VS_GRAPH_MAX_BUILD_DEGREE) : b);
}

/* The option seeds of an index (0: the rule). */
int
vs_graph_index_seeds(Relation index)
{
	VsGraphOptions *opts = (VsGraphOptions *) index->rd_options;

	return opts ? opts->seeds : 0;
}

/* The option pq_m of an index (0: automatic). */
int
vs_graph_index_pq_m(Relation index)
{
	VsGraphOptions *opts = (VsGraphOptions *) index->rd_options;

	return opts ? opts->pq_m : 0;
}

/* The option build_knn of an index (auto when it has none). */
VsGraphBuildKnn
vs_graph_index_build_knn(Relation index)
{
	VsGraphOptions *opts = (VsGraphOptions *) index->rd_options;

	return opts ? (VsGraphBuildKnn) opts->build_knn : VS_GRAPH_BUILD_KNN_AUTO;
}

/* ERROR unless pq_m (0: automatic) divides dim; from CREATE INDEX and the first row's insert. */
void
vs_graph_check_pq_m(int pq_m, int dim)
{
	if (pq_m != 0 && (pq_m > dim || dim % pq_m != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_graph option pq_m (%d) must divide the dimension (%d)", pq_m, dim),
				 errhint("pq_m is the bytes of each row's PQ code in the worker's compressed "
						 "mode; 0 chooses the largest divisor of the dimension up to "
						 "min(64, dim / 2).")));
}

/*
 * The compressed mode's code bytes when pq_m is 0: the largest divisor of dim up to min(64,
 * dim / 2) (1 for dim 1).  Two dimensions per byte keep recall@10 within 0.005 of the in-memory
 * search from ef 32 where four lose up to 0.3 at ef 16 (docs/ENGINE.md, compressed graph
 * objects); 64 bytes bound the GPU's per-query table (64 KiB) and the codes' device memory.
 */
int
vs_graph_auto_pq_m(int dim)
{
	int			m = Max(1, Min(64, dim / 2));

	while (dim % m != 0)
		m--;
	return m;
}

/* ---------------------------------------------------------------------------------------------
 * Pages
 */

void
vs_graph_init_page(Page page, uint16 flags)
{
	VsGraphPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(VsGraphPageOpaqueData));
	opaque = VsGraphPageGetOpaque(page);
	opaque->nitems = 0;
	opaque->flags = flags;
	opaque->unused = 0;
	opaque->page_id = VS_GRAPH_PAGE_ID;
}

/* Sets the node count of a node page and pd_lower to the end of its nodes. */
void
vs_graph_page_set_items(Page page, uint32 words, uint32 degree, int nitems)
{
	VsGraphPageGetOpaque(page)->nitems = (uint16) nitems;
	((PageHeader) page)->pd_lower =
		MAXALIGN(SizeOfPageHeaderData) + (Size) nitems * VS_GRAPH_NODE_SIZE(words, degree);
	Assert(((PageHeader) page)->pd_lower <= ((PageHeader) page)->pd_upper);
}

void
vs_graph_init_metapage(Page page, uint32 dim, vs_metric metric, uint32 degree,
					   uint32 build_degree, uint32 storage)
{
	VsGraphMetaPage meta;

	vs_graph_init_page(page, VS_GRAPH_META);
	meta = VsGraphPageGetMeta(page);
	StaticAssertStmt(MAXALIGN(SizeOfPageHeaderData) + sizeof(VsGraphMetaPageData) <=
					 BLCKSZ - MAXALIGN(sizeof(VsGraphPageOpaqueData)),
					 "the vs_graph metapage does not fit a page");
	memset(meta, 0, sizeof(VsGraphMetaPageData));
	meta->magic = VS_GRAPH_MAGIC;
	meta->version = VS_GRAPH_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->degree = degree;
	meta->build_degree = build_degree;
	meta->storage = storage;
	meta->entry = VS_GRAPH_NO_NODE;
	meta->generation = vs_initial_generation();
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsGraphMetaPageData);
}

/* Replaces a node's neighbour list (Generic WAL); the caller holds the index's writer lock. */
void
vs_graph_write_nbrs(Relation index, uint32 words, uint32 degree, uint32 node, const uint32 *nbrs)
{
	int			per_page = VsGraphNodesPerPage(words, degree);
	BlockNumber blkno = VS_GRAPH_FIRST_NODE_BLKNO + node / (uint32) per_page;
	int			slot = (int) (node % (uint32) per_page);
	Buffer		buf = ReadBuffer(index, blkno);
	GenericXLogState *xlog;
	Page		page;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(buf);
	if (!VsGraphIsNodePage(page) || slot >= VsGraphPageGetOpaque(page)->nitems)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_graph index \"%s\" has no node %u on block %u",
						RelationGetRelationName(index), node, blkno),
				 errhint("REINDEX the index.")));
	xlog = GenericXLogStart(index);
	page = GenericXLogRegisterBuffer(xlog, buf, 0);
	memcpy(VsGraphNodeNbrs(VsGraphPageGetNode(page, words, degree, slot), words), nbrs,
		   sizeof(uint32) * degree);
	GenericXLogFinish(xlog);
	UnlockReleaseBuffer(buf);
}

VsGraphMetaPage
vs_graph_page_meta(Page page)
{
	return (VsGraphMetaPage) vs_page_meta(page, VS_GRAPH_MAGIC, VS_GRAPH_VERSION, "vs_graph");
}

void
vs_graph_read_meta(Relation index, VsGraphMetaPageData *meta)
{
	vs_read_meta(index, VS_GRAPH_MAGIC, VS_GRAPH_VERSION, "vs_graph", meta, sizeof(*meta));
}

/* ERROR unless a node of dim elements (stored as storage says) and degree neighbours fits on a
 * page. */
void
vs_graph_check_dim(int dim, uint32 degree, uint32 storage)
{
	if (VS_GRAPH_NODE_SIZE(vs_store_words((uint32) dim, storage), degree) >
		VS_GRAPH_PAGE_SPACE)
	{
		Size		words = (VS_GRAPH_PAGE_SPACE - offsetof(VsGraphNode, x) -
							 sizeof(uint32) * degree) / sizeof(float);

		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_graph indexes with degree %u support at most %d dimensions of %s, not %d",
						degree, (int) (storage == VS_STORE_F16 ? 2 * words : words),
						storage == VS_STORE_F16 ? "halfvec" : "vector", dim),
				 storage == VS_STORE_F16 ?
				 errhint("A vs_graph node (vector and neighbour list) must fit on one %d-byte "
						 "page; use a smaller degree or fewer dimensions.", BLCKSZ) :
				 errhint("A vs_graph node (vector and neighbour list) must fit on one %d-byte "
						 "page; use a smaller degree, fewer dimensions, or a halfvec column (two "
						 "bytes a dimension).", BLCKSZ)));
	}
}

/* ERROR unless a vector of dim elements can go into an index of index_dim (0: any, first row). */
void
vs_graph_check_vector_dim(uint32 index_dim, int dim, uint32 degree, uint32 storage)
{
	if (index_dim == 0)
		vs_graph_check_dim(dim, degree, storage);
	else if ((uint32) dim != index_dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", index_dim, dim),
				 errhint("Every vector in a vs_graph index has the dimension of the first one; "
						 "declare the column as vector(n).")));
}

/*
 * Open addressing over node numbers for vs_graph_starts: a power of two at least twice the start
 * nodes a metapage names, empty slots VS_GRAPH_NO_NODE (never a start).
 */
#define VS_GRAPH_STARTS_SET		4096

StaticAssertDecl(VS_GRAPH_STARTS_SET >= 2 * (VS_GRAPH_MAX_SEEDS + 1),
				 "the start set must stay at most half full");

/* Adds node to the set; false when it was there already. */
static bool
starts_set_add(uint32 *set, uint32 node)
{
	uint32		i = (node * 2654435761u) & (VS_GRAPH_STARTS_SET - 1);

	while (set[i] != VS_GRAPH_NO_NODE)
	{
		if (set[i] == node)
			return false;
		i = (i + 1) & (VS_GRAPH_STARTS_SET - 1);
	}
	set[i] = node;
	return true;
}

/*
 * The entry and the seeds, each once, in the metapage's order; returns how many (0 when the index
 * has no live node).  Every scan (twice: its reference and its start list), insert and batch call
 * asks, so duplicates are found through a hash set: comparing each seed with the ones before it
 * took ~0.25 ms of a scan's ~0.3 ms in the backend at 1 118 seeds (docs/WORKER.md, "vs_graph").
 */
int
vs_graph_starts(const VsGraphMetaPageData *meta, uint32 *starts)
{
	uint32		set[VS_GRAPH_STARTS_SET];
	int			n = 0;

	memset(set, 0xFF, sizeof(set));
	if (meta->entry != VS_GRAPH_NO_NODE)
	{
		starts_set_add(set, meta->entry);
		starts[n++] = meta->entry;
	}
	for (uint32 i = 0; i < meta->nseeds && i < VS_GRAPH_MAX_SEEDS; i++)
		if (meta->seeds[i] != VS_GRAPH_NO_NODE && starts_set_add(set, meta->seeds[i]))
			starts[n++] = meta->seeds[i];
	return n;
}

/*
 * This backend's start list of an index (the index's rd_amcache, freed with the relcache entry):
 * every scan needs it or its length, and it changes only with the metapage's generation.  Making
 * it takes a copy of the metapage (8 kB) and a pass of the hash set above, twice per scan before
 * this copy (docs/BENCHMARKS.md, "vs_graph single queries: the backend's CPU").
 */
typedef struct GraphStartsCache
{
	VsRelFileLocator locator;
	uint64		generation;		/* 0: none yet (generations start at 1) */
	int			nstarts;
	uint32		starts[VS_GRAPH_MAX_SEEDS + 1];
} GraphStartsCache;

/*
 * Reads the metapage's fields but its seeds into *meta (the seeds are not copied) and returns
 * the start list of that metapage, made anew under the page's lock when the copy is of another
 * generation.
 */
static const GraphStartsCache *
read_meta_starts(Relation index, VsGraphMetaPageData *meta)
{
	GraphStartsCache *c = (GraphStartsCache *) index->rd_amcache;
	VsRelFileLocator locator = VsRelationGetLocator(index);
	Buffer		buf;
	VsGraphMetaPage m;

	if (c == NULL)
	{
		c = MemoryContextAllocZero(index->rd_indexcxt, sizeof(GraphStartsCache));
		index->rd_amcache = c;
	}
	buf = ReadBuffer(index, VS_GRAPH_METAPAGE_BLKNO);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	m = vs_graph_page_meta(BufferGetPage(buf));
	memcpy(meta, m, offsetof(VsGraphMetaPageData, seeds));
	meta->storage = m->storage;
	if (c->generation != m->generation || memcmp(&c->locator, &locator, sizeof(locator)) != 0)
	{
		c->generation = 0;
		c->nstarts = vs_graph_starts(m, c->starts);
		c->locator = locator;
		c->generation = m->generation;
	}
	UnlockReleaseBuffer(buf);
	return c;
}

/*
 * The start list of ref's generation of the index when this backend has it, else of the current
 * metapage; palloc'd, *nstarts entries.
 */
uint32 *
vs_graph_ref_starts(Relation index, const VsIndexRef *ref, int *nstarts)
{
	const GraphStartsCache *c = (const GraphStartsCache *) index->rd_amcache;
	VsRelFileLocator locator = VsRelationGetLocator(index);
	uint32	   *starts;

	if (c == NULL || c->generation != ref->generation ||
		memcmp(&c->locator, &locator, sizeof(locator)) != 0)
	{
		VsGraphMetaPageData meta;

		c = read_meta_starts(index, &meta);
	}
	*nstarts = c->nstarts;
	starts = palloc(sizeof(uint32) * Max(c->nstarts, 1));
	memcpy(starts, c->starts, sizeof(uint32) * c->nstarts);
	return starts;
}

static void
graph_read_ref(Relation index, VsIndexRef *ref)
{
	VsGraphMetaPageData meta;
	const GraphStartsCache *c = read_meta_starts(index, &meta);

	vs_ref_init(index, VS_GRAPH_KIND, ref);
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	if (meta.storage > VS_STORE_F16)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_graph index \"%s\" has an unknown vector storage %u",
						RelationGetRelationName(index), meta.storage),
				 errhint("REINDEX the index.")));
	ref->kind_info[0] = meta.degree | ((uint64) meta.storage << 32);
	ref->kind_info[1] = meta.entry;
	ref->kind_info[2] = meta.nnodes;
	ref->kind_info[3] = (uint64) c->nstarts;
}

/* The beam's rows are measured exactly (graphsearch.c). */
static bool
graph_exact_distances(const VsIndexRef *ref)
{
	return true;
}

const VsIndexKind vs_graph_kind = {
	.id = VS_GRAPH_KIND,
	.name = "vs_graph",
	.page_id = VS_GRAPH_PAGE_ID,
	.uses_maintenance_work_mem = false,
	.build = vs_graph_build,
	.buildempty = vs_graph_buildempty,
	.insert = vs_graph_insert,
	.bulkdelete = vs_graph_bulkdelete,
	.costestimate = vs_graph_costestimate,
	.options = vs_graph_options,
	.beginscan = vs_graph_beginscan,
	.rescan = vs_graph_rescan,
	.gettuple = vs_graph_gettuple,
	.getbitmap = vs_graph_getbitmap,
	.endscan = vs_graph_endscan,
	.init = graph_init,
	.read_ref = graph_read_ref,
	.load = vs_graph_load,
	.destroy = vs_graph_destroy_object,
	.knn = vs_graph_knn_object,
	.range = NULL,				/* range quals are a pass over the pages in the backend */
	.exact = false,
	.exact_distances = graph_exact_distances,
	.range_candidates = vs_graph_range_candidates,
	.batch_knn = vs_graph_batch_knn,
	.max_k = VS_GRAPH_MAX_WORKER_EF,	/* k of a search is its beam width */
	.check = vs_graph_check,
	.check_request = vs_graph_check_request,
	.build_step = vs_graph_build_step,
	.worker_tick = vs_graph_worker_tick,
};

PG_FUNCTION_INFO_V1(vs_graph_handler);
Datum
vs_graph_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = vs_am_routine(&vs_graph_kind);

	am->ambuildphasename = vs_graph_buildphasename;
	PG_RETURN_POINTER(am);
}
