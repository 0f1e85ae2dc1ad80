-- vector: the SQLSTATE of every error class (the messages are shown in the other vector suites)
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

CREATE FUNCTION pg_temp.sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END $$;

-- 22P02 invalid_text_representation: malformed text
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '[1,,2]'::vector$$), ($$SELECT '[1,2,]'::vector$$), ($$SELECT '1,2'::vector$$),
  ($$SELECT '[1 2]'::vector$$), ($$SELECT '[1,2]x'::vector$$), ($$SELECT '[1,2'::vector$$),
  ($$SELECT '[abc]'::vector$$), ($$SELECT ''::vector$$)
) AS t(query);

-- 22000 data_exception: NaN, infinity, empty vectors, dimension and typmod mismatches, arrays
-- that are not one-dimensional
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '[NaN]'::vector$$), ($$SELECT '[-Infinity]'::vector$$), ($$SELECT '[]'::vector$$),
  ($$SELECT '{NaN}'::real[]::vector$$), ($$SELECT '{Infinity}'::double precision[]::vector$$),
  ($$SELECT '{NaN}'::numeric[]::vector$$), ($$SELECT '{}'::integer[]::vector$$),
  ($$SELECT '{{1},{2}}'::integer[]::vector$$),
  ($$SELECT '[1,2]'::vector(3)$$), ($$SELECT '{1,2}'::integer[]::vector(3)$$),
  ($$SELECT '[1,2]'::vector <-> '[1]'$$), ($$SELECT '[1,2]'::vector <#> '[1]'$$),
  ($$SELECT '[1,2]'::vector <=> '[1]'$$), ($$SELECT '[1,2]'::vector <+> '[1]'$$),
  ($$SELECT inner_product('[1,2]', '[1]')$$),
  ($$SELECT '[1,2]'::vector + '[1]'$$), ($$SELECT '[1,2]'::vector - '[1]'$$),
  ($$SELECT '[1,2]'::vector * '[1]'$$),
  ($$SELECT avg(v) FROM (VALUES ('[1,2]'::vector), ('[1]')) t(v)$$),
  ($$SELECT sum(v) FROM (VALUES ('[1,2]'::vector), ('[1]')) t(v)$$)
) AS t(query);

-- 54000 program_limit_exceeded: more than 16000 dimensions
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT ('[' || array_to_string(array_fill(0, ARRAY[16001]), ',') || ']')::vector$$),
  ($$SELECT array_fill(0, ARRAY[16001])::vector$$)
) AS t(query);

-- 22003 numeric_value_out_of_range: values beyond float4, overflowing arithmetic
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '[1e39]'::vector$$), ($$SELECT '{1e300}'::double precision[]::vector$$),
  ($$SELECT '{1e39}'::numeric[]::vector$$),
  ($$SELECT '[3e38]'::vector + '[3e38]'$$), ($$SELECT '[-3e38]'::vector - '[3e38]'$$),
  ($$SELECT '[1e20]'::vector * '[1e20]'$$), ($$SELECT '[1e-30]'::vector * '[1e-30]'$$),
  ($$SELECT sum(v) FROM (VALUES ('[3e38]'::vector), ('[3e38]')) t(v)$$),
  ($$SELECT '[3e9]'::vector::integer[]$$)
) AS t(query);

-- 22004 null_value_not_allowed: arrays with NULL elements
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '{1,NULL}'::integer[]::vector$$), ($$SELECT '{NULL}'::real[]::vector$$),
  ($$SELECT '{1,NULL}'::double precision[]::vector$$), ($$SELECT '{NULL,1}'::numeric[]::vector$$)
) AS t(query);

-- 22023 invalid_parameter_value: bad type modifiers
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT NULL::vector(0)$$), ($$SELECT NULL::vector(16001)$$), ($$SELECT NULL::vector(1, 2)$$)
) AS t(query);

-- The same, as psql shows them with VERBOSITY sqlstate
\set VERBOSITY sqlstate
SELECT '[1,,2]'::vector;
SELECT '[nan]'::vector;
SELECT '[1,2]'::vector <-> '[1]';
SELECT array_fill(0, ARRAY[16001])::vector;
SELECT '[3e38]'::vector + '[3e38]';
SELECT '{1,NULL}'::integer[]::vector;
\set VERBOSITY default
DO $$ BEGIN PERFORM '[nan]'::vector; EXCEPTION WHEN others THEN RAISE NOTICE '%', SQLSTATE; END $$;
