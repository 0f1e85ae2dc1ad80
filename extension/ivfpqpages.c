/*
 * vs_ivfpq: searches in this backend over the index pages in shared buffers (the kind's
 * backend_knn / backend_range), the pending entries and the stored vectors of scans, all read in
 * place.
 *
 * Nothing of the index is kept between searches: the quantizer (centroids and codebooks, whose
 * pages hold them in the layout the engine reads) is read in place in its pinned buffers for each
 * search (search_quantizer below), ranks the lists of each query and gives the engine's list scan
 * (vsearch/ivfpq.h) its tables; the entries of the probed lists are
 * read from their pages for each search and handed to the scan a list at a time (ids decoded from
 * the heap tids and the codes copied from each page under its share lock, one page at a time, as
 * a list may be longer than the buffer locks a backend may hold), each entry tagged with where it
 * lies.  With store_vectors, a kNN search's exact re-rank reads the k candidates' stored vectors
 * from their pages by those tags.  A new session's first search therefore costs what its later
 * ones do, and a backend's memory does not grow with the index.  (Before, each backend read the
 * whole index into an engine object of its own on its first search: docs/BENCHMARKS.md, "CPU
 * path: vs_ivfpq in place".)  The GPU worker still loads its object (ivfpqsearch.c).
 *
 * Concurrent changes: lists are walked from their newest page to the oldest, as the worker's load
 * does; VACUUM only moves an entry to an older page of its own list (ivfpqvacuum.c), so a walk sees
 * every entry at least once, and the list scan counts an entry seen twice once.  An entry a
 * re-rank finds no longer at its tag's place has moved since: it is looked up by id in a walk of
 * the index.
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "ivfpq.h"
#include "recentpages.h"
#include "vsearch/distance.h"
#include "vsearch/ivfpq.h"

/* Most entries of a list handed to the scan in one add (each add builds the tables again). */
#define VS_IVFPQ_SCAN_CHUNK		65536

/* An entry's tag: its page and slot. */
#define TAG(blkno, slot)		(((uint64) (blkno) << 16) | (uint64) (slot))
#define TAG_BLOCK(tag)			((BlockNumber) ((tag) >> 16))
#define TAG_SLOT(tag)			((int) ((tag) & 0xFFFF))

/* The metapage, as a search sees it. */
static void
read_meta(const VsIndexRef *ref, Relation rel, VsIvfpqMetaPageData *meta)
{
	Buffer		buf = vs_index_read_block(ref, rel, VS_IVFPQ_METAPAGE_BLKNO, NULL);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(meta, vs_ivfpq_page_meta(BufferGetPage(buf)), sizeof(VsIvfpqMetaPageData));
	UnlockReleaseBuffer(buf);
}

/* An entry page of `list` (VS_IVFPQ_PENDING_LIST: the pending chain), share-locked. */
static Page
lock_entry_page(const VsIndexRef *ref, Buffer buf, BlockNumber blkno, uint32 list)
{
	Page		page;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (!VsIvfpqIsEntryPage(page) || VsIvfpqPageGetOpaque(page)->list != list)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index %u: block %u is not a page of list %u",
						ref->indexrelid, blkno, list),
				 errhint("REINDEX the index.")));
	return page;
}

/* The newest page of each list in lists (ascending), from the directory. */
static void
list_heads(const VsIndexRef *ref, Relation rel, const VsIvfpqMetaPageData *meta,
		   const uint32 *lists, Size nlists, BlockNumber *heads)
{
	BlockNumber page_no = InvalidBlockNumber;
	Buffer		buf = InvalidBuffer;
	Page		page = NULL;

	for (Size i = 0; i < nlists; i++)
	{
		uint32		l = lists[i];
		BlockNumber want = (BlockNumber) (l / VS_IVFPQ_DIR_PER_PAGE);

		if (l >= meta->lists || want >= meta->ndirectory_pages)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index %u: list %u is not in the directory",
							ref->indexrelid, l),
					 errhint("REINDEX the index.")));
		if (want != page_no)
		{
			if (BufferIsValid(buf))
				UnlockReleaseBuffer(buf);
			page_no = want;
			buf = vs_index_read_block(ref, rel, meta->directory_start + page_no, NULL);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			if (PageIsNew(page) || !(VsIvfpqPageGetOpaque(page)->flags & VS_IVFPQ_DIRECTORY))
				ereport(ERROR,
						(errcode(ERRCODE_INDEX_CORRUPTED),
						 errmsg("vs_ivfpq index %u: block %u is not a directory page",
								ref->indexrelid, meta->directory_start + page_no),
						 errhint("REINDEX the index.")));
		}
		heads[i] = ((VsIvfpqListEntry *) PageGetContents(page))[l % VS_IVFPQ_DIR_PER_PAGE].last;
	}
	if (BufferIsValid(buf))
		UnlockReleaseBuffer(buf);
}

/* The entries of a list on their way to the scan. */
typedef struct ListChunk
{
	int64	   *ids;
	uint8	   *codes;
	uint64	   *tags;
	int			n;
	int			cap;
	int			code_size;
} ListChunk;

static void
chunk_reserve(ListChunk *c, int more)
{
	int			cap;

	if (c->n + more <= c->cap)
		return;
	cap = Max(c->cap * 2, c->n + more);
	if (c->ids == NULL)
	{
		c->ids = palloc(sizeof(int64) * cap);
		c->codes = palloc((Size) c->code_size * cap);
		c->tags = palloc(sizeof(uint64) * cap);
	}
	else
	{
		c->ids = repalloc(c->ids, sizeof(int64) * cap);
		c->codes = repalloc(c->codes, (Size) c->code_size * cap);
		c->tags = repalloc(c->tags, sizeof(uint64) * cap);
	}
	c->cap = cap;
}

static void
chunk_flush(vs_context *engine, vs_ivfpq_scan *scan, uint32 list, ListChunk *c)
{
	int			st;

	if (c->n == 0)
		return;
	st = vs_ivfpq_scan_add(engine, scan, list, (const int64_t *) c->ids, c->codes,
						   (const uint64_t *) c->tags, (size_t) c->n);
	c->n = 0;
	if (st != VS_OK)
		vs_engine_error(engine, st);
}

/* Hands the scan every entry of the lists its queries probe. */
static void
feed_lists(const VsIndexRef *ref, Relation rel, const VsIvfpqMetaPageData *meta,
		   vs_context *engine, vs_ivfpq_scan *scan)
{
	const uint32_t *lists;
	Size		nlists = vs_ivfpq_scan_lists(scan, &lists);
	BlockNumber *heads;
	VsIvfpqLayout layout;
	ListChunk	c;
	VsRecentPages *rp;

	if (nlists == 0)
		return;
	/* pages of a temporary index are local buffers: looked up in this backend's own table */
	rp = rel == NULL ? vs_recent_pages(ref, 1, true) : NULL;
	vs_ivfpq_meta_layout(meta, false, &layout);
	heads = palloc(sizeof(BlockNumber) * nlists);
	list_heads(ref, rel, meta, (const uint32 *) lists, nlists, heads);
	memset(&c, 0, sizeof(c));
	c.code_size = layout.code_size;
	for (Size i = 0; i < nlists; i++)
	{
		uint32		list = lists[i];

		for (BlockNumber blkno = heads[i]; BlockNumberIsValid(blkno);)
		{
			Buffer		buf;
			Page		page;
			ItemPointerData *tids;
			int			nitems;

			CHECK_FOR_INTERRUPTS();
			buf = vs_recent_pin(rp, ref, rel, blkno, NULL);
			page = lock_entry_page(ref, buf, blkno, list);
			nitems = Min((int) VsIvfpqPageGetOpaque(page)->nitems, layout.capacity);
			chunk_reserve(&c, nitems);
			tids = VsIvfpqPageTids(page);
			for (int e = 0; e < nitems; e++)
			{
				c.ids[c.n + e] = vs_tid_to_id(&tids[e]);
				c.tags[c.n + e] = TAG(blkno, e);
			}
			memcpy(c.codes + (Size) c.n * c.code_size, VsIvfpqPageCodes(page, &layout),
				   (Size) c.code_size * nitems);
			c.n += nitems;
			blkno = VsIvfpqPageGetOpaque(page)->prev;
			UnlockReleaseBuffer(buf);
			if (c.n + layout.capacity > VS_IVFPQ_SCAN_CHUNK)
				chunk_flush(engine, scan, list, &c);
		}
		chunk_flush(engine, scan, list, &c);
	}
	if (c.ids)
	{
		pfree(c.ids);
		pfree(c.codes);
		pfree(c.tags);
	}
	pfree(heads);
}

/*
 * The quantizer of one search.  The centroid and codebook pages hold their rows whole, in the
 * layout the engine's kernels read (ivfpq.h), so the search's engine object reads them in place
 * in their buffers (vs_ivfpq_create_rows), pinned until the scan is done: nothing is copied, and a
 * new session's first search costs its later ones' work (docs/BENCHMARKS.md, "CPU path: the
 * vs_ivfpq quantizer in place").  Those pages never change after the build (REINDEX writes a new
 * relfilenode), so the pin alone keeps them valid; no content lock is held.  Where they cannot be
 * read so, the backend's cached copy serves (vs_ivfpq_quantizer): a temporary index (local
 * buffers, of which a backend has few), centroids longer than a page, or a quantizer of more
 * than 1/32 of shared buffers, which one search should not keep pinned.
 */
typedef struct SearchQuantizer
{
	vs_ivfpq   *ivf;			/* NULL: the index has no quantizer */
	bool		in_place;		/* ivf reads bufs: destroy it, then release them */
	int			nbufs;
	Buffer	   *bufs;
} SearchQuantizer;

#define VS_IVFPQ_PIN_RATIO		32	/* most quantizer pages pinned: 1/32 of shared buffers */

/* Pins npages float pages from start, holding nrows rows of rowlen floats; rows[i]: row i. */
static void
pin_rows(const VsIndexRef *ref, VsRecentPages *rp, BlockNumber start, uint32 npages,
		 Size nrows, int rowlen, const float **rows, SearchQuantizer *sq)
{
	int			per_page = VsIvfpqRowsPerPage(rowlen);
	Size		done = 0;

	for (uint32 p = 0; p < npages; p++)
	{
		Buffer		buf = vs_recent_pin(rp, ref, NULL, start + p, NULL);
		Page		page = BufferGetPage(buf);
		int			nitems;

		sq->bufs[sq->nbufs++] = buf;
		nitems = PageIsNew(page) ? -1 : VsIvfpqPageGetOpaque(page)->nitems;
		if (nitems < 0 || !(VsIvfpqPageGetOpaque(page)->flags & VS_IVFPQ_FLOATS) ||
			nitems % rowlen != 0 || nitems / rowlen > per_page ||
			done + nitems / rowlen > nrows)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index %u: block %u is not a quantizer page of %d-float rows",
							ref->indexrelid, start + p, rowlen),
					 errhint("REINDEX the index.")));
		for (int r = 0; r < nitems / rowlen; r++)
			rows[done++] = (const float *) PageGetContents(page) + (Size) r * rowlen;
	}
	if (done != nrows)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index %u: quantizer pages hold %zu of %zu rows",
						ref->indexrelid, (size_t) done, (size_t) nrows),
				 errhint("REINDEX the index.")));
}

/* Releases what search_quantizer took; safe to call twice. */
static void
release_quantizer(SearchQuantizer *sq)
{
	if (sq->in_place && sq->ivf != NULL)
		vs_ivfpq_destroy(vs_backend_engine(), sq->ivf);
	sq->ivf = NULL;
	for (int i = 0; i < sq->nbufs; i++)
		ReleaseBuffer(sq->bufs[i]);
	sq->nbufs = 0;
	if (sq->bufs != NULL)
		pfree(sq->bufs);
	sq->bufs = NULL;
}

/*
 * The quantizer and the metapage of the index as the scan of ref sees it (sq->ivf NULL:
 * untrained); release_quantizer gives it back, also on an ERROR.
 */
static void
search_quantizer(const VsIndexRef *ref, Relation rel, VsIvfpqMetaPageData *meta,
				 SearchQuantizer *sq)
{
	vs_ivfpq_params params;
	uint32		npages;
	const float **centroid_rows;
	const float **table_rows;
	int			st;

	memset(sq, 0, sizeof(*sq));
	read_meta(ref, rel, meta);
	if (!meta->trained || meta->lists == 0 || meta->dim == 0)
		return;
	if (meta->dim != ref->dim || meta->metric != (uint32) ref->metric)
		elog(ERROR, "vs_ivfpq index %u changed from dimension %u and metric %u to %u and %u",
			 ref->indexrelid, ref->dim, (uint32) ref->metric, meta->dim, meta->metric);
	npages = meta->ncentroid_pages + meta->ncodebook_pages;
	if (rel != NULL || VsIvfpqRowsPerPage(meta->dim) == 0 ||
		npages > (uint32) (NBuffers / VS_IVFPQ_PIN_RATIO))
	{
		sq->ivf = vs_ivfpq_quantizer(ref, rel, meta);
		return;
	}
	vs_ivfpq_engine_params(meta, &params);
	if (vs_ivfpq_table_width(&params) != (Size) VS_IVFPQ_TABLE_WIDTH(meta->nbits))
		elog(ERROR, "vs_ivfpq: the engine reads codebook rows of %zu floats, the pages hold %d",
			 vs_ivfpq_table_width(&params), VS_IVFPQ_TABLE_WIDTH(meta->nbits));
	sq->bufs = palloc(sizeof(Buffer) * npages);
	centroid_rows = palloc(sizeof(float *) * meta->lists);
	table_rows = palloc(sizeof(float *) * meta->dim);
	PG_TRY();
	{
		VsRecentPages *rp = vs_recent_pages(ref, 1, true);

		pin_rows(ref, rp, meta->centroid_start, meta->ncentroid_pages, meta->lists,
				 (int) meta->dim, centroid_rows, sq);
		pin_rows(ref, rp, meta->codebook_start, meta->ncodebook_pages, meta->dim,
				 VS_IVFPQ_TABLE_WIDTH(meta->nbits), table_rows, sq);
		st = vs_ivfpq_create_rows(vs_backend_engine(), &params, centroid_rows, table_rows,
								  &sq->ivf);
		if (st != VS_OK)
			vs_engine_error(vs_backend_engine(), st);
		sq->in_place = true;
	}
	PG_CATCH();
	{
		release_quantizer(sq);
		PG_RE_THROW();
	}
	PG_END_TRY();
	pfree(centroid_rows);
	pfree(table_rows);
}

/* vs_ivfpq's queries are vectors (its kind takes no strings: the worker and the scans check). */
static const float *
vector_queries(const VsQueries *queries)
{
	if (queries->vectors == NULL)
		elog(ERROR, "vs_ivfpq searches take vector queries");
	return queries->vectors;
}

/* Runs a scan just begun (status: its begin's) over the pages; destroys it on an ERROR. */
static void
run_scan(const VsIndexRef *ref, Relation rel, const VsIvfpqMetaPageData *meta, vs_context *engine,
		 vs_ivfpq_scan *scan, int status)
{
	if (status != VS_OK)
		vs_engine_error(engine, status);
	PG_TRY();
	{
		feed_lists(ref, rel, meta, engine, scan);
	}
	PG_CATCH();
	{
		vs_ivfpq_scan_destroy(engine, scan);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* ---------------------------------------------------------------------------------------------
 * Stored vectors (store_vectors)
 */

typedef struct IdSlot
{
	int64		id;
	int64		pos;
} IdSlot;

static int
cmp_idslot(const void *a, const void *b)
{
	const IdSlot *x = a,
			   *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->pos < y->pos ? -1 : (x->pos > y->pos ? 1 : 0);
}

/* Calls fn for the entries of one page whose id is wanted and not yet delivered. */
static void
deliver_page(Page page, const VsIvfpqLayout *layout, int dim, const IdSlot *wanted, int64 n,
			 bool *delivered, void (*fn) (void *arg, int64 pos, const float *x), void *arg)
{
	int			nitems = Min((int) VsIvfpqPageGetOpaque(page)->nitems, layout->capacity);
	ItemPointerData *tids = VsIvfpqPageTids(page);
	const float *vecs = VsIvfpqPageVecs(page, layout);

	for (int e = 0; e < nitems; e++)
	{
		int64		id = vs_tid_to_id(&tids[e]);
		int64		lo = 0,
					hi = n;

		while (lo < hi)
		{
			int64		mid = lo + (hi - lo) / 2;

			if (wanted[mid].id < id)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < n && wanted[lo].id == id; lo++)
			if (!delivered[wanted[lo].pos])
			{
				delivered[wanted[lo].pos] = true;
				fn(arg, wanted[lo].pos, vecs + (Size) e * dim);
			}
	}
}

/* Walks one chain for wanted entries. */
static void
walk_chain_for(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas, BlockNumber blkno,
			   uint32 list, const VsIvfpqLayout *layout, int dim, const IdSlot *wanted, int64 n,
			   bool *delivered, void (*fn) (void *arg, int64 pos, const float *x), void *arg)
{
	while (BlockNumberIsValid(blkno))
	{
		Buffer		buf;
		Page		page;

		CHECK_FOR_INTERRUPTS();
		buf = vs_index_read_block(ref, rel, blkno, bas);
		page = lock_entry_page(ref, buf, blkno, list);
		deliver_page(page, layout, dim, wanted, n, delivered, fn, arg);
		blkno = VsIvfpqPageGetOpaque(page)->prev;
		UnlockReleaseBuffer(buf);
	}
}

/*
 * The stored vectors of entries ids[0 .. n) of an index WITH (store_vectors = on): fn(arg, i, x)
 * once for each ids[i] found in the index (x: its stored vector, valid during the call), in no
 * particular order.  A walk of every list and of the pending chain: for the re-ranks the search
 * cannot do by the entries' places (several ORDER BY keys, pending entries, range candidates).
 */
void
vs_ivfpq_stored_vectors(const VsIndexRef *ref, const int64 *ids, int64 n,
						void (*fn) (void *arg, int64 pos, const float *x), void *arg)
{
	Relation	rel;
	BufferAccessStrategy bas;
	VsIvfpqMetaPageData meta;
	VsIvfpqLayout layout;
	IdSlot	   *wanted;
	bool	   *delivered;

	if (n <= 0)
		return;
	rel = vs_index_open_for_read(ref);
	read_meta(ref, rel, &meta);
	if (!meta.store_vectors || meta.dim != ref->dim)
		elog(ERROR, "vs_ivfpq index %u has no stored vectors of dimension %u",
			 ref->indexrelid, ref->dim);
	wanted = palloc_extended(sizeof(IdSlot) * n, MCXT_ALLOC_HUGE);
	delivered = palloc_extended(sizeof(bool) * n, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	for (int64 i = 0; i < n; i++)
	{
		wanted[i].id = ids[i];
		wanted[i].pos = i;
	}
	qsort(wanted, n, sizeof(IdSlot), cmp_idslot);
	bas = GetAccessStrategy(BAS_BULKREAD);

	vs_ivfpq_meta_layout(&meta, true, &layout);
	walk_chain_for(ref, rel, bas, meta.pending_last, VS_IVFPQ_PENDING_LIST, &layout, meta.dim,
				   wanted, n, delivered, fn, arg);
	if (meta.trained && meta.lists > 0)
	{
		uint32	   *lists = palloc(sizeof(uint32) * meta.lists);
		BlockNumber *heads = palloc(sizeof(BlockNumber) * meta.lists);

		for (uint32 l = 0; l < meta.lists; l++)
			lists[l] = l;
		list_heads(ref, rel, &meta, lists, meta.lists, heads);
		vs_ivfpq_meta_layout(&meta, false, &layout);
		for (uint32 l = 0; l < meta.lists; l++)
			walk_chain_for(ref, rel, bas, heads[l], l, &layout, meta.dim, wanted, n, delivered,
						   fn, arg);
		pfree(lists);
		pfree(heads);
	}
	FreeAccessStrategy(bas);
	pfree(wanted);
	pfree(delivered);
	vs_index_close_for_read(rel);
}

/* ---------------------------------------------------------------------------------------------
 * The exact re-rank of kNN candidates from their stored vectors
 */

typedef struct RankedEntry
{
	float		d;
	int64		id;
} RankedEntry;

static int
cmp_ranked(const void *a, const void *b)
{
	const RankedEntry *x = a,
			   *y = b;

	/* the engine's order: distance (NaN last), ties by id */
	if (isnan(x->d) != isnan(y->d))
		return isnan(x->d) ? 1 : -1;
	if (x->d != y->d && !isnan(x->d))
		return x->d < y->d ? -1 : 1;
	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

typedef struct MovedRerank
{
	RankedEntry *row;			/* of the query: found entries get their distance */
	const int64 *ids;			/* the moved candidates' ids */
	const int	*slot;			/* ... and their places in row */
	vs_metric	rank;
	const float *query;
	int			dim;
	bool	   *found;
} MovedRerank;

static void
rerank_moved(void *arg, int64 pos, const float *x)
{
	MovedRerank *m = (MovedRerank *) arg;

	m->row[m->slot[pos]].d = (float) vs_exact_distance_f32(m->rank, m->query, x, m->dim);
	m->found[pos] = true;
}

/*
 * The candidates (nq x k, counts, tags) re-ranked exactly from their stored vectors, in place: the
 * engine's exact distances (vsearch/distance.h) in its order, as the worker's re-rank on its copy
 * of the vectors returns them.
 */
static void
rerank_stored(const VsIndexRef *ref, Relation rel, const VsIvfpqMetaPageData *meta,
			  const float *queries, int nq, int k, int64 *ids, float *distances,
			  const uint64 *tags, int64 *counts)
{
	vs_metric	rank = vs_rank_metric((vs_metric) meta->metric);
	int			dim = (int) meta->dim;
	VsIvfpqLayout layout;
	RankedEntry *row = palloc(sizeof(RankedEntry) * Max(k, 1));
	int64	   *moved_ids = palloc(sizeof(int64) * Max(k, 1));
	int		   *moved_slot = palloc(sizeof(int) * Max(k, 1));
	bool	   *found = palloc(sizeof(bool) * Max(k, 1));
	VsRecentPages *rp = rel == NULL ? vs_recent_pages(ref, 1, true) : NULL;

	vs_ivfpq_meta_layout(meta, false, &layout);
	for (int q = 0; q < nq; q++)
	{
		const float *query = queries + (Size) q * dim;
		int			n = (int) Min(counts[q], (int64) k);
		int			nmoved = 0;
		int			kept = 0;

		for (int i = 0; i < n; i++)
		{
			int64		id = ids[(Size) q * k + i];
			uint64		tag = tags[(Size) q * k + i];
			BlockNumber blkno = TAG_BLOCK(tag);
			Buffer		buf;
			Page		page;
			VsIvfpqPageOpaque opaque;
			int			slot = TAG_SLOT(tag);

			row[i].id = id;
			row[i].d = NAN;
			buf = vs_recent_pin(rp, ref, rel, blkno, NULL);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			opaque = VsIvfpqPageGetOpaque(page);
			if (VsIvfpqIsEntryPage(page) && (opaque->flags & VS_IVFPQ_LIST) &&
				slot < Min((int) opaque->nitems, layout.capacity) &&
				vs_tid_to_id(&VsIvfpqPageTids(page)[slot]) == id)
				row[i].d = (float) vs_exact_distance_f32(rank, query,
														 VsIvfpqPageVecs(page, &layout) +
														 (Size) slot * dim, dim);
			else
			{
				/* moved by a VACUUM since the scan read it */
				moved_ids[nmoved] = id;
				moved_slot[nmoved] = i;
				found[nmoved] = false;
				nmoved++;
			}
			UnlockReleaseBuffer(buf);
		}
		if (nmoved > 0)
		{
			MovedRerank m = {row, moved_ids, moved_slot, rank, query, dim, found};

			vs_ivfpq_stored_vectors(ref, moved_ids, nmoved, rerank_moved, &m);
		}
		/* entries VACUUM removed since (dead to every snapshot) drop out */
		for (int i = 0, j = 0; i < n; i++)
		{
			bool		gone = j < nmoved && moved_slot[j] == i && !found[j];

			if (j < nmoved && moved_slot[j] == i)
				j++;
			if (!gone)
				row[kept++] = row[i];
		}
		qsort(row, kept, sizeof(RankedEntry), cmp_ranked);
		for (int i = 0; i < k; i++)
		{
			ids[(Size) q * k + i] = i < kept ? row[i].id : -1;
			distances[(Size) q * k + i] = i < kept ? row[i].d : INFINITY;
		}
		counts[q] = kept;
	}
	pfree(row);
	pfree(moved_ids);
	pfree(moved_slot);
	pfree(found);
}

/* ---------------------------------------------------------------------------------------------
 * The kind's in-backend searches
 */

void
vs_ivfpq_backend_knn(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries,
					 int k, int64 *ids, float *distances, int64 *counts)
{
	const float *q = vector_queries(queries);
	int			nq = (int) queries->nq;
	vs_context *engine = vs_backend_engine();
	Relation	rel = vs_index_open_for_read(ref);
	VsIvfpqSearchParams p;
	VsIvfpqMetaPageData meta;
	SearchQuantizer sq;
	vs_ivfpq_scan *scan = NULL;
	uint64	   *tags;
	int			st;

	memcpy(&p, params, sizeof(p));
	search_quantizer(ref, rel, &meta, &sq);
	if (sq.ivf == NULL)
	{
		/* no quantizer: its pending rows are the caller's (vs_ivfpq_pending_ids) */
		for (int i = 0; i < nq; i++)
			counts[i] = 0;
		for (Size i = 0; i < (Size) nq * k; i++)
		{
			ids[i] = -1;
			distances[i] = INFINITY;
		}
		vs_index_close_for_read(rel);
		return;
	}
	tags = palloc_extended(sizeof(uint64) * Max((Size) nq * k, 1), MCXT_ALLOC_HUGE);
	PG_TRY();
	{
		st = vs_ivfpq_scan_knn_begin(engine, sq.ivf, q, nq, p.probe_offset, p.nprobe, k, &scan);
		run_scan(ref, rel, &meta, engine, scan, st);
		st = vs_ivfpq_scan_knn_result(engine, scan, (int64_t *) ids, distances,
									  (uint64_t *) tags, (int64_t *) counts);
		vs_ivfpq_scan_destroy(engine, scan);
		if (st != VS_OK)
			vs_engine_error(engine, st);
	}
	PG_FINALLY();
	{
		release_quantizer(&sq);
	}
	PG_END_TRY();
	if (p.exact && meta.store_vectors)
		rerank_stored(ref, rel, &meta, q, nq, k, ids, distances, tags, counts);
	pfree(tags);
	vs_index_close_for_read(rel);
}

/* Range results go into the caller's memory context. */
static void *
range_alloc(void *arg, size_t bytes)
{
	return palloc_extended(bytes, MCXT_ALLOC_HUGE | MCXT_ALLOC_NO_OOM);
}

void
vs_ivfpq_backend_range(const VsIndexRef *ref, const VsKindParams *params, const VsQueries *queries,
					   double radius, VsRangeResult *out)
{
	const float *q = vector_queries(queries);
	int			nq = (int) queries->nq;
	vs_context *engine = vs_backend_engine();
	Relation	rel = vs_index_open_for_read(ref);
	VsIvfpqSearchParams p;
	VsIvfpqMetaPageData meta;
	SearchQuantizer sq;
	vs_ivfpq_scan *scan = NULL;
	vs_range_result result;
	int			st;

	memcpy(&p, params, sizeof(p));
	out->nq = nq;
	search_quantizer(ref, rel, &meta, &sq);
	if (sq.ivf == NULL)
	{
		out->total = 0;
		out->offsets = palloc0(sizeof(int64) * (nq + 1));
		out->ids = NULL;
		out->distances = NULL;
		vs_index_close_for_read(rel);
		return;
	}
	memset(&result, 0, sizeof(result));
	PG_TRY();
	{
		st = vs_ivfpq_scan_range_begin(engine, sq.ivf, q, nq, p.probe_offset, p.nprobe,
									   vs_ivfpq_radius_up(radius), &scan);
		run_scan(ref, rel, &meta, engine, scan, st);
		st = vs_ivfpq_scan_range_result(engine, scan, range_alloc, NULL, &result);
		vs_ivfpq_scan_destroy(engine, scan);
		if (st != VS_OK)
			vs_engine_error(engine, st);
	}
	PG_FINALLY();
	{
		release_quantizer(&sq);
	}
	PG_END_TRY();
	out->total = (int64) result.total;
	out->offsets = (int64 *) result.offsets;
	out->ids = (int64 *) result.ids;
	out->distances = result.distances;
	vs_index_close_for_read(rel);
}

/* ---------------------------------------------------------------------------------------------
 * Pending entries
 */

static int
cmp_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * The pending (unquantized) entries of the index as of ref: *n ids, ascending, palloc'd in the
 * current context (NULL when none).  Only an index without a quantizer has any (inserts into a
 * trained index go to its lists); the GPU worker never sees them.  Entries inserted after ref was
 * taken are invisible to the scan's snapshot, so ref's pending count decides whether there are
 * any to take.
 */
int64 *
vs_ivfpq_pending_ids(const VsIndexRef *ref, int64 *n)
{
	Relation	rel;
	VsIvfpqMetaPageData meta;
	VsIvfpqLayout layout;
	int64	   *ids = NULL;
	int64		count = 0;
	int64		cap = 0;
	int64		kept = 0;

	*n = 0;
	if (VsIvfpqRefPending(ref) == 0)
		return NULL;
	rel = vs_index_open_for_read(ref);
	read_meta(ref, rel, &meta);
	vs_ivfpq_meta_layout(&meta, true, &layout);
	for (BlockNumber blkno = meta.pending_last; BlockNumberIsValid(blkno);)
	{
		Buffer		buf;
		Page		page;
		ItemPointerData *tids;
		int			nitems;

		CHECK_FOR_INTERRUPTS();
		buf = vs_index_read_block(ref, rel, blkno, NULL);
		page = lock_entry_page(ref, buf, blkno, VS_IVFPQ_PENDING_LIST);
		nitems = Min((int) VsIvfpqPageGetOpaque(page)->nitems, layout.capacity);
		if (count + nitems > cap)
		{
			cap = Max(cap * 2, count + nitems);
			ids = ids ? repalloc_huge(ids, sizeof(int64) * cap)
				: palloc_extended(sizeof(int64) * cap, MCXT_ALLOC_HUGE);
		}
		tids = VsIvfpqPageTids(page);
		for (int e = 0; e < nitems; e++)
			ids[count++] = vs_tid_to_id(&tids[e]);
		blkno = VsIvfpqPageGetOpaque(page)->prev;
		UnlockReleaseBuffer(buf);
	}
	vs_index_close_for_read(rel);
	if (count == 0)
	{
		if (ids)
			pfree(ids);
		return NULL;
	}
	/* a concurrent VACUUM may have shown an entry twice */
	qsort(ids, count, sizeof(int64), cmp_int64);
	for (int64 i = 0; i < count; i++)
		if (kept == 0 || ids[kept - 1] != ids[i])
			ids[kept++] = ids[i];
	*n = kept;
	return ids;
}
