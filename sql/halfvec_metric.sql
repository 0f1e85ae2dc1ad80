-- vs_graph, vs_lc and vs_sss over halfvec columns.  vs_lc and vs_sss take only true metrics
-- (halfvec_l2_ops, halfvec_l1_ops): their answers (rows and distances) must be the sequential
-- scan's over the halfvec column, after a build, inserts, deletes and VACUUM, and through the
-- batch function.  vs_graph (halfvec_l2_ops, halfvec_ip_ops, halfvec_cosine_ops) is approximate:
-- its graph over a halfvec column must answer exactly as one over a vector column of the same
-- values, and with a beam as wide as the table it must find the seq scan's rows.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT setseed(0.23);
-- h: the halfvec column; w: the same values as a vector
CREATE TABLE hm (id integer PRIMARY KEY, h halfvec(12), w vector(12));
INSERT INTO hm
SELECT g, x, x::vector FROM (
  SELECT g, CASE WHEN g % 89 = 0 THEN NULL
                 ELSE ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 12) WHERE g > 0)::halfvec END
  FROM generate_series(1, 1200) g) r(g, x);
CREATE TABLE hm_q AS
SELECT q AS qid, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 12) WHERE q > 0)::halfvec AS h
FROM generate_series(1, 10) q;

-- Only true metrics for the metric-space indexes
CREATE INDEX ON hm USING vs_lc (h halfvec_cosine_ops);
CREATE INDEX ON hm USING vs_sss (h halfvec_ip_ops);

CREATE INDEX hm_lc_l2 ON hm USING vs_lc (h);
CREATE INDEX hm_lc_l1 ON hm USING vs_lc (h halfvec_l1_ops);
CREATE INDEX hm_sss_l2 ON hm USING vs_sss (h);
CREATE INDEX hm_sss_l1 ON hm USING vs_sss (h halfvec_l1_ops);
-- rows inserted into the built indexes, rows deleted and vacuumed away
INSERT INTO hm
SELECT g, x, x::vector FROM (
  SELECT g, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 12) WHERE g > 0)::halfvec
  FROM generate_series(1201, 1500) g) r(g, x);
DELETE FROM hm WHERE id % 11 = 0;
VACUUM hm;

-- The 10 nearest rows of each query under L2 and L1 (ranked by distance; random halves make
-- ties unlikely), through whichever index the planner is allowed
CREATE TEMP VIEW nearest AS
  SELECT 'l2' AS metric, q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, h <-> q.h AS d FROM hm ORDER BY h <-> q.h LIMIT 10) x) s
  UNION ALL
  SELECT 'l1', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d) AS rank, id, d FROM (
      SELECT id, h <+> q.h AS d FROM hm ORDER BY h <+> q.h LIMIT 10) x) s;

SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE via_seqscan AS SELECT * FROM nearest;
RESET enable_indexscan;
RESET enable_bitmapscan;
-- Each index's answers against the seq scan's (the other access method's indexes dropped in a
-- transaction rolled back)
CREATE FUNCTION pg_temp.against_seqscan() RETURNS TABLE (metric text, rows bigint, same bigint,
                                                         deleted_or_null bigint)
LANGUAGE sql AS $$
  SELECT metric, count(*), count(*) FILTER (WHERE i.id = s.id AND i.d = s.d),
         count(*) FILTER (WHERE i.id % 11 = 0 OR i.id % 89 = 0)
  FROM nearest i JOIN via_seqscan s USING (metric, qid, rank) GROUP BY metric ORDER BY metric
$$;
SET enable_seqscan = off;
BEGIN;
DROP INDEX hm_sss_l2, hm_sss_l1;
EXPLAIN (COSTS OFF) SELECT id FROM hm ORDER BY h <+> '[1,0,0,0,0,0,0,0,0,0,0,1]' LIMIT 10;
SELECT * FROM pg_temp.against_seqscan();
ROLLBACK;
BEGIN;
DROP INDEX hm_lc_l2, hm_lc_l1;
EXPLAIN (COSTS OFF) SELECT id FROM hm ORDER BY h <-> '[1,0,0,0,0,0,0,0,0,0,0,1]' LIMIT 10;
SELECT * FROM pg_temp.against_seqscan();
ROLLBACK;
RESET enable_seqscan;

-- The batch function on halfvec indexes: the queries are vectors (exactly the halves' values);
-- its rows and distances are the seq scan's
SELECT b.idx, count(*) AS pairs, count(*) FILTER (WHERE t.id = s.id AND b.distance = s.d) AS same
FROM (SELECT i.idx, i.metric, b.query, b.row_ctid, b.distance,
             row_number() OVER (PARTITION BY i.idx, b.query ORDER BY b.distance) AS rank
      FROM (VALUES ('hm_lc_l2', 'l2'), ('hm_lc_l1', 'l1'), ('hm_sss_l2', 'l2'), ('hm_sss_l1', 'l1')) i(idx, metric),
           vsearch_knn_batch(i.idx::regclass, (SELECT array_agg(h::vector ORDER BY qid) FROM hm_q), 10) b) b
JOIN hm t ON t.ctid = b.row_ctid
JOIN via_seqscan s ON s.metric = b.metric AND s.qid = b.query AND s.rank = b.rank
GROUP BY b.idx ORDER BY b.idx;
DROP INDEX hm_lc_l2, hm_lc_l1, hm_sss_l2, hm_sss_l1;

-- vs_graph: the same graph over the halfvec column and over the vector column of its values (one
-- table, one heap order, the same seeded build), so the same answers, at a narrow beam where
-- they are approximate; then, with a beam as wide as the table, the seq scan's rows under L2 and
-- cosine (inner product is no metric: its graph need not reach every row from the entry)
CREATE TEMP VIEW graph_nearest AS
  SELECT 'l2' AS metric, 'halfvec' AS col, q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, h <-> q.h AS d FROM hm ORDER BY h <-> q.h LIMIT 10) x) s
  UNION ALL
  SELECT 'l2', 'vector', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, w <-> q.h::vector AS d FROM hm ORDER BY w <-> q.h::vector LIMIT 10) x) s
  UNION ALL
  SELECT 'ip', 'halfvec', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, h <#> q.h AS d FROM hm ORDER BY h <#> q.h LIMIT 10) x) s
  UNION ALL
  SELECT 'ip', 'vector', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, w <#> q.h::vector AS d FROM hm ORDER BY w <#> q.h::vector LIMIT 10) x) s
  UNION ALL
  SELECT 'cosine', 'halfvec', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, h <=> q.h AS d FROM hm ORDER BY h <=> q.h LIMIT 10) x) s
  UNION ALL
  SELECT 'cosine', 'vector', q.qid, s.* FROM hm_q q, LATERAL (
    SELECT row_number() OVER (ORDER BY d, id) AS rank, id, d FROM (
      SELECT id, w <=> q.h::vector AS d FROM hm ORDER BY w <=> q.h::vector LIMIT 10) x) s;

CREATE INDEX hm_gr_h_l2 ON hm USING vs_graph (h) WITH (degree = 4, build_degree = 8);
CREATE INDEX hm_gr_w_l2 ON hm USING vs_graph (w) WITH (degree = 4, build_degree = 8);
CREATE INDEX hm_gr_h_ip ON hm USING vs_graph (h halfvec_ip_ops) WITH (degree = 4, build_degree = 8);
CREATE INDEX hm_gr_w_ip ON hm USING vs_graph (w vector_ip_ops) WITH (degree = 4, build_degree = 8);
CREATE INDEX hm_gr_h_cos ON hm USING vs_graph (h halfvec_cosine_ops) WITH (degree = 4, build_degree = 8);
CREATE INDEX hm_gr_w_cos ON hm USING vs_graph (w vector_cosine_ops) WITH (degree = 4, build_degree = 8);
-- and rows inserted into the built graphs, in the same order into both
INSERT INTO hm
SELECT g, x, x::vector FROM (
  SELECT g, ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, 12) WHERE g > 0)::halfvec
  FROM generate_series(1501, 1600) g) r(g, x);

SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM hm ORDER BY h <=> '[1,0,0,0,0,0,0,0,0,0,0,1]' LIMIT 10;
SET vsearch.graph_ef = 10;
CREATE TEMP TABLE graph_narrow AS SELECT * FROM graph_nearest;
SET vsearch.graph_ef = 2000;
CREATE TEMP TABLE graph_wide AS SELECT * FROM graph_nearest;
RESET vsearch.graph_ef;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE graph_seqscan AS SELECT * FROM graph_nearest WHERE col = 'halfvec';
RESET enable_indexscan;
RESET enable_bitmapscan;

-- narrow beam: halfvec graph = vector graph, and (the test has teeth) not always the seq scan
SELECT h.metric, count(*) AS rows, count(*) FILTER (WHERE h.id = v.id AND h.d = v.d) AS same_as_vector,
       count(*) FILTER (WHERE h.id = s.id AND h.d = s.d) < count(*) AS approximate
FROM graph_narrow h
JOIN graph_narrow v ON v.col = 'vector' AND (v.metric, v.qid, v.rank) = (h.metric, h.qid, h.rank)
JOIN graph_seqscan s ON (s.metric, s.qid, s.rank) = (h.metric, h.qid, h.rank)
WHERE h.col = 'halfvec' GROUP BY h.metric ORDER BY h.metric;
-- wide beam: halfvec graph = vector graph; under L2 and cosine the seq scan's rows and distances
SELECT h.metric, count(*) AS rows, count(*) FILTER (WHERE h.id = v.id AND h.d = v.d) AS same_as_vector,
       CASE WHEN h.metric <> 'ip' THEN count(*) FILTER (WHERE h.id = s.id AND h.d = s.d) END AS same_as_seqscan
FROM graph_wide h
JOIN graph_wide v ON v.col = 'vector' AND (v.metric, v.qid, v.rank) = (h.metric, h.qid, h.rank)
JOIN graph_seqscan s ON (s.metric, s.qid, s.rank) = (h.metric, h.qid, h.rank)
WHERE h.col = 'halfvec' GROUP BY h.metric ORDER BY h.metric;

-- vs_graph keeps a halfvec column's vectors as binary16 in its node pages (the values exactly, in
-- half the bytes: a node of 12 dimensions and degree 4 takes 48 bytes against 72), and the index
-- check (NaN / infinity in any node, one entry per row) reads them back.
SELECT pg_relation_size('hm_gr_h_l2') / 8192 AS halfvec_pages, pg_relation_size('hm_gr_w_l2') / 8192 AS vector_pages;
SELECT (vsearch_index_check('hm_gr_h_cos', true)->>'entries')::int AS entries;
DROP VIEW nearest, graph_nearest;
DROP TABLE hm, hm_q;

-- So a halfvec column takes twice the dimensions of a vector column (degree 32: 4012 against
-- 2006), e.g. 3 072-dimension embeddings stored as halfvec, with inserts and VACUUM.
CREATE TABLE hw (id integer PRIMARY KEY, h halfvec(3072));
INSERT INTO hw SELECT g, ARRAY(SELECT sin(g * 0.37 + j * 0.011)::real FROM generate_series(1, 3072) j WHERE g > 0)::halfvec
FROM generate_series(1, 300) g;
CREATE INDEX hw_gr ON hw USING vs_graph (h);
INSERT INTO hw SELECT g, ARRAY(SELECT cos(g * 0.29 + j * 0.007)::real FROM generate_series(1, 3072) j WHERE g > 0)::halfvec
FROM generate_series(301, 400) g;
DELETE FROM hw WHERE id % 7 = 0;
VACUUM hw;
-- a beam as wide as the table: the seq scan's rows
SET vsearch.graph_ef = 1000;
SET enable_seqscan = off;
CREATE TEMP TABLE hw_idx AS SELECT q.id AS qid, x.id, x.d FROM hw q,
  LATERAL (SELECT id, h <-> q.h AS d FROM hw ORDER BY h <-> q.h LIMIT 5) x WHERE q.id % 50 = 1;
RESET enable_seqscan;
RESET vsearch.graph_ef;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
CREATE TEMP TABLE hw_seq AS SELECT q.id AS qid, x.id, x.d FROM hw q,
  LATERAL (SELECT id, h <-> q.h AS d FROM hw ORDER BY h <-> q.h LIMIT 5) x WHERE q.id % 50 = 1;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT count(*) AS rows, (SELECT count(*) FROM (TABLE hw_idx EXCEPT ALL TABLE hw_seq) d) AS differ FROM hw_idx;
SELECT (r->>'entries')::int AS entries, (r->>'dimensions')::int AS dimensions
FROM vsearch_index_check('hw_gr', true) r;
-- beyond the page: the limit for halfvec, and for vector the hint to store halfvec
CREATE TABLE hw_wide (h halfvec(4013), v vector(2007));
CREATE INDEX ON hw_wide USING vs_graph (h);
CREATE INDEX ON hw_wide USING vs_graph (v);
DROP TABLE hw, hw_wide;
