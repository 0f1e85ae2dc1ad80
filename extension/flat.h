/*
 * vs_flat: the exact ("flat") vector index.
 *
 * The index is a packed copy of the indexed vectors with their heap tids, one metapage plus data
 * pages, and every search reads all of it through the search layer (search.h): the engine
 * computes every distance, on the GPU worker or on the CPU in this backend.  It is exact, cheap to
 * maintain, and what the approximate index types are measured against.
 *
 * Layout (block 0 is the metapage, data pages follow):
 *
 *   metapage     page header | VsFlatMetaPageData | ... | VsFlatPageOpaqueData
 *   data page    page header | VsFlatItem[nitems] | free | VsFlatPageOpaqueData
 *   sketch page  page header | uint16 counts[group] | sketches[group * per_page] | VsFlatPageOpaqueData
 *
 * Sketches (an index built WITH (sketches = on), the default, whose rows are long enough): every
 * data page belongs to a group of `sketch_group` (metapage) pages whose sketch page holds, for
 * every item of the group's pages, the row's sketch (vsearch/rowscan.h: 8-bit codes, a quarter of
 * a float row) at slot (page in group) * per_page + item, and each page's item count.  The pages
 * come in runs: VS_FLAT_SKETCH_RUN sketch pages together, then their groups' data pages in order,
 * so that a search reading only the sketch pages (flatpages.c) reads 64 kB at a time and a new
 * backend's first touch maps 8 of them at once.  A run's later sketch pages stay all zeros (not
 * WAL-logged) until their group's first page is written, in the same record.  The sketch page is
 * locked before its group's data pages by everyone (inserts, VACUUM, searches) and changes in the
 * same WAL record as they do, so under its lock the two agree.
 *
 * A data item is the heap tid followed by the vector's float4 elements, or, in an index of a
 * halfvec column built since binary16 storage exists (metapage `storage`), its binary16 elements
 * (half the bytes; an index built before stores floats and still works); items have a fixed size
 * (dim is fixed per index), so a page is an array and pd_lower marks its end (Generic WAL then
 * logs only the used part of the page).  Inserts append to the last data page or add a page;
 * VACUUM compacts each page in place, so items never move between pages.  NULL vectors are not
 * indexed.  Every page change is Generic WAL (GenericXLog*), including the build.
 *
 * Files: flatutils.c (the index kind, metapage, options), flatsearch.c (reading the items, the
 * engine object the GPU worker searches), flatpages.c (searches in a backend, over the pages in
 * shared buffers), flatbuild.c, flatinsert.c, flatscan.c, flatvacuum.c, flatcost.c.  What every access method shares is in amutils.h.
 */
#ifndef VSEARCH_FLAT_H
#define VSEARCH_FLAT_H

#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/itup.h"
#include "nodes/execnodes.h"
#include "nodes/pathnodes.h"
#include "storage/buf.h"
#include "storage/bufpage.h"
#include "common/relpath.h"
#include "utils/relcache.h"

#include "amutils.h"
#include "search.h"
#include "vector.h"
#include "vsearch/rowscan.h"

#define VS_FLAT_KIND			1	/* the index kind's id (indexkind.h) */

#define VS_FLAT_MAGIC			0x56534654	/* "VSFT" */
#define VS_FLAT_VERSION			1
#define VS_FLAT_PAGE_ID			0xFF91	/* last 2 bytes of every page, for tools */

#define VS_FLAT_METAPAGE_BLKNO	0
#define VS_FLAT_FIRST_DATA_BLKNO 1

/* Page flags */
#define VS_FLAT_META			(1 << 0)
#define VS_FLAT_DATA			(1 << 1)
#define VS_FLAT_SKETCH			(1 << 2)

/* At the end of every page (special space). */
typedef struct VsFlatPageOpaqueData
{
	uint16		nitems;			/* data page: items on the page */
	uint16		flags;			/* VS_FLAT_META or VS_FLAT_DATA */
	uint16		unused;
	uint16		page_id;		/* VS_FLAT_PAGE_ID */
} VsFlatPageOpaqueData;

typedef VsFlatPageOpaqueData *VsFlatPageOpaque;

#define VsFlatPageGetOpaque(page) ((VsFlatPageOpaque) PageGetSpecialPointer(page))

/*
 * The metapage.  `generation` changes with every change of the index's vector set (insert,
 * VACUUM removing rows); it starts at the build time in microseconds times 4096, so that a
 * relfilenode reused by a later index (after DROP and OID wraparound, or TRUNCATE in the creating
 * transaction) never looks like an older state of the same index to a cache.  `epoch` changes
 * when items move (VACUUM compacting pages) or the index is built; while it stays, items only get
 * appended (to the last page or new pages), so a cache can catch up by reading what follows the
 * last item it read.
 */
typedef struct VsFlatMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		dim;			/* 0 until the first vector arrives (unconstrained column) */
	uint32		metric;			/* vs_metric of the operator class */
	uint64		ntuples;		/* index entries, dead ones not yet vacuumed included */
	uint64		generation;
	BlockNumber last_block;		/* last data page; VS_FLAT_METAPAGE_BLKNO if none */
	uint32		storage;		/* VS_STORE_F32 or _F16 (0 in every index built before) */
	double		unused_norms[2];	/* version 1 kept norm bounds here; nothing reads them */
	uint64		epoch;			/* starts as the first generation; VACUUM removing items bumps it */
	uint32		sketch_group;	/* data pages per sketch page; 0: no sketch pages (set with dim) */
} VsFlatMetaPageData;

typedef VsFlatMetaPageData *VsFlatMetaPage;

#define VsFlatPageGetMeta(page) ((VsFlatMetaPage) PageGetContents(page))

/* The page geometry below is in 4-byte words of a row (vs_store_words, amutils.h). */

/* A data item: heap tid + float4[dim] (or binary16[dim], padded to 4 bytes), fixed size per
 * index. */
typedef struct VsFlatItem
{
	ItemPointerData heap_tid;
	uint16		unused;
	float		x[FLEXIBLE_ARRAY_MEMBER];	/* binary16 rows: uint16 values */
} VsFlatItem;

/* words: vs_store_words */
#define VS_FLAT_ITEM_SIZE(words)	(offsetof(VsFlatItem, x) + sizeof(float) * (Size) (words))
#define VS_FLAT_PAGE_SPACE \
	(BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - MAXALIGN(sizeof(VsFlatPageOpaqueData)))
/* The most 4-byte words of a row that fit on a page: 2038 with 8 kB pages. */
#define VS_FLAT_MAX_WORDS		((int) ((VS_FLAT_PAGE_SPACE - offsetof(VsFlatItem, x)) / sizeof(float)))
#define VsFlatItemsPerPage(words)	((int) (VS_FLAT_PAGE_SPACE / VS_FLAT_ITEM_SIZE(words)))
#define VsFlatPageGetItem(page, words, i) \
	((VsFlatItem *) (PageGetContents(page) + (Size) (i) * VS_FLAT_ITEM_SIZE(words)))

/* Sketch pages (sketch_group > 0): the counts, then the sketches (vs_row_sketch_bytes each). */
#define VsFlatSketchCounts(page)	((uint16 *) PageGetContents(page))
#define VsFlatSketchAt(page, group, sketch_bytes, slot) \
	(PageGetContents(page) + MAXALIGN(sizeof(uint16) * (group)) + (Size) (slot) * (sketch_bytes))
/* Sketch pages that lie together, before the data pages of their groups (flat.h's layout). */
#define VS_FLAT_SKETCH_RUN		8

/* Blocks of a run of sketch pages with their groups' data pages. */
static inline BlockNumber
vs_flat_sketch_period(uint32 group)
{
	return VS_FLAT_SKETCH_RUN * (group + 1);
}

/* Is block blkno (>= 1) a sketch page of an index of this sketch_group (> 0)? */
static inline bool
vs_flat_is_sketch_block(uint32 group, BlockNumber blkno)
{
	return group > 0 && (blkno - 1) % vs_flat_sketch_period(group) < VS_FLAT_SKETCH_RUN;
}

/* The sketch page of data block blkno. */
static inline BlockNumber
vs_flat_sketch_block_of(uint32 group, BlockNumber blkno)
{
	BlockNumber r = (blkno - 1) % vs_flat_sketch_period(group);

	return blkno - r + (r - VS_FLAT_SKETCH_RUN) / group;
}

/* Data block blkno's place in its group (from 0). */
static inline int
vs_flat_group_page(uint32 group, BlockNumber blkno)
{
	return (int) (((blkno - 1) % vs_flat_sketch_period(group) - VS_FLAT_SKETCH_RUN) % group);
}

/* The block of sketch page number s (0, 1, ... in the order of their groups). */
static inline BlockNumber
vs_flat_sketch_block(uint32 group, uint64 s)
{
	return (BlockNumber) (1 + (s / VS_FLAT_SKETCH_RUN) * vs_flat_sketch_period(group) +
						  s % VS_FLAT_SKETCH_RUN);
}

/* The first data block of sketch page number s's group. */
static inline BlockNumber
vs_flat_group_first_block(uint32 group, uint64 s)
{
	return (BlockNumber) (1 + (s / VS_FLAT_SKETCH_RUN) * vs_flat_sketch_period(group) +
						  VS_FLAT_SKETCH_RUN + (s % VS_FLAT_SKETCH_RUN) * group);
}

/* Is this an initialized data page of a vs_flat index? */
#define VsFlatIsDataPage(page) \
	(!PageIsNew(page) && PageGetSpecialSize(page) == MAXALIGN(sizeof(VsFlatPageOpaqueData)) && \
	 (VsFlatPageGetOpaque(page)->flags & VS_FLAT_DATA) != 0)

/*
 * Where a read of the items stopped: the metapage state it started from and the last item it read.
 * Until the metapage's `epoch` changes, everything after that item is new.
 */
typedef struct VsFlatMark
{
	uint64		generation;		/* metapage generation before the pages were read */
	uint64		epoch;
	BlockNumber block;			/* last data page read (VS_FLAT_METAPAGE_BLKNO: none) */
	int			nitems;			/* items read on it */
	ItemPointerData last_tid;	/* heap tid of the last of them (checked before resuming) */
} VsFlatMark;

/* flatutils.c */
extern const VsIndexKind vs_flat_kind;
extern void vs_flat_init_page(Page page, uint16 flags);
extern void vs_flat_init_metapage(Page page, uint32 dim, vs_metric metric, uint32 storage);
extern void vs_flat_read_meta(Relation index, VsFlatMetaPageData *meta);
extern VsFlatMetaPage vs_flat_page_meta(Page page);
extern void vs_flat_page_set_items(Page page, uint32 words, int nitems);
extern void vs_flat_store_row(VsFlatItem *item, const float *x, uint32 dim, uint32 storage);
extern void vs_flat_load_row(const VsFlatItem *item, float *x, uint32 dim, uint32 storage);
extern uint32 vs_flat_sketch_group(uint32 dim, uint32 storage);
extern uint32 vs_flat_index_sketch_group(Relation index, uint32 dim, uint32 storage);
extern void vs_flat_store_sketch(Page sketch_page, uint32 group, uint32 dim, int slot,
								 const float *x);
extern int	vs_flat_max_dim(uint32 storage);
extern void vs_flat_check_dim(int dim, uint32 storage);
extern void vs_flat_check_vector_dim(uint32 index_dim, int dim, uint32 storage);
extern bytea *vs_flat_options(Datum reloptions, bool validate);

/* flatsearch.c: the items, the engine object (indexkind.h) and its searches */
typedef void (*VsFlatConsumer) (void *arg, const float *vectors, const int64 *ids, size_t n);
extern bool vs_flat_read_items(const VsIndexRef *ref, const VsFlatMark *from, VsFlatMark *to,
							   VsFlatConsumer consume, void *arg);
extern void *vs_flat_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
						  uint64 *generation);
extern void vs_flat_destroy(struct vs_context *engine, void *obj);
extern int	vs_flat_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
						const VsQueries *queries, Size k, int64 *ids, float *distances,
						int64 *counts);
extern int	vs_flat_range(struct vs_context *engine, void *obj, const VsKindParams *params,
						  const VsQueries *queries, double radius, vs_alloc_fn alloc,
						  void *alloc_arg, vs_range_result *out);
extern bool vs_flat_check_request(const struct VsRequest *req, char *why, Size whylen);

/* flatpages.c: searches in this backend over the pages in shared buffers (indexkind.h); whether
 * an index of this many pages is kept in shared buffers by them (at most half of the pool) */
extern bool vs_flat_stays_resident(double pages);
extern void vs_flat_backend_knn(const VsIndexRef *ref, const VsKindParams *params,
								const VsQueries *queries, int k, int64 *ids, float *distances,
								int64 *counts);
extern void vs_flat_backend_range(const VsIndexRef *ref, const VsKindParams *params,
								  const VsQueries *queries, double radius, VsRangeResult *out);

/* flatbuild.c */
extern IndexBuildResult *vs_flat_build(Relation heap, Relation index, IndexInfo *indexInfo);
extern void vs_flat_buildempty(Relation index);

/* flatinsert.c */
extern bool vs_flat_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
						   Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
						   IndexInfo *indexInfo);

/* flatvacuum.c */
extern IndexBulkDeleteResult *vs_flat_bulkdelete(IndexVacuumInfo *info,
												 IndexBulkDeleteResult *stats,
												 IndexBulkDeleteCallback callback,
												 void *callback_state);

/* flatscan.c */
extern IndexScanDesc vs_flat_beginscan(Relation index, int nkeys, int norderbys);
extern void vs_flat_rescan(IndexScanDesc scan, ScanKey keys, int nkeys, ScanKey orderbys,
						   int norderbys);
extern void vs_flat_endscan(IndexScanDesc scan);
extern bool vs_flat_gettuple(IndexScanDesc scan, ScanDirection dir);
extern int64 vs_flat_getbitmap(IndexScanDesc scan, TIDBitmap *tbm);

/* flatcost.c */
extern void vs_flat_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
								 Cost *indexStartupCost, Cost *indexTotalCost,
								 Selectivity *indexSelectivity, double *indexCorrelation,
								 double *indexPages);

/* flatcheck.c: vsearch_index_check's walk (indexcheck.h) */
struct VsCheck;
extern void vs_flat_check(struct VsCheck *c);

#endif							/* VSEARCH_FLAT_H */
