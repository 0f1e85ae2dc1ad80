/*
 * The buffers a backend last found an index's pages in (recentpages.h).
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "recentpages.h"

#define VS_RECENT_INDEXES 4

static VsRecentPages recent_pages[VS_RECENT_INDEXES];
static uint64 recent_clock = 0;

static void
recent_grow(VsRecentPages *rp, BlockNumber npages)
{
	BlockNumber n;

	if (rp->n >= npages)
		return;
	n = Max(npages, rp->n + rp->n / 4);
	rp->bufs = rp->bufs
		? repalloc_huge(rp->bufs, sizeof(Buffer) * n)
		: MemoryContextAllocHuge(TopMemoryContext, sizeof(Buffer) * n);
	for (BlockNumber b = rp->n; b < n; b++)
		rp->bufs[b] = InvalidBuffer;
	rp->n = n;
}

VsRecentPages *
vs_recent_pages(const VsIndexRef *ref, BlockNumber npages)
{
	VsRecentPages *rp = NULL;

	for (int i = 0; i < VS_RECENT_INDEXES; i++)
	{
		VsRecentPages *c = &recent_pages[i];

		if (c->bufs != NULL && memcmp(&c->locator, &ref->locator, sizeof(ref->locator)) == 0)
		{
			rp = c;
			break;
		}
		if (rp == NULL || c->used < rp->used)
			rp = c;				/* the least recently used, if none matches */
	}
	if (rp->bufs == NULL || memcmp(&rp->locator, &ref->locator, sizeof(ref->locator)) != 0)
	{
		if (rp->bufs)
			pfree(rp->bufs);
		rp->locator = ref->locator;
		rp->n = 0;
		rp->bufs = NULL;
	}
	recent_grow(rp, Max(npages, 1));
	rp->used = ++recent_clock;
	return rp;
}

Buffer
vs_recent_pin(VsRecentPages *rp, const VsIndexRef *ref, Relation rel, BlockNumber blkno,
			  BufferAccessStrategy bas)
{
	Buffer		buf;

	if (rp == NULL)
		return vs_index_read_block(ref, rel, blkno, bas);
	recent_grow(rp, blkno + 1);
	if (BufferIsValid(rp->bufs[blkno]) &&
		ReadRecentBuffer(ref->locator, MAIN_FORKNUM, blkno, rp->bufs[blkno]))
		return rp->bufs[blkno];
	buf = vs_index_read_block(ref, rel, blkno, bas);
	rp->bufs[blkno] = buf;
	return buf;
}
