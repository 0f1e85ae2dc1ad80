/*
 * vs_ivfpq: the index kind (indexkind.h) and its access method handler, options and settings,
 * page and metapage helpers.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "fmgr.h"
#include "storage/bufmgr.h"
#include "utils/guc.h"

#include "ivfpq.h"

int			vs_ivfpq_probes = 10;
int			vs_ivfpq_rerank = 100;

static relopt_kind ivfpq_relopt_kind;

/* Registers the options and the settings; from _PG_init. */
static void
ivfpq_init(void)
{
	ivfpq_relopt_kind = add_reloption_kind();
	add_int_reloption(ivfpq_relopt_kind, "lists",
					  "Inverted lists (coarse centroids); 0 chooses about sqrt(rows)",
					  0, 0, VS_IVFPQ_MAX_LISTS, AccessExclusiveLock);
	add_int_reloption(ivfpq_relopt_kind, "m",
					  "Sub-quantizers (a divisor of the dimension); 0 chooses by rule",
					  0, 0, VS_IVFPQ_MAX_M, AccessExclusiveLock);
	add_int_reloption(ivfpq_relopt_kind, "nbits",
					  "Bits per sub-quantizer code: 4 or 8",
					  8, 1, 16, AccessExclusiveLock);
	add_bool_reloption(ivfpq_relopt_kind, "store_vectors",
					   "Keep a copy of each vector in the index for exact re-ranking",
					   false, AccessExclusiveLock);

	DefineCustomIntVariable("vsearch.ivfpq_probes",
							"Inverted lists a vs_ivfpq search scans per round.",
							"More lists find more of the true nearest rows (recall) at the cost of "
							"more work per query.  When a scan needs more rows it goes on with the "
							"next lists, so this bounds the first round only.",
							&vs_ivfpq_probes,
							10,
							1, VS_IVFPQ_MAX_LISTS,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.ivfpq_rerank",
							"Candidates per vs_ivfpq search round re-ranked with exact distances.",
							"The candidates with the best estimated distances in the probed lists "
							"are re-ranked exactly (from the table, or the index's stored vectors); "
							"rows come back in exact order within a round.",
							&vs_ivfpq_rerank,
							100,
							1, 1000000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);
}

bytea *
vs_ivfpq_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"lists", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, lists)},
		{"m", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, m)},
		{"nbits", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, nbits)},
		{"store_vectors", RELOPT_TYPE_BOOL, offsetof(VsIvfpqOptions, store_vectors)},
	};
	VsIvfpqOptions *opts;

	opts = (VsIvfpqOptions *) build_reloptions(reloptions, validate, ivfpq_relopt_kind,
											   sizeof(VsIvfpqOptions), tab, lengthof(tab));
	if (validate && opts != NULL && opts->nbits != 4 && opts->nbits != 8)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_ivfpq option nbits must be 4 or 8, not %d", opts->nbits),
				 errhint("nbits is the size of each sub-quantizer's code: 8 (256 codewords, the "
						 "default) or 4 (16 codewords, half the index size, lower recall).")));
	return (bytea *) opts;
}

/* ---------------------------------------------------------------------------------------------
 * Pages
 */

void
vs_ivfpq_init_page(Page page, uint16 flags, uint32 list, BlockNumber prev)
{
	VsIvfpqPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(VsIvfpqPageOpaqueData));
	opaque = VsIvfpqPageGetOpaque(page);
	opaque->prev = prev;
	opaque->list = list;
	opaque->nitems = 0;
	opaque->flags = flags;
	opaque->unused = 0;
	opaque->page_id = VS_IVFPQ_PAGE_ID;
	/* the arrays have fixed places: the whole content area counts as used */
	if (flags & (VS_IVFPQ_LIST | VS_IVFPQ_PENDING | VS_IVFPQ_FLOATS | VS_IVFPQ_DIRECTORY))
		((PageHeader) page)->pd_lower = ((PageHeader) page)->pd_upper;
}

void
vs_ivfpq_page_set_items(Page page, int nitems)
{
	VsIvfpqPageGetOpaque(page)->nitems = (uint16) nitems;
}

/*
 * Struct-of-arrays layout of an entry page: tids (6 bytes each), then the codes, then the vectors
 * (4-byte aligned): the largest capacity that fits.
 */
void
vs_ivfpq_layout(int code_size, int vdim, VsIvfpqLayout *layout)
{
	Size		per = sizeof(ItemPointerData) + code_size + sizeof(float) * (Size) vdim;
	int			cap = (int) (VS_IVFPQ_PAGE_SPACE / per);

	cap = Min(cap, PG_UINT16_MAX);
	for (; cap > 0; cap--)
	{
		Size		code_off = MAXALIGN(sizeof(ItemPointerData) * (Size) cap);
		Size		vec_off = MAXALIGN(code_off + (Size) code_size * cap);

		if (vec_off + sizeof(float) * (Size) vdim * cap <= VS_IVFPQ_PAGE_SPACE)
		{
			layout->code_off = code_off;
			layout->vec_off = vec_off;
			break;
		}
	}
	layout->capacity = cap;
	layout->code_size = code_size;
	layout->vdim = vdim;
	if (cap == 0)
	{
		layout->code_off = 0;
		layout->vec_off = 0;
	}
}

void
vs_ivfpq_meta_layout(const VsIvfpqMetaPageData *meta, bool pending, VsIvfpqLayout *layout)
{
	vs_ivfpq_layout(pending ? 0 : (int) meta->code_size,
					meta->store_vectors ? (int) meta->dim : 0, layout);
}

void
vs_ivfpq_init_metapage(Page page, uint32 dim, vs_metric metric, int nbits, bool store_vectors)
{
	VsIvfpqMetaPage meta;
	vs_ivfpq_init_page(page, VS_IVFPQ_META, 0, InvalidBlockNumber);
	meta = VsIvfpqPageGetMeta(page);
	memset(meta, 0, sizeof(VsIvfpqMetaPageData));
	meta->magic = VS_IVFPQ_MAGIC;
	meta->version = VS_IVFPQ_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->nbits = (uint32) nbits;
	meta->store_vectors = store_vectors ? 1 : 0;
	meta->trained = 0;
	meta->generation = vs_initial_generation();
	meta->build_id = meta->generation;
	meta->centroid_start = InvalidBlockNumber;
	meta->codebook_start = InvalidBlockNumber;
	meta->directory_start = InvalidBlockNumber;
	meta->pending_first = InvalidBlockNumber;
	meta->pending_last = InvalidBlockNumber;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsIvfpqMetaPageData);
}

VsIvfpqMetaPage
vs_ivfpq_page_meta(Page page)
{
	return (VsIvfpqMetaPage) vs_page_meta(page, VS_IVFPQ_MAGIC, VS_IVFPQ_VERSION, "vs_ivfpq");
}

void
vs_ivfpq_read_meta(Relation index, VsIvfpqMetaPageData *meta)
{
	vs_read_meta(index, VS_IVFPQ_MAGIC, VS_IVFPQ_VERSION, "vs_ivfpq", meta, sizeof(*meta));
}

static void
ivfpq_read_ref(Relation index, VsIndexRef *ref)
{
	VsIvfpqMetaPageData meta;

	vs_ivfpq_read_meta(index, &meta);
	vs_ref_init(index, VS_IVFPQ_KIND, ref);
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	ref->kind_info[0] = meta.trained ? meta.lists : 0;
	ref->kind_info[1] = meta.npending;
	ref->kind_info[2] = meta.store_vectors;
}

/*
 * The default number of sub-quantizers: the largest divisor m of dim with sub-vectors of at least
 * 4 dimensions (dim / m >= 4) and at most 64 sub-quantizers; 1 when dim < 8.  E.g. 128 -> 32,
 * 96 -> 24, 784 -> 56, 100 -> 25, 3 -> 1.
 */
int
vs_ivfpq_default_m(int dim)
{
	for (int m = Min(64, dim / 4); m > 1; m--)
		if (dim % m == 0)
			return m;
	return 1;
}

const VsIndexKind vs_ivfpq_kind = {
	.id = VS_IVFPQ_KIND,
	.name = "vs_ivfpq",
	.page_id = VS_IVFPQ_PAGE_ID,
	.uses_maintenance_work_mem = true,
	.build = vs_ivfpq_build,
	.buildempty = vs_ivfpq_buildempty,
	.insert = vs_ivfpq_insert,
	.bulkdelete = vs_ivfpq_bulkdelete,
	.costestimate = vs_ivfpq_costestimate,
	.options = vs_ivfpq_options,
	.beginscan = vs_ivfpq_beginscan,
	.rescan = vs_ivfpq_rescan,
	.gettuple = vs_ivfpq_gettuple,
	.getbitmap = vs_ivfpq_getbitmap,
	.endscan = vs_ivfpq_endscan,
	.buildphasename = vs_ivfpq_buildphasename,
	.init = ivfpq_init,
	.read_ref = ivfpq_read_ref,
	.load = vs_ivfpq_load,
	.destroy = vs_ivfpq_destroy_object,
	.knn = vs_ivfpq_knn,
	.range = vs_ivfpq_range_search,
	.backend_knn = vs_ivfpq_backend_knn,
	.backend_range = vs_ivfpq_backend_range,
	.exact_distances = vs_ivfpq_exact_rerank,
	.range_candidates = vs_ivfpq_range_candidates,
	.batch_knn = vs_ivfpq_batch_knn,
	.max_k = 1 << 26,			/* a drained scan's k grows to the index's entries */
	.check = vs_ivfpq_check,
	.check_request = vs_ivfpq_check_request,
	.build_step = vs_ivfpq_build_step,
	.worker_tick = vs_ivfpq_worker_tick,
};

PG_FUNCTION_INFO_V1(vs_ivfpq_handler);
Datum
vs_ivfpq_handler(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(vs_am_routine(&vs_ivfpq_kind));
}
