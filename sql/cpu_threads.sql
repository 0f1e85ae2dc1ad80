-- vsearch.cpu_threads: threads of a backend's CPU engine (0, the default: every CPU), read when
-- the backend first searches, so it is set at connection start (PGOPTIONS, postgresql.conf).
SELECT '[1,2]'::vector AS loads_the_library;
SHOW vsearch.cpu_threads;
SELECT name, setting, context, min_val, max_val FROM pg_settings WHERE name = 'vsearch.cpu_threads';
SET vsearch.cpu_threads = 2;

-- a batch on every CPU of the backend answers as a sequential scan does
CREATE TABLE ct (id int PRIMARY KEY, v vector(8));
INSERT INTO ct
  SELECT i, ARRAY[sin(i), cos(i), sin(i * 0.7), cos(i * 1.3), (i % 17) / 17.0, (i % 5) / 5.0,
                  sin(i * 0.01), 1]::vector
    FROM generate_series(1, 3000) i;
CREATE INDEX ct_flat ON ct USING vs_flat (v vector_l2_ops);
CREATE TABLE ct_q AS SELECT row_number() OVER (ORDER BY id) AS qid, v FROM ct WHERE id % 50 = 0;
SET vsearch.device = cpu;
WITH b AS (
  SELECT b.query, t.id
    FROM vsearch_knn_batch('ct_flat', ARRAY(SELECT v FROM ct_q ORDER BY qid), 7) b
    JOIN ct t ON t.ctid = b.row_ctid),
s AS (
  SELECT q.qid AS query, n.id
    FROM ct_q q CROSS JOIN LATERAL (
      SELECT id FROM ct ORDER BY v <-> q.v, id LIMIT 7) n)
SELECT (SELECT count(*) FROM b) AS batch_rows, (SELECT count(*) FROM s) AS scan_rows,
       (SELECT count(*) FROM (SELECT * FROM b EXCEPT SELECT * FROM s) x) AS differ;
RESET vsearch.device;
DROP TABLE ct, ct_q;

-- vsearch.malloc_trim_threshold: freed memory a process keeps for its next allocations (glibc's
-- trim threshold), so that repeated batch calls do not page-fault on fresh memory; the
-- administrator's (postgresql.conf, reload), 0 to 1GB, 0 = glibc's own policy
SELECT name, setting, unit, context, min_val, max_val
  FROM pg_settings WHERE name = 'vsearch.malloc_trim_threshold';
SET vsearch.malloc_trim_threshold = 0;
ALTER SYSTEM SET vsearch.malloc_trim_threshold = -1;
ALTER SYSTEM SET vsearch.malloc_trim_threshold = '2GB';
-- applied at a reload in a running backend, to 0 and back: searches answer as before
CREATE TABLE mt (id int PRIMARY KEY, v vector(4));
INSERT INTO mt SELECT i, ARRAY[sin(i), cos(i), sin(i * 0.3), 1]::vector FROM generate_series(1, 2000) i;
CREATE INDEX mt_flat ON mt USING vs_flat (v vector_l2_ops);
CREATE TEMP VIEW mt_batch_differs AS
SELECT count(*) AS differ_from_scan FROM (
  SELECT b.query, t.id
    FROM vsearch_knn_batch('mt_flat', ARRAY(SELECT v FROM mt WHERE id <= 300 ORDER BY id), 5) b
    JOIN mt t ON t.ctid = b.row_ctid
  EXCEPT
  SELECT q.id, n.id FROM mt q CROSS JOIN LATERAL (SELECT id FROM mt ORDER BY v <-> q.v, id LIMIT 5) n
   WHERE q.id <= 300) x;
SET vsearch.device = cpu;
ALTER SYSTEM SET vsearch.malloc_trim_threshold = 0;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW vsearch.malloc_trim_threshold;  -- the reload landed before the check
SELECT * FROM mt_batch_differs;
ALTER SYSTEM SET vsearch.malloc_trim_threshold = '16MB';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW vsearch.malloc_trim_threshold;
SELECT * FROM mt_batch_differs;
ALTER SYSTEM RESET vsearch.malloc_trim_threshold;
SELECT pg_reload_conf();
RESET vsearch.device;
DROP VIEW mt_batch_differs;
DROP TABLE mt;
