/*
 * vs_sss: the index kind (indexkind.h) and its handler, pages and metapage, options.  Values,
 * metrics and scans are vs_lc's (lcutils.c, lcscan.c).
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "commands/progress.h"
#include "fmgr.h"
#include "storage/bufmgr.h"

#include "batch.h"
#include "sss.h"

static relopt_kind sss_relopt_kind;

void
vs_sss_init(void)
{
	sss_relopt_kind = add_reloption_kind();
	add_real_reloption(sss_relopt_kind, "alpha",
					   "A row becomes a pivot when it is at least alpha times the diameter from "
					   "every pivot so far (smaller: more pivots)",
					   VS_SSS_DEFAULT_ALPHA, 0.01, 1.0, AccessExclusiveLock);
	add_int_reloption(sss_relopt_kind, "max_pivots",
					  "Most pivots (the table holds this many distances per row)",
					  VS_SSS_MAX_PIVOTS, 1, VS_SSS_MAX_PIVOTS, AccessExclusiveLock);
}

bytea *
vs_sss_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"alpha", RELOPT_TYPE_REAL, offsetof(VsSssOptions, alpha)},
		{"max_pivots", RELOPT_TYPE_INT, offsetof(VsSssOptions, max_pivots)},
	};

	return (bytea *) build_reloptions(reloptions, validate, sss_relopt_kind,
									  sizeof(VsSssOptions), tab, lengthof(tab));
}

void
vs_sss_init_page(Page page, uint16 flags)
{
	vs_metric_init_page(page, flags, VS_SSS_PAGE_ID);
}

VsSssMetaPage
vs_sss_page_meta(Page page)
{
	return (VsSssMetaPage) vs_page_meta(page, VS_SSS_MAGIC, VS_SSS_VERSION, "vs_sss");
}

void
vs_sss_read_meta(Relation index, VsSssMetaPageData *meta)
{
	vs_read_meta(index, VS_SSS_MAGIC, VS_SSS_VERSION, "vs_sss", meta, sizeof(*meta));
}

/* The longest object whose tuple, with npivots distances, fits on a page. */
int
vs_sss_max_len(uint32 npivots)
{
	return (int) ((BLCKSZ - MAXALIGN(SizeOfPageHeaderData) - sizeof(ItemIdData) -
				   MAXALIGN(sizeof(VsLcPageOpaqueData)) - MAXALIGN(offsetof(VsSssTuple, data))) /
				  sizeof(uint32)) - (int) npivots;
}

static char *
sss_phasename(int64 phase)
{
	switch (phase)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return "initializing";
		case 2:
			return "loading rows";
		case 3:
			return "choosing pivots";
		case 4:
			return "computing the pivot table and writing pages";
		default:
			return NULL;
	}
}

static void
sss_read_ref(Relation index, VsIndexRef *ref)
{
	VsSssMetaPageData meta;

	vs_sss_read_meta(index, &meta);
	vs_ref_init(index, VS_SSS_KIND, ref);
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	ref->kind_info[0] = meta.npivots;
}

const VsIndexKind vs_sss_kind = {
	.id = VS_SSS_KIND,
	.name = "vs_sss",
	.page_id = VS_SSS_PAGE_ID,
	.uses_maintenance_work_mem = false,
	.build = vs_sss_ambuild,
	.buildempty = vs_sss_ambuildempty,
	.insert = vs_sss_insert,
	.bulkdelete = vs_sss_bulkdelete,
	.costestimate = vs_sss_costestimate,
	.options = vs_sss_options,
	.beginscan = vs_metric_beginscan,
	.rescan = vs_metric_rescan,
	.gettuple = vs_metric_gettuple,
	.getbitmap = vs_metric_getbitmap,
	.endscan = vs_scan_end,
	.init = vs_sss_init,
	.read_ref = sss_read_ref,
	.load = vs_sss_load,
	.destroy = vs_metric_destroy,
	.knn = vs_metric_knn,
	.range = vs_metric_range,
	.exact = true,
	.range_candidates = vs_search_range_candidates,
	.batch_knn = vs_batch_knn_exact,
	.max_k = 1 << 20,			/* a drained scan's k grows to the index's entries */
	.check = vs_sss_check,
	.check_request = vs_metric_check_request,
	.build_step = vs_metric_build_step,
};

PG_FUNCTION_INFO_V1(vs_sss_handler);
Datum
vs_sss_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = vs_am_routine(&vs_sss_kind);

	am->ambuildphasename = sss_phasename;
	PG_RETURN_POINTER(am);
}
