/*
 * The `halfvec` type: a varlena of IEEE binary16 values, pgvector's half-precision vector.
 *
 * pgvector's layout byte for byte (varlena header, int16 dim, int16 unused = 0, binary16[]), so a
 * pgvector dump or binary COPY loads unchanged.  Elements are kept as their raw 16 bits and
 * converted with vsearch/half.h (F16C where the CPU has it).  Values are always finite and a
 * halfvec has 1..HALFVEC_MAX_DIM elements.
 */
#ifndef VSEARCH_HALFVEC_H
#define VSEARCH_HALFVEC_H

#include "fmgr.h"

#include "vsearch/half.h"

#define HALFVEC_MAX_DIM 16000

typedef struct HalfVector
{
	int32		vl_len_;		/* varlena header (do not touch directly) */
	int16		dim;			/* number of elements */
	int16		unused;			/* always 0; kept for pgvector's layout */
	uint16		x[FLEXIBLE_ARRAY_MEMBER];	/* binary16 bit patterns */
} HalfVector;

#define HALFVEC_SIZE(dim)		(offsetof(HalfVector, x) + sizeof(uint16) * (dim))

#define DatumGetHalfVectorP(d)	((HalfVector *) PG_DETOAST_DATUM(d))
#define PG_GETARG_HALFVEC_P(n)	DatumGetHalfVectorP(PG_GETARG_DATUM(n))
#define PG_RETURN_HALFVEC_P(v)	PG_RETURN_POINTER(v)

#endif							/* VSEARCH_HALFVEC_H */
