/*
 * The `halfvec` type (halfvec.h): text and binary I/O, the type modifier, casts to and from
 * `vector` and arrays, distances, element-wise arithmetic, ordering and the other functions of
 * pgvector's halfvec API.
 *
 * Every computation converts the halves to floats (exactly: every half is a float) and works as
 * the `vector` functions do; results that are halfvecs are rounded back to the nearest half, and
 * one that does not fit (beyond +-65504) is an ERROR, never an infinity.  Distances are the
 * engine's exact distance of the half values (vs_operator_distance): the same number the vector
 * operators give for the same values.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/varbit.h"

#include "halfvec.h"
#include "search.h"
#include "vector.h"

/* array_to_vector and vector_to_float4 (vector_cast.c) do the array work of the casts. */
extern Datum array_to_vector(PG_FUNCTION_ARGS);
extern Datum vector_to_float4(PG_FUNCTION_ARGS);

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */

static HalfVector *
halfvec_new(int dim)
{
	HalfVector *result = (HalfVector *) palloc0(HALFVEC_SIZE(dim));

	SET_VARSIZE(result, HALFVEC_SIZE(dim));
	result->dim = dim;
	return result;
}

static void
halfvec_check_dim(int dim)
{
	if (dim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("halfvec must have at least 1 dimension")));
	if (dim > HALFVEC_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("halfvec cannot have more than %d dimensions", HALFVEC_MAX_DIM)));
}

static void
halfvec_check_same_dim(int dim_a, int dim_b)
{
	if (dim_a != dim_b)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different halfvec dimensions %d and %d", dim_a, dim_b)));
}

/* The elements as floats, into buffer if it holds dim of them, else palloc'd. */
static float *
halfvec_floats(const HalfVector *a, float *buffer, int buffer_len)
{
	float	   *x = a->dim <= buffer_len ? buffer : (float *) palloc(sizeof(float) * a->dim);

	vs_half_to_float(a->x, x, a->dim);
	return x;
}

static void
halfvec_out_of_range(float value)
{
	char		text[FLOAT_SHORTEST_DECIMAL_LEN];

	float_to_shortest_decimal_buf(value, text);
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("\"%s\" is out of range for type halfvec", text),
			 errhint("The largest half-precision value is %g.", (double) VS_HALF_MAX)));
}

/* x (finite floats) rounded to a halfvec; ERROR if an element is beyond the half range. */
static HalfVector *
halfvec_from_floats(const float *x, int dim)
{
	HalfVector *result = halfvec_new(dim);

	vs_float_to_half(x, result->x, dim);
	for (int i = 0; i < dim; i++)
		if (vs_half_is_special(result->x[i]))
			halfvec_out_of_range(x[i]);
	return result;
}

static void
halfvec_check_typmod(int32 typmod, int dim)
{
	/* the same rule and message as vector(n) */
	vector_check_typmod(typmod, dim);
}

/* ---------------------------------------------------------------------------------------------
 * Text and binary I/O, type modifier
 */

PG_FUNCTION_INFO_V1(halfvec_in);
Datum
halfvec_in(PG_FUNCTION_ARGS)
{
	char	   *literal = PG_GETARG_CSTRING(0);
	int32		typmod = PG_GETARG_INT32(2);
	int			dim;
	float	   *values = vector_parse_literal(literal, "halfvec", &dim);
	HalfVector *result;

	halfvec_check_typmod(typmod, dim);
	result = halfvec_from_floats(values, dim);
	pfree(values);
	PG_RETURN_HALFVEC_P(result);
}

/* Each element in the shortest form that reads back to the same float, hence the same half. */
PG_FUNCTION_INFO_V1(halfvec_out);
Datum
halfvec_out(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	float	   *x = halfvec_floats(a, NULL, 0);

	PG_RETURN_CSTRING(vector_format(x, a->dim));
}

PG_FUNCTION_INFO_V1(halfvec_typmod_in);
Datum
halfvec_typmod_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(vector_typmod_parse(PG_GETARG_ARRAYTYPE_P(0), "halfvec", HALFVEC_MAX_DIM));
}

/* pgvector's wire format: int16 dim, int16 unused (0), dim binary16 values, network order. */
PG_FUNCTION_INFO_V1(halfvec_recv);
Datum
halfvec_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int32		typmod = PG_GETARG_INT32(2);
	int			dim;
	int			unused;
	HalfVector *result;

	if (buf->len - buf->cursor < 2 * (int) sizeof(int16))
		vector_binary_error("halfvec", "The header of 4 bytes is incomplete.");
	dim = (int16) pq_getmsgint(buf, sizeof(int16));
	unused = (int16) pq_getmsgint(buf, sizeof(int16));
	halfvec_check_dim(dim);
	if (unused != 0)
		vector_binary_error("halfvec", psprintf("Expected unused to be 0, not %d.", unused));
	if (buf->len - buf->cursor != dim * (int) sizeof(uint16))
		vector_binary_error("halfvec",
							psprintf("A halfvec of %d dimensions needs %d bytes of values, not %d.",
									 dim, dim * (int) sizeof(uint16), buf->len - buf->cursor));
	halfvec_check_typmod(typmod, dim);

	result = halfvec_new(dim);
	for (int i = 0; i < dim; i++)
	{
		result->x[i] = (uint16) pq_getmsgint(buf, sizeof(uint16));
		if (vs_half_is_special(result->x[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg((result->x[i] & 0x3ff) ? "NaN not allowed in halfvec"
							: "infinite value not allowed in halfvec")));
	}
	PG_RETURN_HALFVEC_P(result);
}

PG_FUNCTION_INFO_V1(halfvec_send);
Datum
halfvec_send(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint16(&buf, a->dim);
	pq_sendint16(&buf, a->unused);
	for (int i = 0; i < a->dim; i++)
		pq_sendint16(&buf, a->x[i]);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/* ---------------------------------------------------------------------------------------------
 * Casts, each with pgvector's (value, typmod, is_explicit) arguments
 */

PG_FUNCTION_INFO_V1(halfvec_coerce_typmod);
Datum
halfvec_coerce_typmod(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);

	halfvec_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_HALFVEC_P(a);
}

PG_FUNCTION_INFO_V1(vector_to_halfvec);
Datum
vector_to_halfvec(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	halfvec_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_HALFVEC_P(halfvec_from_floats(a->x, a->dim));
}

PG_FUNCTION_INFO_V1(halfvec_to_vector);
Datum
halfvec_to_vector(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	Vector	   *result;

	vector_check_typmod(PG_GETARG_INT32(1), a->dim);
	result = vector_new(a->dim);
	vs_half_to_float(a->x, result->x, a->dim);
	PG_RETURN_VECTOR_P(result);
}

/* integer[], real[], double precision[] and numeric[] to halfvec: the array checks of the cast to
 * vector (1-D, no NULLs, finite, at most 16000 elements), then rounding to half. */
PG_FUNCTION_INFO_V1(array_to_halfvec);
Datum
array_to_halfvec(PG_FUNCTION_ARGS)
{
	Vector	   *v = DatumGetVectorP(DirectFunctionCall3(array_to_vector, PG_GETARG_DATUM(0),
														Int32GetDatum(PG_GETARG_INT32(1)),
														BoolGetDatum(false)));

	PG_RETURN_HALFVEC_P(halfvec_from_floats(v->x, v->dim));
}

PG_FUNCTION_INFO_V1(halfvec_to_float4);
Datum
halfvec_to_float4(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	Vector	   *v = vector_new(a->dim);

	vs_half_to_float(a->x, v->x, a->dim);
	return DirectFunctionCall3(vector_to_float4, PointerGetDatum(v), Int32GetDatum(-1),
							   BoolGetDatum(false));
}

/* ---------------------------------------------------------------------------------------------
 * Distances: the exact distance of the half values
 */

#define STACK_FLOATS 1024

static double
halfvec_metric(vs_metric metric, FunctionCallInfo fcinfo)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);
	float		buffer_a[STACK_FLOATS];
	float		buffer_b[STACK_FLOATS];
	float	   *x;
	float	   *y;
	double		distance;

	halfvec_check_same_dim(a->dim, b->dim);
	x = halfvec_floats(a, buffer_a, STACK_FLOATS);
	y = halfvec_floats(b, buffer_b, STACK_FLOATS);
	distance = vs_operator_distance(metric, x, y, a->dim);
	if (x != buffer_a)
		pfree(x);
	if (y != buffer_b)
		pfree(y);
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return distance;
}

PG_FUNCTION_INFO_V1(halfvec_l2_distance);
Datum
halfvec_l2_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(halfvec_metric(VS_METRIC_L2, fcinfo));
}

PG_FUNCTION_INFO_V1(halfvec_negative_inner_product);
Datum
halfvec_negative_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(halfvec_metric(VS_METRIC_IP, fcinfo));
}

PG_FUNCTION_INFO_V1(halfvec_inner_product);
Datum
halfvec_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(-halfvec_metric(VS_METRIC_IP, fcinfo));
}

PG_FUNCTION_INFO_V1(halfvec_cosine_distance);
Datum
halfvec_cosine_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(halfvec_metric(VS_METRIC_COSINE, fcinfo));
}

PG_FUNCTION_INFO_V1(halfvec_l1_distance);
Datum
halfvec_l1_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(halfvec_metric(VS_METRIC_L1, fcinfo));
}

/* ---------------------------------------------------------------------------------------------
 * Other functions
 */

PG_FUNCTION_INFO_V1(halfvec_vector_dims);
Datum
halfvec_vector_dims(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);

	PG_RETURN_INT32(a->dim);
}

/* The Euclidean norm, summed in double (a sum of squared halves cannot overflow it). */
static double
halfvec_norm(const HalfVector *a)
{
	double		sum = 0.0;

	for (int i = 0; i < a->dim; i++)
	{
		double		x = vs_half_to_float1(a->x[i]);

		sum += x * x;
	}
	return sqrt(sum);
}

PG_FUNCTION_INFO_V1(halfvec_l2_norm);
Datum
halfvec_l2_norm(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(halfvec_norm(PG_GETARG_HALFVEC_P(0)));
}

/* The halfvec scaled to norm 1, each element rounded to half; the zero vector stays zero. */
PG_FUNCTION_INFO_V1(halfvec_l2_normalize);
Datum
halfvec_l2_normalize(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	double		norm = halfvec_norm(a);
	float	   *x = halfvec_floats(a, NULL, 0);

	for (int i = 0; i < a->dim; i++)
		x[i] = norm > 0.0 ? (float) (x[i] / norm) : 0.0f;
	/* |x[i]| <= 1: always a half */
	PG_RETURN_HALFVEC_P(halfvec_from_floats(x, a->dim));
}

PG_FUNCTION_INFO_V1(halfvec_binary_quantize);
Datum
halfvec_binary_quantize(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	VarBit	   *result = (VarBit *) palloc0(VARBITTOTALLEN(a->dim));
	bits8	   *bits = VARBITS(result);

	SET_VARSIZE(result, VARBITTOTALLEN(a->dim));
	VARBITLEN(result) = a->dim;
	/* positive: sign bit clear and not (+)zero */
	for (int i = 0; i < a->dim; i++)
		if ((a->x[i] & 0x8000) == 0 && a->x[i] != 0)
			bits[i / BITS_PER_BYTE] |= (bits8) (0x80 >> (i % BITS_PER_BYTE));
	PG_RETURN_VARBIT_P(result);
}

PG_FUNCTION_INFO_V1(halfvec_subvector);
Datum
halfvec_subvector(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	int			first;
	int			kept;
	HalfVector *result;

	vector_subvector_range(a->dim, PG_GETARG_INT32(1), PG_GETARG_INT32(2), "halfvec", &first,
						   &kept);
	result = halfvec_new(kept);
	memcpy(result->x, a->x + first, sizeof(uint16) * kept);
	PG_RETURN_HALFVEC_P(result);
}

PG_FUNCTION_INFO_V1(halfvec_concat);
Datum
halfvec_concat(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);
	HalfVector *result;

	halfvec_check_dim(a->dim + b->dim);
	result = halfvec_new(a->dim + b->dim);
	memcpy(result->x, a->x, sizeof(uint16) * a->dim);
	memcpy(result->x + a->dim, b->x, sizeof(uint16) * b->dim);
	PG_RETURN_HALFVEC_P(result);
}

/* ---------------------------------------------------------------------------------------------
 * Element-wise arithmetic in float, rounded to half: a result beyond the half range is an
 * overflow ERROR, a product of non-zero elements that rounds to zero an underflow ERROR.
 */

typedef enum
{
	HALFVEC_ADD,
	HALFVEC_SUB,
	HALFVEC_MUL
} halfvec_arith_op;

static Datum
halfvec_arith(halfvec_arith_op op, FunctionCallInfo fcinfo)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);
	float	   *x;
	float	   *y;
	HalfVector *result;

	halfvec_check_same_dim(a->dim, b->dim);
	x = halfvec_floats(a, NULL, 0);
	y = halfvec_floats(b, NULL, 0);
	for (int i = 0; i < a->dim; i++)
	{
		float		r = op == HALFVEC_ADD ? x[i] + y[i] : op == HALFVEC_SUB ? x[i] - y[i] : x[i] * y[i];

		x[i] = r;
	}
	result = halfvec_new(a->dim);
	vs_float_to_half(x, result->x, a->dim);
	for (int i = 0; i < a->dim; i++)
	{
		if (vs_half_is_special(result->x[i]))
			float_overflow_error();
		if (op == HALFVEC_MUL && (result->x[i] & 0x7fff) == 0 &&
			(a->x[i] & 0x7fff) != 0 && (b->x[i] & 0x7fff) != 0)
			float_underflow_error();
	}
	PG_RETURN_HALFVEC_P(result);
}

PG_FUNCTION_INFO_V1(halfvec_add);
Datum
halfvec_add(PG_FUNCTION_ARGS)
{
	return halfvec_arith(HALFVEC_ADD, fcinfo);
}

PG_FUNCTION_INFO_V1(halfvec_sub);
Datum
halfvec_sub(PG_FUNCTION_ARGS)
{
	return halfvec_arith(HALFVEC_SUB, fcinfo);
}

PG_FUNCTION_INFO_V1(halfvec_mul);
Datum
halfvec_mul(PG_FUNCTION_ARGS)
{
	return halfvec_arith(HALFVEC_MUL, fcinfo);
}

/* ---------------------------------------------------------------------------------------------
 * Ordering for btree: by value element by element (-0 = 0), then the shorter first
 */

static int
halfvec_compare(FunctionCallInfo fcinfo)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(0);
	HalfVector *b = PG_GETARG_HALFVEC_P(1);
	int			common = Min(a->dim, b->dim);
	int			order = 0;

	for (int i = 0; i < common && order == 0; i++)
	{
		float		x = vs_half_to_float1(a->x[i]);
		float		y = vs_half_to_float1(b->x[i]);

		if (x < y)
			order = -1;
		else if (x > y)
			order = 1;
	}
	if (order == 0 && a->dim != b->dim)
		order = a->dim < b->dim ? -1 : 1;
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return order;
}

VS_DEFINE_ORDER_FUNCTIONS(halfvec, halfvec_compare)

/* ---------------------------------------------------------------------------------------------
 * avg(halfvec): the state and functions of avg(vector) (vector_agg.c), fed with the float values
 * of the halves; the average is rounded to half.
 */

extern Datum vector_accum(PG_FUNCTION_ARGS);
extern Datum vector_avg(PG_FUNCTION_ARGS);

PG_FUNCTION_INFO_V1(halfvec_accum);
Datum
halfvec_accum(PG_FUNCTION_ARGS)
{
	HalfVector *a = PG_GETARG_HALFVEC_P(1);
	Vector	   *v = vector_new(a->dim);

	vs_half_to_float(a->x, v->x, a->dim);
	/* the same call with the vector in place of the halfvec: inside an aggregate vector_accum
	 * still sees the aggregate's context and updates the state in place */
	fcinfo->args[1].value = PointerGetDatum(v);
	return vector_accum(fcinfo);
}

PG_FUNCTION_INFO_V1(halfvec_avg);
Datum
halfvec_avg(PG_FUNCTION_ARGS)
{
	Datum		average = vector_avg(fcinfo);
	Vector	   *v;

	if (fcinfo->isnull)
		PG_RETURN_NULL();
	v = DatumGetVectorP(average);
	PG_RETURN_HALFVEC_P(halfvec_from_floats(v->x, v->dim));
}

/* ---------------------------------------------------------------------------------------------
 * vector.h's vs_datum_vector: index code reads vector and halfvec values through it
 */

Vector *
vs_datum_vector(Datum datum)
{
	struct varlena *value = PG_DETOAST_DATUM(datum);
	Size		payload = VARSIZE(value) - offsetof(Vector, x);
	int			dim = ((Vector *) value)->dim;
	Vector	   *result;

	if (dim >= 1 && payload == sizeof(float) * (Size) dim)
		return (Vector *) value;
	if (dim < 1 || payload != sizeof(uint16) * (Size) dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a value of %u bytes is neither a vector nor a halfvec of %d dimensions",
						(unsigned int) VARSIZE(value), dim)));
	result = vector_new(dim);
	vs_half_to_float(((HalfVector *) value)->x, result->x, dim);
	if ((Pointer) value != DatumGetPointer(datum))
		pfree(value);
	return result;
}
