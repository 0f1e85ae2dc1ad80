/*
 * vs_flat: kNN and range searches in this backend, over the index pages in shared buffers.
 *
 * Nothing is copied: the pages are pinned and share-locked a run at a time, and the engine's row
 * scan (vsearch/rowscan.h) reads their items in place (binary16 rows, an index of a halfvec
 * column, are widened a run at a time into one buffer of the scan: F16C where the CPU has it) and
 * keeps the best rows across runs.  A batch's runs are long and its queries split over threads
 * (vsearch.cpu_threads) while this thread holds the locks; a single query's runs are short, each
 * read while the next one's headers are fetched into the caches, so that the scan streams at
 * close to the memory's speed (docs/BENCHMARKS.md, "CPU path: vs_flat streaming").  An index
 * with sketches (flat.h) is read by a search of fewer than VS_FLAT_BATCH_QUERIES queries through
 * its sketch pages, and of its data pages only those holding rows the sketches do not rule out
 * (scan_sketched; BENCHMARKS.md, "vs_flat reads 8-bit sketches").  A new
 * session's first search costs about what its later ones do (its buffers are found in one sweep
 * over the buffer headers: recentpages.h), and a backend's memory does not grow with the index:
 * the pages are the buffer pool's, shared by every backend.  (Before, each backend read the whole
 * index into an engine dataset of its own on its first search: docs/BENCHMARKS.md, "CPU path:
 * vs_flat in place".)
 *
 * Concurrent changes: the metapage is read first, and rows visible to the scan's snapshot were
 * committed before it, so they lie on pages up to its last_block; inserts only append, and VACUUM
 * compacts a page in place under an exclusive lock (items never move between pages), so reading
 * each page under a share lock sees every such row once.  Rows a concurrent VACUUM has not removed
 * yet are dead to the snapshot and left out by the heap check, as with any index scan.
 *
 * Pages are read without a ring (they stay in shared buffers for the next search) when the index
 * takes at most half of shared_buffers, and through the bulk-read ring otherwise, so that a search
 * of an index too large to stay resident does not flush the whole pool each time.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "flat.h"
#include "recentpages.h"

/*
 * Pages held (pinned and share-locked) at once by a batch's scan (VS_FLAT_BATCH_QUERIES queries
 * or more): 1 MB of rows, enough that splitting its work over threads pays for the hand-over, few
 * enough to stay under the LWLocks a backend may hold (MAX_SIMUL_LWLOCKS, 200; a search holds no
 * other) and to keep a writer waiting on one of them only for a fraction of a millisecond.
 */
#define VS_FLAT_RUN_PAGES 128
#define VS_FLAT_BATCH_QUERIES 8
/*
 * Pages held at once by a scan of fewer queries, whose work is not split: while it reads one run,
 * the next run's buffer headers and page heads are fetched into the caches, so that its pins,
 * locks and item counts do not wait on memory one page after the other (their atomic operations
 * let no later load start early).  A few pins also stay in the backend's array of private
 * reference counts (8 entries; more go to a hash table).
 */
#define VS_FLAT_STREAM_PAGES 4

bool
vs_flat_stays_resident(double pages)
{
	return pages <= NBuffers / 2.0;
}

/*
 * Starts fetching into the caches what reading page blkno touches first: its buffer header, its
 * page header and the head of each item.  Fetching whole pages at once was slower; the rows
 * themselves are fetched by the row scan, a row at a time ahead of the one it measures, from
 * *ahead (where the page's rows will be; set when the page is in the recent set, else n = 0).
 */
static void
prefetch_page(const VsRecentPages *rp, BlockNumber blkno, int per_page, int words,
			  vs_row_block *ahead)
{
	const char *page = vs_recent_prefetch(rp, blkno);

	ahead->n = 0;
	if (page == NULL)
		return;
	__builtin_prefetch(page);
	for (int i = 0; i < per_page; i++)
		__builtin_prefetch(VsFlatPageGetItem(page, words, i));
	ahead->rows = VsFlatPageGetItem(page, words, 0)->x;
	ahead->stride = VS_FLAT_ITEM_SIZE(words);
	ahead->n = per_page;
	ahead->ids = NULL;
}

/*
 * Sketch pages fetched ahead of the one read: 4 (2 to 8 measured within noise of each other on the
 * development machine).
 */
#define VS_FLAT_SKETCH_AHEAD 4

/*
 * Starts fetching a sketch page into L2: the first line of each 4 kB, which starts the hardware
 * prefetcher's stream over the rest (a sketch page is read whole, front to back).  A prefetch of
 * every line took a fifth of the scan's time in the prefetch instructions themselves, waiting
 * for free slots: 200 single queries on Fashion-MNIST took 1.2-1.5 s that way, 0.83-0.97 s this
 * way (development machine, alternated).
 */
static void
prefetch_sketches(const VsRecentPages *rp, BlockNumber blkno)
{
	const char *page = vs_recent_prefetch(rp, blkno);

	if (page == NULL)
		return;
	for (int off = 0; off < BLCKSZ; off += 4096)
		__builtin_prefetch(page + off, 0, 2);
}

/*
 * Feeds scan the rows of an index with sketches that it may need: a group at a time, the sketch
 * page's sketches go through the scan's filter (its bound as the rows added so far left it), and
 * only the rows not ruled out are read, from their data pages, locked under the sketch page's
 * lock (so the counts and sketches are theirs).  A group whose sketch page is not one (a page a
 * crash left empty cannot precede data pages, but reading on is cheap) gives every row.
 */
static void
scan_sketched(const VsIndexRef *ref, Relation rel, VsRecentPages *rp, BufferAccessStrategy bas,
			  const VsFlatMetaPageData *meta, vs_context *engine, vs_rowscan *scan)
{
	const uint32 group = meta->sketch_group;
	const uint32 words = vs_store_words(meta->dim, meta->storage);
	const int	per_page = VsFlatItemsPerPage(words);
	const Size	item_size = VS_FLAT_ITEM_SIZE(words);
	const Size	sketch_bytes = vs_row_sketch_bytes(meta->dim);
	const int	slots = (int) group * per_page;
	unsigned char *need = palloc(slots);
	vs_row_block *blocks = palloc(sizeof(vs_row_block) * slots);
	int64	   *ids = palloc(sizeof(int64) * slots);
	Buffer	   *bufs = palloc(sizeof(Buffer) * group);
	float	   *widened = NULL;

	if (meta->storage == VS_STORE_F16)
		widened = palloc(sizeof(float) * meta->dim * slots);
	for (uint64 sk = 0; vs_flat_group_first_block(group, sk) <= meta->last_block; sk++)
	{
		const BlockNumber sblk = vs_flat_sketch_block(group, sk);
		const BlockNumber first = vs_flat_group_first_block(group, sk);
		Buffer		sbuf;
		Page		spage;
		bool		sketched;
		int			npages = 0;
		int			nblocks = 0;
		int			st;

		CHECK_FOR_INTERRUPTS();
		if (sk == 0)
			for (int a = 1; a < VS_FLAT_SKETCH_AHEAD; a++)
				prefetch_sketches(rp, vs_flat_sketch_block(group, a));
		prefetch_sketches(rp, vs_flat_sketch_block(group, sk + VS_FLAT_SKETCH_AHEAD));
		sbuf = vs_recent_pin(rp, ref, rel, sblk, bas);
		LockBuffer(sbuf, BUFFER_LOCK_SHARE);
		spage = BufferGetPage(sbuf);
		sketched = !PageIsNew(spage) &&
			PageGetSpecialSize(spage) == MAXALIGN(sizeof(VsFlatPageOpaqueData)) &&
			(VsFlatPageGetOpaque(spage)->flags & VS_FLAT_SKETCH) != 0;
		if (sketched)
			st = vs_rowscan_sketch_filter(engine, scan, VsFlatSketchAt(spage, group, sketch_bytes, 0),
										  sketch_bytes, slots, need);
		else
		{
			memset(need, 1, slots);
			st = VS_OK;
		}
		if (st != VS_OK)
		{
			UnlockReleaseBuffer(sbuf);
			vs_engine_error(engine, st);
		}
		for (uint32 p = 0; p < group && first + p <= meta->last_block; p++)
		{
			const unsigned char *pneed = need + p * per_page;
			int			count = sketched ? Min(VsFlatSketchCounts(spage)[p], per_page) : per_page;
			Buffer		buf;
			Page		page;
			int			nitems;
			int			i;

			for (i = 0; i < count && !pneed[i]; i++)
				;
			if (i == count)
				continue;		/* no row of this page is needed */
			buf = vs_recent_pin(rp, ref, rel, first + p, bas);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			bufs[npages++] = buf;
			page = BufferGetPage(buf);
			if (!VsFlatIsDataPage(page))
				continue;
			nitems = Min(VsFlatPageGetOpaque(page)->nitems, count);
			for (; i < nitems; i++)
			{
				VsFlatItem *item;
				int64	   *id = &ids[p * per_page + i];

				if (!pneed[i])
					continue;
				item = VsFlatPageGetItem(page, words, i);
				*id = vs_tid_to_id(&item->heap_tid);
				if (widened)
				{
					float	   *row = widened + (size_t) (p * per_page + i) * meta->dim;

					vs_flat_load_row(item, row, meta->dim, VS_STORE_F16);
					blocks[nblocks].rows = row;
					blocks[nblocks].stride = sizeof(float) * meta->dim;
				}
				else
				{
					blocks[nblocks].rows = item->x;
					blocks[nblocks].stride = item_size;
				}
				blocks[nblocks].n = 1;
				blocks[nblocks].ids = (const int64_t *) id;
				nblocks++;
			}
		}
		/* interrupts are held off while the locks are held, so the engine sees no cancel here */
		st = vs_rowscan_add(engine, scan, blocks, nblocks);
		for (int i = 0; i < npages; i++)
			UnlockReleaseBuffer(bufs[i]);
		UnlockReleaseBuffer(sbuf);
		if (st != VS_OK)
			vs_engine_error(engine, st);
	}
	pfree(need);
	pfree(blocks);
	pfree(ids);
	pfree(bufs);
	if (widened)
		pfree(widened);
}

/* Feeds every item of the index to scan, a run of pages at a time. */
static void
scan_pages(const VsIndexRef *ref, vs_context *engine, vs_rowscan *scan, int nq)
{
	Relation	rel = vs_index_open_for_read(ref);
	BufferAccessStrategy bas = NULL;
	VsRecentPages *rp = NULL;
	Buffer		buf;
	VsFlatMetaPageData meta;
	Buffer		bufs[VS_FLAT_RUN_PAGES];
	vs_row_block blocks[VS_FLAT_RUN_PAGES];
	vs_row_block ahead[VS_FLAT_STREAM_PAGES];	/* the next run's rows (float rows only) */
	int64	   *ids;
	float	   *widened = NULL;	/* binary16 rows: a run's rows as floats */
	int			per_page;
	Size		item_size;
	uint32		words;
	int			run_pages;
	bool		sketched;

	buf = vs_index_read_block(ref, rel, VS_FLAT_METAPAGE_BLKNO, NULL);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_flat_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);
	if (meta.dim == 0 || meta.last_block == VS_FLAT_METAPAGE_BLKNO)
	{
		vs_index_close_for_read(rel);
		return;
	}
	if (meta.dim != ref->dim)
		elog(ERROR, "vs_flat index %u changed dimension from %u to %u",
			 ref->indexrelid, ref->dim, meta.dim);
	/* a search of few queries in an index with sketches reads the sketches, then needed rows */
	sketched = meta.sketch_group > 0 && nq < VS_FLAT_BATCH_QUERIES;
	/* pages of a temporary index are local buffers: looked up in this backend's own table */
	if (!vs_flat_stays_resident((double) meta.last_block + 1))
		bas = GetAccessStrategy(BAS_BULKREAD);
	else if (rel == NULL)
		rp = vs_recent_pages(ref, meta.last_block + 1, !sketched);

	words = vs_store_words(meta.dim, meta.storage);
	per_page = VsFlatItemsPerPage(words);
	item_size = VS_FLAT_ITEM_SIZE(words);
	if (sketched)
	{
		scan_sketched(ref, rel, rp, bas, &meta, engine, scan);
		if (bas)
			FreeAccessStrategy(bas);
		vs_index_close_for_read(rel);
		return;
	}
	run_pages = nq >= VS_FLAT_BATCH_QUERIES ? VS_FLAT_RUN_PAGES : VS_FLAT_STREAM_PAGES;
	ids = palloc(sizeof(int64) * per_page * run_pages);
	if (meta.storage == VS_STORE_F16)
		widened = palloc(sizeof(float) * meta.dim * per_page * run_pages);
	for (BlockNumber blkno = VS_FLAT_FIRST_DATA_BLKNO; blkno <= meta.last_block;)
	{
		int			npages = 0;
		int			nblocks = 0;
		int			nahead = 0;
		int64	   *next_id = ids;
		int			st;

		CHECK_FOR_INTERRUPTS();
		if (run_pages == VS_FLAT_STREAM_PAGES)
			for (BlockNumber b = blkno + run_pages; b < blkno + 2 * run_pages && b <= meta.last_block; b++)
			{
				if (vs_flat_is_sketch_block(meta.sketch_group, b))
					continue;
				prefetch_page(rp, b, per_page, words, &ahead[nahead]);
				if (ahead[nahead].n > 0 && widened == NULL)
					nahead++;
			}
		for (; blkno <= meta.last_block && npages < run_pages; blkno++)
		{
			Page		page;
			int			nitems;

			if (vs_flat_is_sketch_block(meta.sketch_group, blkno))
				continue;
			buf = vs_recent_pin(rp, ref, rel, blkno, bas);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			bufs[npages++] = buf;
			/*
			 * Blocks past the metapage are data pages; their item count is read from pd_lower
			 * (flatutils.c keeps it at the end of the items) so that only the header's cache line
			 * is touched before the rows, not the special space at the far end of the page.
			 */
			page = BufferGetPage(buf);
			if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(VsFlatPageOpaqueData)))
				continue;
			nitems = ((int) ((PageHeader) page)->pd_lower - (int) MAXALIGN(SizeOfPageHeaderData)) /
				(int) item_size;
			nitems = Min(nitems, per_page);
			if (nitems <= 0)
				continue;
			for (int i = 0; i < nitems; i++)
				next_id[i] = vs_tid_to_id(&VsFlatPageGetItem(page, words, i)->heap_tid);
			if (widened)
			{
				float	   *rows = widened + (size_t) (next_id - ids) * meta.dim;

				for (int i = 0; i < nitems; i++)
					vs_flat_load_row(VsFlatPageGetItem(page, words, i), rows + (size_t) i * meta.dim,
									 meta.dim, VS_STORE_F16);
				blocks[nblocks].rows = rows;
				blocks[nblocks].stride = sizeof(float) * meta.dim;
			}
			else
			{
				blocks[nblocks].rows = VsFlatPageGetItem(page, words, 0)->x;
				blocks[nblocks].stride = item_size;
			}
			blocks[nblocks].n = nitems;
			blocks[nblocks].ids = (const int64_t *) next_id;
			nblocks++;
			next_id += nitems;
		}
		/* interrupts are held off while the locks are held, so the engine sees no cancel here */
		st = vs_rowscan_add_ahead(engine, scan, blocks, nblocks, ahead, nahead);
		for (int i = 0; i < npages; i++)
			UnlockReleaseBuffer(bufs[i]);
		if (st != VS_OK)
			vs_engine_error(engine, st);
	}
	pfree(ids);
	if (widened)
		pfree(widened);
	if (bas)
		FreeAccessStrategy(bas);
	vs_index_close_for_read(rel);
}

/* Feeds a scan just begun (status: its begin's) the pages; destroys it on an ERROR. */
static void
run_scan(const VsIndexRef *ref, vs_context *engine, vs_rowscan *scan, int nq, int status)
{
	if (status != VS_OK)
		vs_engine_error(engine, status);
	PG_TRY();
	{
		scan_pages(ref, engine, scan, nq);
	}
	PG_CATCH();
	{
		vs_rowscan_destroy(engine, scan);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* vs_flat's queries are vectors (its kind takes no strings: the worker and the scans check). */
static const float *
vector_queries(const VsQueries *queries)
{
	if (queries->vectors == NULL)
		elog(ERROR, "vs_flat searches take vector queries");
	return queries->vectors;
}

void
vs_flat_backend_knn(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries,
					int k, int64 *ids, float *distances, int64 *counts)
{
	vs_context *engine = vs_backend_engine();
	vs_rowscan *scan = NULL;
	int			st;

	st = vs_rowscan_knn_begin(engine, ref->dim, vs_rank_metric(ref->metric),
							  vector_queries(queries), queries->nq, k, &scan);
	run_scan(ref, engine, scan, (int) queries->nq, st);
	st = vs_rowscan_knn_result(engine, scan, (int64_t *) ids, distances, (int64_t *) counts);
	vs_rowscan_destroy(engine, scan);
	if (st != VS_OK)
		vs_engine_error(engine, st);
}

/* Range results go into the caller's memory context. */
static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

void
vs_flat_backend_range(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries,
					  double radius, VsRangeResult *out)
{
	int			nq = (int) queries->nq;
	vs_context *engine = vs_backend_engine();
	vs_rowscan *scan = NULL;
	vs_range_result result;
	int			st;

	st = vs_rowscan_range_begin(engine, ref->dim, vs_rank_metric(ref->metric),
								vector_queries(queries), nq, vs_rank_radius(ref->metric, radius),
								&scan);
	run_scan(ref, engine, scan, nq, st);
	memset(&result, 0, sizeof(result));
	st = vs_rowscan_range_result(engine, scan, range_alloc, NULL, &result);
	vs_rowscan_destroy(engine, scan);
	if (st != VS_OK)
		vs_engine_error(engine, st);
	out->nq = nq;
	out->total = (int64) result.total;
	out->offsets = (int64 *) result.offsets;
	out->ids = (int64 *) result.ids;
	out->distances = result.distances;
}
