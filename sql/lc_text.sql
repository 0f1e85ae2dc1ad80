-- Text under edit distance: the operators (textdist.c) and the vs_lc index on text (lc*.c).
-- In a UTF-8 database of its own, so that characters are code points whatever the cluster's
-- locale: 'año' is 3 characters and 4 bytes.
SET client_min_messages = warning;
CREATE DATABASE lc_utf8 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c lc_utf8
SET client_encoding = 'UTF8';
SET client_min_messages = warning;
CREATE EXTENSION vsearch;
RESET client_min_messages;

-- The distance: unit-cost edits of characters, not bytes
SELECT 'año' <~> 'ano' AS one, octet_length('año') - octet_length('ano') AS bytes_differ,
       'kitten' <~> 'sitting' AS three, '' <~> '' AS zero, '' <~> 'año' AS empty_vs_3,
       'año' <~> '' AS three_vs_empty, 'casa' <~> 'casa' AS same, 'ab' <~> 'ba' AS two,
       'ñandú' <~> 'nandu' AS two_accents, '日本語' <~> '日本' AS one_cjk, '😀x' <~> 'x😀' AS two_emoji;
-- symmetric, and varchar works through its cast to text
SELECT 'flaw' <~> 'lawn', 'lawn' <~> 'flaw', 'flaw'::varchar <~> 'lawn'::varchar;
-- NULLs give NULL
SELECT NULL::text <~> 'a' IS NULL AS null_left, 'a' <~> NULL::text IS NULL AS null_right;
-- Long strings (past the 64-character bit-parallel path, both and one side)
SELECT repeat('ab', 100) <~> repeat('ba', 100) AS long_both,
       repeat('a', 70) <~> repeat('a', 60) AS long_one, repeat('ñ', 300) <~> repeat('n', 300) AS long_mb,
       repeat('x', 5000) <~> (repeat('x', 4999) || 'y') AS very_long;

-- The text sphere and the range operator; untyped literals still build vector spheres
SELECT sphere('casa'::text, 2) AS text_sphere, pg_typeof(sphere('casa'::text, 2)),
       pg_typeof(sphere('[1,2]', 0.5)) AS vec_half, pg_typeof(sphere('[1,2]', 1)) AS vec_int,
       pg_typeof(sphere('[1,2]', 1e300)) AS vec_big;
SELECT (sphere('casa'::text, 2.5)).radius, (sphere('casa'::text, 2)).center;
SELECT 'cosa' <<~>> sphere('casa'::text, 1) AS t1, 'cosas' <<~>> sphere('casa'::text, 1) AS f1,
       'cosas' <<~>> sphere('casa'::text, 2) AS t2, 'año' <<~>> sphere('ano'::text, 1) AS t_mb,
       '' <<~>> sphere(''::text, 0) AS t_empty, 'a' <<~>> sphere(''::text, 0.5) AS f_half;
SELECT 'a' <<~>> sphere(NULL::text, 1) IS NULL AS null_center,
       'a' <<~>> ROW('a', NULL)::text_sphere IS NULL AS null_radius;
-- invalid radii
SELECT 'a' <<~>> sphere('a'::text, -1);
SELECT sphere('a'::text, 'NaN');
SELECT sphere('a'::text, 'Infinity');

-- A deterministic word list: syllables with accents and ñ, some words repeated, one empty, NULLs
CREATE TABLE words (id int PRIMARY KEY, word text);
INSERT INTO words
SELECT i, CASE WHEN i % 97 = 0 THEN NULL WHEN i % 331 = 0 THEN '' ELSE
         (SELECT string_agg((ARRAY['ca','sa','ño','me','to','rá','pe','lo','mu','ti','ü','s',
                                   'a','r','c'])[1 + (hashint4(i * 7 + j) & 2147483647) % 15], '')
            FROM generate_series(1, 1 + (hashint4(i) & 2147483647) % 4) j) END
FROM generate_series(1, 3000) i;
-- queries: words of the table, some edited, and words that are not there
CREATE TABLE q (qid int, w text);
INSERT INTO q SELECT row_number() OVER (), w FROM (VALUES ('casa'), ('año'), ('catoño'), (''),
  ('meramuti'), ('ñ'), ('zzzzzz'), ('peloca'), ('üsa'), ('tomemú'), (repeat('ca', 40))) v(w);
INSERT INTO q SELECT 100 + id, CASE WHEN id % 2 = 0 THEN word ELSE overlay(word placing 'x' from 1 for 1) END
  FROM words WHERE id % 211 = 5 AND word <> '';

CREATE INDEX words_lc ON words USING vs_lc (word);
SELECT amname, opcname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am a ON a.oid = c.relam JOIN pg_opclass o ON o.oid = i.indclass[0]
  WHERE c.relname = 'words_lc';
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
    IF line ~ 'Bitmap Index Scan on \w*_lc\w*' THEN plans := 'bitmap'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_bitmap AS ' || query;
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexscan', 'on', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ '(^| )Index Scan using \w*_lc\w*' THEN plans := plans || '+index'; END IF;
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

-- Range: every query at radii 0..3 (all queries in one join per radius)
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN words w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[0, 1, 2, 3, 2.5]) r;
-- kNN: the distances ranked 1..k equal the seq scan's (the executor recomputes each returned
-- row's distance), and no row comes twice; which of several rows tied at the k-th distance comes
-- is the scan's choice
SELECT k, pg_temp.compare(format(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM words ORDER BY word <~> q.w LIMIT %s) t) s', k))
FROM unnest(ARRAY[1, 7, 40]) k;
SET enable_seqscan = off;
SELECT count(*) AS rows, count(DISTINCT (q.qid, s.id)) AS distinct_rows
  FROM q CROSS JOIN LATERAL (SELECT id FROM words ORDER BY word <~> q.w LIMIT 40) s;
RESET enable_seqscan;
-- range and ORDER BY together, two ranges, a range matching nothing
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM words
     WHERE word <<~>> sphere(''casa''::text, 2) ORDER BY word <~> ''cama'', id) s');
SELECT pg_temp.compare(
  'SELECT id FROM words WHERE word <<~>> sphere(''casa''::text, 2) AND word <<~>> sphere(''masa''::text, 2)');
SELECT pg_temp.compare('SELECT id FROM words WHERE word <<~>> sphere(''qqqqqqqqqqqq''::text, 3)');
-- the whole table in order (no LIMIT): every row once (NULLs are not indexed: an ORDER BY scan
-- returns the non-NULL rows, as vs_flat's)
SELECT pg_temp.compare('SELECT id, word <~> ''ca'' AS d FROM words WHERE word IS NOT NULL ORDER BY word <~> ''ca''');
-- NULL spheres and queries match nothing through the index either
SET enable_seqscan = off;
SELECT count(*) FROM words WHERE word <<~>> sphere(NULL::text, 2);
SELECT count(*) FROM (SELECT id FROM words ORDER BY word <~> (SELECT NULL::text) LIMIT 3) s;
SELECT id FROM words WHERE word <<~>> sphere('casa'::text, -1);
RESET enable_seqscan;

-- The batch functions' text twins: every query's rows and distances = the operators' (range);
-- the distances ranked 1..k = the seq scan's (kNN); NULL queries match nothing
CREATE TEMP TABLE qa AS SELECT array_agg(w ORDER BY qid) AS a FROM q;
SELECT count(*) AS batch_rows,
       (SELECT count(*) FROM q JOIN words w ON w.word <~> q.w <= 2) AS operator_rows,
       count(*) FILTER (WHERE b.distance = w.word <~> (SELECT a FROM qa)[b.query]
                          AND b.distance <= 2) AS right_distance
  FROM vsearch_range_batch('words_lc', (SELECT a FROM qa), 2) b JOIN words w ON w.ctid = b.row_ctid;
SELECT count(*) AS differ FROM (
  (SELECT b.query, w.id FROM vsearch_range_batch('words_lc', (SELECT a FROM qa), 1) b
     JOIN words w ON w.ctid = b.row_ctid
   EXCEPT ALL
   SELECT o.n, w.id FROM (SELECT q.w, row_number() OVER (ORDER BY qid) AS n FROM q) o
     JOIN words w ON w.word <~> o.w <= 1)
  UNION ALL
  (SELECT o.n, w.id FROM (SELECT q.w, row_number() OVER (ORDER BY qid) AS n FROM q) o
     JOIN words w ON w.word <~> o.w <= 1
   EXCEPT ALL
   SELECT b.query, w.id FROM vsearch_range_batch('words_lc', (SELECT a FROM qa), 1) b
     JOIN words w ON w.ctid = b.row_ctid)) d;
SELECT count(*) AS differ FROM (
  (SELECT query, rank() OVER (PARTITION BY query ORDER BY distance, row_ctid) AS r, distance
     FROM vsearch_knn_batch('words_lc', (SELECT a FROM qa), 12)
   EXCEPT ALL
   SELECT o.n, s.r, s.d FROM (SELECT q.w, row_number() OVER (ORDER BY qid) AS n FROM q) o,
     LATERAL (SELECT word <~> o.w AS d, row_number() OVER (ORDER BY word <~> o.w) AS r
                FROM words WHERE word IS NOT NULL ORDER BY word <~> o.w LIMIT 12) s)) d;
SELECT count(*) AS rows, count(DISTINCT (query, row_ctid)) AS distinct_rows
  FROM vsearch_knn_batch('words_lc', (SELECT a FROM qa), 12);
SELECT * FROM vsearch_knn_batch('words_lc', ARRAY[NULL, 'casa']::text[], 2) ORDER BY 1, 3, 2;
SELECT * FROM vsearch_range_batch('words_lc', ARRAY[NULL]::text[], 3);
-- rows deleted (not yet vacuumed) are not returned; kNN still finds k visible rows
BEGIN;
DELETE FROM words WHERE word <~> 'casa' <= 1;
SELECT count(*) FROM vsearch_range_batch('words_lc', ARRAY['casa'], 1);
SELECT count(*), min(distance) FROM vsearch_knn_batch('words_lc', ARRAY['casa'], 20);
ROLLBACK;
SELECT * FROM vsearch_knn_batch('words_lc', ARRAY['casa'], 0);
SELECT * FROM vsearch_range_batch('words_lc', ARRAY['casa'], -1);

-- Options: bucket sizes (1: every cluster one member) and seeds change the list, never the answer
CREATE INDEX words_lc_b1 ON words USING vs_lc (word) WITH (bucket_size = 1, seed = 7);
CREATE INDEX words_lc_b200 ON words USING vs_lc (word) WITH (bucket_size = 200);
DROP INDEX words_lc;
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN words w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[1, 2]) r;
DROP INDEX words_lc_b1;
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM words ORDER BY word <~> q.w LIMIT 9) t) s');
DROP INDEX words_lc_b200;
CREATE INDEX bad ON words USING vs_lc (word) WITH (bucket_size = -1);
CREATE INDEX bad ON words USING vs_lc (word) WITH (lists = 3);

-- Inserts: into an index built on an empty table, then after a build; VACUUM after deletes
-- (some of the deleted rows are centers: they keep routing and are never returned)
CREATE TABLE w2 (id int, word text);
CREATE INDEX w2_lc ON w2 USING vs_lc (word) WITH (bucket_size = 4);
SET enable_seqscan = off;
SELECT count(*) FROM w2 WHERE word <<~>> sphere('casa'::text, 5);
SELECT id FROM w2 ORDER BY word <~> 'casa' LIMIT 3;
RESET enable_seqscan;
INSERT INTO w2 SELECT id, word FROM words WHERE id <= 1500;
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[1, 2]) r;
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM w2 ORDER BY word <~> q.w LIMIT 9) t) s');
REINDEX INDEX w2_lc;
INSERT INTO w2 SELECT id, word FROM words WHERE id > 1500;
INSERT INTO w2 VALUES (-1, 'casa'), (-2, 'zzzzzzzzzzzzzzzzzz'), (-3, NULL), (-4, '');
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[1, 2, 3]) r;
DELETE FROM w2 WHERE id % 3 = 0 OR word = 'casa';
VACUUM w2;
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, %s)', r))
FROM unnest(ARRAY[0, 1, 2]) r;
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     word <~> q.w AS d FROM (SELECT word FROM w2 ORDER BY word <~> q.w LIMIT 9) t) s');
INSERT INTO w2 SELECT -id, word || 'z' FROM words WHERE id % 5 = 0;
SELECT pg_temp.compare(
  'SELECT q.qid, w.id FROM q JOIN w2 w ON w.word <<~>> sphere(q.w, 2)');
DELETE FROM w2;
VACUUM w2;
SET enable_seqscan = off;
SELECT count(*) FROM w2 WHERE word <<~>> sphere('casa'::text, 50);
RESET enable_seqscan;

-- An unlogged table (the init fork), and strings too long to index
CREATE UNLOGGED TABLE w3 (word text);
CREATE INDEX w3_lc ON w3 USING vs_lc (word);
INSERT INTO w3 VALUES ('uno'), ('dos'), ('tres');
SET enable_seqscan = off;
SELECT word FROM w3 WHERE word <<~>> sphere('tres'::text, 1);
RESET enable_seqscan;
INSERT INTO w3 VALUES (repeat('x', 3000));
CREATE TABLE w4 (word text);
INSERT INTO w4 VALUES (repeat('y', 3000));
CREATE INDEX ON w4 USING vs_lc (word);
-- without an index, long strings work
SELECT word <~> repeat('y', 2999) FROM w4;

\c vsearch_regress
SET client_min_messages = warning;
DROP DATABASE lc_utf8;
