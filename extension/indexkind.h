/*
 * Index kinds: one table of operations per vsearch access method.
 *
 * The code that serves searches -- the search layer (search.c), the batch functions (batch.c), the
 * GPU worker (worker_*.c) and its client -- knows nothing of any particular index: it reaches what
 * is an index's own only through its kind's operations below.  A new access method writes its own
 * files (pages, build, insert, vacuum, scan, cost, its engine object) and adds one line to the
 * table in indexkind.c; docs/ARCHITECTURE.md ("Adding an index kind") walks through it.
 *
 * A kind's engine object is what the engine searches (a dataset, an IVF-PQ object, ...), loaded
 * from the index's pages by the kind's own `load`, in a backend (CPU engine context) and in the GPU
 * worker (its device context) alike: both processes search the same object built by the same code.
 */
#ifndef VSEARCH_INDEXKIND_H
#define VSEARCH_INDEXKIND_H

#include "postgres.h"

#include "access/amapi.h"
#include "utils/rel.h"

#include "search.h"
#include "vsearch/engine.h"

struct VsRequest;
struct VsBatch;
struct VsCheck;

/*
 * What an object load may use.  In a backend: the CPU engine, no limit, no eviction.  In the
 * worker: its device context, the cache's limit, and eviction of other cached objects.
 */
typedef struct VsLoadEnv
{
	struct vs_context *engine;	/* the context the object lives in */
	MemoryContext cxt;			/* for the object's host arrays; lives as long as the object */
	bool		in_worker;		/* load only what the worker's searches use */
	Size		limit;			/* most bytes the object may take; 0: no limit */
	/* evict other cached objects until `bytes` fit beside them; false: nothing left to evict */
	bool		(*reserve) (void *arg, Size bytes);
	/* evict one other cached object (after VS_OUT_OF_MEMORY); false: nothing left */
	bool		(*evict_one) (void *arg);
	void	   *arg;
	void		(*progress) (void); /* called between chunks of a read; NULL: none */
} VsLoadEnv;

/* ERROR for a load that would take more than env->limit bytes (objcache.c). */
extern void vs_load_too_large(const VsLoadEnv *env, Oid indexrelid, Size bytes)
			pg_attribute_noreturn();

/* ERROR for an engine call of a load that returned rc (not VS_OK), with the engine's reason. */
extern void vs_load_failed(const VsLoadEnv *env, Oid indexrelid, int rc) pg_attribute_noreturn();

typedef struct VsIndexKind
{
	uint32		id;				/* names the kind in worker requests; never reused */
	const char *name;			/* its access method's name */
	uint16		page_id;		/* the last 2 bytes of its pages; distinct per kind, never reused */

	/*
	 * The access method's own callbacks (amutils.c builds the IndexAmRoutine around them; vacuum
	 * cleanup, validation and column properties are the same for every kind).
	 */
	bool		uses_maintenance_work_mem;
	ambuild_function build;
	ambuildempty_function buildempty;
	aminsert_function insert;
	ambulkdelete_function bulkdelete;
	amcostestimate_function costestimate;	/* the planner's cost of a search */
	amoptions_function options;
	ambeginscan_function beginscan;
	amrescan_function rescan;
	amgettuple_function gettuple;
	amgetbitmap_function getbitmap;
	amendscan_function endscan;
	ambuildphasename_function buildphasename;	/* CREATE INDEX progress phases; NULL: none */

	/* From _PG_init in every process: reloptions, settings.  NULL: nothing to do. */
	void		(*init) (void);

	/* A reference to an open, locked index of this kind, from its metapage. */
	void		(*read_ref) (Relation index, VsIndexRef *ref);

	/*
	 * The engine object.  load builds it from the pages (obj NULL), or brings obj up to date in
	 * place; it returns the object, or NULL when obj cannot be updated in place (the caller then
	 * destroys obj and loads anew), and sets *bytes (its accounted size) and *generation (the
	 * metapage generation it reflects, read before the pages).  It raises an ERROR on failure,
	 * leaving obj to the caller to destroy.  destroy frees what the object holds in the engine
	 * (its host arrays go with env->cxt).
	 */
	void	   *(*load) (const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
						 uint64 *generation);
	void		(*destroy) (struct vs_context *engine, void *obj);

	/*
	 * Searches of an object with the kind's own parameters (the engine's conventions: ids,
	 * distances and counts as vs_knn; range results as vs_range).  They return a vs_status and
	 * raise no ERROR, so that the worker can evict and retry on VS_OUT_OF_MEMORY.  The queries
	 * are vectors, or strings for a kind with text indexes (search.h, VsQueries).
	 */
	int			(*knn) (struct vs_context *engine, void *obj, const VsKindParams *params,
						const VsQueries *queries, Size k, int64 *ids, float *distances,
						int64 *counts);
	int			(*range) (struct vs_context *engine, void *obj, const VsKindParams *params,
						  const VsQueries *queries, double radius, vs_alloc_fn alloc,
						  void *alloc_arg, vs_range_result *out);

	/*
	 * The same searches in a backend when the worker does not serve, reading the index's pages in
	 * place (NULL: the backend searches its cached engine object with knn / range).  They raise
	 * an ERROR on failure; range results go into the caller's memory context.
	 */
	void		(*backend_knn) (const VsIndexRef *ref, const VsKindParams *params,
								const VsQueries *queries, int k, int64 *ids, float *distances,
								int64 *counts);
	void		(*backend_range) (const VsIndexRef *ref, const VsKindParams *params,
								  const VsQueries *queries, double radius, VsRangeResult *out);

	/*
	 * Searches return the SQL operator's own values (in rank units, search.h) and find exactly the
	 * rows within a range: nothing needs rechecking.  Otherwise (approximate kinds) their
	 * distances are estimates and range_candidates a superset, which callers check.
	 */
	bool		exact;

	/*
	 * True when the distances of the rows this index's kNN searches return are the SQL
	 * operator's own values (in rank units), even where which rows they find is approximate
	 * (vs_graph measures its beam's rows exactly; vs_ivfpq with store_vectors re-ranks from the
	 * stored vectors): vsearch_knn_batch then checks only the rows' visibility.  NULL: false.
	 * Implied by exact.
	 */
	bool		(*exact_distances) (const VsIndexRef *ref);

	/*
	 * Rows that may lie within radius of each query under the SQL operator, with the kind's
	 * current settings: range quals of a scan, and vsearch_range_batch.  They go to consume in
	 * chunks (search.h, VsRangeChunk) as they are found, so that the backend never holds the
	 * whole answer; distances are in rank units (NaN: not computed).
	 */
	void		(*range_candidates) (const VsIndexRef *ref, const VsQueries *queries,
									 double radius, VsRangeConsumer consume, void *arg);

	/* vsearch_knn_batch: the k visible rows per query the index's ORDER BY scan returns first. */
	void		(*batch_knn) (struct VsBatch *batch, int k);

	/*
	 * vsearch_index_check (indexcheck.h): walks every page of the index from its metapage with
	 * vs_check_page, verifies the kind's invariants (ERROR with vs_check_fail), records each
	 * entry's heap tid with vs_check_tid and adds the kind's figures to the report.
	 */
	void		(*check) (struct VsCheck *check);

	/* ---- the GPU worker ---- */
	uint32		max_k;			/* largest k of a kNN request */

	/*
	 * The kind's part of a request's validation (the worker checked the header, the segment
	 * layout and the common limits): its parameter block, metric, and for VS_OP_BUILD the step.
	 * False with a reason when the request is malformed.
	 */
	bool		(*check_request) (const struct VsRequest *req, char *why, Size whylen);

	/*
	 * A step of CREATE INDEX run in the worker (VS_OP_BUILD; NULL: the kind has none): rows
	 * (nq x dim floats, or a string request's offsets and characters, in the request's segment,
	 * which the backend can still write) and the request's payload in, the answer out, palloc'd
	 * in the current memory context.  Returns a vs_status; err says why it failed.
	 */
	int			(*build_step) (struct vs_context *engine, const struct VsRequest *req,
							   const float *rows, const char *payload, char **answer,
							   Size *answer_len, char *err, Size errlen);

	/* Called in every pass of the worker's loop (stop: its engine context is going away). */
	void		(*worker_tick) (struct vs_context *engine, bool stop);
} VsIndexKind;

/* The kind of an id, or NULL. */
extern const VsIndexKind *vs_kind_by_id(uint32 id);

/* The kind of an open index, or NULL when it is not a vsearch index. */
extern const VsIndexKind *vs_kind_of_index(Relation index);
/* The kind whose pages end in page_id; NULL for none. */
extern const VsIndexKind *vs_kind_by_page_id(uint16 page_id);

/* The kind of a reference (ERROR if unknown: references come from vs_index_ref). */
extern const VsIndexKind *vs_ref_kind(const VsIndexRef *ref);

/* The access methods' names, for messages: "vs_a, vs_b or vs_c" (conjunction "or"). */
extern char *vs_kind_names(const char *conjunction);

/* Calls every kind's init (from _PG_init). */
extern void vs_kinds_init(void);

/* Calls every kind's worker_tick. */
extern void vs_kinds_worker_tick(struct vs_context *engine, bool stop);

#endif							/* VSEARCH_INDEXKIND_H */
