/*
 * Casts of `vector`: the length coercion that enforces vector(n), arrays of real, double
 * precision, integer and numeric to vector, and vector back to those arrays.
 *
 * Every cast function takes pgvector's (value, typmod, is_explicit) arguments.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/lsyscache.h"

#include "vector.h"

/* SQL vector(vector, typmod, is_explicit): the cast to vector(n) checks the dimension.  (Not
 * named `vector` in C, where some compilers reserve that word.) */
PG_FUNCTION_INFO_V1(vector_coerce_typmod);
Datum
vector_coerce_typmod(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	int32		typmod = PG_GETARG_INT32(1);

	vector_check_typmod(typmod, a->dim);
	PG_RETURN_VECTOR_P(a);
}

/* A float8 narrowed to float4: overflow is an error, a value too small for a float becomes a
 * signed zero or a denormal (pgvector's behaviour, and the text input's). */
static float
narrow_to_float4(double value)
{
	float		result = (float) value;

	if (isinf(result) && isfinite(value))
		float_overflow_error();
	return result;
}

/* array_to_vector(anyarray, typmod, is_explicit) for real[], double precision[], integer[] and
 * numeric[]: one-dimensional arrays without NULLs only. */
PG_FUNCTION_INFO_V1(array_to_vector);
Datum
array_to_vector(PG_FUNCTION_ARGS)
{
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(0);
	int32		typmod = PG_GETARG_INT32(1);
	Oid			element_type = ARR_ELEMTYPE(array);
	int16		element_len;
	bool		element_byval;
	char		element_align;
	Datum	   *elements;
	bool	   *nulls;
	int			count;
	Vector	   *result;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("array must be 1-D"),
				 errhint("Convert one row at a time, or unnest the array first.")));
	if (array_contains_nulls(array))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("array must not contain nulls")));
	/* Check the size before deconstructing an array that is far too large. */
	vector_check_dim(ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)));

	get_typlenbyvalalign(element_type, &element_len, &element_byval, &element_align);
	deconstruct_array(array, element_type, element_len, element_byval, element_align,
					  &elements, &nulls, &count);
	vector_check_typmod(typmod, count);

	result = vector_new(count);
	for (int i = 0; i < count; i++)
	{
		float		value;

		switch (element_type)
		{
			case FLOAT4OID:
				value = DatumGetFloat4(elements[i]);
				break;
			case FLOAT8OID:
				/* NaN and infinity keep their value and get the vector's message below. */
				value = narrow_to_float4(DatumGetFloat8(elements[i]));
				break;
			case INT4OID:
				value = (float) DatumGetInt32(elements[i]);
				break;
			case NUMERICOID:
				/* numeric_float4 reports values out of float4's range (22003). */
				value = DatumGetFloat4(DirectFunctionCall1(numeric_float4, elements[i]));
				break;
			default:
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("cannot cast %s to vector", format_type_be(ARR_ELEMTYPE(array)))));
		}
		vector_check_element(value);
		result->x[i] = value;
	}
	PG_RETURN_VECTOR_P(result);
}

static ArrayType *
array_of(Datum *elements, int count, Oid element_type)
{
	int16		element_len;
	bool		element_byval;
	char		element_align;

	get_typlenbyvalalign(element_type, &element_len, &element_byval, &element_align);
	return construct_array(elements, count, element_type, element_len, element_byval,
						   element_align);
}

/* vector to real[]: implicit, like pgvector. */
PG_FUNCTION_INFO_V1(vector_to_float4);
Datum
vector_to_float4(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Datum	   *elements = (Datum *) palloc(sizeof(Datum) * a->dim);

	for (int i = 0; i < a->dim; i++)
		elements[i] = Float4GetDatum(a->x[i]);
	PG_RETURN_ARRAYTYPE_P(array_of(elements, a->dim, FLOAT4OID));
}

PG_FUNCTION_INFO_V1(vector_to_float8);
Datum
vector_to_float8(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Datum	   *elements = (Datum *) palloc(sizeof(Datum) * a->dim);

	for (int i = 0; i < a->dim; i++)
		elements[i] = Float8GetDatum((double) a->x[i]);
	PG_RETURN_ARRAYTYPE_P(array_of(elements, a->dim, FLOAT8OID));
}

/* vector to integer[]: rounded half to even, like real::integer, and range-checked. */
PG_FUNCTION_INFO_V1(vector_to_int4);
Datum
vector_to_int4(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Datum	   *elements = (Datum *) palloc(sizeof(Datum) * a->dim);

	for (int i = 0; i < a->dim; i++)
	{
		float		rounded = rintf(a->x[i]);

		if (!FLOAT4_FITS_IN_INT32(rounded))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("integer out of range"),
					 errdetail("Element %d of the vector is %s.", i + 1,
							   float_to_shortest_decimal(a->x[i]))));
		elements[i] = Int32GetDatum((int32) rounded);
	}
	PG_RETURN_ARRAYTYPE_P(array_of(elements, a->dim, INT4OID));
}

/* vector to numeric[]: each element as the shortest decimal that reads back to the same float
 * (what vector_out prints), not real::numeric's 6 significant digits. */
PG_FUNCTION_INFO_V1(vector_to_numeric);
Datum
vector_to_numeric(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Datum	   *elements = (Datum *) palloc(sizeof(Datum) * a->dim);
	char		digits[FLOAT_SHORTEST_DECIMAL_LEN];

	for (int i = 0; i < a->dim; i++)
	{
		float_to_shortest_decimal_buf(a->x[i], digits);
		elements[i] = DirectFunctionCall3(numeric_in, CStringGetDatum(digits),
										  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	}
	PG_RETURN_ARRAYTYPE_P(array_of(elements, a->dim, NUMERICOID));
}
