/*
 * vs_sss: vsearch_index_check's walk (indexcheck.h).
 *
 * The metapage: the access method, the operator class's metric.  The pivot chain (head to tail,
 * pivot pages only) holds npivots objects; the row chain holds the rows, each with the index's
 * dimension (vectors, finite elements) or characters (text) and npivots distances: finite, >= 0
 * and the distance to each pivot (stored as float4, and computed at build by the engine: a
 * relative 1e-4 is allowed).  VACUUM deletes rows before it lowers the metapage's row count, so
 * rows <= ntuples (equal unless a VACUUM was interrupted).
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"

#include "indexcheck.h"
#include "sss.h"

typedef struct SssWalk
{
	VsSssMetaPageData meta;
	bool		text;
	uint32		npivots;		/* seen */
	VsSssTuple **pivots;		/* copies */
	uint64		rows;
} SssWalk;

static VsSssTuple *
sss_tuple(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size,
		  uint32 npivots)
{
	VsSssTuple *t = (VsSssTuple *) item;

	if (t->npivots != npivots || t->len > (uint32) vs_sss_max_len(npivots) ||
		size != VS_SSS_TUPLE_SIZE(t->len, t->npivots))
		vs_check_fail(c, blkno, "tuple %u: %zu bytes for an object of %u elements and %u "
					  "pivot distances (the index has %u pivots)", off, size, t->len,
					  t->npivots, npivots);
	return t;
}

static VsLcValue
sss_value(const VsSssTuple *t)
{
	VsLcValue	v;

	v.data = t->data;
	v.len = (int) t->len;
	return v;
}

static void
visit_pivot(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size, void *arg)
{
	SssWalk    *w = (SssWalk *) arg;
	VsSssTuple *t = sss_tuple(c, blkno, off, item, size, 0);

	vs_lc_check_object(c, blkno, w->text, w->meta.dim, t->data, t->len, vs_sss_max_len(0));
	if (w->npivots >= w->meta.npivots)
		vs_check_fail(c, blkno, "more pivots than the metapage's %u", w->meta.npivots);
	w->pivots[w->npivots] = palloc(size);
	memcpy(w->pivots[w->npivots], t, size);
	w->npivots++;
}

static void
visit_row(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size, void *arg)
{
	SssWalk    *w = (SssWalk *) arg;
	VsSssTuple *t = sss_tuple(c, blkno, off, item, size, w->meta.npivots);
	const float *dists = VsSssTupleDistances(t);

	vs_lc_check_object(c, blkno, w->text, w->meta.dim, t->data, t->len,
					   vs_sss_max_len(w->meta.npivots));
	for (uint32 j = 0; j < t->npivots; j++)
	{
		double		d = vs_lc_distance((vs_metric) w->meta.metric, w->meta.dim, sss_value(t),
									   sss_value(w->pivots[j]));

		if (!isfinite(dists[j]) || dists[j] < 0 || fabs(dists[j] - d) > 1e-4 * (1 + d))
			vs_check_fail(c, blkno, "tuple %u: distance %g to pivot %u, computed %g", off,
						  dists[j], j, d);
	}
	vs_check_tid(c, blkno, &t->heap_tid, 0);
	w->rows++;
	CHECK_FOR_INTERRUPTS();
}

void
vs_sss_check(VsCheck *c)
{
	Page		page;
	SssWalk		w;
	uint32		declared = vs_declared_dim(c->index);

	memset(&w, 0, sizeof(w));
	page = vs_check_page(c, 0, sizeof(VsLcPageOpaqueData), VS_SSS_PAGE_ID);
	vs_check_meta(c, page, VS_SSS_MAGIC, VS_SSS_VERSION);
	memcpy(&w.meta, vs_sss_page_meta(page), sizeof(w.meta));
	if (VsLcPageGetOpaque(page)->flags != VS_LC_META)
		vs_check_fail(c, 0, "the metapage is not flagged as one");
	w.text = vs_lc_is_text(c->index);
	if (w.meta.metric != (uint32) vs_lc_opclass_metric(c->index))
		vs_check_fail(c, 0, "metric %u, the operator class's is %d", w.meta.metric,
					  (int) vs_lc_opclass_metric(c->index));
	if ((w.text && w.meta.dim != 0) || w.meta.dim > (uint32) VS_LC_MAX_LEN ||
		(declared != 0 && w.meta.dim != 0 && w.meta.dim != declared))
		vs_check_fail(c, 0, "dimension %u (the column declares %u)", w.meta.dim, declared);
	if (vs_sss_max_len(w.meta.npivots) < (int) w.meta.dim || vs_sss_max_len(w.meta.npivots) < 1)
		vs_check_fail(c, 0, "%u pivots", w.meta.npivots);

	w.pivots = palloc(sizeof(VsSssTuple *) * Max(w.meta.npivots, 1));
	vs_lc_check_chain(c, w.meta.pivot_head, w.meta.pivot_tail, VS_LC_CENTERS, VS_SSS_PAGE_ID,
					  "pivot", offsetof(VsSssTuple, data), visit_pivot, &w);
	if (w.npivots != w.meta.npivots)
		vs_check_fail(c, 0, "the metapage counts %u pivots, the pages hold %u",
					  w.meta.npivots, w.npivots);
	vs_lc_check_chain(c, w.meta.row_head, w.meta.row_tail, VS_LC_BUCKETS, VS_SSS_PAGE_ID,
					  "row", offsetof(VsSssTuple, data), visit_row, &w);
	if (w.rows > w.meta.ntuples)
		vs_check_fail(c, 0, "the metapage counts " UINT64_FORMAT " entries, the pages hold "
					  UINT64_FORMAT, w.meta.ntuples, w.rows);

	vs_check_report(c, "dimensions", w.meta.dim);
	vs_check_report(c, "pivots", w.npivots);
	vs_check_report(c, "rows", (int64) w.rows);
	vs_check_report(c, "metapage_entries", (int64) w.meta.ntuples);
}
