/*
 * vs_sss: the Sparse Spatial Selection pivot-table index, exact range and kNN search under the
 * metrics of vs_lc's operator classes (vectors under L2 or L1, text under edit distance).  The
 * algorithm is the engine's (vsearch/sss.h, searched as a vsearch/metric.h object: on the CPU in
 * the backend, or on the GPU in the worker); this access method stores the pivots and the table in
 * pages, keeps them through inserts and VACUUM, and serves scans through vs_lc's scan code
 * (lcscan.c), engine object (lcsearch.c) and value helpers (lcutils.c).
 *
 * Layout (block 0 is the metapage; two chains of pages follow, linked by `next`):
 *
 *   metapage    page header | VsSssMetaPageData | ... | VsLcPageOpaqueData
 *   pivot page  page header | line pointers | VsSssTuple (pivots, selection order) | opaque
 *   row page    page header | line pointers | VsSssTuple (rows with their pivot distances) | opaque
 *
 * A row tuple is the heap tid and the object (float4[dim] or uint32[len] characters) followed by
 * its distances to the pivots (float4[npivots]): the pivot-distance table, a row per object.
 * Pivots are copies of objects chosen at build (rows stay rows); inserts compute their distances
 * to the existing pivots (no new pivot until REINDEX), VACUUM deletes dead rows.  Generic WAL.
 *
 * Files: sssutils.c (the kind, metapage, options, handler), ssssearch.c (the engine object,
 * searches), sssbuild.c, sssinsert.c, sssvacuum.c, ssscost.c; scans in lcscan.c.
 */
#ifndef VSEARCH_SSS_AM_H
#define VSEARCH_SSS_AM_H

#include "lc.h"
#include "vsearch/sss.h"

#define VS_SSS_KIND				5	/* the index kind's id (indexkind.h); never reused */

#define VS_SSS_MAGIC			0x56535353	/* "VSSS" */
#define VS_SSS_VERSION			1
#define VS_SSS_PAGE_ID			0xFF94

#define VS_SSS_DEFAULT_ALPHA	0.5	/* measured on wspanish (BENCHMARKS.md) */

typedef struct VsSssMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dim;			/* vectors: 0 until the first one; text: 0 */
	uint32		metric;			/* vs_metric (L2, L1) or VS_METRIC_LEVENSHTEIN */
	uint32		npivots;
	uint32		unused;
	double		alpha;
	double		diameter;		/* estimated at build */
	uint64		ntuples;
	uint64		generation;
	BlockNumber pivot_head;
	BlockNumber pivot_tail;
	BlockNumber row_head;
	BlockNumber row_tail;
} VsSssMetaPageData;

typedef VsSssMetaPageData *VsSssMetaPage;

#define VsSssPageGetMeta(page) ((VsSssMetaPage) PageGetContents(page))

typedef struct VsSssTuple
{
	ItemPointerData heap_tid;
	uint16		flags;
	uint32		len;			/* floats (vectors) or characters (text) */
	uint32		npivots;		/* pivot distances after the object (0 in pivot tuples) */
	uint32		data[FLEXIBLE_ARRAY_MEMBER];	/* object, then float4[npivots] */
} VsSssTuple;

#define VS_SSS_TUPLE_SIZE(len, np) \
	MAXALIGN(offsetof(VsSssTuple, data) + sizeof(uint32) * ((Size) (len) + (Size) (np)))
#define VsSssTupleDistances(t)	((float *) ((t)->data + (t)->len))

typedef struct VsSssOptions
{
	int32		vl_len_;
	double		alpha;
	int			max_pivots;
} VsSssOptions;

/* sssutils.c */
extern const VsIndexKind vs_sss_kind;
extern void vs_sss_init_page(Page page, uint16 flags);
extern VsSssMetaPage vs_sss_page_meta(Page page);
extern void vs_sss_read_meta(Relation index, VsSssMetaPageData *meta);
extern bytea *vs_sss_options(Datum reloptions, bool validate);
extern void vs_sss_init(void);
extern int	vs_sss_max_len(uint32 npivots);

/* ssssearch.c */
extern void *vs_sss_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
						 uint64 *generation);

/* sssbuild.c */
extern IndexBuildResult *vs_sss_ambuild(Relation heap, Relation index, IndexInfo *indexInfo);
extern void vs_sss_ambuildempty(Relation index);

/* sssinsert.c */
extern bool vs_sss_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						  Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						  IndexInfo *indexInfo);

/* sssvacuum.c */
extern IndexBulkDeleteResult *vs_sss_bulkdelete(IndexVacuumInfo *info,
												IndexBulkDeleteResult *stats,
												IndexBulkDeleteCallback callback,
												void *callback_state);

/* ssscost.c */
extern void vs_sss_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
								Cost *indexStartupCost, Cost *indexTotalCost,
								Selectivity *indexSelectivity, double *indexCorrelation,
								double *indexPages);

/* ssscheck.c: vsearch_index_check's walk (indexcheck.h) */
struct VsCheck;
extern void vs_sss_check(struct VsCheck *c);

#endif							/* VSEARCH_SSS_AM_H */
