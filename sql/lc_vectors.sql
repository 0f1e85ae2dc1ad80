-- vs_lc on vectors: range and kNN through the List of Clusters equal the seq scan, under L2 and
-- L1; options, inserts, VACUUM, empty tables; cosine and inner product refused
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- 2000 deterministic rows around 8 centers in 4 dimensions, a few NULLs and duplicates
CREATE TABLE lv (id int PRIMARY KEY, v vector(4));
INSERT INTO lv SELECT i, CASE WHEN i % 101 = 0 THEN NULL WHEN i % 50 = 1 THEN '[1,1,1,1]' ELSE
  ARRAY[(i % 8) * 3 + sin(i * 1.7), (i % 8 / 2) * 3 + cos(i * 2.3), sin(i * 0.37) * 2,
        cos(i * 0.11) + (i % 3)]::real[]::vector END
FROM generate_series(1, 2000) i;
CREATE TABLE lq (qid int, v vector(4));
INSERT INTO lq SELECT i, ARRAY[(i % 8) * 3 + cos(i), (i % 5) * 2, sin(i) * 2, (i % 3) - 0.5]::real[]::vector
  FROM generate_series(1, 12) i;
INSERT INTO lq VALUES (13, '[1,1,1,1]'), (14, '[100,100,100,100]');

CREATE INDEX lv_lc_l2 ON lv USING vs_lc (v vector_l2_ops);
CREATE INDEX lv_lc_l1 ON lv USING vs_lc (v vector_l1_ops) WITH (bucket_size = 16);
EXPLAIN (COSTS OFF) SELECT id FROM lv WHERE v <<->> sphere('[1,1,1,1]', 0.5);
EXPLAIN (COSTS OFF) SELECT id FROM lv ORDER BY v <+> '[1,1,1,1]' LIMIT 3;

-- cosine distance and the inner product are not metrics
CREATE INDEX ON lv USING vs_lc (v vector_cosine_ops);
CREATE INDEX ON lv USING vs_lc (v vector_ip_ops);

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

-- Range, both metrics, radii from nothing to everything (0: the duplicates of [1,1,1,1])
SELECT op, r, pg_temp.compare(format(
  'SELECT q.qid, t.id FROM lq q JOIN lv t ON t.v %s sphere(q.v, %s)', op, r))
FROM (VALUES ('<<->>', 0), ('<<->>', 0.5), ('<<->>', 1.5), ('<<->>', 4), ('<<->>', 1e30),
             ('<<+>>', 0), ('<<+>>', 1), ('<<+>>', 3), ('<<+>>', 8)) AS c(op, r) ORDER BY op, r;
-- Boundaries: the radius is exactly the distance of the 10th and 100th nearest row
SELECT op, n, pg_temp.compare(format(
  'SELECT t.id FROM lv t WHERE t.v %1$s sphere(%3$L, (SELECT d FROM (SELECT v %2$s %3$L AS d
     FROM lv WHERE v IS NOT NULL ORDER BY 1 OFFSET %4$s LIMIT 1) s))',
  op, dop, '[3,1,0.5,1]', n - 1))
FROM (VALUES ('<<->>', '<->'), ('<<+>>', '<+>')) AS c(op, dop), unnest(ARRAY[10, 100]) n
ORDER BY op, n;
-- kNN: distances by rank equal the seq scan's; no row twice
SELECT dop, k, pg_temp.compare(format(
  'SELECT q.qid, s.rank, s.d FROM lq q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     v %1$s q.v AS d FROM (SELECT v FROM lv ORDER BY v %1$s q.v LIMIT %2$s) t) s', dop, k))
FROM (VALUES ('<->'), ('<+>')) AS c(dop), unnest(ARRAY[1, 10, 60]) k ORDER BY dop, k;
SET enable_seqscan = off;
SELECT count(*) AS rows, count(DISTINCT (q.qid, s.id)) AS distinct_rows
  FROM lq q CROSS JOIN LATERAL (SELECT id FROM lv ORDER BY v <-> q.v LIMIT 60) s;
RESET enable_seqscan;
-- range with ORDER BY, the whole table in order
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM lv
     WHERE v <<->> sphere(''[3,1,0.5,1]'', 2) ORDER BY v <-> ''[3,1,0.5,1]'') s');
SELECT pg_temp.compare('SELECT id, v <+> ''[0,0,0,0]'' AS d FROM lv WHERE v IS NOT NULL ORDER BY v <+> ''[0,0,0,0]''');
-- a query of another dimension is an error, as with the operators
SET enable_seqscan = off;
SELECT id FROM lv WHERE v <<->> sphere('[1,1,1]', 1);
SELECT id FROM lv ORDER BY v <-> '[1,1,1]' LIMIT 1;
SELECT id FROM lv WHERE v <<->> sphere('[1,1,1,1]', -1);
RESET enable_seqscan;

-- Inserts into an unconstrained column from an empty index (the first vector sets the dimension),
-- then VACUUM after deleting a third of the rows
CREATE TABLE lv2 (id int, v vector);
CREATE INDEX lv2_lc ON lv2 USING vs_lc (v) WITH (bucket_size = 5, seed = 3);
SET enable_seqscan = off;
SELECT count(*) FROM lv2 WHERE v <<->> sphere('[1,1,1,1]', 10);
SELECT id FROM lv2 ORDER BY v <-> '[1,1,1,1]' LIMIT 3;
RESET enable_seqscan;
INSERT INTO lv2 SELECT id, v FROM lv WHERE id <= 1200;
INSERT INTO lv2 VALUES (-1, '[1,2,3]');
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, t.id FROM lq q JOIN lv2 t ON t.v <<->> sphere(q.v, %s)', r))
FROM unnest(ARRAY[0.5, 2]) r;
DELETE FROM lv2 WHERE id % 3 = 0;
VACUUM lv2;
INSERT INTO lv2 SELECT id, v FROM lv WHERE id > 1200;
SELECT r, pg_temp.compare(format(
  'SELECT q.qid, t.id FROM lq q JOIN lv2 t ON t.v <<->> sphere(q.v, %s)', r))
FROM unnest(ARRAY[0, 0.5, 2, 5]) r;
SELECT pg_temp.compare(
  'SELECT q.qid, s.rank, s.d FROM lq q CROSS JOIN LATERAL (SELECT row_number() OVER () AS rank,
     v <-> q.v AS d FROM (SELECT v FROM lv2 ORDER BY v <-> q.v LIMIT 25) t) s');
-- a table of NULLs only: an index that never held a vector
CREATE TABLE lv3 (v vector);
INSERT INTO lv3 VALUES (NULL), (NULL);
CREATE INDEX lv3_lc ON lv3 USING vs_lc (v);
SET enable_seqscan = off;
SELECT count(*) FROM lv3 WHERE v <<->> sphere('[1,1]', 10);
RESET enable_seqscan;
-- the batch functions: range rows and distances = the operators'; kNN distances by rank = seq scan
SELECT idx, r, count(*) AS batch_rows,
       count(*) FILTER (WHERE b.distance = CASE WHEN idx = 'lv_lc_l2' THEN t.v <-> q.v ELSE t.v <+> q.v END
                          AND b.distance <= r) AS right_distance
  FROM (VALUES ('lv_lc_l2', 1.5), ('lv_lc_l2', 4), ('lv_lc_l1', 3)) c(idx, r),
       LATERAL vsearch_range_batch(c.idx::regclass, (SELECT array_agg(v ORDER BY qid) FROM lq), c.r) b
       JOIN lv t ON t.ctid = b.row_ctid JOIN lq q ON q.qid = b.query
  GROUP BY 1, 2 ORDER BY 1, 2;
SELECT (SELECT count(*) FROM lq q JOIN lv t ON t.v <-> q.v <= 1.5) AS l2_operator_rows,
       (SELECT count(*) FROM lq q JOIN lv t ON t.v <-> q.v <= 4) AS l2_operator_rows_4,
       (SELECT count(*) FROM lq q JOIN lv t ON t.v <+> q.v <= 3) AS l1_operator_rows;
SELECT count(*) AS differ FROM (
  SELECT query, rank() OVER (PARTITION BY query ORDER BY distance, row_ctid) AS r, distance
    FROM vsearch_knn_batch('lv_lc_l2', (SELECT array_agg(v ORDER BY qid) FROM lq), 15)
  EXCEPT ALL
  SELECT q.qid, s.r, s.d FROM lq q,
    LATERAL (SELECT v <-> q.v AS d, row_number() OVER (ORDER BY v <-> q.v) AS r
               FROM lv WHERE v IS NOT NULL ORDER BY v <-> q.v LIMIT 15) s) d;
SELECT count(*) AS rows, count(DISTINCT (query, row_ctid)) AS distinct_rows
  FROM vsearch_knn_batch('lv_lc_l1', (SELECT array_agg(v ORDER BY qid) FROM lq), 15);
