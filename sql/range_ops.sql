-- Range search: sphere(), the <<op>> operators with and without a vs_flat index
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Runs query with a seq scan, a bitmap index scan and a plain index scan and compares the results
-- as multisets.  Reports the row count, the differences and which scans used a vs_flat index.
CREATE FUNCTION pg_temp.compare(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  n bigint; bad_bitmap bigint; bad_index bigint; line text; bitmap text := ''; index text := '';
BEGIN
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  EXECUTE 'CREATE TEMP TABLE cmp_seq AS ' || query;
  PERFORM set_config('enable_seqscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'on', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ 'Bitmap Index Scan on \w+_flat_\w+' THEN bitmap := 'bitmap'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_bitmap AS ' || query;
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_indexscan', 'on', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
    IF line ~ '(^| )Index Scan using \w+_flat_\w+' THEN index := '+index'; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE cmp_index AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO bad_bitmap FROM ((SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_bitmap)
    UNION ALL (SELECT * FROM cmp_bitmap EXCEPT ALL SELECT * FROM cmp_seq)) d;
  SELECT count(*) INTO bad_index FROM ((SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_index)
    UNION ALL (SELECT * FROM cmp_index EXCEPT ALL SELECT * FROM cmp_seq)) d;
  DROP TABLE cmp_seq, cmp_bitmap, cmp_index;
  RETURN format('%s rows, %s/%s differ, %s', n, bad_bitmap, bad_index, bitmap || index);
END $$;

SELECT setseed(0.7);
CREATE TABLE r3 (id int PRIMARY KEY, v vector(3));
INSERT INTO r3 SELECT i, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector
  FROM generate_series(1, 2000) i;
INSERT INTO r3 VALUES (2001, NULL), (2002, '[0,0,0]');
CREATE TABLE r64 (id int PRIMARY KEY, v vector(64));
INSERT INTO r64 SELECT i, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 1000) i, generate_series(1, 64) j GROUP BY i;
CREATE TABLE rq (qid int, dim int, v vector);
INSERT INTO rq SELECT i, 3, ARRAY[random() - 0.5, random() - 0.5, random() - 0.5]::vector
  FROM generate_series(1, 3) i;
INSERT INTO rq SELECT i, 64, array_agg(random() - 0.5 ORDER BY j)::vector
  FROM generate_series(1, 3) i, generate_series(1, 64) j GROUP BY i;
ANALYZE r3, r64, rq;

-- The type and the operators, without an index
SELECT sphere('[1,2,3]', 0.5);
SELECT (sphere('[1,2,3]', 0.5)).center, (sphere('[1,2,3]', 0.5)).radius;
SELECT '[1,1]'::vector <<->> sphere('[0,0]', 1.5), '[1,1]'::vector <<->> sphere('[0,0]', 1.4);
SELECT '[1,1]'::vector <<+>> sphere('[0,0]', 2), '[1,1]'::vector <<+>> sphere('[0,0]', 1.9);
SELECT '[1,0]'::vector <<=>> sphere('[0,1]', 1), '[1,0]'::vector <<=>> sphere('[0,1]', 0.9);
SELECT '[1,1]'::vector <<#>> sphere('[1,1]', -2), '[1,1]'::vector <<#>> sphere('[1,1]', -2.1);
-- cosine distance to a zero vector is NaN: never within any radius
SELECT '[0,0]'::vector <<=>> sphere('[0,1]', 2);
-- NULLs: no match (NULL)
SELECT '[1,1]'::vector <<->> NULL::sphere, '[1,1]'::vector <<->> sphere(NULL, 1),
  '[1,1]'::vector <<->> ROW('[1,1]', NULL)::sphere;
-- each operator agrees with its distance operator on every row
SELECT count(*) FILTER (WHERE (v <<->> sphere(q, 0.4)) IS DISTINCT FROM (v <-> q <= 0.4)) AS l2,
       count(*) FILTER (WHERE (v <<#>> sphere(q, -0.05)) IS DISTINCT FROM (v <#> q <= -0.05)) AS ip,
       count(*) FILTER (WHERE (v <<=>> sphere(q, 0.3)) IS DISTINCT FROM (v <=> q <= 0.3)) AS cos,
       count(*) FILTER (WHERE (v <<+>> sphere(q, 0.6)) IS DISTINCT FROM (v <+> q <= 0.6)) AS l1,
       count(*) FILTER (WHERE v <<->> sphere(q, 0.4)) AS l2_matches
  FROM r3, (SELECT v AS q FROM rq WHERE dim = 3 AND qid = 1) q;

CREATE INDEX r3_flat_l2 ON r3 USING vs_flat (v vector_l2_ops);
CREATE INDEX r3_flat_ip ON r3 USING vs_flat (v vector_ip_ops);
CREATE INDEX r3_flat_cos ON r3 USING vs_flat (v vector_cosine_ops);
CREATE INDEX r3_flat_l1 ON r3 USING vs_flat (v vector_l1_ops);
CREATE INDEX r64_flat_l2 ON r64 USING vs_flat (v vector_l2_ops);
CREATE INDEX r64_flat_ip ON r64 USING vs_flat (v vector_ip_ops);
CREATE INDEX r64_flat_cos ON r64 USING vs_flat (v vector_cosine_ops);
CREATE INDEX r64_flat_l1 ON r64 USING vs_flat (v vector_l1_ops);

EXPLAIN (COSTS OFF) SELECT id FROM r3 WHERE v <<->> sphere('[0.1,0.2,0.3]', 0.1);
EXPLAIN (COSTS OFF) SELECT id FROM r3 WHERE v <<=>> sphere('[0.1,0.2,0.3]', 0.01)
  ORDER BY v <=> '[0.1,0.2,0.3]';

-- Every metric, both dimensions, a small and a large radius: index = seq scan
SELECT dim, op, radius, pg_temp.compare(format(
  'SELECT q.qid, t.id FROM rq q JOIN r%s t ON t.v %s sphere(q.v, %s) WHERE q.dim = %s',
  dim, op, radius, dim))
FROM (VALUES (3, '<<->>', 0.15), (3, '<<->>', 0.5), (3, '<<#>>', -0.1), (3, '<<#>>', 0.05),
             (3, '<<=>>', 0.02), (3, '<<=>>', 0.5), (3, '<<+>>', 0.2), (3, '<<+>>', 0.8),
             (64, '<<->>', 2.9), (64, '<<->>', 3.1), (64, '<<#>>', -0.8), (64, '<<#>>', 0),
             (64, '<<=>>', 0.8), (64, '<<=>>', 0.9), (64, '<<+>>', 18), (64, '<<+>>', 19))
  AS c(dim, op, radius) ORDER BY dim, op, radius;

-- Boundaries: the radius is exactly the distance of the 1st, 10th and 100th nearest row, which
-- must be in the result (so the counts are 1, 10 and 100 unless distances tie)
SELECT dim, op, n, pg_temp.compare(format(
  'SELECT t.id FROM r%1$s t WHERE t.v %2$s sphere(%4$L, (SELECT d FROM (SELECT v %3$s %4$L AS d
     FROM r%1$s WHERE v IS NOT NULL ORDER BY 1 OFFSET %5$s LIMIT 1) s))',
  dim, op, dop, (SELECT v FROM rq WHERE rq.dim = c.dim AND qid = 2), n - 1))
FROM (VALUES (3, '<<->>', '<->'), (3, '<<#>>', '<#>'), (3, '<<=>>', '<=>'), (3, '<<+>>', '<+>'),
             (64, '<<->>', '<->'), (64, '<<#>>', '<#>'), (64, '<<=>>', '<=>'), (64, '<<+>>', '<+>'))
  AS c(dim, op, dop), unnest(ARRAY[1, 10, 100]) n ORDER BY dim, op, n;

-- Range with ORDER BY (the same center, or another), with and without LIMIT
SELECT op, pg_temp.compare(format(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM r3
     WHERE v %s sphere(''[0.1,0.1,0.1]'', %s) ORDER BY v %s ''[0.1,0.1,0.1]'') s', op, r, dop))
FROM (VALUES ('<<->>', 0.3, '<->'), ('<<#>>', -0.02, '<#>'), ('<<=>>', 0.2, '<=>'),
             ('<<+>>', 0.4, '<+>')) AS c(op, r, dop) ORDER BY op;
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM r3
     WHERE v <<->> sphere(''[0.1,0.1,0.1]'', 0.3) ORDER BY v <-> ''[0.4,0.4,0.4]'' LIMIT 25) s');
SELECT pg_temp.compare(
  'SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM r64
     WHERE v <<=>> sphere((SELECT v FROM rq WHERE dim = 64 AND qid = 1), 0.85) AND id % 3 = 0
     ORDER BY v <=> (SELECT v FROM rq WHERE dim = 64 AND qid = 1) LIMIT 10) s');
-- two ranges at once: their intersection
SELECT pg_temp.compare(
  'SELECT id FROM r3 WHERE v <<->> sphere(''[0.1,0.1,0.1]'', 0.3)
     AND v <<->> sphere(''[0.2,0.2,0.2]'', 0.3)');
-- a range that matches nothing, one that matches everything
SELECT pg_temp.compare('SELECT id FROM r3 WHERE v <<->> sphere(''[9,9,9]'', 1)');
SELECT pg_temp.compare('SELECT id FROM r3 WHERE v <<+>> sphere(''[0,0,0]'', 1e300)');

-- NULL spheres match nothing through the index either
SET enable_seqscan = off;
SELECT count(*) FROM r3 WHERE v <<->> sphere(NULL, 1);
SELECT count(*) FROM r3 WHERE v <<->> ROW('[0,0,0]', NULL)::sphere;
SET plan_cache_mode = force_generic_plan;
PREPARE rng(sphere) AS SELECT count(*) FROM r3 WHERE v <<->> $1;
EXPLAIN (COSTS OFF) EXECUTE rng(NULL);
EXECUTE rng(NULL);
EXECUTE rng(sphere('[0,0,0]', 0.2));
DEALLOCATE rng;
RESET plan_cache_mode;
RESET enable_seqscan;

-- Errors: invalid radii (22023), dimension mismatches (22000), with and without the index
-- (the radius typed: with two untyped literals sphere() could also be the text sphere's)
SELECT sphere('[1,2]', 'NaN'::float8);
SELECT sphere('[1,2]', 'Infinity'::float8);
SELECT '[1,2]'::vector <<->> ROW('[1,2]', 'NaN')::sphere;
SELECT '[1,2]'::vector <<->> sphere('[1,2]', -1);
SELECT '[1,2]'::vector <<=>> sphere('[1,2]', -0.5);
SELECT '[1,2]'::vector <<+>> sphere('[1,2]', -1e-9);
SELECT '[1,2]'::vector <<#>> ROW('[1,2]', '-Infinity')::sphere;
SELECT '[1,2]'::vector <<->> sphere('[1,2,3]', 1);
SET enable_seqscan = off;
SELECT count(*) FROM r3 WHERE v <<->> sphere('[0,0,0]', -0.1);
SELECT count(*) FROM r3 WHERE v <<=>> ROW('[0,0,0]', 'NaN')::sphere;
SELECT count(*) FROM r3 WHERE v <<+>> sphere('[0,0]', 1);
SET enable_bitmapscan = off;
SELECT count(*) FROM r3 WHERE v <<->> sphere('[0,0,0]', -0.1);
SELECT count(*) FROM r3 WHERE v <<#>> sphere('[0,0]', 1);
RESET enable_bitmapscan;
RESET enable_seqscan;
