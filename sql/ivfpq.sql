-- vs_ivfpq: options, build, kNN with exact re-ranking, inserts, VACUUM, range, batch, recall
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Runs query with index scans only and with seq scans only and compares the results as multisets
-- (queries number their rows, so order is compared too).
CREATE FUNCTION pg_temp.compare(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  n bigint; missing bigint; extra bigint; line text; used text := 'index NOT used';
BEGIN
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_seqscan', 'on', true);
  EXECUTE 'CREATE TEMP TABLE cmp_seq AS ' || query;
  PERFORM set_config('enable_indexscan', 'on', true);
  PERFORM set_config('enable_bitmapscan', 'on', true);
  PERFORM set_config('enable_seqscan', 'off', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ 'Index Scan using \w+_ivf\w*' THEN used := 'index used'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_idx AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO missing FROM (SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_idx) d;
  SELECT count(*) INTO extra FROM (SELECT * FROM cmp_idx EXCEPT ALL SELECT * FROM cmp_seq) d;
  DROP TABLE cmp_seq, cmp_idx;
  PERFORM set_config('enable_seqscan', 'on', true);
  RETURN format('%s rows, %s missing, %s extra, %s', n, missing, extra, used);
END $$;

-- Both result sets as multisets.
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

-- Data: 1000 rows of dim 8 uniform in [-0.5, 0.5), two NULLs, one zero vector (cosine NaN)
SELECT setseed(0.17);
CREATE TABLE t8 (id int PRIMARY KEY, v vector(8));
INSERT INTO t8 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 1000) i, generate_series(1, 8) j GROUP BY i;
INSERT INTO t8 VALUES (1001, NULL), (1002, NULL), (1003, '[0,0,0,0,0,0,0,0]');
CREATE TABLE q8 (qid int, v vector(8));
INSERT INTO q8 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 5) i, generate_series(1, 8) j GROUP BY i;
ANALYZE t8, q8;

-- Bad options are errors at CREATE INDEX
CREATE INDEX ON t8 USING vs_ivfpq (v) WITH (m = 3);
CREATE INDEX ON t8 USING vs_ivfpq (v) WITH (lists = 5000);
CREATE INDEX ON t8 USING vs_ivfpq (v) WITH (nbits = 5);
CREATE INDEX ON t8 USING vs_ivfpq (v) WITH (probes = 5);
CREATE INDEX ON t8 USING vs_ivfpq (v vector_l1_ops);
CREATE INDEX ON t8 USING vs_ivfpq ((v + v));
CREATE TABLE ivf_wide (v vector(3000));
CREATE INDEX ON ivf_wide USING vs_ivfpq (v) WITH (store_vectors = on);
DROP TABLE ivf_wide;

CREATE INDEX t8_ivf_l2 ON t8 USING vs_ivfpq (v vector_l2_ops) WITH (lists = 4);
CREATE INDEX t8_ivf_ip ON t8 USING vs_ivfpq (v vector_ip_ops) WITH (lists = 4, m = 4);
CREATE INDEX t8_ivf_cos ON t8 USING vs_ivfpq (v vector_cosine_ops) WITH (lists = 4, nbits = 4);

-- The plan: an index scan under the LIMIT
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM t8 ORDER BY v <-> '[0,0,0,0,0,0,0,0.1]' LIMIT 10;
RESET enable_seqscan;

-- Every list probed and every row re-ranked: exactly the seq scan, for every metric
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 5000;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM t8 ORDER BY v %s q.v LIMIT 10) s) x', op))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op ORDER BY op;
-- every row, in order (the NaN cosine row last; NULL vectors are not indexed)
SELECT op, pg_temp.compare(format(
  'SELECT id, row_number() OVER () AS rank FROM
     (SELECT id FROM t8 WHERE v IS NOT NULL ORDER BY v %s ''[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]'' LIMIT 5000) s', op))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op ORDER BY op;

-- Few probes, small re-rank: the scan continues through further rounds and lists when the
-- executor wants more rows, and never stops early
SET vsearch.ivfpq_probes = 1;
SET vsearch.ivfpq_rerank = 10;
SET enable_seqscan = off;
SELECT count(*), count(DISTINCT id), bool_and(id % 50 = 0)
  FROM (SELECT id FROM t8 WHERE id % 50 = 0 ORDER BY v <-> '[0.1,0.1,0.1,0.1,0,0,0,0]' LIMIT 15) s;
SELECT op, count(*) AS rows, count(DISTINCT id) AS distinct_rows
  FROM unnest(ARRAY['<->', '<#>', '<=>']) op,
  LATERAL (SELECT id FROM t8 ORDER BY CASE op WHEN '<->' THEN v <-> '[0.1,0,0,0,0,0,0,0.2]'
                                              WHEN '<#>' THEN v <#> '[0.1,0,0,0,0,0,0,0.2]'
                                              ELSE v <=> '[0.1,0,0,0,0,0,0,0.2]' END) s
  GROUP BY op ORDER BY op;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_rows
  FROM (SELECT id FROM t8 ORDER BY v <#> '[0.1,0,0,0,0,0,0,0.2]') s;
-- the distances the scan returns are the operator's, and each round is in exact order
SELECT bool_and(d = v <-> '[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]')
  FROM (SELECT v, v <-> '[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]' AS d FROM t8
        ORDER BY v <-> '[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]' LIMIT 10) s;
SELECT count(*) FILTER (WHERE d < lag) AS out_of_order
  FROM (SELECT d, lag(d) OVER () FROM (SELECT v <-> '[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]' AS d FROM t8
        ORDER BY v <-> '[0.3,0.1,-0.2,0,0,0.1,0.2,0.3]' LIMIT 10) s) s2;
-- NULL and wrong-dimension query vectors
SET plan_cache_mode = force_generic_plan;
PREPARE knn(vector) AS SELECT id FROM t8 ORDER BY v <-> $1 LIMIT 3;
EXECUTE knn(NULL);
DEALLOCATE knn;
RESET plan_cache_mode;
SELECT id FROM t8 ORDER BY v <-> '[1,2,3]' LIMIT 1;
RESET enable_seqscan;

-- store_vectors = on: candidates re-ranked from the index's copies
CREATE TABLE s8 AS SELECT * FROM t8;
CREATE INDEX s8_ivf_l2 ON s8 USING vs_ivfpq (v) WITH (lists = 4, store_vectors = on);
CREATE INDEX s8_ivf_cos ON s8 USING vs_ivfpq (v vector_cosine_ops) WITH (lists = 4, store_vectors = on);
-- an expression index needs them
CREATE INDEX s8_ivf_expr ON s8 USING vs_ivfpq ((v + v)) WITH (lists = 4, store_vectors = on);
ANALYZE s8;
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 5000;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM s8 ORDER BY v %s q.v LIMIT 10) s) x', op))
FROM unnest(ARRAY['<->', '<=>']) op ORDER BY op;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM s8 ORDER BY (v + v) <-> q.v LIMIT 10) s) x');
-- The batch function over them: the index scan's rows at the operator's distances, taken from
-- the re-ranked search (only the rows' visibility is read), then with dead rows not vacuumed
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;
SET enable_seqscan = off;
CREATE FUNCTION pg_temp.batch_same() RETURNS SETOF text LANGUAGE sql AS $$
SELECT format('%s k=%s: %s', metric, k, pg_temp.same(
  format('SELECT q.qid, x.id, x.d FROM q8 q, LATERAL (
            SELECT id, v %s q.v AS d FROM s8 ORDER BY v %s q.v LIMIT %s) x', op, op, k),
  format('SELECT b.query, t.id, b.distance FROM vsearch_knn_batch(''s8_ivf_%s'',
            ARRAY(SELECT v FROM q8 ORDER BY qid), %s) b
          JOIN s8 t ON t.ctid = b.row_ctid', metric, k)))
FROM (VALUES ('l2', '<->'), ('cos', '<=>')) m(metric, op),
     unnest(ARRAY[1, 10, 150]) k ORDER BY metric, k $$;
SELECT pg_temp.batch_same();
BEGIN;
DELETE FROM s8 WHERE id % 2 = 0;
SELECT pg_temp.batch_same();
ROLLBACK;
RESET enable_seqscan;
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 5000;

-- Inserts after the build, then DELETE / UPDATE and VACUUM: still exactly the seq scan
INSERT INTO t8 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(2001, 2300) i, generate_series(1, 8) j GROUP BY i;
INSERT INTO t8 VALUES (2301, NULL);
INSERT INTO s8 SELECT * FROM t8 WHERE id > 2000;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM %s ORDER BY v %s q.v LIMIT 20) s) x', tab, op))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op, unnest(ARRAY['t8', 's8']) tab
WHERE tab = 't8' OR op <> '<#>' ORDER BY tab, op;
-- and after inserts (on the lists, with their stored vectors)
SET enable_seqscan = off;
SELECT pg_temp.batch_same();
RESET enable_seqscan;
DELETE FROM t8 WHERE id % 3 = 0;
UPDATE t8 SET v = v + v WHERE id % 7 = 0;
DELETE FROM s8 WHERE id % 3 = 0;
VACUUM t8;
VACUUM s8;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM %s ORDER BY v %s q.v LIMIT 20) s) x', tab, op))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op, unnest(ARRAY['t8', 's8']) tab
WHERE tab = 't8' OR op <> '<#>' ORDER BY tab, op;
SET enable_seqscan = off;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_rows, (SELECT count(v) FROM t8) AS non_null
  FROM (SELECT id FROM t8 ORDER BY v <-> '[0,0,0,0,0,0,0,0]') s;
RESET enable_seqscan;
-- inserts after VACUUM go on the compacted lists
INSERT INTO t8 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(3001, 3100) i, generate_series(1, 8) j GROUP BY i;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM t8 ORDER BY v <-> q.v LIMIT 20) s) x');

-- Range operators: approximate candidates (estimated distance within the radius in the probed
-- lists), rechecked exactly: never a row outside the radius
CREATE FUNCTION pg_temp.range_check(op text, r float8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE exact bigint; found bigint; wrong bigint;
BEGIN
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  EXECUTE format('CREATE TEMP TABLE r_seq AS SELECT id FROM t8
                  WHERE v %s sphere(''[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]'', %s)', op, r);
  PERFORM set_config('enable_indexscan', 'on', true);
  PERFORM set_config('enable_bitmapscan', 'on', true);
  PERFORM set_config('enable_seqscan', 'off', true);
  EXECUTE format('CREATE TEMP TABLE r_idx AS SELECT id FROM t8
                  WHERE v %s sphere(''[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]'', %s)', op, r);
  PERFORM set_config('enable_seqscan', 'on', true);
  SELECT count(*) INTO exact FROM r_seq;
  SELECT count(*) INTO found FROM r_idx JOIN r_seq USING (id);
  SELECT count(*) INTO wrong FROM (SELECT id FROM r_idx EXCEPT ALL SELECT id FROM r_seq) d;
  DROP TABLE r_seq, r_idx;
  RETURN format('nonempty %s, no wrong rows %s, found >= 70%% %s',
                exact > 0, wrong = 0, found >= 0.7 * exact);
END $$;
SELECT op, pg_temp.range_check(op, r)
FROM (VALUES ('<<->>', 0.6), ('<<#>>', -0.1), ('<<=>>', 0.5)) x(op, r) ORDER BY op;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM t8 WHERE v <<->> sphere('[0,0,0,0,0,0,0,0]', 0.5);
SELECT count(*) > 0 FROM t8 WHERE v <<->> sphere('[0,0,0,0,0,0,0,0]', 0.5);
SELECT id FROM t8 WHERE v <<->> sphere(NULL, 0.5);
RESET enable_seqscan;

-- Batch functions: the same rows as the index scan, per query (default probes and re-rank),
-- and at full probes / re-rank the seq scan's.  (Rows of later rounds can be nearer than rows of
-- earlier ones, so the sets are compared, not the ranks.)
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;
SET enable_seqscan = off;
SELECT metric, k, pg_temp.same(
  format('SELECT q.qid, x.id, x.d FROM q8 q, LATERAL (
            SELECT id, v %s q.v AS d FROM t8 ORDER BY v %s q.v LIMIT %s) x', op, op, k),
  format('SELECT b.query, t.id, b.distance FROM vsearch_knn_batch(''t8_ivf_%s'',
            ARRAY(SELECT v FROM q8 ORDER BY qid), %s) b
          JOIN t8 t ON t.ctid = b.row_ctid', metric, k))
FROM (VALUES ('l2', '<->'), ('ip', '<#>'), ('cos', '<=>')) m(metric, op),
     unnest(ARRAY[1, 10, 150]) k ORDER BY metric, k;
SELECT bool_and(b.distance = t.v <-> q.v)
  FROM vsearch_knn_batch('t8_ivf_l2', ARRAY(SELECT v FROM q8 ORDER BY qid), 10) b
  JOIN t8 t ON t.ctid = b.row_ctid JOIN q8 q ON q.qid = b.query;
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 5000;
SELECT pg_temp.same(
  'SELECT q.qid, x.id FROM q8 q, LATERAL (SELECT id FROM t8 WHERE v IS NOT NULL
     ORDER BY v <-> q.v LIMIT 10) x',
  'SELECT b.query, t.id FROM vsearch_knn_batch(''t8_ivf_l2'', ARRAY(SELECT v FROM q8 ORDER BY qid), 10) b
     JOIN t8 t ON t.ctid = b.row_ctid');
SELECT pg_temp.same(
  'SELECT q.qid, t.id FROM q8 q, t8 t WHERE t.v <<->> sphere(q.v, 0.6)',
  'SELECT b.query, t.id FROM vsearch_range_batch(''t8_ivf_l2'', ARRAY(SELECT v FROM q8 ORDER BY qid), 0.6) b
     JOIN t8 t ON t.ctid = b.row_ctid');
RESET enable_seqscan;
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;

-- An empty table: no quantizer, inserted rows are searched exactly
CREATE TABLE e8 (id int, v vector(8));
CREATE INDEX e8_ivf ON e8 USING vs_ivfpq (v) WITH (lists = 10);
INSERT INTO e8 SELECT id, v FROM t8 WHERE id <= 1000;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM e8 ORDER BY v <-> q.v LIMIT 10) s) x');
DELETE FROM e8 WHERE id % 2 = 0;
VACUUM e8;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM e8 ORDER BY v <-> q.v LIMIT 10) s) x');
SELECT pg_temp.same(
  'SELECT q.qid, x.id FROM q8 q, LATERAL (SELECT id FROM e8 WHERE v IS NOT NULL ORDER BY v <-> q.v LIMIT 5) x',
  'SELECT b.query, t.id FROM vsearch_knn_batch(''e8_ivf'', ARRAY(SELECT v FROM q8 ORDER BY qid), 5) b
     JOIN e8 t ON t.ctid = b.row_ctid');
-- REINDEX trains the quantizer
REINDEX INDEX e8_ivf;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM e8 ORDER BY v <-> q.v LIMIT 5) s) x');
-- too few rows to train (fewer than 2^nbits = 256), but enough for nbits = 4
CREATE TABLE few (id int, v vector(8));
INSERT INTO few SELECT id, v FROM t8 WHERE id <= 100;
CREATE INDEX few_ivf ON few USING vs_ivfpq (v);
CREATE INDEX few_ivf4 ON few USING vs_ivfpq (v) WITH (nbits = 4, lists = 2);
DROP INDEX few_ivf;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM few ORDER BY v <-> q.v LIMIT 5) s) x');
-- a column without a dimension: the first vector fixes it
CREATE TABLE eany (id int, v vector);
CREATE INDEX eany_ivf ON eany USING vs_ivfpq (v vector_cosine_ops) WITH (store_vectors = on);
INSERT INTO eany VALUES (1, '[1,2,3]'), (2, '[3,2,1]'), (3, NULL);
INSERT INTO eany VALUES (4, '[1,2]');
SET enable_seqscan = off;
SELECT id FROM eany ORDER BY v <=> '[1,2,2]';
RESET enable_seqscan;

-- Recall on clustered data at the default settings (probes 10, re-rank 100)
SELECT setseed(0.5);
CREATE TABLE centers (c int, v float4[]);
INSERT INTO centers SELECT c, array_agg((random() * 2 - 1)::float4 ORDER BY j)
  FROM generate_series(1, 40) c, generate_series(1, 16) j GROUP BY c;
CREATE TABLE clus (id int PRIMARY KEY, v vector(16));
INSERT INTO clus SELECT i, (SELECT array_agg(x.v[j] + (random() - 0.5) * 0.3 ORDER BY j)
                            FROM generate_series(1, 16) j)::vector
  FROM generate_series(1, 5000) i JOIN centers x ON x.c = 1 + i % 40;
CREATE TABLE cq (qid int, v vector(16));
INSERT INTO cq SELECT i, (SELECT array_agg(x.v[j] + (random() - 0.5) * 0.3 ORDER BY j)
                          FROM generate_series(1, 16) j)::vector
  FROM generate_series(1, 20) i JOIN centers x ON x.c = 1 + (i * 7) % 40;
CREATE INDEX clus_ivf ON clus USING vs_ivfpq (v);
ANALYZE clus, cq;
-- The planner's choice under LIMIT: re-ranking 100 candidates reads up to 100 random heap pages,
-- which on this small table (about 60 pages) costs more than a seq scan with the default
-- random_page_cost; with an SSD's random_page_cost, or with store_vectors, the index wins.
EXPLAIN (COSTS OFF) SELECT id FROM clus ORDER BY v <-> '[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]' LIMIT 10;
SET random_page_cost = 1.1;
EXPLAIN (COSTS OFF) SELECT id FROM clus ORDER BY v <-> '[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]' LIMIT 10;
RESET random_page_cost;
CREATE INDEX clus_ivf_stored ON clus USING vs_ivfpq (v) WITH (store_vectors = on);
EXPLAIN (COSTS OFF) SELECT id FROM clus ORDER BY v <-> '[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]' LIMIT 10;
-- a tiny table keeps the seq scan
EXPLAIN (COSTS OFF) SELECT id FROM few ORDER BY v <-> '[0,0,0,0,0,0,0,0]' LIMIT 10;
DROP INDEX clus_ivf_stored;
CREATE TEMP TABLE approx AS SELECT q.qid, x.id FROM cq q,
  LATERAL (SELECT id FROM clus ORDER BY v <-> q.v LIMIT 10) x;
SET enable_indexscan = off;
CREATE TEMP TABLE exact AS SELECT q.qid, x.id FROM cq q,
  LATERAL (SELECT id FROM clus ORDER BY v <-> q.v LIMIT 10) x;
RESET enable_indexscan;
SELECT count(*) AS approx_rows, (SELECT count(*) FROM approx a JOIN exact e USING (qid, id)) / 200.0 >= 0.9
  AS recall_at_10_ge_0_9 FROM approx;

-- Temporary and unlogged tables
CREATE TEMP TABLE tmp8 AS SELECT * FROM t8 WHERE v IS NOT NULL;
CREATE INDEX tmp8_ivf ON tmp8 USING vs_ivfpq (v) WITH (lists = 4);
CREATE UNLOGGED TABLE unl8 AS SELECT * FROM t8 WHERE v IS NOT NULL;
CREATE INDEX unl8_ivf ON unl8 USING vs_ivfpq (v) WITH (lists = 4);
SET vsearch.ivfpq_probes = 4;
SET vsearch.ivfpq_rerank = 5000;
SELECT tab, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q8 q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM %s ORDER BY v <-> q.v LIMIT 10) s) x', tab))
FROM unnest(ARRAY['tmp8', 'unl8']) tab ORDER BY tab;
-- The temporary index's searches use the backend's copy of its quantizer, the unlogged one's
-- read its pages in place: built from the same rows, they answer alike at any setting
SET vsearch.ivfpq_probes = 1;
SET vsearch.ivfpq_rerank = 20;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM tmp8 ORDER BY v <-> '[0,0,0,0,0,0,0,0.1]' LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM unl8 ORDER BY v <-> '[0,0,0,0,0,0,0,0.1]' LIMIT 10;
SELECT pg_temp.same(
  'SELECT q.qid, x.rank, x.id, x.d FROM q8 q, LATERAL (SELECT id, v <-> q.v AS d,
     row_number() OVER () AS rank FROM (SELECT id, v FROM tmp8 ORDER BY v <-> q.v LIMIT 10) s) x',
  'SELECT q.qid, x.rank, x.id, x.d FROM q8 q, LATERAL (SELECT id, v <-> q.v AS d,
     row_number() OVER () AS rank FROM (SELECT id, v FROM unl8 ORDER BY v <-> q.v LIMIT 10) s) x');
RESET enable_seqscan;
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;

-- Centroids longer than a page (2100 floats): their rows run on over the pages, and searches use
-- the backend's copy of the quantizer
SELECT setseed(0.5);
CREATE TABLE ivf_long_rows (id int, v vector(2100));
INSERT INTO ivf_long_rows SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 300) i, generate_series(1, 2100) j GROUP BY i;
CREATE INDEX long_rows_ivf ON ivf_long_rows USING vs_ivfpq (v) WITH (lists = 2, nbits = 4);
SELECT (vsearch_index_check('long_rows_ivf', true))->>'entries' AS long_rows_entries;
SET vsearch.ivfpq_probes = 2;
SET vsearch.ivfpq_rerank = 5000;
SELECT pg_temp.compare(
  'SELECT q.id AS qid, x.rank, x.id FROM (SELECT * FROM ivf_long_rows WHERE id <= 3) q,
     LATERAL (SELECT id, row_number() OVER () AS rank
       FROM (SELECT id FROM ivf_long_rows ORDER BY v <-> q.v LIMIT 10) s) x');
-- the batch function re-ranks their rows from vectors stored out of line (TOAST), read through
-- one scan of the TOAST index kept open for the call: the seq scan's rows at its distances; so
-- after updates (new values, the old ones dead) and for values stored compressed (STORAGE
-- extended, read the usual way)
CREATE TEMP VIEW long_rows_batch_differs AS
SELECT count(*) AS differ FROM (
  SELECT b.query, t.id, b.distance
    FROM vsearch_knn_batch('long_rows_ivf', ARRAY(SELECT v FROM ivf_long_rows
                                                  WHERE id IN (1, 2, 3, 301) ORDER BY id), 10) b
    JOIN ivf_long_rows t ON t.ctid = b.row_ctid
  EXCEPT
  SELECT q.n, s.id, s.d
    FROM (SELECT row_number() OVER (ORDER BY id) AS n, v FROM ivf_long_rows
           WHERE id IN (1, 2, 3, 301)) q,
         LATERAL (SELECT id, v <-> q.v AS d FROM ivf_long_rows ORDER BY v <-> q.v, id LIMIT 10) s) x;
SELECT differ AS batch_differs_from_scan FROM long_rows_batch_differs;
UPDATE ivf_long_rows SET v = v + v WHERE id % 10 = 0;
SELECT differ AS after_updates FROM long_rows_batch_differs;
ALTER TABLE ivf_long_rows ALTER COLUMN v SET STORAGE extended;
INSERT INTO ivf_long_rows
  SELECT i, (array_fill(0, ARRAY[2095]) || ARRAY[i, 1, 0, -i, 0.5])::vector
    FROM generate_series(301, 320) i;
SELECT count(*) AS compressed_rows FROM ivf_long_rows
 WHERE id > 300 AND pg_column_compression(v) IS NOT NULL;
SELECT differ AS with_compressed_rows FROM long_rows_batch_differs;
DROP VIEW long_rows_batch_differs;
RESET vsearch.ivfpq_probes;
RESET vsearch.ivfpq_rerank;
DROP TABLE ivf_long_rows;

-- Settings
SHOW vsearch.ivfpq_probes;
SHOW vsearch.ivfpq_rerank;
SET vsearch.ivfpq_probes = 0;
SET vsearch.ivfpq_rerank = 0;

DROP TABLE t8, q8, s8, e8, few, eany, centers, clus, cq, unl8;
