/*
 * vs_ivfpq: vsearch_index_check's walk (indexcheck.h).
 *
 * The metapage: the access method, the operator class's metric, options in range, the code size
 * of m and nbits.  A trained index: the centroid and codebook float pages hold lists rows of dim
 * and dim packed rows of 2^nbits (zero-padded to a multiple of 32) finite floats over the blocks
 * the metapage names, whole rows to a page, the directory pages one entry per
 * list; every list's chain runs from its `last` page through `prev` to its `first`, pages of that
 * list each holding at most the layout's capacity.  The pending chain likewise.  VACUUM leaves
 * the pages it emptied behind a list's new `last` out of the chain (never reused): every other
 * page is such an empty page of a list, and a list's chain and its emptied pages are its `npages`.
 * Counts: the metapage's row count is the directory's counts plus the pending count (they change in
 * one record).  A VACUUM interrupted while compacting a list may leave copies of an entry in that
 * list (readers deduplicate: tolerated, reported as duplicate entries) and a list count that is no
 * longer its pages' (reported as count_mismatches: 0 unless a VACUUM was interrupted).
 */
#include "postgres.h"

#include "miscadmin.h"

#include "indexcheck.h"
#include "ivfpq.h"

/*
 * Reads a run of consecutive float pages holding nrows rows of rowlen floats in all, whole rows to
 * a page (unless a row is longer than a page), each row's floats past `used` zero (padding).
 */
static void
check_rows(VsCheck *c, BlockNumber start, uint32 npages, Size nrows, int rowlen, int used,
		   const char *what)
{
	Size		seen = 0;
	int			per_page = VsIvfpqRowsPerPage(rowlen);

	if (npages == 0 || !BlockNumberIsValid(start))
		vs_check_fail(c, 0, "the %s have no pages", what);
	for (uint32 i = 0; i < npages; i++)
	{
		Page		page = vs_check_page(c, start + i, sizeof(VsIvfpqPageOpaqueData),
										 VS_IVFPQ_PAGE_ID);
		VsIvfpqPageOpaque opaque = VsIvfpqPageGetOpaque(page);
		const float *x = (const float *) PageGetContents(page);

		if (opaque->flags != VS_IVFPQ_FLOATS || opaque->nitems > VS_IVFPQ_FLOATS_PER_PAGE)
			vs_check_fail(c, start + i, "not a float page of the %s (flags %u, %u floats)",
						  what, opaque->flags, opaque->nitems);
		if (per_page > 0 && (opaque->nitems % rowlen != 0 || opaque->nitems / rowlen > per_page))
			vs_check_fail(c, start + i, "the %s page holds %u floats, not whole rows of %d",
						  what, opaque->nitems, rowlen);
		vs_check_floats(c, start + i, x, opaque->nitems, what);
		if (per_page > 0)
			for (int e = 0; e < opaque->nitems; e++)
				if (e % rowlen >= used && x[e] != 0.0f)
					vs_check_fail(c, start + i, "the %s' padding holds %g", what, x[e]);
		seen += opaque->nitems;
	}
	if (seen != nrows * rowlen)
		vs_check_fail(c, start, "the %s hold %zu floats, not %zu", what, seen,
					  (size_t) (nrows * rowlen));
}

/* Walks one chain from its newest page; returns its entries, sets *pages and *oldest. */
static uint64
check_chain(VsCheck *c, BlockNumber last, uint32 list, const VsIvfpqLayout *layout,
			uint32 *pages, BlockNumber *oldest)
{
	uint16		flags = list == VS_IVFPQ_PENDING_LIST ? VS_IVFPQ_PENDING : VS_IVFPQ_LIST;
	uint64		entries = 0;

	*pages = 0;
	*oldest = InvalidBlockNumber;
	for (BlockNumber blkno = last; BlockNumberIsValid(blkno);)
	{
		Page		page = vs_check_page(c, blkno, sizeof(VsIvfpqPageOpaqueData), VS_IVFPQ_PAGE_ID);
		VsIvfpqPageOpaque opaque = VsIvfpqPageGetOpaque(page);

		if (opaque->flags != flags || opaque->list != list)
			vs_check_fail(c, blkno, "in the chain of list %u, a page of list %u (flags %u)",
						  list, opaque->list, opaque->flags);
		if (opaque->nitems > layout->capacity)
			vs_check_fail(c, blkno, "%u entries, a page holds %d", opaque->nitems,
						  layout->capacity);
		for (int i = 0; i < opaque->nitems; i++)
		{
			vs_check_tid(c, blkno, &VsIvfpqPageTids(page)[i], list);
			if (layout->vdim > 0)
				vs_check_floats(c, blkno, VsIvfpqPageVecs(page, layout) + (Size) i * layout->vdim,
								layout->vdim, "a stored vector");
		}
		entries += opaque->nitems;
		(*pages)++;
		*oldest = blkno;
		blkno = opaque->prev;
	}
	return entries;
}

void
vs_ivfpq_check(VsCheck *c)
{
	Page		page;
	VsIvfpqMetaPageData meta;
	VsIvfpqLayout layout;
	VsIvfpqLayout playout;
	uint32		declared = vs_declared_dim(c->index);
	uint64		counted = 0;
	uint64		list_pages = 0;
	uint64		npending;
	int64		count_mismatches = 0;
	int64		emptied = 0;
	uint32	   *chain_pages;
	uint32		pages;
	BlockNumber oldest;

	page = vs_check_page(c, VS_IVFPQ_METAPAGE_BLKNO, sizeof(VsIvfpqPageOpaqueData),
						 VS_IVFPQ_PAGE_ID);
	vs_check_meta(c, page, VS_IVFPQ_MAGIC, VS_IVFPQ_VERSION);
	memcpy(&meta, vs_ivfpq_page_meta(page), sizeof(meta));
	if (VsIvfpqPageGetOpaque(page)->flags != VS_IVFPQ_META)
		vs_check_fail(c, 0, "the metapage is not flagged as one");
	if (meta.metric != (uint32) vs_opclass_metric(c->index))
		vs_check_fail(c, 0, "metric %u, the operator class's is %d", meta.metric,
					  (int) vs_opclass_metric(c->index));
	if (meta.dim > VECTOR_MAX_DIM || (declared != 0 && meta.dim != 0 && meta.dim != declared))
		vs_check_fail(c, 0, "dimension %u (the column declares %u)", meta.dim, declared);
	if (meta.nbits != 4 && meta.nbits != 8)
		vs_check_fail(c, 0, "nbits %u", meta.nbits);
	if (meta.trained &&
		(meta.lists == 0 || meta.lists > VS_IVFPQ_MAX_LISTS || meta.m == 0 ||
		 meta.m > VS_IVFPQ_MAX_M || meta.dim == 0 || meta.dim % meta.m != 0 ||
		 meta.code_size != (meta.m * meta.nbits + 7) / 8 || meta.empty_lists > meta.lists))
		vs_check_fail(c, 0, "quantizer of %u lists, m %u, nbits %u, code size %u over %u dimensions",
					  meta.lists, meta.m, meta.nbits, meta.code_size, meta.dim);
	if (!meta.trained && (meta.lists != 0 || meta.m != 0))
		vs_check_fail(c, 0, "no quantizer, yet %u lists and m %u", meta.lists, meta.m);
	vs_ivfpq_meta_layout(&meta, false, &layout);
	vs_ivfpq_meta_layout(&meta, true, &playout);
	chain_pages = palloc0(sizeof(uint32) * Max(meta.lists, 1));

	if (meta.trained)
	{
		check_rows(c, meta.centroid_start, meta.ncentroid_pages, meta.lists, (int) meta.dim,
				   (int) meta.dim, "centroids");
		check_rows(c, meta.codebook_start, meta.ncodebook_pages, meta.dim,
				   VS_IVFPQ_TABLE_WIDTH(meta.nbits), 1 << meta.nbits, "codebooks");
		if (meta.ndirectory_pages !=
			(meta.lists + VS_IVFPQ_DIR_PER_PAGE - 1) / VS_IVFPQ_DIR_PER_PAGE)
			vs_check_fail(c, 0, "%u directory pages for %u lists", meta.ndirectory_pages,
						  meta.lists);
		for (uint32 d = 0; d < meta.ndirectory_pages; d++)
		{
			BlockNumber dirblk = meta.directory_start + d;
			VsIvfpqListEntry *entries;
			uint32		n;

			page = vs_check_page(c, dirblk, sizeof(VsIvfpqPageOpaqueData), VS_IVFPQ_PAGE_ID);
			n = Min(meta.lists - d * VS_IVFPQ_DIR_PER_PAGE, (uint32) VS_IVFPQ_DIR_PER_PAGE);
			if (VsIvfpqPageGetOpaque(page)->flags != VS_IVFPQ_DIRECTORY ||
				VsIvfpqPageGetOpaque(page)->nitems != n)
				vs_check_fail(c, dirblk, "not the directory page of %u lists", n);
			/* a copy: the chains' pages replace c->page */
			entries = palloc(sizeof(VsIvfpqListEntry) * n);
			memcpy(entries, PageGetContents(page), sizeof(VsIvfpqListEntry) * n);
			for (uint32 i = 0; i < n; i++)
			{
				uint32		list = d * VS_IVFPQ_DIR_PER_PAGE + i;
				uint64		held;

				held = check_chain(c, entries[i].last, list, &layout, &pages, &oldest);
				chain_pages[list] = pages;
				if (pages > entries[i].npages || oldest != entries[i].first)
					vs_check_fail(c, dirblk, "list %u: %u pages from block %u back to %u, "
								  "the directory says %u pages from %u",
								  list, pages, entries[i].last, oldest, entries[i].npages,
								  entries[i].first);
				if (held != entries[i].count)
					count_mismatches++;
				counted += entries[i].count;
				list_pages += pages;
			}
			pfree(entries);
		}
	}

	npending = check_chain(c, meta.pending_last, VS_IVFPQ_PENDING_LIST, &playout, &pages, &oldest);
	if (oldest != meta.pending_first)
		vs_check_fail(c, 0, "the pending chain ends at block %u, the metapage says %u", oldest,
					  meta.pending_first);

	/* the emptied pages VACUUM left out of the chains */
	for (BlockNumber blkno = 1; blkno < c->nblocks; blkno++)
	{
		VsIvfpqPageOpaque opaque;

		if (c->reached[blkno])
			continue;
		CHECK_FOR_INTERRUPTS();
		page = vs_check_read(c, blkno);
		if (PageIsNew(page) || !VsIvfpqIsEntryPage(page))
			continue;			/* the driver's check of unreached pages reports it */
		opaque = VsIvfpqPageGetOpaque(page);
		if (opaque->nitems != 0 || opaque->page_id != VS_IVFPQ_PAGE_ID ||
			(opaque->list >= meta.lists && opaque->list != VS_IVFPQ_PENDING_LIST))
			continue;
		c->reached[blkno] = true;
		if (opaque->list != VS_IVFPQ_PENDING_LIST)
			chain_pages[opaque->list]++;
		emptied++;
	}
	for (uint32 d = 0; d < meta.ndirectory_pages; d++)
	{
		BlockNumber dirblk = meta.directory_start + d;
		VsIvfpqListEntry *entries;

		page = vs_check_read(c, dirblk);
		entries = (VsIvfpqListEntry *) PageGetContents(page);
		for (uint32 i = 0; i < VsIvfpqPageGetOpaque(page)->nitems; i++)
		{
			uint32		list = d * VS_IVFPQ_DIR_PER_PAGE + i;

			if (chain_pages[list] != entries[i].npages)
				vs_check_fail(c, dirblk, "list %u has %u pages, the directory says %u", list,
							  chain_pages[list], entries[i].npages);
		}
	}

	if (npending != meta.npending)
		count_mismatches++;
	if (meta.ntuples != counted + meta.npending)
		vs_check_fail(c, 0, "the metapage counts " UINT64_FORMAT " entries, the lists "
					  UINT64_FORMAT " and the pending chain " UINT64_FORMAT,
					  meta.ntuples, counted, meta.npending);

	/* duplicates are only ever copies within one list */
	c->duplicates_in_group_ok = true;
	vs_check_report(c, "dimensions", meta.dim);
	vs_check_report(c, "lists", meta.lists);
	vs_check_report(c, "list_pages", (int64) list_pages);
	vs_check_report(c, "pending_entries", (int64) npending);
	vs_check_report(c, "emptied_pages", emptied);
	vs_check_report(c, "metapage_entries", (int64) meta.ntuples);
	vs_check_report(c, "count_mismatches", count_mismatches);
}
