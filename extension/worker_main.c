/*
 * The vsearch background worker: one process that owns the GPU (the engine's CUDA context), keeps
 * index kinds' engine objects on it, and answers the kNN and range requests of every backend in
 * batches, and the build steps of their CREATE INDEX.  docs/WORKER.md describes the protocol, the
 * cache and the failure handling; worker_proc.h lists the files of the process by duty.
 *
 * The worker is attached to shared memory only (no database connection): it reads index pages of
 * any database through the buffer manager without a relcache entry, using the relfilenode locator
 * a request carries.  The requesting backend holds a lock on the index while it waits, so the
 * relation cannot be dropped meanwhile.
 *
 * It never waits on a backend: answers are written chunk by chunk when the backend has consumed
 * the previous chunk, and a backend that gives up only marks its slot.  Engine calls poll a
 * cancel callback that notices SIGTERM and requests whose backends all gave up.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "indexkind.h"
#include "worker_proc.h"

VsWorkerShared *vsw_shared;
uint64		vsw_gen;
VsActive   *vsw_active;
vs_context *vsw_engine;
MemoryContext vsw_batch_cxt;
MemoryContext vsw_result_cxt;
int			vsw_device_errors;

static bool engine_on_gpu;
static int	engine_device = -1;
static int	engine_limit_mb = -1;
static char *engine_gpus;		/* vsearch.gpus, placement and shard size the engine started with */
static int	engine_placement = -1;
static int	engine_shard_mb = -1;
static int	failed_device = -1; /* vsearch.debug_fail_device applied */
static char *engine_fault;		/* vsearch.debug_engine_fault applied to the context */
static char *cuda_library;
static int	last_batch_requests;

static int	engine_lanes = -1;

/*
 * The requests of the engine call this thread makes (n = 0: none), for the cancel callback: the
 * engine polls it on the calling thread only, so each lane and the worker's thread have their own.
 */
static __thread VsActive **cancel_group;
static __thread int cancel_group_n;
static __thread uint32 cancel_polls;

static void
set_state(VsWorkerState state, const char *device)
{
	SpinLockAcquire(&vsw_shared->mutex);
	vsw_shared->state = state;
	if (device)
		strlcpy(vsw_shared->device, device, sizeof(vsw_shared->device));
	vsw_shared->on_gpu = state == VS_WORKER_SERVING && engine_on_gpu;
	SpinLockRelease(&vsw_shared->mutex);
}

void
vsw_set_cancel_group(VsActive **group, int n)
{
	cancel_group = group;
	cancel_group_n = n;
}

/* Polled by the thread of an engine call: a lane's or the worker's. */
static int
engine_cancel(void *arg)
{
	vsw_heartbeat();
	if (ProcDiePending || proc_exit_inprogress)
		return 1;
	/* every 64th poll: stop if every backend of the group gave up */
	if (cancel_group_n > 0 && (++cancel_polls & 63) == 0)
	{
		for (int i = 0; i < cancel_group_n; i++)
			if (!vsw_slot_abandoned(vsw_active_index(cancel_group[i])))
				return 0;
		return 1;
	}
	return 0;
}

/* Answers requests that arrive while the worker cannot serve. */
static void
refuse_all(VsActive **list, int n, const char *why)
{
	for (int r = 0; r < n; r++)
		vsw_finish_request(vsw_active_index(list[r]), VS_ANSWER_ERROR, why);
}

/* ---- the engine context ------------------------------------------------------------------- */

/* vsearch.debug_engine_fault on the context, when it differs from what the context has. */
static void
apply_engine_fault(void)
{
	const char *value = vs_debug_engine_fault ? vs_debug_engine_fault : "";
	vs_fault	fault;
	unsigned	ms;

	if (!vsw_engine || strcmp(value, engine_fault ? engine_fault : "") == 0 ||
		!vs_parse_engine_fault(value, &fault, &ms))
		return;
	if (vs_context_inject_fault(vsw_engine, fault, -1, ms) != VS_OK)
	{
		ereport(LOG, (errmsg("vsearch worker: cannot inject \"%s\": %s", value,
							 vs_last_error(vsw_engine))));
		return;
	}
	if (engine_fault)
		pfree(engine_fault);
	engine_fault = MemoryContextStrdup(TopMemoryContext, value);
	if (fault == VS_FAULT_NONE)
		ereport(LOG, (errmsg("vsearch worker: engine fault cleared (vsearch.debug_engine_fault)")));
	else
		ereport(LOG, (errmsg("vsearch worker: engine fault \"%s\" injected (vsearch.debug_engine_fault)",
							 value)));
}

static void
engine_stop(void)
{
	vsw_lanes_stop();
	vs_kinds_worker_tick(vsw_engine, true);
	vsw_cache_clear();
	if (vsw_engine)
		vs_context_destroy(vsw_engine);
	vsw_engine = NULL;
	engine_on_gpu = false;
	vsw_update_cache_stats();
	vsw_update_device_stats(true);
}

static void
engine_start(void)
{
	vs_context_options o;
	vs_context_info info;
	char		errbuf[256] = "";
	vs_status	rc;
	size_t		budget;
	size_t		limit;

	int			devices[VS_MAX_DEVICES];
	int			ndevices;

	engine_device = vs_worker_device;
	engine_limit_mb = vs_gpu_memory_limit_mb;
	if (engine_gpus)
		pfree(engine_gpus);
	engine_gpus = MemoryContextStrdup(TopMemoryContext, vs_gpus ? vs_gpus : "");
	engine_placement = vs_gpu_placement;
	engine_shard_mb = vs_shard_min_size_mb;
	engine_lanes = vs_worker_lanes;
	failed_device = -1;
	if (engine_fault)
		pfree(engine_fault);
	engine_fault = NULL;		/* a new context has none */
	if (engine_device == VS_WORKER_DEVICE_OFF)
	{
		set_state(VS_WORKER_DISABLED, "none (vsearch.worker_device = off)");
		return;
	}
	set_state(VS_WORKER_STARTING, "starting");
	vs_context_options_init(&o);
	o.backend = engine_device == VS_WORKER_DEVICE_GPU ? VS_BACKEND_CUDA : VS_BACKEND_CPU;
	o.cuda_library = cuda_library;
	o.device_memory_budget = (size_t) engine_limit_mb * 1024 * 1024;
	o.cancel = engine_cancel;
	o.cancel_arg = NULL;
	/* several devices: the listed ones, or every visible GPU */
	ndevices = vs_parse_gpus(engine_gpus, devices, VS_MAX_DEVICES);
	if (ndevices > 0)
	{
		o.devices = devices;
		o.ndevices = ndevices;
	}
	else if (engine_device == VS_WORKER_DEVICE_GPU)
		o.ndevices = -1;
	o.placement = engine_placement == VS_PLACE_REPLICATED ? VS_PLACEMENT_REPLICATED :
		engine_placement == VS_PLACE_SHARDED ? VS_PLACEMENT_SHARDED : VS_PLACEMENT_AUTO;
	o.shard_min_bytes = (size_t) engine_shard_mb * 1024 * 1024;
	o.lanes = engine_lanes;
	rc = vs_context_create(&o, &vsw_engine, errbuf, sizeof(errbuf));
	if (rc != VS_OK || !vsw_engine)
	{
		char		device[160];

		vsw_engine = NULL;
		snprintf(device, sizeof(device), "unavailable: %s", errbuf[0] ? errbuf : vs_status_name(rc));
		ereport(LOG,
				(errmsg("vsearch worker: no %s context: %s",
						engine_device == VS_WORKER_DEVICE_GPU ? "GPU" : "CPU", errbuf),
				 errhint("Searches run on the CPU in their backends.  Set vsearch.worker_device "
						 "= cpu to have the worker serve on the CPU.")));
		set_state(VS_WORKER_UNAVAILABLE, device);
		return;
	}
	memset(&info, 0, sizeof(info));
	(void) vs_context_get_info(vsw_engine, &info);
	info.device_name[sizeof(info.device_name) - 1] = '\0';
	engine_on_gpu = info.backend == VS_BACKEND_CUDA;
	apply_engine_fault();

	/*
	 * The cache may take 80% of the devices' budget (vsearch.gpu_memory_limit is per device); the
	 * rest is search scratch.  Over several devices that is their sum: a replicated index takes its
	 * size on each device, and a device that runs out evicts (worker_batch.c).
	 */
	budget = engine_limit_mb > 0 ?
		(size_t) engine_limit_mb * 1024 * 1024 * vs_context_live_devices(vsw_engine) :
		engine_on_gpu ? info.memory_budget : 0;
	limit = engine_on_gpu ? budget / 10 * 8 : budget;
	vsw_cache_start(vsw_engine, limit);
	if (limit > 0)
		ereport(LOG, (errmsg("vsearch worker serving on %s (index cache limit %zu MB)",
							 info.device_name, limit >> 20)));
	else
		ereport(LOG, (errmsg("vsearch worker serving on %s", info.device_name)));
	vsw_lanes_start(Min(engine_lanes, vs_context_lanes(vsw_engine)));
	set_state(VS_WORKER_SERVING, info.device_name);
	vsw_update_cache_stats();
	vsw_update_device_stats(true);
}

/* ---- the process -------------------------------------------------------------------------- */

static void
worker_exit(int code, Datum arg)
{
	VsWorkerShared *shared = vsw_shared;

	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	shared->worker_pid = 0;
	shared->worker_procno = -1;
	shared->state = VS_WORKER_STOPPED;
	shared->on_gpu = false;
	strlcpy(shared->device, "none (the worker exited)", sizeof(shared->device));
	SpinLockRelease(&shared->mutex);
	/* wake whoever waits, so they fall back at once */
	for (int i = 0; i < shared->nslots; i++)
	{
		VsSlot	   *slot = &shared->slots[i];
		VsSlotState st = ((volatile VsSlot *) slot)->state;

		if (st == VS_SLOT_SUBMITTED || st == VS_SLOT_RUNNING)
			SetLatch(vs_proc_latch(i / VS_SLOTS_PER_BACKEND));
	}
}

static void
worker_init(void)
{
	VsWorkerShared *shared = vs_worker_shared;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	vsw_shared = shared;
	if (!shared)
		elog(FATAL, "vsearch worker: shared memory is not initialized");

	vsw_batch_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch batch", ALLOCSET_DEFAULT_SIZES);
	vsw_result_cxt = AllocSetContextCreate(TopMemoryContext, "vsearch results",
										   ALLOCSET_DEFAULT_SIZES);
	CurrentResourceOwner = NULL;
	vsw_active = MemoryContextAllocZero(TopMemoryContext, sizeof(VsActive) * shared->nslots);
	vsw_intake_init();
	vsw_cache_init();
	cuda_library = MemoryContextStrdup(TopMemoryContext,
									   psprintf("%s/vsearch_cuda.so", pkglib_path));

	on_shmem_exit(worker_exit, (Datum) 0);
	SpinLockAcquire(&shared->mutex);
	shared->worker_pid = MyProcPid;
	shared->worker_procno = VS_MY_PROCNO;
	vsw_gen = ++shared->worker_gen;
	shared->state = VS_WORKER_STARTING;
	SpinLockRelease(&shared->mutex);
	pg_atomic_fetch_add_u64(&shared->starts, 1);

	/* requests an earlier worker took are lost: free them (their backends fall back) */
	for (int i = 0; i < shared->nslots; i++)
	{
		VsSlot	   *slot = &shared->slots[i];
		bool		wake = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == VS_SLOT_RUNNING || slot->state == VS_SLOT_ABANDONED)
		{
			wake = slot->state == VS_SLOT_RUNNING;
			if (slot->state == VS_SLOT_ABANDONED)
				slot->handle = DSM_HANDLE_INVALID;
			slot->state = VS_SLOT_FREE;
		}
		SpinLockRelease(&slot->mutex);
		if (wake)
			SetLatch(vs_proc_latch(i / VS_SLOTS_PER_BACKEND));
	}
}

void
vs_worker_main(Datum arg)
{
	VsActive  **list;

	worker_init();
	engine_start();
	list = MemoryContextAlloc(TopMemoryContext, sizeof(VsActive *) * vsw_shared->nslots);
	/* whatever is not allocated in a named context lives for one iteration */
	MemoryContextSwitchTo(vsw_batch_cxt);

	for (;;)
	{
		bool		did = false;
		int			n;
		Size		nq = 0;
		VsWorkerState state;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (vs_worker_device != engine_device || vs_gpu_memory_limit_mb != engine_limit_mb ||
				strcmp(vs_gpus ? vs_gpus : "", engine_gpus ? engine_gpus : "") != 0 ||
				vs_gpu_placement != engine_placement || vs_shard_min_size_mb != engine_shard_mb ||
				vs_worker_lanes != engine_lanes)
			{
				ereport(LOG, (errmsg("vsearch worker: device settings changed, restarting the engine")));
				engine_stop();
				engine_start();
			}
			if (vs_debug_fail_device >= 0 && vs_debug_fail_device != failed_device && vsw_engine)
			{
				failed_device = vs_debug_fail_device;
				if (vs_context_fail_device(vsw_engine, failed_device) == VS_OK)
					ereport(LOG, (errmsg("vsearch worker: device %d taken out (vsearch.debug_fail_device)",
										 failed_device)));
				vsw_update_device_stats(true);
			}
			apply_engine_fault();
		}
		vsw_heartbeat();
		did |= vsw_lanes_finish_done() > 0;
		vsw_check_device_errors(NULL, 0);
		did |= vsw_pump_streams();

		n = vsw_gather(list, 0, &nq);
		if (n > 0)
		{
			SpinLockAcquire(&vsw_shared->mutex);
			state = vsw_shared->state;
			SpinLockRelease(&vsw_shared->mutex);
			if (state != VS_WORKER_SERVING)
				refuse_all(list, n, "the worker is not serving");
			else
			{
				/* under concurrent load, wait briefly for more requests to fill the batch */
				if (vs_batch_wait_ms > 0 && last_batch_requests > 1 && nq < (Size) vs_batch_max)
				{
					TimestampTz deadline = GetCurrentTimestamp() +
						(TimestampTz) (vs_batch_wait_ms * 1000.0);

					while (nq < (Size) vs_batch_max && GetCurrentTimestamp() < deadline)
					{
						pg_usleep(20);
						n = vsw_gather(list, n, &nq);
					}
				}
				last_batch_requests = n;
				vsw_process_batch(list, n);
			}
			did = true;
		}

		vsw_sweep_attachments();
		vs_kinds_worker_tick(vsw_engine, false);
		MemoryContextReset(vsw_batch_cxt);
		if (!did)
		{
			/* idle: what the last batches changed becomes visible before the worker sleeps */
			if (vsw_device_stats_stale)
				vsw_update_device_stats(true);
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

void
vs_worker_register(void)
{
	BackgroundWorker bgw;

	memset(&bgw, 0, sizeof(bgw));
	bgw.bgw_flags = BGWORKER_SHMEM_ACCESS;
	bgw.bgw_start_time = BgWorkerStart_ConsistentState;
	bgw.bgw_restart_time = 2;
	strlcpy(bgw.bgw_library_name, "vsearch", BGW_MAXLEN);
	strlcpy(bgw.bgw_function_name, "vs_worker_main", BGW_MAXLEN);
	strlcpy(bgw.bgw_name, "vsearch gpu worker", BGW_MAXLEN);
	strlcpy(bgw.bgw_type, "vsearch gpu worker", BGW_MAXLEN);
	bgw.bgw_main_arg = (Datum) 0;
	bgw.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&bgw);
}
