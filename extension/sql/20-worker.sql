
-- =============================================================================================
-- The GPU worker (extension/worker*.c, docs/WORKER.md)
-- =============================================================================================

CREATE FUNCTION vsearch_stat_internal(
	OUT worker_pid integer,
	OUT worker_state text,
	OUT device text,
	OUT requests bigint,
	OUT batches bigint,
	OUT mean_batch_size double precision,
	OUT mean_wait_us double precision,
	OUT gpu_memory_in_use bigint,
	OUT cached_indexes integer,
	OUT cache_bytes bigint,
	OUT cpu_fallbacks bigint,
	OUT errors bigint,
	OUT index_loads bigint,
	OUT index_refreshes bigint,
	OUT evictions bigint,
	OUT worker_starts bigint,
	OUT compressed_loads bigint)
	RETURNS record
	AS 'MODULE_PATHNAME', 'vsearch_stat' LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- One row: the worker's state and the cluster-wide counters since the last reset.
--   requests         searches the worker answered
--   batches          engine calls it made for them (one per index and metric per batch)
--   mean_batch_size  queries per engine call
--   mean_wait_us     mean time from a backend's submission to its complete answer
--   gpu_memory_in_use  device bytes the engine holds (cached indexes and scratch; 0 on the CPU)
--   cpu_fallbacks    searches answered on a backend's CPU because the worker could not
--   errors           requests the worker failed (each also counts as a fallback or an ERROR)
--   compressed_loads index_loads of vs_graph indexes in the compressed mode (larger than
--                    vsearch.gpu_memory_limit: PQ codes on the GPU, the rest in host memory)
CREATE VIEW vsearch_stat AS SELECT * FROM vsearch_stat_internal();
GRANT SELECT ON vsearch_stat TO PUBLIC;

CREATE FUNCTION vsearch_stat_devices_internal(
	OUT device integer,
	OUT state text,
	OUT name text,
	OUT memory_budget bigint,
	OUT memory_in_use bigint,
	OUT index_copies bigint,
	OUT ivfpq_indexes bigint,
	OUT engine_calls bigint,
	OUT error text)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'vsearch_stat_devices' LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- One row per device of the worker's engine context (vsearch.gpus; docs/WORKER.md, "Several
-- GPUs"); vsearch_stat keeps one cluster-wide row.
--   state          serving, or lost (after a device error; error says which)
--   memory_budget  device bytes the engine may hold there (vsearch.gpu_memory_limit; 0 on the CPU)
--   index_copies   vs_flat indexes with rows there (a replica or a shard each)
--   ivfpq_indexes  vs_ivfpq indexes there (each lives whole on one device)
--   engine_calls   engine calls it ran
CREATE VIEW vsearch_stat_devices AS SELECT * FROM vsearch_stat_devices_internal();
GRANT SELECT ON vsearch_stat_devices TO PUBLIC;

CREATE FUNCTION vsearch_stat_stages_internal(
	OUT stage text,
	OUT requests bigint,
	OUT total_us double precision,
	OUT mean_us double precision)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'vsearch_stat_stages' LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- Where a served search's time goes, one row per stage in order, over the searches the worker
-- answered since the last reset (clock stamps of the backend and the worker; docs/WORKER.md,
-- "Where a query's time goes"):
--   submit   the backend writes the request into its segment and submits it
--   queue    until the worker takes it (the worker is busy or asleep)
--   prepare  until its engine call begins (grouping, the cached index copy: loads and refreshes)
--   engine   the engine call that answered it, with its group
--   answer   until the answer is complete in the segment
--   wakeup   until the backend has woken and copied it
-- The stages add up to vsearch_stat.mean_wait_us plus the submit stage; the rest of a
-- statement's time is the backend's own (executor, heap, protocol).
CREATE VIEW vsearch_stat_stages AS SELECT * FROM vsearch_stat_stages_internal();
GRANT SELECT ON vsearch_stat_stages TO PUBLIC;

CREATE FUNCTION vsearch_stat_reset() RETURNS void
	AS 'MODULE_PATHNAME', 'vsearch_stat_reset' LANGUAGE C VOLATILE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION vsearch_stat_reset() FROM PUBLIC;

-- Test entry point: one kNN request (k = 1) for an index, sent to the worker as it is but for the
-- index kind id and the kind's parameter block given here (NULL: the index's own kind, zeroes)
-- and, when given, header_bytes written over the request's header at byte header_offset before it
-- is submitted (within the fields the backend writes; the layout is VsRequest in
-- extension/worker_internal.h).  Returns 'answered' or 'not answered' (refused or failed: the
-- reason goes to the log, and with vsearch.device = gpu it is an ERROR).  Superuser only.
CREATE FUNCTION vsearch_worker_probe(index regclass, query vector, kind integer DEFAULT NULL,
									 params bytea DEFAULT NULL, header_offset integer DEFAULT NULL,
									 header_bytes bytea DEFAULT NULL)
	RETURNS text
	AS 'MODULE_PATHNAME', 'vsearch_worker_probe' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION vsearch_worker_probe(regclass, vector, integer, bytea, integer, bytea)
	FROM PUBLIC;
