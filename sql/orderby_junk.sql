-- The planner hook (extension/orderby.c): a top-level Limit over an ordered vsearch index scan
-- does not compute the ORDER BY distance a second time for the rows it returns (the target list
-- carries NULL in its place); every plan that reads the value keeps it; the answers are the seq
-- scan's either way.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT setseed(0.17);
CREATE TABLE oj (id int PRIMARY KEY, v vector(8));
INSERT INTO oj SELECT i, array_agg(random() ORDER BY j)::vector
  FROM generate_series(1, 500) i, generate_series(1, 8) j GROUP BY i;
CREATE TABLE oj_q (qid int PRIMARY KEY, v vector(8));
INSERT INTO oj_q SELECT i, array_agg(random() ORDER BY j)::vector
  FROM generate_series(1, 5) i, generate_series(1, 8) j GROUP BY i;
CREATE INDEX oj_flat ON oj USING vs_flat (v vector_l2_ops);
SET enable_seqscan = off;

-- the distance is not selected: NULL in the scan's output
EXPLAIN (VERBOSE, COSTS OFF)
SELECT id FROM oj ORDER BY v <-> (SELECT v FROM oj_q WHERE qid = 1) LIMIT 5;
-- selected, or volatile: computed
EXPLAIN (VERBOSE, COSTS OFF)
SELECT id, v <-> (SELECT v FROM oj_q WHERE qid = 1) AS d FROM oj
  ORDER BY v <-> (SELECT v FROM oj_q WHERE qid = 1) LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF)
SELECT id FROM oj ORDER BY v <-> (CASE WHEN random() >= 0 THEN '[0,0,0,0,0,0,0,0]'::vector END)
  LIMIT 5;
-- no Limit on top (a subquery's sort key is read by the outer query): computed
EXPLAIN (VERBOSE, COSTS OFF)
SELECT s.id FROM (SELECT id, v FROM oj ORDER BY v <-> '[0,0,0,0,0,0,0,0]' LIMIT 5) s
  ORDER BY s.id;

-- partitions: the Merge Append reads every partition's sort key, which stays
CREATE TABLE ojp (id int, v vector(8)) PARTITION BY RANGE (id);
CREATE TABLE ojp1 PARTITION OF ojp FOR VALUES FROM (1) TO (251);
CREATE TABLE ojp2 PARTITION OF ojp FOR VALUES FROM (251) TO (501);
INSERT INTO ojp SELECT id, v FROM oj;
CREATE INDEX ON ojp USING vs_flat (v vector_l2_ops);
EXPLAIN (VERBOSE, COSTS OFF)
SELECT id FROM ojp ORDER BY v <-> '[0,0,0,0,0,0,0,0]' LIMIT 5;

-- answers: top-level statements (here through PL/pgSQL, planned as a pool's prepared statement
-- would be) equal the seq scan's, row for row
CREATE FUNCTION pg_temp.knn(q int) RETURNS SETOF int LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY SELECT id FROM oj ORDER BY v <-> (SELECT v FROM oj_q WHERE qid = q) LIMIT 7;
END $$;
CREATE TEMP TABLE by_index AS SELECT q, array(SELECT pg_temp.knn(q)) AS ids FROM generate_series(1, 5) q;
RESET enable_seqscan;
SET enable_indexscan = off;
SELECT count(*) AS queries_differing FROM by_index b
  WHERE ids IS DISTINCT FROM
        array(SELECT id FROM oj ORDER BY v <-> (SELECT v FROM oj_q WHERE qid = b.q) LIMIT 7);
SELECT count(*) AS queries FROM by_index WHERE cardinality(ids) = 7;
RESET enable_indexscan;
DROP TABLE oj, oj_q, ojp;
