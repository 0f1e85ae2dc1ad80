/*
 * The `sparsevec` type (sparsevec.h): text and binary I/O, the type modifier, casts to and from
 * `vector` and `halfvec`, distances, norms, ordering, and the dense form index code reads.
 *
 * Distances are the engine's exact distance of the dense vectors (vs_operator_distance_sparse),
 * computed over the non-zero elements only: the same number the vector operators give for the
 * same values, and what a vs_flat index over a sparsevec column returns.
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "halfvec.h"
#include "search.h"
#include "sparsevec.h"
#include "vector.h"

/* vector_to_halfvec (halfvec.c) rounds and range-checks the cast to halfvec. */
extern Datum vector_to_halfvec(PG_FUNCTION_ARGS);

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */

static SparseVector *
sparsevec_new(int dim, int nnz)
{
	SparseVector *result = (SparseVector *) palloc0(SPARSEVEC_SIZE(nnz));

	SET_VARSIZE(result, SPARSEVEC_SIZE(nnz));
	result->dim = dim;
	result->nnz = nnz;
	return result;
}

static void
sparsevec_check_dim(int64 dim)
{
	if (dim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("sparsevec must have at least 1 dimension")));
	if (dim > SPARSEVEC_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("sparsevec cannot have more than %d dimensions", SPARSEVEC_MAX_DIM)));
}

static void
sparsevec_check_nnz(int64 nnz)
{
	if (nnz > SPARSEVEC_MAX_NNZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("sparsevec cannot have more than %d non-zero elements", SPARSEVEC_MAX_NNZ)));
}

static void
sparsevec_check_same_dim(int dim_a, int dim_b)
{
	if (dim_a != dim_b)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different sparsevec dimensions %d and %d", dim_a, dim_b)));
}

/* The non-zero elements of x (dim finite floats) as a sparsevec. */
static SparseVector *
sparsevec_from_dense(const float *x, int dim)
{
	int			nnz = 0;
	SparseVector *result;
	float	   *values;

	for (int i = 0; i < dim; i++)
		if (x[i] != 0.0f)
			nnz++;
	sparsevec_check_nnz(nnz);
	result = sparsevec_new(dim, nnz);
	values = sparsevec_values(result);
	nnz = 0;
	for (int i = 0; i < dim; i++)
		if (x[i] != 0.0f)
		{
			result->indices[nnz] = i;
			values[nnz++] = x[i];
		}
	return result;
}

/* The dense vector of a (ERROR beyond VECTOR_MAX_DIM dimensions). */
static Vector *
sparsevec_to_dense(SparseVector *a)
{
	const float *values = sparsevec_values(a);
	Vector	   *result;

	if (a->dim > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a sparsevec of %d dimensions has no dense form", a->dim),
				 errdetail("vector, halfvec and the vsearch indexes hold at most %d dimensions.",
						   VECTOR_MAX_DIM)));
	result = vector_new(a->dim);
	for (int i = 0; i < a->nnz; i++)
		result->x[a->indices[i]] = values[i];
	return result;
}

/* ---------------------------------------------------------------------------------------------
 * Text I/O: '{1:1.5,3:-2}/5', indices counted from 1, whitespace allowed around every token
 */

typedef struct SparseElement
{
	int64		index;			/* as written: 1-based, not yet checked */
	float		value;
} SparseElement;

static void
sparsevec_syntax_error(const char *literal, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type sparsevec: \"%s\"", literal),
			 errdetail("%s", detail),
			 errhint("A sparsevec literal looks like '{1:1.5,3:-2}/5': index:value pairs of the "
					 "non-zero elements, counted from 1, then the number of dimensions.")));
}

static const char *
skip_space(const char *p)
{
	while (scanner_isspace(*p))
		p++;
	return p;
}

/* An integer at p (optional sign, digits); false if there is none.  Out of int64's range it
 * saturates: the range checks that follow reject it with the right message. */
static bool
parse_integer(const char *p, char **end, int64 *value)
{
	long long	v;

	if (!(isdigit((unsigned char) *p) ||
		  ((*p == '-' || *p == '+') && isdigit((unsigned char) p[1]))))
		return false;
	v = strtoll(p, end, 10);
	*value = v;
	return true;
}

static int
element_order(const void *a, const void *b)
{
	int64		x = ((const SparseElement *) a)->index;
	int64		y = ((const SparseElement *) b)->index;

	return x < y ? -1 : x > y ? 1 : 0;
}

PG_FUNCTION_INFO_V1(sparsevec_in);
Datum
sparsevec_in(PG_FUNCTION_ARGS)
{
	char	   *literal = PG_GETARG_CSTRING(0);
	int32		typmod = PG_GETARG_INT32(2);
	int			capacity = 1;
	SparseElement *elements;
	int			count = 0;
	int			nnz = 0;
	int64		dim;
	const char *p = skip_space(literal);
	char	   *end;
	SparseVector *result;
	float	   *values;

	for (const char *q = literal; *q != '\0'; q++)
		if (*q == ',')
			capacity++;
	/* zeros take room here too: a long literal of zeros may need more than MaxAllocSize */
	elements = (SparseElement *) palloc_extended(sizeof(SparseElement) * (Size) capacity,
												 MCXT_ALLOC_HUGE);

	if (*p != '{')
		sparsevec_syntax_error(literal, "Sparse vector contents must start with \"{\".");
	p = skip_space(p + 1);
	if (*p != '}')
		for (;;)
		{
			SparseElement *e = &elements[count++];

			if ((count & 0xFFFF) == 0)
				CHECK_FOR_INTERRUPTS();	/* a literal may list millions of zeros */
			if (!parse_integer(p, &end, &e->index))
				sparsevec_syntax_error(literal, "Each element must start with an integer index.");
			p = skip_space(end);
			if (*p != ':')
				sparsevec_syntax_error(literal, "An index must be followed by \":\".");
			p = skip_space(p + 1);
			if (!vector_parse_element(p, &end, "sparsevec", &e->value))
				sparsevec_syntax_error(literal, "Element values must be numbers.");
			p = skip_space(end);
			if (*p == '}')
				break;
			if (*p != ',')
				sparsevec_syntax_error(literal, *p == '\0' ? "Unexpected end of input." :
									   "Elements must be separated by \",\".");
			p = skip_space(p + 1);
		}
	p = skip_space(p + 1);
	if (*p != '/')
		sparsevec_syntax_error(literal, *p == '\0' ? "Unexpected end of input." :
							   "The elements must be followed by \"/\" and the dimensions.");
	p = skip_space(p + 1);
	if (!parse_integer(p, &end, &dim))
		sparsevec_syntax_error(literal, "The dimensions must be an integer.");
	if (*skip_space(end) != '\0')
		sparsevec_syntax_error(literal, "Junk after the dimensions.");

	sparsevec_check_dim(dim);
	for (int i = 0; i < count; i++)
	{
		if (elements[i].index < 1)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("sparsevec index out of bounds (< 1)"),
					 errhint("Indices are counted from 1.")));
		if (elements[i].index > dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("sparsevec index out of bounds (> dimensions)"),
					 errdetail("Index " INT64_FORMAT " of a sparsevec of " INT64_FORMAT
							   " dimensions.", elements[i].index, dim)));
	}
	/* any order is accepted, as in pgvector; stored sorted */
	qsort(elements, count, sizeof(SparseElement), element_order);
	for (int i = 0; i < count; i++)
	{
		if (i > 0 && elements[i].index == elements[i - 1].index)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("sparsevec indices must not contain duplicates"),
					 errdetail("Index " INT64_FORMAT " appears more than once.",
							   elements[i].index)));
		if (elements[i].value != 0.0f)
			nnz++;
	}
	sparsevec_check_nnz(nnz);
	vector_check_typmod(typmod, (int) dim);

	result = sparsevec_new((int) dim, nnz);
	values = sparsevec_values(result);
	nnz = 0;
	for (int i = 0; i < count; i++)
		if (elements[i].value != 0.0f)
		{
			result->indices[nnz] = (int32) (elements[i].index - 1);
			values[nnz++] = elements[i].value;
		}
	pfree(elements);
	PG_RETURN_SPARSEVEC_P(result);
}

/* Each value in the shortest form that reads back to the same float. */
PG_FUNCTION_INFO_V1(sparsevec_out);
Datum
sparsevec_out(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);
	const float *values = sparsevec_values(a);
	/* per element: an index of at most 10 digits, ':', a float, ','; then '}/' and 10 digits */
	char	   *result = palloc((Size) a->nnz * (12 + FLOAT_SHORTEST_DECIMAL_LEN) + 16);
	char	   *p = result;

	*p++ = '{';
	for (int i = 0; i < a->nnz; i++)
	{
		if (i > 0)
			*p++ = ',';
		p += sprintf(p, "%d:", a->indices[i] + 1);
		p += float_to_shortest_decimal_bufn(values[i], p);
	}
	sprintf(p, "}/%d", a->dim);
	PG_RETURN_CSTRING(result);
}

PG_FUNCTION_INFO_V1(sparsevec_typmod_in);
Datum
sparsevec_typmod_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(vector_typmod_parse(PG_GETARG_ARRAYTYPE_P(0), "sparsevec", SPARSEVEC_MAX_DIM));
}

/* ---------------------------------------------------------------------------------------------
 * Binary I/O, pgvector's wire format: int32 dim, int32 nnz, int32 unused (0), nnz int32 0-based
 * indices, nnz float4 values, network order
 */

PG_FUNCTION_INFO_V1(sparsevec_recv);
Datum
sparsevec_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int32		typmod = PG_GETARG_INT32(2);
	int32		dim;
	int32		nnz;
	int32		unused;
	SparseVector *result;
	float	   *values;

	if (buf->len - buf->cursor < 3 * (int) sizeof(int32))
		vector_binary_error("sparsevec", "The header of 12 bytes is incomplete.");
	dim = pq_getmsgint(buf, sizeof(int32));
	nnz = pq_getmsgint(buf, sizeof(int32));
	unused = pq_getmsgint(buf, sizeof(int32));
	sparsevec_check_dim(dim);
	if (nnz < 0 || nnz > dim)
		vector_binary_error("sparsevec",
							psprintf("%d non-zero elements in %d dimensions.", nnz, dim));
	sparsevec_check_nnz(nnz);
	if (unused != 0)
		vector_binary_error("sparsevec", psprintf("Expected unused to be 0, not %d.", unused));
	if (buf->len - buf->cursor != nnz * (int) (sizeof(int32) + sizeof(float)))
		vector_binary_error("sparsevec",
							psprintf("%d elements need %d bytes, not %d.", nnz,
									 nnz * (int) (sizeof(int32) + sizeof(float)),
									 buf->len - buf->cursor));
	vector_check_typmod(typmod, dim);

	result = sparsevec_new(dim, nnz);
	values = sparsevec_values(result);
	for (int i = 0; i < nnz; i++)
	{
		result->indices[i] = pq_getmsgint(buf, sizeof(int32));
		if (result->indices[i] < 0 || result->indices[i] >= dim)
			vector_binary_error("sparsevec",
								psprintf("Index %d is out of bounds for %d dimensions.",
										 result->indices[i], dim));
		if (i > 0 && result->indices[i] <= result->indices[i - 1])
			vector_binary_error("sparsevec",
								psprintf("Indices must be strictly increasing: %d after %d.",
										 result->indices[i], result->indices[i - 1]));
	}
	for (int i = 0; i < nnz; i++)
	{
		values[i] = pq_getmsgfloat4(buf);
		if (isnan(values[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("NaN not allowed in sparsevec")));
		if (isinf(values[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("infinite value not allowed in sparsevec")));
		if (values[i] == 0.0f)
			vector_binary_error("sparsevec",
								psprintf("Element %d is zero: only non-zero elements are sent.",
										 result->indices[i] + 1));
	}
	PG_RETURN_SPARSEVEC_P(result);
}

PG_FUNCTION_INFO_V1(sparsevec_send);
Datum
sparsevec_send(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);
	const float *values = sparsevec_values(a);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint32(&buf, a->dim);
	pq_sendint32(&buf, a->nnz);
	pq_sendint32(&buf, a->unused);
	for (int i = 0; i < a->nnz; i++)
		pq_sendint32(&buf, a->indices[i]);
	for (int i = 0; i < a->nnz; i++)
		pq_sendfloat4(&buf, values[i]);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}

/* ---------------------------------------------------------------------------------------------
 * Casts, each with pgvector's (value, typmod, is_explicit) arguments
 */

PG_FUNCTION_INFO_V1(sparsevec_coerce_typmod);
Datum
sparsevec_coerce_typmod(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);

	vector_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_SPARSEVEC_P(a);
}

PG_FUNCTION_INFO_V1(vector_to_sparsevec);
Datum
vector_to_sparsevec(PG_FUNCTION_ARGS)
{
	Vector	   *a = PG_GETARG_VECTOR_P(0);

	vector_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_SPARSEVEC_P(sparsevec_from_dense(a->x, a->dim));
}

/* halfvec to sparsevec: through the halves' float values (vs_datum_vector widens them exactly). */
PG_FUNCTION_INFO_V1(halfvec_to_sparsevec);
Datum
halfvec_to_sparsevec(PG_FUNCTION_ARGS)
{
	Vector	   *a = vs_datum_vector(PG_GETARG_DATUM(0));

	vector_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_SPARSEVEC_P(sparsevec_from_dense(a->x, a->dim));
}

PG_FUNCTION_INFO_V1(sparsevec_to_vector);
Datum
sparsevec_to_vector(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);

	vector_check_typmod(PG_GETARG_INT32(1), a->dim);
	PG_RETURN_VECTOR_P(sparsevec_to_dense(a));
}

/* sparsevec to halfvec: the dense vector rounded to halves (ERROR beyond the half range). */
PG_FUNCTION_INFO_V1(sparsevec_to_halfvec);
Datum
sparsevec_to_halfvec(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);

	return DirectFunctionCall3(vector_to_halfvec, PointerGetDatum(sparsevec_to_dense(a)),
							   PG_GETARG_DATUM(1), PG_GETARG_DATUM(2));
}

/* ---------------------------------------------------------------------------------------------
 * Distances: the exact distance of the dense vectors, over the non-zero elements
 */

static double
sparsevec_metric(vs_metric metric, FunctionCallInfo fcinfo)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);
	SparseVector *b = PG_GETARG_SPARSEVEC_P(1);
	double		distance;

	sparsevec_check_same_dim(a->dim, b->dim);
	distance = vs_operator_distance_sparse(metric, a->indices, sparsevec_values(a), a->nnz,
										   b->indices, sparsevec_values(b), b->nnz);
	PG_FREE_IF_COPY(a, 0);
	PG_FREE_IF_COPY(b, 1);
	return distance;
}

PG_FUNCTION_INFO_V1(sparsevec_l2_distance);
Datum
sparsevec_l2_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(sparsevec_metric(VS_METRIC_L2, fcinfo));
}

PG_FUNCTION_INFO_V1(sparsevec_negative_inner_product);
Datum
sparsevec_negative_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(sparsevec_metric(VS_METRIC_IP, fcinfo));
}

PG_FUNCTION_INFO_V1(sparsevec_inner_product);
Datum
sparsevec_inner_product(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(-sparsevec_metric(VS_METRIC_IP, fcinfo));
}

PG_FUNCTION_INFO_V1(sparsevec_cosine_distance);
Datum
sparsevec_cosine_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(sparsevec_metric(VS_METRIC_COSINE, fcinfo));
}

PG_FUNCTION_INFO_V1(sparsevec_l1_distance);
Datum
sparsevec_l1_distance(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(sparsevec_metric(VS_METRIC_L1, fcinfo));
}

/* ---------------------------------------------------------------------------------------------
 * Norms
 */

/* The Euclidean norm, summed in double (no float element can overflow it). */
static double
sparsevec_norm(SparseVector *a)
{
	const float *values = sparsevec_values(a);
	double		sum = 0.0;

	for (int i = 0; i < a->nnz; i++)
		sum += (double) values[i] * (double) values[i];
	return sqrt(sum);
}

PG_FUNCTION_INFO_V1(sparsevec_l2_norm);
Datum
sparsevec_l2_norm(PG_FUNCTION_ARGS)
{
	PG_RETURN_FLOAT8(sparsevec_norm(PG_GETARG_SPARSEVEC_P(0)));
}

/* The sparsevec scaled to norm 1; elements that round to zero are dropped; the zero vector stays
 * zero. */
PG_FUNCTION_INFO_V1(sparsevec_l2_normalize);
Datum
sparsevec_l2_normalize(PG_FUNCTION_ARGS)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);
	const float *values = sparsevec_values(a);
	double		norm = sparsevec_norm(a);
	float	   *scaled = palloc(sizeof(float) * Max(a->nnz, 1));
	int			nnz = 0;
	SparseVector *result;
	float	   *result_values;

	for (int i = 0; i < a->nnz; i++)
	{
		scaled[i] = (float) (values[i] / norm);
		/* dividing by a denormal norm can overflow */
		if (isinf(scaled[i]))
			float_overflow_error();
		if (scaled[i] != 0.0f)
			nnz++;
	}
	result = sparsevec_new(a->dim, nnz);
	result_values = sparsevec_values(result);
	nnz = 0;
	for (int i = 0; i < a->nnz; i++)
		if (scaled[i] != 0.0f)
		{
			result->indices[nnz] = a->indices[i];
			result_values[nnz++] = scaled[i];
		}
	PG_RETURN_SPARSEVEC_P(result);
}

/* ---------------------------------------------------------------------------------------------
 * Ordering for btree: the dense vectors element by element (-0 = 0), then the shorter first, as
 * vectors compare
 */

static int
sparsevec_compare(FunctionCallInfo fcinfo)
{
	SparseVector *a = PG_GETARG_SPARSEVEC_P(0);
	SparseVector *b = PG_GETARG_SPARSEVEC_P(1);
	const float *av = sparsevec_values(a);
	const float *bv = sparsevec_values(b);
	int			common = Min(a->dim, b->dim);
	int			i = 0;
	int			j = 0;
	int			order = 0;

	/* the first position below common where the two differ decides; positions where neither
	 * has an element are equal (0 = 0) */
	while (order == 0)
	{
		int			ia = i < a->nnz ? a->indices[i] : INT_MAX;
		int			ib = j < b->nnz ? b->indices[j] : INT_MAX;
		int			pos = Min(ia, ib);
		float		x;
		float		y;

		if (pos >= common)
			break;
		x = pos == ia ? av[i++] : 0.0f;
		y = pos == ib ? bv[j++] : 0.0f;
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

VS_DEFINE_ORDER_FUNCTIONS(sparsevec, sparsevec_compare)

/* ---------------------------------------------------------------------------------------------
 * vector.h's index helpers: index code reads a sparsevec column as dense vectors
 */

/* Is the index's (first) column of the named type, or a domain over it? */
static bool
index_column_type_is(Relation index, const char *name)
{
	Oid			type = getBaseType(TupleDescAttr(RelationGetDescr(index), 0)->atttypid);
	HeapTuple	tuple = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
	bool		is;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for type %u", type);
	is = strcmp(NameStr(((Form_pg_type) GETSTRUCT(tuple))->typname), name) == 0;
	ReleaseSysCache(tuple);
	return is;
}

/* The layouts of vector and sparsevec cannot be told apart by size, so the index's column type
 * decides (a domain over sparsevec counts as sparsevec). */
bool
vs_index_is_sparsevec(Relation index)
{
	return index_column_type_is(index, "sparsevec");
}

/* A halfvec column (or a domain over halfvec): vs_flat then stores binary16 rows. */
bool
vs_index_is_halfvec(Relation index)
{
	return index_column_type_is(index, "halfvec");
}

Vector *
vs_index_vector(Datum datum, bool sparse)
{
	SparseVector *a;
	Vector	   *result;

	if (!sparse)
		return vs_datum_vector(datum);
	a = DatumGetSparseVectorP(datum);
	result = sparsevec_to_dense(a);
	if ((Pointer) a != DatumGetPointer(datum))
		pfree(a);
	return result;
}
