-- A scan with neither an ORDER BY distance nor a range condition is never planned on a vsearch
-- index: NULL keys have no entry, so such a scan cannot return every row.  PostgreSQL offers one
-- for count(*) once VACUUM has set the visibility map (an index-only scan, which failed with "no
-- data returned for index-only scan") and for a partial index whose predicate the query implies
-- (plain or bitmap: rows with a NULL key were missed).  Every count must be the table's, with
-- enable_seqscan = off too.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;

CREATE TABLE nk_rows (id int, v vector(3), w text);
INSERT INTO nk_rows SELECT i, ARRAY[i % 13, i % 7, i % 5]::real[], substr(md5(i::text), 1, 4)
FROM generate_series(1, 500) i;
UPDATE nk_rows SET v = NULL, w = NULL WHERE id % 50 = 0;    -- 10 rows without a key
CREATE TABLE nk_flat AS SELECT * FROM nk_rows;
CREATE TABLE nk_ivfpq AS SELECT * FROM nk_rows;
CREATE TABLE nk_graph AS SELECT * FROM nk_rows;
CREATE TABLE nk_lc AS SELECT * FROM nk_rows;
CREATE TABLE nk_sss AS SELECT * FROM nk_rows;
CREATE INDEX ON nk_flat USING vs_flat (v);
CREATE INDEX ON nk_flat USING vs_flat (v) WHERE id > 10;
CREATE INDEX ON nk_ivfpq USING vs_ivfpq (v) WITH (lists = 4, m = 1);
CREATE INDEX ON nk_ivfpq USING vs_ivfpq (v) WITH (lists = 4, m = 1) WHERE id > 10;
CREATE INDEX ON nk_graph USING vs_graph (v);
CREATE INDEX ON nk_graph USING vs_graph (v) WHERE id > 10;
CREATE INDEX ON nk_lc USING vs_lc (w);
CREATE INDEX ON nk_lc USING vs_lc (v) WHERE id > 10;
CREATE INDEX ON nk_sss USING vs_sss (v);
CREATE INDEX ON nk_sss USING vs_sss (w) WHERE id > 10;
VACUUM nk_flat, nk_ivfpq, nk_graph, nk_lc, nk_sss;

-- the plans: every scan of the table, however the planner is discouraged from it
CREATE FUNCTION nk_plans(tbl text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  q text;
  line text;
BEGIN
  FOREACH q IN ARRAY ARRAY['SELECT count(*) FROM %I', 'SELECT count(*) FROM %I WHERE id > 10',
                           'SELECT count(id) FROM %I WHERE id > 10'] LOOP
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || format(q, tbl) LOOP
      IF line ~ 'Scan' THEN RETURN NEXT regexp_replace(line, '^[ ->]*', ''); END IF;
    END LOOP;
  END LOOP;
END $$;

-- counts through whatever plan was chosen, against the table's (computed with no index)
CREATE FUNCTION nk_counts(tbl text) RETURNS TABLE (all_rows bigint, partial_rows bigint,
                                                   partial_ids bigint) LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('SELECT count(*) FROM %I', tbl) INTO all_rows;
  EXECUTE format('SELECT count(*) FROM %I WHERE id > 10', tbl) INTO partial_rows;
  EXECUTE format('SELECT count(id) FROM %I WHERE id > 10', tbl) INTO partial_ids;
  RETURN NEXT;
END $$;

SELECT count(*) AS all_rows, count(*) FILTER (WHERE id > 10) AS partial_rows FROM nk_rows;

SET enable_seqscan = off;
SELECT t, nk_plans(t) FROM unnest(ARRAY['nk_flat', 'nk_ivfpq', 'nk_graph', 'nk_lc', 'nk_sss']) t;
SELECT t, c.* FROM unnest(ARRAY['nk_flat', 'nk_ivfpq', 'nk_graph', 'nk_lc', 'nk_sss']) t,
  LATERAL nk_counts(t) c;
SET enable_bitmapscan = off;
SET enable_indexscan = off;
SELECT t, c.* FROM unnest(ARRAY['nk_flat', 'nk_ivfpq', 'nk_graph', 'nk_lc', 'nk_sss']) t,
  LATERAL nk_counts(t) c;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;

-- what the index scans are for still uses them
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM nk_flat ORDER BY v <-> '[1,2,3]' LIMIT 3;
SELECT id FROM nk_flat ORDER BY v <-> '[1,2,3]', id LIMIT 3;
EXPLAIN (COSTS OFF) SELECT count(*) FROM nk_lc WHERE w <<~>> sphere('abcd'::text, 2);
SELECT count(*) FROM nk_lc WHERE w <<~>> sphere('abcd'::text, 2);
RESET enable_seqscan;
SELECT count(*) FROM nk_rows WHERE w <~> 'abcd' <= 2;

DROP TABLE nk_rows, nk_flat, nk_ivfpq, nk_graph, nk_lc, nk_sss;
DROP FUNCTION nk_plans(text), nk_counts(text);
