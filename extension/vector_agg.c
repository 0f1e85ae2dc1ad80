/*
 * Support of avg(vector); sum(vector) needs none, it folds with vector_add.
 *
 * avg's state is a float8[] {count, sum_1, ..., sum_dim}, starting as '{0}': sums in double so a
 * long average loses nothing to float rounding, and a plain array so parallel workers pass their
 * partial states through the ordinary array I/O (no serialize functions).
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/float.h"

#include "vector.h"

/* The state's elements; *length is 1 before the first vector, dim + 1 after.  The functions are
 * callable from SQL with any float8[], so the shape is checked rather than assumed. */
static float8 *
state_values(ArrayType *state, int *length)
{
	if (ARR_NDIM(state) != 1 || ARR_DIMS(state)[0] < 1 ||
		ARR_HASNULL(state) || ARR_ELEMTYPE(state) != FLOAT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("invalid state of the vector average"),
				 errdetail("Expected a one-dimensional double precision array without nulls "
						   "holding a count and one sum per dimension.")));
	*length = ARR_DIMS(state)[0];
	if (*length > VECTOR_MAX_DIM + 1)
		vector_check_dim(*length - 1);
	return (float8 *) ARR_DATA_PTR(state);
}

static ArrayType *
state_new(const float8 *values, int length)
{
	Datum	   *elements = (Datum *) palloc(sizeof(Datum) * length);

	for (int i = 0; i < length; i++)
		elements[i] = Float8GetDatum(values[i]);
	return construct_array(elements, length, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
						   TYPALIGN_DOUBLE);
}

static float8
checked_sum(float8 a, float8 b)
{
	float8		sum = a + b;

	if (isinf(sum))
		float_overflow_error();
	return sum;
}

/* Transition function: count the vector and add it to the sums. */
PG_FUNCTION_INFO_V1(vector_accum);
Datum
vector_accum(PG_FUNCTION_ARGS)
{
	ArrayType  *state = PG_GETARG_ARRAYTYPE_P(0);
	Vector	   *vector = PG_GETARG_VECTOR_P(1);
	int			length;
	float8	   *values = state_values(state, &length);

	if (length == 1)
	{
		/* First vector: the state grows from '{0}' to its full length. */
		float8	   *first = (float8 *) palloc(sizeof(float8) * (vector->dim + 1));

		first[0] = values[0] + 1.0;
		for (int i = 0; i < vector->dim; i++)
			first[i + 1] = vector->x[i];
		PG_RETURN_ARRAYTYPE_P(state_new(first, vector->dim + 1));
	}

	vector_check_same_dim(length - 1, vector->dim);
	/* Inside an aggregate the state belongs to it and is updated in place, like float8_accum
	 * does, saving a copy per row; a direct call must leave its argument alone. */
	if (!AggCheckCallContext(fcinfo, NULL))
	{
		state = PG_GETARG_ARRAYTYPE_P_COPY(0);
		values = (float8 *) ARR_DATA_PTR(state);
	}
	values[0] += 1.0;
	for (int i = 0; i < vector->dim; i++)
		values[i + 1] = checked_sum(values[i + 1], vector->x[i]);
	PG_RETURN_ARRAYTYPE_P(state);
}

/* Combine function: merge two partial states of parallel workers. */
PG_FUNCTION_INFO_V1(vector_combine);
Datum
vector_combine(PG_FUNCTION_ARGS)
{
	ArrayType  *state_a = PG_GETARG_ARRAYTYPE_P(0);
	ArrayType  *state_b = PG_GETARG_ARRAYTYPE_P(1);
	int			length_a;
	int			length_b;
	float8	   *values_a = state_values(state_a, &length_a);
	float8	   *values_b = state_values(state_b, &length_b);
	float8	   *sums;

	/* Two empty states (parallel workers that saw no rows) make an empty state; pgvector
	 * raises an error here instead. */
	if (values_a[0] == 0.0 && values_b[0] == 0.0)
		PG_RETURN_ARRAYTYPE_P(state_new(values_a, 1));
	/* One empty state: the other one, which must hold at least one sum. */
	if (values_b[0] == 0.0)
	{
		vector_check_dim(length_a - 1);
		PG_RETURN_ARRAYTYPE_P(state_a);
	}
	if (values_a[0] == 0.0)
	{
		vector_check_dim(length_b - 1);
		PG_RETURN_ARRAYTYPE_P(PG_GETARG_ARRAYTYPE_P_COPY(1));
	}

	vector_check_same_dim(length_a - 1, length_b - 1);
	sums = (float8 *) palloc(sizeof(float8) * length_a);
	for (int i = 0; i < length_a; i++)
		sums[i] = checked_sum(values_a[i], values_b[i]);
	PG_RETURN_ARRAYTYPE_P(state_new(sums, length_a));
}

/* Final function: sums divided by the count, NULL when no row was counted. */
PG_FUNCTION_INFO_V1(vector_avg);
Datum
vector_avg(PG_FUNCTION_ARGS)
{
	ArrayType  *state = PG_GETARG_ARRAYTYPE_P(0);
	int			length;
	float8	   *values = state_values(state, &length);
	float8		count = values[0];
	Vector	   *result;

	if (count == 0.0)
		PG_RETURN_NULL();
	vector_check_dim(length - 1);

	result = vector_new(length - 1);
	for (int i = 0; i < result->dim; i++)
	{
		result->x[i] = (float) (values[i + 1] / count);
		/* Only a hand-made state can get here: an average of floats is a float. */
		if (isinf(result->x[i]))
			float_overflow_error();
		vector_check_element(result->x[i]);
	}
	PG_RETURN_VECTOR_P(result);
}
