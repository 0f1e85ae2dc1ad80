-- vs_flat's sketches: searches in a backend read a sketch of every row and only the rows the
-- sketches do not rule out.  Answers must be the seq scan's whatever the sketches skip: kNN and
-- range, every metric, vector and halfvec rows, after deletes, VACUUM and inserts, and equal to an
-- index WITH (sketches = off); vsearch_index_check compares every sketch with its row.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

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
    IF line ~ 'Index Scan (using|on) sk_\w+' THEN used := 'index used'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_idx AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO missing FROM (SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_idx) d;
  SELECT count(*) INTO extra FROM (SELECT * FROM cmp_idx EXCEPT ALL SELECT * FROM cmp_seq) d;
  DROP TABLE cmp_seq, cmp_idx;
  RETURN format('%s rows, %s missing, %s extra, %s', n, missing, extra, used);
END $$;

-- A query's rows numbered in their order per query.
CREATE FUNCTION pg_temp.ranked(query text) RETURNS TABLE (qid int, rank bigint, id int)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE 'SELECT qid, row_number() OVER (PARTITION BY qid), id FROM (' || query || ') r';
END $$;

-- Clustered rows (12 centres, where sketches rule most rows out), one far outlier, a zero row,
-- rows with a constant value and NULLs; queries near centres and one copy of a row.
SELECT setseed(0.17);
CREATE TABLE sk (id int PRIMARY KEY, v vector(96));
INSERT INTO sk SELECT i, array_agg((i % 12) * 3 + sin(i * j) + (random() - 0.5) ORDER BY j)::vector
  FROM generate_series(1, 3000) i, generate_series(1, 96) j GROUP BY i;
INSERT INTO sk SELECT 3001, array_agg(6e4::real ORDER BY j)::vector FROM generate_series(1, 96) j;
INSERT INTO sk SELECT 3002, array_agg(0::real ORDER BY j)::vector FROM generate_series(1, 96) j;
INSERT INTO sk SELECT 3003, array_agg(7.25::real ORDER BY j)::vector FROM generate_series(1, 96) j;
INSERT INTO sk VALUES (3004, NULL);
CREATE TABLE skq (qid int, v vector(96));
INSERT INTO skq SELECT i, array_agg((i % 12) * 3 + cos(i + j) + (random() - 0.5) ORDER BY j)::vector
  FROM generate_series(1, 6) i, generate_series(1, 96) j GROUP BY i;
INSERT INTO skq SELECT 7, v FROM sk WHERE id = 1234;
-- binary16 rows keep sketches from about 500 dimensions (shorter ones: a sketch page per data page)
CREATE TABLE skh (id int, v halfvec(512));
INSERT INTO skh SELECT i, array_agg((i % 12) * 3 + sin(i * j) + (random() - 0.5) ORDER BY j)::halfvec
  FROM generate_series(1, 1500) i, generate_series(1, 512) j GROUP BY i;
CREATE TABLE skhq (qid int, v halfvec(512));
INSERT INTO skhq SELECT i, array_agg((i % 12) * 3 + cos(i + j) + (random() - 0.5) ORDER BY j)::halfvec
  FROM generate_series(1, 6) i, generate_series(1, 512) j GROUP BY i;
ANALYZE sk, skq, skh, skhq;

CREATE INDEX sk_l2 ON sk USING vs_flat (v vector_l2_ops);
CREATE INDEX sk_ip ON sk USING vs_flat (v vector_ip_ops);
CREATE INDEX sk_cos ON sk USING vs_flat (v vector_cosine_ops);
CREATE INDEX sk_h_l2 ON skh USING vs_flat (v halfvec_l2_ops);
CREATE INDEX sk_h_cos ON skh USING vs_flat (v halfvec_cosine_ops);

-- Sketch pages: a vector(96) index of 3 000 rows takes about 1.4 times the pages of one without
-- (a third more for the sketches, and the last run of 8 sketch pages is reserved whole)
CREATE TABLE sk_off AS SELECT * FROM sk;
CREATE INDEX sk_off_l2 ON sk_off USING vs_flat (v) WITH (sketches = off);
CREATE INDEX sk_off_ip ON sk_off USING vs_flat (v vector_ip_ops) WITH (sketches = off);
CREATE INDEX sk_off_cos ON sk_off USING vs_flat (v vector_cosine_ops) WITH (sketches = off);
SELECT round(pg_relation_size('sk_l2')::numeric / pg_relation_size('sk_off_l2'), 1) AS size_ratio;
SELECT r->>'index' AS index, (r->>'entries')::bigint = (r->>'heap_rows')::bigint AS complete,
       (r->>'data_pages')::int < (r->>'blocks')::int - 1 AS sketch_pages
FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass, true) r
WHERE c.relname LIKE 'sk\_%' AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'vs_flat')
ORDER BY 1;

-- kNN, top 1 and 10, every metric
SELECT op, k, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM skq q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM sk ORDER BY v %s q.v LIMIT %s) s) x', op, k))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op, unnest(ARRAY[1, 10]) k ORDER BY op, k;
-- LIMIT beyond the table: every row, in the order of an index without sketches (a seq scan
-- differs by its NULL row and the order of ties, flat_knn.sql)
SET enable_seqscan = off;
SELECT op, count(*) AS rows, count(*) FILTER (WHERE a.id IS DISTINCT FROM b.id) AS differ
FROM unnest(ARRAY['<->', '<#>', '<=>']) op,
  LATERAL (SELECT * FROM pg_temp.ranked(format(
    'SELECT q.qid, s.id FROM skq q, LATERAL (SELECT id FROM sk ORDER BY v %s q.v LIMIT 4000) s', op))) a
  FULL JOIN LATERAL (SELECT * FROM pg_temp.ranked(format(
    'SELECT q.qid, s.id FROM skq q, LATERAL (SELECT id FROM sk_off ORDER BY v %s q.v LIMIT 4000) s', op))) b
  USING (qid, rank)
GROUP BY op ORDER BY op;
RESET enable_seqscan;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM skhq q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM skh ORDER BY v %s q.v LIMIT 10) s) x', op))
FROM unnest(ARRAY['<->', '<=>']) op ORDER BY op;
-- a filter that keeps few rows: the scan comes back for more
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM skq q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM sk WHERE id % 29 = 0 ORDER BY v <-> q.v LIMIT 15) s) x');

-- Range: the rows within a radius (about a cluster's)
SELECT pg_temp.compare(
  'SELECT q.qid, s.id FROM skq q, sk s WHERE s.v <<->> sphere(q.v, 9.5)');
SELECT pg_temp.compare(
  'SELECT q.qid, s.id FROM skq q, sk s WHERE s.v <<=>> sphere(q.v, 0.002)');

-- Deletes, VACUUM (sketches move with their rows) and inserts (into new groups too)
DELETE FROM sk WHERE id % 3 = 0 OR id BETWEEN 1200 AND 1500;
VACUUM sk;
INSERT INTO sk SELECT i, array_agg((i % 12) * 3 + sin(i * j) + (random() - 0.5) ORDER BY j)::vector
  FROM generate_series(5001, 6500) i, generate_series(1, 96) j GROUP BY i;
SELECT op, pg_temp.compare(format(
  'SELECT q.qid, x.rank, x.id FROM skq q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM sk ORDER BY v %s q.v LIMIT 10) s) x', op))
FROM unnest(ARRAY['<->', '<#>', '<=>']) op ORDER BY op;
SELECT r->>'index' AS index, (r->>'entries')::bigint = (r->>'heap_rows')::bigint AS complete
FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass, true) r
WHERE c.relname IN ('sk_l2', 'sk_ip', 'sk_cos') ORDER BY 1;

-- An index built on an empty table takes sketches with its first row
CREATE TABLE sk_empty (id int, v vector);
CREATE INDEX sk_empty_l2 ON sk_empty USING vs_flat (v);
INSERT INTO sk_empty SELECT id, v FROM sk WHERE id < 2000;
SELECT pg_temp.compare(
  'SELECT q.qid, x.rank, x.id FROM skq q, LATERAL (SELECT id, row_number() OVER () AS rank
     FROM (SELECT id FROM sk_empty ORDER BY v <-> q.v LIMIT 10) s) x');
SELECT (r->>'entries')::bigint AS entries FROM vsearch_index_check('sk_empty_l2', true) r;

-- The option
CREATE INDEX ON sk USING vs_flat (v) WITH (sketches = maybe);
CREATE INDEX ON sk USING vs_flat (v) WITH (sketch = on);
