/*
 * vs_flat: the access method handler, page and metapage helpers, the operator class's metric,
 * dimension limits and reloptions (none).
 */
#include "postgres.h"

#include <math.h>

#include "access/reloptions.h"
#include "access/xloginsert.h"
#include "commands/vacuum.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "flat.h"

/* Column properties the generic code cannot know: every operator class orders by distance. */
static bool
vs_flat_property(Oid index_oid, int attno, IndexAMProperty prop, const char *propname,
				 bool *res, bool *isnull)
{
	if (attno == 0)
		return false;
	switch (prop)
	{
		case AMPROP_DISTANCE_ORDERABLE:
			*res = true;		/* amvalidate requires operator 1, an ORDER BY distance */
			*isnull = false;
			return true;
		case AMPROP_RETURNABLE:
			*res = false;
			*isnull = false;
			return true;
		default:
			return false;
	}
}

PG_FUNCTION_INFO_V1(vs_flat_handler);
Datum
vs_flat_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = makeNode(IndexAmRoutine);

	am->amstrategies = VS_FLAT_NSTRATEGIES;
	am->amsupport = VS_FLAT_NPROC;
	am->amoptsprocnum = 0;
	am->amcanorder = false;
	am->amcanorderbyop = true;
	am->amcanbackward = false;
	am->amcanunique = false;
	am->amcanmulticol = false;
	am->amoptionalkey = true;
	am->amsearcharray = false;
	am->amsearchnulls = false;
	am->amstorage = false;
	am->amclusterable = false;
	am->ampredlocks = false;
	am->amcanparallel = false;
#if PG_VERSION_NUM >= 170000
	am->amcanbuildparallel = false;
#endif
	am->amcaninclude = false;
	am->amusemaintenanceworkmem = false;
#if PG_VERSION_NUM >= 160000
	am->amsummarizing = false;
#endif
	am->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL | VACUUM_OPTION_PARALLEL_CLEANUP;
	am->amkeytype = InvalidOid;

	am->ambuild = vs_flat_build;
	am->ambuildempty = vs_flat_buildempty;
	am->aminsert = vs_flat_insert;
#if PG_VERSION_NUM >= 170000
	am->aminsertcleanup = NULL;
#endif
	am->ambulkdelete = vs_flat_bulkdelete;
	am->amvacuumcleanup = vs_flat_vacuumcleanup;
	am->amcanreturn = NULL;
	am->amcostestimate = vs_flat_costestimate;
	am->amoptions = vs_flat_options;
	am->amproperty = vs_flat_property;
	am->ambuildphasename = NULL;
	am->amvalidate = vs_flat_validate;
	am->amadjustmembers = NULL;
	am->ambeginscan = vs_flat_beginscan;
	am->amrescan = vs_flat_rescan;
	am->amgettuple = vs_flat_gettuple;
	am->amgetbitmap = vs_flat_getbitmap;
	am->amendscan = vs_flat_endscan;
	am->ammarkpos = NULL;
	am->amrestrpos = NULL;
	am->amestimateparallelscan = NULL;
	am->aminitparallelscan = NULL;
	am->amparallelrescan = NULL;

	PG_RETURN_POINTER(am);
}

/* Is this relation a vs_flat index? (Its access method's routines are ours.) */
bool
vs_is_flat_index(Relation index)
{
	return index->rd_rel->relkind == RELKIND_INDEX && index->rd_indam != NULL &&
		index->rd_indam->ambuild == vs_flat_build;
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
vs_flat_page_set_items(Page page, uint32 dim, int nitems)
{
	VsFlatPageGetOpaque(page)->nitems = nitems;
	((PageHeader) page)->pd_lower =
		MAXALIGN(SizeOfPageHeaderData) + (Size) nitems * VS_FLAT_ITEM_SIZE(dim);
	Assert(((PageHeader) page)->pd_lower <= ((PageHeader) page)->pd_upper);
}

/*
 * The generation an index starts with: microseconds since 2000 times 4096 (good until 2140).  No
 * index changes 4096 times a microsecond, so the generation of an index built on a reused or
 * truncated-in-place relfilenode is above anything its predecessor reached (see
 * VsFlatMetaPageData), unless the clock went back.
 */
uint64
vs_flat_initial_generation(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return (uint64) (now > 0 ? now : 0) * 4096 + 1;
}

void
vs_flat_init_metapage(Page page, uint32 dim, vs_metric metric)
{
	VsFlatMetaPage meta;

	vs_flat_init_page(page, VS_FLAT_META);
	meta = VsFlatPageGetMeta(page);
	memset(meta, 0, sizeof(VsFlatMetaPageData));
	meta->magic = VS_FLAT_MAGIC;
	meta->version = VS_FLAT_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->ntuples = 0;
	meta->generation = vs_flat_initial_generation();
	meta->epoch = meta->generation;
	meta->last_block = VS_FLAT_METAPAGE_BLKNO;
	meta->max_norm = 0.0;
	meta->min_norm = 0.0;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsFlatMetaPageData);
}

/* ERROR unless meta is a vs_flat metapage of this version. */
static void
vs_flat_check_meta(const VsFlatMetaPageData *meta)
{
	if (meta->magic != VS_FLAT_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_flat index metapage is corrupted"),
				 errhint("REINDEX the index.")));
	if (meta->version != VS_FLAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_flat index has version %u, this server reads version %d",
						meta->version, VS_FLAT_VERSION),
				 errhint("REINDEX the index.")));
}

/* The metapage of a locked page known to be block 0; ERROR if it is not a vs_flat metapage. */
VsFlatMetaPage
vs_flat_page_meta(Page page)
{
	VsFlatMetaPage meta = VsFlatPageGetMeta(page);

	if (PageIsNew(page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_flat index metapage is not initialized"),
				 errhint("REINDEX the index.")));
	vs_flat_check_meta(meta);
	return meta;
}

/* A copy of the metapage of an open index. */
void
vs_flat_read_meta(Relation index, VsFlatMetaPageData *meta)
{
	Buffer		buf = ReadBuffer(index, VS_FLAT_METAPAGE_BLKNO);
	Page		page;
	bool		isnew;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	isnew = PageIsNew(page);
	memcpy(meta, VsFlatPageGetMeta(page), sizeof(VsFlatMetaPageData));
	UnlockReleaseBuffer(buf);
	if (isnew)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_flat index \"%s\" has no metapage", RelationGetRelationName(index)),
				 errhint("REINDEX the index.")));
	vs_flat_check_meta(meta);
}

/* The metric of the index's operator class: its support function 1 returns it. */
vs_metric
vs_flat_opclass_metric(Relation index)
{
	Oid			proc = index_getprocid(index, 1, VS_FLAT_METRIC_PROC);
	int32		metric;

	if (!OidIsValid(proc))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("operator class of index \"%s\" has no metric support function",
						RelationGetRelationName(index))));
	metric = DatumGetInt32(OidFunctionCall1Coll(proc, InvalidOid, PointerGetDatum(NULL)));
	if (metric < 0 || metric >= VS_METRIC_COUNT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("operator class of index \"%s\" returned unknown metric %d",
						RelationGetRelationName(index), metric)));
	return (vs_metric) metric;
}

/* ERROR unless vectors of dim elements fit on a vs_flat page. */
void
vs_flat_check_dim(int dim)
{
	if (dim > VS_FLAT_MAX_DIM)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("vs_flat indexes support at most %d dimensions, not %d",
						VS_FLAT_MAX_DIM, dim),
				 errhint("A vs_flat index stores each vector on one %d-byte page; reduce the "
						 "dimension (e.g. with a projection) or search without an index.",
						 BLCKSZ)));
}

/* ERROR unless a vector of dim elements can go into an index of index_dim (0: any, first row). */
void
vs_flat_check_vector_dim(uint32 index_dim, int dim)
{
	if (index_dim == 0)
		vs_flat_check_dim(dim);
	else if ((uint32) dim != index_dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", index_dim, dim),
				 errhint("Every vector in a vs_flat index has the dimension of the first one; "
						 "declare the column as vector(n).")));
}

/* L2 norm in double (vectors are finite, so no overflow). */
double
vs_vector_norm(const float *x, int dim)
{
	double		sum = 0.0;

	for (int i = 0; i < dim; i++)
		sum += (double) x[i] * (double) x[i];
	return sqrt(sum);
}

/* No options yet; reject any, like an access method with an empty option table would. */
bytea *
vs_flat_options(Datum reloptions, bool validate)
{
	if (validate && DatumGetPointer(reloptions) != NULL)
	{
		List	   *options = untransformRelOptions(reloptions);

		if (options != NIL)
		{
			DefElem    *def = linitial_node(DefElem, options);

			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unrecognized parameter \"%s\"", def->defname),
					 errhint("vs_flat indexes take no storage parameters.")));
		}
	}
	return NULL;
}

/* A new page at the end of the index, pinned and exclusively locked (not initialized). */
Buffer
vs_flat_new_buffer(Relation index, ForkNumber fork)
{
	Buffer		buf;
#if PG_VERSION_NUM >= 160000
	buf = ExtendBufferedRel(BMR_REL(index), fork, NULL, EB_LOCK_FIRST);
#else
	bool		local = RELATION_IS_LOCAL(index);

	if (!local)
		LockRelationForExtension(index, ExclusiveLock);
	buf = ReadBufferExtended(index, fork, P_NEW, RBM_NORMAL, NULL);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	if (!local)
		UnlockRelationForExtension(index, ExclusiveLock);
#endif
	return buf;
}

/*
 * Support function 1 of the operator classes: the metric (a vs_metric).  They take `internal`
 * so that SQL cannot call them.
 */
PG_FUNCTION_INFO_V1(vsearch_metric_l2);
Datum
vsearch_metric_l2(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(VS_METRIC_L2);
}

PG_FUNCTION_INFO_V1(vsearch_metric_ip);
Datum
vsearch_metric_ip(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(VS_METRIC_IP);
}

PG_FUNCTION_INFO_V1(vsearch_metric_cosine);
Datum
vsearch_metric_cosine(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(VS_METRIC_COSINE);
}

PG_FUNCTION_INFO_V1(vsearch_metric_l1);
Datum
vsearch_metric_l1(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(VS_METRIC_L1);
}
