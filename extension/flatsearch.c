/*
 * vs_flat: reading the items, and the index kind's engine object and searches (indexkind.h).
 *
 * The object is an engine dataset of every indexed vector with, beside it, the sorted row ids, a
 * keyed 64-bit hash of each row's vector and the mark where the last read of the pages stopped.
 * The GPU worker keeps it (on its device, or its CPU engine with vsearch.worker_device = cpu); a
 * backend searches the pages in place instead (flatpages.c):
 *   - first load: every item;
 *   - refresh while the metapage's epoch has not moved (no VACUUM compaction since the mark) and
 *     the mark's page still holds the heap tid it recorded at the mark's position: only the items
 *     appended after the mark (inserts only append).  The tid check covers a mark taken while a
 *     VACUUM was compacting (its epoch already moved, so the epoch alone cannot show that the
 *     mark's page was compacted afterwards);
 *   - refresh after a compaction: every item again, and the dataset changes only where the index
 *     did: rows whose id is gone or whose vector hash differs are removed (VACUUM removed the
 *     entry, or the heap TID was reused by a new row), new ones added.
 * One read can meet an id twice: VACUUM removes a dead row's entry after the read passed it, and a
 * new row reuses the heap TID and is appended; the copy read last is the row's (the earlier one
 * was removed because no snapshot can see it), so only that one stays.
 *
 * Rows are staged and added to the dataset in one vs_dataset_add call: each call may copy the
 * dataset (the CPU backend grows its arrays to the exact new size), so many small calls would
 * cost O(n^2).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/memutils.h"

#include "flat.h"
#include "worker_internal.h"

/* Chunks handed to the consumer: about this many bytes of vectors (at least one page). */
#define VS_READ_CHUNK_BYTES (4 * 1024 * 1024)

/*
 * Are the items a catch-up read skips on the mark's page still where they were?  A VACUUM that
 * compacted the page after the mark was taken shifted later rows below the skip; the epoch cannot
 * show one that had already moved it when the mark was taken.
 */
static bool
mark_holds(Page page, uint32 words, int nitems, const VsFlatMark *mark)
{
	ItemPointerData tid;

	if (nitems < mark->nitems)
		return false;
	tid = VsFlatPageGetItem(page, words, mark->nitems - 1)->heap_tid;
	return ItemPointerEquals(&tid, (ItemPointer) &mark->last_tid);
}

/*
 * Reads a vs_flat index through the buffer manager: all of it (from == NULL), or only the items
 * after `from` (false, having read nothing, if VACUUM moved items or the index was rebuilt
 * since).  Sets *to.
 */
bool
vs_flat_read_items(const VsIndexRef *ref, const VsFlatMark *from, VsFlatMark *to,
				   VsFlatConsumer consume, void *arg)
{
	Relation	rel = NULL;
	BufferAccessStrategy bas;
	Buffer		buf;
	VsFlatMetaPageData meta;
	uint32		dim;
	uint32		words;			/* of a row (flat.h) */
	int			per_page;
	size_t		chunk_rows;
	size_t		n = 0;
	float	   *vectors = NULL;
	int64	   *ids = NULL;
	BlockNumber first;
	bool		ok = true;

	rel = vs_index_open_for_read(ref);
	bas = GetAccessStrategy(BAS_BULKREAD);

	buf = vs_index_read_block(ref, rel, VS_FLAT_METAPAGE_BLKNO, bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(&meta, vs_flat_page_meta(BufferGetPage(buf)), sizeof(meta));
	UnlockReleaseBuffer(buf);

	dim = meta.dim;
	if (ref->dim != 0 && dim != 0 && dim != ref->dim)
		elog(ERROR, "vs_flat index %u changed dimension from %u to %u",
			 ref->indexrelid, ref->dim, dim);
	to->generation = meta.generation;
	to->epoch = meta.epoch;
	to->block = from ? from->block : VS_FLAT_METAPAGE_BLKNO;
	to->nitems = from ? from->nitems : 0;
	if (from)
		to->last_tid = from->last_tid;
	else
		ItemPointerSetInvalid(&to->last_tid);
	if (from != NULL &&
		(meta.epoch != from->epoch ||
		 (from->block != VS_FLAT_METAPAGE_BLKNO && meta.last_block < from->block)))
	{
		ok = false;				/* items moved (VACUUM) or the index was rebuilt */
		goto done;
	}
	if (dim == 0 || meta.last_block == VS_FLAT_METAPAGE_BLKNO)
		goto done;

	words = vs_store_words(dim, meta.storage);
	per_page = VsFlatItemsPerPage(words);
	chunk_rows = Max((size_t) per_page, VS_READ_CHUNK_BYTES / (sizeof(float) * dim));
	vectors = palloc(sizeof(float) * dim * chunk_rows);
	ids = palloc(sizeof(int64) * chunk_rows);

	first = (from && from->block != VS_FLAT_METAPAGE_BLKNO) ? from->block : VS_FLAT_FIRST_DATA_BLKNO;
	for (BlockNumber blkno = first; blkno <= meta.last_block; blkno++)
	{
		Page		page;
		int			skip = 0;

		CHECK_FOR_INTERRUPTS();
		if (vs_flat_is_sketch_block(meta.sketch_group, blkno))
			continue;			/* the worker searches every row: sketches are for backends */
		if (n + per_page > chunk_rows)
		{
			consume(arg, vectors, ids, n);
			n = 0;
		}
		if (from && blkno == from->block)
			skip = from->nitems;	/* read before */
		buf = vs_index_read_block(ref, rel, blkno, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		page = BufferGetPage(buf);
		if (VsFlatIsDataPage(page))
		{
			int			nitems = Min(VsFlatPageGetOpaque(page)->nitems, per_page);

			if (skip > 0 && !mark_holds(page, words, nitems, from))
			{
				UnlockReleaseBuffer(buf);
				ok = false;
				goto done;
			}
			for (int i = skip; i < nitems; i++)
			{
				VsFlatItem *item = VsFlatPageGetItem(page, words, i);

				ids[n] = vs_tid_to_id(&item->heap_tid);
				vs_flat_load_row(item, vectors + (size_t) n * dim, dim, meta.storage);
				n++;
			}
			to->block = blkno;
			to->nitems = Max(nitems, skip);
			if (to->nitems > 0)
				to->last_tid = VsFlatPageGetItem(page, words, to->nitems - 1)->heap_tid;
		}
		UnlockReleaseBuffer(buf);
	}
	if (n > 0)
		consume(arg, vectors, ids, n);

	/*
	 * A VACUUM that started compacting pages after we read the metapage has moved its epoch
	 * (flatvacuum.c bumps it before changing any page): the rows skipped on from's page may then
	 * have shifted below the skip, so this catch-up cannot be trusted.
	 */
	if (from != NULL)
	{
		uint64		epoch;

		buf = vs_index_read_block(ref, rel, VS_FLAT_METAPAGE_BLKNO, bas);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		epoch = vs_flat_page_meta(BufferGetPage(buf))->epoch;
		UnlockReleaseBuffer(buf);
		if (epoch != meta.epoch)
			ok = false;
	}

done:
	if (vectors)
		pfree(vectors);
	if (ids)
		pfree(ids);
	vs_index_close_for_read(rel);
	FreeAccessStrategy(bas);
	return ok;
}

/* ---------------------------------------------------------------------------------------------
 * The engine object
 */

typedef struct FlatObject
{
	vs_dataset *ds;				/* rows stored as the index stores them (float or binary16) */
	vs_metric	metric;
	uint32		dim;
	uint32		storage;		/* VS_FLAT_STORE_* */
	uint64		hash_seed;
	VsFlatMark	mark;			/* where the last read stopped */
	Size		nrows;
	int64	   *ids;			/* sorted */
	uint64	   *hashes;			/* of each row's vector, in the same order */
} FlatObject;

/* Accounted bytes of a row: its vector, id and cached norms in the engine. */
static inline Size
row_bytes(uint32 dim, uint32 storage)
{
	return (Size) dim * (storage == VS_STORE_F16 ? sizeof(uint16) : sizeof(float)) +
		2 * sizeof(int64);
}

/* A keyed 64-bit hash of a vector's bytes (four independent lanes), to notice changed rows. */
static uint64
vector_hash(uint64 seed, const float *v, uint32 dim)
{
	const char *p = (const char *) v;
	Size		len = (Size) dim * sizeof(float);
	uint64		h[4];
	uint64		x;
	Size		i = 0;

	for (int l = 0; l < 4; l++)
		h[l] = seed ^ ((len + l) * UINT64CONST(0x9E3779B97F4A7C15));
	for (; i + 32 <= len; i += 32)
		for (int l = 0; l < 4; l++)
		{
			memcpy(&x, p + i + 8 * l, 8);
			h[l] ^= x;
			h[l] *= UINT64CONST(0xBF58476D1CE4E5B9);
			h[l] ^= h[l] >> 31;
		}
	for (int l = 0; i < len; l = (l + 1) & 3)
	{
		uint32		y;

		memcpy(&y, p + i, 4);
		i += 4;
		h[l] ^= y;
		h[l] *= UINT64CONST(0xBF58476D1CE4E5B9);
		h[l] ^= h[l] >> 31;
	}
	x = h[0] ^ (h[1] * UINT64CONST(0x94D049BB133111EB)) ^ ((h[2] << 17) | (h[2] >> 47)) ^
		((h[3] << 41) | (h[3] >> 23));
	x ^= x >> 33;
	x *= UINT64CONST(0x94D049BB133111EB);
	x ^= x >> 29;
	return x;
}

static Size
find_row(const int64 *ids, Size n, int64 id)
{
	Size		lo = 0,
				hi = n;

	while (lo < hi)
	{
		Size		mid = lo + (hi - lo) / 2;

		if (ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (lo < n && ids[lo] == id) ? lo : (Size) -1;
}

/*
 * What a read gathers: rows to add, and which cached rows stay.  seen[r] is the read position of
 * cached row r's last unchanged copy (positions start at 2), 1 for a row a catch-up read keeps
 * (older than anything read), 0 for one to remove.
 */
typedef struct FlatSync
{
	const VsLoadEnv *env;
	const VsIndexRef *ref;
	FlatObject *o;
	bool		append;			/* reading what follows the mark: cached rows are not compared */
	uint64	   *seen;
	float	   *vectors;		/* rows to add */
	int64	   *ids;
	uint64	   *hashes;
	uint64	   *order;			/* their read positions */
	Size		nadd;
	Size		cap;
	Size		rows;			/* rows read */
} FlatSync;

static void
sync_grow(FlatSync *st, Size need)
{
	/* the most rows whose arrays can be allocated (need may come from an untrusted count) */
	Size		max_rows = MaxAllocHugeSize / Max((Size) st->o->dim * sizeof(float), sizeof(int64));
	Size		cap = Max(st->cap * 2, 4096);

	if (need > max_rows)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a copy of %zu rows of %u dimensions is too large", need, st->o->dim)));
	while (cap < need)
		cap *= 2;
	cap = Min(cap, max_rows);
	if (st->cap == 0)
	{
		st->vectors = palloc_extended(cap * st->o->dim * sizeof(float), MCXT_ALLOC_HUGE);
		st->ids = palloc_extended(cap * sizeof(int64), MCXT_ALLOC_HUGE);
		st->hashes = palloc_extended(cap * sizeof(uint64), MCXT_ALLOC_HUGE);
		st->order = palloc_extended(cap * sizeof(uint64), MCXT_ALLOC_HUGE);
	}
	else
	{
		st->vectors = repalloc_huge(st->vectors, cap * st->o->dim * sizeof(float));
		st->ids = repalloc_huge(st->ids, cap * sizeof(int64));
		st->hashes = repalloc_huge(st->hashes, cap * sizeof(uint64));
		st->order = repalloc_huge(st->order, cap * sizeof(uint64));
	}
	st->cap = cap;
}

static void
sync_consume(void *arg, const float *vectors, const int64 *ids, size_t n)
{
	FlatSync   *st = arg;
	FlatObject *o = st->o;
	Size		held = st->append ? o->nrows : 0;

	if (st->env->progress)
		st->env->progress();
	CHECK_FOR_INTERRUPTS();
	if (st->env->limit > 0 &&
		(held + st->rows + n) * row_bytes(o->dim, o->storage) > st->env->limit)
		vs_load_too_large(st->env, st->ref->indexrelid,
						  (held + st->rows + n) * row_bytes(o->dim, o->storage));
	for (size_t r = 0; r < n; r++)
	{
		const float *v = vectors + r * o->dim;
		uint64		h = vector_hash(o->hash_seed, v, o->dim);

		st->rows++;
		if (!st->append && o->nrows > 0)
		{
			Size		pos = find_row(o->ids, o->nrows, ids[r]);

			if (pos != (Size) -1 && o->hashes[pos] == h)
			{
				st->seen[pos] = st->rows + 1;
				continue;
			}
		}
		if (st->nadd == st->cap)
			sync_grow(st, st->nadd + 1);
		memcpy(st->vectors + st->nadd * o->dim, v, (Size) o->dim * sizeof(float));
		st->ids[st->nadd] = ids[r];
		st->hashes[st->nadd] = h;
		st->order[st->nadd] = st->rows + 1;
		st->nadd++;
	}
}

typedef struct AddRef
{
	int64		id;
	uint64		order;
	Size		r;				/* index into the rows to add */
} AddRef;

static int
addref_cmp(const void *a, const void *b)
{
	const AddRef *x = a,
			   *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->order < y->order ? -1 : (x->order > y->order ? 1 : 0);
}

/* Of the copies of an id (among the rows to add, and a cached row kept), only the one read last
 * stays. */
static void
sync_keep_last_copies(FlatSync *st)
{
	FlatObject *o = st->o;
	AddRef	   *refs;
	bool	   *drop;
	bool		sorted = true;
	Size		out = 0;

	if (st->nadd == 0)
		return;
	refs = palloc_extended(st->nadd * sizeof(AddRef), MCXT_ALLOC_HUGE);
	drop = palloc_extended(st->nadd, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	for (Size r = 0; r < st->nadd; r++)
	{
		refs[r].id = st->ids[r];
		refs[r].order = st->order[r];
		refs[r].r = r;
		if (r > 0 && refs[r].id <= refs[r - 1].id)
			sorted = false;
	}
	if (!sorted)
		qsort(refs, st->nadd, sizeof(AddRef), addref_cmp);
	for (Size i = 0; i < st->nadd; i++)
	{
		Size		pos;

		if (i + 1 < st->nadd && refs[i + 1].id == refs[i].id)
		{
			drop[refs[i].r] = true; /* read again later */
			continue;
		}
		pos = o->nrows ? find_row(o->ids, o->nrows, refs[i].id) : (Size) -1;
		if (pos != (Size) -1 && st->seen[pos] != 0)
		{
			if (st->seen[pos] > refs[i].order)
				drop[refs[i].r] = true; /* the cached copy was read last: keep it */
			else
				st->seen[pos] = 0;	/* replaced: the cached copy goes */
		}
	}
	for (Size r = 0; r < st->nadd; r++)
	{
		if (drop[r])
			continue;
		if (out != r)
		{
			memcpy(st->vectors + out * o->dim, st->vectors + r * o->dim,
				   (Size) o->dim * sizeof(float));
			st->ids[out] = st->ids[r];
			st->hashes[out] = st->hashes[r];
		}
		out++;
	}
	st->nadd = out;
}

static void
engine_failed(const VsLoadEnv *env, int status, const char *what) pg_attribute_noreturn();

static void
engine_failed(const VsLoadEnv *env, int status, const char *what)
{
	ereport(ERROR,
			(errcode(status == VS_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
			 errmsg("%s failed: %s: %s", what, vs_status_name((vs_status) status),
					vs_last_error(env->engine))));
}

typedef struct IdHash
{
	int64		id;
	uint64		hash;
} IdHash;

static int
idhash_cmp(const void *a, const void *b)
{
	int64		x = ((const IdHash *) a)->id,
				y = ((const IdHash *) b)->id;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* Applies a read to the dataset: removes the rows that went or changed, adds the new ones. */
static void
sync_apply(const VsLoadEnv *env, FlatSync *st, const VsIndexRef *ref)
{
	FlatObject *o = st->o;
	int64	   *remove = palloc_extended(Max(o->nrows, 1) * sizeof(int64), MCXT_ALLOC_HUGE);
	Size		nremove = 0;
	Size		n;
	Size		need;
	IdHash	   *add;
	int64	   *ids;
	uint64	   *hashes;
	bool		sorted = true;
	Size		i = 0,
				j = 0,
				out = 0;
	int			rc;

	sync_keep_last_copies(st);
	for (Size r = 0; r < o->nrows; r++)
		if (!st->seen[r])
			remove[nremove++] = o->ids[r];
	n = o->nrows - nremove + st->nadd;
	need = n * row_bytes(o->dim, o->storage);
	if (env->limit > 0 && need > env->limit)
		vs_load_too_large(env, ref->indexrelid, need);
	if (env->reserve)
		(void) env->reserve(env->arg, need);

	if (nremove > 0 && (rc = vs_dataset_remove(env->engine, o->ds, remove, nremove, NULL)) != VS_OK)
		engine_failed(env, rc, "removing rows");
	if (st->nadd > 0)
	{
		for (;;)
		{
			rc = vs_dataset_add(env->engine, o->ds, st->vectors, st->ids, st->nadd);
			if (rc == VS_OUT_OF_MEMORY && env->evict_one && env->evict_one(env->arg))
				continue;
			break;
		}
		if (rc != VS_OK)
			engine_failed(env, rc, psprintf("loading %zu rows", st->nadd));
	}

	/* the new (id, hash) list: kept rows (sorted) merged with the added ones (sorted here) */
	add = palloc_extended(Max(st->nadd, 1) * sizeof(IdHash), MCXT_ALLOC_HUGE);
	ids = MemoryContextAllocHuge(env->cxt, Max(n, 1) * sizeof(int64));
	hashes = MemoryContextAllocHuge(env->cxt, Max(n, 1) * sizeof(uint64));
	for (Size r = 0; r < st->nadd; r++)
	{
		add[r].id = st->ids[r];
		add[r].hash = st->hashes[r];
		if (r > 0 && add[r].id < add[r - 1].id)
			sorted = false;
	}
	if (!sorted)
		qsort(add, st->nadd, sizeof(IdHash), idhash_cmp);
	while (i < o->nrows || j < st->nadd)
	{
		if (i < o->nrows && !st->seen[i])
		{
			i++;
			continue;
		}
		if (j == st->nadd || (i < o->nrows && o->ids[i] < add[j].id))
		{
			ids[out] = o->ids[i];
			hashes[out++] = o->hashes[i++];
		}
		else
		{
			ids[out] = add[j].id;
			hashes[out++] = add[j++].hash;
		}
	}
	Assert(out == n);
	if (o->ids)
	{
		pfree(o->ids);
		pfree(o->hashes);
	}
	o->ids = ids;
	o->hashes = hashes;
	o->nrows = n;
}

/*
 * Reads the index into o: what follows o's mark (append), or everything; false when an append
 * read found that items moved (the caller then reads everything).
 */
static bool
sync_read(const VsLoadEnv *env, FlatObject *o, const VsIndexRef *ref, bool append)
{
	FlatSync	st;
	VsFlatMark	mark;

	memset(&st, 0, sizeof(st));
	st.env = env;
	st.ref = ref;
	st.o = o;
	st.append = append;
	st.seen = palloc_extended(Max(o->nrows, 1) * sizeof(uint64), MCXT_ALLOC_HUGE);
	for (Size r = 0; r < o->nrows; r++)
		st.seen[r] = append ? 1 : 0;
	if (o->nrows == 0 && ref->ntuples > 0)
		sync_grow(&st, (Size) ref->ntuples + 1024); /* every row the metapage counted, and a few */
	if (!vs_flat_read_items(ref, append ? &o->mark : NULL, &mark, sync_consume, &st))
		return false;
	sync_apply(env, &st, ref);
	o->mark = mark;
	return true;
}

void *
vs_flat_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
			 uint64 *generation)
{
	FlatObject *o = (FlatObject *) obj;
	uint32		storage = (uint32) ref->kind_info[0];

	if (env->limit > 0 && ref->ntuples > env->limit / row_bytes(ref->dim, storage))
		vs_load_too_large(env, ref->indexrelid,
						  ref->ntuples > SIZE_MAX / row_bytes(ref->dim, storage) ? SIZE_MAX :
						  ref->ntuples * row_bytes(ref->dim, storage));
	if (o == NULL)
	{
		int			rc;

		o = MemoryContextAllocZero(env->cxt, sizeof(FlatObject));
		o->metric = ref->metric;
		o->dim = ref->dim;
		o->storage = storage;
		if (!pg_strong_random(&o->hash_seed, sizeof(o->hash_seed)))
			o->hash_seed = (uint64) MyProcPid * UINT64CONST(0x9E3779B97F4A7C15);
		rc = vs_dataset_create(env->engine, ref->dim,
							   storage == VS_STORE_F16 ? VS_DTYPE_F16 : VS_DTYPE_F32, &o->ds);
		if (rc != VS_OK)
			engine_failed(env, rc, "creating a dataset");
		PG_TRY();
		{
			(void) sync_read(env, o, ref, false);
		}
		PG_CATCH();
		{
			vs_dataset_destroy(env->engine, o->ds);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	else if (!sync_read(env, o, ref, true))
		(void) sync_read(env, o, ref, false);	/* compacted by VACUUM: compare every row */
	*bytes = o->nrows * row_bytes(o->dim, o->storage);
	*generation = o->mark.generation;
	return o;
}

void
vs_flat_destroy(struct vs_context *engine, void *obj)
{
	vs_dataset_destroy(engine, ((FlatObject *) obj)->ds);
}

int
vs_flat_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
			const VsQueries *queries, Size k, int64 *ids, float *distances, int64 *counts)
{
	FlatObject *o = (FlatObject *) obj;

	return vs_knn(engine, o->ds, queries->vectors, queries->nq, k, vs_rank_metric(o->metric), NULL,
				  (int64_t *) ids, distances, (int64_t *) counts);
}

int
vs_flat_range(struct vs_context *engine, void *obj, const VsKindParams *params,
			  const VsQueries *queries, double radius, vs_alloc_fn alloc, void *alloc_arg,
			  vs_range_result *out)
{
	FlatObject *o = (FlatObject *) obj;

	return vs_range(engine, o->ds, queries->vectors, queries->nq, vs_rank_radius(o->metric, radius),
					vs_rank_metric(o->metric), NULL, alloc, alloc_arg, out);
}

bool
vs_flat_check_request(const struct VsRequest *req, char *why, Size whylen)
{
	static const VsKindParams none;

	if (memcmp(&req->params, &none, sizeof(none)) != 0)
	{
		snprintf(why, whylen, "vs_flat takes no search parameters");
		return false;
	}
	return true;
}
