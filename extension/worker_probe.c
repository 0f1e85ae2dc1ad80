/*
 * vsearch_worker_probe: the GPU worker's test entry point (sql/20-worker.sql).  It sends one kNN
 * request through the ordinary client path with the index kind id and parameter block the caller
 * chooses, and optionally bytes written over the request's header (at a byte offset of VsRequest,
 * within the fields the backend writes) just before it is submitted, so that tests can show that
 * the worker refuses unknown kinds, malformed parameters and forged headers with a reason, and
 * that the backend then falls back or raises the ERROR vsearch.device asks for.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "catalog/pg_class.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "vector.h"
#include "worker.h"

PG_FUNCTION_INFO_V1(vsearch_worker_probe);
Datum
vsearch_worker_probe(PG_FUNCTION_ARGS)
{
	Oid			indexoid;
	Vector	   *query;
	Relation	index;
	VsIndexRef	ref;
	VsKindParams params;
	int64		id;
	float		distance;
	int64		count;
	bool		answered;
	VsRequestPatch patch;
	bool		patched = !PG_ARGISNULL(4) || !PG_ARGISNULL(5);

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	indexoid = PG_GETARG_OID(0);
	query = PG_GETARG_VECTOR_P(1);
	/* a clean ERROR for an OID that names nothing here (another database's index, say) */
	index = try_relation_open(indexoid, AccessShareLock);	/* held until the end of the
															 * transaction */
	if (index == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", indexoid)));
	if (index->rd_rel->relkind != RELKIND_INDEX &&
		index->rd_rel->relkind != RELKIND_PARTITIONED_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index", RelationGetRelationName(index))));
	vs_index_ref(index, &ref);
	relation_close(index, NoLock);
	vector_check_same_dim(ref.dim, query->dim);

	memset(&params, 0, sizeof(params));
	if (!PG_ARGISNULL(2))
		ref.kind = (uint32) PG_GETARG_INT32(2);
	if (!PG_ARGISNULL(3))
	{
		bytea	   *b = PG_GETARG_BYTEA_PP(3);

		if (VARSIZE_ANY_EXHDR(b) > sizeof(params))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a parameter block has at most %d bytes", (int) sizeof(params))));
		memcpy(&params, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b));
	}
	if (patched)
	{
		int			offset;
		bytea	   *b;
		Size		len;

		if (PG_ARGISNULL(4) || PG_ARGISNULL(5))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a header patch needs both header_offset and header_bytes")));
		offset = PG_GETARG_INT32(4);
		b = PG_GETARG_BYTEA_PP(5);
		len = VARSIZE_ANY_EXHDR(b);
		if (offset < 0 || len < 1 || (Size) offset + len > vs_request_patchable_bytes())
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a header patch of %zu bytes at offset %d lies outside the request's "
							"header", len, offset),
					 errhint("Patch 1 or more bytes within the first %zu bytes (the fields the "
							 "backend writes).", vs_request_patchable_bytes())));
		patch.offset = (uint32) offset;
		patch.len = (uint32) len;
		patch.bytes = VARDATA_ANY(b);
	}
	answered = vs_worker_raw_knn(&ref, &params, patched ? &patch : NULL, query->x, 1, &id,
								 &distance, &count);
	PG_RETURN_TEXT_P(cstring_to_text(answered ? "answered" : "not answered"));
}
