/*
 * vs_lc and vs_sss: the engine objects of their indexes and the searches on them, the index kinds'
 * load / destroy / knn / range / check_request (indexkind.h).
 *
 * A vs_lc index is read from its pages into the arrays of vsearch/lc.h (centers with their radii,
 * then the members grouped by cluster in the order the pages hold them: the build's order, then
 * inserts in arrival order), a vs_sss index into those of vsearch/sss.h (ssssearch.c); the arrays
 * become the engine's metric index (vsearch/metric.h) in the load's engine context -- the backend's
 * CPU engine, or the GPU worker's device -- and the scratch arrays go with the load.  The object is
 * cached (the backend's object cache, or the worker's), keyed by index and labelled with the
 * metapage generation read before the pages; any change of the index (insert, VACUUM) makes the
 * next search read it again.  Searches run on the engine (on the GPU in the worker: one block per
 * query) and return the operator's distances in rank units (search.h): L2 squared, L1 and edit
 * distances as they are.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "lc.h"
#include "worker_internal.h"

/* A growing array in the load's scratch memory. */
typedef struct Grow
{
	char	   *data;
	Size		elem;
	Size		n;
	Size		cap;
	MemoryContext cxt;
} Grow;

static void
grow_init(Grow *g, Size elem, MemoryContext cxt)
{
	g->elem = elem;
	g->n = 0;
	g->cap = 64;
	g->cxt = cxt;
	g->data = MemoryContextAllocHuge(cxt, elem * g->cap);
}

static void *
grow_add(Grow *g, Size count)
{
	void	   *p;

	if (g->n + count > g->cap)
	{
		while (g->n + count > g->cap)
			g->cap *= 2;
		g->data = repalloc_huge(g->data, g->elem * g->cap);
	}
	p = g->data + g->elem * g->n;
	g->n += count;
	return p;
}

typedef struct LcLoad
{
	const VsIndexRef *ref;
	Relation	rel;
	BufferAccessStrategy bas;
	bool		text;
	uint32		dim;
} LcLoad;

/* Calls visit for every tuple of a chain, in order. */
static void
walk_chain(LcLoad *ld, BlockNumber blkno, void (*visit) (void *arg, const VsLcTuple *t),
		   void *arg)
{
	while (blkno != InvalidBlockNumber)
	{
		Buffer		buf = vs_index_read_block(ld->ref, ld->rel, blkno, ld->bas);
		Page		page;
		OffsetNumber maxoff;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(VsLcPageOpaqueData)) ||
			VsLcPageGetOpaque(page)->page_id != VS_LC_PAGE_ID)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_lc index %u has an unexpected page %u", ld->ref->indexrelid, blkno),
					 errhint("REINDEX the index.")));
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		iid = PageGetItemId(page, off);

			if (!ItemIdIsUsed(iid))
				continue;
			visit(arg, (const VsLcTuple *) PageGetItem(page, iid));
		}
		blkno = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
	}
}

typedef struct Gathered
{
	LcLoad	   *ld;
	Grow		ids;
	Grow		clusters;		/* members: their cluster */
	Grow		radii;			/* centers: covering radius */
	Grow		values;			/* floats or characters */
	Grow		offsets;		/* text: value offsets (n + 1) */
} Gathered;

static void
gather_init(Gathered *g, LcLoad *ld, MemoryContext cxt)
{
	g->ld = ld;
	grow_init(&g->ids, sizeof(int64), cxt);
	grow_init(&g->clusters, sizeof(uint32), cxt);
	grow_init(&g->radii, sizeof(double), cxt);
	grow_init(&g->values, sizeof(uint32), cxt);
	grow_init(&g->offsets, sizeof(uint64), cxt);
	*(uint64 *) grow_add(&g->offsets, 1) = 0;
}

static void
gather(void *arg, const VsLcTuple *t)
{
	Gathered   *g = (Gathered *) arg;
	ItemPointerData tid = t->heap_tid;

	if (!g->ld->text && t->len != g->ld->dim)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_lc index %u holds a vector of %u dimensions, not %u",
						g->ld->ref->indexrelid, t->len, g->ld->dim),
				 errhint("REINDEX the index.")));
	*(int64 *) grow_add(&g->ids, 1) = (t->flags & VS_LC_DEAD) ? -1 : vs_tid_to_id(&tid);
	*(uint32 *) grow_add(&g->clusters, 1) = t->cluster;
	*(double *) grow_add(&g->radii, 1) = t->radius;
	memcpy(grow_add(&g->values, t->len), t->data, sizeof(uint32) * t->len);
	*(uint64 *) grow_add(&g->offsets, 1) = g->values.n;
}

/* The arrays of a list read from the pages (scratch memory of the load). */
typedef struct LcArrays
{
	vs_lc		lc;				/* over the arrays below */
	int64	   *center_ids;
	double	   *radii;
	uint64	   *bucket_offsets;
	int64	   *member_ids;
	float	   *center_vectors;
	float	   *member_vectors;
	uint32	   *center_chars;
	uint64	   *center_offsets;
	uint32	   *member_chars;
	uint64	   *member_offsets;
} LcArrays;

static vs_status
create_lc(struct vs_context *engine, const void *arrays, vs_metric_index **out)
{
	return vs_metric_index_lc(engine, (const vs_lc *) arrays, out);
}

void *
vs_lc_load(const VsLoadEnv *env, void *old, const VsIndexRef *ref, Size *bytes,
		   uint64 *generation)
{
	LcLoad		ld;
	Buffer		buf;
	VsLcMetaPageData meta;
	LcArrays	a;
	Gathered	centers;
	Gathered	members;
	Size		nc,
				nm;
	uint64	   *pos;

	if (old != NULL)
		return NULL;			/* no refresh in place: read it all again */

	memset(&ld, 0, sizeof(ld));
	ld.ref = ref;
	ld.rel = vs_index_open_for_read(ref);
	ld.bas = GetAccessStrategy(BAS_BULKREAD);
	buf = vs_index_read_block(ref, ld.rel, VS_LC_METAPAGE_BLKNO, ld.bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_lc_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);
	ld.text = meta.metric == VS_METRIC_LEVENSHTEIN;
	ld.dim = meta.dim;

	/* scratch: the current memory context (the cache's load context) */
	gather_init(&centers, &ld, CurrentMemoryContext);
	gather_init(&members, &ld, CurrentMemoryContext);
	walk_chain(&ld, meta.center_head, gather, &centers);
	walk_chain(&ld, meta.bucket_head, gather, &members);
	vs_index_close_for_read(ld.rel);
	FreeAccessStrategy(ld.bas);

	nc = centers.ids.n;
	nm = members.ids.n;
	memset(&a, 0, sizeof(a));
	a.center_ids = palloc_extended(sizeof(int64) * (nc + 1), MCXT_ALLOC_HUGE);
	a.radii = palloc_extended(sizeof(double) * (nc + 1), MCXT_ALLOC_HUGE);
	a.bucket_offsets = palloc_extended(sizeof(uint64) * (nc + 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	a.member_ids = palloc_extended(sizeof(int64) * (nm + 1), MCXT_ALLOC_HUGE);
	memcpy(a.center_ids, centers.ids.data, sizeof(int64) * nc);
	memcpy(a.radii, centers.radii.data, sizeof(double) * nc);

	/* members grouped by cluster, stable (counting sort) */
	for (Size i = 0; i < nm; i++)
	{
		uint32		c = ((uint32 *) members.clusters.data)[i];

		if (c >= nc)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_lc index %u has a member of cluster %u of %zu",
							ref->indexrelid, c, nc),
					 errhint("REINDEX the index.")));
		a.bucket_offsets[c + 1]++;
	}
	for (Size c = 0; c < nc; c++)
		a.bucket_offsets[c + 1] += a.bucket_offsets[c];
	pos = palloc_extended(sizeof(uint64) * (nc + 1), MCXT_ALLOC_HUGE);
	memcpy(pos, a.bucket_offsets, sizeof(uint64) * (nc + 1));

	if (ld.text)
	{
		uint64	   *moff = (uint64 *) members.offsets.data;
		uint64	   *target = palloc_extended(sizeof(uint64) * (nm + 1), MCXT_ALLOC_HUGE);
		uint64		at = 0;

		a.center_chars = palloc_extended(sizeof(uint32) * (centers.values.n + 1), MCXT_ALLOC_HUGE);
		a.center_offsets = palloc_extended(sizeof(uint64) * (nc + 1), MCXT_ALLOC_HUGE);
		memcpy(a.center_chars, centers.values.data, sizeof(uint32) * centers.values.n);
		memcpy(a.center_offsets, centers.offsets.data, sizeof(uint64) * (nc + 1));
		a.member_chars = palloc_extended(sizeof(uint32) * (members.values.n + 1), MCXT_ALLOC_HUGE);
		a.member_offsets = palloc_extended(sizeof(uint64) * (nm + 1), MCXT_ALLOC_HUGE);
		/* where each member goes, then the offsets and characters in that order */
		for (Size i = 0; i < nm; i++)
			target[i] = pos[((uint32 *) members.clusters.data)[i]]++;
		{
			uint64	   *len = palloc_extended(sizeof(uint64) * (nm + 1), MCXT_ALLOC_HUGE);
			Size	   *src = palloc_extended(sizeof(Size) * (nm + 1), MCXT_ALLOC_HUGE);

			for (Size i = 0; i < nm; i++)
			{
				len[target[i]] = moff[i + 1] - moff[i];
				src[target[i]] = i;
			}
			for (Size j = 0; j < nm; j++)
			{
				Size		i = src[j];

				a.member_offsets[j] = at;
				memcpy(a.member_chars + at, (uint32 *) members.values.data + moff[i],
					   sizeof(uint32) * len[j]);
				a.member_ids[j] = ((int64 *) members.ids.data)[i];
				at += len[j];
			}
			a.member_offsets[nm] = at;
		}
	}
	else
	{
		Size		dim = meta.dim;

		a.center_vectors = palloc_extended(sizeof(float) * (nc * dim + 1), MCXT_ALLOC_HUGE);
		memcpy(a.center_vectors, centers.values.data, sizeof(float) * nc * dim);
		a.member_vectors = palloc_extended(sizeof(float) * (nm * dim + 1), MCXT_ALLOC_HUGE);
		for (Size i = 0; i < nm; i++)
		{
			uint64		j = pos[((uint32 *) members.clusters.data)[i]]++;

			memcpy(a.member_vectors + j * dim, (float *) members.values.data + i * dim,
				   sizeof(float) * dim);
			a.member_ids[j] = ((int64 *) members.ids.data)[i];
		}
	}

	/* the engine's view */
	a.lc.centers.kind = ld.text ? VS_MSPACE_STRINGS : VS_MSPACE_VECTORS;
	a.lc.centers.metric = ld.text ? VS_METRIC_L2 : (vs_metric) meta.metric;
	a.lc.centers.dim = meta.dim;
	a.lc.centers.n = nc;
	a.lc.centers.vectors = a.center_vectors;
	a.lc.centers.chars = a.center_chars;
	a.lc.centers.offsets = a.center_offsets;
	a.lc.centers.ids = a.center_ids;
	a.lc.members = a.lc.centers;
	a.lc.members.n = nm;
	a.lc.members.vectors = a.member_vectors;
	a.lc.members.chars = a.member_chars;
	a.lc.members.offsets = a.member_offsets;
	a.lc.members.ids = a.member_ids;
	a.lc.radii = a.radii;
	a.lc.bucket_offsets = a.bucket_offsets;

	*bytes = (nc + nm) * (sizeof(int64) + sizeof(uint64) + sizeof(double)) +
		(centers.values.n + members.values.n) * sizeof(uint32);
	*generation = meta.generation;
	return vs_metric_object(env, ref, ld.text, (vs_metric) meta.metric, meta.dim, create_lc,
							&a.lc, *bytes);
}

/* ---------------------------------------------------------------------------------------------
 * The engine object and its searches (vs_lc and vs_sss alike)
 */

VsMetricObject *
vs_metric_object(const VsLoadEnv *env, const VsIndexRef *ref, bool text, vs_metric metric,
				 uint32 dim, VsMetricCreate create, const void *arrays, Size bytes)
{
	VsMetricObject *o;
	int			rc;

	if (env->limit > 0 && bytes > env->limit)
		vs_load_too_large(env, ref->indexrelid, bytes);
	o = MemoryContextAllocZero(env->cxt, sizeof(VsMetricObject));
	o->text = text;
	o->metric = metric;
	o->dim = dim;
	if (env->reserve)
		(void) env->reserve(env->arg, bytes);
	for (;;)
	{
		rc = create(env->engine, arrays, &o->index);
		if (rc == VS_OUT_OF_MEMORY && env->evict_one && env->evict_one(env->arg))
			continue;
		break;
	}
	if (rc != VS_OK)
		vs_load_failed(env, ref->indexrelid, rc);
	return o;
}

void
vs_metric_destroy(struct vs_context *engine, void *obj)
{
	VsMetricObject *o = (VsMetricObject *) obj;

	if (o->index != NULL)
		vs_metric_index_destroy(engine, o->index);
}

/* The queries as the engine takes them: the index's kind of object (the engine checks it). */
static vs_mspace
query_space(const VsMetricObject *o, const VsQueries *queries)
{
	vs_mspace	s;

	memset(&s, 0, sizeof(s));
	s.n = queries->nq;
	if (queries->vectors != NULL)
	{
		s.kind = VS_MSPACE_VECTORS;
		s.metric = o->metric;
		s.dim = o->dim;
		s.vectors = queries->vectors;
	}
	else
	{
		s.kind = VS_MSPACE_STRINGS;
		s.metric = VS_METRIC_L2;
		s.chars = queries->chars;
		s.offsets = queries->offsets;
	}
	return s;
}

/* The engine's distances are the metric's base: L2 squared, i.e. rank units already. */
int
vs_metric_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
			  const VsQueries *queries, Size k, int64 *ids, float *distances, int64 *counts)
{
	VsMetricObject *o = (VsMetricObject *) obj;
	vs_mspace	q = query_space(o, queries);

	return vs_metric_index_knn(engine, o->index, &q, k, (int64_t *) ids, distances,
							   (int64_t *) counts);
}

int
vs_metric_range(struct vs_context *engine, void *obj, const VsKindParams *params,
				const VsQueries *queries, double radius, vs_alloc_fn alloc, void *alloc_arg,
				vs_range_result *out)
{
	VsMetricObject *o = (VsMetricObject *) obj;
	vs_mspace	q = query_space(o, queries);

	return vs_metric_index_range(engine, o->index, &q, radius, alloc, alloc_arg, out);
}

/*
 * A search request of vs_lc or vs_sss: kNN or range, no parameters, strings under edit distance
 * (a text index) or vectors under L2 or L1.
 */
bool
vs_metric_check_request(const struct VsRequest *req, char *why, Size whylen)
{
	static const VsKindParams none;

	if (req->op == VS_OP_BUILD)
		return vs_metric_check_build(req, why, whylen);
	if (req->op != VS_OP_KNN && req->op != VS_OP_RANGE)
		snprintf(why, whylen, "vs_lc and vs_sss answer kNN, range and build requests only");
	else if (memcmp(&req->params, &none, sizeof(none)) != 0)
		snprintf(why, whylen, "vs_lc and vs_sss searches take no parameters");
	else if (req->qformat == VS_QUERIES_STRINGS ? req->metric != VS_METRIC_LEVENSHTEIN
			 : (req->metric != VS_METRIC_L2 && req->metric != VS_METRIC_L1))
		snprintf(why, whylen, "vs_lc and vs_sss do not search %s queries under metric %u",
				 req->qformat == VS_QUERIES_STRINGS ? "string" : "vector", req->metric);
	else
		return true;
	return false;
}
