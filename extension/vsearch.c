/*
 * vsearch.so: the module's entry point.  The type, operator and index code lives in the other
 * files of extension/; _PG_init registers the settings (the index kinds' too) and, when the
 * library is preloaded, the GPU worker's shared memory and the worker itself (worker_*.c,
 * docs/WORKER.md).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "guc.h"
#include "indexkind.h"
#include "worker_internal.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	vs_guc_init();
	vs_kinds_init();			/* the index kinds' reloptions and settings */
	vs_guc_reserve();
	vs_orderby_init();

	/*
	 * Without shared_preload_libraries there is no worker: every search runs on the CPU in its
	 * backend (vs_worker_* return false).
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;
	vs_worker_shmem_register();
	vs_worker_register();
	vs_worker_client_init();
}
