/*
 * vs_ivfpq: an inverted-file index of product-quantized residuals (IVF-PQ), with exact re-ranking.
 *
 * The build samples the table, trains a coarse quantizer (`lists` k-means centroids) and a residual
 * product quantizer (`m` sub-quantizers of 2^nbits codewords) with the engine (vs_ivfpq_train),
 * encodes every row and writes it to the inverted list of its nearest centroid.  A search ranks the
 * lists by their centroid's distance to the query, scans `vsearch.ivfpq_probes` of them with the
 * engine's asymmetric distances (vs_ivfpq_search) and re-ranks the best `vsearch.ivfpq_rerank`
 * candidates with exact distances, computed from the heap row (or from a copy of the vector kept
 * in the index, WITH (store_vectors = on)).  docs/INDEXES.md describes the behaviour.
 *
 * Layout (block 0 is the metapage; every other page carries VsIvfpqPageOpaqueData):
 *
 *   metapage        VsIvfpqMetaPageData
 *   float pages     centroids, then codebooks, each an array of rows over consecutive blocks, a
 *                   page holding whole rows only (VsIvfpqRowsPerPage; rows longer than a page,
 *                   centroids of more than VS_IVFPQ_FLOATS_PER_PAGE dimensions, run on over
 *                   the pages instead), so that a search reads each row in place in its buffer
 *                   (ivfpqpages.c) in the layout the engine's kernels read:
 *                     centroids  lists rows of dim floats
 *                     codebooks  packed for the lookup tables: dim rows of
 *                                VS_IVFPQ_TABLE_WIDTH(nbits) floats, row j * dim/m + t holding
 *                                element t of sub-quantizer j's 2^nbits codewords, zero-padded
 *                                (vs_ivfpq_create_rows, vsearch/ivfpq.h)
 *                   (version 1 packed the floats of m x 2^nbits x dim/m codebooks densely and let
 *                   rows straddle pages: such an index is refused with a hint to REINDEX)
 *   directory pages VsIvfpqListEntry[lists] over consecutive blocks
 *   list pages      one chain per list: struct-of-arrays entries
 *                       ItemPointerData tids[cap] | uint8 codes[cap][code_size] | float4 vec[cap][dim]
 *                   (vec only with store_vectors); `cap` is fixed per index (VsIvfpqLayout), so the
 *                   codes of a page are contiguous.  Pages link to the next older page of their list
 *                   (opaque->prev): the directory's `last` is the page inserts append to, `first`
 *                   the oldest.  Readers walk last -> first.
 *   pending pages   the same layout with no code: rows of an index that has no quantizer (built on
 *                   an empty or too small table); they are searched exactly.  One chain from
 *                   the metapage.
 *
 * Every page change is Generic WAL.  Changes of the entry set (insert, VACUUM) happen under the
 * metapage's exclusive lock, which also serializes them, and bump the metapage's generation.
 *
 * Files: ivfpqutils.c (the index kind, options, settings, pages), ivfpqsearch.c (reading an index
 * into memory, the worker's engine object and its searches, the candidate searches of scans and
 * batches, the quantizer of inserts and in-backend searches), ivfpqpages.c (in-backend searches
 * of the pages in place, pending entries, stored vectors), ivfpqworker.c (the build steps the GPU worker runs), ivfpqbuild.c,
 * ivfpqinsert.c, ivfpqscan.c, ivfpqbatch.c, ivfpqvacuum.c, ivfpqcost.c.  What every access method
 * shares is in amutils.h.
 */
#ifndef VSEARCH_IVFPQ_H
#define VSEARCH_IVFPQ_H

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
#include "vsearch/ivfpq.h"

#define VS_IVFPQ_KIND			2	/* the index kind's id (indexkind.h) */

#define VS_IVFPQ_MAGIC			0x56534951	/* "VSIQ" */
#define VS_IVFPQ_VERSION		2	/* 2: quantizer rows whole on their pages, codebooks packed */
#define VS_IVFPQ_PAGE_ID		0xFF92

#define VS_IVFPQ_METAPAGE_BLKNO	0

/* Page flags */
#define VS_IVFPQ_META			(1 << 0)
#define VS_IVFPQ_FLOATS			(1 << 1)	/* centroids or codebooks */
#define VS_IVFPQ_DIRECTORY		(1 << 2)
#define VS_IVFPQ_LIST			(1 << 3)
#define VS_IVFPQ_PENDING		(1 << 4)

#define VS_IVFPQ_PENDING_LIST	0xFFFFFFFF	/* opaque->list of pending pages */

/* Limits of the options. */
#define VS_IVFPQ_MAX_LISTS		65536
#define VS_IVFPQ_MAX_M			1024

/* A reference's kind_info (search.h), from the metapage. */
#define VsIvfpqRefLists(ref)		((uint32) (ref)->kind_info[0])	/* 0: no quantizer */
#define VsIvfpqRefPending(ref)		((ref)->kind_info[1])	/* pending entries */
#define VsIvfpqRefStoreVectors(ref) ((ref)->kind_info[2] != 0)

/* The search parameters (VsKindParams): the probe window of list ranks. */
typedef struct VsIvfpqSearchParams
{
	uint32		probe_offset;	/* first list rank */
	uint32		nprobe;			/* lists in the window */
	uint32		exact;			/* 1 (kNN, store_vectors): the k candidates come re-ranked from
								 * the stored vectors, with exact distances, in exact order */
} VsIvfpqSearchParams;

/* The worker's build steps (VsKindParams of a VS_OP_BUILD request, ivfpqworker.c). */
typedef enum VsIvfpqBuildStep
{
	VS_IVFPQ_TRAIN = 1,			/* the rows are the sample; answer: centroids | codebooks */
	VS_IVFPQ_ENCODE = 2			/* the rows are encoded with the payload's quantizer; answer:
								 * int32 lists[n] | uint8 codes[n x code_size] */
} VsIvfpqBuildStep;

typedef struct VsIvfpqBuildParams
{
	uint32		step;			/* VsIvfpqBuildStep */
	uint32		lists;			/* coarse centroids */
	uint32		m;				/* sub-quantizers (divides dim) */
	uint32		nbits;			/* 4 or 8 */
	uint64		seed;			/* training */
	uint64		build_id;		/* encoding: names the build (keys the worker's encoder) */
} VsIvfpqBuildParams;

/* Largest training sample sent to the worker (bytes of vectors); larger ones train in the backend. */
#define VS_IVFPQ_MAX_TRAIN_BYTES	((Size) 256 * 1024 * 1024)
/* Most rows of one encode request, and most bytes of its rows plus its quantizer. */
#define VS_IVFPQ_MAX_ENCODE_ROWS	(1 << 20)
#define VS_IVFPQ_MAX_ENCODE_BYTES	((Size) 256 * 1024 * 1024)

typedef struct VsIvfpqPageOpaqueData
{
	BlockNumber prev;			/* list/pending pages: next older page, InvalidBlockNumber at the end */
	uint32		list;			/* list pages: list number; pending: VS_IVFPQ_PENDING_LIST */
	uint16		nitems;			/* entries (list/pending), floats (float pages), lists (directory) */
	uint16		flags;
	uint16		unused;
	uint16		page_id;		/* VS_IVFPQ_PAGE_ID */
} VsIvfpqPageOpaqueData;

typedef VsIvfpqPageOpaqueData *VsIvfpqPageOpaque;

#define VsIvfpqPageGetOpaque(page) ((VsIvfpqPageOpaque) PageGetSpecialPointer(page))

#define VS_IVFPQ_PAGE_SPACE \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(VsIvfpqPageOpaqueData)))
#define VS_IVFPQ_FLOATS_PER_PAGE	((int) (VS_IVFPQ_PAGE_SPACE / sizeof(float)))
/* Whole rows of rowlen floats a quantizer page holds; 0: a row is longer than a page. */
#define VsIvfpqRowsPerPage(rowlen) \
	((Size) (rowlen) <= (Size) VS_IVFPQ_FLOATS_PER_PAGE ? \
	 VS_IVFPQ_FLOATS_PER_PAGE / (int) (rowlen) : 0)
/* Floats of a packed codebook row: 2^nbits rounded up to a multiple of 32 (the engine's tables). */
#define VS_IVFPQ_TABLE_WIDTH(nbits)	((((1 << (nbits)) + 31) / 32) * 32)

/*
 * The metapage.  `generation` changes with every change of the entry set (insert, VACUUM) and
 * starts at vs_initial_generation() (amutils.h); `build_id` keeps that first value: it names the
 * quantizer, which only a rebuild changes.
 */
typedef struct VsIvfpqMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dim;			/* 0 until the first vector (unconstrained column, empty table) */
	uint32		metric;			/* vs_metric of the operator class */
	uint32		lists;			/* coarse centroids (0 while there is no quantizer) */
	uint32		m;				/* sub-quantizers (0 while there is no quantizer) */
	uint32		nbits;			/* 4 or 8 */
	uint32		code_size;		/* bytes per code: ceil(m * nbits / 8) */
	uint32		store_vectors;	/* entries carry a float4 copy of the vector */
	uint32		trained;		/* the quantizer pages exist; otherwise rows are pending */
	uint64		generation;
	uint64		build_id;
	uint64		ntuples;		/* entries (lists + pending), dead ones not yet vacuumed included */
	uint64		npending;		/* entries in the pending chain */
	BlockNumber centroid_start;
	uint32		ncentroid_pages;
	BlockNumber codebook_start;
	uint32		ncodebook_pages;
	BlockNumber directory_start;
	uint32		ndirectory_pages;
	BlockNumber pending_first;	/* oldest pending page (InvalidBlockNumber: none) */
	BlockNumber pending_last;	/* newest pending page: inserts append here */
	uint32		empty_lists;	/* lists that had no row at build */
	uint32		unused;
	uint64		seed;			/* of the training sample and k-means */
} VsIvfpqMetaPageData;

typedef VsIvfpqMetaPageData *VsIvfpqMetaPage;

#define VsIvfpqPageGetMeta(page) ((VsIvfpqMetaPage) PageGetContents(page))

/* A directory entry. */
typedef struct VsIvfpqListEntry
{
	BlockNumber first;			/* oldest page (InvalidBlockNumber: empty list without pages) */
	BlockNumber last;			/* newest page: inserts append here */
	uint32		count;			/* entries, dead ones not yet vacuumed included */
	uint32		npages;
} VsIvfpqListEntry;

#define VS_IVFPQ_DIR_PER_PAGE	((int) (VS_IVFPQ_PAGE_SPACE / sizeof(VsIvfpqListEntry)))

/* Where the arrays of an entry page are. */
typedef struct VsIvfpqLayout
{
	int			capacity;		/* entries per page; 0 if one does not fit */
	int			code_size;
	int			vdim;			/* floats per entry (dim with store_vectors, else 0) */
	Size		code_off;
	Size		vec_off;
} VsIvfpqLayout;

#define VsIvfpqPageTids(page)	((ItemPointerData *) PageGetContents(page))
#define VsIvfpqPageCodes(page, layout)	((uint8 *) PageGetContents(page) + (layout)->code_off)
#define VsIvfpqPageVecs(page, layout)	((float *) (PageGetContents(page) + (layout)->vec_off))

#define VsIvfpqIsEntryPage(page) \
	(!PageIsNew(page) && PageGetSpecialSize(page) == MAXALIGN(sizeof(VsIvfpqPageOpaqueData)) && \
	 (VsIvfpqPageGetOpaque(page)->flags & (VS_IVFPQ_LIST | VS_IVFPQ_PENDING)) != 0)

/* WITH (...) options */
typedef struct VsIvfpqOptions
{
	int32		vl_len_;
	int			lists;			/* 0: about sqrt(rows) */
	int			m;				/* 0: by rule (ivfpqutils.c, vs_ivfpq_default_m) */
	int			nbits;
	bool		store_vectors;
} VsIvfpqOptions;

/*
 * An index read into memory (vs_ivfpq_read_index, the worker's load): the quantizer, and the
 * entries of every list (deduplicated within each list: VACUUM moving entries may show a reader
 * one twice).
 */
typedef struct VsIvfpqContents
{
	VsIvfpqMetaPageData meta;	/* read before the entries */
	float	   *centroids;		/* lists x dim (trained only) */
	float	   *codebooks;		/* m x 2^nbits x dim/m (trained only) */
	int64	   *list_start;		/* lists + 1 offsets into ids/codes */
	int64	   *ids;			/* list entries' heap tids as ids (vs_tid_to_id) */
	uint8	   *codes;			/* code_size each */
	float	   *vectors;		/* dim each, when asked for and store_vectors */
	int64		n;
} VsIvfpqContents;

/* The GPU worker's engine object of an index (ivfpqsearch.c; backends search the pages in place). */
struct vs_ivfpq;
typedef struct VsIvfpqCached
{
	VsIvfpqMetaPageData meta;
	struct vs_ivfpq *ivf;		/* NULL when untrained */
	struct vs_dataset *stored;	/* store_vectors: the stored vectors on its device */
} VsIvfpqCached;

/* ivfpqutils.c */
extern const VsIndexKind vs_ivfpq_kind;
extern void vs_ivfpq_init_page(Page page, uint16 flags, uint32 list, BlockNumber prev);
extern void vs_ivfpq_init_metapage(Page page, uint32 dim, vs_metric metric, int nbits,
								   bool store_vectors);
extern VsIvfpqMetaPage vs_ivfpq_page_meta(Page page);
extern void vs_ivfpq_read_meta(Relation index, VsIvfpqMetaPageData *meta);
extern void vs_ivfpq_layout(int code_size, int vdim, VsIvfpqLayout *layout);
extern void vs_ivfpq_meta_layout(const VsIvfpqMetaPageData *meta, bool pending,
								 VsIvfpqLayout *layout);
extern void vs_ivfpq_page_set_items(Page page, int nitems);
extern int	vs_ivfpq_default_m(int dim);
extern bytea *vs_ivfpq_options(Datum reloptions, bool validate);

/* ivfpqsearch.c: reading an index, the engine object (indexkind.h), candidate searches */
extern void vs_ivfpq_read_index(const VsIndexRef *ref, bool want_vectors, void (*progress) (void),
								VsIvfpqContents *out);
extern void *vs_ivfpq_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
						   uint64 *generation);
extern void vs_ivfpq_destroy_object(struct vs_context *engine, void *obj);
extern int	vs_ivfpq_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
						 const VsQueries *queries, Size k, int64 *ids, float *distances,
						 int64 *counts);
extern int	vs_ivfpq_range_search(struct vs_context *engine, void *obj, const VsKindParams *params,
								  const VsQueries *queries, double radius, vs_alloc_fn alloc,
								  void *alloc_arg, vs_range_result *out);
extern bool vs_ivfpq_check_search(const struct VsRequest *req, char *why, Size whylen);
extern float vs_ivfpq_radius_up(double radius);
extern void vs_ivfpq_engine_params(const VsIvfpqMetaPageData *meta, vs_ivfpq_params *params);
extern struct vs_ivfpq *vs_ivfpq_quantizer(const VsIndexRef *ref, Relation rel,
										   const VsIvfpqMetaPageData *meta);

/*
 * Candidate searches shared by the scan and the batch functions: the k smallest estimates in the
 * probe window, the pending entries, and the rows whose estimate is within a radius in the first
 * vsearch.ivfpq_probes lists plus every pending entry.
 */
extern void vs_ivfpq_search_candidates(const VsIndexRef *ref, const float *queries, int nq,
									   int probe_offset, int nprobe, int k, bool exact,
									   int64 *ids, float *dists, int64 *counts);
/* The search itself re-ranks (exact = true): store_vectors, and no pending entry, whose vector
 * only the heap holds (the index kind's exact_distances). */
extern bool vs_ivfpq_exact_rerank(const VsIndexRef *ref);
extern void vs_ivfpq_range_candidates(const VsIndexRef *ref, const VsQueries *queries,
									  double radius, VsRangeConsumer consume, void *arg);

/* ivfpqpages.c: in-backend searches over the pages in place (indexkind.h), pending entries,
 * stored vectors */
extern void vs_ivfpq_backend_knn(const VsIndexRef *ref, const VsKindParams *params,
								 const VsQueries *queries, int k, int64 *ids, float *distances,
								 int64 *counts);
extern void vs_ivfpq_backend_range(const VsIndexRef *ref, const VsKindParams *params,
								   const VsQueries *queries, double radius, VsRangeResult *out);
extern int64 *vs_ivfpq_pending_ids(const VsIndexRef *ref, int64 *n);
extern void vs_ivfpq_stored_vectors(const VsIndexRef *ref, const int64 *ids, int64 n,
									void (*fn) (void *arg, int64 pos, const float *x), void *arg);

/*
 * ivfpqworker.c: the worker's build steps, and asking for them (CREATE INDEX): training the
 * quantizer on a sample and encoding a chunk of rows in the worker; false: do it in the backend.
 */
extern bool vs_ivfpq_worker_train(const VsIndexRef *ref, const vs_ivfpq_params *params,
								  uint64 seed, const float *sample, int64 n, float *centroids,
								  float *codebooks);
extern bool vs_ivfpq_worker_encode(const VsIndexRef *ref, const vs_ivfpq_params *params,
								   uint64 build_id, const float *centroids, const float *codebooks,
								   const float *rows, int n, int32 *out_lists, uint8 *out_codes);
extern int	vs_ivfpq_build_step(struct vs_context *engine, const struct VsRequest *req,
								const float *rows, const char *payload, char **answer,
								Size *answer_len, char *err, Size errlen);
extern bool vs_ivfpq_check_request(const struct VsRequest *req, char *why, Size whylen);
extern void vs_ivfpq_worker_tick(struct vs_context *engine, bool stop);

/* ivfpqbuild.c */
extern IndexBuildResult *vs_ivfpq_build(Relation heap, Relation index, IndexInfo *indexInfo);
extern char *vs_ivfpq_buildphasename(int64 phase);
extern void vs_ivfpq_buildempty(Relation index);

/* ivfpqinsert.c */
extern bool vs_ivfpq_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
							Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
							IndexInfo *indexInfo);

/* ivfpqvacuum.c */
extern IndexBulkDeleteResult *vs_ivfpq_bulkdelete(IndexVacuumInfo *info,
												  IndexBulkDeleteResult *stats,
												  IndexBulkDeleteCallback callback,
												  void *callback_state);

/* ivfpqscan.c */
extern IndexScanDesc vs_ivfpq_beginscan(Relation index, int nkeys, int norderbys);
extern void vs_ivfpq_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys,
							int norderbys);
extern bool vs_ivfpq_gettuple(IndexScanDesc scan, ScanDirection dir);
extern int64 vs_ivfpq_getbitmap(IndexScanDesc scan, TIDBitmap *tbm);
extern void vs_ivfpq_endscan(IndexScanDesc scan);

/* ivfpqbatch.c */
struct VsBatch;
extern void vs_ivfpq_batch_knn(struct VsBatch *batch, int k);

/* settings (ivfpqutils.c) */
extern PGDLLIMPORT int vs_ivfpq_probes;
extern PGDLLIMPORT int vs_ivfpq_rerank;

/* ivfpqcost.c */
extern void vs_ivfpq_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
								  Cost *indexStartupCost, Cost *indexTotalCost,
								  Selectivity *indexSelectivity, double *indexCorrelation,
								  double *indexPages);

/* ivfpqcheck.c: vsearch_index_check's walk (indexcheck.h) */
struct VsCheck;
extern void vs_ivfpq_check(struct VsCheck *c);

#endif							/* VSEARCH_IVFPQ_H */
