/*
 * Batch searches in SQL (batch.c): vsearch_knn_batch and vsearch_range_batch over any vsearch
 * index.  The SQL functions, the caller's checks, the rows' visibility and exact distances are the
 * same for every index kind; what a kNN batch asks the index is the kind's (indexkind.h,
 * batch_knn), with the exact strategy here for kinds whose searches return exact distances.
 */
#ifndef VSEARCH_BATCH_H
#define VSEARCH_BATCH_H

#include "postgres.h"

#include "nodes/execnodes.h"
#include "portability/instr_time.h"

#include "batchrows.h"
#include "search.h"

/* Most (query, row) pairs one kNN batch call may produce. */
#define VS_BATCH_MAX_RESULTS	50000000

/* A row of an answer: the SQL operator's distance and the visible version's ctid. */
typedef struct VsHit
{
	double		distance;
	ItemPointerData tid;
} VsHit;

/* The rows of one query's answer (at most the batch's k). */
typedef struct VsBatchAnswer
{
	VsHit	   *hits;
	int			n;
} VsBatchAnswer;

typedef struct VsBatch
{
	Relation	heap;
	Relation	index;
	VsIndexRef	ref;
	int			nq;
	float	   *queries;		/* nq x dim (vector queries) */
	uint64	   *offsets;		/* text queries (vs_lc, vs_sss on text): nq + 1, into chars */
	uint32	   *chars;
	int		   *numbers;		/* the query numbers the rows report (NULL: positions) */
	VsBatchAnswer *answers;		/* per query (kNN): filled by the kind's batch_knn */

	/* visibility checks and distances */
	VsRowReader reader;

	/* where the time went (reported at DEBUG1) */
	int			rounds;			/* engine calls */
	instr_time	started;		/* vs_batch_open's start */
	instr_time	read_time;		/* opening the index and reading the queries */
	instr_time	search_time;	/* in the search layer: the worker or the backend's engine */
	instr_time	heap_time;		/* reading and checking candidate rows */
	instr_time	emit_time;		/* sorting the answers and forming the result rows (kNN) */
} VsBatch;

/* Opens the index and its table for a batch call (permission, row level security and index
 * checks; locks until the end of the transaction) and fills bc->heap, bc->index and bc->ref; the
 * call's timing starts here. */
extern void vs_batch_open(Oid indexoid, VsBatch *bc);

/* float8 order (NaN last), then tid. */
extern int	vs_cmp_hit(const VsHit *a, const VsHit *b);

/* Appends the pair (id, query), answered in slot, to a growing array. */
extern void vs_batch_add_pair(VsPair **pairs, Size *n, Size *cap, int64 id, int query, Size slot);

/* ERROR: more candidate rows than a batch can hold. */
extern void vs_batch_too_many(int64 limit) pg_attribute_noreturn();

/*
 * kNN for kinds whose searches return the operator's distances (indexkind.h, exact): rounds of
 * kNN, widened until no unseen row can beat the k-th visible one.
 */
extern void vs_batch_knn_exact(VsBatch *batch, int k);

/* Queries [0, n) of the batch, or those listed in which (NULL: all), as the search layer takes
 * them (the arrays are palloc'd when a subset). */
extern VsQueries vs_batch_queries(const VsBatch *batch, const int *which, int n);

/*
 * The rest of vsearch_knn_batch and vsearch_range_batch once the index is open and the queries
 * read (vectors or text): the search, the rows' checks, the answer rows into the SRF's store;
 * closes the index and its table.
 */
extern void vs_batch_knn_answer(ReturnSetInfo *rsinfo, VsBatch *batch, int k);
extern void vs_batch_range_answer(ReturnSetInfo *rsinfo, VsBatch *batch, double radius);

#endif							/* VSEARCH_BATCH_H */
