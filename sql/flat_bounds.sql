-- vs_flat: adversarial data for the exactness of index answers (search.h: the index returns the
-- operators' own values): near ties, huge and tiny magnitudes (results beyond float's range,
-- squares below it), mixed scales.  Index results must equal the seq scan's: the same distances
-- rank by rank, and the same rows wherever the distance is not tied with the last one returned.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Differences between the index and the seq scan answers of
--   SELECT id, v <op> q FROM tbl [WHERE filter] ORDER BY v <op> q LIMIT k
-- for every query q of table qtbl: rank/distance pairs, and ids below the last distance.
CREATE FUNCTION pg_temp.check(tbl text, qtbl text, op text, k int, filter text DEFAULT 'true')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE q text; bad bigint; bad_ids bigint; n bigint; used boolean := false; line text;
BEGIN
  q := format('SELECT q.qid, x.rank, x.id, x.d, max(x.d) OVER (PARTITION BY q.qid) AS last
     FROM %2$s q, LATERAL (SELECT id, d, row_number() OVER () AS rank FROM (
       SELECT id, v %3$s q.v AS d FROM %1$s WHERE %5$s ORDER BY v %3$s q.v LIMIT %4$s) s) x',
     tbl, qtbl, op, k, filter);
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_seqscan', 'on', true);
  EXECUTE 'CREATE TEMP TABLE b_seq AS ' || q;
  PERFORM set_config('enable_indexscan', 'on', true);
  PERFORM set_config('enable_seqscan', 'off', true);
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
    IF line ~ 'Index Scan using' THEN used := true; END IF;
  END LOOP;
  EXECUTE 'CREATE TEMP TABLE b_idx AS ' || q;
  SELECT count(*) INTO n FROM b_seq;
  SELECT count(*) INTO bad FROM (
    (SELECT qid, rank, d FROM b_seq EXCEPT ALL SELECT qid, rank, d FROM b_idx) UNION ALL
    (SELECT qid, rank, d FROM b_idx EXCEPT ALL SELECT qid, rank, d FROM b_seq)) d;
  SELECT count(*) INTO bad_ids FROM (
    (SELECT qid, id FROM b_seq WHERE d < last EXCEPT SELECT qid, id FROM b_idx) UNION ALL
    (SELECT qid, id FROM b_idx WHERE d < last EXCEPT SELECT qid, id FROM b_seq)) d;
  DROP TABLE b_seq, b_idx;
  RETURN format('%s rows, %s differ%s', n, bad + bad_ids,
                CASE WHEN used THEN '' ELSE ', INDEX NOT USED' END);
END $$;

-- Range answers, seq scan vs bitmap scan: rows in one and not the other.
CREATE FUNCTION pg_temp.check_range(tbl text, qtbl text, op text, radius float8)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE q text; bad bigint; n bigint;
BEGIN
  q := format('SELECT q.qid, t.id FROM %2$s q JOIN %1$s t ON t.v %3$s sphere(q.v, %4$s)',
              tbl, qtbl, op, radius);
  PERFORM set_config('enable_indexscan', 'off', true);
  PERFORM set_config('enable_bitmapscan', 'off', true);
  PERFORM set_config('enable_seqscan', 'on', true);
  EXECUTE 'CREATE TEMP TABLE b_seq AS ' || q;
  PERFORM set_config('enable_bitmapscan', 'on', true);
  PERFORM set_config('enable_seqscan', 'off', true);
  EXECUTE 'CREATE TEMP TABLE b_idx AS ' || q;
  SELECT count(*) INTO n FROM b_seq;
  SELECT count(*) INTO bad FROM ((SELECT * FROM b_seq EXCEPT ALL SELECT * FROM b_idx)
    UNION ALL (SELECT * FROM b_idx EXCEPT ALL SELECT * FROM b_seq)) d;
  DROP TABLE b_seq, b_idx;
  RETURN format('%s rows, %s differ', n, bad);
END $$;

SELECT setseed(0.25);

-- Near ties: 1500 copies of one 300-dim vector, each moved by a few ulps in a few elements, so
-- distances agree to 6-7 digits and many round to the same float
CREATE TABLE ties (id int, v vector(300));
CREATE TABLE ties_q (qid int, v vector(300));
INSERT INTO ties_q SELECT 1, array_agg(0.3 + 0.1 * random() ORDER BY j)::vector
  FROM generate_series(1, 300) j;
INSERT INTO ties SELECT i, (SELECT array_agg(x * (1 + (random() - 0.5) * 1e-6 * (j % 7 = 0)::int)
    ORDER BY j) FROM unnest((SELECT v FROM ties_q)::real[]) WITH ORDINALITY u(x, j)
    WHERE j > 0 * i)::vector
  FROM generate_series(1, 1500) i;
INSERT INTO ties_q SELECT 2, array_agg(random() ORDER BY j)::vector FROM generate_series(1, 300) j;
INSERT INTO ties_q SELECT 3, v + v FROM ties_q WHERE qid = 1;
CREATE INDEX ON ties USING vs_flat (v vector_l2_ops);
CREATE INDEX ON ties USING vs_flat (v vector_ip_ops);
CREATE INDEX ON ties USING vs_flat (v vector_cosine_ops);
CREATE INDEX ON ties USING vs_flat (v vector_l1_ops);
ANALYZE ties, ties_q;
SELECT op, pg_temp.check('ties', 'ties_q', op, 40) AS top40,
  pg_temp.check('ties', 'ties_q', op, 40, 'id % 11 = 0') AS filtered
  FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op ORDER BY op;

-- Scales: every row has its own scale, from 1e-22 (squares below float's range) to 1e20 (squares
-- beyond it); queries at several scales too
CREATE TABLE scales (id int, v vector(16));
INSERT INTO scales SELECT i, array_agg((random() - 0.5) * 10 ^ (-22 + (i % 43)) ORDER BY j)::vector
  FROM generate_series(1, 1200) i, generate_series(1, 16) j GROUP BY i;
INSERT INTO scales VALUES (0, array_fill(0, ARRAY[16])::vector);
CREATE TABLE scales_q (qid int, v vector(16));
INSERT INTO scales_q SELECT i, array_agg((random() - 0.5) * 10 ^ (-24 + 6 * i) ORDER BY j)::vector
  FROM generate_series(1, 7) i, generate_series(1, 16) j GROUP BY i;
CREATE INDEX ON scales USING vs_flat (v vector_l2_ops);
CREATE INDEX ON scales USING vs_flat (v vector_ip_ops);
CREATE INDEX ON scales USING vs_flat (v vector_cosine_ops);
CREATE INDEX ON scales USING vs_flat (v vector_l1_ops);
ANALYZE scales, scales_q;
SELECT op, pg_temp.check('scales', 'scales_q', op, 30) AS top30,
  pg_temp.check('scales', 'scales_q', op, 1300) AS everything
  FROM unnest(ARRAY['<->', '<#>', '<=>', '<+>']) op ORDER BY op;
-- some distances overflow to Infinity in the operator
SELECT count(*) > 0 AS has_infinite FROM scales t, scales_q q WHERE t.v <-> q.v = 'Infinity';

-- Range boundaries under the same stress: the radius is exactly some row's distance
SELECT rop, pg_temp.check_range('ties', '(SELECT * FROM ties_q WHERE qid = 1)', rop, (
  SELECT d FROM (SELECT CASE rop WHEN '<<#>>' THEN t.v <#> q.v WHEN '<<=>>' THEN t.v <=> q.v
                        WHEN '<<->>' THEN t.v <-> q.v ELSE t.v <+> q.v END AS d
    FROM ties t, ties_q q WHERE q.qid = 1 ORDER BY 1 OFFSET 700 LIMIT 1) s))
  FROM unnest(ARRAY['<<->>', '<<#>>', '<<=>>', '<<+>>']) rop ORDER BY rop;
SELECT rop, pg_temp.check_range('scales', 'scales_q', rop, r)
  FROM (VALUES ('<<->>', 1e-15), ('<<->>', 1e3), ('<<#>>', -1e-10), ('<<#>>', 1e20),
               ('<<=>>', 0.5), ('<<+>>', 1e6)) c(rop, r) ORDER BY rop, r;
