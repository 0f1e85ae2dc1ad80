/*
 * The GPU worker's lanes (worker_proc.h): threads that run the engine calls of search groups while
 * the worker's own thread goes on gathering, validating and answering requests, so that several
 * calls are in flight on the device at once (vsearch.worker_lanes; the engine context has as many
 * lanes, each with its own streams and buffers).  A small batch's call is mostly fixed cost --
 * launches, copies and host waits -- during which the device would otherwise idle.
 *
 * A lane runs nothing but vsw_search_run: the index kind's search operation, which calls the
 * engine and allocates with malloc -- no PostgreSQL function, no palloc, no ereport.  Everything
 * else stays on the worker's thread: it fills in an idle lane's call (vsw_lane_take), starts it
 * (vsw_lane_submit) and, once the lane says it is done (it sets the worker's latch), finishes it
 * (vsw_lanes_finish_done: retries, statistics, answers).  Before the cache loads, refreshes or
 * frees an object it waits for the lanes that search that object (VsObjectCache.before_change), so
 * no object changes under a running call while calls on other objects go on.  Lane threads block every signal: handlers run on the worker's
 * thread, and the engine's cancel callback stops a running call when the worker must exit.
 */
#include "postgres.h"

#include <pthread.h>
#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "worker_proc.h"

typedef enum VsLaneState
{
	VS_LANE_IDLE,
	VS_LANE_QUEUED,
	VS_LANE_RUNNING,
	VS_LANE_DONE
} VsLaneState;

typedef struct VsLane
{
	pthread_t	thread;
	VsLaneState state;			/* under lanes_mu */
	MemoryContext cxt;			/* the call's queries and request list */
	VsSearchCall call;
} VsLane;

static VsLane *lanes;
static int	nlanes;
static bool lanes_stopping;
static pthread_mutex_t lanes_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lanes_cv = PTHREAD_COND_INITIALIZER;	/* any state change */
static bool exit_hook_set;

static void *
lane_main(void *arg)
{
	VsLane	   *lane = (VsLane *) arg;

	pthread_mutex_lock(&lanes_mu);
	for (;;)
	{
		while (lane->state != VS_LANE_QUEUED && !lanes_stopping)
			pthread_cond_wait(&lanes_cv, &lanes_mu);
		if (lanes_stopping)
			break;
		lane->state = VS_LANE_RUNNING;
		pthread_mutex_unlock(&lanes_mu);

		vsw_search_run(&lane->call);

		pthread_mutex_lock(&lanes_mu);
		lane->state = VS_LANE_DONE;
		pthread_cond_broadcast(&lanes_cv);
		/* safe from any thread of the process, as from a signal handler */
		SetLatch(MyLatch);
	}
	pthread_mutex_unlock(&lanes_mu);
	return NULL;
}

static void
lanes_exit(int code, Datum arg)
{
	vsw_lanes_stop();
}

void
vsw_lanes_start(int n)
{
	sigset_t	all,
				old;

	Assert(nlanes == 0);
	if (n < 2)
		return;					/* one call at a time, on the worker's thread */
	if (!exit_hook_set)
	{
		/* before the slots are let go (worker_exit): a lane may still be answering nothing */
		before_shmem_exit(lanes_exit, (Datum) 0);
		exit_hook_set = true;
	}
	lanes = MemoryContextAllocZero(TopMemoryContext, sizeof(VsLane) * n);
	lanes_stopping = false;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int i = 0; i < n; i++)
	{
		VsLane	   *lane = &lanes[i];

		lane->cxt = AllocSetContextCreate(TopMemoryContext, "vsearch lane",
										  ALLOCSET_DEFAULT_SIZES);
		if (pthread_create(&lane->thread, NULL, lane_main, lane) != 0)
		{
			MemoryContextDelete(lane->cxt);
			break;
		}
		nlanes++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (nlanes < n)
		ereport(LOG, (errmsg("vsearch worker: started %d of %d lanes", nlanes, n)));
	if (nlanes < 2)
		vsw_lanes_stop();		/* one lane gains nothing over the worker's thread */
}

void
vsw_lanes_wait_idle(const VsCachedObject *entry)
{
	pthread_mutex_lock(&lanes_mu);
	for (int i = 0; i < nlanes; i++)
		while ((lanes[i].state == VS_LANE_QUEUED || lanes[i].state == VS_LANE_RUNNING) &&
			   (entry == NULL || lanes[i].call.entry == entry))
			pthread_cond_wait(&lanes_cv, &lanes_mu);
	pthread_mutex_unlock(&lanes_mu);
}

void
vsw_lanes_stop(void)
{
	if (lanes == NULL)
		return;
	/* calls in flight end (a cancelled one at its next poll) and are answered or failed */
	vsw_lanes_wait_idle(NULL);
	if (!proc_exit_inprogress)
		(void) vsw_lanes_finish_done();
	pthread_mutex_lock(&lanes_mu);
	lanes_stopping = true;
	pthread_cond_broadcast(&lanes_cv);
	pthread_mutex_unlock(&lanes_mu);
	for (int i = 0; i < nlanes; i++)
	{
		pthread_join(lanes[i].thread, NULL);
		MemoryContextDelete(lanes[i].cxt);
	}
	pfree(lanes);
	lanes = NULL;
	nlanes = 0;
}

/* A done lane's call, finished on the worker's thread; an ERROR fails only its group. */
static void
finish_lane(VsLane *lane)
{
	MemoryContext old = CurrentMemoryContext;
	VsSearchCall *c = &lane->call;

	PG_TRY();
	{
		vsw_search_finish(c);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char		msg[256];

		MemoryContextSwitchTo(old);
		edata = CopyErrorData();
		FlushErrorState();
		if (CurrentResourceOwner)
			vsw_load_cleanup(true);
		strlcpy(msg, edata->message, sizeof(msg));
		ereport(LOG, (errmsg("vsearch worker: request failed: %s", msg)));
		if (c->buf)
		{
			vsw_result_buf_release(c->buf);
			c->buf = NULL;
		}
		vsw_fail_group(c->reqs, c->n, msg);
	}
	PG_END_TRY();
	pthread_mutex_lock(&lanes_mu);
	lane->state = VS_LANE_IDLE;
	pthread_mutex_unlock(&lanes_mu);
}

int
vsw_lanes_finish_done(void)
{
	int			finished = 0;

	for (int i = 0; i < nlanes; i++)
	{
		VsLaneState st;

		pthread_mutex_lock(&lanes_mu);
		st = lanes[i].state;
		pthread_mutex_unlock(&lanes_mu);
		if (st == VS_LANE_DONE)
		{
			finish_lane(&lanes[i]);
			finished++;
		}
	}
	return finished;
}

VsSearchCall *
vsw_lane_take(MemoryContext *cxt)
{
	for (;;)
	{
		bool		done = false;

		pthread_mutex_lock(&lanes_mu);
		for (int i = 0; i < nlanes; i++)
		{
			if (lanes[i].state == VS_LANE_IDLE)
			{
				pthread_mutex_unlock(&lanes_mu);
				MemoryContextReset(lanes[i].cxt);
				*cxt = lanes[i].cxt;
				return &lanes[i].call;
			}
			done |= lanes[i].state == VS_LANE_DONE;
		}
		if (nlanes == 0)
		{
			pthread_mutex_unlock(&lanes_mu);
			return NULL;
		}
		/* every lane busy: wait for one, then answer what it found */
		if (!done)
			pthread_cond_wait(&lanes_cv, &lanes_mu);
		pthread_mutex_unlock(&lanes_mu);
		(void) vsw_lanes_finish_done();
	}
}

void
vsw_lane_submit(VsSearchCall *call)
{
	VsLane	   *lane = (VsLane *) ((char *) call - offsetof(VsLane, call));

	pthread_mutex_lock(&lanes_mu);
	Assert(lane->state == VS_LANE_IDLE);
	lane->state = VS_LANE_QUEUED;
	pthread_cond_broadcast(&lanes_cv);
	pthread_mutex_unlock(&lanes_mu);
}
