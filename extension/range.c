/*
 * Range search in SQL: the `sphere` composite (center vector, radius float8) and the operators
 *
 *   vector <<->> sphere   L2 distance     <= radius    (vector_l2_within)
 *   vector <<#>> sphere   -inner product  <= radius    (vector_ip_within)
 *   vector <<=>> sphere   cosine distance <= radius    (vector_cosine_within)
 *   vector <<+>> sphere   L1 distance     <= radius    (vector_l1_within)
 *
 * Each is true iff the matching distance operator (<->, <#>, <=>, <+>) applied to the row and the
 * center is <= radius, computed by the very same function (vs_operator_distance), so
 * `v <<->> sphere(q, r)` and `v <-> q <= r` agree on every row.  They are search operators
 * (strategy 2) of every vsearch index's operator classes, so an index answers them (its kind's
 * range_candidates, indexkind.h).
 *
 * The radius must be finite; it must not be negative except for <<#>>, whose distance (a negative
 * inner product) can be.  A sphere with a NULL center or radius matches nothing (the operator
 * returns NULL).
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "search.h"
#include "vector.h"

const char *
vs_metric_operator(vs_metric metric)
{
	switch (metric)
	{
		case VS_METRIC_L2:
		case VS_METRIC_L2SQ:
			return "<->";
		case VS_METRIC_IP:
			return "<#>";
		case VS_METRIC_COSINE:
			return "<=>";
		case VS_METRIC_L1:
			return "<+>";
	}
	return "?";
}

const char *
vs_metric_name(vs_metric metric)
{
	switch (metric)
	{
		case VS_METRIC_L2SQ:
			return "squared L2";
		case VS_METRIC_L2:
			return "L2";
		case VS_METRIC_IP:
			return "negative inner product";
		case VS_METRIC_COSINE:
			return "cosine";
		case VS_METRIC_L1:
			return "L1";
	}
	return "unknown";
}

bool
vs_sphere_get(Datum sphere, Vector **center, double *radius)
{
	HeapTupleHeader tuple = DatumGetHeapTupleHeader(sphere);
	bool		isnull;
	Datum		value;

	value = GetAttributeByNum(tuple, 1, &isnull);
	if (isnull)
		return false;
	*center = DatumGetVectorP(value);
	value = GetAttributeByNum(tuple, 2, &isnull);
	if (isnull)
		return false;
	*radius = DatumGetFloat8(value);
	return true;
}

void
vs_check_radius(vs_metric metric, double radius)
{
	if (isnan(radius) || isinf(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must be a finite number, not %g", radius),
				 errhint("The radius is the largest %s distance (operator %s) a row may have.",
						 vs_metric_name(metric), vs_metric_operator(metric))));
	if (radius < 0.0 && metric != VS_METRIC_IP)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must not be negative, not %g", radius),
				 errhint("%s distances (operator %s) are never negative; only the inner product "
						 "range operator <<#>> takes a negative radius.",
						 vs_metric_name(metric), vs_metric_operator(metric))));
}

static Datum
vector_within(FunctionCallInfo fcinfo, vs_metric metric)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);
	Vector	   *center;
	double		radius;
	double		distance;

	if (!vs_sphere_get(PG_GETARG_DATUM(1), &center, &radius))
		PG_RETURN_NULL();
	vs_check_radius(metric, radius);
	vector_check_same_dim(a->dim, center->dim);
	/* exactly what the distance operator computes (vector_ops.c) */
	distance = vs_operator_distance(metric, a->x, center->x, a->dim);
	PG_RETURN_BOOL(distance <= radius);	/* false for NaN, as float8le */
}

PG_FUNCTION_INFO_V1(vector_l2_within);
Datum
vector_l2_within(PG_FUNCTION_ARGS)
{
	return vector_within(fcinfo, VS_METRIC_L2);
}

PG_FUNCTION_INFO_V1(vector_ip_within);
Datum
vector_ip_within(PG_FUNCTION_ARGS)
{
	return vector_within(fcinfo, VS_METRIC_IP);
}

PG_FUNCTION_INFO_V1(vector_cosine_within);
Datum
vector_cosine_within(PG_FUNCTION_ARGS)
{
	return vector_within(fcinfo, VS_METRIC_COSINE);
}

PG_FUNCTION_INFO_V1(vector_l1_within);
Datum
vector_l1_within(PG_FUNCTION_ARGS)
{
	return vector_within(fcinfo, VS_METRIC_L1);
}

/* sphere(center, radius): the composite; the radius must be finite (its sign is the operator's
 * business). */
PG_FUNCTION_INFO_V1(vsearch_sphere);
Datum
vsearch_sphere(PG_FUNCTION_ARGS)
{
	double		radius = PG_GETARG_FLOAT8(1);
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (isnan(radius) || isinf(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must be a finite number, not %g", radius),
				 errhint("The radius is the largest distance a row may have.")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "sphere() must return a composite type");
	desc = BlessTupleDesc(desc);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = Float8GetDatum(radius);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
