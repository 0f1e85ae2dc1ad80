/*
 * vs_flat: the index kind (indexkind.h) and its access method handler, page and metapage helpers,
 * dimension limits, sketch geometry and reloptions.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"

#include "batch.h"
#include "flat.h"

typedef struct VsFlatOptions
{
	int32		vl_len_;
	bool		sketches;
} VsFlatOptions;

static relopt_kind flat_relopt_kind;

/* Registers the options; from _PG_init. */
static void
flat_init(void)
{
	flat_relopt_kind = add_reloption_kind();
	add_bool_reloption(flat_relopt_kind, "sketches",
					   "Keep an 8-bit sketch of each row so that searches without the GPU worker "
					   "read only the rows their sketches do not rule out",
					   true, AccessExclusiveLock);
}

void
vs_flat_init_page(Page page, uint16 flags)
{
	VsFlatPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(VsFlatPageOpaqueData));
	opaque = VsFlatPageGetOpaque(page);
	opaque->nitems = 0;
	opaque->flags = flags;
	opaque->unused = 0;
	opaque->page_id = VS_FLAT_PAGE_ID;
}

/* Sets the item count of a data page and pd_lower to the end of its items. */
void
vs_flat_page_set_items(Page page, uint32 words, int nitems)
{
	VsFlatPageGetOpaque(page)->nitems = nitems;
	((PageHeader) page)->pd_lower =
		MAXALIGN(SizeOfPageHeaderData) + (Size) nitems * VS_FLAT_ITEM_SIZE(words);
	Assert(((PageHeader) page)->pd_lower <= ((PageHeader) page)->pd_upper);
}

/* Writes a row's values into an item (binary16 rows: x holds a halfvec's values, exact halves). */
void
vs_flat_store_row(VsFlatItem *item, const float *x, uint32 dim, uint32 storage)
{
	vs_store_index_vector(item->x, x, dim, storage);
}

/*
 * Data pages per sketch page for rows of dim elements stored as storage says: as many as one
 * sketch page holds the sketches and counts of; 0 (no sketches) while dim is unknown, where a
 * sketch would be more than 2/3 of its row (short rows, binary16 rows below 56 dimensions), or
 * where a sketch page would serve a single data page (the index would grow by half or more).
 */
uint32
vs_flat_sketch_group(uint32 dim, uint32 storage)
{
	uint32		words = vs_store_words(dim, storage);
	int			per_page = VsFlatItemsPerPage(words);
	Size		sb = vs_row_sketch_bytes(dim);
	uint32		group;

	if (dim == 0 || 3 * sb > 2 * VS_FLAT_ITEM_SIZE(words))
		return 0;
	group = (uint32) (VS_FLAT_PAGE_SPACE / (sizeof(uint16) + (Size) per_page * sb));
	while (group > 0 &&
		   MAXALIGN(sizeof(uint16) * group) + (Size) group * per_page * sb > VS_FLAT_PAGE_SPACE)
		group--;
	return group >= 2 ? Min(group, 255) : 0;
}

/* The sketch_group a new index (or its first row) takes: 0 WITH (sketches = off). */
uint32
vs_flat_index_sketch_group(Relation index, uint32 dim, uint32 storage)
{
	VsFlatOptions *opts = (VsFlatOptions *) index->rd_options;

	if (opts != NULL && !opts->sketches)
		return 0;
	return vs_flat_sketch_group(dim, storage);
}

/*
 * Writes the sketch of row x (dim elements) into slot `slot` of a sketch page of an index of this
 * sketch_group: (page in group) * per_page + item (flat.h).
 */
void
vs_flat_store_sketch(Page sketch_page, uint32 group, uint32 dim, int slot, const float *x)
{
	vs_row_sketch_make(x, dim, VsFlatSketchAt(sketch_page, group, vs_row_sketch_bytes(dim), slot));
}

/* An item's row as floats (widening binary16 is exact). */
void
vs_flat_load_row(const VsFlatItem *item, float *x, uint32 dim, uint32 storage)
{
	vs_load_index_vector(item->x, x, dim, storage);
}

void
vs_flat_init_metapage(Page page, uint32 dim, vs_metric metric, uint32 storage)
{
	VsFlatMetaPage meta;

	vs_flat_init_page(page, VS_FLAT_META);
	meta = VsFlatPageGetMeta(page);
	memset(meta, 0, sizeof(VsFlatMetaPageData));
	meta->magic = VS_FLAT_MAGIC;
	meta->version = VS_FLAT_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->storage = storage;
	meta->ntuples = 0;
	meta->generation = vs_initial_generation();
	meta->epoch = meta->generation;
	meta->last_block = VS_FLAT_METAPAGE_BLKNO;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsFlatMetaPageData);
}

/* The metapage of a locked page known to be block 0; ERROR if it is not a vs_flat metapage. */
VsFlatMetaPage
vs_flat_page_meta(Page page)
{
	return (VsFlatMetaPage) vs_page_meta(page, VS_FLAT_MAGIC, VS_FLAT_VERSION, "vs_flat");
}

/* A copy of the metapage of an open index. */
void
vs_flat_read_meta(Relation index, VsFlatMetaPageData *meta)
{
	vs_read_meta(index, VS_FLAT_MAGIC, VS_FLAT_VERSION, "vs_flat", meta, sizeof(*meta));
}

/* The largest dimension whose rows fit on a page: 2038 floats, or 4076 binary16 values. */
int
vs_flat_max_dim(uint32 storage)
{
	return storage == VS_STORE_F16 ? 2 * VS_FLAT_MAX_WORDS : VS_FLAT_MAX_WORDS;
}

/* ERROR unless vectors of dim elements, stored as storage says, fit on a vs_flat page. */
void
vs_flat_check_dim(int dim, uint32 storage)
{
	if (dim > vs_flat_max_dim(storage))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_flat indexes support at most %d dimensions of %s, not %d",
						vs_flat_max_dim(storage),
						storage == VS_STORE_F16 ? "halfvec" : "vector and sparsevec", dim),
				 storage == VS_STORE_F16
				 ? errhint("A vs_flat index stores each vector on one %d-byte page; reduce the "
						   "dimension (e.g. with a projection) or search without an index.",
						   BLCKSZ)
				 : errhint("A vs_flat index stores each vector on one %d-byte page; a halfvec "
						   "column (two bytes an element) takes up to %d dimensions, or reduce "
						   "the dimension, or search without an index.",
						   BLCKSZ, vs_flat_max_dim(VS_STORE_F16))));
}

/* ERROR unless a vector of dim elements can go into an index of index_dim (0: any, first row). */
void
vs_flat_check_vector_dim(uint32 index_dim, int dim, uint32 storage)
{
	if (index_dim == 0)
		vs_flat_check_dim(dim, storage);
	else if ((uint32) dim != index_dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", index_dim, dim),
				 errhint("Every vector in a vs_flat index has the dimension of the first one; "
						 "declare the column as vector(n).")));
}

bytea *
vs_flat_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"sketches", RELOPT_TYPE_BOOL, offsetof(VsFlatOptions, sketches)},
	};

	return (bytea *) build_reloptions(reloptions, validate, flat_relopt_kind,
									  sizeof(VsFlatOptions), tab, lengthof(tab));
}

static void
flat_read_ref(Relation index, VsIndexRef *ref)
{
	VsFlatMetaPageData meta;

	vs_flat_read_meta(index, &meta);
	vs_ref_init(index, VS_FLAT_KIND, ref);
	ref->metric = (vs_metric) meta.metric;
	ref->dim = meta.dim;
	ref->generation = meta.generation;
	ref->ntuples = meta.ntuples;
	ref->kind_info[0] = meta.storage;
}

const VsIndexKind vs_flat_kind = {
	.id = VS_FLAT_KIND,
	.name = "vs_flat",
	.init = flat_init,
	.page_id = VS_FLAT_PAGE_ID,
	.uses_maintenance_work_mem = false,
	.build = vs_flat_build,
	.buildempty = vs_flat_buildempty,
	.insert = vs_flat_insert,
	.bulkdelete = vs_flat_bulkdelete,
	.costestimate = vs_flat_costestimate,
	.options = vs_flat_options,
	.beginscan = vs_flat_beginscan,
	.rescan = vs_flat_rescan,
	.gettuple = vs_flat_gettuple,
	.getbitmap = vs_flat_getbitmap,
	.endscan = vs_flat_endscan,
	.read_ref = flat_read_ref,
	.load = vs_flat_load,
	.destroy = vs_flat_destroy,
	.knn = vs_flat_knn,
	.range = vs_flat_range,
	.backend_knn = vs_flat_backend_knn,
	.backend_range = vs_flat_backend_range,
	.exact = true,
	.range_candidates = vs_search_range_candidates,
	.batch_knn = vs_batch_knn_exact,
	.max_k = 1 << 20,
	.check = vs_flat_check,
	.check_request = vs_flat_check_request,
};

PG_FUNCTION_INFO_V1(vs_flat_handler);
Datum
vs_flat_handler(PG_FUNCTION_ARGS)
{
	PG_RETURN_POINTER(vs_am_routine(&vs_flat_kind));
}
