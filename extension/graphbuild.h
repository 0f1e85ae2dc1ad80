/*
 * vs_graph's build, shared by its two files: CREATE INDEX (graphbuild.c) and the kNN graph it
 * starts from (graphknn.c).
 */
#ifndef VSEARCH_GRAPHBUILD_H
#define VSEARCH_GRAPHBUILD_H

#include "postgres.h"

#include "portability/instr_time.h"
#include "utils/rel.h"

#include "graph.h"

/* The rows a build indexes, in memory (node numbers: their order). */
typedef struct GraphBuildState
{
	Relation	index;
	uint32		dim;			/* 0 until the first vector (unconstrained column) */
	uint32		degree;
	uint32		build_degree;
	uint32		storage;		/* VS_STORE_F16 for a halfvec column */
	float	   *vectors;
	ItemPointerData *tids;
	int64		n;
	int64		cap;
	MemoryContext tmpcxt;
} GraphBuildState;

/*
 * Seconds spent in each part of a build, reported at DEBUG1 (SET client_min_messages = debug1
 * shows them; bench/harness.py --graph prints them).
 */
typedef enum BuildPart
{
	PART_LOAD,					/* the table scan */
	PART_SEEDS,					/* k-means for the seeds, the mean (this backend's CPU engine) */
	PART_UPLOAD,				/* the rows into the worker's dataset */
	PART_LISTS,					/* the IVF kNN's lists: k-means, every row's list */
	PART_KNN,					/* the entry, the seeds and the kNN lists (worker or backend) */
	PART_PRUNE,					/* rank-based pruning */
	PART_EDGES,					/* reverse edges, merge, reachability, the seeds for islands */
	PART_LINKS,					/* the navigability pass */
	PART_WRITE,					/* node pages and their WAL */
	NUM_PARTS
} BuildPart;

typedef struct BuildClock
{
	instr_time	last;
	double		seconds[NUM_PARTS];
} BuildClock;

/* The time since the last lap goes to part. */
static inline void
clock_lap(BuildClock *c, BuildPart part)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	c->seconds[part] += INSTR_TIME_GET_DOUBLE(now) - INSTR_TIME_GET_DOUBLE(c->last);
	c->last = now;
}

/*
 * knn (n x K): the K nearest other rows of every row in rank units, nearest first
 * (VS_GRAPH_NO_NODE padded), exact or from IVF candidates (option build_knn); *entry: the row
 * nearest the mean; seeds[0 .. *nseeds): the rows nearest the seeds' k-means centroids; *worker:
 * whether the worker answered to the end.  Laps the clock's seeds, upload, lists and knn parts.
 */
extern void vs_graph_compute_knn(GraphBuildState *s, Relation index, vs_metric metric, int K,
								 uint32 *knn, uint32 *entry, uint32 *seeds, uint32 *nseeds,
								 BuildClock *clock, bool *worker);

#endif							/* VSEARCH_GRAPHBUILD_H */
