-- GPU worker: the vsearch_stat view and the vsearch.* settings.  Runs with and without
-- shared_preload_libraries, so nothing here may depend on whether a worker runs.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- the view (this also loads the library, which defines the settings)
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'vsearch_stat'::regclass AND attnum > 0 ORDER BY attnum;
SELECT count(*) AS rows,
       bool_and(requests >= 0 AND batches >= 0 AND mean_batch_size >= 0 AND mean_wait_us >= 0
                AND gpu_memory_in_use >= 0 AND cached_indexes >= 0 AND cache_bytes >= 0
                AND cpu_fallbacks >= 0 AND errors >= 0 AND index_loads >= 0
                AND index_refreshes >= 0 AND evictions >= 0 AND worker_starts >= 0) AS sane,
       bool_and(worker_state IN ('not loaded', 'stopped', 'starting', 'serving', 'unavailable',
                                 'disabled')) AS known_state,
       bool_and(device IS NOT NULL AND device <> '') AS has_device
  FROM vsearch_stat;

-- vsearch.device: per session
SHOW vsearch.device;
SET vsearch.device = cpu;
SHOW vsearch.device;
SET vsearch.device = gpu;
SHOW vsearch.device;
SET vsearch.device = 'GPU';
SHOW vsearch.device;
SET vsearch.device = tpu;
RESET vsearch.device;
SHOW vsearch.device;

-- vsearch.worker_timeout: per session, milliseconds
SHOW vsearch.worker_timeout;
SET vsearch.worker_timeout = '2s';
SHOW vsearch.worker_timeout;
SET vsearch.worker_timeout = 250;
SHOW vsearch.worker_timeout;
SET vsearch.worker_timeout = 0;
RESET vsearch.worker_timeout;

-- server-wide settings: shown, not settable in a session
SHOW vsearch.worker_device;
SHOW vsearch.gpu_memory_limit;
SHOW vsearch.batch_max;
SHOW vsearch.batch_wait;
SET vsearch.worker_device = cpu;
SET vsearch.gpu_memory_limit = '1GB';
SET vsearch.batch_max = 16;
SET vsearch.batch_wait = '50us';
SELECT name, setting, unit, context, vartype, min_val, max_val, enumvals
  FROM pg_settings
 WHERE name IN ('vsearch.device', 'vsearch.worker_device', 'vsearch.gpu_memory_limit',
                'vsearch.batch_max', 'vsearch.batch_wait', 'vsearch.worker_timeout')
 ORDER BY name;

-- several devices (docs/WORKER.md, "Several GPUs"): a bad device list is refused
SELECT name, setting, unit, context, vartype, min_val, max_val, enumvals
  FROM pg_settings
 WHERE name IN ('vsearch.gpus', 'vsearch.gpu_placement', 'vsearch.shard_min_size')
 ORDER BY name;
ALTER SYSTEM SET vsearch.gpus = '0,x';
ALTER SYSTEM SET vsearch.gpus = '-1';
ALTER SYSTEM SET vsearch.gpus = '0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16';
ALTER SYSTEM SET vsearch.gpu_placement = 'striped';
-- the engine's fault points (a test aid, docs/WORKER.md): malformed values are refused
SELECT name, setting, context, vartype FROM pg_settings
 WHERE name IN ('vsearch.debug_engine_fault', 'vsearch.max_request_work') ORDER BY name;
ALTER SYSTEM SET vsearch.debug_engine_fault = 'hang';
ALTER SYSTEM SET vsearch.debug_engine_fault = 'slow:0';
ALTER SYSTEM SET vsearch.debug_engine_fault = 'oom:5';
ALTER SYSTEM SET vsearch.debug_engine_fault = 'hang:600001';
ALTER SYSTEM SET vsearch.debug_engine_fault = 'melt';
ALTER SYSTEM SET vsearch.max_request_work = -1;
-- one row per device of the worker's context (none here: no GPU, or no worker)
SELECT * FROM vsearch_stat_devices WHERE false;

-- an unknown vsearch.* name is an error, not a placeholder
SET vsearch.no_such_setting = 1;

-- anyone may read the view; resetting the counters is for superusers (works in both modes)
SELECT vsearch_stat_reset();
SELECT requests = 0 AND batches = 0 AND cpu_fallbacks = 0 AND errors = 0 AS zeroed FROM vsearch_stat;
CREATE ROLE vsearch_worker_nobody;
SET ROLE vsearch_worker_nobody;
SELECT vsearch_stat_reset();
SELECT count(*) FROM vsearch_stat;
-- the worker's test entry point is for superusers too
SELECT vsearch_worker_probe(0, '[1]');
RESET ROLE;
DROP ROLE vsearch_worker_nobody;
