/*
 * A cache of index kinds' engine objects (indexkind.h), keyed by index: each backend has one for its
 * in-backend searches (search.c), the GPU worker one for its device copies (worker_cache.c).
 *
 * An object serves a request whose reference is not newer than it; otherwise the kind brings it up
 * to date (in place when it can, else it is loaded anew).  Every object has a memory context of its
 * own for its host arrays.
 */
#ifndef VSEARCH_OBJCACHE_H
#define VSEARCH_OBJCACHE_H

#include "postgres.h"

#include "indexkind.h"

typedef struct VsObjectCache VsObjectCache;

typedef struct VsCachedObject
{
	VsRelFileLocator locator;	/* with kind, the key (the locator names the database too) */
	uint32		kind;
	Oid			indexrelid;
	uint32		dim;
	uint32		metric;			/* vs_metric the object was loaded for */
	uint64		generation;		/* the object reflects the index at least as of this */
	Size		bytes;			/* accounted size (device bytes in the worker) */
	uint64		last_used;
	void	   *obj;			/* the kind's */
	MemoryContext cxt;			/* its host arrays */
	VsObjectCache *cache;
} VsCachedObject;

/* What vs_objcache_get did. */
typedef enum VsCacheEvent
{
	VS_CACHE_HIT = 0,
	VS_CACHE_LOADED,			/* read for the first time */
	VS_CACHE_REFRESHED			/* brought up to date (in place, or loaded again) */
} VsCacheEvent;

struct VsObjectCache
{
	struct vs_context *engine;	/* where the objects live */
	MemoryContext cxt;			/* parent of the objects' contexts */
	int			max_entries;	/* 0: any number */
	Size		limit;			/* most bytes of one object and of all (0: no limit; loads evict
								 * other objects to stay under it) */
	bool		in_worker;
	void		(*progress) (void);	/* called while a load reads pages (NULL: none) */
	void		(*evicted) (void);	/* called for every eviction (NULL: none) */
	/* called before an entry's object is loaded, refreshed or freed (NULL: none): the worker's
	 * lanes must not be searching it then */
	void		(*before_change) (const VsCachedObject *e);
	Size		total;			/* bytes of all objects */
	uint64		clock;
	int			n;
	int			cap;
	VsCachedObject **entries;
};

extern void vs_objcache_init(VsObjectCache *cache, MemoryContext cxt, int max_entries,
							 bool in_worker);

/*
 * The object of ref's index, at least as new as ref: read now if missing, refreshed if older.
 * On an ERROR the entry is dropped.  *event (optional) says what happened.
 */
extern VsCachedObject *vs_objcache_get(VsObjectCache *cache, const VsIndexRef *ref,
									   VsCacheEvent *event);

/* Drops the least recently used entry other than keep; false if there is none. */
extern bool vs_objcache_evict_lru(VsObjectCache *cache, const VsCachedObject *keep);
/* Drops least recently used entries until they hold at most limit bytes. */
extern void vs_objcache_trim(VsObjectCache *cache, Size limit);
/* Drops the entries of an index (InvalidOid: all of them). */
extern void vs_objcache_drop_index(VsObjectCache *cache, Oid indexrelid);

#endif							/* VSEARCH_OBJCACHE_H */
