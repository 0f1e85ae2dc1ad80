/*
 * Functions and operators on vectors: distances, norms, element-wise arithmetic and the btree
 * comparison.
 *
 * Every distance is the engine's exact one (vs_operator_distance, search.h): what SQL computes and
 * what every index search returns are the same number, bit for bit, on the CPU and the GPU.  Operands of distances and arithmetic must have the
 * same number of dimensions; comparisons accept any two vectors (ordering needs that).
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "fmgr.h"
#include "utils/float.h"

#include "search.h"
#include "vector.h"

/* The distance of two vectors of equal dimension under a metric. */
static double
metric_distance(vs_metric metric, FunctionCallInfo fcinfo)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	double		distance;

	vector_check_same_dim(a->dim, b->dim);
	distance = vs_operator_distance(metric, a->x, b->x, a->dim);
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return distance;
}

/* Euclidean distance, the `<->` operator. */
PG_FUNCTION_INFO_V1(l2_distance);
Datum
l2_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(metric_distance(VS_METRIC_L2, fcinfo));
}

/* Negative inner product, the `<#>` operator: smaller means more similar, like the other
 * distances. */
PG_FUNCTION_INFO_V1(vector_negative_inner_product);
Datum
vector_negative_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(metric_distance(VS_METRIC_IP, fcinfo));
}

PG_FUNCTION_INFO_V1(inner_product);
Datum
inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(-metric_distance(VS_METRIC_IP, fcinfo));
}

/* 1 - cosine similarity, the `<=>` operator; NaN when either vector is zero. */
PG_FUNCTION_INFO_V1(cosine_distance);
Datum
cosine_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(metric_distance(VS_METRIC_COSINE, fcinfo));
}

/* Taxicab distance, the `<+>` operator. */
PG_FUNCTION_INFO_V1(l1_distance);
Datum
l1_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(metric_distance(VS_METRIC_L1, fcinfo));
}

PG_FUNCTION_INFO_V1(vector_dims);
Datum
vector_dims(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	PG_RETURN_INT32(a->dim);
}

/* Euclidean norm.  The kernel sums squares in float, which overflows for elements beyond ~1e19
 * and underflows below ~1e-19 although the norm itself is a normal float; only then sum again in
 * double (this also covers the zero vector, cheaply). */
static double
euclidean_norm(const Vector *a)
{
	double		sum = vs_sqnorm_f32(a->x, a->dim);

	if (isinf(sum) || sum < FLT_MIN)
	{
		sum = 0.0;
		for (int i = 0; i < a->dim; i++)
			sum += (double) a->x[i] * (double) a->x[i];
	}
	return sqrt(sum);
}

PG_FUNCTION_INFO_V1(vector_norm);
Datum
vector_norm(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	PG_RETURN_FLOAT8(euclidean_norm(a));
}

/* The vector scaled to norm 1; the zero vector stays zero. */
PG_FUNCTION_INFO_V1(l2_normalize);
Datum
l2_normalize(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *result = vector_new(a->dim);
	double		norm = euclidean_norm(a);

	if (norm > 0.0)
	{
		for (int i = 0; i < a->dim; i++)
		{
			result->x[i] = (float) (a->x[i] / norm);
			/* Dividing by a denormal norm can overflow. */
			if (isinf(result->x[i]))
				float_overflow_error();
		}
	}
	PG_RETURN_VECTOR_P(result);
}

/* ---------------------------------------------------------------------------------------------
 * Element-wise arithmetic.  Results must stay finite: overflow is an ERROR (22003), as is an
 * underflow to zero in a product, like float4 arithmetic.
 */

typedef enum
{
	VECTOR_ADD,
	VECTOR_SUB,
	VECTOR_MUL
} vector_arith_op;

static Datum
vector_arith(vector_arith_op op, FunctionCallInfo fcinfo)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	Vector	   *result;

	vector_check_same_dim(a->dim, b->dim);
	result = vector_new(a->dim);
	for (int i = 0; i < a->dim; i++)
	{
		float		x = a->x[i];
		float		y = b->x[i];
		float		r;

		switch (op)
		{
			case VECTOR_ADD:
				r = x + y;
				break;
			case VECTOR_SUB:
				r = x - y;
				break;
			default:
				r = x * y;
				if (r == 0.0f && x != 0.0f && y != 0.0f)
					float_underflow_error();
				break;
		}
		if (isinf(r))
			float_overflow_error();
		result->x[i] = r;
	}
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	PG_RETURN_VECTOR_P(result);
}

PG_FUNCTION_INFO_V1(vector_add);
Datum
vector_add(PG_FUNCTION_ARGS)
{
	return vector_arith(VECTOR_ADD, fcinfo);
}

PG_FUNCTION_INFO_V1(vector_sub);
Datum
vector_sub(PG_FUNCTION_ARGS)
{
	return vector_arith(VECTOR_SUB, fcinfo);
}

PG_FUNCTION_INFO_V1(vector_mul);
Datum
vector_mul(PG_FUNCTION_ARGS)
{
	return vector_arith(VECTOR_MUL, fcinfo);
}

/* ---------------------------------------------------------------------------------------------
 * Ordering for btree: element by element, then the shorter vector first (as arrays compare).
 */

static int
vector_compare(FunctionCallInfo fcinfo)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *b = PG_GETARG_VECTOR_P(1);
	int			common = Min(a->dim, b->dim);
	int			order = 0;

	for (int i = 0; i < common && order == 0; i++)
	{
		if (a->x[i] < b->x[i])
			order = -1;
		else if (a->x[i] > b->x[i])
			order = 1;
	}
	if (order == 0 && a->dim != b->dim)
		order = a->dim < b->dim ? -1 : 1;
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return order;
}

VS_DEFINE_ORDER_FUNCTIONS(vector, vector_compare)
