/*
 * The `vector` type itself: validation helpers, text and binary I/O, and the type modifier.
 *
 * Operators and distances are in vector_ops.c, casts in vector_cast.c, aggregates in
 * vector_agg.c.
 */
#include "postgres.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "common/shortest_dec.h"
#include "fmgr.h"
#include "libpq/pqformat.h"
#include "parser/scansup.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "vector.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers shared by every file that builds or combines vectors
 */

Vector *
vector_new(int dim)
{
	Vector	   *result = (Vector *) palloc0(VECTOR_SIZE(dim));

	SET_VARSIZE(result, VECTOR_SIZE(dim));
	result->dim = dim;
	return result;
}

void
vector_check_dim(int dim)
{
	if (dim < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("vector must have at least 1 dimension")));
	if (dim > VECTOR_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vector cannot have more than %d dimensions", VECTOR_MAX_DIM)));
}

void
vector_check_typmod(int32 typmod, int dim)
{
	if (typmod != -1 && typmod != dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %d dimensions, not %d", typmod, dim)));
}

void
vector_check_element(float value)
{
	if (isnan(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("NaN not allowed in vector")));
	if (isinf(value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("infinite value not allowed in vector")));
}

void
vector_check_same_dim(int dim_a, int dim_b)
{
	if (dim_a != dim_b)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("different vector dimensions %d and %d", dim_a, dim_b)));
}

/* ---------------------------------------------------------------------------------------------
 * Text I/O: '[1,2.5,-3e-2]', whitespace allowed around brackets and elements
 */

static void
vector_syntax_error(const char *type_name, const char *literal, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("invalid input syntax for type %s: \"%s\"", type_name, literal),
			 errdetail("%s", detail),
			 errhint("A %s literal looks like '[1,2.5,-3]'.", type_name)));
}

static const char *
skip_space(const char *p)
{
	while (scanner_isspace(*p))
		p++;
	return p;
}

/* Number of elements the literal can hold at most: one more than its commas, capped. */
static int
max_elements(const char *literal)
{
	int			commas = 0;

	for (const char *p = literal; *p != '\0' && commas < VECTOR_MAX_DIM; p++)
		if (*p == ',')
			commas++;
	return commas + 1;
}

bool
vector_parse_element(const char *p, char **end, const char *type_name, float *value)
{
	errno = 0;
	*value = strtof(p, end);
	if (*end == p)
		return false;
	/* Overflow to infinity is an error; a value too small for a float becomes a (signed) zero or
	 * a denormal, as in pgvector (glibc reports ERANGE for both). */
	if (errno == ERANGE && isinf(*value))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("\"%s\" is out of range for type %s", pnstrdup(p, *end - p), type_name)));
	if (isnan(*value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("NaN not allowed in %s", type_name)));
	if (isinf(*value))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("infinite value not allowed in %s", type_name)));
	return true;
}

float *
vector_parse_literal(const char *literal, const char *type_name, int *dim_out)
{
	int			capacity = max_elements(literal);
	float	   *values = (float *) palloc(sizeof(float) * capacity);
	int			dim = 0;
	const char *p = skip_space(literal);

	if (*p != '[')
		vector_syntax_error(type_name, literal, "Vector contents must start with \"[\".");
	p = skip_space(p + 1);
	if (*p == ']')
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("%s must have at least 1 dimension", type_name)));

	for (;;)
	{
		char	   *end;
		float		value;

		if (*p == ',' || *p == ']')
			vector_syntax_error(type_name, literal, "Vector contents contain an empty element.");
		if (*p == '\0')
			vector_syntax_error(type_name, literal, "Vector contents must end with \"]\".");
		if (dim == VECTOR_MAX_DIM)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("%s cannot have more than %d dimensions", type_name, VECTOR_MAX_DIM)));

		if (!vector_parse_element(p, &end, type_name, &value))
			vector_syntax_error(type_name, literal, "Vector elements must be numbers.");
		values[dim++] = value;

		p = skip_space(end);
		if (*p == ',')
			p = skip_space(p + 1);
		else if (*p == ']')
			break;
		else if (*p == '\0')
			vector_syntax_error(type_name, literal, "Vector contents must end with \"]\".");
		else
			vector_syntax_error(type_name, literal, "Vector elements must be separated by \",\".");
	}

	if (*skip_space(p + 1) != '\0')
		vector_syntax_error(type_name, literal, "Junk after closing right bracket.");
	*dim_out = dim;
	return values;
}

PG_FUNCTION_INFO_V1(vector_in);
Datum
vector_in(PG_FUNCTION_ARGS)
{
	char	   *literal = PG_GETARG_CSTRING(0);
	int32		typmod = PG_GETARG_INT32(2);
	int			dim;
	float	   *values = vector_parse_literal(literal, "vector", &dim);
	Vector	   *result;

	vector_check_typmod(typmod, dim);
	result = vector_new(dim);
	memcpy(result->x, values, sizeof(float) * dim);
	pfree(values);
	PG_RETURN_VECTOR_P(result);
}

char *
vector_format(const float *x, int dim)
{
	/* '[' + dim numbers of at most FLOAT_SHORTEST_DECIMAL_LEN - 1 chars + dim separators + NUL */
	char	   *result = palloc((Size) dim * FLOAT_SHORTEST_DECIMAL_LEN + 2);
	char	   *p = result;

	*p++ = '[';
	for (int i = 0; i < dim; i++)
	{
		if (i > 0)
			*p++ = ',';
		p += float_to_shortest_decimal_bufn(x[i], p);
	}
	*p++ = ']';
	*p = '\0';
	return result;
}

/* Elements print in the shortest form that reads back to the same float, whatever
 * extra_float_digits says, so that text dumps round-trip exactly (as pgvector does). */
PG_FUNCTION_INFO_V1(vector_out);
Datum
vector_out(PG_FUNCTION_ARGS)
{
	Vector	   *vector = PG_GETARG_VECTOR_P(0);
	char	   *result = vector_format(vector->x, vector->dim);

	PG_FREE_IF_COPY(vector, 0);
	PG_RETURN_CSTRING(result);
}

/* ---------------------------------------------------------------------------------------------
 * Type modifier: vector(n) with 1 <= n <= VECTOR_MAX_DIM
 */

int32
vector_typmod_parse(ArrayType *modifiers, const char *type_name, int max_dim)
{
	int			count;
	int32	   *values = ArrayGetIntegerTypmods(modifiers, &count);

	if (count != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid type modifier"),
				 errhint("Type %s takes one modifier, the number of dimensions.", type_name)));
	if (values[0] < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type %s must be at least 1", type_name)));
	if (values[0] > max_dim)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimensions for type %s cannot exceed %d", type_name, max_dim)));
	return values[0];
}

PG_FUNCTION_INFO_V1(vector_typmod_in);
Datum
vector_typmod_in(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(vector_typmod_parse(PG_GETARG_ARRAYTYPE_P(0), "vector", VECTOR_MAX_DIM));
}

PG_FUNCTION_INFO_V1(vector_typmod_out);
Datum
vector_typmod_out(PG_FUNCTION_ARGS)
{
	int32		typmod = PG_GETARG_INT32(0);

	PG_RETURN_CSTRING(typmod >= 0 ? psprintf("(%d)", typmod) : pstrdup(""));
}

/* ---------------------------------------------------------------------------------------------
 * Binary I/O, pgvector's wire format: int16 dim, int16 unused (0), dim float4, network order
 */

void
vector_binary_error(const char *type_name, const char *message)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
			 errmsg("invalid binary data for type %s", type_name),
			 errdetail("%s", message)));
}

PG_FUNCTION_INFO_V1(vector_recv);
Datum
vector_recv(PG_FUNCTION_ARGS)
{
	StringInfo	buf = (StringInfo) PG_GETARG_POINTER(0);
	int32		typmod = PG_GETARG_INT32(2);
	int			dim;
	int			unused;
	Vector	   *result;

	/* The caller hands over exactly one value: check its length here rather than letting
	 * pq_getmsg* fail later with a protocol error. */
	if (buf->len - buf->cursor < 2 * (int) sizeof(int16))
		vector_binary_error("vector", "The header of 4 bytes is incomplete.");
	dim = (int16) pq_getmsgint(buf, sizeof(int16));
	unused = (int16) pq_getmsgint(buf, sizeof(int16));
	vector_check_dim(dim);
	if (unused != 0)
		vector_binary_error("vector", psprintf("Expected unused to be 0, not %d.", unused));
	if (buf->len - buf->cursor != dim * (int) sizeof(float))
		vector_binary_error("vector",
							psprintf("A vector of %d dimensions needs %d bytes of values, not %d.",
									 dim, dim * (int) sizeof(float), buf->len - buf->cursor));
	vector_check_typmod(typmod, dim);

	result = vector_new(dim);
	for (int i = 0; i < dim; i++)
	{
		result->x[i] = pq_getmsgfloat4(buf);
		vector_check_element(result->x[i]);
	}
	PG_RETURN_VECTOR_P(result);
}

PG_FUNCTION_INFO_V1(vector_send);
Datum
vector_send(PG_FUNCTION_ARGS)
{
	Vector	   *vector = PG_GETARG_VECTOR_P(0);
	StringInfoData buf;

	pq_begintypsend(&buf);
	pq_sendint16(&buf, vector->dim);
	pq_sendint16(&buf, vector->unused);
	for (int i = 0; i < vector->dim; i++)
		pq_sendfloat4(&buf, vector->x[i]);
	PG_FREE_IF_COPY(vector, 0);
	PG_RETURN_BYTEA_P(pq_endtypsend(&buf));
}
