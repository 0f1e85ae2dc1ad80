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
-- redirects HOT pruning left, and an approximate index's re-rank reads their vectors without the
-- page's lock: the same rows, ctids and distances as the per-query SQL, with and without the
-- visibility map, under SERIALIZABLE (which reads the tuples), and with some pages changed since.
-- vs_ivfpq probes every list and re-ranks every row here, so its answer is exact too.
CREATE TABLE bvis (id int PRIMARY KEY, v vector(8), note text)
  WITH (fillfactor = 60, autovacuum_enabled = off);
INSERT INTO bvis SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector, 'x'
  FROM generate_series(1, 6000) i, generate_series(1, 8) j GROUP BY i;
CREATE INDEX bvis_l2 ON bvis USING vs_flat (v vector_l2_ops);
CREATE INDEX bvis_ivf ON bvis USING vs_ivfpq (v vector_l2_ops) WITH (lists = 4);
CREATE TABLE bvq AS SELECT row_number() OVER (ORDER BY id) AS qid, v FROM bvis WHERE id % 150 = 1;
UPDATE bvis SET note = 'hot' WHERE id % 3 = 0;
DELETE FROM bvis WHERE id % 11 = 0;
CREATE FUNCTION pg_temp.bvis_same() RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(pg_temp.same(
    'SELECT q.qid, x.id, x.d, x.note FROM bvq q, LATERAL (
       SELECT id, v <-> q.v AS d, note FROM bvis ORDER BY v <-> q.v LIMIT 50) x',
    format('SELECT b.query, t.id, b.distance, t.note FROM vsearch_knn_batch(%L,
       ARRAY(SELECT v FROM bvq ORDER BY qid), 50) b JOIN bvis t ON t.ctid = b.row_ctid', idx)),
    ' / ' ORDER BY idx)
  FROM unnest(ARRAY['bvis_l2', 'bvis_ivf']) idx $$;
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 6000;
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
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;

-- Massive exact ties: coordinates in {0, 1, 2} (81 points, ~120 rows each), so that hundreds of
-- rows share each distance, with dead, HOT-updated and moved rows among them.  Two right answers
-- may keep different rows of those at the k-th distance, so an answer is right when its distances
-- are the seq scan's one for one, its rows are distinct and at the distance it gives them, and its
-- rows nearer than the last distance are the seq scan's (tests/lib/knn_check.sql's rule).
-- "past_k" counts the queries whose k-th distance ties with rows beyond the LIMIT.
CREATE FUNCTION pg_temp.knn_diff(a_ids int[], a_ds float8[], b_ids int[], b_ds float8[])
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int := coalesce(cardinality(a_ids), 0);
BEGIN
  IF a_ds IS DISTINCT FROM b_ds THEN RETURN 'the distances differ'; END IF;
  IF (SELECT count(DISTINCT x) FROM unnest(a_ids) x) <> n THEN RETURN 'a row comes twice'; END IF;
  IF n > 0 AND (SELECT array_agg(i ORDER BY i) FROM unnest(a_ids, a_ds) u(i, d) WHERE d < a_ds[n])
      IS DISTINCT FROM
      (SELECT array_agg(i ORDER BY i) FROM unnest(b_ids, b_ds) u(i, d) WHERE d < b_ds[n]) THEN
    RETURN 'the rows nearer than the last distance differ';
  END IF;
  RETURN NULL;
END $$;
-- the rule itself: a tied row in place of another is right; a farther row in place of a tied one,
-- a nearer row missing and a row twice are wrong
SELECT pg_temp.knn_diff('{1,2,4}', '{0,1,1}', '{1,2,3}', '{0,1,1}') AS tie,
       pg_temp.knn_diff('{1,2,5}', '{0,1,2}', '{1,2,3}', '{0,1,1}') AS farther,
       pg_temp.knn_diff('{9,2,3}', '{0,1,1}', '{1,2,3}', '{0,1,1}') AS nearer_missing,
       pg_temp.knn_diff('{1,2,2}', '{0,1,1}', '{1,2,3}', '{0,1,1}') AS twice;
-- answer: SQL of (qid, id, distance as answered, the operator's distance of that row); each query
-- of btq against a seq scan of ORDER BY v <op> q LIMIT k
CREATE FUNCTION pg_temp.tie_check(answer text, op text, k int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  q record;
  a_ids int[]; a_ds float8[]; b_ids int[]; b_ds float8[];
  why text;
  tied bool;
  wrong int := 0; past_k int := 0; first_why text;
  indexscan text := current_setting('enable_indexscan');
  bitmapscan text := current_setting('enable_bitmapscan');
BEGIN
  EXECUTE 'CREATE TEMP TABLE tie_ans AS ' || answer;
  IF EXISTS (SELECT FROM tie_ans a WHERE a.distance IS DISTINCT FROM a.row_distance) THEN
    wrong := wrong + 1;
    first_why := 'a distance is not its row''s';
  END IF;
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  FOR q IN SELECT qid, v FROM btq ORDER BY qid LOOP
    SELECT array_agg(id ORDER BY distance, id), array_agg(distance ORDER BY distance, id)
      INTO a_ids, a_ds FROM tie_ans WHERE qid = q.qid;
    EXECUTE format('SELECT array_agg(id ORDER BY d, id), array_agg(d ORDER BY d, id)
                      FROM (SELECT id, v %s $1 AS d FROM btie ORDER BY v %s $1 LIMIT %s) s',
                   op, op, k) INTO b_ids, b_ds USING q.v;
    why := pg_temp.knn_diff(a_ids, a_ds, b_ids, b_ds);
    IF why IS NOT NULL THEN
      wrong := wrong + 1;
      first_why := coalesce(first_why, format('query %s: %s', q.qid, why));
    END IF;
    EXECUTE format('SELECT count(*) > %s FROM btie WHERE v %s $1 <= $2', k, op)
      INTO STRICT tied USING q.v, b_ds[k];
    IF tied THEN past_k := past_k + 1; END IF;
  END LOOP;
  DROP TABLE tie_ans;
  PERFORM set_config('enable_indexscan', indexscan, true);
  PERFORM set_config('enable_bitmapscan', bitmapscan, true);
  RETURN format('%s wrong%s, past_k %s', wrong, coalesce(' (' || first_why || ')', ''), past_k);
END $$;
CREATE TABLE btie (id int PRIMARY KEY, v vector(4), note text);
INSERT INTO btie SELECT i, ARRAY[floor(random() * 3), floor(random() * 3), floor(random() * 3),
                                  floor(random() * 3)]::vector, 'x'
  FROM generate_series(1, 10000) i;
CREATE INDEX btie_l2 ON btie USING vs_flat (v vector_l2_ops);
CREATE INDEX btie_ip ON btie USING vs_flat (v vector_ip_ops);
CREATE INDEX btie_cosine ON btie USING vs_flat (v vector_cosine_ops);
CREATE INDEX btie_l1 ON btie USING vs_flat (v vector_l1_ops);
DELETE FROM btie WHERE id % 7 = 0;
UPDATE btie SET note = 'hot' WHERE id % 5 = 0;
UPDATE btie SET v = '[1,1,1,1]' WHERE id % 11 = 0;
ANALYZE btie;
-- grid points (the zero vector among them: NaN cosine distances) and points between them
CREATE TABLE btq (qid int, v vector(4));
INSERT INTO btq SELECT g + 1, ARRAY[g % 3, g / 3 % 3, g / 9 % 3, 1]::vector FROM generate_series(0, 26) g;
INSERT INTO btq SELECT g + 28, ARRAY[0.5 * (g % 5), 0.5 * (g / 5), 1.5, 3]::vector
  FROM generate_series(0, 4) g;
INSERT INTO btq VALUES (33, '[0,0,0,0]');
SELECT metric, k, pg_temp.tie_check(
  format('SELECT b.query AS qid, t.id, b.distance, t.v %s q.v AS row_distance
            FROM vsearch_knn_batch(''btie_%s'', ARRAY(SELECT v FROM btq ORDER BY qid), %s) b
            JOIN btie t ON t.ctid = b.row_ctid JOIN btq q ON q.qid = b.query', op, metric, k),
  op, k)
FROM (VALUES ('l2', '<->'), ('ip', '<#>'), ('cosine', '<=>'), ('l1', '<+>')) m(metric, op),
     unnest(ARRAY[1, 10, 100]) k ORDER BY metric, k;
-- ORDER BY ... LIMIT k through the index on the same rows
SET enable_seqscan = off;
SELECT metric, k, pg_temp.tie_check(
  format('SELECT q.qid, x.id, x.d AS distance, x.d AS row_distance FROM btq q,
            LATERAL (SELECT id, v %s q.v AS d FROM btie ORDER BY v %s q.v LIMIT %s) x',
         op, op, k), op, k)
FROM (VALUES ('l2', '<->'), ('ip', '<#>'), ('cosine', '<=>'), ('l1', '<+>')) m(metric, op),
     unnest(ARRAY[1, 10, 100]) k ORDER BY metric, k;
RESET enable_seqscan;
EXPLAIN (COSTS OFF) SELECT id FROM btie ORDER BY v <-> '[1,1,1,1]' LIMIT 10;

-- Bounded work under ties: every row lies at the same distance from the queries, a third of them
-- dead.  The widening stops at k visible rows, so 2 001 queries over 50 001 rows take two rounds
-- (14, then 56 candidates each), not rounds that grow past the whole table (more than 10^8
-- candidates: refused).
CREATE TABLE beq (id int PRIMARY KEY, v vector(2));
INSERT INTO beq SELECT i, ARRAY[2 * (i % 2), 2 * (i / 2 % 2)]::vector FROM generate_series(0, 50000) i;
CREATE INDEX beq_l2 ON beq USING vs_flat (v vector_l2_ops);
DELETE FROM beq WHERE id % 3 = 0;
SELECT count(*), count(DISTINCT (query, row_ctid)), min(distance), max(distance)
  FROM vsearch_knn_batch('beq_l2', ARRAY(SELECT '[1,1]'::vector FROM generate_series(1, 2001)), 10);
