/*
 * What every vsearch access method shares, so that a kind writes only what is its own: the
 * IndexAmRoutine built from the kind's callbacks (amutils.c), the operator class shape and its
 * validation (validate.c), page helpers, VACUUM's cleanup, the common part of the cost estimate
 * (amutils.c) and of index scans: scan state, scan keys, range quals and bitmaps (scanutils.c).
 */
#ifndef VSEARCH_AMUTILS_H
#define VSEARCH_AMUTILS_H

#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/relscan.h"
#include "nodes/pathnodes.h"
#include "nodes/tidbitmap.h"
#include "utils/selfuncs.h"

#include "indexkind.h"
#include "search.h"
#include "vector.h"

/*
 * The operator classes (extension/sql/10-search.sql): OPERATOR 1 the distance, FOR ORDER BY;
 * OPERATOR 2 the range test `<<op>> sphere`, a search operator (optional); FUNCTION 1 the metric,
 * (internal) -> int4 returning a vs_metric.
 */
#define VS_DISTANCE_STRATEGY	1
#define VS_RANGE_STRATEGY		2
#define VS_NSTRATEGIES			2
#define VS_METRIC_PROC			1
#define VS_NPROC				1

/* The IndexAmRoutine of a kind (its handler returns it). */
extern IndexAmRoutine *vs_am_routine(const VsIndexKind *kind);

/* amvalidate of every kind (validate.c). */
extern bool vs_opclass_validate(Oid opclassoid);

/* The metric of the index's operator class (its support function 1). */
extern vs_metric vs_opclass_metric(Relation index);

/* The dimension declared by the indexed column's type modifier, or 0 (vector without (n)). */
extern uint32 vs_declared_dim(Relation index);

/*
 * How an index stores its copies of vectors (vs_flat's and vs_graph's metapage `storage`): float4,
 * or IEEE binary16 for a halfvec column (binary16 holds its values exactly, in half the bytes, and
 * widening them back is exact).  0, floats, in every index built before binary16 storage existed.
 */
#define VS_STORE_F32			0
#define VS_STORE_F16			1

/* 4-byte words of a stored vector: dim floats, or dim halves padded to 4 bytes. */
static inline uint32
vs_store_words(uint32 dim, uint32 storage)
{
	return storage == VS_STORE_F16 ? (dim + 1) / 2 : dim;
}

/* How a new index of this column stores its vectors: binary16 for a halfvec column. */
extern uint32 vs_index_storage(Relation index);

/* An index's copy of a vector (vs_store_words words; the padding zeroed so that pages are
 * deterministic), and the floats back from it. */
extern void vs_store_index_vector(void *dst, const float *x, uint32 dim, uint32 storage);
extern void vs_load_index_vector(const void *src, float *x, uint32 dim, uint32 storage);

/*
 * Metapages (block 0) whose struct starts with uint32 magic and uint32 version: the contents of a
 * locked one, and a copy of an open index's; ERROR (index corrupted, with a hint to REINDEX)
 * unless it is initialized, of this access method and of this version.
 */
extern void *vs_page_meta(Page page, uint32 magic, uint32 version, const char *amname);
extern void vs_read_meta(Relation index, uint32 magic, uint32 version, const char *amname,
						 void *meta, Size size);

/* A new page at the end of the index, pinned and exclusively locked (not initialized). */
extern Buffer vs_new_buffer(Relation index, ForkNumber fork);

/*
 * The generation an index starts with: microseconds since 2000 times 4096 (good until 2140).  No
 * index changes 4096 times a microsecond, so an index built on a reused or truncated-in-place
 * relfilenode starts above anything its predecessor reached, and a cache never takes it for an
 * older state of the same index (unless the clock went back).
 */
extern uint64 vs_initial_generation(void);

/* amvacuumcleanup of every kind: without a bulk delete, the entry count from the metapage. */
extern IndexBulkDeleteResult *vs_vacuumcleanup(IndexVacuumInfo *info,
											   IndexBulkDeleteResult *stats);

/*
 * amcostestimate: what every kind's estimate starts from.  vs_cost_begin returns false, with
 * infinite costs, for a scan with neither an ORDER BY distance nor a range qual (the planner
 * offers one for `SELECT count(*)`, as an index-only scan, and for a partial index whose predicate
 * the query implies): NULL keys are not indexed, so such a scan cannot return every row, and it
 * must lose even to a seq scan that enable_seqscan = off charges disable_cost (vs_scan_keys
 * refuses it should it run).  Otherwise it sets the selectivity of the range quals and fills *c.
 */
typedef struct VsCostBase
{
	double		rows;			/* index entries (at least 1) */
	int			nranges;		/* range quals */
	bool		ordered;		/* an ORDER BY distance */
	double		selectivity;	/* of the range quals */
	double		search_factor;	/* vs_search_distance_cost: less when the GPU worker serves */
	double		seq_page_cost;
	double		random_page_cost;
	Oid			heapoid;
	AttrNumber	attnum;			/* the indexed column (0: an expression) */
	VsIndexRef	ref;			/* from the metapage */
} VsCostBase;

extern bool vs_cost_begin(PlannerInfo *root, IndexPath *path, double loop_count, VsCostBase *c,
						  Cost *indexStartupCost, Cost *indexTotalCost,
						  Selectivity *indexSelectivity, double *indexCorrelation,
						  double *indexPages);

/* ---- index scans (scanutils.c) ------------------------------------------------------------ */

/*
 * Every kind's scan opaque starts with this.  rescan resets the scan's memory context and zeroes
 * the rest of the opaque (kinds release their other resources first).
 */
struct VsRangeRows;

typedef struct VsScanBase
{
	MemoryContext cxt;			/* state of the current rescan */
	Size		size;			/* of the whole opaque */
	bool		started;
	bool		done;			/* nothing (more) to return */
	VsIndexRef	ref;
	struct VsRangeRows *rows;	/* the rows of the range quals (ended by rescan and end) */
} VsScanBase;

extern IndexScanDesc vs_scan_begin(Relation index, int nkeys, int norderbys, Size opaque_size);
extern void vs_scan_rescan(IndexScanDesc scan, ScanKey keys, ScanKey orderbys);
extern void vs_scan_end(IndexScanDesc scan);

/*
 * Marks the scan started (its first amgettuple or amgetbitmap since the last rescan) and counts
 * it in the index's statistics (pg_stat_user_indexes.idx_scan), as btree counts its scans; the
 * rows returned (idx_tup_read) are counted by PostgreSQL's index_getnext_tid and index_getbitmap.
 */
extern void vs_scan_started(IndexScanDesc scan);

/*
 * The scan keys as floats (in the scan's context): range quals (centers and radii) and ORDER BY
 * query vectors.  Reads the index's reference into the base first.  A NULL key (or a sphere with a
 * NULL part) matches no row: empty is set.  Invalid radii and query vectors of another dimension
 * are ERRORs, and so is a scan with no key at all (vs_scan_require_keys).
 */
typedef struct VsScanKeys
{
	bool		empty;			/* no row can match, or the index never held a vector */
	int			nranges;
	float	  **centers;
	double	   *radii;
	int			norderbys;
	float	  **queries;
} VsScanKeys;

extern void vs_scan_keys(IndexScanDesc scan, VsScanKeys *keys);

/*
 * ERROR (0A000) for a scan with neither a range qual nor an ORDER BY distance: a vsearch index
 * holds no entry for a NULL key, so it cannot answer "every row" (the cost estimate keeps the
 * planner from choosing such a scan, index-only scans included).
 */
extern void vs_scan_require_keys(IndexScanDesc scan);

/*
 * The rows found by every range qual (the kind's range_candidates, one search per qual), in
 * ascending id order, each once.  They are never held whole: each qual's chunks go into a
 * tuplesort of its own (work_mem, then temporary files), and the rows are read back as the merge
 * of the sorted quals.  vs_scan_range_rows searches the quals of keys and sets base->rows (the
 * rows in the scan's context); a kind with queries of its own adds each qual with
 * vs_range_rows_add.  vs_range_rows_next returns the next row (false at the end);
 * vs_range_rows_array reads them all into memory (an ORDER BY scan with range quals, whose kNN
 * rounds hold as many rows anyway).
 */
typedef struct VsRangeRows VsRangeRows;

extern VsRangeRows *vs_range_rows_begin(VsScanBase *base, int nquals);
extern void vs_range_rows_add(VsRangeRows *rows, const VsQueries *center, double radius);
extern bool vs_range_rows_next(VsRangeRows *rows, int64 *id);
extern int64 *vs_range_rows_array(VsRangeRows *rows, int64 *n);
extern void vs_range_rows_end(VsRangeRows *rows);
extern void vs_scan_range_rows(VsScanBase *base, const VsScanKeys *keys);

/* Adds the rows to a bitmap (all of them: recheck says whether the executor checks); returns how
 * many. */
extern int64 vs_scan_bitmap(TIDBitmap *tbm, VsRangeRows *rows, bool recheck);


#endif							/* VSEARCH_AMUTILS_H */
