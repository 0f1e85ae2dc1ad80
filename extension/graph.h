/*
 * vs_graph: a proximity-graph index (a fixed-degree directed graph over the rows, searched by beam
 * search), built from an exact k-nearest-neighbour graph pruned CAGRA-style.
 *
 * Every row is a node.  Node i holds the row's heap tid, a copy of its vector and a fixed-size
 * list of `degree` out-neighbours (node numbers; VS_GRAPH_NO_NODE marks an empty slot), so a node
 * is found by arithmetic: block 1 + i / per_page, slot i % per_page.  A search starts at the
 * metapage's entry and seed nodes and walks the graph keeping the `vsearch.graph_ef` best nodes it
 * has seen (the beam), expanding `vsearch.graph_expand` of them per step, navigating by the SIMD
 * float distance; the nodes it returns are measured with the engine's exact one
 * (vs_exact_distance_f32 in rank units, search.h), so the rows come back with the SQL operator's
 * own value.  docs/INDEXES.md describes the behaviour.
 *
 * Layout (block 0 is the metapage; node pages follow, each with VsGraphPageOpaqueData):
 *
 *   metapage   page header | VsGraphMetaPageData | ... | opaque
 *   node page  page header | node[per_page] | ... | opaque
 *   node       ItemPointerData heap_tid | uint16 flags | x[dim] | uint32 nbrs[degree]
 *
 * x is float4, or IEEE binary16 in an index of a halfvec column (metapage `storage`; binary16
 * holds a halfvec's values exactly, in half the bytes, so such an index takes up to about 4 000
 * dimensions instead of 2 000); readers widen it to floats.
 *
 * Inserts and VACUUM are serialized by a heavyweight lock on the metapage's block number
 * (LockPage, ExclusiveLock), held for the whole change; searches never take it.  Page contents
 * change under the buffer's exclusive lock with Generic WAL, the build included.
 *
 * Files: graphutils.c (the index kind, options, settings, pages), graphsearch.c (reading nodes,
 * beam search, rank-based pruning), graphobject.c (the engine object the GPU worker searches, and
 * asking the worker for a beam search), graphbuild.c (with graphknn.c, its kNN graph, and
 * graphbuild.h between them), graphinsert.c, graphvacuum.c, graphscan.c,
 * graphbatch.c, graphworker.c (the worker's side: requests, build steps), graphcost.c.  What every
 * access method shares is in amutils.h.
 */
#ifndef VSEARCH_GRAPH_H
#define VSEARCH_GRAPH_H

#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "storage/buf.h"
#include "storage/bufpage.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"

#include "amutils.h"
#include "search.h"
#include "vector.h"
#include "vsearch/graph.h"

#define VS_GRAPH_KIND			3	/* the index kind's id (indexkind.h) */

#define VS_GRAPH_MAGIC			0x56534752	/* "VSGR" */
/*
 * Version 2: the page id changed from 0xFF93, which vs_lc's pages also carried (a page of one
 * could pass for the other's); a version-1 index is refused with a hint to REINDEX it.
 */
#define VS_GRAPH_VERSION		2
#define VS_GRAPH_PAGE_ID		0xFF95

#define VS_GRAPH_METAPAGE_BLKNO	0
#define VS_GRAPH_FIRST_NODE_BLKNO 1

#define VS_GRAPH_NO_NODE		0xFFFFFFFFu

/* Page flags */
#define VS_GRAPH_META			(1 << 0)
#define VS_GRAPH_NODES			(1 << 1)

/* Node flags */
#define VS_GRAPH_NODE_LIVE		(1 << 0)	/* a row (maybe dead in the heap, not yet vacuumed) */
#define VS_GRAPH_NODE_FREE		(1 << 1)	/* removed by VACUUM: unlinked, reusable by inserts */

/*
 * Start nodes besides the entry: the rows nearest to k-means centroids of the build's rows, about
 * 2 sqrt(rows) of them (at most VS_GRAPH_DEFAULT_MAX_SEEDS) or the option `seeds`, then one more
 * per island of the graph that no other start reaches (at most VS_GRAPH_MAX_SEEDS in all, what the
 * metapage holds): every search computes their distances first.
 */
#define VS_GRAPH_MAX_SEEDS		2000
#define VS_GRAPH_DEFAULT_MAX_SEEDS 1024
#define VS_GRAPH_SEED			20251125	/* of the k-means that places them */

/* Limits and defaults of the options. */
#define VS_GRAPH_MIN_DEGREE		4
#define VS_GRAPH_MAX_DEGREE		256
#define VS_GRAPH_DEFAULT_DEGREE	32
/*
 * Most bytes of a node's PQ code in the worker's compressed mode (option pq_m): the GPU search
 * holds a query's table of pq_m KiB in shared memory.
 */
#define VS_GRAPH_MAX_PQ_M		128
#define VS_GRAPH_MAX_BUILD_DEGREE 1024

/*
 * The build's navigability pass (vs_graph_link_unfound): every row is searched for from the start
 * nodes with this beam width, and a row the search does not reach is linked from (and to) the
 * VS_GRAPH_LINKS nearest rows the search found (docs/INDEXES.md, build step 7).
 */
#define VS_GRAPH_LINK_WIDTH		16
#define VS_GRAPH_LINKS			2

/* The build's kNN: queries per engine call in the backend, per worker request. */
#define VS_GRAPH_KNN_CHUNK		1024
#define VS_GRAPH_WORKER_KNN_CHUNK 16384

/*
 * How the build computes its kNN graph (option build_knn): the exact build_degree nearest rows of
 * every row, or the IVF candidates' (graphknn.c): the rows in k-means lists, each list's rows
 * searched among the rows of the lists nearest its centroid.  Automatic: IVF from
 * VS_GRAPH_IVF_MIN_ROWS rows when the kNN runs on a CPU (the backend's engine or a CPU worker;
 * chosen by measurement, docs/BENCHMARKS.md: with the engine's blocked products the IVF build was
 * 1.16x faster at 50 000 x 64, 1.70x on Fashion-MNIST's 60 000 x 784, at the same recall), from
 * VS_GRAPH_IVF_MIN_ROWS_GPU through a GPU worker, whose exact kNN is a GEMM: on an H100 at 1M x
 * 128 the exact kNN took 7.6 s and the IVF one 22.2 s, at 10M x 96 the IVF one 344 s, where the
 * exact one's O(rows^2) makes ~570 s (not run); they cross near 4M rows.
 */
typedef enum VsGraphBuildKnn
{
	VS_GRAPH_BUILD_KNN_AUTO = 0,
	VS_GRAPH_BUILD_KNN_EXACT = 1,
	VS_GRAPH_BUILD_KNN_IVF = 2
} VsGraphBuildKnn;

#define VS_GRAPH_IVF_MIN_ROWS	50000
#define VS_GRAPH_IVF_MIN_ROWS_GPU	4000000
#define VS_GRAPH_IVF_MAX_LISTS	1024	/* sqrt(rows) lists, at most this many */
#define VS_GRAPH_IVF_NPROBE		16
#define VS_GRAPH_IVF_ASSIGN		3	/* a row is a candidate in its 3 nearest lists */
#define VS_GRAPH_IVF_SEED		20260601	/* of the lists' k-means */

/* The worker's build steps (VsKindParams of a VS_OP_BUILD request, graphworker.c). */
typedef enum VsGraphBuildStep
{
	VS_GRAPH_LOAD = 1,			/* the rows are rows [first, first + n) of the build's dataset */
	VS_GRAPH_KNN = 2,			/* the rows are queries; answer: int64 ids[n x k] */
	VS_GRAPH_KNN_AMONG = 3		/* the rows are queries, the payload int64 row numbers: answer
								 * int64 ids[n x k] among those rows (the IVF kNN) */
} VsGraphBuildStep;

typedef struct VsGraphBuildParams
{
	uint32		step;			/* VsGraphBuildStep */
	uint32		k;				/* VS_GRAPH_KNN: neighbours per query */
	uint64		build_id;		/* names the build (keys the worker's dataset) */
	uint64		total;			/* rows of the build */
	uint64		first;			/* VS_GRAPH_LOAD: the first row's number */
} VsGraphBuildParams;

/*
 * A search request's parameter block (VsKindParams of a VS_OP_KNN request): the beam width and
 * the nodes expanded per step (vsearch.graph_expand).  The worker's answer is the beam's best k
 * nodes by exact distance in rank units, with node numbers as ids; the backend reads each node's
 * heap tid (graphobject.c).
 */
typedef struct VsGraphSearchParams
{
	uint32		ef;				/* 1 .. VS_GRAPH_MAX_WORKER_EF, at least the request's k */
	uint32		expand;			/* 1 .. VS_GRAPH_MAX_EXPAND */
} VsGraphSearchParams;

/* The widest beam sent to the worker (the GPU kernel's limit); wider rounds run in the backend. */
#define VS_GRAPH_MAX_WORKER_EF	VS_GRAPH_GPU_MAX_EF

/* Most bytes of rows, or of an answer, in one build step. */
#define VS_GRAPH_MAX_STEP_BYTES	((Size) 256 * 1024 * 1024)

typedef struct VsGraphPageOpaqueData
{
	uint16		nitems;			/* node slots in use on the page */
	uint16		flags;
	uint16		unused;
	uint16		page_id;		/* VS_GRAPH_PAGE_ID */
} VsGraphPageOpaqueData;

typedef VsGraphPageOpaqueData *VsGraphPageOpaque;

#define VsGraphPageGetOpaque(page) ((VsGraphPageOpaque) PageGetSpecialPointer(page))

#define VS_GRAPH_PAGE_SPACE \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(VsGraphPageOpaqueData)))

/*
 * The metapage.  `generation` changes with every change of the node set or of an adjacency list
 * (insert, VACUUM); it starts at vs_initial_generation().
 */
typedef struct VsGraphMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dim;			/* 0 until the first vector (unconstrained column, empty table) */
	uint32		metric;			/* vs_metric of the operator class */
	uint32		degree;			/* out-neighbours per node */
	uint32		build_degree;	/* neighbours of the kNN graph / insert search width */
	uint32		entry;			/* where searches start (VS_GRAPH_NO_NODE: no live node) */
	uint32		free_hint;		/* no free slot below this node number */
	uint64		nnodes;			/* node slots (live and free) */
	uint64		ntuples;		/* live nodes (rows not yet vacuumed away) */
	uint64		nfree;			/* free slots */
	uint64		generation;
	uint32		nseeds;			/* more start nodes, spread over the data (0..MAX_SEEDS);
								 * the array held 1024 before 2026-11-26 and grew in place */
	uint32		pq_m;			/* the option pq_m at the build (0: automatic; an index built
								 * before 2026-12-06 has 0 here, where the field was unused) */
	uint32		seeds[VS_GRAPH_MAX_SEEDS];
	uint32		storage;		/* VS_STORE_F32 or _F16 (0, floats, in every index built
								 * before 2026-12-07: the page's zeros past the struct) */
} VsGraphMetaPageData;

typedef VsGraphMetaPageData *VsGraphMetaPage;

#define VsGraphPageGetMeta(page) ((VsGraphMetaPage) PageGetContents(page))

/* The node geometry below is in 4-byte words of a vector (vs_store_words, amutils.h). */

/* A node; x (float4, or binary16: uint16 values) then nbrs follow the header. */
typedef struct VsGraphNode
{
	ItemPointerData heap_tid;
	uint16		flags;
	float		x[FLEXIBLE_ARRAY_MEMBER];
} VsGraphNode;

/* words: vs_store_words */
#define VS_GRAPH_NODE_SIZE(words, degree) \
	(offsetof(VsGraphNode, x) + sizeof(float) * (Size) (words) + sizeof(uint32) * (Size) (degree))
#define VsGraphNodesPerPage(words, degree) \
	((int) (VS_GRAPH_PAGE_SPACE / VS_GRAPH_NODE_SIZE(words, degree)))
#define VsGraphPageGetNode(page, words, degree, i) \
	((VsGraphNode *) (PageGetContents(page) + (Size) (i) * VS_GRAPH_NODE_SIZE(words, degree)))
#define VsGraphNodeNbrs(node, words)	((uint32 *) ((node)->x + (words)))

#define VsGraphIsNodePage(page) \
	(!PageIsNew(page) && PageGetSpecialSize(page) == MAXALIGN(sizeof(VsGraphPageOpaqueData)) && \
	 (VsGraphPageGetOpaque(page)->flags & VS_GRAPH_NODES) != 0)

/* A reference's kind_info (search.h), from the metapage. */
#define VsGraphRefDegree(ref)		((uint32) (ref)->kind_info[0])
#define VsGraphRefStorage(ref)		((uint32) ((ref)->kind_info[0] >> 32))
#define VsGraphRefEntry(ref)		((uint32) (ref)->kind_info[1])
#define VsGraphRefNodes(ref)		((ref)->kind_info[2])
#define VsGraphRefStarts(ref)		((uint32) (ref)->kind_info[3])	/* entry and seeds */

/* WITH (...) options */
typedef struct VsGraphOptions
{
	int32		vl_len_;
	int			degree;
	int			build_degree;	/* 0: 2 x degree */
	int			seeds;			/* k-means seeds; 0: 2 sqrt(rows), at most 1024 */
	int			pq_m;			/* code bytes of the compressed mode; 0: vs_graph_auto_pq_m */
	int			build_knn;		/* VsGraphBuildKnn */
} VsGraphOptions;

/* One search result: a node, its distance in rank units (search.h). */
typedef struct VsGraphHit
{
	float		d;
	uint32		node;
	int64		id;				/* heap tid as id (vs_tid_to_id), or one of the two below */
} VsGraphHit;

/* vs_graph_search_hits with unread_ids: the node page not read yet; read: the node is not live */
#define VS_GRAPH_HIT_UNREAD		(-1)
#define VS_GRAPH_HIT_GONE		(-2)

struct VsRecentPages;

/* Reads nodes of an index through the buffer manager, keeping the last page pinned. */
typedef struct VsGraphReader
{
	VsIndexRef	ref;
	Relation	rel;			/* read through the relcache (NULL: by the ref's locator) */
	struct VsRecentPages *recent;	/* pages pinned through their recent buffers, or NULL */
	uint32		dim;
	uint32		degree;
	uint32		storage;		/* VS_GRAPH_STORE_* */
	uint32		words;			/* of a node's vector (vs_store_words) */
	int			per_page;
	uint64		nnodes;			/* nodes at or above this are not read */
	Buffer		buf;
	BlockNumber blkno;
} VsGraphReader;

/* A node read: flags, tid, and (when asked) its vector and neighbours, copied. */
typedef struct VsGraphNodeCopy
{
	uint16		flags;
	ItemPointerData tid;
} VsGraphNodeCopy;

/* graphutils.c */
extern const VsIndexKind vs_graph_kind;
extern PGDLLIMPORT int vs_graph_ef;
extern PGDLLIMPORT int vs_graph_expand;
extern void vs_graph_init_page(Page page, uint16 flags);
extern void vs_graph_init_metapage(Page page, uint32 dim, vs_metric metric, uint32 degree,
								   uint32 build_degree, uint32 storage);
extern VsGraphMetaPage vs_graph_page_meta(Page page);
extern void vs_graph_read_meta(Relation index, VsGraphMetaPageData *meta);
extern int	vs_graph_starts(const VsGraphMetaPageData *meta, uint32 *starts);
extern uint32 *vs_graph_ref_starts(Relation index, const VsIndexRef *ref, int *nstarts);
extern void vs_graph_page_set_items(Page page, uint32 words, uint32 degree, int nitems);
extern void vs_graph_check_dim(int dim, uint32 degree, uint32 storage);
extern void vs_graph_check_vector_dim(uint32 index_dim, int dim, uint32 degree, uint32 storage);
extern void vs_graph_write_nbrs(Relation index, uint32 words, uint32 degree, uint32 node,
								const uint32 *nbrs);
extern bool vs_graph_link_into(Relation index, VsGraphReader *r, vs_metric metric, uint32 u,
							   uint32 node, const float *x, const uint32 *node_nbrs,
							   int nnode_nbrs, float *ux, float *tx, uint32 *unbrs, bool force);
extern void vs_graph_index_options(Relation index, uint32 *degree, uint32 *build_degree);
extern int	vs_graph_index_seeds(Relation index);
extern int	vs_graph_index_pq_m(Relation index);
extern VsGraphBuildKnn vs_graph_index_build_knn(Relation index);
extern void vs_graph_check_pq_m(int pq_m, int dim);
extern int	vs_graph_auto_pq_m(int dim);
extern bytea *vs_graph_options(Datum reloptions, bool validate);

/* graphsearch.c: reading nodes, beam search, pruning */
extern void vs_graph_reader_init(VsGraphReader *r, const VsIndexRef *ref, Relation rel,
								 uint32 dim, uint32 degree, uint32 storage, uint64 nnodes);
extern void vs_graph_reader_use_recent(VsGraphReader *r);
extern void vs_graph_reader_end(VsGraphReader *r);
extern void vs_graph_prefetch_node(const VsGraphReader *r, uint32 node, bool with_vector);
extern bool vs_graph_read_node(VsGraphReader *r, uint32 node, VsGraphNodeCopy *out, float *x,
							   uint32 *nbrs);
extern float vs_graph_distance(vs_metric metric, const float *a, const float *b, uint32 dim);
extern int	vs_graph_cmp_hit(const void *a, const void *b);
extern int	vs_graph_beam_search(VsGraphReader *r, vs_metric metric, const uint32 *starts,
								 int nstarts, const float *query, int ef, int expand,
								 VsGraphHit *out);
extern int	vs_graph_gather_nbrs(VsGraphReader *r, const uint32 *nodes, int n, uint32 *out);
extern int	vs_graph_prune_nodes(const uint32 *cands, int ncands, const uint32 *cand_nbrs,
								 int nbr_width, int degree, uint32 *out);
extern void vs_graph_range_candidates(const VsIndexRef *ref, const VsQueries *queries,
									  double radius, VsRangeConsumer consume, void *arg);

/* graphobject.c: the engine object (the worker's searches), and asking the worker */
extern void *vs_graph_load(const struct VsLoadEnv *env, void *obj, const VsIndexRef *ref,
						   Size *bytes, uint64 *generation);
extern void vs_graph_destroy_object(struct vs_context *engine, void *obj);
extern int	vs_graph_knn_object(struct vs_context *engine, void *obj, const VsKindParams *params,
								const VsQueries *queries, Size k, int64 *ids,
								float *distances, int64 *counts);
extern bool vs_graph_check_search(const struct VsRequest *req, char *why, Size whylen);
extern void vs_graph_search_hits(VsGraphReader *r, vs_metric metric, const uint32 *starts,
								 int nstarts, const float *queries, int nq, int ef, int expand,
								 bool unread_ids, VsGraphHit *out, int *counts);
extern int	vs_graph_read_hit_ids(VsGraphReader *r, VsGraphHit *hits, int i, int nh);
extern int	vs_graph_run_end(const VsGraphHit *hits, int i, int nh);

/* graphworker.c: the worker's build steps, and asking for them (CREATE INDEX) */
extern bool vs_graph_check_request(const struct VsRequest *req, char *why, Size whylen);
extern int	vs_graph_build_step(struct vs_context *engine, const struct VsRequest *req,
								const float *rows, const char *payload, char **answer,
								Size *answer_len, char *err, Size errlen);
extern void vs_graph_worker_tick(struct vs_context *engine, bool stop);
extern bool vs_graph_worker_load(const VsIndexRef *ref, uint64 build_id, const float *rows,
								 int64 n);
extern bool vs_graph_worker_knn_among(const VsIndexRef *ref, uint64 build_id, int64 total,
									  const int64 *rows, int64 nrows, const float *queries,
									  int nq, int k, int64 *ids);
extern bool vs_graph_worker_knn(const VsIndexRef *ref, uint64 build_id, int64 total,
								const float *queries, int nq, int k, int64 *ids);

/* graphbuild.c */
extern IndexBuildResult *vs_graph_build(Relation heap, Relation index, IndexInfo *indexInfo);
extern void vs_graph_buildempty(Relation index);
extern char *vs_graph_buildphasename(int64 phasenum);

/* graphinsert.c */
extern bool vs_graph_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
							Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
							IndexInfo *indexInfo);

/* graphvacuum.c */
extern IndexBulkDeleteResult *vs_graph_bulkdelete(IndexVacuumInfo *info,
												  IndexBulkDeleteResult *stats,
												  IndexBulkDeleteCallback callback,
												  void *callback_state);

/* graphscan.c */
extern IndexScanDesc vs_graph_beginscan(Relation index, int nkeys, int norderbys);
extern void vs_graph_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys,
							int norderbys);
extern bool vs_graph_gettuple(IndexScanDesc scan, ScanDirection dir);
extern int64 vs_graph_getbitmap(IndexScanDesc scan, TIDBitmap *tbm);
extern void vs_graph_endscan(IndexScanDesc scan);

/* graphbatch.c */
struct VsBatch;
extern void vs_graph_batch_knn(struct VsBatch *batch, int k);

/* graphcost.c */
extern void vs_graph_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
								  Cost *indexStartupCost, Cost *indexTotalCost,
								  Selectivity *indexSelectivity, double *indexCorrelation,
								  double *indexPages);

/* graphcheck.c: vsearch_index_check's walk (indexcheck.h) */
struct VsCheck;
extern void vs_graph_check(struct VsCheck *c);

#endif							/* VSEARCH_GRAPH_H */
