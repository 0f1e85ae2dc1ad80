-- vs_ivfpq over halfvec columns (halfvec_l2_ops, halfvec_ip_ops, halfvec_cosine_ops): training
-- and search see the halves' float values, and the build is seeded, so an index over a halfvec
-- column must answer exactly as one over a vector column holding the same values (the same
-- approximate rows, the same distances), after a build and after inserts; with every list probed
-- and every candidate re-ranked both are the sequential scan.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT setseed(0.61);
CREATE TABLE halfvec_ivf_t (id integer PRIMARY KEY, h halfvec(16), w vector(16));
INSERT INTO halfvec_ivf_t
SELECT g, x, x::vector FROM (
  SELECT g, ARRAY(SELECT (random() * 2 - 1 + (g % 5))::real FROM generate_series(1, 16) WHERE g > 0)::halfvec AS x
  FROM generate_series(1, 2000) g) s;
CREATE INDEX hi_l2 ON halfvec_ivf_t USING vs_ivfpq (h) WITH (lists = 8, m = 4);
CREATE INDEX wi_l2 ON halfvec_ivf_t USING vs_ivfpq (w) WITH (lists = 8, m = 4);
CREATE INDEX hi_ip ON halfvec_ivf_t USING vs_ivfpq (h halfvec_ip_ops) WITH (lists = 8, m = 4);
CREATE INDEX wi_ip ON halfvec_ivf_t USING vs_ivfpq (w vector_ip_ops) WITH (lists = 8, m = 4);
CREATE INDEX hi_cos ON halfvec_ivf_t USING vs_ivfpq (h halfvec_cosine_ops) WITH (lists = 8, m = 4);
CREATE INDEX wi_cos ON halfvec_ivf_t USING vs_ivfpq (w vector_cosine_ops) WITH (lists = 8, m = 4);
CREATE TABLE halfvec_ivf_q AS
SELECT q AS qid, ARRAY(SELECT (random() * 2 - 1 + (q % 5))::real FROM generate_series(1, 16) WHERE q > 0)::halfvec AS v
FROM generate_series(1, 10) q;

-- The 10 nearest under each metric through the halfvec index and through the vector index
CREATE TEMP VIEW both_ways AS
  SELECT 'l2' AS metric, q.qid, hq.*, wq.* FROM halfvec_ivf_q q,
    LATERAL (SELECT array_agg(id) AS h_ids, array_agg(d) AS h_d FROM (
      SELECT id, h <-> q.v AS d FROM halfvec_ivf_t ORDER BY h <-> q.v LIMIT 10) x) hq,
    LATERAL (SELECT array_agg(id) AS w_ids, array_agg(d) AS w_d FROM (
      SELECT id, w <-> q.v::vector AS d FROM halfvec_ivf_t ORDER BY w <-> q.v::vector LIMIT 10) x) wq
  UNION ALL
  SELECT 'ip', q.qid, hq.*, wq.* FROM halfvec_ivf_q q,
    LATERAL (SELECT array_agg(id) AS h_ids, array_agg(d) AS h_d FROM (
      SELECT id, h <#> q.v AS d FROM halfvec_ivf_t ORDER BY h <#> q.v LIMIT 10) x) hq,
    LATERAL (SELECT array_agg(id) AS w_ids, array_agg(d) AS w_d FROM (
      SELECT id, w <#> q.v::vector AS d FROM halfvec_ivf_t ORDER BY w <#> q.v::vector LIMIT 10) x) wq
  UNION ALL
  SELECT 'cosine', q.qid, hq.*, wq.* FROM halfvec_ivf_q q,
    LATERAL (SELECT array_agg(id) AS h_ids, array_agg(d) AS h_d FROM (
      SELECT id, h <=> q.v AS d FROM halfvec_ivf_t ORDER BY h <=> q.v LIMIT 10) x) hq,
    LATERAL (SELECT array_agg(id) AS w_ids, array_agg(d) AS w_d FROM (
      SELECT id, w <=> q.v::vector AS d FROM halfvec_ivf_t ORDER BY w <=> q.v::vector LIMIT 10) x) wq;
SET enable_seqscan = off;
-- one list probed, few candidates re-ranked: approximate answers (counted below)
SET vsearch.ivfpq_probes = 1;
SET vsearch.ivfpq_rerank = 10;
EXPLAIN (COSTS OFF) SELECT id FROM halfvec_ivf_t ORDER BY h <=> (SELECT v FROM halfvec_ivf_q WHERE qid = 1) LIMIT 10;
SELECT metric, count(*) AS queries, count(*) FILTER (WHERE h_ids = w_ids AND h_d = w_d) AS same
FROM both_ways GROUP BY metric ORDER BY metric;
-- after inserts into the built indexes
INSERT INTO halfvec_ivf_t
SELECT g, x, x::vector FROM (
  SELECT g, ARRAY(SELECT (random() * 2 - 1 + (g % 5))::real FROM generate_series(1, 16) WHERE g > 0)::halfvec AS x
  FROM generate_series(2001, 2300) g) s;
SELECT metric, count(*) AS queries, count(*) FILTER (WHERE h_ids = w_ids AND h_d = w_d) AS same
FROM both_ways GROUP BY metric ORDER BY metric;
CREATE TEMP TABLE via_default AS SELECT metric, qid, h_ids FROM both_ways;
-- every list probed and every candidate re-ranked: the halfvec index is the sequential scan
SET vsearch.ivfpq_probes = 8;
SET vsearch.ivfpq_rerank = 5000;
CREATE TEMP TABLE via_index AS SELECT metric, qid, h_ids, h_d FROM both_ways;
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT i.metric, count(*) AS queries, count(*) FILTER (WHERE i.h_ids = s.h_ids AND i.h_d = s.h_d) AS same_as_seqscan,
       count(*) FILTER (WHERE d.h_ids <> s.h_ids) AS approximate_differ
FROM via_index i JOIN both_ways s USING (metric, qid) JOIN via_default d USING (metric, qid)
GROUP BY i.metric ORDER BY i.metric;
RESET enable_indexscan;
RESET enable_bitmapscan;
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;

DROP VIEW both_ways;
DROP TABLE halfvec_ivf_t, halfvec_ivf_q;
