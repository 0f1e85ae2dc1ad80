/*
 * vs_sss: the engine object of an index: pivots, rows and the pivot table read from its pages into
 * the arrays of vsearch/sss.h, which become the engine's metric index (vsearch/metric.h) as vs_lc's
 * do (lcsearch.c, which searches both); any change of the index makes the next search read it
 * again.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "sss.h"

typedef struct SssRead
{
	const VsIndexRef *ref;
	Relation	rel;
	BufferAccessStrategy bas;
	uint32		npivots;
	uint32		dim;
	bool		text;
	bool		rows;			/* reading rows (else pivots) */
	MemoryContext cxt;
	/* growing arrays */
	uint32	   *values;
	Size		nvalues,
				capvalues;
	uint64	   *offsets;
	int64	   *ids;
	float	   *table;
	Size		n,
				cap;
} SssRead;

static void
add_tuple(SssRead *rd, const VsSssTuple *t)
{
	ItemPointerData tid = t->heap_tid;

	if ((!rd->text && t->len != rd->dim) || (rd->rows && t->npivots != rd->npivots))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_sss index %u has a tuple of %u elements and %u pivot distances, "
						"expected %u and %u", rd->ref->indexrelid, t->len, t->npivots, rd->dim,
						rd->rows ? rd->npivots : 0),
				 errhint("REINDEX the index.")));
	if (rd->n + 1 >= rd->cap)
	{
		rd->cap *= 2;
		rd->offsets = repalloc_huge(rd->offsets, sizeof(uint64) * (rd->cap + 1));
		rd->ids = repalloc_huge(rd->ids, sizeof(int64) * rd->cap);
		if (rd->rows)
			rd->table = repalloc_huge(rd->table, sizeof(float) * rd->cap * Max(rd->npivots, 1));
	}
	while (rd->nvalues + t->len > rd->capvalues)
	{
		rd->capvalues *= 2;
		rd->values = repalloc_huge(rd->values, sizeof(uint32) * rd->capvalues);
	}
	memcpy(rd->values + rd->nvalues, t->data, sizeof(uint32) * t->len);
	rd->nvalues += t->len;
	rd->ids[rd->n] = vs_tid_to_id(&tid);
	if (rd->rows && rd->npivots > 0)
		memcpy(rd->table + rd->n * rd->npivots, VsSssTupleDistances(t), sizeof(float) * rd->npivots);
	rd->n++;
	rd->offsets[rd->n] = rd->nvalues;
}

static void
read_chain(SssRead *rd, BlockNumber blkno, bool rows)
{
	rd->rows = rows;
	rd->n = 0;
	rd->cap = 64;
	rd->nvalues = 0;
	rd->capvalues = 1024;
	rd->values = MemoryContextAllocHuge(rd->cxt, sizeof(uint32) * rd->capvalues);
	rd->offsets = MemoryContextAllocHuge(rd->cxt, sizeof(uint64) * (rd->cap + 1));
	rd->offsets[0] = 0;
	rd->ids = MemoryContextAllocHuge(rd->cxt, sizeof(int64) * rd->cap);
	rd->table = rows ? MemoryContextAllocHuge(rd->cxt, sizeof(float) * rd->cap * Max(rd->npivots, 1))
		: NULL;
	while (blkno != InvalidBlockNumber)
	{
		Buffer		buf = vs_index_read_block(rd->ref, rd->rel, blkno, rd->bas);
		Page		page;
		OffsetNumber maxoff;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(VsLcPageOpaqueData)) ||
			VsLcPageGetOpaque(page)->page_id != VS_SSS_PAGE_ID)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_sss index %u has an unexpected page %u", rd->ref->indexrelid, blkno),
					 errhint("REINDEX the index.")));
		maxoff = PageGetMaxOffsetNumber(page);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++)
		{
			ItemId		iid = PageGetItemId(page, off);

			if (ItemIdIsUsed(iid))
				add_tuple(rd, (const VsSssTuple *) PageGetItem(page, iid));
		}
		blkno = VsLcPageGetOpaque(page)->next;
		UnlockReleaseBuffer(buf);
	}
}

static void
fill_space(vs_mspace *s, bool text, vs_metric metric, uint32 dim, Size n, uint32 *values,
		   uint64 *offsets, int64 *ids)
{
	memset(s, 0, sizeof(*s));
	s->kind = text ? VS_MSPACE_STRINGS : VS_MSPACE_VECTORS;
	s->metric = text ? VS_METRIC_L2 : metric;
	s->dim = dim;
	s->n = n;
	s->vectors = (const float *) values;
	s->chars = values;
	s->offsets = offsets;
	s->ids = ids;
}

static vs_status
create_sss(struct vs_context *engine, const void *arrays, vs_metric_index **out)
{
	return vs_metric_index_sss(engine, (const vs_sss *) arrays, out);
}

void *
vs_sss_load(const VsLoadEnv *env, void *old, const VsIndexRef *ref, Size *bytes,
			uint64 *generation)
{
	SssRead		rd;
	Buffer		buf;
	VsSssMetaPageData meta;
	vs_sss		sss;
	vs_metric	metric;

	if (old != NULL)
		return NULL;			/* no refresh in place: read it all again */
	memset(&rd, 0, sizeof(rd));
	rd.ref = ref;
	rd.rel = vs_index_open_for_read(ref);
	rd.bas = GetAccessStrategy(BAS_BULKREAD);
	buf = vs_index_read_block(ref, rd.rel, 0, rd.bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_sss_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);
	rd.npivots = meta.npivots;
	rd.dim = meta.dim;
	rd.text = meta.metric == VS_METRIC_LEVENSHTEIN;
	rd.cxt = CurrentMemoryContext;	/* scratch: the engine object gets copies */
	metric = (vs_metric) meta.metric;

	memset(&sss, 0, sizeof(sss));
	read_chain(&rd, meta.pivot_head, false);
	fill_space(&sss.pivots, rd.text, metric, rd.dim, rd.n, rd.values, rd.offsets, NULL);
	*bytes = rd.nvalues * sizeof(uint32);
	read_chain(&rd, meta.row_head, true);
	fill_space(&sss.objects, rd.text, metric, rd.dim, rd.n, rd.values, rd.offsets, rd.ids);
	sss.table = rd.table;
	*bytes += rd.nvalues * sizeof(uint32) + rd.n * (sizeof(uint64) + sizeof(int64) +
													sizeof(float) * rd.npivots);
	vs_index_close_for_read(rd.rel);
	FreeAccessStrategy(rd.bas);
	*generation = meta.generation;
	return vs_metric_object(env, ref, rd.text, metric, meta.dim, create_sss, &sss, *bytes);
}
