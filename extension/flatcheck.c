/*
 * vs_flat: vsearch_index_check's walk (indexcheck.h).  The metapage names the access method, the
 * operator class's metric and a dimension that fits a page; data pages are blocks 1..last_block
 * (later blocks are never initialized: inserts add a page and move last_block in one record);
 * each holds nitems fixed-size items with pd_lower at their end, finite elements (float rows, or
 * binary16 rows, which only an index of a halfvec column has).  VACUUM
 * compacts the pages before it lowers the metapage's count, so the entries on the pages never
 * exceed it (equal unless a VACUUM was interrupted).  With sketches, every group's sketch page
 * counts its pages' items and holds each row's sketch, equal byte for byte to the row's sketch
 * made again (a search trusts a sketch to rule its row out).
 */
#include "postgres.h"

#include "flat.h"
#include "indexcheck.h"

void
vs_flat_check(VsCheck *c)
{
	Page		page;
	VsFlatMetaPageData meta;
	uint32		declared = vs_declared_dim(c->index);
	uint64		entries = 0;
	int64		data_pages = 0;
	int			per_page;
	uint32		words;
	float	   *row;
	Size		sketch_bytes;
	char	   *sketch;
	char	   *sketch_pages = NULL;	/* the current run's sketch pages, copied */
	BlockNumber sketch_blocks[VS_FLAT_SKETCH_RUN];	/* their blocks (Invalid: none) */

	page = vs_check_page(c, VS_FLAT_METAPAGE_BLKNO, sizeof(VsFlatPageOpaqueData),
						 VS_FLAT_PAGE_ID);
	vs_check_meta(c, page, VS_FLAT_MAGIC, VS_FLAT_VERSION);
	memcpy(&meta, vs_flat_page_meta(page), sizeof(meta));
	if (VsFlatPageGetOpaque(page)->flags != VS_FLAT_META)
		vs_check_fail(c, 0, "the metapage is not flagged as one");
	if (meta.metric != (uint32) vs_opclass_metric(c->index))
		vs_check_fail(c, 0, "metric %u, the operator class's is %d", meta.metric,
					  (int) vs_opclass_metric(c->index));
	if (meta.dim > (uint32) vs_flat_max_dim(meta.storage) || (declared != 0 && meta.dim != 0 && meta.dim != declared))
		vs_check_fail(c, 0, "dimension %u (the column declares %u)", meta.dim, declared);
	if (meta.dim == 0 && meta.last_block != VS_FLAT_METAPAGE_BLKNO)
		vs_check_fail(c, 0, "data pages but no dimension");
	if (meta.storage != VS_STORE_F32 &&
		(meta.storage != VS_STORE_F16 || !vs_index_is_halfvec(c->index)))
		vs_check_fail(c, 0, "storage %u for a column of type %s", meta.storage,
					  vs_index_is_halfvec(c->index) ? "halfvec" : "vector");
	if (meta.epoch > meta.generation)
		vs_check_fail(c, 0, "epoch " UINT64_FORMAT " after generation " UINT64_FORMAT,
					  meta.epoch, meta.generation);

	if (meta.sketch_group != 0 && meta.sketch_group != vs_flat_sketch_group(meta.dim, meta.storage))
		vs_check_fail(c, 0, "sketch group %u, rows of %u dimensions take %u", meta.sketch_group,
					  meta.dim, vs_flat_sketch_group(meta.dim, meta.storage));

	words = vs_store_words(meta.dim, meta.storage);
	per_page = meta.dim > 0 ? VsFlatItemsPerPage(words) : 0;
	row = palloc(sizeof(float) * Max(meta.dim, 1));
	sketch_bytes = vs_row_sketch_bytes(meta.dim);
	sketch = palloc(sketch_bytes);
	if (meta.sketch_group > 0)
		sketch_pages = palloc((Size) VS_FLAT_SKETCH_RUN * BLCKSZ);
	for (int k = 0; k < VS_FLAT_SKETCH_RUN; k++)
		sketch_blocks[k] = InvalidBlockNumber;
	for (BlockNumber blkno = VS_FLAT_FIRST_DATA_BLKNO;
		 meta.last_block != VS_FLAT_METAPAGE_BLKNO && blkno <= meta.last_block; blkno++)
	{
		VsFlatPageOpaque opaque;
		int			group_page = 0;
		Page		spage = NULL;

		if (vs_flat_is_sketch_block(meta.sketch_group, blkno))
		{
			int			k = (int) ((blkno - 1) % vs_flat_sketch_period(meta.sketch_group));

			/* all zeros: reserved with its run, its group not begun */
			sketch_blocks[k] = InvalidBlockNumber;
			if (PageIsNew(vs_check_read(c, blkno)))
				continue;
			page = vs_check_page(c, blkno, sizeof(VsFlatPageOpaqueData), VS_FLAT_PAGE_ID);
			if (VsFlatPageGetOpaque(page)->flags != VS_FLAT_SKETCH)
				vs_check_fail(c, blkno, "flags %u, a sketch page's are %u",
							  VsFlatPageGetOpaque(page)->flags, VS_FLAT_SKETCH);
			/* vs_check_page's copy is overwritten by the next read: keep one */
			memcpy(sketch_pages + (Size) k * BLCKSZ, page, BLCKSZ);
			sketch_blocks[k] = blkno;
			continue;
		}
		/* all zeros: an extension whose WAL a crash lost (flatinsert.c), which searches skip */
		if (PageIsNew(vs_check_read(c, blkno)))
			continue;
		page = vs_check_page(c, blkno, sizeof(VsFlatPageOpaqueData), VS_FLAT_PAGE_ID);
		opaque = VsFlatPageGetOpaque(page);
		if (opaque->flags != VS_FLAT_DATA)
			vs_check_fail(c, blkno, "flags %u, a data page's are %u", opaque->flags, VS_FLAT_DATA);
		if (opaque->nitems > per_page)
			vs_check_fail(c, blkno, "%u items, a page holds %d", opaque->nitems, per_page);
		if (((PageHeader) page)->pd_lower !=
			MAXALIGN(SizeOfPageHeaderData) + (Size) opaque->nitems * VS_FLAT_ITEM_SIZE(words))
			vs_check_fail(c, blkno, "pd_lower %u is not the end of its %u items",
						  ((PageHeader) page)->pd_lower, opaque->nitems);
		if (meta.sketch_group > 0)
		{
			BlockNumber sblk = vs_flat_sketch_block_of(meta.sketch_group, blkno);
			int			k = (int) ((sblk - 1) % vs_flat_sketch_period(meta.sketch_group));

			group_page = vs_flat_group_page(meta.sketch_group, blkno);
			spage = (Page) (sketch_pages + (Size) k * BLCKSZ);
			if (sketch_blocks[k] != sblk)
				vs_check_fail(c, blkno, "its sketch page %u is not one", sblk);
			if (VsFlatSketchCounts(spage)[group_page] != opaque->nitems)
				vs_check_fail(c, blkno, "%u items, its sketch page counts %u", opaque->nitems,
							  VsFlatSketchCounts(spage)[group_page]);
		}
		for (int i = 0; i < opaque->nitems; i++)
		{
			VsFlatItem *item = VsFlatPageGetItem(page, words, i);

			vs_check_tid(c, blkno, &item->heap_tid, 0);
			vs_flat_load_row(item, row, meta.dim, meta.storage);
			vs_check_floats(c, blkno, row, meta.dim, "an item");
			if (meta.sketch_group > 0)
			{
				vs_row_sketch_make(row, meta.dim, sketch);
				if (memcmp(sketch, VsFlatSketchAt(spage, meta.sketch_group, sketch_bytes,
												  group_page * per_page + i), sketch_bytes) != 0)
					vs_check_fail(c, blkno, "item %d's sketch differs from its row's", i);
			}
		}
		entries += opaque->nitems;
		data_pages++;
	}
	if (entries > meta.ntuples)
		vs_check_fail(c, 0, "the metapage counts " UINT64_FORMAT " entries, the pages hold "
					  UINT64_FORMAT, meta.ntuples, entries);
	pfree(row);
	pfree(sketch);
	if (sketch_pages)
		pfree(sketch_pages);
	vs_check_report(c, "dimensions", meta.dim);
	vs_check_report(c, "data_pages", data_pages);
	vs_check_report(c, "metapage_entries", (int64) meta.ntuples);
}
