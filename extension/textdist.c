/*
 * Text under edit distance (textdist.h): the distance operator, the text sphere and the range
 * operator, and the metric of the text operator classes.
 *
 * `a <~> b` is the unit-cost Levenshtein distance between the characters of a and b, as float8
 * (the type every vsearch distance has, so that ORDER BY and the operator classes treat it like
 * the vector ones).  `t <<~>> sphere(c::text, r)` is true iff `t <~> c <= r`, computed by the
 * same function, so the two agree on every row.  Any length works: strings of up to 64
 * characters take the engine's bit-parallel path, longer ones a dynamic program of O(m n) cells
 * that a query cancel interrupts.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "textdist.h"

uint32 *
vs_text_chars(text *t, int *len)
{
	int			nbytes = VARSIZE_ANY_EXHDR(t);
	pg_wchar   *chars = palloc(sizeof(pg_wchar) * (nbytes + 1));

	StaticAssertStmt(sizeof(pg_wchar) == sizeof(uint32), "pg_wchar is 32 bits");
	*len = pg_mb2wchar_with_len(VARDATA_ANY(t), chars, nbytes);
	return (uint32 *) chars;
}

int
vs_text_cancel(void *arg)
{
	return InterruptPending ? 1 : 0;
}

double
vs_text_distance(const uint32 *a, int na, const uint32 *b, int nb)
{
	vs_edit_pattern *p = palloc(sizeof(vs_edit_pattern));
	size_t		d;

	vs_edit_prepare(p, a, na);
	p->cancel = vs_text_cancel;
	d = vs_edit_pattern_distance(p, b, nb, SIZE_MAX);
	pfree(p);
	if (d == VS_EDIT_ABORTED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory computing the edit distance of strings of %d and %d characters",
						na, nb)));
	}
	return (double) d;
}

bool
vs_text_sphere_get(Datum sphere, text **center, double *radius)
{
	HeapTupleHeader tuple = DatumGetHeapTupleHeader(sphere);
	bool		isnull;
	Datum		value;

	value = GetAttributeByNum(tuple, 1, &isnull);
	if (isnull)
		return false;
	*center = DatumGetTextPP(value);
	value = GetAttributeByNum(tuple, 2, &isnull);
	if (isnull)
		return false;
	*radius = DatumGetFloat8(value);
	return true;
}

void
vs_check_text_radius(double radius)
{
	if (isnan(radius) || isinf(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must be a finite number, not %g", radius),
				 errhint("The radius is the largest edit distance (operator <~>) a row may have.")));
	if (radius < 0.0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must not be negative, not %g", radius),
				 errhint("Edit distances (operator <~>) are never negative.")));
}

PG_FUNCTION_INFO_V1(text_levenshtein_distance);
Datum
text_levenshtein_distance(PG_FUNCTION_ARGS)
{
	text	   *a = PG_GETARG_TEXT_PP(0);
	text	   *b = PG_GETARG_TEXT_PP(1);
	int			na,
				nb;
	uint32	   *ca = vs_text_chars(a, &na);
	uint32	   *cb = vs_text_chars(b, &nb);

	PG_RETURN_FLOAT8(vs_text_distance(ca, na, cb, nb));
}

PG_FUNCTION_INFO_V1(text_levenshtein_within);
Datum
text_levenshtein_within(PG_FUNCTION_ARGS)
{
	text	   *a = PG_GETARG_TEXT_PP(0);
	text	   *center;
	double		radius;
	int			na,
				nc;
	uint32	   *ca;
	uint32	   *cc;

	if (!vs_text_sphere_get(PG_GETARG_DATUM(1), &center, &radius))
		PG_RETURN_NULL();
	vs_check_text_radius(radius);
	ca = vs_text_chars(a, &na);
	cc = vs_text_chars(center, &nc);
	/* exactly what the distance operator computes (center first, as `row <~> center` is
	 * symmetric) */
	PG_RETURN_BOOL(vs_text_distance(ca, na, cc, nc) <= radius);
}

/* sphere(center text, radius real): the text_sphere composite; the radius must be finite. */
PG_FUNCTION_INFO_V1(vsearch_text_sphere);
Datum
vsearch_text_sphere(PG_FUNCTION_ARGS)
{
	double		radius = (double) PG_GETARG_FLOAT4(1);
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (isnan(radius) || isinf(radius))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sphere radius must be a finite number, not %g", radius),
				 errhint("The radius is the largest edit distance a row may have.")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "sphere() must return a composite type");
	desc = BlessTupleDesc(desc);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = Float8GetDatum(radius);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* Support function 1 of the text operator classes. */
PG_FUNCTION_INFO_V1(vsearch_metric_levenshtein);
Datum
vsearch_metric_levenshtein(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(VS_METRIC_LEVENSHTEIN);
}
