-- Batch searches: vsearch_knn_batch and vsearch_range_batch against per-query SQL
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Both result sets as multisets: rows of a not in b, and of b not in a.
CREATE FUNCTION pg_temp.same(a text, b text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE n bigint; missing bigint; extra bigint;
BEGIN
  EXECUTE 'CREATE TEMP TABLE cmp_a AS ' || a;
  EXECUTE 'CREATE TEMP TABLE cmp_b AS ' || b;
  SELECT count(*) INTO n FROM cmp_a;
  SELECT count(*) INTO missing FROM (SELECT * FROM cmp_a EXCEPT ALL SELECT * FROM cmp_b) d;
  SELECT count(*) INTO extra FROM (SELECT * FROM cmp_b EXCEPT ALL SELECT * FROM cmp_a) d;
  DROP TABLE cmp_a, cmp_b;
  RETURN format('%s rows, %s missing, %s extra', n, missing, extra);
END $$;

SELECT setseed(0.3);
CREATE TABLE b3 (id int PRIMARY KEY, v vector(3), note text);
INSERT INTO b3 SELECT i, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector, 'x'
  FROM generate_series(1, 2000) i;
INSERT INTO b3 VALUES (2001, NULL, 'null');
CREATE TABLE b64 (id int PRIMARY KEY, v vector(64));
INSERT INTO b64 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 1000) i, generate_series(1, 64) j GROUP BY i;
-- 6 queries each; position in the array = qid
CREATE TABLE bq (qid int, dim int, v vector);
INSERT INTO bq SELECT i, 3, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector
  FROM generate_series(1, 6) i;
INSERT INTO bq SELECT i, 64, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 6) i, generate_series(1, 64) j GROUP BY i;
CREATE INDEX b3_l2 ON b3 USING vs_flat (v vector_l2_ops);
CREATE INDEX b3_ip ON b3 USING vs_flat (v vector_ip_ops);
CREATE INDEX b3_cosine ON b3 USING vs_flat (v vector_cosine_ops);
CREATE INDEX b3_l1 ON b3 USING vs_flat (v vector_l1_ops);
CREATE INDEX b64_l2 ON b64 USING vs_flat (v vector_l2_ops);
CREATE INDEX b64_ip ON b64 USING vs_flat (v vector_ip_ops);
CREATE INDEX b64_cosine ON b64 USING vs_flat (v vector_cosine_ops);
CREATE INDEX b64_l1 ON b64 USING vs_flat (v vector_l1_ops);
ANALYZE b3, b64, bq;

-- The documented join back to the table
SELECT b.query, t.id, round(b.distance::numeric, 6) AS distance
  FROM vsearch_knn_batch('b3_l2', ARRAY(SELECT v FROM bq WHERE dim = 3 ORDER BY qid), 3) b
  JOIN b3 t ON t.ctid = b.row_ctid ORDER BY b.query, b.distance;

-- kNN: the same rows, ranks and distances as ORDER BY ... LIMIT k per query (seq scan)
SET enable_indexscan = off;
SELECT dim, metric, k, pg_temp.same(
  format('SELECT q.qid, x.rank, x.id, x.d FROM bq q, LATERAL (
            SELECT id, d, row_number() OVER (ORDER BY d, id) AS rank FROM (
              SELECT id, v %s q.v AS d FROM b%s ORDER BY v %s q.v LIMIT %s) s) x
          WHERE q.dim = %s', op, dim, op, k, dim),
  format('SELECT b.query, row_number() OVER (PARTITION BY b.query ORDER BY b.distance, t.id),
            t.id, b.distance FROM vsearch_knn_batch(''b%s_%s'',
              ARRAY(SELECT v FROM bq WHERE dim = %s ORDER BY qid), %s) b
          JOIN b%s t ON t.ctid = b.row_ctid', dim, metric, dim, k, dim))
FROM (VALUES ('l2', '<->'), ('ip', '<#>'), ('cosine', '<=>'), ('l1', '<+>')) m(metric, op),
     unnest(ARRAY[3, 64]) dim, unnest(ARRAY[1, 10, 100]) k ORDER BY dim, metric, k;
RESET enable_indexscan;

-- Range: the same rows and distances as the <<op>> operator per query
SET enable_bitmapscan = off;
SET enable_indexscan = off;
SELECT dim, metric, radius, pg_temp.same(
  format('SELECT q.qid, t.id, t.v %s q.v AS d FROM bq q JOIN b%s t ON t.v %s sphere(q.v, %s)
          WHERE q.dim = %s', op, dim, rop, radius, dim),
  format('SELECT b.query, t.id, b.distance FROM vsearch_range_batch(''b%s_%s'',
            ARRAY(SELECT v FROM bq WHERE dim = %s ORDER BY qid), %s) b
          JOIN b%s t ON t.ctid = b.row_ctid', dim, metric, dim, radius, dim))
FROM (VALUES (3, 'l2', '<->', '<<->>', 0.2), (3, 'ip', '<#>', '<<#>>', -0.1),
             (3, 'cosine', '<=>', '<<=>>', 0.05), (3, 'l1', '<+>', '<<+>>', 0.3),
             (64, 'l2', '<->', '<<->>', 3), (64, 'ip', '<#>', '<<#>>', -0.5),
             (64, 'cosine', '<=>', '<<=>>', 0.85), (64, 'l1', '<+>', '<<+>>', 19))
  AS c(dim, metric, op, rop, radius) ORDER BY dim, metric;
-- checked in chunks of 1024 (query, row) pairs: several queries per chunk, and a query alone
SET work_mem = '64kB';
SELECT radius, pg_temp.same(
  format('SELECT q.qid, t.id, t.v <-> q.v AS d FROM bq q JOIN b3 t ON t.v <<->> sphere(q.v, %s)
          WHERE q.dim = 3', radius),
  format('SELECT b.query, t.id, b.distance FROM vsearch_range_batch(''b3_l2'',
            ARRAY(SELECT v FROM bq WHERE dim = 3 ORDER BY qid), %s) b
          JOIN b3 t ON t.ctid = b.row_ctid', radius))
FROM unnest(ARRAY[0.35, 0.8]) radius;
RESET work_mem;
RESET enable_bitmapscan;
RESET enable_indexscan;
-- range results come nearest first within each query
SELECT bool_and(ok), count(*) FROM (SELECT distance >= lag(distance, 1, '-Infinity') OVER w AS ok
  FROM vsearch_range_batch('b3_l2', ARRAY(SELECT v FROM bq WHERE dim = 3), 0.3) WITH ORDINALITY
    AS b(query, row_ctid, distance, n)
  WINDOW w AS (PARTITION BY query ORDER BY n)) s;

-- Dead and updated rows: only visible rows, k of them, with their current ctid
BEGIN;
DELETE FROM b3 WHERE id IN (SELECT id FROM b3 ORDER BY v <-> '[0,0,0]' LIMIT 5);
UPDATE b3 SET note = 'hot' WHERE id IN (SELECT id FROM b3 ORDER BY v <-> '[0,0,0]' LIMIT 10);
SELECT count(*), count(t.id), count(*) FILTER (WHERE t.note = 'hot') AS updated
  FROM vsearch_knn_batch('b3_l2', ARRAY['[0,0,0]'::vector], 10) b
  LEFT JOIN b3 t ON t.ctid = b.row_ctid;
SELECT pg_temp.same(
  'SELECT id FROM b3 ORDER BY v <-> ''[0,0,0]'' LIMIT 10',
  'SELECT t.id FROM vsearch_knn_batch(''b3_l2'', ARRAY[''[0,0,0]''::vector], 10) b
     JOIN b3 t ON t.ctid = b.row_ctid');
ROLLBACK;

-- k beyond the table returns every (non-NULL) row; an empty array returns nothing
SELECT count(*), count(DISTINCT row_ctid) FROM vsearch_knn_batch('b3_ip', ARRAY['[1,1,1]'::vector], 1000000);
SELECT count(*) FROM vsearch_knn_batch('b3_ip', ARRAY['[1,1,1]'::vector, '[0,1,0]'], 2147483647);
SELECT count(*) FROM vsearch_knn_batch('b3_ip', '{}'::vector[], 5);
SELECT count(*) FROM vsearch_range_batch('b3_l2', '{}'::vector[], 0.5);
SELECT count(*) FROM vsearch_knn_batch(NULL, ARRAY['[1,1,1]'::vector], 5);
-- an empty index
CREATE TABLE bempty (v vector(3));
CREATE INDEX bempty_idx ON bempty USING vs_flat (v);
SELECT count(*) FROM vsearch_knn_batch('bempty_idx', ARRAY['[1,1,1]'::vector], 5);
SELECT count(*) FROM vsearch_range_batch('bempty_idx', ARRAY['[1,1,1]'::vector], 5);

-- Errors
SELECT * FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector], 0);
SELECT * FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector, NULL], 3);
SELECT * FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector, '[1,1]'], 3);
SELECT * FROM vsearch_knn_batch('b3_l2', ARRAY[['[1,1,1]'::vector], ['[1,1,1]'::vector]], 3);
SELECT * FROM vsearch_range_batch('b3_l2', ARRAY['[1,1,1]'::vector], -1);
SELECT * FROM vsearch_range_batch('b3_l2', ARRAY['[1,1,1]'::vector], 'NaN');
SELECT count(*) FROM vsearch_range_batch('b3_ip', ARRAY['[1,1,1]'::vector], -0.5);
SELECT * FROM vsearch_range_batch('b3_ip', ARRAY['[1,1,1]'::vector], 'Infinity');
SELECT * FROM vsearch_knn_batch('b3', ARRAY['[1,1,1]'::vector], 3);
SELECT * FROM vsearch_knn_batch('b3_pkey', ARRAY['[1,1,1]'::vector], 3);
SELECT * FROM vsearch_knn_batch(0, ARRAY['[1,1,1]'::vector], 3);

-- Permissions: SELECT on the table is needed; row level security is refused
CREATE ROLE regress_vsearch_batch;
SET ROLE regress_vsearch_batch;
SELECT * FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector], 3);
RESET ROLE;
GRANT SELECT ON b3 TO regress_vsearch_batch;
SET ROLE regress_vsearch_batch;
SELECT count(*) FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector], 3);
RESET ROLE;
ALTER TABLE b3 ENABLE ROW LEVEL SECURITY;
CREATE POLICY few ON b3 USING (id < 10);
SET ROLE regress_vsearch_batch;
SELECT count(*) FROM vsearch_knn_batch('b3_l2', ARRAY['[1,1,1]'::vector], 3);
RESET ROLE;
DROP POLICY few ON b3;
ALTER TABLE b3 DISABLE ROW LEVEL SECURITY;
REVOKE SELECT ON b3 FROM regress_vsearch_batch;
DROP ROLE regress_vsearch_batch;

-- Many candidate rows (> 10000, read in heap order in one pass), dead and HOT-updated rows among
-- them: the same rows as the per-query SQL.
CREATE TABLE bbig (id int PRIMARY KEY, v vector(8), note text);
INSERT INTO bbig SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector, 'x'
  FROM generate_series(1, 12000) i, generate_series(1, 8) j GROUP BY i;
CREATE INDEX bbig_l2 ON bbig USING vs_flat (v vector_l2_ops);
DELETE FROM bbig WHERE id % 7 = 0;
UPDATE bbig SET note = 'hot' WHERE id % 5 = 0;
ANALYZE bbig;
CREATE TABLE bbq AS SELECT row_number() OVER (ORDER BY id) AS qid, v FROM bbig WHERE id % 400 = 1;
SELECT count(*) FROM bbq;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT pg_temp.same(
  'SELECT q.qid, x.id, x.d FROM bbq q, LATERAL (
     SELECT id, v <-> q.v AS d FROM bbig ORDER BY v <-> q.v LIMIT 1000) x',
  'SELECT b.query, t.id, b.distance FROM vsearch_knn_batch(''bbig_l2'',
     ARRAY(SELECT v FROM bbq ORDER BY qid), 1000) b JOIN bbig t ON t.ctid = b.row_ctid');
RESET enable_bitmapscan;
RESET enable_indexscan;

-- Rows on all-visible pages (after VACUUM) are checked from their line pointer alone, past the
-- redirects HOT pruning left: the same rows and ctids as the per-query SQL, with and without the
-- visibility map, under SERIALIZABLE (which reads the tuples), and with some pages changed since.
CREATE TABLE bvis (id int PRIMARY KEY, v vector(8), note text)
  WITH (fillfactor = 60, autovacuum_enabled = off);
INSERT INTO bvis SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector, 'x'
  FROM generate_series(1, 6000) i, generate_series(1, 8) j GROUP BY i;
CREATE INDEX bvis_l2 ON bvis USING vs_flat (v vector_l2_ops);
CREATE TABLE bvq AS SELECT row_number() OVER (ORDER BY id) AS qid, v FROM bvis WHERE id % 150 = 1;
UPDATE bvis SET note = 'hot' WHERE id % 3 = 0;
DELETE FROM bvis WHERE id % 11 = 0;
CREATE FUNCTION pg_temp.bvis_same() RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.same(
    'SELECT q.qid, x.id, x.d, x.note FROM bvq q, LATERAL (
       SELECT id, v <-> q.v AS d, note FROM bvis ORDER BY v <-> q.v LIMIT 50) x',
    'SELECT b.query, t.id, b.distance, t.note FROM vsearch_knn_batch(''bvis_l2'',
       ARRAY(SELECT v FROM bvq ORDER BY qid), 50) b JOIN bvis t ON t.ctid = b.row_ctid') $$;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT relallvisible FROM pg_class WHERE relname = 'bvis';
SELECT pg_temp.bvis_same();
VACUUM bvis;
SELECT relallvisible = relpages AS all_visible FROM pg_class WHERE relname = 'bvis';
SELECT pg_temp.bvis_same();
SELECT count(*) FILTER (WHERE t.note = 'hot') > 0 AS hot_rows, count(*) = count(t.id) AS all_joined
  FROM vsearch_knn_batch('bvis_l2', ARRAY(SELECT v FROM bvq ORDER BY qid), 50) b
  LEFT JOIN bvis t ON t.ctid = b.row_ctid;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.bvis_same();
COMMIT;
BEGIN;
UPDATE bvis SET note = 'again' WHERE id % 7 = 0;
DELETE FROM bvis WHERE id % 13 = 0;
SELECT pg_temp.bvis_same();
ROLLBACK;
RESET enable_bitmapscan;
RESET enable_indexscan;
