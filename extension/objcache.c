/*
 * The cache of index kinds' engine objects (objcache.h).
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "objcache.h"

void
vs_objcache_init(VsObjectCache *cache, MemoryContext cxt, int max_entries, bool in_worker)
{
	memset(cache, 0, sizeof(*cache));
	cache->cxt = cxt;
	cache->max_entries = max_entries;
	cache->in_worker = in_worker;
}

static VsCachedObject *
lookup(VsObjectCache *cache, const VsIndexRef *ref)
{
	for (int i = 0; i < cache->n; i++)
	{
		VsCachedObject *e = cache->entries[i];

		if (e->kind == ref->kind &&
			memcmp(&e->locator, &ref->locator, sizeof(VsRelFileLocator)) == 0)
			return e;
	}
	return NULL;
}

/* Frees what the entry's object holds (the entry stays, empty). */
static void
drop_object(VsCachedObject *e)
{
	VsObjectCache *cache = e->cache;

	if (e->obj != NULL)
		vs_kind_by_id(e->kind)->destroy(cache->engine, e->obj);
	e->obj = NULL;
	MemoryContextReset(e->cxt);
	cache->total -= e->bytes;
	e->bytes = 0;
	e->generation = 0;
}

static void
remove_entry(VsCachedObject *e)
{
	VsObjectCache *cache = e->cache;

	if (cache->before_change)
		cache->before_change(e);
	drop_object(e);
	for (int i = 0; i < cache->n; i++)
		if (cache->entries[i] == e)
		{
			cache->entries[i] = cache->entries[--cache->n];
			break;
		}
	MemoryContextDelete(e->cxt);
	pfree(e);
}

bool
vs_objcache_evict_lru(VsObjectCache *cache, const VsCachedObject *keep)
{
	VsCachedObject *victim = NULL;

	for (int i = 0; i < cache->n; i++)
	{
		VsCachedObject *e = cache->entries[i];

		if (e != keep && (victim == NULL || e->last_used < victim->last_used))
			victim = e;
	}
	if (victim == NULL)
		return false;
	elog(DEBUG1, "vsearch: evicting the cached copy of index %u (%zu bytes)",
		 victim->indexrelid, victim->bytes);
	remove_entry(victim);
	if (cache->evicted)
		cache->evicted();
	return true;
}

void
vs_objcache_trim(VsObjectCache *cache, Size limit)
{
	while (cache->n > 0 && cache->total > limit)
		(void) vs_objcache_evict_lru(cache, NULL);
}

void
vs_objcache_drop_index(VsObjectCache *cache, Oid indexrelid)
{
	for (int i = cache->n - 1; i >= 0; i--)
		if (indexrelid == InvalidOid || cache->entries[i]->indexrelid == indexrelid)
			remove_entry(cache->entries[i]);
}

void
vs_load_too_large(const VsLoadEnv *env, Oid indexrelid, Size bytes)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("index %u needs about %zu MB, more than the worker's cache may hold (%zu MB)",
					indexrelid, bytes >> 20, env->limit >> 20)));
}

void
vs_load_failed(const VsLoadEnv *env, Oid indexrelid, int rc)
{
	ereport(ERROR,
			(errcode(rc == VS_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
			 errmsg("loading index %u failed: %s: %s", indexrelid,
					vs_status_name((vs_status) rc), vs_last_error(env->engine))));
}

/* VsLoadEnv callbacks: room for the entry's object beside the others. */
static bool
reserve(void *arg, Size bytes)
{
	VsCachedObject *e = (VsCachedObject *) arg;
	VsObjectCache *cache = e->cache;

	while (cache->limit > 0 && cache->total - e->bytes + bytes > cache->limit)
		if (!vs_objcache_evict_lru(cache, e))
			return false;
	return true;
}

static bool
evict_one(void *arg)
{
	VsCachedObject *e = (VsCachedObject *) arg;

	return vs_objcache_evict_lru(e->cache, e);
}

/* Loads (obj NULL) or refreshes the entry's object; false: the kind cannot refresh it in place. */
static bool
load_object(VsCachedObject *e, const VsIndexKind *kind, const VsIndexRef *ref)
{
	VsObjectCache *cache = e->cache;
	VsLoadEnv	env;
	MemoryContext scratch;
	MemoryContext old;
	void	   *obj;
	Size		bytes = 0;
	uint64		generation = 0;

	memset(&env, 0, sizeof(env));
	env.engine = cache->engine;
	env.cxt = e->cxt;
	env.in_worker = cache->in_worker;
	env.limit = cache->limit;
	env.reserve = reserve;
	env.evict_one = evict_one;
	env.arg = e;
	env.progress = cache->progress;

	/* the kind's temporary allocations go away with the load */
	scratch = AllocSetContextCreate(CurrentMemoryContext, "vsearch index load",
									ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(scratch);
	obj = kind->load(&env, e->obj, ref, &bytes, &generation);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(scratch);
	if (obj == NULL)
		return false;
	e->obj = obj;
	cache->total = cache->total - e->bytes + bytes;
	e->bytes = bytes;
	/*
	 * What the pages showed, not what the request claims: a generation ahead of the index's (a
	 * forged or corrupted request) must not make the copy look newer than the pages it read.
	 */
	e->generation = generation;
	return true;
}

VsCachedObject *
vs_objcache_get(VsObjectCache *cache, const VsIndexRef *ref, VsCacheEvent *event)
{
	const VsIndexKind *kind = vs_ref_kind(ref);
	VsCachedObject *e = lookup(cache, ref);
	VsCacheEvent what = VS_CACHE_LOADED;
	MemoryContext caller = CurrentMemoryContext;

	/*
	 * The index took its first vector, or was rebuilt; or a request of another metric than the
	 * one the object was loaded for (a forged or corrupted one): the kinds' objects search in the
	 * metric of their load, so that copy must answer no request of the index's own metric.
	 */
	if (e != NULL && (e->dim != ref->dim || e->metric != (uint32) ref->metric))
	{
		remove_entry(e);
		e = NULL;
	}
	if (e != NULL)
	{
		e->last_used = ++cache->clock;
		e->indexrelid = ref->indexrelid;
		if (e->obj != NULL && e->generation >= ref->generation)
		{
			if (event)
				*event = VS_CACHE_HIT;
			return e;
		}
		what = VS_CACHE_REFRESHED;
	}
	else
	{
		if (cache->max_entries > 0 && cache->n >= cache->max_entries)
			(void) vs_objcache_evict_lru(cache, NULL);
		if (cache->n == cache->cap)
		{
			cache->cap = Max(cache->cap * 2, 8);
			cache->entries = cache->entries
				? repalloc(cache->entries, sizeof(VsCachedObject *) * cache->cap)
				: MemoryContextAlloc(cache->cxt, sizeof(VsCachedObject *) * cache->cap);
		}
		e = MemoryContextAllocZero(cache->cxt, sizeof(VsCachedObject));
		e->locator = ref->locator;
		e->kind = ref->kind;
		e->indexrelid = ref->indexrelid;
		e->dim = ref->dim;
		e->metric = (uint32) ref->metric;
		e->cache = cache;
		e->cxt = AllocSetContextCreate(cache->cxt, "vsearch cached index", ALLOCSET_DEFAULT_SIZES);
		e->last_used = ++cache->clock;
		cache->entries[cache->n++] = e;
	}

	if (cache->before_change)
		cache->before_change(e);
	PG_TRY();
	{
		if (!load_object(e, kind, ref))
		{
			drop_object(e);		/* the kind cannot refresh it in place: read it all again */
			if (!load_object(e, kind, ref))
				elog(ERROR, "vsearch index kind %s returned no object for index %u",
					 kind->name, ref->indexrelid);
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(caller);
		remove_entry(e);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (event)
		*event = what;
	return e;
}
