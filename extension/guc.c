/*
 * vsearch settings.  The defaults and the reasons for them are in docs/WORKER.md.
 */
#include "postgres.h"

#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "utils/guc.h"

#include "guc.h"
#include "search.h"

int			vs_device_mode = VS_DEVICE_AUTO;
int			vs_worker_device = VS_WORKER_DEVICE_GPU;
int			vs_gpu_memory_limit_mb = 0;
int			vs_batch_max = 1024;
int			vs_worker_lanes = 1;
double		vs_batch_wait_ms = 0.0;
int			vs_worker_timeout_ms = 10000;
char	   *vs_gpus = NULL;
int			vs_gpu_placement = VS_PLACE_AUTO;
int			vs_shard_min_size_mb = 1024;
int			vs_debug_fail_device = -1;
char	   *vs_debug_engine_fault = NULL;
int			vs_max_request_work = 1000;
static int	vs_malloc_trim_threshold_mb = 64;

static const struct config_enum_entry device_options[] = {
	{"auto", VS_DEVICE_AUTO, false},
	{"gpu", VS_DEVICE_GPU, false},
	{"cpu", VS_DEVICE_CPU, false},
	{NULL, 0, false}
};

static const struct config_enum_entry worker_device_options[] = {
	{"gpu", VS_WORKER_DEVICE_GPU, false},
	{"cpu", VS_WORKER_DEVICE_CPU, false},
	{"off", VS_WORKER_DEVICE_OFF, false},
	{NULL, 0, false}
};

static const struct config_enum_entry placement_options[] = {
	{"auto", VS_PLACE_AUTO, false},
	{"replicated", VS_PLACE_REPLICATED, false},
	{"sharded", VS_PLACE_SHARDED, false},
	{NULL, 0, false}
};

/*
 * vsearch.malloc_trim_threshold: how much freed memory glibc keeps in this process's heap.  By
 * default glibc gives memory back to the kernel as soon as 128 kB lie free at the top of the heap
 * and serves each block of 128 kB or more with a mapping of its own (thresholds it raises only
 * after it sees a large block freed), so the buffers of a batch call (queries, candidates, the
 * engine's copies: megabytes) come back as fresh pages in the next call, each first touch a page
 * fault.  On virtual machines a fault costs microseconds (10 to 29 us per 4 kB page on the
 * development VM): 20 % of a warm vs_ivfpq batch on Fashion-MNIST (docs/BENCHMARKS.md).  A
 * threshold of N keeps up to N of free heap and serves blocks below N / 2 (at most 32 MB,
 * glibc's largest) from the heap: what glibc itself converges to after freeing a 32 MB block
 * when N is 64 MB.  0 leaves glibc's own policy (a process where it was set goes back to glibc's
 * starting values, 128 kB).
 */
static void
assign_malloc_trim_threshold(int newval, void *extra)
{
#ifdef __GLIBC__
	static bool applied = false;
	int			trim = 128 * 1024;
	int			mmap_threshold = 128 * 1024;

	if (newval <= 0 && !applied)
		return;
	if (newval > 0)
	{
		trim = newval * 1024 * 1024;
		mmap_threshold = Min(trim / 2, 32 * 1024 * 1024);
	}
	/* settings glibc accepts; a refusal leaves its policy as it was */
	(void) mallopt(M_TRIM_THRESHOLD, trim);
	(void) mallopt(M_MMAP_THRESHOLD, mmap_threshold);
	applied = true;
#endif
}

int
vs_parse_gpus(const char *value, int *out, int max)
{
	const char *p = value ? value : "";
	int			n = 0;

	while (*p == ' ')
		p++;
	if (*p == '\0')
		return -1;
	for (;;)
	{
		char	   *end;
		long		v;

		while (*p == ' ')
			p++;
		v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1023 || n >= max)
			return -2;
		out[n++] = (int) v;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == '\0')
			return n;
		if (*p != ',')
			return -2;
		p++;
	}
}

static bool
check_gpus(char **newval, void **extra, GucSource source)
{
	int			devices[VS_MAX_DEVICES];

	if (vs_parse_gpus(*newval, devices, VS_MAX_DEVICES) == -2)
	{
		GUC_check_errdetail("vsearch.gpus must be empty (every visible GPU) or a comma-separated "
							"list of at most %d device numbers, such as '0,1'.",
							VS_MAX_DEVICES);
		return false;
	}
	return true;
}

bool
vs_parse_engine_fault(const char *value, vs_fault *fault, unsigned *ms)
{
	static const struct
	{
		const char *name;
		vs_fault	fault;
		bool		takes_ms;
	}			faults[] = {
		{"oom", VS_FAULT_OUT_OF_MEMORY, false},
		{"error", VS_FAULT_DEVICE_ERROR, false},
		{"hang", VS_FAULT_HANG, true},
		{"slow", VS_FAULT_SLOW, true},
	};
	const char *p = value ? value : "";
	size_t		len = strcspn(p, ":");

	*fault = VS_FAULT_NONE;
	*ms = 0;
	if (*p == '\0')
		return true;
	for (int i = 0; i < lengthof(faults); i++)
	{
		char	   *end;
		long		v;

		if (strlen(faults[i].name) != len || strncmp(p, faults[i].name, len) != 0)
			continue;
		*fault = faults[i].fault;
		if (!faults[i].takes_ms)
			return p[len] == '\0';
		if (p[len] != ':')
			return false;
		v = strtol(p + len + 1, &end, 10);
		if (end == p + len + 1 || *end != '\0' || v < 1 || v > 600000)
			return false;
		*ms = (unsigned) v;
		return true;
	}
	return false;
}

static bool
check_engine_fault(char **newval, void **extra, GucSource source)
{
	vs_fault	fault;
	unsigned	ms;

	if (!vs_parse_engine_fault(*newval, &fault, &ms))
	{
		GUC_check_errdetail("vsearch.debug_engine_fault must be empty, 'oom', 'error', "
							"'hang:MS' or 'slow:MS' with MS from 1 to 600000.");
		return false;
	}
	return true;
}

const char *
vs_worker_device_name(int value)
{
	for (const struct config_enum_entry *e = worker_device_options; e->name; e++)
		if (e->val == value)
			return e->name;
	return "?";
}

void
vs_guc_init(void)
{
	DefineCustomEnumVariable("vsearch.device",
							 "Where index searches of this session run.",
							 "auto: the GPU worker when it can serve, else the CPU in this backend; "
							 "gpu: the GPU worker, or an error; cpu: always the CPU in this backend.",
							 &vs_device_mode,
							 VS_DEVICE_AUTO,
							 device_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("vsearch.worker_device",
							 "What the vsearch background worker computes on.",
							 "gpu: a CUDA device (without one the worker serves nothing and searches "
							 "run in their backends); cpu: the engine's CPU backend; off: the worker "
							 "serves nothing.",
							 &vs_worker_device,
							 VS_WORKER_DEVICE_GPU,
							 worker_device_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.gpu_memory_limit",
							"Memory the worker's index cache and search scratch may hold on the device.",
							"0 means 90% of the device memory free when the worker starts.  "
							"Least recently used indexes are evicted to stay under it.",
							&vs_gpu_memory_limit_mb,
							0,
							0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("vsearch.gpus",
							   "The GPUs the vsearch worker uses, one engine context each.",
							   "Empty: every GPU the worker sees.  A list such as '0,1' names device "
							   "numbers (a number twice gives two contexts on one device).  With "
							   "vsearch.worker_device = cpu the list's length is the number of CPU "
							   "engine contexts (the test twin of several GPUs).",
							   &vs_gpus,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_gpus, NULL, NULL);

	DefineCustomEnumVariable("vsearch.gpu_placement",
							 "How the worker places an index over several devices.",
							 "replicated: every device holds the whole index and batches are "
							 "spread over them; sharded: each device holds a slice, every query "
							 "visits every slice and the answers are merged exactly; auto: sharded "
							 "for indexes of at least vsearch.shard_min_size or more than half of a "
							 "device's budget, else replicated.",
							 &vs_gpu_placement,
							 VS_PLACE_AUTO,
							 placement_options,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.shard_min_size",
							"Vectors of an index at which vsearch.gpu_placement = auto shards it.",
							NULL,
							&vs_shard_min_size_mb,
							1024,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.debug_fail_device",
							"Test aid: the worker takes this device of its context out as a device "
							"error would (-1: none).",
							"Counts the worker's devices in vsearch.gpus order from 0.",
							&vs_debug_fail_device,
							-1,
							-1, 1023,
							PGC_SIGHUP,
							GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);

	DefineCustomStringVariable("vsearch.debug_engine_fault",
							   "Test aid: a fault every engine call of the worker meets ('': none).",
							   "'oom': out of device memory; 'error': a kernel or copy error; "
							   "'hang:MS': the call blocks MS milliseconds without progress, then "
							   "fails as a device error; 'slow:MS': the call first waits MS "
							   "milliseconds (cancellable).  Backends' own engines are not affected.",
							   &vs_debug_engine_fault,
							   "",
							   PGC_SIGHUP,
							   GUC_NOT_IN_SAMPLE,
							   check_engine_fault, NULL, NULL);

	DefineCustomIntVariable("vsearch.max_request_work",
							"Most work, in millions of query x index-entry pairs, of one worker "
							"request of a session that is not a superuser's (0: no limit).",
							"A larger batch goes to the worker as several requests in turn, so other "
							"sessions' searches are served between them.",
							&vs_max_request_work,
							1000,
							0, INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.malloc_trim_threshold",
							"Freed memory a process keeps for its next allocations instead of "
							"giving it back to the kernel (glibc's trim threshold).",
							"Blocks below half of it (at most 32 MB) come from the kept memory, so "
							"repeated batch calls do not page-fault on fresh memory each time.  "
							"0 leaves glibc's own policy.",
							&vs_malloc_trim_threshold_mb,
							64,
							0, 1024,
							PGC_SIGHUP,
							GUC_UNIT_MB,
							NULL, assign_malloc_trim_threshold, NULL);

	DefineCustomIntVariable("vsearch.batch_max",
							"Most queries the worker combines into one engine call.",
							NULL,
							&vs_batch_max,
							1024,
							1, 1 << 20,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.worker_lanes",
							"Engine calls the worker keeps in flight at once.",
							"Each lane is a thread of the worker that runs one group's search while "
							"the worker gathers and answers the next requests; 1 runs every call "
							"on the worker's own thread.  A change restarts the engine.",
							&vs_worker_lanes,
							1,
							1, 8,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomRealVariable("vsearch.batch_wait",
							 "How long the worker may wait for more requests to fill a batch.",
							 "Accepts microseconds, e.g. '100us'.  0 sends whatever is waiting at once.",
							 &vs_batch_wait_ms,
							 0.0,
							 0.0, 100.0,
							 PGC_SIGHUP,
							 GUC_UNIT_MS,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.cpu_threads",
							"Threads of a backend's CPU engine for searches and batch functions.",
							"0 (the default) uses every CPU of the machine: a batch function's "
							"queries are split over them; a single query runs on one thread "
							"whatever the setting.  "
							"Read when the backend first searches, so it is set at connection start "
							"(PGOPTIONS) or in postgresql.conf.",
							&vs_search_cpu_threads,
							0,
							0, 1024,
							PGC_BACKEND,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("vsearch.worker_timeout",
							"How long a backend waits for a worker that shows no progress before "
							"searching on its own CPU.",
							NULL,
							&vs_worker_timeout_ms,
							10000,
							1, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* No more vsearch.* settings will be defined (after vs_guc_init and the index kinds'). */
void
vs_guc_reserve(void)
{
#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("vsearch");
#else
	EmitWarningsOnPlaceholders("vsearch");
#endif
}
