/*
 * vs_ivfpq: the access method handler, options, page helpers, reading an index into memory (shared
 * by the backends and the GPU worker: it needs no relcache entry), and the backend's cache of
 * engine objects built from it.
 */
#include "postgres.h"

#include <math.h>

#include "access/reloptions.h"
#include "catalog/pg_class.h"
#include "commands/vacuum.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "ivfpq.h"
#include "vsearch/engine.h"

static relopt_kind ivfpq_relopt_kind;

/* Registers the options; from _PG_init. */
void
vs_ivfpq_init(void)
{
	ivfpq_relopt_kind = add_reloption_kind();
	add_int_reloption(ivfpq_relopt_kind, "lists",
					  "Inverted lists (coarse centroids); 0 chooses about sqrt(rows)",
					  0, 0, VS_IVFPQ_MAX_LISTS, AccessExclusiveLock);
	add_int_reloption(ivfpq_relopt_kind, "m",
					  "Sub-quantizers (a divisor of the dimension); 0 chooses by rule",
					  0, 0, VS_IVFPQ_MAX_M, AccessExclusiveLock);
	add_int_reloption(ivfpq_relopt_kind, "nbits",
					  "Bits per sub-quantizer code: 4 or 8",
					  8, 1, 16, AccessExclusiveLock);
	add_bool_reloption(ivfpq_relopt_kind, "store_vectors",
					   "Keep a copy of each vector in the index for exact re-ranking",
					   false, AccessExclusiveLock);
}

bytea *
vs_ivfpq_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"lists", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, lists)},
		{"m", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, m)},
		{"nbits", RELOPT_TYPE_INT, offsetof(VsIvfpqOptions, nbits)},
		{"store_vectors", RELOPT_TYPE_BOOL, offsetof(VsIvfpqOptions, store_vectors)},
	};
	VsIvfpqOptions *opts;

	opts = (VsIvfpqOptions *) build_reloptions(reloptions, validate, ivfpq_relopt_kind,
											   sizeof(VsIvfpqOptions), tab, lengthof(tab));
	if (validate && opts != NULL && opts->nbits != 4 && opts->nbits != 8)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("vs_ivfpq option nbits must be 4 or 8, not %d", opts->nbits),
				 errhint("nbits is the size of each sub-quantizer's code: 8 (256 codewords, the "
						 "default) or 4 (16 codewords, half the index size, lower recall).")));
	return (bytea *) opts;
}

static bool
vs_ivfpq_property(Oid index_oid, int attno, IndexAMProperty prop, const char *propname,
				  bool *res, bool *isnull)
{
	if (attno == 0)
		return false;
	switch (prop)
	{
		case AMPROP_DISTANCE_ORDERABLE:
			*res = true;
			*isnull = false;
			return true;
		case AMPROP_RETURNABLE:
			*res = false;
			*isnull = false;
			return true;
		default:
			return false;
	}
}

PG_FUNCTION_INFO_V1(vs_ivfpq_handler);
Datum
vs_ivfpq_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = makeNode(IndexAmRoutine);

	am->amstrategies = VS_IVFPQ_NSTRATEGIES;
	am->amsupport = VS_IVFPQ_NPROC;
	am->amoptsprocnum = 0;
	am->amcanorder = false;
	am->amcanorderbyop = true;
	am->amcanbackward = false;
	am->amcanunique = false;
	am->amcanmulticol = false;
	am->amoptionalkey = true;
	am->amsearcharray = false;
	am->amsearchnulls = false;
	am->amstorage = false;
	am->amclusterable = false;
	am->ampredlocks = false;
	am->amcanparallel = false;
#if PG_VERSION_NUM >= 170000
	am->amcanbuildparallel = false;
#endif
	am->amcaninclude = false;
	am->amusemaintenanceworkmem = true;
#if PG_VERSION_NUM >= 160000
	am->amsummarizing = false;
#endif
	am->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL | VACUUM_OPTION_PARALLEL_CLEANUP;
	am->amkeytype = InvalidOid;

	am->ambuild = vs_ivfpq_build;
	am->ambuildempty = vs_ivfpq_buildempty;
	am->aminsert = vs_ivfpq_insert;
#if PG_VERSION_NUM >= 170000
	am->aminsertcleanup = NULL;
#endif
	am->ambulkdelete = vs_ivfpq_bulkdelete;
	am->amvacuumcleanup = vs_ivfpq_vacuumcleanup;
	am->amcanreturn = NULL;
	am->amcostestimate = vs_ivfpq_costestimate;
	am->amoptions = vs_ivfpq_options;
	am->amproperty = vs_ivfpq_property;
	am->ambuildphasename = NULL;
	am->amvalidate = vs_ivfpq_validate;
	am->amadjustmembers = NULL;
	am->ambeginscan = vs_ivfpq_beginscan;
	am->amrescan = vs_ivfpq_rescan;
	am->amgettuple = vs_ivfpq_gettuple;
	am->amgetbitmap = vs_ivfpq_getbitmap;
	am->amendscan = vs_ivfpq_endscan;
	am->ammarkpos = NULL;
	am->amrestrpos = NULL;
	am->amestimateparallelscan = NULL;
	am->aminitparallelscan = NULL;
	am->amparallelrescan = NULL;

	PG_RETURN_POINTER(am);
}

bool
vs_is_ivfpq_index(Relation index)
{
	return index->rd_rel->relkind == RELKIND_INDEX && index->rd_indam != NULL &&
		index->rd_indam->ambuild == vs_ivfpq_build;
}

/* ---------------------------------------------------------------------------------------------
 * Pages
 */

void
vs_ivfpq_init_page(Page page, uint16 flags, uint32 list, BlockNumber prev)
{
	VsIvfpqPageOpaque opaque;

	PageInit(page, BLCKSZ, sizeof(VsIvfpqPageOpaqueData));
	opaque = VsIvfpqPageGetOpaque(page);
	opaque->prev = prev;
	opaque->list = list;
	opaque->nitems = 0;
	opaque->flags = flags;
	opaque->unused = 0;
	opaque->page_id = VS_IVFPQ_PAGE_ID;
	/* the arrays have fixed places: the whole content area counts as used */
	if (flags & (VS_IVFPQ_LIST | VS_IVFPQ_PENDING | VS_IVFPQ_FLOATS | VS_IVFPQ_DIRECTORY))
		((PageHeader) page)->pd_lower = ((PageHeader) page)->pd_upper;
}

void
vs_ivfpq_page_set_items(Page page, int nitems)
{
	VsIvfpqPageGetOpaque(page)->nitems = (uint16) nitems;
}

/*
 * Struct-of-arrays layout of an entry page: tids (6 bytes each), then the codes, then the vectors
 * (4-byte aligned): the largest capacity that fits.
 */
void
vs_ivfpq_layout(int code_size, int vdim, VsIvfpqLayout *layout)
{
	Size		per = sizeof(ItemPointerData) + code_size + sizeof(float) * (Size) vdim;
	int			cap = (int) (VS_IVFPQ_PAGE_SPACE / per);

	cap = Min(cap, PG_UINT16_MAX);
	for (; cap > 0; cap--)
	{
		Size		code_off = MAXALIGN(sizeof(ItemPointerData) * (Size) cap);
		Size		vec_off = MAXALIGN(code_off + (Size) code_size * cap);

		if (vec_off + sizeof(float) * (Size) vdim * cap <= VS_IVFPQ_PAGE_SPACE)
		{
			layout->code_off = code_off;
			layout->vec_off = vec_off;
			break;
		}
	}
	layout->capacity = cap;
	layout->code_size = code_size;
	layout->vdim = vdim;
	if (cap == 0)
	{
		layout->code_off = 0;
		layout->vec_off = 0;
	}
}

void
vs_ivfpq_meta_layout(const VsIvfpqMetaPageData *meta, bool pending, VsIvfpqLayout *layout)
{
	vs_ivfpq_layout(pending ? 0 : (int) meta->code_size,
					meta->store_vectors ? (int) meta->dim : 0, layout);
}

void
vs_ivfpq_init_metapage(Page page, uint32 dim, vs_metric metric, int nbits, bool store_vectors)
{
	VsIvfpqMetaPage meta;
	TimestampTz now = GetCurrentTimestamp();

	vs_ivfpq_init_page(page, VS_IVFPQ_META, 0, InvalidBlockNumber);
	meta = VsIvfpqPageGetMeta(page);
	memset(meta, 0, sizeof(VsIvfpqMetaPageData));
	meta->magic = VS_IVFPQ_MAGIC;
	meta->version = VS_IVFPQ_VERSION;
	meta->dim = dim;
	meta->metric = (uint32) metric;
	meta->nbits = (uint32) nbits;
	meta->store_vectors = store_vectors ? 1 : 0;
	meta->trained = 0;
	/* as vs_flat: a reused relfilenode never looks like an older state of this index */
	meta->generation = (uint64) (now > 0 ? now : 0) * 4096 + 1;
	meta->build_id = meta->generation;
	meta->centroid_start = InvalidBlockNumber;
	meta->codebook_start = InvalidBlockNumber;
	meta->directory_start = InvalidBlockNumber;
	meta->pending_first = InvalidBlockNumber;
	meta->pending_last = InvalidBlockNumber;
	((PageHeader) page)->pd_lower = MAXALIGN(SizeOfPageHeaderData) + sizeof(VsIvfpqMetaPageData);
}

void
vs_ivfpq_check_meta(const VsIvfpqMetaPageData *meta)
{
	if (meta->magic != VS_IVFPQ_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index metapage is corrupted"),
				 errhint("REINDEX the index.")));
	if (meta->version != VS_IVFPQ_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index has version %u, this server reads version %d",
						meta->version, VS_IVFPQ_VERSION),
				 errhint("REINDEX the index.")));
}

VsIvfpqMetaPage
vs_ivfpq_page_meta(Page page)
{
	VsIvfpqMetaPage meta = VsIvfpqPageGetMeta(page);

	if (PageIsNew(page))
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index metapage is not initialized"),
				 errhint("REINDEX the index.")));
	vs_ivfpq_check_meta(meta);
	return meta;
}

void
vs_ivfpq_read_meta(Relation index, VsIvfpqMetaPageData *meta)
{
	Buffer		buf = ReadBuffer(index, VS_IVFPQ_METAPAGE_BLKNO);
	Page		page;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	memcpy(meta, vs_ivfpq_page_meta(page), sizeof(VsIvfpqMetaPageData));
	UnlockReleaseBuffer(buf);
}

void
vs_ivfpq_ref(Relation index, VsIndexRef *ref, VsIvfpqMetaPageData *meta)
{
	vs_ivfpq_read_meta(index, meta);
	memset(ref, 0, sizeof(VsIndexRef));
	ref->dbid = MyDatabaseId;
	ref->indexrelid = RelationGetRelid(index);
	ref->locator = VsRelationGetLocator(index);
	ref->relpersistence = index->rd_rel->relpersistence;
	ref->kind = VS_INDEX_IVFPQ;
	ref->metric = (vs_metric) meta->metric;
	ref->dim = meta->dim;
	ref->generation = meta->generation;
	ref->ntuples = meta->ntuples;
	ref->ivf_lists = meta->trained ? meta->lists : 0;
	ref->ivf_npending = meta->npending;
}

/*
 * The default number of sub-quantizers: the largest divisor m of dim with sub-vectors of at least
 * 4 dimensions (dim / m >= 4) and at most 64 sub-quantizers; 1 when dim < 8.  E.g. 128 -> 32,
 * 96 -> 24, 784 -> 56, 100 -> 25, 3 -> 1.
 */
int
vs_ivfpq_default_m(int dim)
{
	for (int m = Min(64, dim / 4); m > 1; m--)
		if (dim % m == 0)
			return m;
	return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Reading an index into memory (backends and the worker)
 */

static void
read_floats_ref(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas, BlockNumber start,
				uint32 npages, float *dst, Size nfloats)
{
	Size		done = 0;

	for (uint32 p = 0; p < npages && done < nfloats; p++)
	{
		Buffer		buf = vs_index_read_block(ref, rel, start + p, bas);
		Page		page;
		Size		n;

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (PageIsNew(page) || !(VsIvfpqPageGetOpaque(page)->flags & VS_IVFPQ_FLOATS))
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index %u: block %u is not a quantizer page",
							ref->indexrelid, start + p),
					 errhint("REINDEX the index.")));
		n = Min((Size) VsIvfpqPageGetOpaque(page)->nitems, nfloats - done);
		memcpy(dst + done, PageGetContents(page), sizeof(float) * n);
		done += n;
		UnlockReleaseBuffer(buf);
	}
	if (done != nfloats)
		ereport(ERROR,
				(errcode(ERRCODE_INDEX_CORRUPTED),
				 errmsg("vs_ivfpq index %u: quantizer pages hold %zu of %zu values",
						ref->indexrelid, (size_t) done, (size_t) nfloats),
				 errhint("REINDEX the index.")));
}

/* Reads a float array (centroids, codebooks) through the relcache. */
void
vs_ivfpq_read_floats(Relation index, BlockNumber start, uint32 npages, float *dst, Size nfloats)
{
	VsIndexRef	ref;

	memset(&ref, 0, sizeof(ref));
	ref.indexrelid = RelationGetRelid(index);
	ref.relpersistence = RELPERSISTENCE_TEMP;	/* only used for messages below */
	read_floats_ref(&ref, index, NULL, start, npages, dst, nfloats);
}

typedef struct EntryBuf
{
	int64	   *ids;
	uint8	   *codes;
	float	   *vectors;
	int64		n;
	int64		cap;
	int			code_size;
	int			vdim;
} EntryBuf;

static void
entrybuf_reserve(EntryBuf *b, int64 more)
{
	int64		cap;

	if (b->n + more <= b->cap)
		return;
	cap = Max(b->cap * 2, b->n + more);
	cap = Max(cap, 64);
	if (b->ids == NULL)
	{
		b->ids = palloc_extended(sizeof(int64) * cap, MCXT_ALLOC_HUGE);
		b->codes = palloc_extended(Max((Size) b->code_size * cap, 1), MCXT_ALLOC_HUGE);
		if (b->vdim > 0)
			b->vectors = palloc_extended(sizeof(float) * b->vdim * cap, MCXT_ALLOC_HUGE);
	}
	else
	{
		b->ids = repalloc_huge(b->ids, sizeof(int64) * cap);
		b->codes = repalloc_huge(b->codes, Max((Size) b->code_size * cap, 1));
		if (b->vdim > 0)
			b->vectors = repalloc_huge(b->vectors, sizeof(float) * b->vdim * cap);
	}
	b->cap = cap;
}

typedef struct IdPos
{
	int64		id;
	int64		pos;
} IdPos;

static int
cmp_idpos(const void *a, const void *b)
{
	const IdPos *x = (const IdPos *) a;
	const IdPos *y = (const IdPos *) b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->pos < y->pos ? -1 : (x->pos > y->pos ? 1 : 0);
}

static int
cmp_idpos_pos(const void *a, const void *b)
{
	int64		x = ((const IdPos *) a)->pos;
	int64		y = ((const IdPos *) b)->pos;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Drops repeated ids among entries [from, b->n) (VACUUM moving entries toward the older pages of a
 * list can show a reader one twice; both copies are the same entry).  Keeps the first copy.
 */
static void
dedupe_range(EntryBuf *b, int64 from)
{
	int64		n = b->n - from;
	IdPos	   *rows;
	int64		m = 0;
	bool		dup = false;

	if (n < 2)
		return;
	rows = palloc_extended(sizeof(IdPos) * n, MCXT_ALLOC_HUGE);
	for (int64 i = 0; i < n; i++)
	{
		rows[i].id = b->ids[from + i];
		rows[i].pos = i;
	}
	qsort(rows, n, sizeof(IdPos), cmp_idpos);
	for (int64 i = 0; i < n; i++)
	{
		if (m > 0 && rows[m - 1].id == rows[i].id)
		{
			dup = true;
			continue;
		}
		rows[m++] = rows[i];
	}
	if (dup)
	{
		qsort(rows, m, sizeof(IdPos), cmp_idpos_pos);
		for (int64 i = 0; i < m; i++)
		{
			int64		src = from + rows[i].pos;
			int64		dst = from + i;

			if (src == dst)
				continue;
			b->ids[dst] = b->ids[src];
			memcpy(b->codes + dst * b->code_size, b->codes + src * b->code_size, b->code_size);
			if (b->vdim > 0)
				memcpy(b->vectors + dst * b->vdim, b->vectors + src * b->vdim,
					   sizeof(float) * b->vdim);
		}
		b->n = from + m;
	}
	pfree(rows);
}

/* Called for every list or pending page read (the GPU worker advances its heartbeat). */
void		(*vs_ivfpq_read_progress) (void) = NULL;

/* Appends the entries of one chain (newest page first) to b. */
static void
read_chain(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas, BlockNumber blkno,
		   uint32 list, const VsIvfpqLayout *layout, int want_vdim, EntryBuf *b)
{
	while (BlockNumberIsValid(blkno))
	{
		Buffer		buf;
		Page		page;
		VsIvfpqPageOpaque opaque;
		int			nitems;
		ItemPointerData *tids;

		CHECK_FOR_INTERRUPTS();
		if (vs_ivfpq_read_progress)
			vs_ivfpq_read_progress();
		buf = vs_index_read_block(ref, rel, blkno, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (!VsIvfpqIsEntryPage(page) || VsIvfpqPageGetOpaque(page)->list != list)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index %u: block %u is not a page of list %u",
							ref->indexrelid, blkno, list),
					 errhint("REINDEX the index.")));
		opaque = VsIvfpqPageGetOpaque(page);
		nitems = Min((int) opaque->nitems, layout->capacity);
		entrybuf_reserve(b, nitems);
		tids = VsIvfpqPageTids(page);
		for (int i = 0; i < nitems; i++)
			b->ids[b->n + i] = vs_tid_to_id(&tids[i]);
		if (layout->code_size > 0)
			memcpy(b->codes + b->n * layout->code_size, VsIvfpqPageCodes(page, layout),
				   (Size) layout->code_size * nitems);
		if (want_vdim > 0)
			memcpy(b->vectors + b->n * want_vdim, VsIvfpqPageVecs(page, layout),
				   sizeof(float) * want_vdim * nitems);
		b->n += nitems;
		blkno = opaque->prev;
		UnlockReleaseBuffer(buf);
	}
}

/*
 * Reads the whole index: the quantizer, every list (deduplicated within the list) and the pending
 * entries, into palloc'd memory of the current context.  With want_vectors and store_vectors the
 * stored vectors come too.  Works without a relcache entry (the worker); the caller holds a lock
 * on the index.
 */
void
vs_ivfpq_read_index(const VsIndexRef *ref, bool want_vectors, VsIvfpqContents *out)
{
	Relation	rel = vs_index_open_for_read(ref);
	BufferAccessStrategy bas = GetAccessStrategy(BAS_BULKREAD);
	Buffer		buf;
	VsIvfpqMetaPageData *meta = &out->meta;
	VsIvfpqLayout layout;
	VsIvfpqLayout playout;
	VsIvfpqListEntry *dir = NULL;
	EntryBuf	b;
	EntryBuf	p;
	int			vdim;

	memset(out, 0, sizeof(VsIvfpqContents));
	buf = vs_index_read_block(ref, rel, VS_IVFPQ_METAPAGE_BLKNO, bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(meta, vs_ivfpq_page_meta(BufferGetPage(buf)), sizeof(VsIvfpqMetaPageData));
	UnlockReleaseBuffer(buf);

	vdim = (want_vectors && meta->store_vectors) ? (int) meta->dim : 0;
	vs_ivfpq_meta_layout(meta, false, &layout);
	vs_ivfpq_meta_layout(meta, true, &playout);

	memset(&b, 0, sizeof(b));
	b.code_size = meta->trained ? (int) meta->code_size : 0;
	b.vdim = vdim;
	memset(&p, 0, sizeof(p));
	p.code_size = 0;
	p.vdim = vdim;

	if (meta->trained && meta->dim > 0)
	{
		Size		ncent = (Size) meta->lists * meta->dim;
		Size		ncode = (Size) meta->m * ((Size) 1 << meta->nbits) * (meta->dim / meta->m);
		int			done = 0;

		out->centroids = palloc_extended(sizeof(float) * ncent, MCXT_ALLOC_HUGE);
		out->codebooks = palloc_extended(sizeof(float) * ncode, MCXT_ALLOC_HUGE);
		read_floats_ref(ref, rel, bas, meta->centroid_start, meta->ncentroid_pages,
						out->centroids, ncent);
		read_floats_ref(ref, rel, bas, meta->codebook_start, meta->ncodebook_pages,
						out->codebooks, ncode);

		/* the directory, then every list */
		dir = palloc(sizeof(VsIvfpqListEntry) * meta->lists);
		for (uint32 pg = 0; pg < meta->ndirectory_pages && done < (int) meta->lists; pg++)
		{
			Page		page;
			int			n;

			buf = vs_index_read_block(ref, rel, meta->directory_start + pg, bas);
			LockBuffer(buf, BUFFER_LOCK_SHARE);
			page = BufferGetPage(buf);
			if (PageIsNew(page) || !(VsIvfpqPageGetOpaque(page)->flags & VS_IVFPQ_DIRECTORY))
				ereport(ERROR,
						(errcode(ERRCODE_INDEX_CORRUPTED),
						 errmsg("vs_ivfpq index %u: block %u is not a directory page",
								ref->indexrelid, meta->directory_start + pg),
						 errhint("REINDEX the index.")));
			n = Min(VS_IVFPQ_DIR_PER_PAGE, (int) meta->lists - done);
			memcpy(dir + done, PageGetContents(page), sizeof(VsIvfpqListEntry) * n);
			done += n;
			UnlockReleaseBuffer(buf);
		}
		if (done != (int) meta->lists)
			ereport(ERROR,
					(errcode(ERRCODE_INDEX_CORRUPTED),
					 errmsg("vs_ivfpq index %u: the directory has %d of %u lists",
							ref->indexrelid, done, meta->lists),
					 errhint("REINDEX the index.")));

		b.cap = 0;
		entrybuf_reserve(&b, (int64) Min(meta->ntuples + 1024, (uint64) 1 << 40));
		out->list_start = palloc(sizeof(int64) * (meta->lists + 1));
		for (uint32 l = 0; l < meta->lists; l++)
		{
			int64		from = b.n;

			out->list_start[l] = from;
			read_chain(ref, rel, bas, dir[l].last, l, &layout, vdim, &b);
			dedupe_range(&b, from);
		}
		out->list_start[meta->lists] = b.n;
		pfree(dir);
	}
	read_chain(ref, rel, bas, meta->pending_last, VS_IVFPQ_PENDING_LIST, &playout, vdim, &p);
	dedupe_range(&p, 0);

	out->ids = b.ids;
	out->codes = b.codes;
	out->vectors = b.vectors;
	out->n = b.n;
	out->pending_ids = p.ids;
	out->pending_vectors = p.vectors;
	out->npending = p.n;
	if (p.codes)
		pfree(p.codes);

	FreeAccessStrategy(bas);
	vs_index_close_for_read(rel);
}

/* ---------------------------------------------------------------------------------------------
 * The backend's cache of engine objects (searches) and quantizers (inserts)
 */

#define VS_IVFPQ_CACHE_ENTRIES 2

typedef struct CacheEntry
{
	bool		used;
	Oid			dbid;
	Oid			indexrelid;
	VsRelFileLocator locator;
	uint64		generation;		/* metapage generation read before the pages */
	uint64		last_use;
	Size		bytes;
	MemoryContext cxt;			/* the arrays of `c` */
	VsIvfpqCached c;
} CacheEntry;

typedef struct QuantizerEntry
{
	bool		used;
	Oid			indexrelid;
	VsRelFileLocator locator;
	uint64		build_id;
	uint64		last_use;
	vs_ivfpq   *ivf;
} QuantizerEntry;

static CacheEntry cache[VS_IVFPQ_CACHE_ENTRIES];
static QuantizerEntry quantizers[VS_IVFPQ_CACHE_ENTRIES];
static uint64 cache_clock = 0;
static bool callback_registered = false;

static void
drop_entry(CacheEntry *e)
{
	if (e->used)
	{
		if (e->c.ivf != NULL)
			vs_ivfpq_destroy(vs_backend_engine(), e->c.ivf);
		if (e->cxt != NULL)
			MemoryContextDelete(e->cxt);
	}
	memset(e, 0, sizeof(CacheEntry));
}

static void
drop_quantizer(QuantizerEntry *q)
{
	if (q->used && q->ivf != NULL)
		vs_ivfpq_destroy(vs_backend_engine(), q->ivf);
	memset(q, 0, sizeof(QuantizerEntry));
}

/* Called before the backend's engine context is destroyed (search.c). */
void
vs_ivfpq_cache_reset(void)
{
	for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
	{
		drop_entry(&cache[i]);
		drop_quantizer(&quantizers[i]);
	}
}

static void
ivfpq_relcache_callback(Datum arg, Oid relid)
{
	for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
	{
		if (cache[i].used && (relid == InvalidOid || cache[i].indexrelid == relid))
			drop_entry(&cache[i]);
		if (quantizers[i].used && (relid == InvalidOid || quantizers[i].indexrelid == relid))
			drop_quantizer(&quantizers[i]);
	}
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(ivfpq_relcache_callback, (Datum) 0);
		callback_registered = true;
	}
}

/* Keeps the cached objects within vs_search_cache_mb, dropping the least recently used. */
void
vs_ivfpq_trim_cache(void)
{
	for (;;)
	{
		Size		total = 0;
		CacheEntry *lru = NULL;

		for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
		{
			CacheEntry *e = &cache[i];

			if (!e->used)
				continue;
			total += e->bytes;
			if (lru == NULL || e->last_use < lru->last_use)
				lru = e;
		}
		if (lru == NULL || total <= (Size) vs_search_cache_mb * 1024 * 1024)
			return;
		drop_entry(lru);
	}
}

static void
engine_params(const VsIvfpqMetaPageData *meta, vs_ivfpq_params *params)
{
	memset(params, 0, sizeof(*params));
	params->dim = meta->dim;
	params->nlist = meta->lists;
	params->m = meta->m;
	params->nbits = (int) meta->nbits;
	params->metric = (vs_metric) meta->metric;
}

static vs_ivfpq *
create_object(const VsIvfpqMetaPageData *meta, const float *centroids, const float *codebooks)
{
	vs_ivfpq_params params;
	vs_ivfpq   *ivf = NULL;
	vs_status	st;

	engine_params(meta, &params);
	st = vs_ivfpq_create(vs_backend_engine(), &params, centroids, codebooks, &ivf);
	if (st != VS_OK)
		vs_engine_error(st);
	return ivf;
}

/*
 * The engine object of an index read by vs_ivfpq_read_index (trained): its quantizer and every list
 * entry, in engine context ctx.  Shared by the backends' cache (below) and the GPU worker's
 * (worker_main.c), so both search the same object.  Returns the engine's status (VS_OK with *out
 * set; otherwise *out is NULL and nothing is left behind) and never raises an error, so the worker
 * can evict and retry on VS_OUT_OF_MEMORY.
 */
int
vs_ivfpq_contents_object(struct vs_context *ctx, const VsIvfpqContents *contents,
						 struct vs_ivfpq **out)
{
	vs_ivfpq_params params;
	vs_ivfpq   *ivf = NULL;
	vs_status	st;

	*out = NULL;
	if (!contents->meta.trained)
		return VS_INVALID_ARGUMENT;
	engine_params(&contents->meta, &params);
	st = vs_ivfpq_create(ctx, &params, contents->centroids, contents->codebooks, &ivf);
	if (st != VS_OK)
		return st;
	for (uint32 l = 0; l < contents->meta.lists; l++)
	{
		int64		from = contents->list_start[l];
		int64		n = contents->list_start[l + 1] - from;

		if (n == 0)
			continue;
		st = vs_ivfpq_add(ctx, ivf, l, (const int64_t *) contents->ids + from,
						  contents->codes + from * contents->meta.code_size, (size_t) n);
		if (st != VS_OK)
		{
			vs_ivfpq_destroy(ctx, ivf);
			return st;
		}
	}
	*out = ivf;
	return VS_OK;
}

/* Bytes accounted for an engine object of n entries: ids and codes, centroids and codebooks. */
Size
vs_ivfpq_object_bytes(const VsIvfpqMetaPageData *meta, int64 n)
{
	if (!meta->trained)
		return 0;
	return (Size) n * (sizeof(int64) + meta->code_size) +
		sizeof(float) * (Size) meta->dim * (meta->lists + ((Size) 1 << meta->nbits));
}

/* Builds the cache entry's object and arrays from the index's pages. */
static void
load_entry(CacheEntry *e, const VsIndexRef *ref)
{
	VsIvfpqContents contents;
	MemoryContext old;
	vs_context *ctx = vs_backend_engine();

	e->cxt = AllocSetContextCreate(TopMemoryContext, "vs_ivfpq cache", ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(e->cxt);
	vs_ivfpq_read_index(ref, true, &contents);
	e->c.meta = contents.meta;
	e->bytes = 0;
	if (contents.meta.trained)
	{
		int			st = vs_ivfpq_contents_object(ctx, &contents, &e->c.ivf);

		if (st != VS_OK)
			vs_engine_error(st);
		e->bytes += vs_ivfpq_object_bytes(&contents.meta, contents.n);
		pfree(contents.centroids);
		pfree(contents.codebooks);
		if (contents.codes)
			pfree(contents.codes);
		pfree(contents.list_start);
	}
	/* store_vectors: list and pending entries' vectors by id, for the exact re-rank */
	if ((contents.vectors != NULL && contents.n > 0) ||
		(contents.pending_vectors != NULL && contents.npending > 0))
	{
		int64		total = (contents.vectors ? contents.n : 0) +
			(contents.pending_vectors ? contents.npending : 0);
		IdPos	   *rows = palloc_extended(sizeof(IdPos) * total, MCXT_ALLOC_HUGE);
		int64		m = 0;
		int64		nl = contents.vectors ? contents.n : 0;
		int			dim = contents.meta.dim;

		/* pos < nl: a list entry; otherwise pending entry pos - nl */
		for (int64 i = 0; i < total; i++)
		{
			rows[i].id = i < nl ? contents.ids[i] : contents.pending_ids[i - nl];
			rows[i].pos = i;
		}
		qsort(rows, total, sizeof(IdPos), cmp_idpos);
		e->c.ids = palloc_extended(sizeof(int64) * total, MCXT_ALLOC_HUGE);
		e->c.vectors = palloc_extended(sizeof(float) * dim * total, MCXT_ALLOC_HUGE);
		for (int64 i = 0; i < total; i++)
		{
			const float *src;

			if (m > 0 && e->c.ids[m - 1] == rows[i].id)
				continue;
			src = rows[i].pos < nl ? contents.vectors + rows[i].pos * dim
				: contents.pending_vectors + (rows[i].pos - nl) * dim;
			e->c.ids[m] = rows[i].id;
			memcpy(e->c.vectors + m * dim, src, sizeof(float) * dim);
			m++;
		}
		e->c.n = m;
		pfree(rows);
		if (contents.vectors)
			pfree(contents.vectors);
		if (contents.pending_vectors)
			pfree(contents.pending_vectors);
		contents.pending_vectors = NULL;
		e->bytes += (Size) m * (sizeof(int64) + sizeof(float) * dim);
	}
	if (contents.ids)
		pfree(contents.ids);
	e->c.pending_ids = contents.pending_ids;
	e->c.pending_vectors = contents.pending_vectors;
	e->c.npending = contents.npending;
	e->bytes += (Size) contents.npending * sizeof(int64);
	MemoryContextSwitchTo(old);
}

/*
 * The backend's engine object of the index, at least as new as ref (read again when the metapage's
 * generation moved: every insert and VACUUM changes the entry set).
 */
VsIvfpqCached *
vs_ivfpq_get_cached(const VsIndexRef *ref)
{
	CacheEntry *entry = NULL;

	register_callback();
	for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
	{
		CacheEntry *e = &cache[i];

		if (e->used && e->dbid == ref->dbid && e->indexrelid == ref->indexrelid &&
			memcmp(&e->locator, &ref->locator, sizeof(VsRelFileLocator)) == 0)
		{
			if (e->generation >= ref->generation)
			{
				e->last_use = ++cache_clock;
				return &e->c;
			}
			drop_entry(e);
			entry = e;
			break;
		}
	}
	if (entry == NULL)
	{
		for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
		{
			CacheEntry *e = &cache[i];

			if (!e->used)
			{
				entry = e;
				break;
			}
			if (entry == NULL || e->last_use < entry->last_use)
				entry = e;
		}
		drop_entry(entry);
	}

	PG_TRY();
	{
		load_entry(entry, ref);
	}
	PG_CATCH();
	{
		if (entry->c.ivf != NULL)
			vs_ivfpq_destroy(vs_backend_engine(), entry->c.ivf);
		if (entry->cxt != NULL)
			MemoryContextDelete(entry->cxt);
		memset(entry, 0, sizeof(CacheEntry));
		PG_RE_THROW();
	}
	PG_END_TRY();
	entry->used = true;
	entry->dbid = ref->dbid;
	entry->indexrelid = ref->indexrelid;
	entry->locator = ref->locator;
	entry->generation = Max(entry->c.meta.generation, ref->generation);
	entry->last_use = ++cache_clock;
	return &entry->c;
}

/* The stored vector of a list or pending entry of a cached index (store_vectors), or NULL. */
const float *
vs_ivfpq_cached_vector(const VsIvfpqCached *c, int64 id)
{
	int64		lo = 0,
				hi = c->n - 1;

	while (lo <= hi)
	{
		int64		mid = lo + (hi - lo) / 2;

		if (c->ids[mid] == id)
			return c->vectors + mid * c->meta.dim;
		if (c->ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

/*
 * An engine object with the index's quantizer and empty lists, for encoding inserted rows.  The
 * quantizer only changes with a rebuild (a new build_id), so it is cached by build_id.
 */
vs_ivfpq *
vs_ivfpq_get_quantizer(Relation index, const VsIvfpqMetaPageData *meta)
{
	QuantizerEntry *entry = NULL;
	VsRelFileLocator locator = VsRelationGetLocator(index);
	float	   *centroids;
	float	   *codebooks;
	Size		ncent = (Size) meta->lists * meta->dim;
	Size		ncode = (Size) meta->m * ((Size) 1 << meta->nbits) * (meta->dim / meta->m);

	register_callback();
	for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
	{
		QuantizerEntry *q = &quantizers[i];

		if (q->used && q->indexrelid == RelationGetRelid(index) && q->build_id == meta->build_id &&
			memcmp(&q->locator, &locator, sizeof(VsRelFileLocator)) == 0)
		{
			q->last_use = ++cache_clock;
			return q->ivf;
		}
	}
	for (int i = 0; i < VS_IVFPQ_CACHE_ENTRIES; i++)
	{
		QuantizerEntry *q = &quantizers[i];

		if (!q->used)
		{
			entry = q;
			break;
		}
		if (entry == NULL || q->last_use < entry->last_use)
			entry = q;
	}
	drop_quantizer(entry);

	centroids = palloc_extended(sizeof(float) * ncent, MCXT_ALLOC_HUGE);
	codebooks = palloc_extended(sizeof(float) * ncode, MCXT_ALLOC_HUGE);
	vs_ivfpq_read_floats(index, meta->centroid_start, meta->ncentroid_pages, centroids, ncent);
	vs_ivfpq_read_floats(index, meta->codebook_start, meta->ncodebook_pages, codebooks, ncode);
	entry->ivf = create_object(meta, centroids, codebooks);
	pfree(centroids);
	pfree(codebooks);
	entry->used = true;
	entry->indexrelid = RelationGetRelid(index);
	entry->locator = locator;
	entry->build_id = meta->build_id;
	entry->last_use = ++cache_clock;
	return entry->ivf;
}
