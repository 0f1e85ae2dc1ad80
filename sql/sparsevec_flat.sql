-- vs_flat over sparsevec columns (operator classes sparsevec_l2_ops, sparsevec_ip_ops,
-- sparsevec_cosine_ops, sparsevec_l1_ops): rows are densified as the index loads them and the
-- sparse distances are the dense ones bit for bit, so every answer (rows and distances) must be
-- the sequential scan's over the sparsevec column, after a build, inserts, deletes and VACUUM, in
-- the backend and through the batch function.  Then the dimension limits.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT setseed(0.42);
CREATE FUNCTION pg_temp.random_sparse(dim integer, density float8, seed integer) RETURNS sparsevec
LANGUAGE sql AS $$
  SELECT ARRAY(SELECT CASE WHEN random() < density THEN (random() * 2 - 1)::real ELSE 0 END
               FROM generate_series(1, dim) WHERE seed IS NOT NULL)::vector::sparsevec
$$;
CREATE TABLE sparsevec_flat_t (id integer PRIMARY KEY, v sparsevec(40));
INSERT INTO sparsevec_flat_t
SELECT g, CASE WHEN g % 97 = 0 THEN NULL WHEN g = 500 THEN '{}/40'
               ELSE pg_temp.random_sparse(40, 0.15 + (g % 5) * 0.1, g) END
FROM generate_series(1, 1500) g;
CREATE INDEX sparsevec_flat_l2 ON sparsevec_flat_t USING vs_flat (v);
CREATE INDEX sparsevec_flat_ip ON sparsevec_flat_t USING vs_flat (v sparsevec_ip_ops);
CREATE INDEX sparsevec_flat_cos ON sparsevec_flat_t USING vs_flat (v sparsevec_cosine_ops);
CREATE INDEX sparsevec_flat_l1 ON sparsevec_flat_t USING vs_flat (v sparsevec_l1_ops);
-- rows inserted into the built indexes, rows deleted and vacuumed away
INSERT INTO sparsevec_flat_t
SELECT g, CASE WHEN g % 97 = 0 THEN NULL ELSE pg_temp.random_sparse(40, 0.25, g) END
FROM generate_series(1501, 1800) g;
DELETE FROM sparsevec_flat_t WHERE id % 7 = 0;
VACUUM sparsevec_flat_t;
CREATE TABLE sparsevec_flat_q AS
SELECT q AS qid, pg_temp.random_sparse(40, 0.3, q) AS v FROM generate_series(1, 12) q;

-- The 10 nearest rows of each query under each metric, through the indexes, then by seq scan
-- (ranked by distance, then id: rows of a few non-zero elements at the same positions have the
-- same cosine distance)
CREATE TEMP VIEW nearest AS
  SELECT 'l2' AS metric, q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v <-> q.v AS d FROM sparsevec_flat_t ORDER BY v <-> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'ip', q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v <#> q.v AS d FROM sparsevec_flat_t ORDER BY v <#> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'cosine', q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v <=> q.v AS d FROM sparsevec_flat_t ORDER BY v <=> q.v LIMIT 10) x) s
  UNION ALL
  SELECT 'l1', q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v <+> q.v AS d FROM sparsevec_flat_t ORDER BY v <+> q.v LIMIT 10) x) s;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM sparsevec_flat_t ORDER BY v <=> '{1:1,40:1}/40' LIMIT 10;
CREATE TEMP TABLE via_index AS SELECT * FROM nearest;
-- the plan of each branch of the view (here the inner-product one)
EXPLAIN (COSTS OFF) SELECT q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v <#> q.v AS d FROM sparsevec_flat_t ORDER BY v <#> q.v LIMIT 10) x) s;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM sparsevec_flat_t ORDER BY v <=> '{1:1,40:1}/40' LIMIT 10;
CREATE TEMP TABLE via_seqscan AS SELECT * FROM nearest;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT metric, count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same,
       count(*) FILTER (WHERE i.id % 7 = 0 OR i.id % 97 = 0) AS deleted_or_null
FROM via_index i JOIN via_seqscan s USING (metric, qid, rank)
GROUP BY metric ORDER BY metric;

-- The batch function on a sparsevec index: the queries are vectors (the dense values); its rows
-- and distances are the seq scan's
SELECT b.metric, count(*) AS pairs, count(*) FILTER (WHERE b.id = s.id AND b.distance = s.d) AS same
FROM (SELECT i.metric, b.query, t.id, b.distance,
             row_number() OVER (PARTITION BY i.metric, b.query ORDER BY b.distance, t.id) AS rank
      FROM (VALUES ('sparsevec_flat_l2', 'l2'), ('sparsevec_flat_ip', 'ip'),
                   ('sparsevec_flat_cos', 'cosine'), ('sparsevec_flat_l1', 'l1')) i(idx, metric),
           vsearch_knn_batch(i.idx::regclass,
                             (SELECT array_agg(v::vector ORDER BY qid) FROM sparsevec_flat_q), 10) b
      JOIN sparsevec_flat_t t ON t.ctid = b.row_ctid) b
JOIN via_seqscan s ON s.metric = b.metric AND s.qid = b.query AND s.rank = b.rank
GROUP BY b.metric ORDER BY b.metric;

-- Dimensions: a query of another dimension; a column declared wider than vs_flat takes; rows
-- wider than the index (the first row fixes an unconstrained column's dimension) or than any
-- dense vector
SELECT id FROM sparsevec_flat_t ORDER BY v <-> '{1:1}/41' LIMIT 1;
CREATE TABLE sparsevec_wide (v sparsevec(100000));
CREATE INDEX ON sparsevec_wide USING vs_flat (v);
CREATE TABLE sparsevec_any (v sparsevec);
CREATE INDEX sparsevec_any_l2 ON sparsevec_any USING vs_flat (v);
INSERT INTO sparsevec_any VALUES ('{1:1}/30');
INSERT INTO sparsevec_any VALUES ('{1:1}/31');
INSERT INTO sparsevec_any VALUES ('{1:1,100000:2}/100000');
SELECT v FROM sparsevec_any ORDER BY v <-> '{2:1}/30';

-- Other index kinds take no sparsevec; an expression index on the dense vector serves them, with
-- the query cast the same way (here vs_lc, exact, against the seq scan)
CREATE INDEX sparsevec_flat_lc ON sparsevec_flat_t USING vs_lc ((v::vector(40)));
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM sparsevec_flat_t ORDER BY v::vector(40) <-> '{1:1,40:1}/40'::sparsevec::vector(40) LIMIT 10;
CREATE TEMP TABLE via_lc AS
  SELECT q.qid, s.* FROM sparsevec_flat_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, v::vector(40) <-> q.v::vector(40) AS d FROM sparsevec_flat_t
      ORDER BY v::vector(40) <-> q.v::vector(40) LIMIT 10) x) s;
RESET enable_seqscan;
SELECT count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same
FROM via_lc i JOIN via_seqscan s ON s.metric = 'l2' AND (s.qid, s.rank) = (i.qid, i.rank);

DROP VIEW nearest;
DROP TABLE sparsevec_flat_t, sparsevec_flat_q, sparsevec_wide, sparsevec_any;
