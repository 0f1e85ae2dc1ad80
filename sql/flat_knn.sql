-- vs_flat: kNN through the index equals the seq scan, for every metric, dims 3 and 64
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Runs query twice, once with index scans only and once with seq scans only, and compares the
-- results as multisets (queries number their rows, so order is compared too).  Reports the row
-- count, the differences and whether the index plan really used a vs_flat index.
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
    IF line ~ 'Index Scan using \w+_flat_\w+' THEN used := 'index used'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_idx AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO missing FROM (SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_idx) d;
  SELECT count(*) INTO extra FROM (SELECT * FROM cmp_idx EXCEPT ALL SELECT * FROM cmp_seq) d;
  DROP TABLE cmp_seq, cmp_idx;
  RETURN format('%s rows, %s missing, %s extra, %s', n, missing, extra, used);
END $$;

-- Data: 2000 rows of dim 3 and 1500 of dim 64, uniform in [-0.5, 0.5), a few NULLs, one zero
-- vector (its cosine distance is NaN, which sorts last)
SELECT setseed(0.42);
CREATE TABLE t3 (id int PRIMARY KEY, v vector(3));
INSERT INTO t3 SELECT i, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector
  FROM generate_series(1, 2000) i;
INSERT INTO t3 VALUES (2001, NULL), (2002, NULL), (2003, '[0,0,0]');
CREATE TABLE t64 (id int PRIMARY KEY, v vector(64));
INSERT INTO t64 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 1500) i, generate_series(1, 64) j GROUP BY i;
INSERT INTO t64 VALUES (1501, NULL);
-- queries: 5 of each dimension
CREATE TABLE q3 (qid int, v vector(3));
INSERT INTO q3 SELECT i, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector
  FROM generate_series(1, 5) i;
CREATE TABLE q64 (qid int, v vector(64));
INSERT INTO q64 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 5) i, generate_series(1, 64) j GROUP BY i;
ANALYZE t3, t64, q3, q64;

CREATE INDEX t3_flat_l2 ON t3 USING vs_flat (v vector_l2_ops);
CREATE INDEX t3_flat_ip ON t3 USING vs_flat (v vector_ip_ops);
CREATE INDEX t3_flat_cos ON t3 USING vs_flat (v vector_cosine_ops);
CREATE INDEX t3_flat_l1 ON t3 USING vs_flat (v vector_l1_ops);
CREATE INDEX t64_flat_l2 ON t64 USING vs_flat (v vector_l2_ops);
CREATE INDEX t64_flat_ip ON t64 USING vs_flat (v vector_ip_ops);
CREATE INDEX t64_flat_cos ON t64 USING vs_flat (v vector_cosine_ops);
CREATE INDEX t64_flat_l1 ON t64 USING vs_flat (v vector_l1_ops);

-- The plan: an index scan under the LIMIT
EXPLAIN (COSTS OFF) SELECT id FROM t3 ORDER BY v <-> '[0.1,0.2,0.3]' LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM t64 ORDER BY v <=> (SELECT v FROM q64 WHERE qid = 1) LIMIT 10;

-- Top 10 per query, ranked, for every metric and both dimensions
SELECT op, dim, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q%s q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM t%s ORDER BY v %s q.v LIMIT 10) s) x', dim, dim, op))
FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op, unnest(ARRAY[3, 64]) dim ORDER BY dim, op;

-- A filter rejects most rows: the scan must continue past its first batch
SELECT op, dim, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM q%s q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM t%s WHERE id %% 7 = 0 ORDER BY v %s q.v LIMIT 20) s) x',
  dim, dim, op))
FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op, unnest(ARRAY[3, 64]) dim ORDER BY dim, op;

-- A filter keeps almost nothing: the scan runs to the end of the index
SELECT op, pg_temp.compare(format(
  'SELECT id, row_number() OVER () AS rank FROM
     (SELECT id FROM t3 WHERE id %% 997 = 0 ORDER BY v %s ''[0.1,-0.2,0.3]'' LIMIT 5) s', op))
FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op ORDER BY op;

-- LIMIT beyond the table: every row in order (the NaN cosine row last).  NULL vectors are not
-- indexed: the seq scan's 2 rows with a NULL distance (sorted last) are the only difference.
SELECT op, pg_temp.compare(format(
  'SELECT id, row_number() OVER () AS rank FROM
     (SELECT id FROM t3 ORDER BY v %s ''[0.3,0.1,-0.2]'' LIMIT 5000) s', op))
FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op ORDER BY op;
SET enable_seqscan = off;
SELECT count(*), count(*) FILTER (WHERE v IS NULL) AS nulls
  FROM (SELECT * FROM t3 ORDER BY v <-> '[0.3,0.1,-0.2]' LIMIT 5000) s;
SELECT id FROM t3 ORDER BY v <=> '[0.3,0.1,-0.2]' OFFSET 2000;
-- the distances the index scan returns are the operator's
SELECT bool_and(d = v <#> '[0.3,0.1,-0.2]')
  FROM (SELECT v, v <#> '[0.3,0.1,-0.2]' AS d FROM t3 ORDER BY v <#> '[0.3,0.1,-0.2]' LIMIT 50) s;
RESET enable_seqscan;

-- Ordering by two distances: the index orders by the first, the executor does the rest
SET enable_seqscan = off;
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM t3
     ORDER BY v <-> ''[0.1,0.1,0.1]'', v <-> ''[0.2,0.2,0.2]'' LIMIT 15) s');
RESET enable_seqscan;

-- A query vector of another dimension is an error; a NULL query vector finds nothing
SET enable_seqscan = off;
SELECT id FROM t3 ORDER BY v <-> '[1,2]' LIMIT 1;
SELECT id FROM t64 ORDER BY v <#> '[1,2,3]' LIMIT 1;
SET plan_cache_mode = force_generic_plan;
PREPARE knn(vector) AS SELECT id FROM t3 ORDER BY v <-> $1 LIMIT 3;
EXPLAIN (COSTS OFF) EXECUTE knn(NULL);
EXECUTE knn(NULL);
EXECUTE knn('[0,0,0]');
DEALLOCATE knn;
RESET plan_cache_mode;
RESET enable_seqscan;

-- An empty table, with and without a dimension
CREATE TABLE empty3 (id int, v vector(3));
CREATE INDEX ON empty3 USING vs_flat (v);
CREATE TABLE empty_any (id int, v vector);
CREATE INDEX ON empty_any USING vs_flat (v vector_cosine_ops);
SET enable_seqscan = off;
SELECT id FROM empty3 ORDER BY v <-> '[1,2,3]' LIMIT 5;
SELECT id FROM empty_any ORDER BY v <=> '[1,2,3,4,5]' LIMIT 5;
RESET enable_seqscan;

-- Costs: a tiny table keeps the seq scan, a big one uses the index under LIMIT
CREATE TABLE tiny (id int, v vector(3));
INSERT INTO tiny VALUES (1, '[1,1,1]'), (2, '[2,2,2]'), (3, '[3,3,3]');
CREATE INDEX ON tiny USING vs_flat (v);
ANALYZE tiny;
EXPLAIN (COSTS OFF) SELECT id FROM tiny ORDER BY v <-> '[0,0,0]' LIMIT 1;
-- without LIMIT every row would go through the executor's reorder queue: sorting is cheaper
EXPLAIN (COSTS OFF) SELECT id FROM t3 ORDER BY v <-> '[0.1,0.2,0.3]';
EXPLAIN (COSTS OFF) SELECT id FROM t3 ORDER BY v <-> '[0.1,0.2,0.3]' LIMIT 100;
SELECT id FROM tiny ORDER BY v <-> '[0,0,0]' LIMIT 1;
