-- Planner costs: a distance costs in proportion to its dimensions plus, for vectors stored out of
-- line (TOAST), their fetch (vector_distance_support), and a vs_flat index that fits the search
-- layer's cache is not charged its pages per query: so vs_flat wins over a seq scan where it is
-- faster, also for large vectors, and tiny tables keep the seq scan.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;
SET vsearch.device = cpu;

-- The estimated total cost of a query's plan.
CREATE FUNCTION pg_temp.plan_cost(query text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON) ' || query INTO plan;
  RETURN (plan -> 0 -> 'Plan' ->> 'Total Cost')::float8;
END $$;

SELECT setseed(0.5);
-- 784 dimensions: 3 144-byte vectors, stored out of line
CREATE TABLE c784 (id int, v vector(784));
INSERT INTO c784 SELECT i, (SELECT array_agg(random()) FROM generate_series(1, 784) WHERE i > 0)::vector
  FROM generate_series(1, 3000) i;
CREATE TABLE c8 (id int, v vector(8));
INSERT INTO c8 SELECT i, (SELECT array_agg(random()) FROM generate_series(1, 8) WHERE i > 0)::vector
  FROM generate_series(1, 3000) i;
CREATE INDEX c784_idx ON c784 USING vs_flat (v vector_l2_ops);
CREATE INDEX c8_idx ON c8 USING vs_flat (v vector_l2_ops);
ANALYZE c784, c8;
SELECT pg_total_relation_size('c784') > 8 * pg_relation_size('c784') AS out_of_line;

-- the index plan for kNN on both
EXPLAIN (COSTS OFF) SELECT id FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1) LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM c8 ORDER BY v <-> '[0,0,0,0,0,0,0,0]' LIMIT 10;

-- the seq scan of the TOASTed 784-dim vectors is estimated far dearer than the 8-dim one (~13x;
-- without the support function both cost the same: the heap pages hold only TOAST pointers)
SET enable_indexscan = off;
SELECT pg_temp.plan_cost('SELECT id FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1) LIMIT 10')
     > 10 * pg_temp.plan_cost('SELECT id FROM c8 ORDER BY v <-> ''[0,0,0,0,0,0,0,0]'' LIMIT 10')
  AS toast_and_dims_counted;
SELECT pg_temp.plan_cost('SELECT id FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1) LIMIT 10') AS seqscan_cost
\gset
RESET enable_indexscan;
SELECT :seqscan_cost > 10 * pg_temp.plan_cost('SELECT id FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1) LIMIT 10')
  AS index_estimated_10x_cheaper;

-- the same rows either way
SELECT array_agg(id ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1), id) =
       (SELECT array_agg(id) FROM (SELECT id FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1), id LIMIT 10) s)
  AS same_rows
  FROM (SELECT id, v FROM c784 ORDER BY v <-> (SELECT v FROM c784 WHERE id = 1) LIMIT 10) t;

-- a tiny table keeps the seq scan (a search has a fixed cost)
CREATE TABLE c_tiny (id int, v vector(3));
INSERT INTO c_tiny SELECT i, ARRAY[random(), random(), random()] FROM generate_series(1, 50) i;
CREATE INDEX ON c_tiny USING vs_flat (v vector_l2_ops);
ANALYZE c_tiny;
EXPLAIN (COSTS OFF) SELECT id FROM c_tiny ORDER BY v <-> '[0,0,0]' LIMIT 5;

-- a constant operand or an unconstrained column: the default-size estimate, no error
SELECT pg_temp.plan_cost('SELECT ''[1,2,3]''::vector <-> ''[3,2,1]''') > 0 AS costed;
CREATE TABLE c_any (v vector);
SELECT pg_temp.plan_cost('SELECT v <-> ''[1,2,3]'' FROM c_any') > 0 AS costed;

DROP TABLE c784, c8, c_tiny, c_any;
