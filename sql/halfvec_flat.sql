-- vs_flat over halfvec columns (operator classes halfvec_l2_ops, halfvec_ip_ops,
-- halfvec_cosine_ops, halfvec_l1_ops): the index stores the halves as binary16 rows, and every
-- answer (rows and distances) must be the sequential scan's over the halfvec column, after a
-- build, inserts, deletes and VACUUM, a REINDEX and more of them, in the backend and through the
-- batch function.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT setseed(0.16);
CREATE TABLE halfvec_flat_t (id integer PRIMARY KEY, v halfvec(16));
INSERT INTO halfvec_flat_t
SELECT g, CASE WHEN g % 97 = 0 THEN NULL
               ELSE ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 16) WHERE g > 0)::halfvec END
FROM generate_series(1, 1500) g;
CREATE INDEX halfvec_flat_l2 ON halfvec_flat_t USING vs_flat (v);
CREATE INDEX halfvec_flat_ip ON halfvec_flat_t USING vs_flat (v halfvec_ip_ops);
CREATE INDEX halfvec_flat_cos ON halfvec_flat_t USING vs_flat (v halfvec_cosine_ops);
CREATE INDEX halfvec_flat_l1 ON halfvec_flat_t USING vs_flat (v halfvec_l1_ops);
-- rows inserted into the built indexes, rows deleted and vacuumed away
INSERT INTO halfvec_flat_t
SELECT g, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 16) WHERE g > 0)::halfvec
FROM generate_series(1501, 1800) g;
DELETE FROM halfvec_flat_t WHERE id % 7 = 0;
VACUUM halfvec_flat_t;
CREATE TABLE halfvec_flat_q AS
SELECT q AS qid, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 16) WHERE q > 0)::halfvec AS v
FROM generate_series(1, 12) q;

-- The 10 nearest rows of each query under each metric, through the indexes, then by seq scan
-- (ranked by distance; random halves make ties unlikely)
CREATE TEMP VIEW nearest AS
  SELECT 'l2' AS metric, q.qid, s.* FROM halfvec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, v <-> q.v AS d FROM halfvec_flat_t ORDER BY v <-> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'ip', q.qid, s.* FROM halfvec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, v <#> q.v AS d FROM halfvec_flat_t ORDER BY v <#> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'cosine', q.qid, s.* FROM halfvec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, v <=> q.v AS d FROM halfvec_flat_t ORDER BY v <=> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'l1', q.qid, s.* FROM halfvec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, v <+> q.v AS d FROM halfvec_flat_t ORDER BY v <+> q.v LIMIT 10) x) s;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM halfvec_flat_t ORDER BY v <=> '[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]' LIMIT 10;
CREATE TEMP TABLE via_index AS SELECT * FROM nearest;
-- the plan of each branch of the view (here the L1 one)
EXPLAIN (COSTS OFF) SELECT q.qid, s.* FROM halfvec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, v <+> q.v AS d FROM halfvec_flat_t ORDER BY v <+> q.v LIMIT 10) x) s;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM halfvec_flat_t ORDER BY v <=> '[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]' LIMIT 10;
CREATE TEMP TABLE via_seqscan AS SELECT * FROM nearest;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT metric, count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same,
       count(*) FILTER (WHERE i.id % 7 = 0 OR i.id % 97 = 0) AS deleted_or_null
FROM via_index i JOIN via_seqscan s USING (metric, qid, rank)
GROUP BY metric ORDER BY metric;

-- The batch function on a halfvec index: the queries are vectors (exactly the halves' values);
-- its rows and distances are the seq scan's
SELECT count(*) AS pairs, count(*) FILTER (WHERE t.id = s.id AND b.distance = s.d) AS same
FROM (SELECT b.query, b.row_ctid, b.distance,
             row_number() OVER (PARTITION BY b.query ORDER BY b.distance) AS rank
      FROM vsearch_knn_batch('halfvec_flat_l2',
                             (SELECT array_agg(v::vector ORDER BY qid) FROM halfvec_flat_q), 10) b) b
JOIN halfvec_flat_t t ON t.ctid = b.row_ctid
JOIN via_seqscan s ON s.metric = 'l2' AND s.qid = b.query AND s.rank = b.rank;

-- REINDEX (binary16 rows again), then inserts into the rebuilt pages, deletes and VACUUM: still
-- the seq scan's answers
REINDEX TABLE halfvec_flat_t;
INSERT INTO halfvec_flat_t
SELECT g, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 16) WHERE g > 0)::halfvec
FROM generate_series(1801, 1900) g;
DELETE FROM halfvec_flat_t WHERE id % 11 = 0;
VACUUM halfvec_flat_t;
SET enable_seqscan = off;
CREATE TEMP TABLE via_index2 AS SELECT * FROM nearest;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE via_seqscan2 AS SELECT * FROM nearest;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT metric, count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same
FROM via_index2 i JOIN via_seqscan2 s USING (metric, qid, rank)
GROUP BY metric ORDER BY metric;
SELECT r->>'index' AS index, (r->>'entries')::bigint = (r->>'heap_rows')::bigint AS complete
FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass, true) r
WHERE c.relname LIKE 'halfvec\_flat\_%' AND c.relkind = 'i' AND c.relname <> 'halfvec_flat_t_pkey'
ORDER BY 1;

-- Binary16 rows take 8 + 2 x 16 bytes against 8 + 4 x 16 in a vector column's index of the same
-- rows: about 40 / 72 of the pages (with the metapage and the free space VACUUM left)
CREATE TEMP TABLE halfvec_flat_f32 AS SELECT id, v::vector(16) AS v FROM halfvec_flat_t;
CREATE INDEX halfvec_flat_f32_l2 ON halfvec_flat_f32 USING vs_flat (v);
SELECT round(pg_relation_size('halfvec_flat_l2')::numeric /
             pg_relation_size('halfvec_flat_f32_l2'), 2) AS pages_against_vector;

-- An odd dimension: rows of 7 halves are padded to 4 bytes
CREATE TABLE halfvec_flat_odd (id integer, v halfvec(7));
INSERT INTO halfvec_flat_odd
SELECT g, ARRAY(SELECT (random() * 20 - 10)::real FROM generate_series(1, 7) WHERE g > 0)::halfvec
FROM generate_series(1, 300) g;
CREATE INDEX halfvec_flat_odd_l1 ON halfvec_flat_odd USING vs_flat (v halfvec_l1_ops);
INSERT INTO halfvec_flat_odd VALUES (301, '[1,2,3,4,5,6,7]'), (302, '[65504,-65504,0,0,0,0,1e-7]');
SET enable_seqscan = off;
CREATE TEMP TABLE odd_index AS
SELECT row_number() OVER (ORDER BY d) AS rank, id, d
FROM (SELECT id, v <+> '[1,2,3,4,5,6,7]' AS d FROM halfvec_flat_odd
      ORDER BY v <+> '[1,2,3,4,5,6,7]' LIMIT 20) x;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE odd_seqscan AS
SELECT row_number() OVER (ORDER BY d) AS rank, id, d
FROM (SELECT id, v <+> '[1,2,3,4,5,6,7]' AS d FROM halfvec_flat_odd
      ORDER BY v <+> '[1,2,3,4,5,6,7]' LIMIT 20) x;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same,
       min(i.d) AS nearest
FROM odd_index i JOIN odd_seqscan s USING (rank);
SELECT (r->>'entries')::bigint AS entries FROM vsearch_index_check('halfvec_flat_odd_l1', true) r;

-- Long rows: binary16 rows of up to 4 076 values fit a page (float rows 2 038), so 3 072-dimension
-- embeddings stored as halfvec take a vs_flat index (one row a page).  Built, then inserts, deletes
-- and VACUUM: the nearest 5 and a range per query equal a sequential scan's, every row one entry.
CREATE TABLE halfvec_flat_long (id integer, v halfvec(3072));
INSERT INTO halfvec_flat_long
SELECT g, ARRAY(SELECT random()::real FROM generate_series(1, 3072) WHERE g > 0)::halfvec
FROM generate_series(1, 40) g;
CREATE INDEX halfvec_flat_long_l2 ON halfvec_flat_long USING vs_flat (v halfvec_l2_ops);
INSERT INTO halfvec_flat_long
SELECT g, ARRAY(SELECT random()::real FROM generate_series(1, 3072) WHERE g > 0)::halfvec
FROM generate_series(41, 60) g;
DELETE FROM halfvec_flat_long WHERE id % 7 = 3;
VACUUM halfvec_flat_long;
CREATE FUNCTION pg_temp.long_answers() RETURNS TABLE (qid integer, id integer, rank bigint) LANGUAGE sql AS $$
  SELECT q.id, x.id, x.rank FROM halfvec_flat_long q, LATERAL (
    SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM halfvec_flat_long
      ORDER BY v <-> q.v LIMIT 5) s) x WHERE q.id % 10 = 1
  UNION ALL
  SELECT q.id, w.id, 0 FROM halfvec_flat_long q, halfvec_flat_long w
    WHERE q.id % 10 = 1 AND w.v <<->> sphere(q.v, 22.4) $$;
SET enable_seqscan = off;
CREATE TEMP TABLE long_index AS SELECT * FROM pg_temp.long_answers();
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE long_seqscan AS SELECT * FROM pg_temp.long_answers();
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT (SELECT count(*) FROM long_seqscan) AS answers,
       (SELECT count(*) FROM (SELECT * FROM long_seqscan EXCEPT ALL SELECT * FROM long_index) d) AS missing,
       (SELECT count(*) FROM (SELECT * FROM long_index EXCEPT ALL SELECT * FROM long_seqscan) d) AS extra;
SELECT (r->>'entries')::bigint AS entries, (r->>'data_pages')::bigint AS data_pages
FROM vsearch_index_check('halfvec_flat_long_l2', true) r;
-- the limits: 4 076 binary16 values a row, 2 038 floats (the hint names halfvec)
CREATE TABLE halfvec_flat_limit (v halfvec(4076), w halfvec(4077), x vector(2039));
CREATE INDEX halfvec_flat_limit_ok ON halfvec_flat_limit USING vs_flat (v);
INSERT INTO halfvec_flat_limit (v) VALUES (array_fill(0.5::real, ARRAY[4076])::halfvec);
SELECT v <-> array_fill(0::real, ARRAY[4076])::halfvec AS d FROM halfvec_flat_limit
ORDER BY v <-> array_fill(0::real, ARRAY[4076])::halfvec LIMIT 1;
CREATE INDEX ON halfvec_flat_limit USING vs_flat (w);
CREATE INDEX ON halfvec_flat_limit USING vs_flat (x);

DROP VIEW nearest;
DROP TABLE halfvec_flat_t, halfvec_flat_q, halfvec_flat_odd, halfvec_flat_long, halfvec_flat_limit;
