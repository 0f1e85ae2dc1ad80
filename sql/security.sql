-- Security: what an ordinary user may and may not do (docs/RELIABILITY.md, "Security").
--   * the batch functions of every access method refuse rows of tables the caller cannot SELECT
--     (and tables under row level security);
--   * the worker's settings cannot be changed by ordinary users;
--   * the statistics views show counters and the devices, nothing of any database's objects;
--   * the extension's SQL-language functions resolve nothing through the caller's search_path;
--   * the test and maintenance entry points are not theirs.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
SELECT setseed(0.7);

CREATE TABLE sec (id int PRIMARY KEY, v vector(4), w text);
INSERT INTO sec SELECT i, ARRAY[i % 7, i % 11, i % 13, i % 17]::vector, 'w' || (i % 50)
FROM generate_series(1, 300) i;
CREATE INDEX sec_flat ON sec USING vs_flat (v);
CREATE INDEX sec_ivfpq ON sec USING vs_ivfpq (v) WITH (lists = 4, m = 2);
CREATE INDEX sec_graph ON sec USING vs_graph (v) WITH (degree = 8);
CREATE INDEX sec_lc ON sec USING vs_lc (v);
CREATE INDEX sec_sss ON sec USING vs_sss (v);
CREATE INDEX sec_lc_text ON sec USING vs_lc (w);
CREATE INDEX sec_sss_text ON sec USING vs_sss (w);
CREATE ROLE regress_vsearch_sec;

-- ---- batch functions: no SELECT, no rows --------------------------------------------------
SET ROLE regress_vsearch_sec;
SELECT * FROM vsearch_knn_batch('sec_flat', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_range_batch('sec_flat', ARRAY['[1,1,1,1]'::vector], 5);
SELECT * FROM vsearch_knn_batch('sec_ivfpq', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_range_batch('sec_ivfpq', ARRAY['[1,1,1,1]'::vector], 5);
SELECT * FROM vsearch_knn_batch('sec_graph', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_knn_batch('sec_lc', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_range_batch('sec_sss', ARRAY['[1,1,1,1]'::vector], 5);
SELECT * FROM vsearch_knn_batch('sec_lc_text', ARRAY['w1'], 3);
SELECT * FROM vsearch_range_batch('sec_sss_text', ARRAY['w1'], 1);
SELECT * FROM vsearch_knn_batch_sharded('sec', 'v', ARRAY['[1,1,1,1]'::vector], 3);
SELECT count(*) FROM vsearch_knn_sharded(NULL::sec, 'v', '[1,1,1,1]', 3);
-- a grant of some columns is not a grant of the table: the distances come from v
RESET ROLE;
GRANT SELECT (id, w) ON sec TO regress_vsearch_sec;
SET ROLE regress_vsearch_sec;
SELECT * FROM vsearch_knn_batch('sec_flat', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_knn_batch('sec_lc_text', ARRAY['w1'], 3);
RESET ROLE;
GRANT SELECT ON sec TO regress_vsearch_sec;
SET ROLE regress_vsearch_sec;
SELECT count(*) FROM vsearch_knn_batch('sec_flat', ARRAY['[1,1,1,1]'::vector], 3);
SELECT count(*) FROM vsearch_knn_batch('sec_graph', ARRAY['[1,1,1,1]'::vector], 3);
SELECT count(*) FROM vsearch_range_batch('sec_sss_text', ARRAY['w1'], 0);
-- row level security: refused rather than filtered
RESET ROLE;
ALTER TABLE sec ENABLE ROW LEVEL SECURITY;
CREATE POLICY sec_few ON sec USING (id < 10);
SET ROLE regress_vsearch_sec;
SELECT * FROM vsearch_knn_batch('sec_ivfpq', ARRAY['[1,1,1,1]'::vector], 3);
SELECT * FROM vsearch_range_batch('sec_lc_text', ARRAY['w1'], 1);
RESET ROLE;
DROP POLICY sec_few ON sec;
ALTER TABLE sec DISABLE ROW LEVEL SECURITY;

-- ---- settings: the worker's are the administrator's -----------------------------------------
SELECT name, context FROM pg_settings WHERE name LIKE 'vsearch.%' ORDER BY name;
SET ROLE regress_vsearch_sec;
SET vsearch.batch_max = 5;
SET vsearch.batch_wait = 0;
SET vsearch.worker_device = 'cpu';
SET vsearch.gpu_memory_limit = 1;
SET vsearch.gpus = '0';
SET vsearch.gpu_placement = 'shard';
SET vsearch.shard_min_size = 1;
SET vsearch.debug_fail_device = 0;
SET vsearch.debug_engine_fault = 'error';
SET vsearch.max_request_work = 0;
SET vsearch.worker_lanes = 2;
SELECT set_config('vsearch.batch_max', '5', false);
ALTER SYSTEM SET vsearch.batch_max = 5;
ALTER ROLE regress_vsearch_sec SET vsearch.batch_max = 5;
SET vsearch.cpu_threads = 1;   -- a backend's own threads: at connection start only
-- the user's own searches: allowed
SET vsearch.device = 'cpu';
SET vsearch.worker_timeout = '1s';
RESET vsearch.device;
RESET vsearch.worker_timeout;
-- the maintenance and test entry points
SELECT vsearch_stat_reset();
SELECT vsearch_worker_probe('sec_flat', '[1,1,1,1]');
SELECT vsearch_index_check('sec_flat');
RESET ROLE;

-- ---- statistics: counters, not objects ------------------------------------------------------
-- every column of the three views is a number, except these names of states, devices and stages
SELECT c.table_name, c.column_name FROM information_schema.columns c
WHERE c.table_name IN ('vsearch_stat', 'vsearch_stat_devices', 'vsearch_stat_stages')
  AND c.data_type NOT IN ('integer', 'bigint', 'double precision')
ORDER BY 1, 2;
-- after searches of a table named secret (through the worker when it serves), an ordinary
-- user's view of them names nothing of it
CREATE TABLE secret_tbl (id int, v vector(4));
INSERT INTO secret_tbl SELECT i, ARRAY[i, 1, 2, 3]::vector FROM generate_series(1, 50) i;
CREATE INDEX secret_idx ON secret_tbl USING vs_flat (v);
SELECT count(*) FROM vsearch_knn_batch('secret_idx', ARRAY['[1,1,1,1]'::vector], 3);
SET ROLE regress_vsearch_sec;
SELECT count(*) AS rows_naming_it FROM (
	SELECT s::text AS t FROM vsearch_stat s
	UNION ALL SELECT d::text FROM vsearch_stat_devices d
	UNION ALL SELECT g::text FROM vsearch_stat_stages g) x
WHERE t ~* ('secret|sec_|regress|' || current_database());
RESET ROLE;

-- ---- a hostile search_path -------------------------------------------------------------------
-- A schema ahead of pg_catalog whose functions and operators, if ever called, say so.  The
-- extension's SQL-language functions pin search_path, so they answer exactly as without it.
CREATE SCHEMA regress_evil;
CREATE FUNCTION regress_evil.hijacked(name, name) RETURNS boolean LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked = on name'; END$$;
CREATE OPERATOR regress_evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = regress_evil.hijacked);
CREATE FUNCTION regress_evil.hijacked_text(text, text) RETURNS boolean LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked = on text'; END$$;
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.hijacked_text);
CREATE FUNCTION regress_evil.quote_ident(text) RETURNS text LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked quote_ident'; END$$;
CREATE FUNCTION regress_evil.array_to_string(anyarray, text) RETURNS text LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked array_to_string'; END$$;
CREATE FUNCTION regress_evil.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked cardinality'; END$$;
CREATE FUNCTION regress_evil.substr(text, integer) RETURNS text LANGUAGE plpgsql AS
	$$BEGIN RAISE EXCEPTION 'hijacked substr'; END$$;
GRANT USAGE ON SCHEMA regress_evil TO PUBLIC;
CREATE TABLE sec_ref AS
	SELECT (SELECT array_agg(id) FROM vsearch_knn_sharded(NULL::sec, 'v', '[1,2,3,4]', 5)) AS knn,
	       (SELECT array_agg(id ORDER BY query, distance, id)
	          FROM vsearch_knn_batch_sharded('sec', 'v', ARRAY['[1,2,3,4]', '[5,5,5,5]']::vector[], 4)) AS batch,
	       (SELECT count(*) FROM vsearch_range_batch_sharded('sec', 'v', ARRAY['[1,2,3,4]']::vector[], 3)) AS range,
	       vsearch_index_for('sec', 'v', '<->') AS idx;
SET search_path = regress_evil, pg_catalog, public;
SELECT (SELECT array_agg(id) FROM vsearch_knn_sharded(NULL::sec, 'v', '[1,2,3,4]', 5)) = knn AS knn,
       (SELECT array_agg(id ORDER BY query, distance, id)
          FROM vsearch_knn_batch_sharded('sec', 'v', ARRAY['[1,2,3,4]', '[5,5,5,5]']::vector[], 4)) = batch AS batch,
       (SELECT count(*) FROM vsearch_range_batch_sharded('sec', 'v', ARRAY['[1,2,3,4]']::vector[], 3)) = range AS range,
       vsearch_index_for('sec', 'v', '<->') = idx AS idx
FROM sec_ref;
SET ROLE regress_vsearch_sec;
SELECT count(*) FROM vsearch_knn_sharded(NULL::sec, 'v', '[1,2,3,4]', 5);
RESET ROLE;
RESET search_path;
-- every function of the extension in a procedural or SQL language pins its search_path
SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
  AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vsearch'
  JOIN pg_language l ON l.oid = p.prolang
WHERE l.lanname NOT IN ('c', 'internal') ORDER BY 1;

DROP SCHEMA regress_evil CASCADE;
DROP TABLE sec, sec_ref, secret_tbl;
DROP OWNED BY regress_vsearch_sec;
DROP ROLE regress_vsearch_sec;
