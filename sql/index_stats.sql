-- Index statistics: every vsearch index scan counts in pg_stat_user_indexes as btree's do
-- (idx_scan per scan started, idx_tup_read per row returned), and a batch function call counts as
-- one scan of its index whose answer rows are the tuples read.  Monitoring that looks for unused
-- indexes must not see a vsearch index that answers queries as unused.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

CREATE TABLE st (id int PRIMARY KEY, v vector(4), w text);
INSERT INTO st
  SELECT i, ARRAY[i % 7, i % 11, i % 13, i % 5]::real[]::vector, 'w' || (i % 17)
  FROM generate_series(1, 300) i;
CREATE INDEX st_flat ON st USING vs_flat (v);
CREATE INDEX st_ivfpq ON st USING vs_ivfpq (v) WITH (lists = 4, m = 2);
CREATE INDEX st_graph ON st USING vs_graph (v);
CREATE INDEX st_lc ON st USING vs_lc (w);
CREATE INDEX st_sss ON st USING vs_sss (v vector_l1_ops);
VACUUM ANALYZE st;

CREATE FUNCTION pg_temp.stats() RETURNS TABLE (index name, idx_scan bigint, idx_tup_read bigint)
LANGUAGE sql AS $$
  SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes
  WHERE relname = 'st' AND indexrelname <> 'st_pkey' ORDER BY 1
$$;
SELECT pg_stat_force_next_flush();
SELECT * FROM pg_temp.stats();

SET enable_seqscan = off;
-- an ordered scan of each vector index (the others are dropped from the plans one at a time)
BEGIN;
DROP INDEX st_ivfpq, st_graph;
SELECT count(*) FROM (SELECT id FROM st ORDER BY v <-> '[1,2,3,4]' LIMIT 5) s;
ROLLBACK;
BEGIN;
DROP INDEX st_flat, st_graph;
SELECT count(*) FROM (SELECT id FROM st ORDER BY v <-> '[1,2,3,4]' LIMIT 5) s;
ROLLBACK;
BEGIN;
DROP INDEX st_flat, st_ivfpq;
SELECT count(*) FROM (SELECT id FROM st ORDER BY v <-> '[1,2,3,4]' LIMIT 5) s;
ROLLBACK;
-- a range qual through vs_flat (twice: two scans), vs_lc on text and vs_sss under L1
BEGIN;
DROP INDEX st_ivfpq, st_graph;
SELECT count(*) FROM st WHERE v <<->> sphere('[1,2,3,4]'::vector, 3);
SELECT count(*) FROM st WHERE v <<->> sphere('[1,2,3,4]'::vector, 3);
ROLLBACK;
SELECT count(*) FROM st WHERE w <<~>> sphere('w3'::text, 1);
SELECT count(*) FROM st WHERE v <<+>> sphere('[1,2,3,4]'::vector, 4);
RESET enable_seqscan;
-- batch functions: two queries, one call each
SELECT count(*) FROM vsearch_knn_batch('st_flat', ARRAY['[1,2,3,4]', '[0,0,0,0]']::vector[], 3);
SELECT count(*) FROM vsearch_range_batch('st_graph', ARRAY['[1,2,3,4]', '[0,0,0,0]']::vector[], 2);

SELECT pg_stat_force_next_flush();
SELECT * FROM pg_temp.stats();

DROP TABLE st;
