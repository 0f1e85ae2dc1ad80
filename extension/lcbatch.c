/*
 * The batch functions' text twins for vs_lc and vs_sss indexes on text (textdist.h):
 *
 *   vsearch_knn_batch(index regclass, queries text[], k integer)
 *   vsearch_range_batch(index regclass, queries text[], radius double precision)
 *
 * with the vector versions' output (query: the 1-based position in the array, row_ctid, distance:
 * the edit distance), checks and searches (batch.c): every query of the array goes to the search
 * layer in one request (one GPU batch when the worker serves), the rows' visibility is checked in
 * heap order, and kNN widens until k visible rows are found (vs_batch_knn_exact).  A NULL query
 * matches nothing.  (The vector batch functions serve vs_lc and vs_sss vector indexes through the
 * kinds' range_candidates and batch_knn, the exact strategy of batch.c.)
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "batch.h"
#include "indexkind.h"
#include "sss.h"

/* Opens a vs_lc or vs_sss index on text. */
static void
open_text_index(Oid indexoid, VsBatch *bc)
{
	const VsIndexKind *kind;

	vs_batch_open(indexoid, bc);
	kind = vs_kind_of_index(bc->index);
	if ((kind->id != VS_LC_KIND && kind->id != VS_SSS_KIND) ||
		(int) bc->ref.metric != VS_METRIC_LEVENSHTEIN)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a vs_lc or vs_sss index on text",
						RelationGetRelationName(bc->index)),
				 errhint("Text queries need a vs_lc or vs_sss index with text_levenshtein_ops; "
						 "vector queries are passed as vector[].")));
}

/* The queries' characters, back to back; NULL queries are left out (they match nothing). */
static void
read_text_queries(ArrayType *array, VsBatch *bc)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			m = 0;
	Size		total = 0;
	uint32	  **chars;
	int		   *lens;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("queries must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	chars = palloc(sizeof(uint32 *) * (n + 1));
	lens = palloc(sizeof(int) * (n + 1));
	bc->numbers = palloc(sizeof(int) * (n + 1));
	for (int q = 0; q < n; q++)
	{
		if (nulls[q])
			continue;
		chars[m] = vs_text_chars(DatumGetTextPP(elems[q]), &lens[m]);
		total += lens[m];
		bc->numbers[m++] = q;
	}
	bc->nq = m;
	bc->offsets = palloc_extended(sizeof(uint64) * ((Size) m + 1), MCXT_ALLOC_HUGE);
	bc->chars = palloc_extended(sizeof(uint32) * (total + 1), MCXT_ALLOC_HUGE);
	bc->offsets[0] = 0;
	for (int q = 0; q < m; q++)
	{
		memcpy(bc->chars + bc->offsets[q], chars[q], sizeof(uint32) * lens[q]);
		bc->offsets[q + 1] = bc->offsets[q] + lens[q];
		pfree(chars[q]);
	}
	pfree(chars);
	pfree(lens);
}

PG_FUNCTION_INFO_V1(vsearch_range_batch_text);
Datum
vsearch_range_batch_text(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	double		radius = PG_GETARG_FLOAT8(2);
	VsBatch		bc;

	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	open_text_index(PG_GETARG_OID(0), &bc);
	vs_check_text_radius(radius);
	read_text_queries(PG_GETARG_ARRAYTYPE_P(1), &bc);
	vs_batch_range_answer(rsinfo, &bc, radius);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(vsearch_knn_batch_text);
Datum
vsearch_knn_batch_text(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		k = PG_GETARG_INT32(2);
	VsBatch		bc;

	if (k < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("k must be at least 1, not %d", k)));
	InitMaterializedSRF(fcinfo, 0);
	memset(&bc, 0, sizeof(bc));
	open_text_index(PG_GETARG_OID(0), &bc);
	read_text_queries(PG_GETARG_ARRAYTYPE_P(1), &bc);
	vs_batch_knn_answer(rsinfo, &bc, k);
	return (Datum) 0;
}
