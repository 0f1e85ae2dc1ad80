/*
 * The `sparsevec` type: pgvector's sparse vector, the non-zero elements of a vector of up to
 * SPARSEVEC_MAX_DIM dimensions.
 *
 * pgvector's layout byte for byte (varlena header, int32 dim, int32 nnz, int32 unused = 0, nnz
 * int32 0-based indices, then nnz float4 values), so a pgvector dump or binary COPY loads
 * unchanged.  Indices are strictly increasing, values finite and never zero, and there are at most
 * SPARSEVEC_MAX_NNZ of them; every function that builds a sparsevec keeps that.
 */
#ifndef VSEARCH_SPARSEVEC_H
#define VSEARCH_SPARSEVEC_H

#include "fmgr.h"

#define SPARSEVEC_MAX_DIM 1000000000
#define SPARSEVEC_MAX_NNZ 16000

typedef struct SparseVector
{
	int32		vl_len_;		/* varlena header (do not touch directly) */
	int32		dim;			/* number of dimensions */
	int32		nnz;			/* number of non-zero elements */
	int32		unused;			/* always 0; kept for pgvector's layout */
	int32		indices[FLEXIBLE_ARRAY_MEMBER];	/* nnz indices, then nnz float values */
} SparseVector;

#define SPARSEVEC_SIZE(nnz) \
	(offsetof(SparseVector, indices) + (sizeof(int32) + sizeof(float)) * (Size) (nnz))

static inline float *
sparsevec_values(SparseVector *v)
{
	return (float *) (v->indices + v->nnz);
}

#define DatumGetSparseVectorP(d)	((SparseVector *) PG_DETOAST_DATUM(d))
#define PG_GETARG_SPARSEVEC_P(n)	DatumGetSparseVectorP(PG_GETARG_DATUM(n))
#define PG_RETURN_SPARSEVEC_P(v)	PG_RETURN_POINTER(v)

#endif							/* VSEARCH_SPARSEVEC_H */
