/*
 * The `vector` type: a varlena of float4 values.
 *
 * The layout is pgvector's, byte for byte (varlena header, int16 dim, int16 unused = 0, float4[]),
 * so a pgvector dump or binary COPY loads unchanged.  Values are always finite and a vector has
 * 1..VECTOR_MAX_DIM elements; every function that builds a vector enforces that.
 */
#ifndef VSEARCH_VECTOR_H
#define VSEARCH_VECTOR_H

#include "access/attnum.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/relcache.h"

#define VECTOR_MAX_DIM 16000

typedef struct Vector
{
	int32		vl_len_;		/* varlena header (do not touch directly) */
	int16		dim;			/* number of elements */
	int16		unused;			/* always 0; kept for pgvector's layout */
	float		x[FLEXIBLE_ARRAY_MEMBER];
} Vector;

#define VECTOR_SIZE(dim)		(offsetof(Vector, x) + sizeof(float) * (dim))

/* Detoasting also expands short (1-byte) headers, so x[] is always aligned. */
#define DatumGetVectorP(d)		((Vector *) PG_DETOAST_DATUM(d))
#define PG_GETARG_VECTOR_P(n)	DatumGetVectorP(PG_GETARG_DATUM(n))
#define PG_RETURN_VECTOR_P(v)	PG_RETURN_POINTER(v)

/* A zeroed vector of dim elements, palloc'd in the current memory context. */
extern Vector *vector_new(int dim);

/* ERROR unless 1 <= dim <= VECTOR_MAX_DIM. */
extern void vector_check_dim(int dim);

/* ERROR unless typmod is -1 (unconstrained) or equals dim. */
extern void vector_check_typmod(int32 typmod, int dim);

/* ERROR if value is NaN or infinite. */
extern void vector_check_element(float value);

/* ERROR unless both operands have the same number of dimensions. */
extern void vector_check_same_dim(int dim_a, int dim_b);

/* The elements of a text literal '[1,2.5,-3]' (palloc'd, *dim of them): ERROR 22P02 on bad syntax,
 * 22003 on overflow, 22000 on NaN, infinity or no element, 54000 beyond VECTOR_MAX_DIM; messages
 * name type_name.  Values too small for a float become a signed zero or a denormal. */
extern float *vector_parse_literal(const char *literal, const char *type_name, int *dim);

/* The dimension of a type modifier (n): ERROR 22023 unless one value in 1..max_dim (messages name
 * type_name).  The typmod_in of vector, halfvec and sparsevec. */
extern int32 vector_typmod_parse(ArrayType *modifiers, const char *type_name, int max_dim);

/* ERROR 22P03 "invalid binary data for type <type_name>" with message as its detail: the recv
 * functions of vector, halfvec and sparsevec. */
extern void vector_binary_error(const char *type_name, const char *message) pg_attribute_noreturn();

/* One element of a text literal at p, its end in *end: false if p starts no number; ERROR 22003
 * on overflow, 22000 on NaN or infinity (messages name type_name); values too small for a float
 * become a signed zero or a denormal.  vector, halfvec and sparsevec literals parse through it. */
extern bool vector_parse_element(const char *p, char **end, const char *type_name, float *value);

/* '[1,2.5,-3]': each element in the shortest form that reads back to the same float. */
extern char *vector_format(const float *x, int dim);

/* subvector(v, start, count)'s elements, counted from 1, of a dim-element value: the 0-based
 * *first and the *count kept; ERROR 22000 (naming type_name) when none is (vector_func.c). */
extern void vector_subvector_range(int dim, int32 start, int32 count, const char *type_name,
								   int *first, int *kept);

/* A datum of type vector or halfvec as a Vector, for index code whose operator classes serve both
 * types: detoasted, and a halfvec converted to floats (exactly; palloc'd in the current memory
 * context).  The two layouts differ only in the element size, so the varlena size tells them
 * apart (4 or 2 bytes for each of the dim elements of the header); any other size is an ERROR
 * (halfvec.c). */
extern Vector *vs_datum_vector(Datum datum);

/* An index's column value as a Vector: vs_datum_vector, or for an index over a sparsevec column
 * (sparse, from vs_index_is_sparsevec) the dense vector of the sparsevec: ERROR 54000 beyond
 * VECTOR_MAX_DIM dimensions (sparsevec.c). */
extern Vector *vs_index_vector(Datum datum, bool sparse);
extern bool vs_index_is_sparsevec(Relation index);
extern bool vs_index_is_halfvec(Relation index);

/* The btree functions of a type, prefix_cmp, _lt, _le, _eq, _ne, _ge and _gt, from its three-way
 * comparison compare(fcinfo) (< 0, 0, > 0 for the two arguments). */
#define VS_DEFINE_ORDER_FUNCTIONS(prefix, compare) \
	PG_FUNCTION_INFO_V1(prefix##_cmp); \
	Datum prefix##_cmp(PG_FUNCTION_ARGS) { PG_RETURN_INT32(compare(fcinfo)); } \
	PG_FUNCTION_INFO_V1(prefix##_lt); \
	Datum prefix##_lt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) < 0); } \
	PG_FUNCTION_INFO_V1(prefix##_le); \
	Datum prefix##_le(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) <= 0); } \
	PG_FUNCTION_INFO_V1(prefix##_eq); \
	Datum prefix##_eq(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) == 0); } \
	PG_FUNCTION_INFO_V1(prefix##_ne); \
	Datum prefix##_ne(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) != 0); } \
	PG_FUNCTION_INFO_V1(prefix##_ge); \
	Datum prefix##_ge(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) >= 0); } \
	PG_FUNCTION_INFO_V1(prefix##_gt); \
	Datum prefix##_gt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare(fcinfo) > 0); }

/* Planner cost of one distance between vectors of dim dimensions (0: unknown) computed in a
 * backend, and of fetching a dim-dimensional vector of column attnum of relid when it is likely
 * stored out of line (0 otherwise): vector_cost.c. */
extern double vs_distance_cost(int dim);
extern double vs_detoast_cost(Oid relid, AttrNumber attnum, int dim);

#endif							/* VSEARCH_VECTOR_H */
