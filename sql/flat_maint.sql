-- vs_flat: building, inserting, vacuuming, unlogged and temporary indexes, limits, validation
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Index scan results minus seq scan results, and the reverse (both 0 when they agree).
CREATE FUNCTION pg_temp.diff(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE n bigint; missing bigint; extra bigint;
BEGIN
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_seqscan', 'on', true);
  EXECUTE 'CREATE TEMP TABLE cmp_seq AS ' || query;
  PERFORM set_config('enable_indexscan', 'on', true);
  PERFORM set_config('enable_bitmapscan', 'on', true);
  PERFORM set_config('enable_seqscan', 'off', true);
  EXECUTE 'CREATE TEMP TABLE cmp_idx AS ' || query;
  SELECT count(*) INTO n FROM cmp_seq;
  SELECT count(*) INTO missing FROM (SELECT * FROM cmp_seq EXCEPT ALL SELECT * FROM cmp_idx) d;
  SELECT count(*) INTO extra FROM (SELECT * FROM cmp_idx EXCEPT ALL SELECT * FROM cmp_seq) d;
  DROP TABLE cmp_seq, cmp_idx;
  RETURN format('%s rows, %s missing, %s extra', n, missing, extra);
END $$;

-- Nearest 20 to a few fixed points, ranked
CREATE FUNCTION pg_temp.knn(tbl text, op text) RETURNS text LANGUAGE sql AS $$
  SELECT pg_temp.diff(format(
    'SELECT p.i, x.rank, x.id FROM generate_series(1, 4) p(i), LATERAL (
       SELECT id, row_number() OVER () AS rank FROM (SELECT id FROM %s
         ORDER BY v %s ARRAY[p.i * 0.1, 0.5 - p.i * 0.2, 0.3]::vector LIMIT 20) s) x', tbl, op))
$$;

SELECT setseed(0.1);

-- Build on an empty table, then fill it by inserts (pages fill up and new ones are added)
CREATE TABLE items (id serial PRIMARY KEY, v vector(3));
CREATE INDEX items_idx ON items USING vs_flat (v vector_l2_ops);
INSERT INTO items (v) SELECT ARRAY[random(), random(), random()]::vector
  FROM generate_series(1, 1500);
INSERT INTO items (v) VALUES (NULL), (NULL);
SELECT pg_temp.knn('items', '<->');
SELECT pg_relation_size('items_idx') / current_setting('block_size')::int AS pages;

-- Inserts after a build
CREATE TABLE built (id serial PRIMARY KEY, v vector(3));
INSERT INTO built (v) SELECT ARRAY[random(), random(), random()]::vector
  FROM generate_series(1, 1000);
CREATE INDEX built_idx ON built USING vs_flat (v vector_ip_ops);
SELECT pg_temp.knn('built', '<#>');
INSERT INTO built (v) SELECT ARRAY[random() * 2, random() * 2, random() * 2]::vector
  FROM generate_series(1, 700);
SELECT pg_temp.knn('built', '<#>');
-- the same statement sees its own new rows through the index
BEGIN;
INSERT INTO built (v) VALUES ('[9,9,9]');
SET LOCAL enable_seqscan = off;
SELECT v FROM built ORDER BY v <#> '[1,1,1]' LIMIT 1;
ROLLBACK;
SET enable_seqscan = off;
SELECT v FROM built ORDER BY v <#> '[1,1,1]' LIMIT 1;
RESET enable_seqscan;

-- DELETE + VACUUM compacts pages; later inserts and searches see the right rows
DELETE FROM built WHERE id % 3 = 0;
SELECT pg_temp.knn('built', '<#>');
VACUUM built;
SELECT pg_temp.knn('built', '<#>');
INSERT INTO built (v) SELECT ARRAY[random(), random(), random()]::vector
  FROM generate_series(1, 300);
UPDATE built SET v = v + '[0.5,0.5,0.5]' WHERE id % 5 = 0;
SELECT pg_temp.knn('built', '<#>');
DELETE FROM built WHERE id % 2 = 0;
VACUUM built;
SELECT pg_temp.knn('built', '<#>');
SELECT reltuples = (SELECT count(*) FROM built) AS reltuples_ok FROM pg_class
  WHERE relname = 'built_idx';
-- everything deleted: the index is empty again, and fills again
DELETE FROM built;
VACUUM built;
SET enable_seqscan = off;
SELECT count(*) FROM (SELECT id FROM built ORDER BY v <#> '[1,1,1]' LIMIT 10) s;
RESET enable_seqscan;
INSERT INTO built (v) VALUES ('[1,2,3]'), ('[3,2,1]');
SET enable_seqscan = off;
SELECT v FROM built ORDER BY v <#> '[1,0,0]' LIMIT 5;
RESET enable_seqscan;

-- REINDEX and a table rewrite
REINDEX INDEX items_idx;
SELECT pg_temp.knn('items', '<->');
VACUUM FULL items;
SELECT pg_temp.knn('items', '<->');
TRUNCATE items;
INSERT INTO items (v) VALUES ('[0.5,0.5,0.5]');
SET enable_seqscan = off;
SELECT v FROM items ORDER BY v <-> '[0,0,0]' LIMIT 3;
RESET enable_seqscan;

-- TRUNCATE in the creating transaction rebuilds the index in the same file
BEGIN;
CREATE TABLE inplace (id int, v vector(3));
CREATE INDEX inplace_idx ON inplace USING vs_flat (v);
INSERT INTO inplace SELECT i, ARRAY[i, i, i] FROM generate_series(1, 300) i;
SET LOCAL enable_seqscan = off;
SELECT id FROM inplace ORDER BY v <-> '[0,0,0]' LIMIT 3;
TRUNCATE inplace;
INSERT INTO inplace SELECT i, ARRAY[1000 - i, 1000 - i, 1000 - i] FROM generate_series(1, 400) i;
SELECT id FROM inplace ORDER BY v <-> '[0,0,0]' LIMIT 3;
COMMIT;

-- Unlogged and temporary tables
CREATE UNLOGGED TABLE ul (id int, v vector(3));
INSERT INTO ul SELECT i, ARRAY[random(), random(), random()]::vector FROM generate_series(1, 500) i;
CREATE INDEX ul_idx ON ul USING vs_flat (v vector_l1_ops);
SELECT pg_temp.knn('ul', '<+>');
CREATE TEMP TABLE tmp (id int, v vector(3));
INSERT INTO tmp SELECT i, ARRAY[random(), random(), random()]::vector FROM generate_series(1, 500) i;
CREATE INDEX tmp_idx ON tmp USING vs_flat (v vector_cosine_ops);
SELECT pg_temp.knn('tmp', '<=>');
INSERT INTO tmp SELECT i, ARRAY[random(), random(), random()]::vector FROM generate_series(501, 900) i;
SELECT pg_temp.knn('tmp', '<=>');

-- Partial and expression indexes
CREATE TABLE part (id int, v vector);
INSERT INTO part SELECT i, ARRAY[random(), random(), random()]::vector FROM generate_series(1, 1000) i;
CREATE INDEX part_idx ON part USING vs_flat ((v::vector(3)) vector_l1_ops) WHERE id <= 500;
ANALYZE part;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
  SELECT id FROM part WHERE id <= 500 ORDER BY v::vector(3) <+> '[0.5,0.5,0.5]' LIMIT 10;
RESET enable_seqscan;
SELECT pg_temp.diff('SELECT id, row_number() OVER () FROM (SELECT id FROM part WHERE id <= 500
  ORDER BY v::vector(3) <+> ''[0.5,0.5,0.5]'' LIMIT 30) s');
SELECT count(*) FROM vsearch_knn_batch('part_idx', ARRAY['[0.5,0.5,0.5]'::vector], 5000);

-- A column without a dimension takes the first row's; others are errors (22000)
CREATE TABLE anydim (id int, v vector);
CREATE INDEX anydim_idx ON anydim USING vs_flat (v);
INSERT INTO anydim VALUES (1, '[1,2]'), (2, '[2,3]');
INSERT INTO anydim VALUES (3, '[1,2,3]');
SET enable_seqscan = off;
SELECT id FROM anydim ORDER BY v <-> '[0,0]' LIMIT 5;
RESET enable_seqscan;
TRUNCATE anydim;
INSERT INTO anydim VALUES (1, '[1,2,3]'), (2, '[1,2,3,4]');
CREATE TABLE mixed (id int, v vector);
INSERT INTO mixed VALUES (1, '[1,2]'), (2, '[1,2,3]');
CREATE INDEX ON mixed USING vs_flat (v);

-- Dimension limit: a vector must fit on a page (2038 dimensions with 8 kB pages)
CREATE TABLE wide (v vector(2039));
CREATE INDEX ON wide USING vs_flat (v);
CREATE TABLE wide_ok (v vector(2038));
CREATE INDEX wide_ok_idx ON wide_ok USING vs_flat (v);
INSERT INTO wide_ok SELECT array_fill(i::real, ARRAY[2038])::vector FROM generate_series(1, 3) i;
SET enable_seqscan = off;
SELECT v[1:1] FROM (SELECT v::real[] AS v FROM wide_ok
  ORDER BY v <-> array_fill(2.2::real, ARRAY[2038])::vector LIMIT 3) s;
RESET enable_seqscan;
CREATE TABLE wide_any (v vector);
CREATE INDEX ON wide_any USING vs_flat (v);
INSERT INTO wide_any SELECT array_fill(1::real, ARRAY[3000])::vector;
INSERT INTO wide_any SELECT array_fill(1::real, ARRAY[2500])::vector;
CREATE INDEX ON wide_any USING vs_flat (v);

-- Options: none exist
CREATE INDEX ON items USING vs_flat (v) WITH (lists = 10);
-- One column only, no uniqueness, no INCLUDE
CREATE INDEX ON items USING vs_flat (v, id);
CREATE UNIQUE INDEX ON items USING vs_flat (v);
CREATE INDEX ON items USING vs_flat (v) INCLUDE (id);

-- Operator classes: valid, and described by the access method's properties
SELECT opcname, amvalidate(c.oid) FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
  WHERE amname = 'vs_flat' ORDER BY opcname;
SELECT opcname, opcdefault FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
  WHERE amname = 'vs_flat' ORDER BY opcname;
SELECT prop, pg_indexam_has_property(a.oid, prop) FROM pg_am a,
  unnest(ARRAY['can_order', 'can_unique', 'can_multi_col', 'can_exclude', 'can_include']) prop
  WHERE amname = 'vs_flat';
SELECT prop, pg_index_has_property('items_idx'::regclass, prop)
  FROM unnest(ARRAY['clusterable', 'index_scan', 'bitmap_scan', 'backward_scan']) prop;
SELECT prop, pg_index_column_has_property('items_idx'::regclass, 1, prop)
  FROM unnest(ARRAY['distance_orderable', 'returnable', 'orderable']) prop;
-- a broken operator class is reported
CREATE OPERATOR CLASS broken_ops FOR TYPE vector USING vs_flat AS
  OPERATOR 1 <<->> (vector, sphere);
SELECT amvalidate(oid) FROM pg_opclass WHERE opcname = 'broken_ops';
DROP OPERATOR FAMILY broken_ops USING vs_flat;

-- DROP INDEX waits for scans (they hold its lock); a dropped index is simply not used
DROP INDEX built_idx;
EXPLAIN (COSTS OFF) SELECT id FROM built ORDER BY v <#> '[1,1,1]' LIMIT 1;
