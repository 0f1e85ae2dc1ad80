/*
 * The two steps of the sharded batch functions (extension/sql/50-shards.sql, docs/SHARDING.md)
 * that SQL does slowly:
 *
 *   vsearch_unpack_vectors(bytea) RETURNS vector[]
 *     the inverse of array_send(vector[]): the coordinator sends a shard its queries in binary
 *     (as a hex bytea literal), since dblink has no parameters and printing and parsing float
 *     text costs more than the search on a GPU;
 *   vsearch_merge_batch(queries integer[], ids bigint[], distances double precision[], k integer)
 *     RETURNS TABLE (query integer, id bigint, distance double precision)
 *     the shards' answers, concatenated, ordered by query, distance and id, with the first k of
 *     each query (all of them when k is NULL): one in-memory sort instead of a window over a
 *     tuplesort that spills to disk at the default work_mem.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "port/pg_bswap.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

/* array_send's header: int32 ndim, int32 has-nulls flag, Oid element type, then the dimensions */
#define ARRAY_BINARY_ELEMTYPE	(2 * (int) sizeof(int32))

PG_FUNCTION_INFO_V1(vsearch_unpack_vectors);
Datum
vsearch_unpack_vectors(PG_FUNCTION_ARGS)
{
	bytea	   *packed = PG_GETARG_BYTEA_PP(0);
	Oid			array_type = get_fn_expr_rettype(fcinfo->flinfo);
	Oid			recv;
	Oid			ioparam;
	StringInfoData buf;
	Datum		result;

	/* array_recv null-terminates each element in place for a moment: give it its own copy */
	initStringInfo(&buf);
	appendBinaryStringInfo(&buf, VARDATA_ANY(packed), VARSIZE_ANY_EXHDR(packed));
	/* the header names the element type by the sender's OID: vector's differs on each server */
	if (buf.len >= ARRAY_BINARY_ELEMTYPE + (int) sizeof(Oid))
	{
		uint32		local = pg_hton32(get_element_type(array_type));

		memcpy(buf.data + ARRAY_BINARY_ELEMTYPE, &local, sizeof(local));
	}
	getTypeBinaryInputInfo(array_type, &recv, &ioparam);
	result = OidReceiveFunctionCall(recv, &buf, ioparam, -1);
	if (buf.cursor != buf.len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("invalid binary data for type %s", format_type_be(array_type)),
				 errdetail("%d bytes follow the array.", buf.len - buf.cursor)));
	PG_RETURN_DATUM(result);
}

typedef struct MergeRow
{
	int32		query;
	int64		id;
	float8		distance;
} MergeRow;

/* By query, then distance (NaN after every number, as ORDER BY puts it), then id. */
static int
merge_row_cmp(const void *a, const void *b)
{
	const MergeRow *x = a;
	const MergeRow *y = b;

	if (x->query != y->query)
		return x->query < y->query ? -1 : 1;
	if (isnan(x->distance) || isnan(y->distance))
	{
		if (!isnan(y->distance))
			return 1;
		if (!isnan(x->distance))
			return -1;
	}
	else if (x->distance != y->distance)
		return x->distance < y->distance ? -1 : 1;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return 0;
}

/* The elements of a one-dimensional array without NULLs, of the given type. */
static Datum *
merge_elements(ArrayType *array, Oid type, const char *what, int *n)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *values;
	bool	   *nulls;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, type, typlen, typbyval, typalign, &values, &nulls, n);
	for (int i = 0; i < *n; i++)
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain NULLs", what)));
	return values;
}

PG_FUNCTION_INFO_V1(vsearch_merge_batch);
Datum
vsearch_merge_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum	   *queries;
	Datum	   *ids;
	Datum	   *distances;
	int			n;
	int			n_ids;
	int			n_distances;
	int32		k;
	MergeRow   *rows;
	int			taken = 0;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("vsearch_merge_batch needs three arrays")));
	k = PG_ARGISNULL(3) ? PG_INT32_MAX : PG_GETARG_INT32(3);
	if (k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1")));
	queries = merge_elements(PG_GETARG_ARRAYTYPE_P(0), INT4OID, "queries", &n);
	ids = merge_elements(PG_GETARG_ARRAYTYPE_P(1), INT8OID, "ids", &n_ids);
	distances = merge_elements(PG_GETARG_ARRAYTYPE_P(2), FLOAT8OID, "distances", &n_distances);
	if (n_ids != n || n_distances != n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("the arrays of queries, ids and distances differ in length: %d, %d, %d",
						n, n_ids, n_distances)));

	rows = MemoryContextAllocHuge(CurrentMemoryContext, sizeof(MergeRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		rows[i].query = DatumGetInt32(queries[i]);
		rows[i].id = DatumGetInt64(ids[i]);
		rows[i].distance = DatumGetFloat8(distances[i]);
	}
	qsort(rows, n, sizeof(MergeRow), merge_row_cmp);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		taken = (i > 0 && rows[i].query == rows[i - 1].query) ? taken + 1 : 1;
		if (taken > k)
			continue;
		values[0] = Int32GetDatum(rows[i].query);
		values[1] = Int64GetDatum(rows[i].id);
		values[2] = Float8GetDatum(rows[i].distance);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
