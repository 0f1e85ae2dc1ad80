-- The sharded search functions (extension/sql/50-shards.sql) on local partitions, and their
-- errors.  tests/shards runs them against foreign partitions on other clusters.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
RESET client_min_messages;
\set SHOW_CONTEXT never

SELECT setseed(0.5);
CREATE TABLE sh (id bigint NOT NULL, tag text, v vector(8)) PARTITION BY HASH (id);
CREATE TABLE sh_0 PARTITION OF sh FOR VALUES WITH (MODULUS 3, REMAINDER 0);
CREATE TABLE sh_1 PARTITION OF sh FOR VALUES WITH (MODULUS 3, REMAINDER 1);
-- a partition attached with another column order and a dropped column
CREATE TABLE sh_2 (x int, v vector(8), tag text, id bigint NOT NULL);
ALTER TABLE sh_2 DROP COLUMN x;
ALTER TABLE sh ATTACH PARTITION sh_2 FOR VALUES WITH (MODULUS 3, REMAINDER 2);
INSERT INTO sh SELECT i, 'row ' || i,
  (SELECT array_agg(random()::real) FROM generate_series(1, 8) WHERE i > 0)::vector
  FROM generate_series(1, 900) i;
CREATE INDEX ON sh_0 USING vs_flat (v vector_l2_ops);
CREATE INDEX ON sh_1 USING vs_flat (v vector_l2_ops);
CREATE INDEX ON sh_2 USING vs_flat (v vector_l2_ops);
CREATE INDEX ON sh_0 USING vs_flat (v vector_cosine_ops);
CREATE INDEX ON sh_1 USING vs_flat (v vector_cosine_ops);
CREATE INDEX ON sh_2 USING vs_flat (v vector_cosine_ops);
CREATE TABLE shq (qid int, q vector(8));
INSERT INTO shq SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 8)
                           WHERE i > 0)::vector FROM generate_series(1, 6) i;

-- vsearch_knn_sharded returns rows of the table, nearest first, as ORDER BY ... LIMIT does
SELECT q.qid, (SELECT array_agg(id) FROM vsearch_knn_sharded(NULL::sh, 'v', q.q, 5))
     = (SELECT array_agg(id) FROM (SELECT id FROM sh ORDER BY v <-> q.q LIMIT 5) s) AS same
  FROM shq q ORDER BY q.qid;
SELECT q.qid, (SELECT array_agg(id) FROM vsearch_knn_sharded(NULL::sh, 'v', q.q, 7, '<=>'))
     = (SELECT array_agg(id) FROM (SELECT id FROM sh ORDER BY v <=> q.q LIMIT 7) s) AS same
  FROM shq q ORDER BY q.qid;
SELECT s.id, s.tag = 'row ' || s.id AS tag_ok, vector_dims(s.v)
  FROM vsearch_knn_sharded(NULL::sh, 'v', '[0,0,0,0,0,0,0,0]', 3) s
 ORDER BY s.v <-> '[0,0,0,0,0,0,0,0]';
SELECT count(*) FROM vsearch_knn_sharded(NULL::sh, 'v', '[0,0,0,0,0,0,0,0]', 5000);
SELECT count(*) FROM vsearch_knn_sharded(NULL::sh, 'v', NULL, 5);
-- a plain table is its own only partition
SELECT (SELECT array_agg(id) FROM vsearch_knn_sharded(NULL::sh_2, 'v', q.q, 4))
     = (SELECT array_agg(id) FROM (SELECT id FROM sh_2 ORDER BY v <-> q.q LIMIT 4) s) AS same
  FROM shq q WHERE q.qid = 1;

-- the batch functions: every partition's vsearch_knn_batch / vsearch_range_batch, merged
CREATE TEMP TABLE exact AS
  SELECT q.qid AS query, x.id, x.d AS distance FROM shq q,
         LATERAL (SELECT id, v <-> q.q AS d FROM sh ORDER BY v <-> q.q, id LIMIT 10) x;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE e.id IS NULL OR b.id IS NULL OR e.distance <> b.distance) AS differ
  FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY(SELECT q FROM shq ORDER BY qid), 10) b
  FULL JOIN exact e USING (query, id);
SELECT count(*) AS rows, count(*) FILTER (WHERE b.id IS NULL OR s.id IS NULL) AS differ
  FROM vsearch_range_batch_sharded('sh', 'v', ARRAY(SELECT q FROM shq ORDER BY qid), 0.9) b
  FULL JOIN (SELECT q.qid AS query, t.id FROM shq q JOIN sh t ON t.v <-> q.q <= 0.9) s
       USING (query, id);
SELECT count(*) AS rows,
       count(*) FILTER (WHERE e.id IS NULL OR b.id IS NULL OR e.distance <> b.distance) AS differ
  FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY(SELECT q FROM shq ORDER BY qid), 4, op => '<=>') b
  FULL JOIN (SELECT q.qid AS query, x.id, x.d AS distance FROM shq q,
                    LATERAL (SELECT id, v <=> q.q AS d FROM sh ORDER BY v <=> q.q, id LIMIT 4) x) e
       USING (query, id);
-- ordered by query, then distance
SELECT bool_and(ok) FROM (
  SELECT (query, distance) >= lag((query, distance)) OVER () AS ok
    FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY(SELECT q FROM shq ORDER BY qid), 10)) s;
-- id_column: any column cast to bigint
SELECT count(*) FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3,
                                               id_column => 'id');

-- the two internal steps of the batch functions: queries in binary, the merge
SELECT vsearch_unpack_vectors(array_send(ARRAY['[1,2.5,-3e-7]', '[4,5,6]']::vector[]));
SELECT vsearch_unpack_vectors(array_send(ARRAY(SELECT q FROM shq ORDER BY qid)))
     = ARRAY(SELECT q FROM shq ORDER BY qid) AS same;
SELECT vsearch_unpack_vectors(array_send(ARRAY[]::vector[]));
SELECT * FROM vsearch_merge_batch(ARRAY[2, 1, 1, 2, 1, 1], ARRAY[7, 3, 9, 8, 4, 5],
                                  ARRAY[0.5, 'NaN', 0.25, 0.5, 0.25, 0.125], 2);
SELECT * FROM vsearch_merge_batch(ARRAY[2, 1, 1], ARRAY[7, 3, 9], ARRAY[0.5, 'NaN', 0.25], NULL);
SELECT * FROM vsearch_merge_batch('{}', '{}', '{}', 3);

-- vsearch_index_for: the index of that column and operator, vs_flat first
SELECT vsearch_index_for('sh_0', 'v', '<->'), vsearch_index_for('sh_0', 'v', '<=>');
CREATE INDEX sh_0_ivfpq ON sh_0 USING vs_ivfpq (v vector_ip_ops) WITH (lists = 2);
SELECT vsearch_index_for('sh_0', 'v', '<#>');

-- errors
SELECT vsearch_index_for('sh_0', 'v', '<+>');
SELECT * FROM vsearch_knn_sharded(NULL::sh, 'v', '[0,0,0,0,0,0,0,0]', 0);
SELECT * FROM vsearch_knn_sharded(NULL::int, 'v', '[0,0,0,0,0,0,0,0]', 3);
SELECT * FROM vsearch_knn_sharded(NULL::sh, 'w', '[0,0,0,0,0,0,0,0]', 3);
SELECT * FROM vsearch_knn_sharded(NULL::sh, 'v', '[0,0,0,0,0,0,0,0]', 3, '<<->>');
SELECT * FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 0);
SELECT * FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3,
                                        id_column => 'nope');
SELECT * FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3, '<+>');
SELECT * FROM vsearch_knn_batch_sharded('sh', 'v', ARRAY['[0,0,0]'::vector], 3);
SELECT * FROM vsearch_knn_batch_sharded('sh', 'tag', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3);
SELECT vsearch_unpack_vectors(array_send(ARRAY['[1,2]'::vector]) || '\x00'::bytea);
SELECT vsearch_unpack_vectors('\x0001'::bytea);
SELECT vsearch_unpack_vectors(array_send(ARRAY[1, 2]));
SELECT * FROM vsearch_merge_batch(ARRAY[1, 2], ARRAY[1], ARRAY[0.5, 0.5], 1);
SELECT * FROM vsearch_merge_batch(ARRAY[1], ARRAY[NULL::bigint], ARRAY[0.5], 1);
SELECT * FROM vsearch_merge_batch(ARRAY[1], ARRAY[1], ARRAY[0.5], 0);
-- a foreign partition: postgres_fdw needs dblink for the batch; other wrappers are refused
CREATE SERVER sh_nowhere FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host 'localhost', port '1');
CREATE TABLE shf (id bigint NOT NULL, v vector(8)) PARTITION BY LIST (id);
CREATE FOREIGN TABLE shf_1 PARTITION OF shf FOR VALUES IN (1) SERVER sh_nowhere;
SELECT * FROM vsearch_knn_batch_sharded('shf', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3);
CREATE FOREIGN DATA WRAPPER sh_other;
CREATE SERVER sh_other_srv FOREIGN DATA WRAPPER sh_other;
CREATE FOREIGN TABLE shf_2 PARTITION OF shf FOR VALUES IN (2) SERVER sh_other_srv;
SELECT * FROM vsearch_knn_batch_sharded('shf', 'v', ARRAY['[0,0,0,0,0,0,0,0]'::vector], 3);

DROP TABLE shf, sh, shq;
DROP SERVER sh_nowhere, sh_other_srv;
DROP FOREIGN DATA WRAPPER sh_other;
DROP EXTENSION postgres_fdw;
