/*
 * The GPU worker's shared memory (VsWorkerShared) and the vsearch_stat view's function.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"

#include "worker_internal.h"

VsWorkerShared *vs_worker_shared = NULL;

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
vs_worker_shmem_size(void)
{
	return add_size(offsetof(VsWorkerShared, slots),
					mul_size(sizeof(VsSlot), mul_size(MaxBackends, VS_SLOTS_PER_BACKEND)));
}

#if PG_VERSION_NUM >= 150000
static void
vs_worker_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(vs_worker_shmem_size());
}
#endif

static void
vs_worker_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	vs_worker_shared = ShmemInitStruct("vsearch worker", vs_worker_shmem_size(), &found);
	if (!found)
	{
		VsWorkerShared *s = vs_worker_shared;

		memset(s, 0, vs_worker_shmem_size());
		SpinLockInit(&s->mutex);
		s->state = VS_WORKER_STOPPED;
		strlcpy(s->device, "none (the worker has not started)", sizeof(s->device));
		pg_atomic_init_u64(&s->heartbeat, 0);
		pg_atomic_init_u64(&s->stalled_at, 0);
		pg_atomic_init_u64(&s->requests, 0);
		pg_atomic_init_u64(&s->batches, 0);
		pg_atomic_init_u64(&s->batch_queries, 0);
		pg_atomic_init_u64(&s->waits, 0);
		pg_atomic_init_u64(&s->wait_us, 0);
		pg_atomic_init_u64(&s->timed, 0);
		for (int i = 0; i < VS_STAGE_COUNT; i++)
			pg_atomic_init_u64(&s->stage_ns[i], 0);
		pg_atomic_init_u64(&s->fallbacks, 0);
		pg_atomic_init_u64(&s->errors, 0);
		pg_atomic_init_u64(&s->loads, 0);
		pg_atomic_init_u64(&s->compressed_loads, 0);
		pg_atomic_init_u64(&s->refreshes, 0);
		pg_atomic_init_u64(&s->evictions, 0);
		pg_atomic_init_u64(&s->starts, 0);
		pg_atomic_init_u64(&s->memory_in_use, 0);
		pg_atomic_init_u64(&s->cache_bytes, 0);
		pg_atomic_init_u32(&s->cached_indexes, 0);
		s->nslots = MaxBackends * VS_SLOTS_PER_BACKEND;
		for (int i = 0; i < s->nslots; i++)
		{
			SpinLockInit(&s->slots[i].mutex);
			s->slots[i].state = VS_SLOT_FREE;
			s->slots[i].handle = DSM_HANDLE_INVALID;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

void
vs_worker_shmem_register(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = vs_worker_shmem_request;
#else
	RequestAddinShmemSpace(vs_worker_shmem_size());
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = vs_worker_shmem_startup;
}

void
vs_worker_wake(void)
{
	VsWorkerShared *s = vs_worker_shared;
	int			procno = -1;

	if (!s)
		return;
	SpinLockAcquire(&s->mutex);
	if (s->worker_pid != 0)
		procno = s->worker_procno;
	SpinLockRelease(&s->mutex);
	if (procno >= 0)
		SetLatch(vs_proc_latch(procno));
}

static const char *
worker_state_name(VsWorkerState state)
{
	switch (state)
	{
		case VS_WORKER_STOPPED:
			return "stopped";
		case VS_WORKER_STARTING:
			return "starting";
		case VS_WORKER_SERVING:
			return "serving";
		case VS_WORKER_UNAVAILABLE:
			return "unavailable";
		case VS_WORKER_DISABLED:
			return "disabled";
	}
	return "?";
}

PG_FUNCTION_INFO_V1(vsearch_stat);

/*
 * One row: the worker's state and counters.  Without shared_preload_libraries there is no worker
 * and every counter is 0.
 */
Datum
vsearch_stat(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[17];
	bool		nulls[17];
	VsWorkerShared *s = vs_worker_shared;
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != lengthof(values))
		elog(ERROR, "vsearch_stat: expected %d columns, the SQL definition has %d",
			 (int) lengthof(values), tupdesc->natts);
	memset(nulls, 0, sizeof(nulls));

	if (s)
	{
		pid_t		pid;
		VsWorkerState state;
		char		device[sizeof(s->device)];
		uint64		batches = pg_atomic_read_u64(&s->batches);
		uint64		bq = pg_atomic_read_u64(&s->batch_queries);
		uint64		waits = pg_atomic_read_u64(&s->waits);
		uint64		wait_us = pg_atomic_read_u64(&s->wait_us);

		SpinLockAcquire(&s->mutex);
		pid = s->worker_pid;
		state = s->state;
		memcpy(device, s->device, sizeof(device));
		SpinLockRelease(&s->mutex);
		device[sizeof(device) - 1] = '\0';

		if (pid != 0)
			values[i++] = Int32GetDatum((int32) pid);
		else
			nulls[i++] = true;
		values[i++] = CStringGetTextDatum(worker_state_name(state));
		values[i++] = CStringGetTextDatum(device);
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->requests));
		values[i++] = Int64GetDatum((int64) batches);
		values[i++] = Float8GetDatum(batches ? (double) bq / batches : 0.0);
		values[i++] = Float8GetDatum(waits ? (double) wait_us / waits : 0.0);
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->memory_in_use));
		values[i++] = Int32GetDatum((int32) pg_atomic_read_u32(&s->cached_indexes));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->cache_bytes));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->fallbacks));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->errors));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->loads));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->refreshes));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->evictions));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->starts));
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(&s->compressed_loads));
	}
	else
	{
		nulls[i++] = true;
		values[i++] = CStringGetTextDatum("not loaded");
		values[i++] = CStringGetTextDatum("none (vsearch is not in shared_preload_libraries)");
		values[i++] = Int64GetDatum(0);
		values[i++] = Int64GetDatum(0);
		values[i++] = Float8GetDatum(0.0);
		values[i++] = Float8GetDatum(0.0);
		values[i++] = Int64GetDatum(0);
		values[i++] = Int32GetDatum(0);
		while (i < (int) lengthof(values))
			values[i++] = Int64GetDatum(0);
	}
	Assert(i == lengthof(values));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(vsearch_stat_reset);

/* Zeroes the counters (not the state, the memory in use or the cache size). */
Datum
vsearch_stat_reset(PG_FUNCTION_ARGS)
{
	VsWorkerShared *s = vs_worker_shared;

	if (s)
	{
		pg_atomic_write_u64(&s->requests, 0);
		pg_atomic_write_u64(&s->batches, 0);
		pg_atomic_write_u64(&s->batch_queries, 0);
		pg_atomic_write_u64(&s->waits, 0);
		pg_atomic_write_u64(&s->wait_us, 0);
		pg_atomic_write_u64(&s->timed, 0);
		for (int i = 0; i < VS_STAGE_COUNT; i++)
			pg_atomic_write_u64(&s->stage_ns[i], 0);
		pg_atomic_write_u64(&s->fallbacks, 0);
		pg_atomic_write_u64(&s->errors, 0);
		pg_atomic_write_u64(&s->loads, 0);
		pg_atomic_write_u64(&s->compressed_loads, 0);
		pg_atomic_write_u64(&s->refreshes, 0);
		pg_atomic_write_u64(&s->evictions, 0);
	}
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(vsearch_stat_stages);

/* One row per stage of a served search (VsStage), summed over the timed requests since a reset. */
Datum
vsearch_stat_stages(PG_FUNCTION_ARGS)
{
	static const char *const names[VS_STAGE_COUNT] = {
		"submit", "queue", "prepare", "engine", "answer", "wakeup"
	};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VsWorkerShared *s = vs_worker_shared;
	uint64		timed;

	InitMaterializedSRF(fcinfo, 0);
	if (!s)
		return (Datum) 0;
	timed = pg_atomic_read_u64(&s->timed);
	for (int st = 0; st < VS_STAGE_COUNT; st++)
	{
		uint64		ns = pg_atomic_read_u64(&s->stage_ns[st]);
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = CStringGetTextDatum(names[st]);
		values[1] = Int64GetDatum((int64) timed);
		values[2] = Float8GetDatum(ns / 1000.0);
		values[3] = Float8GetDatum(timed ? ns / 1000.0 / timed : 0.0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(vsearch_stat_devices);

/*
 * One row per device of the worker's engine context (none while it has no context, or without
 * shared_preload_libraries), as the worker last recorded them (at most 100 ms old).
 */
Datum
vsearch_stat_devices(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	VsWorkerShared *s = vs_worker_shared;
	VsDeviceStat devices[VS_MAX_DEVICES];
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);
	if (s)
	{
		SpinLockAcquire(&s->mutex);
		n = Min(s->ndevices, VS_MAX_DEVICES);
		memcpy(devices, s->devices, sizeof(VsDeviceStat) * n);
		SpinLockRelease(&s->mutex);
	}
	for (int d = 0; d < n; d++)
	{
		VsDeviceStat *ds = &devices[d];
		Datum		values[9];
		bool		nulls[9];
		int			i = 0;

		memset(nulls, 0, sizeof(nulls));
		ds->name[sizeof(ds->name) - 1] = '\0';
		ds->error[sizeof(ds->error) - 1] = '\0';
		values[i++] = Int32GetDatum(ds->ordinal);
		values[i++] = CStringGetTextDatum(ds->alive ? "serving" : "lost");
		values[i++] = CStringGetTextDatum(ds->name);
		values[i++] = Int64GetDatum((int64) ds->memory_budget);
		values[i++] = Int64GetDatum((int64) ds->memory_in_use);
		values[i++] = Int64GetDatum((int64) ds->datasets);
		values[i++] = Int64GetDatum((int64) ds->ivfpq_objects);
		values[i++] = Int64GetDatum((int64) ds->calls);
		if (ds->error[0])
			values[i++] = CStringGetTextDatum(ds->error);
		else
			nulls[i++] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
