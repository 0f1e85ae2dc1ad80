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
void
vector_subvector_range(int dim, int32 start32, int32 count32, const char *type_name,
					   int *first, int *kept)
{
	int64		start = start32;
	int64		count = count32;
	int64		end;			/* one past the last element, 1-based */

	if (count < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("%s must have at least 1 dimension", type_name),
				 errhint("The count of subvector(%s, start, count) must be positive.",
						 type_name)));
	end = Min(start + count, (int64) dim + 1);
	start = Max(start, 1);
	if (end <= start)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("%s must have at least 1 dimension", type_name),
				 errhint("subvector(%s, start, count) keeps the elements start to "
						 "start + count - 1 of the %d, counted from 1.", type_name, dim)));
	*first = (int) (start - 1);
	*kept = (int) (end - start);
}

PG_FUNCTION_INFO_V1(subvector);
Datum
subvector(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	int			first;
	int			kept;
	Vector	   *result;

	vector_subvector_range(a->dim, PG_GETARG_INT32(1), PG_GETARG_INT32(2), "vector", &first,
						   &kept);
	result = vector_new(kept);
	memcpy(result->x, a->x + first, sizeof(float) * kept);
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
