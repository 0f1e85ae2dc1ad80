-- vector: the sum and avg aggregates, their state functions, parallel aggregation
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT avg(v) AS avg_2_35, sum(v) AS sum_4_7 FROM (VALUES ('[1,2]'::vector), ('[3,5]')) t(v);
SELECT avg(v) AS avg_1_0_1, sum(v) AS sum_3_0_3
FROM (VALUES ('[0.5,-1,3]'::vector), ('[1.5,1,-1]'), ('[1,0,1]')) t(v);
-- NULL rows are skipped; no rows, or only NULLs, give NULL
SELECT avg(v) AS avg_2_3, sum(v) AS sum_4_6 FROM (VALUES ('[1,2]'::vector), (NULL), ('[3,4]')) t(v);
SELECT avg(v), sum(v) FROM (VALUES ('[1,2]'::vector)) t(v) WHERE false;
SELECT avg(v), sum(v) FROM (VALUES (NULL::vector), (NULL)) t(v);
-- grouped
SELECT g, avg(v), sum(v) FROM (VALUES (1, '[1,1]'::vector), (2, '[2,4]'), (1, '[3,3]'), (2, '[4,0]')) t(g, v)
GROUP BY g ORDER BY g;
-- dimension mismatch
SELECT avg(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);
SELECT sum(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);
-- sum overflows like +; avg sums in double, so the same rows average fine
SELECT sum(v) FROM (VALUES ('[3e38]'::vector), ('[3e38]')) t(v);
SELECT avg(v) AS avg_3e38 FROM (VALUES ('[3e38]'::vector), ('[3e38]')) t(v);
-- as window aggregates (a moving frame restarts the state)
SELECT i, avg(v) OVER w AS avg_of_2, sum(v) OVER w AS sum_of_2
FROM (VALUES (1, '[1,10]'::vector), (2, '[3,20]'), (3, '[5,60]'), (4, '[7,0]')) t(i, v)
WINDOW w AS (ORDER BY i ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
ORDER BY i;

-- Many rows, serial and parallel: every partial sum is an integer below 2^24, exact in float, so
-- the results do not depend on how rows are split between workers.
--   avg of [i, 2i, -i] for i = 1..10000 is [5000.5, 10001, -5000.5]
--   sum of [i % 10, 1] is [45000, 10000]
CREATE TABLE vector_agg_t (i integer, v vector(3), w vector(2));
INSERT INTO vector_agg_t
SELECT i, ARRAY[i, 2 * i, -i]::vector, ARRAY[i % 10, 1]::vector FROM generate_series(1, 10000) i;
ANALYZE vector_agg_t;
SELECT avg(v) AS avg_serial, sum(w) AS sum_serial FROM vector_agg_t;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
EXPLAIN (COSTS OFF) SELECT avg(v), sum(w) FROM vector_agg_t;
SELECT avg(v) AS avg_parallel, sum(w) AS sum_parallel FROM vector_agg_t;
--   odd i: avg of 1, 3, ..., 9999 is 5000; even: avg of 2, ..., 10000 is 5001
SELECT i % 2 AS odd, avg(v), sum(w) FROM vector_agg_t GROUP BY 1 ORDER BY 1;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
RESET parallel_leader_participation;
SELECT p.proname, p.proparallel, a.aggcombinefn::regproc AS combine, a.agginitval
FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
WHERE p.proname IN ('avg', 'sum') AND p.proargtypes[0] = 'vector'::regtype ORDER BY p.proname;

-- The state functions called directly: avg's state is {count, sum_1, ..., sum_dim}
SELECT vector_accum('{0}', '[1,2]') AS first, vector_accum('{1,1,2}', '[3,4]') AS second;
SELECT vector_combine('{2,4,6}', '{1,1,1}') AS both, vector_combine('{0}', '{1,1,1}') AS left_empty,
       vector_combine('{2,4,6}', '{0}') AS right_empty, vector_combine('{0}', '{0}') AS none;
SELECT vector_avg('{2,4,6}') AS avg_2_3, vector_avg('{0}') AS no_rows;
-- a direct call leaves its argument alone
SELECT s AS state_unchanged, vector_accum(s, '[1,1]') AS accumulated
FROM (SELECT '{1,1,2}'::double precision[] AS s) t;
SELECT vector_accum('{1,1,2}', '[1,2,3]');
SELECT vector_combine('{1,1,2}', '{1,1,2,3}');
SELECT vector_accum('{}', '[1]');
SELECT vector_accum('{{1,2}}', '[1]');
SELECT vector_combine('{1,NULL}', '{1,1}');
SELECT vector_avg('{0.1,1e38}');
SELECT vector_avg('{1,NaN}');

DROP TABLE vector_agg_t;
