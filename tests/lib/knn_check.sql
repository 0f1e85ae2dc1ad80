-- kNN answers checked against a sequential scan of the same snapshot, for the concurrency tests
-- (tests/ivfpq_concurrency, tests/flat_concurrency, tests/worker/concurrency), tests/mixed_load
-- and tests/crash_cycles, run by psql in the test database.  tests/lib/knn_diff applies the same
-- rule to answers from different clusters or sessions.
--
-- Two right answers to ORDER BY d LIMIT k may differ: when more rows lie at the k-th distance
-- than the LIMIT has room for, SQL keeps any of them.  An index scan keeps those it returns first
-- (vs_ivfpq: the smallest ctids), a sequential scan's top-N sort those its bounded heap happens to
-- keep, which depends on the order the rows come in and so on where concurrent writes put them.
-- Distances are float4 values, so rows of random 16-dimensional vectors tie now and then
-- (docs/RELIABILITY.md, "The rare wrong answer of tests/ivfpq_concurrency"), and comparing the ids
-- alone fails without any wrong answer.  An answer is right when its distances are the
-- reference's and its rows nearer than the last distance are the reference's; the rows at the
-- last distance may be any of the rows there.

-- Why answer a (ids and distances, sorted by distance then id) is not reference b, or NULL when
-- it is right.
CREATE FUNCTION knn_diff(a_ids bigint[], a_ds float8[], b_ids bigint[], b_ds float8[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  n int := coalesce(cardinality(a_ids), 0);
BEGIN
  IF coalesce(cardinality(a_ds), 0) <> n THEN
    RETURN 'ids and distances of unequal length';
  END IF;
  IF a_ds IS DISTINCT FROM b_ds THEN
    RETURN 'the distances differ';
  END IF;
  IF (SELECT count(DISTINCT x) FROM unnest(a_ids) x) <> n THEN
    RETURN 'a row comes twice';
  END IF;
  IF n > 0 AND (SELECT array_agg(i ORDER BY i) FROM unnest(a_ids, a_ds) u(i, d) WHERE d < a_ds[n])
      IS DISTINCT FROM
      (SELECT array_agg(i ORDER BY i) FROM unnest(b_ids, b_ds) u(i, d) WHERE d < b_ds[n]) THEN
    RETURN 'the rows nearer than the last distance differ';
  END IF;
  RETURN NULL;
END $$;

-- "id:distance" of the rows of answer a that answer b lacks.
CREATE FUNCTION knn_only_in(a_ids bigint[], a_ds float8[], b_ids bigint[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(string_agg(i || ':' || d, ' ' ORDER BY d, i), '-')
    FROM unnest(a_ids, a_ds) u(i, d) WHERE NOT i = ANY (coalesce(b_ids, '{}'))
$$;

-- Raises an error that says what differs when answer a (of `what`) is not reference b; logs (at
-- LOG, "knn_check: tied rows") a right answer whose rows at the last distance differ from b's.
-- tab: the table whose rows are named, for their ctid and xmin in the error; plan: shown too.
CREATE FUNCTION knn_check(what text, a_ids bigint[], a_ds float8[], b_ids bigint[], b_ds float8[],
                          tab regclass, plan text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  why text := knn_diff(a_ids, a_ds, b_ids, b_ds);
  rows text;
BEGIN
  IF why IS NOT NULL THEN
    EXECUTE format('SELECT string_agg(id || '' ctid '' || ctid || '' xmin '' || xmin, ''; '' ORDER BY id)
                      FROM %s WHERE id = ANY ($1)', tab)
      INTO rows USING (SELECT array_agg(DISTINCT x) FROM unnest(a_ids || b_ids) x
                        WHERE NOT (x = ANY (coalesce(a_ids, '{}')) AND x = ANY (coalesce(b_ids, '{}'))));
    RAISE EXCEPTION 'kNN answer wrong (%) for %', why, what
      USING DETAIL = format('answer %s; seq scan %s; only in the answer (id:distance) %s; only in '
                            'the seq scan %s; those rows now %s; answer distances %s; seq scan '
                            'distances %s; plan %s',
                            a_ids, b_ids, knn_only_in(a_ids, a_ds, b_ids),
                            knn_only_in(b_ids, b_ds, a_ids), coalesce(rows, '-'), a_ds, b_ds,
                            coalesce(plan, '-'));
  END IF;
  IF a_ids IS DISTINCT FROM b_ids THEN
    RAISE LOG 'knn_check: tied rows: % and % at distance % for %',
      knn_only_in(a_ids, a_ds, b_ids), knn_only_in(b_ids, b_ds, a_ids),
      a_ds[cardinality(a_ds)], what;
  END IF;
END $$;

-- The plan settings of an index scan (index = true) or of a sequential scan, for the transaction.
CREATE FUNCTION knn_plan(index bool) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('enable_seqscan', CASE WHEN index THEN 'off' ELSE 'on' END, true);
  PERFORM set_config('enable_indexscan', CASE WHEN index THEN 'on' ELSE 'off' END, true);
  PERFORM set_config('enable_bitmapscan', CASE WHEN index THEN 'on' ELSE 'off' END, true);
END $$;

-- query (SELECT id, d ... ORDER BY ... LIMIT k) through the index = through a seq scan, in one
-- snapshot (the caller's REPEATABLE READ transaction); raises an error otherwise.
CREATE FUNCTION check_knn(query text, tab regclass) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  agg text := format('SELECT array_agg(id ORDER BY d, id), array_agg(d::float8 ORDER BY d, id)
                        FROM (%s) s', query);
  a_ids bigint[]; a_ds float8[]; b_ids bigint[]; b_ds float8[];
  plan text;
  line text;
BEGIN
  PERFORM knn_plan(true);
  EXECUTE agg INTO a_ids, a_ds;
  PERFORM knn_plan(false);
  EXECUTE agg INTO b_ids, b_ds;
  IF knn_diff(a_ids, a_ds, b_ids, b_ds) IS NOT NULL THEN
    PERFORM knn_plan(true);
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
      plan := concat_ws(' / ', plan, trim(line));
    END LOOP;
  END IF;
  PERFORM knn_check(query, a_ids, a_ds, b_ids, b_ds, tab, plan);
END $$;
