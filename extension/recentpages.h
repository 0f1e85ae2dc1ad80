/*
 * The buffers a backend last found an index's pages in, for searches that read the same pages
 * in place again and again (vs_flat's and vs_ivfpq's in-backend searches).
 *
 * ReadRecentBuffer pins such a buffer after checking that it still holds the page, without the
 * look-up in the buffer mapping table, whose cache misses (a table the size of the pool) took about
 * a fifth of a vs_flat search over resident pages (Fashion-MNIST: 40 ms of backend CPU time per
 * query with a look-up per page, 31 ms without).  4 bytes a page, a few indexes per backend; a
 * session's first search looks every page up, or, for a large index, finds them in one sweep over
 * the buffer headers.  Temporary indexes (local buffers) have none.
 */
#ifndef VSEARCH_RECENTPAGES_H
#define VSEARCH_RECENTPAGES_H

#include "postgres.h"

#include "storage/buf.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#include "search.h"

typedef struct VsRecentPages
{
	VsRelFileLocator locator;
	uint64		used;
	BlockNumber n;				/* entries of bufs */
	Buffer	   *bufs;			/* InvalidBuffer: not seen yet */
} VsRecentPages;

/*
 * The recent buffers of an index, for at least npages pages (a slot reused if new).  A new slot
 * of a large index (npages a few percent of shared_buffers or more: vs_flat's whole index) is
 * filled from one sweep over the buffer headers; with map_all, the memory of every buffer it
 * found is then mapped into the process too (for searches that read the whole index: a search
 * that reads a few pages of it would pay more for the mapping than its page faults cost).
 */
extern VsRecentPages *vs_recent_pages(const VsIndexRef *ref, BlockNumber npages, bool map_all);

/*
 * Pins a page (not locked), through its recent buffer when rp is given (rp NULL: a plain read,
 * vs_index_read_block).  Blocks past rp's pages extend it.
 */
extern Buffer vs_recent_pin(VsRecentPages *rp, const VsIndexRef *ref, Relation rel,
							BlockNumber blkno, BufferAccessStrategy bas);

/*
 * Starts fetching the buffer header of a page's recent buffer into the caches and returns where
 * that buffer's page lies (NULL: no recent buffer), for the caller to prefetch the lines it will
 * read: a hint only, neither pinned nor checked, never to be read through.
 */
extern const char *vs_recent_prefetch(const VsRecentPages *rp, BlockNumber blkno);

#endif							/* VSEARCH_RECENTPAGES_H */
