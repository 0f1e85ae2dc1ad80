/*
 * vsearch settings (GUCs).  docs/WORKER.md explains each one and its default.
 */
#ifndef VSEARCH_GUC_H
#define VSEARCH_GUC_H

#include "vsearch/engine.h"

/* vsearch.device: where this session's index searches run. */
typedef enum VsDeviceMode
{
	VS_DEVICE_AUTO = 0,			/* the worker when it serves, else the CPU in this backend */
	VS_DEVICE_GPU = 1,			/* the worker or an ERROR (never the in-backend CPU path) */
	VS_DEVICE_CPU = 2			/* always the CPU in this backend */
} VsDeviceMode;

/* vsearch.worker_device: what the background worker computes on. */
typedef enum VsWorkerDevice
{
	VS_WORKER_DEVICE_GPU = 0,	/* a CUDA context; no GPU -> the worker serves nothing */
	VS_WORKER_DEVICE_CPU = 1,	/* the engine's CPU backend (machines without a GPU, tests) */
	VS_WORKER_DEVICE_OFF = 2	/* the worker idles; every search runs in its backend */
} VsWorkerDevice;

/* vsearch.gpu_placement: where the worker puts an index over several devices. */
typedef enum VsPlacementSetting
{
	VS_PLACE_AUTO = 0,			/* sharded when large (vsearch.shard_min_size), else replicated */
	VS_PLACE_REPLICATED = 1,
	VS_PLACE_SHARDED = 2
} VsPlacementSetting;

/* Most devices the worker's engine context may span (vsearch.gpus). */
#define VS_MAX_DEVICES			16

extern int	vs_device_mode;
extern int	vs_worker_device;
extern int	vs_gpu_memory_limit_mb;
extern int	vs_batch_max;
extern int	vs_worker_lanes;
extern double vs_batch_wait_ms;
extern int	vs_worker_timeout_ms;
extern char *vs_gpus;
extern int	vs_gpu_placement;
extern int	vs_shard_min_size_mb;
extern int	vs_debug_fail_device;
extern char *vs_debug_engine_fault;
extern int	vs_max_request_work;

/*
 * vsearch.debug_engine_fault as the engine's fault and its milliseconds (VS_FAULT_NONE for '');
 * false when the value is malformed.
 */
extern bool vs_parse_engine_fault(const char *value, vs_fault *fault, unsigned *ms);

/*
 * The device ordinals of vsearch.gpus (at most max); -1 when the setting is empty (every visible
 * GPU).
 */
extern int	vs_parse_gpus(const char *value, int *out, int max);

/*
 * Defines the vsearch.* settings of the search layer and the worker; called from _PG_init in every
 * process that loads vsearch.  The index kinds define their own (indexkind.h, init); then
 * vs_guc_reserve() reserves the prefix.
 */
extern void vs_guc_init(void);
extern void vs_guc_reserve(void);

/* Name of a vsearch.worker_device value ("gpu", "cpu", "off"). */
extern const char *vs_worker_device_name(int value);

#endif							/* VSEARCH_GUC_H */
