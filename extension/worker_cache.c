/*
 * The GPU worker's device cache (worker_proc.h): one engine object per index, keyed by (relfilenode
 * locator, index kind), in the worker's engine context -- the same cache (objcache.h) and the same
 * kinds' loads (indexkind.h) as a backend's, with the device budget as its limit: loads evict the
 * least recently used other objects to make room, and an index that cannot fit is refused before
 * it is read.
 *
 * The worker is connected to no database: kinds read index pages by the request's locator through
 * the buffer manager (search.h), under a resource owner of the worker's for the pins, released
 * after each load (after an error too).  The requesting backend holds a lock on the index while
 * it waits, so the relation cannot be dropped meanwhile.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/smgr.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "worker_proc.h"

static VsObjectCache cache;
bool		vsw_device_stats_stale;
static ResourceOwner load_owner;

static void
heartbeat(void)
{
	vsw_heartbeat();
}

static void
evicted(void)
{
	pg_atomic_fetch_add_u64(&vsw_shared->evictions, 1);
}

void
vsw_cache_init(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "vsearch cache",
											  ALLOCSET_DEFAULT_SIZES);

	vs_objcache_init(&cache, cxt, 0, true);
	cache.progress = heartbeat;
	cache.evicted = evicted;
	cache.before_change = vsw_lanes_wait_idle;
	load_owner = ResourceOwnerCreate(NULL, "vsearch worker index read");
}

void
vsw_cache_start(vs_context *engine, Size limit)
{
	cache.engine = engine;
	cache.limit = limit;
}

void
vsw_update_cache_stats(void)
{
	vs_context_info info;

	pg_atomic_write_u64(&vsw_shared->cache_bytes, cache.total);
	pg_atomic_write_u32(&vsw_shared->cached_indexes, (uint32) cache.n);
	if (vsw_engine && vs_context_get_info(vsw_engine, &info) == VS_OK)
		pg_atomic_write_u64(&vsw_shared->memory_in_use, info.memory_in_use);
	else
		pg_atomic_write_u64(&vsw_shared->memory_in_use, 0);
}

void
vsw_update_device_stats(bool now)
{
	static TimestampTz last;
	TimestampTz t = GetCurrentTimestamp();
	VsDeviceStat stats[VS_MAX_DEVICES];
	int			n = 0;

	if (!now && !TimestampDifferenceExceeds(last, t, 100))
	{
		vsw_device_stats_stale = true;
		return;
	}
	last = t;
	vsw_device_stats_stale = false;
	if (vsw_engine)
		n = Min(vs_context_device_count(vsw_engine), VS_MAX_DEVICES);
	for (int i = 0; i < n; i++)
	{
		vs_device_info di;
		VsDeviceStat *d = &stats[i];

		memset(d, 0, sizeof(*d));
		if (vs_context_get_device_info(vsw_engine, i, &di) != VS_OK)
		{
			d->ordinal = -1;
			strlcpy(d->error, vs_last_error(vsw_engine), sizeof(d->error));
			continue;
		}
		d->ordinal = di.device;
		d->alive = di.alive != 0;
		strlcpy(d->name, di.info.device_name, sizeof(d->name));
		d->memory_budget = di.info.memory_budget;
		d->memory_in_use = di.info.memory_in_use;
		d->calls = di.calls;
		d->datasets = di.datasets;
		d->ivfpq_objects = di.ivfpq_objects;
		strlcpy(d->error, di.error, sizeof(d->error));
	}
	SpinLockAcquire(&vsw_shared->mutex);
	vsw_shared->ndevices = n;
	memcpy(vsw_shared->devices, stats, sizeof(VsDeviceStat) * n);
	SpinLockRelease(&vsw_shared->mutex);
}

void
vsw_cache_clear(void)
{
	vs_objcache_drop_index(&cache, InvalidOid);
	vsw_update_cache_stats();
}

bool
vsw_cache_evict_one(const VsCachedObject *keep)
{
	bool		evicted = vs_objcache_evict_lru(&cache, keep);

	vsw_update_cache_stats();
	return evicted;
}

void
vsw_load_cleanup(bool error)
{
	if (error)
	{
		LWLockReleaseAll();
		ConditionVariableCancelSleep();
		pgstat_report_wait_end();
#if PG_VERSION_NUM < 160000
		AbortBufferIO();
#endif
		UnlockBuffers();
	}
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_BEFORE_LOCKS, !error, true);
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_LOCKS, !error, true);
	ResourceOwnerRelease(load_owner, RESOURCE_RELEASE_AFTER_LOCKS, !error, true);
	CurrentResourceOwner = NULL;
	if (error)
	{
		AtEOXact_Buffers(false);
		AtEOXact_Files(false);
	}
	/* no file stays open on a relation that may be dropped later */
	smgrcloseall();
}

VsCachedObject *
vsw_cache_prepare(const VsRequest *req, uint64 generation, char *err, Size errlen)
{
	VsIndexRef	ref;
	VsCachedObject *volatile e = NULL;
	VsCacheEvent event = VS_CACHE_HIT;
	MemoryContext old = CurrentMemoryContext;

	memset(&ref, 0, sizeof(ref));
	ref.dbid = req->dbid;
	ref.indexrelid = req->indexrelid;
	ref.locator = req->locator;
	ref.relpersistence = req->relpersistence;
	ref.kind = req->kind;
	ref.metric = (vs_metric) req->metric;
	ref.dim = req->dim;
	ref.generation = generation;
	ref.ntuples = req->ntuples;

	CurrentResourceOwner = load_owner;
	PG_TRY();
	{
		e = vs_objcache_get(&cache, &ref, &event);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(vsw_batch_cxt);
		edata = CopyErrorData();
		MemoryContextSwitchTo(old);
		FlushErrorState();
		vsw_load_cleanup(true);
		snprintf(err, errlen, "loading index %u: %s", req->indexrelid, edata->message);
		ereport(LOG, (errmsg("vsearch worker: %s", err)));
		e = NULL;
	}
	PG_END_TRY();
	if (e != NULL)
	{
		vsw_load_cleanup(false);
		if (event == VS_CACHE_LOADED)
			pg_atomic_fetch_add_u64(&vsw_shared->loads, 1);
		else if (event == VS_CACHE_REFRESHED)
			pg_atomic_fetch_add_u64(&vsw_shared->refreshes, 1);
		if (event != VS_CACHE_HIT)
			elog(DEBUG1, "vsearch worker: %s index %u (%zu bytes)",
				 event == VS_CACHE_LOADED ? "loaded" : "refreshed", req->indexrelid, e->bytes);
	}
	vsw_heartbeat();
	vsw_update_cache_stats();
	return e;
}
