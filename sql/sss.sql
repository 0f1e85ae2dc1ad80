-- vs_sss: SSS pivot tables, exact range and kNN on text (edit distance) and vectors (L2, L1):
-- index answers equal the seq scan's; options; inserts, VACUUM, empty tables.  In a UTF-8
-- database of its own (characters are code points whatever the cluster's locale).
SET client_min_messages = warning;
CREATE DATABASE sss_utf8 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c sss_utf8
SET client_encoding = 'UTF8';
SET client_min_messages = warning;
CREATE EXTENSION vsearch;
RESET client_min_messages;

CREATE TABLE words (id int PRIMARY KEY, word text);
INSERT INTO words
SELECT i, CASE WHEN i % 97 = 0 THEN NULL WHEN i % 331 = 0 THEN '' ELSE
         (SELECT string_agg((ARRAY['ca','sa','ño','me','to','rá','pe','lo','mu','ti','ü','s',
                                   'a','r','c'])[1 + (hashint4(i * 7 + j) & 2147483647) % 15], '')
            FROM generate_series(1, 1 + (hashint4(i) & 2147483647) % 4) j) END
FROM generate_series(1, 3000) i;
CREATE TABLE q (qid int, w text);
INSERT INTO q SELECT row_number() OVER (), w FROM (VALUES ('casa'), ('año'), ('catoño'), (''),
  ('meramuti'), ('ñ'), ('zzzzzz'), ('peloca'), ('üsa'), ('tomemú'), (repeat('ca', 40))) v(w);
INSERT INTO q SELECT 100 + id, CASE WHEN id % 2 = 0 THEN word ELSE overlay(word placing 'x' from 1 for 1) END
  FROM words WHERE id % 211 = 5 AND word <> '';

CREATE INDEX words_sss ON words USING vs_sss (word);
EXPLAIN (COSTS OFF) SELECT id FROM words WHERE word <<~>> sphere('casa'::text, 1);
EXPLAIN (COSTS OFF) SELECT id FROM words ORDER BY word <~> 'casa' LIMIT 5;

-- Runs a query by seq scan, bitmap scan and index scan; compares the results (as multisets)
CREATE FUNCTION pg_temp.compare(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  n bigint; bad_bitmap bigint; bad_index bigint; line text; plans text := '';
BEGIN
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  EXECUTE 'CREATE TEMP TABLE cmp_seq AS ' || query;
  PERFORM set_config('enable_seqscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'on', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ 'Bitmap Index Scan on \w*_sss\w*' THEN plans := 'bitmap'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_bitmap AS ' || query;
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexscan', 'on', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ '(^| )Index Scan using \w*_sss\w*' THEN plans := plans || '+index'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_index AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO bad_bitmap FROM ((SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_bitmap)
    UNION ALL (SELECT * FROM cmp_bitmap EXCEPT ALL SELECT * FROM cmp_seq)) d;
  SELECT count(*) INTO bad_index FROM ((SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_index)
    UNION ALL (SELECT * FROM cmp_index EXCEPT ALL SELECT * FROM cmp_seq)) d;
  DROP TABLE cmp_seq, cmp_bitmap, cmp_index;
  RETURN format('%s rows, %s/%s differ, %s', n, bad_bitmap, bad_index, plans);
END $$;

-- Text: range at radii 0..3, kNN distances by rank, range with ORDER BY
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN words w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[0, 1, 2, 3]) r;
SELECT k, pg_temp.compare(format(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM words ORDER BY word <~> q.w LIMIT %s) t) s', k))
FROM unnest(ARRAY[1, 7, 40]) k;
SET enable_seqscan = off;
SELECT count(*) AS rows, count(DISTINCT (q.qid, s.id)) AS distinct_rows
  FROM q CROSS JOIN LATERAL (SELECT id FROM words ORDER BY word <~> q.w LIMIT 40) s;
RESET enable_seqscan;
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM words
     WHERE word <<~>> sphere(''casa''::text, 2) ORDER BY word <~> ''cama'', id) s');

-- The batch functions' text twins on vs_sss
SELECT count(*) AS batch_rows,
       (SELECT count(*) FROM q JOIN words w ON w.word <~> q.w <= 2) AS operator_rows,
       count(*) FILTER (WHERE b.distance = w.word <~> (SELECT array_agg(w ORDER BY qid) FROM q)[b.query]) AS right_distance
  FROM vsearch_range_batch('words_sss', (SELECT array_agg(w ORDER BY qid) FROM q), 2) b
  JOIN words w ON w.ctid = b.row_ctid;
SELECT count(*) AS differ FROM (
  SELECT query, rank() OVER (PARTITION BY query ORDER BY distance, row_ctid) AS r, distance
    FROM vsearch_knn_batch('words_sss', (SELECT array_agg(w ORDER BY qid) FROM q), 9)
  EXCEPT ALL
  SELECT o.n, s.r, s.d FROM (SELECT q.w, row_number() OVER (ORDER BY qid) AS n FROM q) o,
    LATERAL (SELECT word <~> o.w AS d, row_number() OVER (ORDER BY word <~> o.w) AS r
               FROM words WHERE word IS NOT NULL ORDER BY word <~> o.w LIMIT 9) s) d;
-- a vector index refuses text queries
CREATE TABLE tv (v vector(2));
CREATE INDEX tv_lc ON tv USING vs_lc (v);
SELECT * FROM vsearch_knn_batch('tv_lc', ARRAY['a'], 1);

-- Options: alpha (few or many pivots), max_pivots; never a different answer
DROP INDEX words_sss;
CREATE INDEX words_sss_a ON words USING vs_sss (word) WITH (alpha = 0.2, max_pivots = 40);
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN words w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[1, 2]) r;
DROP INDEX words_sss_a;
CREATE INDEX words_sss_b ON words USING vs_sss (word) WITH (alpha = 0.9);
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM words ORDER BY word <~> q.w LIMIT 9) t) s');
DROP INDEX words_sss_b;
CREATE INDEX bad ON words USING vs_sss (word) WITH (alpha = 0);
CREATE INDEX bad ON words USING vs_sss (word) WITH (max_pivots = 1000);

-- Inserts (into an index built on an empty table: no pivots, every row compared), REINDEX
-- (pivots chosen), more inserts, VACUUM
CREATE TABLE w2 (id int, word text);
CREATE INDEX w2_sss ON w2 USING vs_sss (word);
INSERT INTO w2 SELECT id, word FROM words WHERE id <= 1500;
SELECT pg_temp.compare('SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, 2)');
REINDEX INDEX w2_sss;
INSERT INTO w2 SELECT id, word FROM words WHERE id > 1500;
SELECT pg_temp.compare('SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, 2)');
DELETE FROM w2 WHERE id % 3 = 0;
VACUUM w2;
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[1, 2]) r;
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM w2 ORDER BY word <~> q.w LIMIT 9) t) s');
DELETE FROM w2;
VACUUM w2;
SET enable_seqscan = off;
SELECT count(*) FROM w2 WHERE word <<~>> sphere('casa'::text, 50);
RESET enable_seqscan;

-- Vectors, L2 and L1; cosine refused
CREATE TABLE lv (id int PRIMARY KEY, v vector(4));
INSERT INTO lv SELECT i, CASE WHEN i % 101 = 0 THEN NULL ELSE
  ARRAY[(i % 8) * 3 + sin(i * 1.7), (i % 8 / 2) * 3 + cos(i * 2.3), sin(i * 0.37) * 2,
        cos(i * 0.11) + (i % 3)]::real[]::vector END
FROM generate_series(1, 2000) i;
CREATE TABLE lq (qid int, v vector(4));
INSERT INTO lq SELECT i, ARRAY[(i % 8) * 3 + cos(i), (i % 5) * 2, sin(i) * 2, (i % 3) - 0.5]::real[]::vector
  FROM generate_series(1, 12) i;
CREATE INDEX lv_sss_l2 ON lv USING vs_sss (v vector_l2_ops);
CREATE INDEX lv_sss_l1 ON lv USING vs_sss (v vector_l1_ops) WITH (alpha = 0.3);
CREATE INDEX ON lv USING vs_sss (v vector_cosine_ops);
SELECT op, r, pg_temp.compare(format(
  'SELECT q.qid, t.id FROM lq q JOIN lv t ON t.v %s sphere(q.v, %s)', op, r))
FROM (VALUES ('<<->>', 0.5), ('<<->>', 1.5), ('<<->>', 4), ('<<+>>', 1), ('<<+>>', 3), ('<<+>>', 8))
  AS c(op, r) ORDER BY op, r;
SELECT dop, k, pg_temp.compare(format(
  'SELECT q.qid, s.rank, s.d FROM lq q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     v %1$s q.v AS d FROM (SELECT v FROM lv ORDER BY v %1$s q.v LIMIT %2$s) t) s', dop, k))
FROM (VALUES ('<->'), ('<+>')) AS c(dop), unnest(ARRAY[1, 25]) k ORDER BY dop, k;
SELECT count(*) AS differ FROM (
  SELECT query, rank() OVER (PARTITION BY query ORDER BY distance, row_ctid) AS r, distance
    FROM vsearch_knn_batch('lv_sss_l1', (SELECT array_agg(v ORDER BY qid) FROM lq), 10)
  EXCEPT ALL
  SELECT q.qid, s.r, s.d FROM lq q,
    LATERAL (SELECT v <+> q.v AS d, row_number() OVER (ORDER BY v <+> q.v) AS r
               FROM lv WHERE v IS NOT NULL ORDER BY v <+> q.v LIMIT 10) s) d;
SELECT count(*) AS batch_rows, (SELECT count(*) FROM lq q JOIN lv t ON t.v <-> q.v <= 1.5) AS operator_rows
  FROM vsearch_range_batch('lv_sss_l2', (SELECT array_agg(v ORDER BY qid) FROM lq), 1.5);
INSERT INTO lv SELECT 3000 + i, ARRAY[i % 4, i % 3, i % 5, 1]::real[]::vector FROM generate_series(1, 300) i;
DELETE FROM lv WHERE id % 5 = 0;
VACUUM lv;
SELECT pg_temp.compare('SELECT q.qid, t.id FROM lq q JOIN lv t ON t.v <<->> sphere(q.v, 2)');

\c vsearch_regress
SET client_min_messages = warning;
DROP DATABASE sss_utf8;
