/*
 * vs_ivfpq: reading an index into memory, the index kind's engine object and its searches
 * (indexkind.h), the candidate searches of scans and batch functions, and the quantizer of inserts
 * and in-backend searches.
 *
 * The engine object (VsIvfpqCached) is the GPU worker's: the engine's vs_ivfpq (quantizer and every
 * list's entries) built from the pages by vs_ivfpq_load, with store_vectors the stored vectors as
 * a dataset on its device for the exact re-rank.  It is never refreshed in place: a newer
 * generation reads the index again.  A backend keeps no such object: it searches the pages in
 * place with its cached quantizer (ivfpqpages.c), and both find the same candidates.
 */
#include "postgres.h"

#include <float.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/inval.h"
#include "utils/memutils.h"

#include "ivfpq.h"
#include "vsearch/distance.h"
#include "vsearch/engine.h"
#include "vsearch/ivfpq.h"
#include "worker_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Reading an index into memory (backends and the worker: no relcache entry needed)
 */

static void
read_floats(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas, BlockNumber start,
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

/* The codebooks (m x 2^nbits x dim/m) from their pages, where they are packed (ivfpq.h). */
static void
read_codebooks(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas,
			   const VsIvfpqMetaPageData *meta, float *codebooks)
{
	Size		ksub = (Size) 1 << meta->nbits;
	Size		dsub = meta->dim / meta->m;
	Size		width = VS_IVFPQ_TABLE_WIDTH(meta->nbits);
	float	   *tables = palloc_extended(sizeof(float) * meta->dim * width, MCXT_ALLOC_HUGE);

	read_floats(ref, rel, bas, meta->codebook_start, meta->ncodebook_pages, tables,
				(Size) meta->dim * width);
	for (Size j = 0; j < meta->m; j++)
		for (Size c = 0; c < ksub; c++)
			for (Size t = 0; t < dsub; t++)
				codebooks[(j * ksub + c) * dsub + t] = tables[(j * dsub + t) * width + c];
	pfree(tables);
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

/* Appends the entries of one chain (newest page first) to b. */
static void
read_chain(const VsIndexRef *ref, Relation rel, BufferAccessStrategy bas, BlockNumber blkno,
		   uint32 list, const VsIvfpqLayout *layout, int want_vdim, void (*progress) (void),
		   EntryBuf *b)
{
	while (BlockNumberIsValid(blkno))
	{
		Buffer		buf;
		Page		page;
		VsIvfpqPageOpaque opaque;
		int			nitems;
		ItemPointerData *tids;

		CHECK_FOR_INTERRUPTS();
		if (progress)
			progress();
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
 * Reads the quantizer and every list (deduplicated within the list) of an index into palloc'd
 * memory of the current context; pending entries are not read (an index that has any has no
 * quantizer, and the backends search those).  With want_vectors and store_vectors the stored
 * vectors come too.  Works without a relcache entry (the worker); the caller holds a lock on the
 * index.  progress (optional) is called for every list page read.
 */
void
vs_ivfpq_read_index(const VsIndexRef *ref, bool want_vectors, void (*progress) (void),
					VsIvfpqContents *out)
{
	Relation	rel = vs_index_open_for_read(ref);
	BufferAccessStrategy bas = GetAccessStrategy(BAS_BULKREAD);
	Buffer		buf;
	VsIvfpqMetaPageData *meta = &out->meta;
	VsIvfpqLayout layout;
	VsIvfpqListEntry *dir = NULL;
	EntryBuf	b;
	int			vdim;

	memset(out, 0, sizeof(VsIvfpqContents));
	buf = vs_index_read_block(ref, rel, VS_IVFPQ_METAPAGE_BLKNO, bas);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(meta, vs_ivfpq_page_meta(BufferGetPage(buf)), sizeof(VsIvfpqMetaPageData));
	UnlockReleaseBuffer(buf);

	vdim = (want_vectors && meta->store_vectors) ? (int) meta->dim : 0;
	vs_ivfpq_meta_layout(meta, false, &layout);

	memset(&b, 0, sizeof(b));
	b.code_size = meta->trained ? (int) meta->code_size : 0;
	b.vdim = vdim;

	if (meta->trained && meta->dim > 0)
	{
		Size		ncent = (Size) meta->lists * meta->dim;
		Size		ncode = (Size) meta->m * ((Size) 1 << meta->nbits) * (meta->dim / meta->m);
		int			done = 0;

		out->centroids = palloc_extended(sizeof(float) * ncent, MCXT_ALLOC_HUGE);
		out->codebooks = palloc_extended(sizeof(float) * ncode, MCXT_ALLOC_HUGE);
		read_floats(ref, rel, bas, meta->centroid_start, meta->ncentroid_pages,
						out->centroids, ncent);
		read_codebooks(ref, rel, bas, meta, out->codebooks);

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
			read_chain(ref, rel, bas, dir[l].last, l, &layout, vdim, progress, &b);
			dedupe_range(&b, from);
		}
		out->list_start[meta->lists] = b.n;
		pfree(dir);
	}
	out->ids = b.ids;
	out->codes = b.codes;
	out->vectors = b.vectors;
	out->n = b.n;

	FreeAccessStrategy(bas);
	vs_index_close_for_read(rel);
}

/* ---------------------------------------------------------------------------------------------
 * The engine object
 */

void
vs_ivfpq_engine_params(const VsIvfpqMetaPageData *meta, vs_ivfpq_params *params)
{
	memset(params, 0, sizeof(*params));
	params->dim = meta->dim;
	params->nlist = meta->lists;
	params->m = meta->m;
	params->nbits = (int) meta->nbits;
	params->metric = (vs_metric) meta->metric;
}

/*
 * The engine object of an index read by vs_ivfpq_read_index (trained): its quantizer and every
 * list entry, in engine context ctx.  Returns the engine's status (VS_OK with *out set; otherwise
 * *out is NULL and nothing is left behind).
 */
static int
contents_object(struct vs_context *ctx, const VsIvfpqContents *contents, struct vs_ivfpq **out)
{
	vs_ivfpq_params params;
	vs_ivfpq   *ivf = NULL;
	vs_status	st;

	*out = NULL;
	vs_ivfpq_engine_params(&contents->meta, &params);
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

/* store_vectors, in the worker: the list entries' vectors as a dataset on its device. */
static int
stored_dataset(struct vs_context *engine, const VsIvfpqContents *contents, struct vs_dataset **out)
{
	struct vs_dataset *ds = NULL;
	int			rc;

	rc = vs_dataset_create(engine, contents->meta.dim, VS_DTYPE_F32, &ds);
	if (rc == VS_OK)
		rc = vs_dataset_add(engine, ds, contents->vectors, (const int64_t *) contents->ids,
							(size_t) contents->n);
	if (rc != VS_OK && ds != NULL)
	{
		vs_dataset_destroy(engine, ds);
		ds = NULL;
	}
	*out = ds;
	return rc;
}

/* Bytes accounted for an engine object of n entries: ids and codes, centroids and codebooks. */
static Size
object_bytes(const VsIvfpqMetaPageData *meta, int64 n)
{
	if (!meta->trained)
		return 0;
	return (Size) n * (sizeof(int64) + meta->code_size) +
		sizeof(float) * (Size) meta->dim * (meta->lists + ((Size) 1 << meta->nbits));
}

void *
vs_ivfpq_load(const VsLoadEnv *env, void *obj, const VsIndexRef *ref, Size *bytes,
			  uint64 *generation)
{
	VsIvfpqContents contents;
	VsIvfpqCached *c;
	Size		need;

	if (obj != NULL)
		return NULL;			/* no refresh in place: read the index again */
	/* entries are at least 8 bytes of id: refuse what cannot fit before reading it */
	if (env->limit > 0 && ref->ntuples * sizeof(int64) > env->limit)
		vs_load_too_large(env, ref->indexrelid, ref->ntuples * sizeof(int64));
	/* with store_vectors the vectors come too, for the exact re-rank on the worker's device */
	vs_ivfpq_read_index(ref, true, env->progress, &contents);

	/* the worker is asked only about trained indexes (the backends search pending rows) */
	if (env->in_worker &&
		(!contents.meta.trained || contents.meta.dim != ref->dim ||
		 contents.meta.metric != (uint32) ref->metric || contents.meta.lists < 1))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index %u is not a trained vs_ivfpq index of dimension %u and metric %u",
						ref->indexrelid, ref->dim, (uint32) ref->metric)));
	need = object_bytes(&contents.meta, contents.n);
	if (env->in_worker && contents.vectors != NULL)
		need += (Size) contents.n * (sizeof(int64) + sizeof(float) * contents.meta.dim);
	if (env->limit > 0 && need > env->limit)
		vs_load_too_large(env, ref->indexrelid, need);

	c = MemoryContextAllocZero(env->cxt, sizeof(VsIvfpqCached));
	c->meta = contents.meta;
	if (contents.meta.trained)
	{
		int			rc;

		if (env->reserve)
			(void) env->reserve(env->arg, need);
		for (;;)
		{
			rc = contents_object(env->engine, &contents, &c->ivf);
			if (rc == VS_OK && env->in_worker && contents.vectors != NULL && contents.n > 0)
			{
				rc = stored_dataset(env->engine, &contents, &c->stored);
				if (rc != VS_OK)
				{
					vs_ivfpq_destroy(env->engine, c->ivf);
					c->ivf = NULL;
				}
			}
			if (rc == VS_OUT_OF_MEMORY && env->evict_one && env->evict_one(env->arg))
				continue;
			break;
		}
		if (rc != VS_OK)
			vs_load_failed(env, ref->indexrelid, rc);
	}
	*bytes = need;
	*generation = contents.meta.generation;
	return c;
}

void
vs_ivfpq_destroy_object(struct vs_context *engine, void *obj)
{
	VsIvfpqCached *c = (VsIvfpqCached *) obj;

	if (c->ivf != NULL)
		vs_ivfpq_destroy(engine, c->ivf);
	if (c->stored != NULL)
		vs_dataset_destroy(engine, c->stored);
}

/*
 * The candidates (nq x k, counts) re-ranked exactly from the stored vectors on the worker's device,
 * in place: the engine's subset search, its exact distances (vsearch/distance.h) in its order.
 */
static int
rerank_stored(struct vs_context *engine, const VsIvfpqCached *c, const float *queries, Size nq,
			  Size k, int64 *ids, float *distances, int64 *counts)
{
	vs_metric	rank = vs_rank_metric((vs_metric) c->meta.metric);
	int64_t    *cand;
	int64_t    *offsets;
	vs_subsets	subsets;
	int			rc;
	int64		at = 0;

	if (c->stored == NULL)
	{
		/* an index without entries: nothing to re-rank */
		for (Size q = 0; q < nq; q++)
			counts[q] = 0;
		return VS_OK;
	}
	/* malloc, not palloc: no ERROR leaves here in the worker */
	cand = malloc(sizeof(int64_t) * Max(nq * k, 1));
	offsets = malloc(sizeof(int64_t) * (nq + 1));
	if (cand == NULL || offsets == NULL)
	{
		free(cand);
		free(offsets);
		return VS_OUT_OF_MEMORY;
	}
	for (Size q = 0; q < nq; q++)
	{
		offsets[q] = at;
		for (int64 i = 0; i < Min(counts[q], (int64) k); i++)
			if (ids[q * k + i] >= 0)
				cand[at++] = ids[q * k + i];
	}
	offsets[nq] = at;
	subsets.offsets = offsets;
	subsets.ids = cand;
	rc = vs_knn(engine, c->stored, queries, nq, k, rank, &subsets, (int64_t *) ids, distances,
				(int64_t *) counts);
	free(cand);
	free(offsets);
	return rc;
}

int
vs_ivfpq_knn(struct vs_context *engine, void *obj, const VsKindParams *params,
			 const VsQueries *qs, Size k, int64 *ids, float *distances, int64 *counts)
{
	VsIvfpqCached *c = (VsIvfpqCached *) obj;
	VsIvfpqSearchParams p;
	const float *queries = qs->vectors;
	Size		nq = qs->nq;
	int			rc;

	memcpy(&p, params, sizeof(p));
	if (c->ivf == NULL)
	{
		/* no quantizer: its pending rows are the caller's (vs_ivfpq_pending_ids) */
		for (Size q = 0; q < nq; q++)
			counts[q] = 0;
		for (Size i = 0; i < nq * k; i++)
		{
			ids[i] = -1;
			distances[i] = INFINITY;
		}
		return VS_OK;
	}
	rc = vs_ivfpq_search(engine, c->ivf, queries, nq, p.probe_offset, p.nprobe, k,
						 (int64_t *) ids, distances, (int64_t *) counts);
	if (rc == VS_OK && p.exact)
		rc = rerank_stored(engine, c, queries, nq, k, ids, distances, counts);
	return rc;
}

/* The smallest float >= radius: the estimates within it are a superset of those within radius. */
float
vs_ivfpq_radius_up(double radius)
{
	float		f;

	if (radius >= (double) FLT_MAX)
		return INFINITY;
	if (radius < -(double) FLT_MAX)
		return -FLT_MAX;
	f = (float) radius;
	if ((double) f < radius)
		f = nextafterf(f, INFINITY);
	return f;
}

int
vs_ivfpq_range_search(struct vs_context *engine, void *obj, const VsKindParams *params,
					  const VsQueries *qs, double radius, vs_alloc_fn alloc,
					  void *alloc_arg, vs_range_result *out)
{
	VsIvfpqCached *c = (VsIvfpqCached *) obj;
	VsIvfpqSearchParams p;
	const float *queries = qs->vectors;
	Size		nq = qs->nq;

	memcpy(&p, params, sizeof(p));
	if (c->ivf == NULL)
	{
		out->nq = nq;
		out->total = 0;
		out->offsets = alloc(alloc_arg, sizeof(int64) * (nq + 1));
		out->ids = alloc(alloc_arg, sizeof(int64));
		out->distances = alloc(alloc_arg, sizeof(float));
		if (out->offsets == NULL || out->ids == NULL || out->distances == NULL)
			return VS_OUT_OF_MEMORY;
		memset(out->offsets, 0, sizeof(int64) * (nq + 1));
		return VS_OK;
	}
	return vs_ivfpq_range(engine, c->ivf, queries, nq, p.probe_offset, p.nprobe,
						  vs_ivfpq_radius_up(radius), alloc, alloc_arg, out);
}

/* A search request's parameters: a probe window within the most lists an index has. */
bool
vs_ivfpq_check_search(const struct VsRequest *req, char *why, Size whylen)
{
	VsIvfpqSearchParams p;

	memcpy(&p, &req->params, sizeof(p));
	if (p.nprobe < 1 || p.nprobe > VS_IVFPQ_MAX_LISTS || p.probe_offset >= VS_IVFPQ_MAX_LISTS)
	{
		snprintf(why, whylen, "vs_ivfpq probe window [%u, +%u) out of range", p.probe_offset,
				 p.nprobe);
		return false;
	}
	if (p.exact > 1 || (p.exact && req->op != VS_OP_KNN))
	{
		snprintf(why, whylen, "vs_ivfpq exact re-rank flag %u invalid for operation %u", p.exact,
				 req->op);
		return false;
	}
	return true;
}

/* ---------------------------------------------------------------------------------------------
 * Candidate searches (the index scan's rounds and range quals, the batch functions)
 */

/*
 * The k entries with the smallest estimated distance in lists ranked [probe_offset,
 * probe_offset + nprobe) of each query (ids/dists nq x k, counts nq), from the search layer: the
 * GPU worker when it serves, else the backend's search of the pages in place (ivfpqpages.c).
 * Pending entries are not included (vs_ivfpq_pending_ids).  Both paths return the same
 * candidates: the engine's backends agree by contract, and the list scan's answer is the search's
 * over the same entries.
 */
void
vs_ivfpq_search_candidates(const VsIndexRef *ref, const float *queries, int nq, int probe_offset,
						   int nprobe, int k, bool exact, int64 *ids, float *dists, int64 *counts)
{
	VsKindParams params;
	VsIvfpqSearchParams p = {0};

	if (VsIvfpqRefLists(ref) == 0 || k <= 0 || probe_offset < 0 ||
		probe_offset >= (int) VsIvfpqRefLists(ref))
	{
		for (int q = 0; q < nq; q++)
			counts[q] = 0;
		return;
	}
	memset(&params, 0, sizeof(params));
	p.probe_offset = (uint32) probe_offset;
	p.nprobe = (uint32) Min(Max(nprobe, 1), VS_IVFPQ_MAX_LISTS);
	p.exact = exact && VsIvfpqRefStoreVectors(ref) ? 1 : 0;
	memcpy(&params, &p, sizeof(p));
	vs_search_knn(ref, &params, queries, nq, k, ids, dists, counts);
}

bool
vs_ivfpq_exact_rerank(const VsIndexRef *ref)
{
	return VsIvfpqRefStoreVectors(ref) && VsIvfpqRefPending(ref) == 0;
}

/* The search's chunks with every pending entry added to each query (distance NaN: unknown). */
typedef struct PendingAppend
{
	VsRangeStream out;
	const int64 *pending;
	int64		npending;
	int			next_q;			/* the first query not given its pending entries yet */
} PendingAppend;

static void
add_pending(PendingAppend *pa, int q)
{
	for (int64 i = 0; i < pa->npending; i++)
		vs_range_stream_add(&pa->out, q, pa->pending[i], NAN);
}

static void
append_pending(void *arg, const VsRangeChunk *chunk)
{
	PendingAppend *pa = (PendingAppend *) arg;

	for (int i = 0; i < chunk->nq; i++)
	{
		int			q = chunk->q0 + i;

		while (pa->next_q < q)
			add_pending(pa, pa->next_q++);
		for (int64 j = chunk->offsets[i]; j < chunk->offsets[i + 1]; j++)
			vs_range_stream_add(&pa->out, q, chunk->ids[j], chunk->distances[j]);
		if (!chunk->more || i < chunk->nq - 1)
		{
			add_pending(pa, q);
			pa->next_q = q + 1;
		}
	}
}

/* Every entry of the first vsearch.ivfpq_probes lists whose estimate is <= radius, and every
 * pending entry (the index kind's range_candidates). */
void
vs_ivfpq_range_candidates(const VsIndexRef *ref, const VsQueries *queries, double radius,
						  VsRangeConsumer consume, void *arg)
{
	int			nq = (int) queries->nq;
	PendingAppend pa;
	VsKindParams params;
	VsIvfpqSearchParams p = {0};

	if (nq <= 0)
		return;
	memset(&pa, 0, sizeof(pa));
	pa.pending = vs_ivfpq_pending_ids(ref, &pa.npending);
	memset(&params, 0, sizeof(params));
	p.probe_offset = 0;
	p.nprobe = (uint32) Max(vs_ivfpq_probes, 1);
	memcpy(&params, &p, sizeof(p));
	if (pa.npending == 0)
	{
		if (VsIvfpqRefLists(ref) > 0)
			vs_search_range_queries(ref, &params, queries, radius, consume, arg);
		return;
	}
	vs_range_stream_begin(&pa.out, nq, consume, arg);
	if (VsIvfpqRefLists(ref) > 0)
		vs_search_range_queries(ref, &params, queries, radius, append_pending, &pa);
	while (pa.next_q < nq)
		add_pending(&pa, pa.next_q++);
	vs_range_stream_end(&pa.out);
	pfree((void *) pa.pending);
}

/* ---------------------------------------------------------------------------------------------
 * The quantizer of inserts, and of the in-backend searches that cannot read it in place
 *
 * An engine object with the index's quantizer and empty lists, in this backend's engine context:
 * it encodes inserted rows, and gives the list scans of the searches that do not read the
 * quantizer pages in place (ivfpqpages.c: temporary indexes, centroids longer than a page, a
 * quantizer too large to keep pinned) their list ranking and tables.  The quantizer only changes
 * with a rebuild (a new build_id), so it is cached by build_id; a relcache invalidation of the
 * index drops it.  Nothing a search does between taking it and finishing its scan processes
 * invalidations (page reads take no heavyweight lock).
 *
 * The object is a view of the floats read from the quantizer pages (vs_ivfpq_create_view), kept
 * in a memory context of the cache entry; the codebooks' pages are unpacked into it and packed
 * again by the engine (for the encoder's products), the centroids packed by the first encode.
 */

#define VS_IVFPQ_QUANTIZERS 4

typedef struct Quantizer
{
	bool		used;
	Oid			indexrelid;
	VsRelFileLocator locator;
	uint64		build_id;
	uint64		last_use;
	vs_ivfpq   *ivf;
	MemoryContext cxt;			/* the floats ivf reads */
} Quantizer;

static Quantizer quantizers[VS_IVFPQ_QUANTIZERS];
static uint64 quantizer_clock = 0;
static bool callback_registered = false;

static void
drop_quantizer(Quantizer *q)
{
	if (q->used && q->ivf != NULL)
		vs_ivfpq_destroy(vs_backend_engine(), q->ivf);
	if (q->used && q->cxt != NULL)
		MemoryContextDelete(q->cxt);
	memset(q, 0, sizeof(Quantizer));
}

static void
quantizer_relcache_callback(Datum arg, Oid relid)
{
	for (int i = 0; i < VS_IVFPQ_QUANTIZERS; i++)
		if (quantizers[i].used && (relid == InvalidOid || quantizers[i].indexrelid == relid))
			drop_quantizer(&quantizers[i]);
}

/*
 * Maps the pages of fresh memory before it is written, in one call instead of one page fault per
 * 4 kB (about 1.7 us each on the development machine's virtual CPUs: 0.4 ms of a session's first
 * vs_ivfpq search, BENCHMARKS.md "CPU path: vs_flat streaming").  A kernel without
 * MADV_POPULATE_WRITE (before Linux 5.14) refuses it, and the writes fault as before.
 */
static void
prefault(void *p, Size bytes)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t	page = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t	start = ((uintptr_t) p + page - 1) & ~(page - 1);
	uintptr_t	end = ((uintptr_t) p + bytes) & ~(page - 1);

	if (end > start)
		(void) madvise((void *) start, end - start, MADV_POPULATE_WRITE);
#endif
}

vs_ivfpq *
vs_ivfpq_quantizer(const VsIndexRef *ref, Relation rel, const VsIvfpqMetaPageData *meta)
{
	Quantizer  *entry = NULL;
	vs_ivfpq_params params;
	MemoryContext cxt;
	float	   *quantizer;
	Size		ncent = (Size) meta->lists * meta->dim;
	Size		ncode = (Size) meta->m * ((Size) 1 << meta->nbits) * (meta->dim / meta->m);
	vs_status	st;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(quantizer_relcache_callback, (Datum) 0);
		callback_registered = true;
	}
	for (int i = 0; i < VS_IVFPQ_QUANTIZERS; i++)
	{
		Quantizer  *q = &quantizers[i];

		if (q->used && q->indexrelid == ref->indexrelid && q->build_id == meta->build_id &&
			memcmp(&q->locator, &ref->locator, sizeof(VsRelFileLocator)) == 0)
		{
			q->last_use = ++quantizer_clock;
			return q->ivf;
		}
		/* a free entry, else the least recently used */
		if (entry == NULL || (entry->used && (!q->used || q->last_use < entry->last_use)))
			entry = q;
	}
	drop_quantizer(entry);

	/* under the current context until the object exists, so that an error frees the floats */
	cxt = AllocSetContextCreate(CurrentMemoryContext, "vs_ivfpq quantizer", ALLOCSET_SMALL_SIZES);
	quantizer = MemoryContextAllocExtended(cxt, sizeof(float) * (ncent + ncode), MCXT_ALLOC_HUGE);
	prefault(quantizer, sizeof(float) * (ncent + ncode));
	read_floats(ref, rel, NULL, meta->centroid_start, meta->ncentroid_pages, quantizer, ncent);
	read_codebooks(ref, rel, NULL, meta, quantizer + ncent);
	vs_ivfpq_engine_params(meta, &params);
	st = vs_ivfpq_create_view(vs_backend_engine(), &params, quantizer, quantizer + ncent,
							  &entry->ivf);
	if (st != VS_OK)
		vs_engine_error(vs_backend_engine(), st);
	MemoryContextSetParent(cxt, TopMemoryContext);
	entry->cxt = cxt;
	entry->used = true;
	entry->indexrelid = ref->indexrelid;
	entry->locator = ref->locator;
	entry->build_id = meta->build_id;
	entry->last_use = ++quantizer_clock;
	return entry->ivf;
}
