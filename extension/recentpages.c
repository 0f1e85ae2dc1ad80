/*
 * The buffers a backend last found an index's pages in (recentpages.h).
 */
#include "postgres.h"

#include <sys/mman.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/buf_internals.h"
#include "utils/memutils.h"

#include "recentpages.h"

#define VS_RECENT_INDEXES 4
/* a header read in a sweep costs about a hundredth of a look-up in the mapping table */
#define VS_RECENT_SWEEP_RATIO 32

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

/*
 * Maps the memory of the buffers of rp's first npages pages into this process's page tables, one
 * call per run of consecutive buffers, ahead of the scan that reads them: a new backend maps
 * each page of shared memory on its first touch of it, a page fault per 64 kB (the kernel's
 * fault-around), which took about a third of what a session's first vs_flat search adds to a
 * later one (BENCHMARKS.md, "CPU path: vs_flat streaming").  Only a hint: a kernel without
 * MADV_POPULATE_READ (before Linux 5.14) refuses it, and the pages are mapped as they are read.
 */
static void
recent_map(const VsRecentPages *rp, BlockNumber npages)
{
#ifdef MADV_POPULATE_READ
	uintptr_t	os_page = (uintptr_t) sysconf(_SC_PAGESIZE);

	for (BlockNumber b = 0, e; b < npages; b = e)
	{
		uintptr_t	start,
					end;

		e = b + 1;
		if (!BufferIsValid(rp->bufs[b]))
			continue;
		while (e < npages && rp->bufs[e] == rp->bufs[e - 1] + 1)
			e++;
		start = (uintptr_t) BufferGetBlock(rp->bufs[b]) & ~(os_page - 1);
		end = ((uintptr_t) BufferGetBlock(rp->bufs[e - 1]) + BLCKSZ + os_page - 1) & ~(os_page - 1);
		(void) madvise((void *) start, end - start, MADV_POPULATE_READ);
	}
#endif
}

/*
 * Fills a new slot from the buffer headers: one pass over every header (contiguous, read in
 * order) instead of a look-up in the buffer mapping table per page, whose cache misses took
 * a session's first vs_flat search of a resident index about as long as the scan itself.  The
 * tags are read without the header locks, as DropRelationBuffers' precheck does: they are hints,
 * which vs_recent_pin checks under the lock (ReadRecentBuffer).  Worth it only when the index
 * has at least a few percent as many pages as the pool has buffers.
 */
static void
recent_sweep(VsRecentPages *rp, BlockNumber npages, bool map_all)
{
	if ((double) npages * VS_RECENT_SWEEP_RATIO < NBuffers)
		return;
	for (int i = 0; i < NBuffers; i++)
	{
		BufferDesc *desc = GetBufferDescriptor(i);

		if ((i & 0xffff) == 0)
			CHECK_FOR_INTERRUPTS();
		if ((pg_atomic_read_u32(&desc->state) & BM_VALID) == 0 ||
			!VsBufTagMatchesLocator(&desc->tag, &rp->locator) ||
			desc->tag.forkNum != MAIN_FORKNUM || desc->tag.blockNum >= npages)
			continue;
		rp->bufs[desc->tag.blockNum] = BufferDescriptorGetBuffer(desc);
	}
	if (map_all)
		recent_map(rp, npages);
}

VsRecentPages *
vs_recent_pages(const VsIndexRef *ref, BlockNumber npages, bool map_all)
{
	VsRecentPages *rp = NULL;
	bool		fresh = false;

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
		fresh = true;
	}
	recent_grow(rp, Max(npages, 1));
	if (fresh)
		recent_sweep(rp, npages, map_all);
	rp->used = ++recent_clock;
	return rp;
}

const char *
vs_recent_prefetch(const VsRecentPages *rp, BlockNumber blkno)
{
	Buffer		buf;

	if (rp == NULL || blkno >= rp->n || !BufferIsValid(rp->bufs[blkno]))
		return NULL;
	buf = rp->bufs[blkno];
	/* the pin and the lock write the header */
	__builtin_prefetch(GetBufferDescriptor(buf - 1), 1);
	return (const char *) BufferGetBlock(buf);
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
