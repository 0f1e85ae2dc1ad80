/*
 * vs_ivfpq: inserting one row (aminsert).
 *
 * With a quantizer the row is encoded first (vs_ivfpq_encode with this backend's cached copy of
 * the quantizer: nearest list and code), without any lock on the index's pages.  Then, under the
 * metapage's exclusive lock (which serializes inserts and VACUUM), the entry is appended to the
 * newest page of its list, or to a new page linked to it, and the directory entry and the
 * metapage's row count and generation change in the same Generic WAL record.  Without a quantizer
 * (an index built on an empty table) the row goes to the pending chain the same way.
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "storage/bufmgr.h"

#include "ivfpq.h"

bool
vs_ivfpq_insert(Relation index, Datum *values, bool *isnull, ItemPointer heap_tid,
				Relation heap, IndexUniqueCheck checkUnique, bool indexUnchanged,
				IndexInfo *indexInfo)
{
	Vector	   *vec;
	VsIvfpqMetaPageData snap;
	VsIvfpqMetaPage meta;
	VsIvfpqLayout layout;
	int32		list = -1;
	uint8	   *code = NULL;
	Buffer		metabuf;
	Buffer		dirbuf = InvalidBuffer;
	Buffer		buf = InvalidBuffer;
	bool		newpage = false;
	BlockNumber last;
	GenericXLogState *xlog;
	Page		metapage;
	Page		page;
	VsIvfpqListEntry *entry = NULL;
	int			n;
	bool		pending;

	if (isnull[0])
		return false;			/* NULL vectors are not indexed */
	vec = vs_datum_vector(values[0]);

	vs_ivfpq_read_meta(index, &snap);
	if (snap.dim != 0 && (uint32) vec->dim != snap.dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", snap.dim, vec->dim),
				 errhint("Every vector in a vs_ivfpq index has the dimension of the first one; "
						 "declare the column as vector(n).")));
	pending = !snap.trained;
	if (snap.dim == 0)
		snap.dim = vec->dim;
	vs_ivfpq_meta_layout(&snap, pending, &layout);
	if (layout.capacity < 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a vector of %d dimensions does not fit a vs_ivfpq page with store_vectors = on",
						vec->dim),
				 errhint("Rebuild the index with store_vectors = off.")));

	if (!pending)
	{
		VsIndexRef	ref;
		struct vs_ivfpq *ivf;
		int			retries = 0;

		vs_ref_init(index, VS_IVFPQ_KIND, &ref);
		ivf = vs_ivfpq_quantizer(&ref, index, &snap);

		code = palloc(Max(snap.code_size, 1));
		for (;;)
		{
			vs_status	st = vs_ivfpq_encode(vs_backend_engine(), ivf, vec->x, 1, &list, code);

			if (st == VS_OK)
				break;
			if (st != VS_CANCELLED)
				vs_engine_error(vs_backend_engine(), st);
			vs_engine_cancelled(&retries);
		}
		if (list < 0 || (uint32) list >= snap.lists)
			elog(ERROR, "vsearch engine assigned a row to list %d of %u", list, snap.lists);
	}

	metabuf = ReadBuffer(index, VS_IVFPQ_METAPAGE_BLKNO);
	LockBuffer(metabuf, BUFFER_LOCK_EXCLUSIVE);
	meta = vs_ivfpq_page_meta(BufferGetPage(metabuf));
	if (meta->build_id != snap.build_id || meta->trained != snap.trained)
		elog(ERROR, "vs_ivfpq index \"%s\" was rebuilt during an insert",
			 RelationGetRelationName(index));
	if (meta->dim != 0 && meta->dim != (uint32) vec->dim)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("expected %u dimensions, not %d", meta->dim, vec->dim)));

	if (pending)
		last = meta->pending_last;
	else
	{
		BlockNumber dirblk = meta->directory_start + (uint32) list / VS_IVFPQ_DIR_PER_PAGE;

		dirbuf = ReadBuffer(index, dirblk);
		LockBuffer(dirbuf, BUFFER_LOCK_EXCLUSIVE);
		if (!(VsIvfpqPageGetOpaque(BufferGetPage(dirbuf))->flags & VS_IVFPQ_DIRECTORY))
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index \"%s\": block %u is not a directory page",
							RelationGetRelationName(index), dirblk),
					 errhint("REINDEX the index.")));
		entry = (VsIvfpqListEntry *) PageGetContents(BufferGetPage(dirbuf)) +
			(uint32) list % VS_IVFPQ_DIR_PER_PAGE;
		last = entry->last;
	}

	/* room on the newest page of the chain? */
	if (BlockNumberIsValid(last))
	{
		buf = ReadBuffer(index, last);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		if (!VsIvfpqIsEntryPage(page) || VsIvfpqPageGetOpaque(page)->nitems >= layout.capacity)
		{
			UnlockReleaseBuffer(buf);
			buf = InvalidBuffer;
		}
	}
	if (!BufferIsValid(buf))
	{
		buf = vs_new_buffer(index, MAIN_FORKNUM);
		newpage = true;
	}

	xlog = GenericXLogStart(index);
	metapage = GenericXLogRegisterBuffer(xlog, metabuf, 0);
	meta = VsIvfpqPageGetMeta(metapage);
	if (BufferIsValid(dirbuf))
		entry = (VsIvfpqListEntry *) PageGetContents(GenericXLogRegisterBuffer(xlog, dirbuf, 0)) +
			(uint32) list % VS_IVFPQ_DIR_PER_PAGE;
	page = GenericXLogRegisterBuffer(xlog, buf, newpage ? GENERIC_XLOG_FULL_IMAGE : 0);
	if (newpage)
		vs_ivfpq_init_page(page, pending ? VS_IVFPQ_PENDING : VS_IVFPQ_LIST,
						   pending ? VS_IVFPQ_PENDING_LIST : (uint32) list, last);

	n = VsIvfpqPageGetOpaque(page)->nitems;
	VsIvfpqPageTids(page)[n] = *heap_tid;
	if (layout.code_size > 0)
		memcpy(VsIvfpqPageCodes(page, &layout) + (Size) n * layout.code_size, code,
			   layout.code_size);
	if (layout.vdim > 0)
		memcpy(VsIvfpqPageVecs(page, &layout) + (Size) n * layout.vdim, vec->x,
			   sizeof(float) * layout.vdim);
	vs_ivfpq_page_set_items(page, n + 1);

	if (pending)
	{
		if (newpage)
		{
			meta->pending_last = BufferGetBlockNumber(buf);
			if (!BlockNumberIsValid(meta->pending_first))
				meta->pending_first = meta->pending_last;
		}
		meta->npending++;
	}
	else
	{
		if (newpage)
		{
			entry->last = BufferGetBlockNumber(buf);
			if (!BlockNumberIsValid(entry->first))
				entry->first = entry->last;
			entry->npages++;
		}
		entry->count++;
	}
	meta->dim = (uint32) vec->dim;
	meta->ntuples++;
	meta->generation++;
	GenericXLogFinish(xlog);

	UnlockReleaseBuffer(buf);
	if (BufferIsValid(dirbuf))
		UnlockReleaseBuffer(dirbuf);
	UnlockReleaseBuffer(metabuf);
	if (code)
		pfree(code);
	return false;
}
