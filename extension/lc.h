/*
 * vs_lc: the List of Clusters index, exact range and kNN search under any metric the operator
 * class names: vectors under L2 or L1, text under edit distance (textdist.h).  The algorithm is
 * the engine's (vsearch/lc.h: build, range, kNN on host arrays; vsearch/metric.h: the object the
 * searches run on, on the CPU or the GPU); this access method stores the list in pages, keeps it
 * through inserts and VACUUM, and serves scans through the search layer: in the GPU worker when it
 * serves, else on the CPU in the backend (the page order is the one the device matrices copy).
 *
 * Layout (block 0 is the metapage; two chains of pages follow, linked by `next`):
 *
 *   metapage     page header | VsLcMetaPageData | ... | VsLcPageOpaqueData
 *   center page  page header | line pointers | VsLcTuple (centers, creation order) | opaque
 *   bucket page  page header | line pointers | VsLcTuple (members, bucket after bucket) | opaque
 *
 * The build writes every center page first (centers with their covering radii, in creation
 * order), then every bucket back to back in creation order.  A tuple is the heap tid, its cluster
 * (a center's own number, or the bucket it belongs to), a center's covering radius, and the object:
 * dim float4 (vectors) or len uint32 characters (text: pg_wchar, the code point in UTF-8).
 *
 * Inserts (lcinsert.c) keep the invariant the search needs (an object at distance < r_c of center
 * c is in c's bucket or an earlier one): a new row goes into the bucket of the first center whose
 * ball (d <= r_c) holds it; else into the last cluster while it has fewer than bucket_size members
 * (its radius grows: no later cluster exists); else it becomes a new center with radius 0.
 * VACUUM (lcvacuum.c) removes dead members; a dead center stays as a routing object flagged
 * VS_LC_DEAD and is never reported.  Every page change is Generic WAL.
 *
 * Files: lcutils.c (the kind, metapage, options, handler), lcsearch.c (the engine object from the
 * pages, searches), lcbuild.c, metricbuild.c and metricworker.c (what vs_sss's build shares: rows,
 * page chains, the build steps of the GPU worker), lcinsert.c, lcvacuum.c, lcscan.c, lcbatch.c (the
 * text batch functions), lccost.c.
 */
#ifndef VSEARCH_LC_AM_H
#define VSEARCH_LC_AM_H

#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "storage/bufpage.h"
#include "utils/relcache.h"

#include "amutils.h"
#include "search.h"
#include "textdist.h"
#include "vsearch/lc.h"
#include "vsearch/metric.h"

#define VS_LC_KIND				4	/* the index kind's id (indexkind.h); never reused */

#define VS_LC_MAGIC				0x56534C43	/* "VSLC" */
#define VS_LC_VERSION			1
#define VS_LC_PAGE_ID			0xFF93

#define VS_LC_METAPAGE_BLKNO	0

#define VS_LC_META				(1 << 0)
#define VS_LC_CENTERS			(1 << 1)
#define VS_LC_BUCKETS			(1 << 2)

#define VS_LC_DEFAULT_BUCKET_TEXT	32	/* Barrientos et al.: 32 for words, 64 for vectors */
#define VS_LC_DEFAULT_BUCKET_VECTOR 64
#define VS_LC_MAX_BUCKET		100000

typedef struct VsLcPageOpaqueData
{
	BlockNumber next;			/* next page of the chain, InvalidBlockNumber at the end */
	uint16		flags;
	uint16		page_id;		/* VS_LC_PAGE_ID */
} VsLcPageOpaqueData;

typedef VsLcPageOpaqueData *VsLcPageOpaque;

#define VsLcPageGetOpaque(page) ((VsLcPageOpaque) PageGetSpecialPointer(page))

typedef struct VsLcMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dim;			/* vectors: 0 until the first one; text: 0 */
	uint32		metric;			/* vs_metric (L2, L1) or VS_METRIC_LEVENSHTEIN */
	uint32		bucket_size;
	uint32		ncenters;
	uint64		ntuples;		/* index entries (centers whose row died not counted after VACUUM) */
	uint64		generation;
	BlockNumber center_head;	/* chains: InvalidBlockNumber when empty */
	BlockNumber center_tail;
	BlockNumber bucket_head;
	BlockNumber bucket_tail;
	uint32		last_count;		/* members of the last cluster (inserts fill it up to bucket_size) */
	uint32		unused;
	uint64		seed;			/* of the first center */
} VsLcMetaPageData;

typedef VsLcMetaPageData *VsLcMetaPage;

#define VsLcPageGetMeta(page) ((VsLcMetaPage) PageGetContents(page))

#define VS_LC_DEAD				(1 << 0)	/* a center whose row was deleted: routes, never reported */

typedef struct VsLcTuple
{
	ItemPointerData heap_tid;
	uint16		flags;
	uint32		cluster;
	uint32		len;			/* floats (vectors) or characters (text) */
	double		radius;			/* centers: covering radius */
	uint32		data[FLEXIBLE_ARRAY_MEMBER];	/* float4[len] or uint32[len] */
} VsLcTuple;

#define VS_LC_TUPLE_SIZE(len)	MAXALIGN(offsetof(VsLcTuple, data) + sizeof(uint32) * (Size) (len))
/* The longest object a page holds: 2026 floats or characters with 8 kB pages. */
#define VS_LC_MAX_LEN \
	((int) ((BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - sizeof(ItemIdData) - \
			 MAXALIGN(sizeof(VsLcPageOpaqueData)) - MAXALIGN(offsetof(VsLcTuple, data))) / sizeof(uint32)))

typedef struct VsLcOptions
{
	int32		vl_len_;
	int			bucket_size;	/* 0: the default of the data (32 text, 64 vectors) */
	int			seed;
} VsLcOptions;

/* An object to index or search: a vector or the characters of a text. */
typedef struct VsLcValue
{
	const void *data;			/* float4[len] or uint32[len] */
	int			len;
} VsLcValue;

/* The engine object of a vs_lc or vs_sss index (lcsearch.c): the engine's metric index. */
typedef struct VsMetricObject
{
	bool		text;
	vs_metric	metric;			/* L2, L1 or VS_METRIC_LEVENSHTEIN */
	uint32		dim;
	vs_metric_index *index;		/* in the load's engine context */
} VsMetricObject;

/* Creates the engine object of a kind's arrays (a vs_lc, a vs_sss). */
typedef vs_status (*VsMetricCreate) (struct vs_context *engine, const void *arrays,
									 vs_metric_index **out);

/* lcutils.c */
extern const VsIndexKind vs_lc_kind;
extern void vs_lc_init_page(Page page, uint16 flags);
extern VsLcMetaPage vs_lc_page_meta(Page page);
extern void vs_lc_read_meta(Relation index, VsLcMetaPageData *meta);
extern bytea *vs_lc_options(Datum reloptions, bool validate);
extern void vs_lc_init(void);
extern vs_metric vs_lc_opclass_metric(Relation index);
extern bool vs_lc_is_text(Relation index);
extern VsLcValue vs_lc_value(Datum datum, bool is_text, uint32 *dim, const char *what);
extern double vs_lc_distance(vs_metric metric, uint32 dim, VsLcValue a, VsLcValue b);
extern VsLcValue vs_lc_tuple_value(const VsLcTuple *t);
extern char *vs_lc_phasename(int64 phase);

/* lccheck.c: vsearch_index_check's walk (indexcheck.h), and what vs_sss's shares */
struct VsCheck;
typedef void (*VsLcCheckVisit) (struct VsCheck *c, BlockNumber blkno, OffsetNumber off,
								void *item, Size size, void *arg);
extern void vs_lc_check(struct VsCheck *c);
extern void vs_lc_check_chain(struct VsCheck *c, BlockNumber head, BlockNumber tail,
							  uint16 flags, uint16 page_id, const char *what, Size min_size,
							  VsLcCheckVisit visit, void *arg);
extern void vs_lc_check_object(struct VsCheck *c, BlockNumber blkno, bool text, uint32 dim,
							   const uint32 *data, uint32 len, int max_len);

/* lcsearch.c: vs_lc's load, and the engine object and searches of vs_lc and vs_sss */
extern void *vs_lc_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
						uint64 *generation);
extern VsMetricObject *vs_metric_object(const VsLoadEnv *env, const VsIndexRef *ref, bool text,
										vs_metric metric, uint32 dim, VsMetricCreate create,
										const void *arrays, Size bytes);
extern void vs_metric_destroy(struct vs_context *engine, void *obj);
extern int	vs_metric_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
						  const VsQueries *queries, Size k, int64 *ids, float *distances,
						  int64 *counts);
extern int	vs_metric_range(struct vs_context *engine, void *obj, const VsKindParams *params,
							const VsQueries *queries, double radius, vs_alloc_fn alloc,
							void *alloc_arg, vs_range_result *out);
extern bool vs_metric_check_request(const struct VsRequest *req, char *why, Size whylen);

/* metricbuild.c: what the builds of vs_lc and vs_sss share */
typedef struct VsMetricBuild
{
	Relation	index;
	const char *name;			/* the access method's, for messages */
	bool		text;
	uint32		dim;
	/* the rows, in heap order */
	Size		n;
	Size		cap;
	int64	   *ids;
	uint32	   *values;			/* floats or characters, back to back */
	Size		nvalues;
	Size		capvalues;
	uint64	   *offsets;		/* n + 1 */
	MemoryContext tmpcxt;
	/* the chain being written */
	Page		page;
	uint16		page_id;
	uint16		page_flags;
	BlockNumber head;
	BlockNumber tail;
} VsMetricBuild;

typedef void (*VsMetricInitMeta) (Page page, Relation index, vs_metric metric, uint32 dim);

extern void vs_metric_init_page(Page page, uint16 flags, uint16 page_id);
extern void vs_metric_build_metapage(Relation index, VsMetricInitMeta init_metapage,
									 vs_metric metric, uint32 dim);
extern double vs_metric_build_rows(VsMetricBuild *st, Relation heap, Relation index,
								   IndexInfo *indexInfo);
extern vs_mspace vs_metric_build_space(const VsMetricBuild *st, vs_metric metric);
extern int	vs_metric_build_tick(void *arg, size_t done);
extern void vs_metric_build_chain(VsMetricBuild *st, uint16 flags);
extern void vs_metric_build_add(VsMetricBuild *st, Item tuple, Size size);
extern void vs_metric_build_end_chain(VsMetricBuild *st);
extern void vs_metric_buildempty(Relation index, VsMetricInitMeta init_metapage);

/*
 * metricworker.c: the builds of vs_lc and vs_sss in the GPU worker (VS_OP_BUILD steps, one
 * request each with all the rows; the file's comment gives the answers' layout), and asking for
 * them from CREATE INDEX.  The vs_metric_worker_* calls return false when the worker does not
 * serve the build (the backend builds on its CPU), with the host functions' outputs otherwise.
 */
typedef enum VsMetricBuildStep
{
	VS_METRIC_BUILD_LC = 1,
	VS_METRIC_SELECT_SSS = 2,
	VS_METRIC_TABLE_SSS = 3
} VsMetricBuildStep;

typedef struct VsMetricBuildParams
{
	uint32		step;			/* VsMetricBuildStep */
	uint32		bucket_size;	/* LC */
	uint64		seed;			/* LC */
	double		alpha;			/* SSS selection */
	uint32		max_pivots;		/* SSS selection */
	uint32		npivots;		/* SSS table: the payload's pivot positions */
} VsMetricBuildParams;

/* Most bytes of rows one build step carries (larger builds run in the backend). */
#define VS_METRIC_MAX_BUILD_BYTES	((uint64) 1 << 30)

extern bool vs_metric_check_build(const struct VsRequest *req, char *why, Size whylen);
extern int	vs_metric_build_step(struct vs_context *engine, const struct VsRequest *req,
								 const float *rows, const char *payload, char **answer,
								 Size *answer_len, char *err, Size errlen);
extern bool vs_metric_worker_lc(const VsMetricBuild *st, vs_metric metric, uint32 bucket_size,
								uint64 seed, size_t *centers, size_t *ncenters, size_t *members,
								size_t *bucket_offsets, double *radii);
extern bool vs_metric_worker_select_sss(const VsMetricBuild *st, vs_metric metric, double alpha,
										uint32 max_pivots, size_t *pivots, size_t *npivots,
										double *diameter);
extern bool vs_metric_worker_table_sss(const VsMetricBuild *st, vs_metric metric,
									   const size_t *pivots, size_t npivots, float *table);

/* lcbuild.c */
extern IndexBuildResult *vs_lc_ambuild(Relation heap, Relation index, IndexInfo *indexInfo);
extern void vs_lc_ambuildempty(Relation index);
extern void vs_lc_init_metapage(Page page, Relation index, vs_metric metric, uint32 dim);

/* lcinsert.c */
extern bool vs_lc_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						 Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						 IndexInfo *indexInfo);

/* lcvacuum.c */
extern IndexBulkDeleteResult *vs_lc_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
											   IndexBulkDeleteCallback callback,
											   void *callback_state);

/* lcscan.c: the scans of vs_lc and vs_sss, through the search layer */
extern IndexScanDesc vs_metric_beginscan(Relation index, int nkeys, int norderbys);
extern bool vs_metric_gettuple(IndexScanDesc scan, ScanDirection dir);
extern int64 vs_metric_getbitmap(IndexScanDesc scan, TIDBitmap *tbm);
extern void vs_metric_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys,
							 int norderbys);

/* One query as the search layer takes it (q: a vector of the index's dimension, or characters). */
extern VsQueries vs_metric_query(bool text, VsLcValue q, uint64 *offsets);

/* lccost.c */
extern void vs_lc_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
							   Cost *indexStartupCost, Cost *indexTotalCost,
							   Selectivity *indexSelectivity, double *indexCorrelation,
							   double *indexPages);

#endif							/* VSEARCH_LC_AM_H */
