/*
 * What every vsearch access method shares (amutils.h): the IndexAmRoutine around a kind's
 * callbacks, the operator classes' metric, page helpers, VACUUM's cleanup and the common part of
 * the cost estimate.
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "commands/vacuum.h"
#include "fmgr.h"
#include "optimizer/cost.h"
#include "parser/parsetree.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/float.h"
#include "utils/spccache.h"
#include "utils/timestamp.h"
#include "vsearch/half.h"

#include "amutils.h"

/* Column properties the generic code cannot know: every operator class orders by distance. */
static bool
vs_am_property(Oid index_oid, int attno, IndexAMProperty prop, const char *propname,
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

IndexAmRoutine *
vs_am_routine(const VsIndexKind *kind)
{
	IndexAmRoutine *am = makeNode(IndexAmRoutine);

	am->amstrategies = VS_NSTRATEGIES;
	am->amsupport = VS_NPROC;
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
	am->amusemaintenanceworkmem = kind->uses_maintenance_work_mem;
#if PG_VERSION_NUM >= 160000
	am->amsummarizing = false;
#endif
	am->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL | VACUUM_OPTION_PARALLEL_CLEANUP;
	am->amkeytype = InvalidOid;

	am->ambuild = kind->build;
	am->ambuildempty = kind->buildempty;
	am->aminsert = kind->insert;
#if PG_VERSION_NUM >= 170000
	am->aminsertcleanup = NULL;
#endif
	am->ambulkdelete = kind->bulkdelete;
	am->amvacuumcleanup = vs_vacuumcleanup;
	am->amcanreturn = NULL;
	am->amcostestimate = kind->costestimate;
	am->amoptions = kind->options;
	am->amproperty = vs_am_property;
	am->ambuildphasename = kind->buildphasename;
	am->amvalidate = vs_opclass_validate;
	am->amadjustmembers = NULL;
	am->ambeginscan = kind->beginscan;
	am->amrescan = kind->rescan;
	am->amgettuple = kind->gettuple;
	am->amgetbitmap = kind->getbitmap;
	am->amendscan = kind->endscan;
	am->ammarkpos = NULL;
	am->amrestrpos = NULL;
	am->amestimateparallelscan = NULL;
	am->aminitparallelscan = NULL;
	am->amparallelrescan = NULL;
	return am;
}

vs_metric
vs_opclass_metric(Relation index)
{
	Oid			proc = index_getprocid(index, 1, VS_METRIC_PROC);
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

uint32
vs_declared_dim(Relation index)
{
	int32		typmod = TupleDescAttr(RelationGetDescr(index), 0)->atttypmod;

	return typmod > 0 ? (uint32) typmod : 0;
}

uint32
vs_index_storage(Relation index)
{
	return vs_index_is_halfvec(index) ? VS_STORE_F16 : VS_STORE_F32;
}

void
vs_store_index_vector(void *dst, const float *x, uint32 dim, uint32 storage)
{
	if (storage == VS_STORE_F16)
	{
		uint16	   *h = (uint16 *) dst;

		vs_float_to_half(x, h, dim);
		if (dim % 2)
			h[dim] = 0;
	}
	else
		memcpy(dst, x, sizeof(float) * dim);
}

void
vs_load_index_vector(const void *src, float *x, uint32 dim, uint32 storage)
{
	if (storage == VS_STORE_F16)
		vs_half_to_float((const uint16 *) src, x, dim);
	else
		memcpy(x, src, sizeof(float) * dim);
}

void *
vs_page_meta(Page page, uint32 magic, uint32 version, const char *amname)
{
	const uint32 *head = (const uint32 *) PageGetContents(page);

	if (PageIsNew(page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("%s index metapage is not initialized", amname),
				 errhint("REINDEX the index.")));
	if (head[0] != magic)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("%s index metapage is corrupted", amname),
				 errhint("REINDEX the index.")));
	if (head[1] != version)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("%s index has version %u, this server reads version %u",
						amname, head[1], version),
				 errhint("REINDEX the index.")));
	return PageGetContents(page);
}

void
vs_read_meta(Relation index, uint32 magic, uint32 version, const char *amname, void *meta,
			 Size size)
{
	Buffer		buf = ReadBuffer(index, 0);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(meta, vs_page_meta(BufferGetPage(buf), magic, version, amname), size);
	UnlockReleaseBuffer(buf);
}

Buffer
vs_new_buffer(Relation index, ForkNumber fork)
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

uint64
vs_initial_generation(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return (uint64) (now > 0 ? now : 0) * 4096 + 1;
}

IndexBulkDeleteResult *
vs_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	if (info->analyze_only)
		return stats;

	/* No bulk delete ran: report the index's size from the metapage. */
	if (stats == NULL)
	{
		VsIndexRef	ref;

		vs_index_ref(info->index, &ref);
		stats = (IndexBulkDeleteResult *) palloc0(sizeof(IndexBulkDeleteResult));
		stats->num_index_tuples = (double) ref.ntuples;
		stats->estimated_count = false;
	}
	stats->num_pages = RelationGetNumberOfBlocks(info->index);
	return stats;
}

bool
vs_cost_begin(PlannerInfo *root, IndexPath *path, double loop_count, VsCostBase *c,
			  Cost *indexStartupCost, Cost *indexTotalCost, Selectivity *indexSelectivity,
			  double *indexCorrelation, double *indexPages)
{
	IndexOptInfo *index = path->indexinfo;
	GenericCosts costs;
	Relation	rel;

	memset(c, 0, sizeof(*c));
	c->rows = Max(index->tuples, 1.0);
	c->nranges = list_length(path->indexclauses);
	c->ordered = path->indexorderbys != NIL;
	*indexCorrelation = 0.0;	/* heap rows come in distance order: random */
	*indexPages = index->pages;

	/* Neither a range nor an ORDER BY: a scan of every row, which cannot run (amutils.h). */
	if (!c->ordered && c->nranges == 0)
	{
		*indexStartupCost = get_float8_infinity();
		*indexTotalCost = get_float8_infinity();
		*indexSelectivity = 1.0;
		return false;
	}

	/* For the selectivity of the range quals (their operators' estimators). */
	MemSet(&costs, 0, sizeof(costs));
	costs.numIndexTuples = c->rows;
	genericcostestimate(root, path, loop_count, &costs);
	*indexSelectivity = costs.indexSelectivity;
	c->selectivity = costs.indexSelectivity;

	c->search_factor = vs_search_distance_cost(index->indexoid);
	get_tablespace_page_costs(index->reltablespace, &c->random_page_cost, &c->seq_page_cost);
	c->heapoid = planner_rt_fetch(index->rel->relid, root)->relid;
	c->attnum = index->indexkeys[0];

	rel = index_open(index->indexoid, NoLock);	/* the planner holds a lock */
	vs_index_ref(rel, &c->ref);
	index_close(rel, NoLock);
	return true;
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
