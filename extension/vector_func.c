/*
 * The rest of pgvector's `vector` functions: subvector(), concatenation (`||`) and
 * binary_quantize().
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/varbit.h"

#include "vector.h"

/*
 * subvector(v, start, count): the elements start .. start + count - 1, counted from 1 like
 * substring().  The part of that range outside the vector is dropped; an empty result is an
 * ERROR (a vector has at least one element).  The bounds are computed in 64 bits, so no
 * combination of int4 arguments can overflow.
 */
PG_FUNCTION_INFO_V1(subvector);
Datum
subvector(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	int64		start = PG_GETARG_INT32(1);
	int64		count = PG_GETARG_INT32(2);
	int64		end;			/* one past the last element, 1-based */
	Vector	   *result;

	if (count < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension"),
				 errhint("The count of subvector(vector, start, count) must be positive.")));
	end = Min(start + count, (int64) a->dim + 1);
	start = Max(start, 1);
	if (end <= start)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension"),
				 errhint("subvector(vector, start, count) keeps the elements start to "
						 "start + count - 1 of the %d, counted from 1.", a->dim)));

	result = vector_new((int) (end - start));
	memcpy(result->x, a->x + (start - 1), sizeof(float) * result->dim);
	PG_FREE_IF_COPY(a, 0);
	PG_RETURN_VECTOR_P(result);
}

/* vector || vector: the elements of both, at most VECTOR_MAX_DIM in all. */
PG_FUNCTION_INFO_V1(vector_concat);
Datum
vector_concat(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	Vector	   *result;

	vector_check_dim(a->dim + b->dim);
	result = vector_new(a->dim + b->dim);
	memcpy(result->x, a->x, sizeof(float) * a->dim);
	memcpy(result->x + a->dim, b->x, sizeof(float) * b->dim);
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	PG_RETURN_VECTOR_P(result);
}

/* binary_quantize(v): a bit string of v's length, bit i set where element i is positive. */
PG_FUNCTION_INFO_V1(binary_quantize);
Datum
binary_quantize(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	VarBit	   *result = (VarBit *) palloc0(VARBITTOTALLEN(a->dim));
	bits8	   *bits = VARBITS(result);

	SET_VARSIZE(result, VARBITTOTALLEN(a->dim));
	VARBITLEN(result) = a->dim;
	/* The first element is the leftmost bit: the high bit of the first byte. */
	for (int i = 0; i < a->dim; i++)
		if (a->x[i] > 0)
			bits[i / BITS_PER_BYTE] |= (bits8) (0x80 >> (i % BITS_PER_BYTE));
	PG_FREE_IF_COPY(a, 0);
	PG_RETURN_VARBIT_P(result);
}
