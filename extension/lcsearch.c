/*
 * vs_lc: the engine object of an index (read from its pages into the arrays of vsearch/lc.h) and
 * its searches on the CPU in this backend.
 *
 * The object is cached by the search layer (vs_search_object: the backend's object cache, keyed by
 * index and labelled with the metapage generation read before the pages); any change of the index
 * (insert, VACUUM) makes the next search read it again.  Members are grouped by cluster in the
 * order the pages hold them (the build's order, then inserts in arrival order).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "batch.h"
#include "lc.h"

/* A growing array in the object's memory context. */
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

void *
vs_lc_load(const VsLoadEnv *env, void *old, const VsIndexRef *ref, Size *bytes,
		   uint64 *generation)
{
	LcLoad		ld;
	Buffer		buf;
	VsLcMetaPageData meta;
	VsLcObject *obj;
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
	obj = MemoryContextAllocZero(env->cxt, sizeof(VsLcObject));
	obj->text = ld.text;
	obj->metric = (vs_metric) meta.metric;
	obj->dim = meta.dim;
	obj->center_ids = MemoryContextAllocHuge(env->cxt, sizeof(int64) * (nc + 1));
	obj->radii = MemoryContextAllocHuge(env->cxt, sizeof(double) * (nc + 1));
	obj->bucket_offsets = MemoryContextAllocZero(env->cxt, sizeof(uint64) * (nc + 1));
	obj->member_ids = MemoryContextAllocHuge(env->cxt, sizeof(int64) * (nm + 1));
	memcpy(obj->center_ids, centers.ids.data, sizeof(int64) * nc);
	memcpy(obj->radii, centers.radii.data, sizeof(double) * nc);

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
		obj->bucket_offsets[c + 1]++;
	}
	for (Size c = 0; c < nc; c++)
		obj->bucket_offsets[c + 1] += obj->bucket_offsets[c];
	pos = palloc_extended(sizeof(uint64) * (nc + 1), MCXT_ALLOC_HUGE);
	memcpy(pos, obj->bucket_offsets, sizeof(uint64) * (nc + 1));

	if (ld.text)
	{
		uint64	   *moff = (uint64 *) members.offsets.data;
		uint64	   *target = palloc_extended(sizeof(uint64) * (nm + 1), MCXT_ALLOC_HUGE);
		uint64		at = 0;

		obj->center_chars = MemoryContextAllocHuge(env->cxt, sizeof(uint32) * (centers.values.n + 1));
		obj->center_offsets = MemoryContextAllocHuge(env->cxt, sizeof(uint64) * (nc + 1));
		memcpy(obj->center_chars, centers.values.data, sizeof(uint32) * centers.values.n);
		memcpy(obj->center_offsets, centers.offsets.data, sizeof(uint64) * (nc + 1));
		obj->member_chars = MemoryContextAllocHuge(env->cxt, sizeof(uint32) * (members.values.n + 1));
		obj->member_offsets = MemoryContextAllocHuge(env->cxt, sizeof(uint64) * (nm + 1));
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

				obj->member_offsets[j] = at;
				memcpy(obj->member_chars + at, (uint32 *) members.values.data + moff[i],
					   sizeof(uint32) * len[j]);
				obj->member_ids[j] = ((int64 *) members.ids.data)[i];
				at += len[j];
			}
			obj->member_offsets[nm] = at;
		}
	}
	else
	{
		Size		dim = meta.dim;

		obj->center_vectors = MemoryContextAllocHuge(env->cxt, sizeof(float) * (nc * dim + 1));
		memcpy(obj->center_vectors, centers.values.data, sizeof(float) * nc * dim);
		obj->member_vectors = MemoryContextAllocHuge(env->cxt, sizeof(float) * (nm * dim + 1));
		for (Size i = 0; i < nm; i++)
		{
			uint64		j = pos[((uint32 *) members.clusters.data)[i]]++;

			memcpy(obj->member_vectors + j * dim, (float *) members.values.data + i * dim,
				   sizeof(float) * dim);
			obj->member_ids[j] = ((int64 *) members.ids.data)[i];
		}
	}

	/* the engine's view */
	obj->lc.centers.kind = ld.text ? VS_MSPACE_STRINGS : VS_MSPACE_VECTORS;
	obj->lc.centers.metric = ld.text ? VS_METRIC_L2 : (vs_metric) meta.metric;
	obj->lc.centers.dim = meta.dim;
	obj->lc.centers.n = nc;
	obj->lc.centers.vectors = obj->center_vectors;
	obj->lc.centers.chars = obj->center_chars;
	obj->lc.centers.offsets = obj->center_offsets;
	obj->lc.centers.ids = obj->center_ids;
	obj->lc.members = obj->lc.centers;
	obj->lc.members.n = nm;
	obj->lc.members.vectors = obj->member_vectors;
	obj->lc.members.chars = obj->member_chars;
	obj->lc.members.offsets = obj->member_offsets;
	obj->lc.members.ids = obj->member_ids;
	obj->lc.radii = obj->radii;
	obj->lc.bucket_offsets = obj->bucket_offsets;

	*bytes = (nc + nm) * (sizeof(int64) + sizeof(uint64) + sizeof(double)) +
		(centers.values.n + members.values.n) * sizeof(uint32);
	*generation = meta.generation;
	return obj;
}

void
vs_lc_destroy(struct vs_context *engine, void *obj)
{
	/* everything is in the object's memory context */
}

int
vs_lc_tick(void *arg, size_t done)
{
	return InterruptPending ? 1 : 0;
}

vs_mobject
vs_lc_query_object(bool text, VsLcValue q)
{
	vs_mobject	o;

	memset(&o, 0, sizeof(o));
	if (text)
		o.chars = q.data;
	else
		o.vector = q.data;
	o.len = q.len;
	return o;
}

/* ERROR for an engine status (after a cancel, the pending interrupt). */
void
vs_lc_status(int st)
{
	if (st == VS_OK)
		return;
	if (st == VS_CANCELLED)
		CHECK_FOR_INTERRUPTS();
	if (st == VS_OUT_OF_MEMORY)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory in a vs_lc search")));
	vs_engine_error(st);
}

/* Copies engine hits into palloc'd arrays and frees them. */
void
vs_lc_hits_palloc(vs_mhits *hits_in, int64 **ids, double **dists, int64 *n)
{
	vs_mhits	hits = *hits_in;

	*n = (int64) hits.n;
	*ids = palloc_extended(sizeof(int64) * (hits.n + 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	*dists = palloc_extended(sizeof(double) * (hits.n + 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
	if (*ids == NULL || *dists == NULL)
	{
		vs_mhits_free(&hits);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory for %zu range results", hits.n)));
	}
	if (hits.n > 0)
	{
		memcpy(*ids, hits.ids, sizeof(int64) * hits.n);
		memcpy(*dists, hits.distances, sizeof(double) * hits.n);
	}
	vs_mhits_free(&hits);
}

void
vs_lc_search_range(void *vobj, VsLcValue q, double radius, int64 **ids, double **dists, int64 *n)
{
	VsLcObject *obj = (VsLcObject *) vobj;
	vs_mobject	o = vs_lc_query_object(obj->text, q);
	vs_mhits	hits;
	int			st;

	memset(&hits, 0, sizeof(hits));
	st = vs_lc_range(&obj->lc, &o, radius, vs_lc_tick, NULL, &hits, NULL);
	if (st != VS_OK)
	{
		vs_mhits_free(&hits);
		vs_lc_status(st);
	}
	vs_lc_hits_palloc(&hits, ids, dists, n);
}

int64
vs_lc_search_knn(void *vobj, VsLcValue q, int k, int64 *ids, double *dists)
{
	VsLcObject *obj = (VsLcObject *) vobj;
	vs_mobject	o = vs_lc_query_object(obj->text, q);
	size_t		count = 0;

	vs_lc_status(vs_lc_knn(&obj->lc, &o, (size_t) k, vs_lc_tick, NULL, ids, dists, &count, NULL));
	return (int64) count;
}

bool
vs_lc_check_request(const struct VsRequest *req, char *why, Size whylen)
{
	snprintf(why, whylen, "vs_lc and vs_sss are searched in the backend (their GPU path is not built yet)");
	return false;
}
