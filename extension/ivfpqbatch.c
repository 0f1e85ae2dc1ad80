/*
 * vs_ivfpq: vsearch_knn_batch (the index kind's batch_knn, batch.h).
 *
 * For each query the rounds of the index scan (ivfpqscan.c): the `vsearch.ivfpq_rerank` best
 * estimates of the first `vsearch.ivfpq_probes` lists (and every pending entry), then 4x as many of
 * the same lists, then the next lists, ...; each round's visible rows in exact order, until k rows.
 * So the rows are those of `ORDER BY col <op> q LIMIT k` through the index, in its order.  Within a
 * window a larger search's answer starts with the smaller one's (estimates sorted, ties by id), so
 * a round's new candidates are the ones after the previous count.  The queries of a round that are
 * at the same window and k share one engine call.
 *
 * When the search re-ranks from the stored vectors (vs_ivfpq_exact_rerank: store_vectors and no
 * pending entry), a round's candidates come in exact order with the operator's distances, as the
 * scan takes them (take_exact in ivfpqscan.c): each query takes the ones it has not seen in this
 * window, checking only their visibility, and stops at k visible rows, instead of reading every
 * candidate's vector from the heap.
 */
#include "postgres.h"

#include <limits.h>
#include <math.h>

#include "miscadmin.h"

#include "batch.h"
#include "ivfpq.h"

typedef struct IvfpqQuery
{
	int			offset;			/* probe window */
	int64		k;				/* k of the last search in this window (0: none yet) */
	int64		prev;			/* candidates of the window already taken */
	bool		first;
	bool		done;
	int64	   *seen;			/* exact re-rank: ids taken in this window, sorted */
	int64		nseen;
	int64		seencap;
} IvfpqQuery;

typedef struct RoundKey
{
	int			offset;
	int64		k;
	int			q;
} RoundKey;

static int
cmp_round_key(const void *a, const void *b)
{
	const RoundKey *x = (const RoundKey *) a;
	const RoundKey *y = (const RoundKey *) b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return x->q < y->q ? -1 : (x->q > y->q ? 1 : 0);
}

typedef struct RoundHit
{
	VsHit		hit;
	int64		id;
} RoundHit;

static int
cmp_round_hit(const void *a, const void *b)
{
	const RoundHit *x = (const RoundHit *) a;
	const RoundHit *y = (const RoundHit *) b;
	bool		nan_a = isnan(x->hit.distance);
	bool		nan_b = isnan(y->hit.distance);

	if (nan_a != nan_b)
		return nan_a ? 1 : -1;
	if (!nan_a)
	{
		if (x->hit.distance < y->hit.distance)
			return -1;
		if (x->hit.distance > y->hit.distance)
			return 1;
	}
	return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

/* Checks the pairs one group of a round re-ranks: its new candidates (and, in a query's
 * first round, the pending entries), in the order the round takes them, ids < 0 left out; the
 * answers go to *res and their ids to *pair_ids (palloc'd), query i's from (*first)[i] to
 * (*first)[i + 1]. */
static void
check_group(VsBatch *bc, const IvfpqQuery *st, const RoundKey *keys, int ng, int64 k,
				  const int64 *ids, const int64 *counts, const int64 *pending, int64 npending,
				  int64 **pair_ids, VsPairResult **res, Size **first)
{
	VsPair	   *pairs = NULL;
	Size		n = 0,
				cap = 0;

	*first = palloc(sizeof(Size) * (ng + 1));
	for (int i = 0; i < ng; i++)
	{
		const IvfpqQuery *s = &st[keys[i].q];
		int64		count = k > 0 ? Min(counts[i], k) : 0;

		(*first)[i] = n;
		if (s->first)
			for (int64 j = 0; j < npending; j++)
				if (pending[j] >= 0)
					vs_batch_add_pair(&pairs, &n, &cap, pending[j], keys[i].q, n);
		for (int64 j = k > 0 ? Min(s->prev, count) : 0; j < count; j++)
			if (ids[(Size) i * k + j] >= 0)
				vs_batch_add_pair(&pairs, &n, &cap, ids[(Size) i * k + j], keys[i].q, n);
	}
	(*first)[ng] = n;
	*res = palloc_extended(sizeof(VsPairResult) * Max(n, 1), MCXT_ALLOC_HUGE);
	*pair_ids = palloc_extended(sizeof(int64) * Max(n, 1), MCXT_ALLOC_HUGE);
	for (Size i = 0; i < n; i++)
		(*pair_ids)[i] = pairs[i].id;
	vs_check_pairs(&bc->reader, pairs, n, *res);
	if (pairs)
		pfree(pairs);
}

static int
cmp_id(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Exact re-rank: each query of a group takes its round's candidates (exact order, ids/dists ng x
 * k) that it has not seen in this window, checking their visibility, until it has kq rows.  A
 * wider round of the same window re-ranks a superset, whose order need not start with the
 * narrower one's, so the window's taken ids are remembered.
 */
static void
take_exact_group(VsBatch *bc, IvfpqQuery *st, const RoundKey *keys, int ng, int64 k,
				 const int64 *ids, const float *dists, const int64 *counts, int kq)
{
	for (int i = 0; i < ng; i++)
	{
		int			q = keys[i].q;
		IvfpqQuery *s = &st[q];
		VsBatchAnswer *out = &bc->answers[q];
		int64		count = k > 0 ? Min(counts[i], k) : 0;
		int64		before = s->nseen;

		for (int64 j = 0; j < count && out->n < kq; j++)
		{
			int64		id = ids[(Size) i * k + j];
			VsPairResult res;

			if (id < 0 ||
				(before > 0 && bsearch(&id, s->seen, before, sizeof(int64), cmp_id) != NULL))
				continue;
			if (s->nseen == s->seencap)
			{
				s->seencap = Max(2 * s->seencap, 64);
				s->seen = s->seen ? repalloc_huge(s->seen, sizeof(int64) * s->seencap)
					: palloc_extended(sizeof(int64) * s->seencap, MCXT_ALLOC_HUGE);
			}
			s->seen[s->nseen++] = id;
			if (vs_check_pair(&bc->reader, id, q, &res))
			{
				out->hits[out->n].distance = vs_rank_value(bc->ref.metric, dists[(Size) i * k + j]);
				out->hits[out->n].tid = res.tid;
				out->n++;
			}
		}
		if (s->nseen > before)
			qsort(s->seen, s->nseen, sizeof(int64), cmp_id);
	}
}

/* The heap check: a group's candidates checked against the heap rows, each query's visible ones
 * in exact order appended (ties by id, duplicates once) until it has kq rows. */
static void
take_checked_group(VsBatch *bc, IvfpqQuery *st, const RoundKey *keys, int ng, int64 k,
				   const int64 *ids, const int64 *counts, const int64 *pending, int64 npending,
				   int kq)
{
	int64	   *pair_ids;
	VsPairResult *res;
	Size	   *first;

	check_group(bc, st, keys, ng, k, ids, counts, pending, npending, &pair_ids, &res, &first);
	for (int i = 0; i < ng; i++)
	{
		VsBatchAnswer *out = &bc->answers[keys[i].q];
		RoundHit   *round = palloc_extended(sizeof(RoundHit) * Max(first[i + 1] - first[i], 1),
											MCXT_ALLOC_HUGE);
		int64		n = 0;

		for (Size j = first[i]; j < first[i + 1]; j++)
		{
			if (!res[j].visible)
				continue;
			round[n].hit.distance = res[j].distance;
			round[n].hit.tid = res[j].tid;
			round[n].id = pair_ids[j];
			n++;
		}
		if (n > 1)
			qsort(round, n, sizeof(RoundHit), cmp_round_hit);
		for (int64 j = 0; j < n && out->n < kq; j++)
		{
			if (j > 0 && round[j].id == round[j - 1].id)
				continue;
			out->hits[out->n++] = round[j].hit;
		}
		pfree(round);
	}
	pfree(pair_ids);
	pfree(res);
	pfree(first);
}

void
vs_ivfpq_batch_knn(VsBatch *bc, int kq)
{
	int			lists = (int) VsIvfpqRefLists(&bc->ref);
	int64		npending = 0;
	int64	   *pending = vs_ivfpq_pending_ids(&bc->ref, &npending);
	int			probes = Max(vs_ivfpq_probes, 1);
	int			rerank = Max(vs_ivfpq_rerank, 1);
	int64		maxk = (int64) bc->ref.ntuples + 1;
	/* pending entries the index held when the batch opened are none: the ones added since are
	 * not visible to this statement */
	bool		exact = vs_ivfpq_exact_rerank(&bc->ref);
	IvfpqQuery *st = palloc0(sizeof(IvfpqQuery) * bc->nq);
	RoundKey   *keys = palloc(sizeof(RoundKey) * bc->nq);
	int			active = bc->nq;
	instr_time	t0,
				t1;

	for (int q = 0; q < bc->nq; q++)
		st[q].first = true;

	while (active > 0)
	{
		int			nkeys = 0;

		CHECK_FOR_INTERRUPTS();
		for (int q = 0; q < bc->nq; q++)
		{
			if (st[q].done)
				continue;
			keys[nkeys].offset = st[q].offset;
			keys[nkeys].k = (st[q].offset < lists)
				? Min(Min(st[q].k == 0 ? (int64) rerank : st[q].k * 4, maxk), (int64) INT_MAX) : 0;
			keys[nkeys].q = q;
			nkeys++;
		}
		qsort(keys, nkeys, sizeof(RoundKey), cmp_round_key);

		for (int g = 0; g < nkeys;)
		{
			int			h = g;
			int			ng;
			int64		k = keys[g].k;
			float	   *queries;
			int64	   *ids = NULL;
			float	   *dists = NULL;
			int64	   *counts;

			while (h < nkeys && keys[h].offset == keys[g].offset && keys[h].k == k)
				h++;
			ng = h - g;
			counts = palloc0(sizeof(int64) * ng);
			if (k > 0)
			{
				if ((double) ng * k > 2.0 * VS_BATCH_MAX_RESULTS)
					vs_batch_too_many(2 * (int64) VS_BATCH_MAX_RESULTS);
				queries = palloc_extended(sizeof(float) * bc->ref.dim * (Size) ng, MCXT_ALLOC_HUGE);
				for (int i = 0; i < ng; i++)
					memcpy(queries + (Size) i * bc->ref.dim,
						   bc->queries + (Size) keys[g + i].q * bc->ref.dim,
						   sizeof(float) * bc->ref.dim);
				ids = palloc_extended(sizeof(int64) * ng * k, MCXT_ALLOC_HUGE);
				dists = palloc_extended(sizeof(float) * ng * k, MCXT_ALLOC_HUGE);
				INSTR_TIME_SET_CURRENT(t0);
				vs_ivfpq_search_candidates(&bc->ref, queries, ng, keys[g].offset, probes, (int) k,
										   exact, ids, dists, counts);
				INSTR_TIME_SET_CURRENT(t1);
				INSTR_TIME_ACCUM_DIFF(bc->search_time, t1, t0);
				bc->rounds++;
				pfree(queries);
			}
			else
				INSTR_TIME_SET_CURRENT(t1);
			if (exact)
				take_exact_group(bc, st, keys + g, ng, k, ids, dists, counts, kq);
			else
				take_checked_group(bc, st, keys + g, ng, k, ids, counts, pending, npending, kq);

			for (int i = 0; i < ng; i++)
			{
				int			q = keys[g + i].q;
				IvfpqQuery *s = &st[q];
				VsBatchAnswer *out = &bc->answers[q];
				int64		count = k > 0 ? Min(counts[i], k) : 0;

				s->first = false;
				if (k == 0 || count < k)
				{
					s->offset += probes;
					s->k = 0;
					s->prev = 0;
					s->nseen = 0;
				}
				else
				{
					s->k = k;
					s->prev = count;
				}
				if (out->n >= kq || s->offset >= lists)
				{
					s->done = true;
					active--;
					if (s->seen)
						pfree(s->seen);
					s->seen = NULL;
				}
			}
			if (ids)
			{
				pfree(ids);
				pfree(dists);
			}
			pfree(counts);
			INSTR_TIME_SET_CURRENT(t0);
			INSTR_TIME_ACCUM_DIFF(bc->heap_time, t0, t1);
			g = h;
		}
		vs_search_trim_cache();
	}
	pfree(st);
	pfree(keys);
	if (pending)
		pfree(pending);
}

