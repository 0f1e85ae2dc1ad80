/*
 * vs_lc: vsearch_index_check's walk (indexcheck.h).
 *
 * The metapage: the access method, the operator class's metric, the bucket size in range.  The
 * center chain (head to tail through `next`, center pages only) holds ncenters centers numbered
 * 0, 1, ... in creation order, each with a finite covering radius >= 0; the bucket chain holds
 * members of existing clusters.  Every object has the index's dimension (vectors, finite
 * elements) or at most VS_LC_MAX_LEN characters, none NUL (text).  The search's invariant: a member
 * of cluster c lies within c's covering radius of its center (the radius and the distance may
 * come from the engine's and the backend's code: a relative 1e-5 of rounding is allowed).
 * Counts: the centers are ncenters; VACUUM deletes members before it lowers the metapage's row
 * count, so live centers + members <= ntuples (equal unless a VACUUM was interrupted).  Dead
 * centers only route: their tids are not entries.
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"

#include "indexcheck.h"
#include "lc.h"

void
vs_lc_check_object(VsCheck *c, BlockNumber blkno, bool text, uint32 dim, const uint32 *data,
			 uint32 len, int max_len)
{
	if (text)
	{
		if ((int) len > max_len)
			vs_check_fail(c, blkno, "a text of %u characters, a page holds %d", len, max_len);
		for (uint32 i = 0; i < len; i++)
			if (data[i] == 0)
				vs_check_fail(c, blkno, "a text holds a NUL character");
	}
	else
	{
		if (len != dim)
			vs_check_fail(c, blkno, "a vector of %u dimensions in an index of %u", len, dim);
		vs_check_floats(c, blkno, (const float *) data, len, "a vector");
	}
}

void
vs_lc_check_chain(VsCheck *c, BlockNumber head, BlockNumber tail, uint16 flags, uint16 page_id,
				  const char *what, Size min_size, VsLcCheckVisit visit, void *arg)
{
	BlockNumber last = InvalidBlockNumber;

	for (BlockNumber blkno = head; BlockNumberIsValid(blkno);)
	{
		Page		page = vs_check_page(c, blkno, sizeof(VsLcPageOpaqueData), page_id);
		OffsetNumber maxoff = PageGetMaxOffsetNumber(page);

		if (VsLcPageGetOpaque(page)->flags != flags)
			vs_check_fail(c, blkno, "in the %s chain, a page flagged %u", what,
						  VsLcPageGetOpaque(page)->flags);
		for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++)
		{
			Size		size;
			void	   *item = vs_check_item(c, blkno, off, min_size, &size);

			visit(c, blkno, off, item, size, arg);
		}
		last = blkno;
		blkno = VsLcPageGetOpaque(page)->next;
	}
	if (last != tail)
		vs_check_fail(c, 0, "the %s chain ends at block %u, the metapage says %u", what, last,
					  tail);
}

typedef struct LcWalk
{
	VsLcMetaPageData meta;
	bool		text;
	uint32		ncenters;		/* seen */
	uint32		maxcenters;
	VsLcTuple **centers;		/* copies, by number */
	uint64		live;			/* entries: live centers and members */
	uint64		members;
	uint32		dead_centers;
	double		worst;			/* largest distance / radius of a member */
} LcWalk;

/* A tuple's size is the one its object's length gives. */
static VsLcTuple *
lc_tuple(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size)
{
	VsLcTuple  *t = (VsLcTuple *) item;

	if (t->len > (uint32) VS_LC_MAX_LEN || size != VS_LC_TUPLE_SIZE(t->len))
		vs_check_fail(c, blkno, "tuple %u: %zu bytes for an object of %u elements", off, size,
					  t->len);
	return t;
}

static void
visit_center(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size, void *arg)
{
	LcWalk	   *w = (LcWalk *) arg;
	VsLcTuple  *t = lc_tuple(c, blkno, off, item, size);

	vs_lc_check_object(c, blkno, w->text, w->meta.dim, t->data, t->len, VS_LC_MAX_LEN);
	if (t->cluster != w->ncenters)
		vs_check_fail(c, blkno, "center %u is numbered %u", w->ncenters, t->cluster);
	if (!isfinite(t->radius) || t->radius < 0)
		vs_check_fail(c, blkno, "center %u has radius %g", t->cluster, t->radius);
	if ((t->flags & ~VS_LC_DEAD) != 0)
		vs_check_fail(c, blkno, "center %u has flags %u", t->cluster, t->flags);
	if (w->ncenters == w->maxcenters)
	{
		w->maxcenters = Max(64, w->maxcenters * 2);
		w->centers = w->centers ? repalloc_huge(w->centers, sizeof(VsLcTuple *) * w->maxcenters)
			: palloc_extended(sizeof(VsLcTuple *) * w->maxcenters, MCXT_ALLOC_HUGE);
	}
	w->centers[w->ncenters] = palloc(VS_LC_TUPLE_SIZE(t->len));
	memcpy(w->centers[w->ncenters], t, VS_LC_TUPLE_SIZE(t->len));
	w->ncenters++;
	if (t->flags & VS_LC_DEAD)
		w->dead_centers++;
	else
	{
		vs_check_tid(c, blkno, &t->heap_tid, 0);
		w->live++;
	}
}

static void
visit_member(VsCheck *c, BlockNumber blkno, OffsetNumber off, void *item, Size size, void *arg)
{
	LcWalk	   *w = (LcWalk *) arg;
	VsLcTuple  *t = lc_tuple(c, blkno, off, item, size);
	const VsLcTuple *center;
	double		d;

	vs_lc_check_object(c, blkno, w->text, w->meta.dim, t->data, t->len, VS_LC_MAX_LEN);
	if (t->cluster >= w->ncenters || t->flags != 0)
		vs_check_fail(c, blkno, "a member of cluster %u (of %u), flags %u", t->cluster,
					  w->ncenters, t->flags);
	center = w->centers[t->cluster];
	d = vs_lc_distance((vs_metric) w->meta.metric, w->meta.dim, vs_lc_tuple_value(t),
					   vs_lc_tuple_value(center));
	if (!(d <= center->radius * (1 + 1e-5) + 1e-6))
		vs_check_fail(c, blkno, "a member of cluster %u at distance %g from its center, "
					  "outside the covering radius %g", t->cluster, d, center->radius);
	if (center->radius > 0)
		w->worst = Max(w->worst, d / center->radius);
	vs_check_tid(c, blkno, &t->heap_tid, 0);
	w->live++;
	w->members++;
	CHECK_FOR_INTERRUPTS();
}

void
vs_lc_check(VsCheck *c)
{
	Page		page;
	LcWalk		w;
	uint32		declared = vs_declared_dim(c->index);

	memset(&w, 0, sizeof(w));
	page = vs_check_page(c, VS_LC_METAPAGE_BLKNO, sizeof(VsLcPageOpaqueData), VS_LC_PAGE_ID);
	vs_check_meta(c, page, VS_LC_MAGIC, VS_LC_VERSION);
	memcpy(&w.meta, vs_lc_page_meta(page), sizeof(w.meta));
	if (VsLcPageGetOpaque(page)->flags != VS_LC_META)
		vs_check_fail(c, 0, "the metapage is not flagged as one");
	w.text = vs_lc_is_text(c->index);
	if (w.meta.metric != (uint32) vs_lc_opclass_metric(c->index))
		vs_check_fail(c, 0, "metric %u, the operator class's is %d", w.meta.metric,
					  (int) vs_lc_opclass_metric(c->index));
	if ((w.text && w.meta.dim != 0) || w.meta.dim > (uint32) VS_LC_MAX_LEN ||
		(declared != 0 && w.meta.dim != 0 && w.meta.dim != declared))
		vs_check_fail(c, 0, "dimension %u (the column declares %u)", w.meta.dim, declared);
	if (w.meta.bucket_size < 1 || w.meta.bucket_size > VS_LC_MAX_BUCKET)
		vs_check_fail(c, 0, "bucket size %u", w.meta.bucket_size);
	if (!w.text && w.meta.dim == 0 && BlockNumberIsValid(w.meta.center_head))
		vs_check_fail(c, 0, "centers but no dimension");

	vs_lc_check_chain(c, w.meta.center_head, w.meta.center_tail, VS_LC_CENTERS, VS_LC_PAGE_ID,
					  "center", offsetof(VsLcTuple, data), visit_center, &w);
	if (w.ncenters != w.meta.ncenters)
		vs_check_fail(c, 0, "the metapage counts %u centers, the pages hold %u",
					  w.meta.ncenters, w.ncenters);
	vs_lc_check_chain(c, w.meta.bucket_head, w.meta.bucket_tail, VS_LC_BUCKETS, VS_LC_PAGE_ID,
					  "bucket", offsetof(VsLcTuple, data), visit_member, &w);
	if (w.live > w.meta.ntuples)
		vs_check_fail(c, 0, "the metapage counts " UINT64_FORMAT " entries, the pages hold "
					  UINT64_FORMAT, w.meta.ntuples, w.live);

	vs_check_report(c, "dimensions", w.meta.dim);
	vs_check_report(c, "centers", w.ncenters);
	vs_check_report(c, "dead_centers", w.dead_centers);
	vs_check_report(c, "members", (int64) w.members);
	vs_check_report(c, "metapage_entries", (int64) w.meta.ntuples);
}
