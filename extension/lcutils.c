/*
 * vs_lc: the index kind (indexkind.h) and its handler, pages and metapage, options, the operator
 * class's metric, values (vectors or the characters of a text) and their distances.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "commands/progress.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "commands/defrem.h"
#include "utils/lsyscache.h"

#include "batch.h"
#include "lc.h"
#include "vector.h"

static relopt_kind lc_relopt_kind;

void
vs_lc_init(void)
{
	lc_relopt_kind = add_reloption_kind();
	add_int_reloption(lc_relopt_kind, "bucket_size",
					  "Objects per cluster besides its center; 0 chooses 32 for text, 64 for vectors",
					  0, 0, VS_LC_MAX_BUCKET, AccessExclusiveLock);
	add_int_reloption(lc_relopt_kind, "seed",
					  "Seed of the random first center",
					  1, 0, INT_MAX, AccessExclusiveLock);
}

bytea *
vs_lc_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"bucket_size", RELOPT_TYPE_INT, offsetof(VsLcOptions, bucket_size)},
		{"seed", RELOPT_TYPE_INT, offsetof(VsLcOptions, seed)},
	};

	return (bytea *) build_reloptions(reloptions, validate, lc_relopt_kind,
									  sizeof(VsLcOptions), tab, lengthof(tab));
}

void
vs_lc_init_page(Page page, uint16 flags)
{
	vs_metric_init_page(page, flags, VS_LC_PAGE_ID);
}

VsLcMetaPage
vs_lc_page_meta(Page page)
{
	return (VsLcMetaPage) vs_page_meta(page, VS_LC_MAGIC, VS_LC_VERSION, "vs_lc");
}

void
vs_lc_read_meta(Relation index, VsLcMetaPageData *meta)
{
	vs_read_meta(index, VS_LC_MAGIC, VS_LC_VERSION, "vs_lc", meta, sizeof(*meta));
}

/*
 * The metric of the operator class: L2 or L1 for vectors, edit distance for text.  The other
 * vector operator classes exist for vs_lc so that choosing one gets this explanation rather than
 * "operator class does not exist".
 */
vs_metric
vs_lc_opclass_metric(Relation index)
{
	Oid			proc = index_getprocid(index, 1, VS_METRIC_PROC);
	int32		metric;

	if (!OidIsValid(proc))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("operator class of index \"%s\" has no metric support function",
						RelationGetRelationName(index))));
	metric = DatumGetInt32(OidFunctionCall1Coll(proc, InvalidOid, PointerGetDatum(NULL)));
	if (metric == VS_METRIC_LEVENSHTEIN || metric == VS_METRIC_L2 || metric == VS_METRIC_L1)
		return (vs_metric) metric;
	if (metric == VS_METRIC_COSINE || metric == VS_METRIC_IP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s indexes need a metric; %s distance is not one",
						get_am_name(index->rd_rel->relam),
						metric == VS_METRIC_COSINE ? "cosine" : "negative inner product"),
				 errhint("Metric indexes prune with the triangle inequality, which L2 and "
						 "L1 obey (vector_l2_ops, vector_l1_ops).  On normalized vectors L2 ranks "
						 "like cosine and inner product (|a-b|^2 = 2 - 2 a.b): store them "
						 "normalized and use vector_l2_ops, or use vs_flat.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
			 errmsg("operator class of index \"%s\" returned unknown metric %d",
					RelationGetRelationName(index), metric)));
	return VS_METRIC_L2;		/* keep the compiler quiet */
}

bool
vs_lc_is_text(Relation index)
{
	return vs_lc_opclass_metric(index) == (vs_metric) VS_METRIC_LEVENSHTEIN;
}

/*
 * A datum of the indexed column (or a query) as an object: the characters of a text, or the
 * elements of a vector (*dim: the index's dimension, 0 until the first vector, then set).
 */
VsLcValue
vs_lc_value(Datum datum, bool is_text, uint32 *dim, const char *what)
{
	VsLcValue	v;

	if (is_text)
	{
		v.data = vs_text_chars(DatumGetTextPP(datum), &v.len);
		if (v.len > VS_LC_MAX_LEN)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("vs_lc indexes strings of at most %d characters, not %d",
							VS_LC_MAX_LEN, v.len),
					 errhint("Each string is stored on one %d-byte page.  Index a prefix (an "
							 "expression index on left(col, %d)) or search without an index: "
							 "the operators take strings of any length.", BLCKSZ, VS_LC_MAX_LEN)));
	}
	else
	{
		Vector	   *vec = vs_datum_vector(datum);

		if (*dim == 0)
		{
			if (vec->dim > VS_LC_MAX_LEN)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("vs_lc indexes support at most %d dimensions, not %d",
								VS_LC_MAX_LEN, vec->dim),
						 errhint("Each vector is stored on one %d-byte page.", BLCKSZ)));
			*dim = vec->dim;
		}
		else if ((uint32) vec->dim != *dim)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("expected %u dimensions, not %d", *dim, vec->dim),
					 errhint("Every vector of a vs_lc index, and every %s, has the dimension of "
							 "the first indexed one.", what)));
		v.data = vec->x;
		v.len = vec->dim;
	}
	return v;
}

double
vs_lc_distance(vs_metric metric, uint32 dim, VsLcValue a, VsLcValue b)
{
	if ((int) metric == VS_METRIC_LEVENSHTEIN)
		return vs_text_distance(a.data, a.len, b.data, b.len);
	return vs_operator_distance(metric, a.data, b.data, (int) dim);
}

VsLcValue
vs_lc_tuple_value(const VsLcTuple *t)
{
	VsLcValue	v;

	v.data = t->data;
	v.len = (int) t->len;
	return v;
}

char *
vs_lc_phasename(int64 phase)
{
	switch (phase)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case 2:
			return "loading rows";
		case 3:
			return "choosing centers and buckets";
		case 4:
			return "writing pages";
		default:
			return NULL;
	}
}

static void
lc_read_ref(Relation index, VsIndexRef *ref)
{
	VsLcMetaPageData meta;

	vs_lc_read_meta(index, &meta);
	vs_ref_init(index, VS_LC_KIND, ref);
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	ref->kind_info[0] = meta.ncenters;
	ref->kind_info[1] = meta.bucket_size;
}

const VsIndexKind vs_lc_kind = {
	.id = VS_LC_KIND,
	.name = "vs_lc",
	.page_id = VS_LC_PAGE_ID,
	.uses_maintenance_work_mem = false,
	.build = vs_lc_ambuild,
	.buildempty = vs_lc_ambuildempty,
	.insert = vs_lc_insert,
	.bulkdelete = vs_lc_bulkdelete,
	.costestimate = vs_lc_costestimate,
	.options = vs_lc_options,
	.beginscan = vs_metric_beginscan,
	.rescan = vs_metric_rescan,
	.gettuple = vs_metric_gettuple,
	.getbitmap = vs_metric_getbitmap,
	.endscan = vs_scan_end,
	.init = vs_lc_init,
	.read_ref = lc_read_ref,
	.load = vs_lc_load,
	.destroy = vs_metric_destroy,
	.knn = vs_metric_knn,
	.range = vs_metric_range,
	.exact = true,
	.range_candidates = vs_search_range_candidates,
	.batch_knn = vs_batch_knn_exact,
	.max_k = 1 << 20,			/* a drained scan's k grows to the index's entries */
	.check = vs_lc_check,
	.check_request = vs_metric_check_request,
	.build_step = vs_metric_build_step,
};

PG_FUNCTION_INFO_V1(vs_lc_handler);
Datum
vs_lc_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = vs_am_routine(&vs_lc_kind);

	am->ambuildphasename = vs_lc_phasename;
	PG_RETURN_POINTER(am);
}
