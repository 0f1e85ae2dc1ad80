-- vector: casts from and to arrays, and the length coercion of vector(n)
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- The casts and their contexts (a = assignment, i = implicit, e = explicit), as in pgvector
SELECT castsource::regtype AS source, casttarget::regtype AS target, castcontext AS context,
       castfunc::regprocedure AS function
FROM pg_cast
WHERE castsource = 'vector'::regtype OR casttarget = 'vector'::regtype
ORDER BY castsource::regtype::text, casttarget::regtype::text;

-- Arrays to vector
SELECT '{1,2,3}'::integer[]::vector AS from_int;
SELECT '{1.5,-2.25,0.1}'::real[]::vector AS from_real;
SELECT '{1.5,-2.25,0.1}'::double precision[]::vector AS from_double;
SELECT '{1.5,-2.25,0.1,1e-45}'::numeric[]::vector AS from_numeric;
-- integers beyond 2^24 round to the nearest float, like integer::real
SELECT '{16777217,-2147483648}'::integer[]::vector AS rounded;
-- any lower bound, one dimension
SELECT '[5:6]={7,8}'::integer[]::vector AS lower_bound_5;
-- the typmod is honoured by explicit and assignment casts
SELECT '{1,2,3}'::integer[]::vector(3) AS typmod_ok;
SELECT '{1,2}'::integer[]::vector(3);
SELECT '{1,2}'::real[]::vector(3);
SELECT '{1,2}'::double precision[]::vector(3);
SELECT '{1,2}'::numeric[]::vector(3);
CREATE TABLE vector_cast_t (v vector(2));
INSERT INTO vector_cast_t VALUES ('{1,2}'::integer[]), ('{3,4}'::real[]), ('{5,6}'::double precision[]),
  ('{7,8}'::numeric[]);
INSERT INTO vector_cast_t VALUES ('{1,2,3}'::integer[]);
INSERT INTO vector_cast_t VALUES ('{1,2,3}'::real[]);
SELECT v FROM vector_cast_t ORDER BY v;
-- no implicit cast from arrays: this resolves no operator
SELECT '{1,2}'::integer[] <-> '[1,2]'::vector;

-- Array errors: NULL elements, several dimensions, empty, too long
SELECT '{1,NULL}'::integer[]::vector;
SELECT '{NULL}'::real[]::vector;
SELECT '{1,NULL}'::double precision[]::vector;
SELECT '{1,NULL}'::numeric[]::vector;
SELECT '{{1,2},{3,4}}'::integer[]::vector;
SELECT '{{1.5}}'::real[]::vector;
SELECT '{}'::integer[]::vector;
SELECT '{}'::real[]::vector;
SELECT array_fill(1, ARRAY[16000])::vector IS NOT NULL AS max_dims_ok;
SELECT array_fill(1, ARRAY[16001])::vector;
SELECT array_fill(1.5::real, ARRAY[16001])::vector;
-- values that are not finite floats
SELECT '{NaN}'::real[]::vector;
SELECT '{1,Infinity}'::real[]::vector;
SELECT '{NaN}'::double precision[]::vector;
SELECT '{-Infinity}'::double precision[]::vector;
SELECT '{1e300}'::double precision[]::vector;
SELECT '{-1e300}'::double precision[]::vector;
-- too small for a float: a zero, as in pgvector
SELECT '{1e-300}'::double precision[]::vector;
SELECT '{NaN}'::numeric[]::vector;
SELECT '{Infinity}'::numeric[]::vector;
SELECT '{1e39}'::numeric[]::vector;

-- Vector to arrays
SELECT '[1,2.5,-0.1]'::vector::real[] AS to_real;
SELECT '[1,2.5,-0.1]'::vector::double precision[] AS to_double;
-- to integer: rounded half to even like real::integer, and range-checked
SELECT '[1.5,2.5,-0.5,-1.5,3.7,-3.7]'::vector::integer[] AS to_int;
SELECT '[2147483520,-2147483648]'::vector::integer[] AS int_limits;
SELECT '[2147483648]'::vector::integer[];
SELECT '[1,-3e9]'::vector::integer[];
-- to numeric: the shortest decimal that reads back to the same float, as the text form shows
SELECT '[0.1,1.2345678,-3e-2,1e20,1e-45]'::vector::numeric[] AS to_numeric;
-- vector to real[] is implicit: a function taking real[] accepts a vector
CREATE FUNCTION pg_temp.real_sum(real[]) RETURNS real LANGUAGE sql AS 'SELECT sum(x) FROM unnest($1) x';
SELECT pg_temp.real_sum('[1,2,3.5]'::vector) AS implicit_to_real_6_5;
CREATE TABLE vector_cast_arrays (r real[], d double precision[], i integer[], n numeric[]);
INSERT INTO vector_cast_arrays VALUES ('[1.5,2]'::vector, '[1.5,2]'::vector::double precision[],
  '[1.5,2]'::vector::integer[], '[1.5,2]'::vector::numeric[]);
SELECT * FROM vector_cast_arrays;
-- the other array casts are explicit only
INSERT INTO vector_cast_arrays (d) VALUES ('[1,2]'::vector);
-- round trips
SELECT '[0.1,-2,3.4028235e38]'::vector::real[]::vector AS via_real,
       '[0.1,-2,3.4028235e38]'::vector::double precision[]::vector AS via_double,
       '[0.1,-2,3.4028235e38]'::vector::numeric[]::vector AS via_numeric;
SELECT NULL::vector::real[] AS to_null, NULL::integer[]::vector AS from_null;

DROP TABLE vector_cast_t, vector_cast_arrays;
