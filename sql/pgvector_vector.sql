-- pgvector parity for the vector type: the statements of pgvector 0.8's own tests of its vector
-- type, run unchanged.  The results are pgvector's except for the wording of some errors and the
-- deliberate differences listed in README.md ("Differences from pgvector"), marked DIFFERENCE
-- below.  Then the functions pgvector has and vsearch added for it (subvector, binary_quantize,
-- ||), checked against independent computations.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT '[1,2,3]'::vector;
SELECT '[-1,-2,-3]'::vector;
SELECT '[1.,2.,3.]'::vector;
SELECT ' [ 1,  2 ,    3  ] '::vector;
SELECT '[1.23456]'::vector;
SELECT '[hello,1]'::vector;
SELECT '[NaN,1]'::vector;
SELECT '[Infinity,1]'::vector;
SELECT '[-Infinity,1]'::vector;
SELECT '[1.5e38,-1.5e38]'::vector;
SELECT '[1.5e+38,-1.5e+38]'::vector;
SELECT '[1.5e-38,-1.5e-38]'::vector;
SELECT '[4e38,1]'::vector;
SELECT '[-4e38,1]'::vector;
SELECT '[1e-46,1]'::vector;
SELECT '[-1e-46,1]'::vector;
SELECT '[1,2,3'::vector;
SELECT '[1,2,3]9'::vector;
SELECT '1,2,3'::vector;
SELECT ''::vector;
SELECT '['::vector;
SELECT '[ '::vector;
SELECT '[,'::vector;
SELECT '[]'::vector;
SELECT '[ ]'::vector;
SELECT '[,]'::vector;
SELECT '[1,]'::vector;
SELECT '[1a]'::vector;
SELECT '[1,,3]'::vector;
SELECT '[1, ,3]'::vector;
SELECT '[1,2,3]'::vector(3);
SELECT '[1,2,3]'::vector(2);
SELECT '[1,2,3]'::vector(3, 2);
SELECT '[1,2,3]'::vector('a');
SELECT '[1,2,3]'::vector(0);
SELECT '[1,2,3]'::vector(16001);
SELECT unnest('{"[1,2,3]", "[4,5,6]"}'::vector[]);
SELECT '{"[1,2,3]"}'::vector(2)[];
SELECT '[1,2,3]'::vector + '[4,5,6]';
SELECT '[3e38]'::vector + '[3e38]';
SELECT '[1,2]'::vector + '[3]';
SELECT '[1,2,3]'::vector - '[4,5,6]';
SELECT '[-3e38]'::vector - '[3e38]';
SELECT '[1,2]'::vector - '[3]';
SELECT '[1,2,3]'::vector * '[4,5,6]';
SELECT '[1e37]'::vector * '[1e37]';
SELECT '[1e-37]'::vector * '[1e-37]';
SELECT '[1,2]'::vector * '[3]';
SELECT '[1,2,3]'::vector || '[4,5]';
SELECT array_fill(0, ARRAY[16000])::vector || '[1]';
SELECT '[1,2,3]'::vector < '[1,2,3]';
SELECT '[1,2,3]'::vector < '[1,2]';
SELECT '[1,2,3]'::vector <= '[1,2,3]';
SELECT '[1,2,3]'::vector <= '[1,2]';
SELECT '[1,2,3]'::vector = '[1,2,3]';
SELECT '[1,2,3]'::vector = '[1,2]';
SELECT '[1,2,3]'::vector != '[1,2,3]';
SELECT '[1,2,3]'::vector != '[1,2]';
SELECT '[1,2,3]'::vector >= '[1,2,3]';
SELECT '[1,2,3]'::vector >= '[1,2]';
SELECT '[1,2,3]'::vector > '[1,2,3]';
SELECT '[1,2,3]'::vector > '[1,2]';
SELECT vector_cmp('[1,2,3]', '[1,2,3]');
SELECT vector_cmp('[1,2,3]', '[0,0,0]');
SELECT vector_cmp('[0,0,0]', '[1,2,3]');
SELECT vector_cmp('[1,2]', '[1,2,3]');
SELECT vector_cmp('[1,2,3]', '[1,2]');
SELECT vector_cmp('[1,2]', '[2,3,4]');
SELECT vector_cmp('[2,3]', '[1,2,3]');
SELECT vector_dims('[1,2,3]'::vector);
SELECT round(vector_norm('[1,1]')::numeric, 5);
SELECT vector_norm('[3,4]');
SELECT vector_norm('[0,1]');
SELECT vector_norm('[3e37,4e37]')::real;
SELECT vector_norm('[0,0]');
SELECT vector_norm('[2]');
SELECT l2_distance('[0,0]'::vector, '[3,4]');
SELECT l2_distance('[0,0]'::vector, '[0,1]');
SELECT l2_distance('[1,2]'::vector, '[3]');
SELECT l2_distance('[3e38]'::vector, '[-3e38]');
SELECT l2_distance('[1,1,1,1,1,1,1,1,1]'::vector, '[1,1,1,1,1,1,1,4,5]');
SELECT '[0,0]'::vector <-> '[3,4]';
SELECT inner_product('[1,2]'::vector, '[3,4]');
SELECT inner_product('[1,2]'::vector, '[3]');
SELECT inner_product('[3e38]'::vector, '[3e38]');
SELECT inner_product('[1,1,1,1,1,1,1,1,1]'::vector, '[1,2,3,4,5,6,7,8,9]');
SELECT '[1,2]'::vector <#> '[3,4]';
SELECT cosine_distance('[1,2]'::vector, '[2,4]');
SELECT cosine_distance('[1,2]'::vector, '[0,0]');
SELECT cosine_distance('[1,1]'::vector, '[1,1]');
SELECT cosine_distance('[1,0]'::vector, '[0,2]');
SELECT cosine_distance('[1,1]'::vector, '[-1,-1]');
SELECT cosine_distance('[1,2]'::vector, '[3]');
SELECT cosine_distance('[1,1]'::vector, '[1.1,1.1]');
SELECT cosine_distance('[1,1]'::vector, '[-1.1,-1.1]');
-- DIFFERENCE: pgvector sums in float and gets Inf/Inf = NaN; vsearch's exact distance is 0
SELECT cosine_distance('[3e38]'::vector, '[3e38]');
SELECT cosine_distance('[1,2,3,4,5,6,7,8,9]'::vector, '[1,2,3,4,5,6,7,8,9]');
SELECT cosine_distance('[1,2,3,4,5,6,7,8,9]'::vector, '[-1,-2,-3,-4,-5,-6,-7,-8,-9]');
SELECT '[1,2]'::vector <=> '[2,4]';
SELECT l1_distance('[0,0]'::vector, '[3,4]');
SELECT l1_distance('[0,0]'::vector, '[0,1]');
SELECT l1_distance('[1,2]'::vector, '[3]');
SELECT l1_distance('[3e38]'::vector, '[-3e38]');
SELECT l1_distance('[1,2,3,4,5,6,7,8,9]'::vector, '[1,2,3,4,5,6,7,8,9]');
SELECT l1_distance('[1,2,3,4,5,6,7,8,9]'::vector, '[0,3,2,5,4,7,6,9,8]');
SELECT '[0,0]'::vector <+> '[3,4]';
SELECT l2_normalize('[3,4]'::vector);
SELECT l2_normalize('[3,0]'::vector);
SELECT l2_normalize('[0,0.1]'::vector);
SELECT l2_normalize('[0,0]'::vector);
SELECT l2_normalize('[3e38]'::vector);
SELECT binary_quantize('[1,0,-1]'::vector);
SELECT binary_quantize('[0,0.1,-0.2,-0.3,0.4,0.5,0.6,-0.7,0.8,-0.9,1]'::vector);
SELECT binary_quantize('[1,2,3,-4,5,6,-7,8,1,-2,-3,4,5,-6,7,8,-1,2,3]'::vector);
SELECT subvector('[1,2,3,4,5]'::vector, 1, 3);
SELECT subvector('[1,2,3,4,5]'::vector, 3, 2);
SELECT subvector('[1,2,3,4,5]'::vector, -1, 3);
SELECT subvector('[1,2,3,4,5]'::vector, 3, 9);
SELECT subvector('[1,2,3,4,5]'::vector, 1, 0);
SELECT subvector('[1,2,3,4,5]'::vector, 3, -1);
SELECT subvector('[1,2,3,4,5]'::vector, -1, 2);
SELECT subvector('[1,2,3,4,5]'::vector, 2147483647, 10);
SELECT subvector('[1,2,3,4,5]'::vector, 3, 2147483647);
SELECT subvector('[1,2,3,4,5]'::vector, -2147483644, 2147483647);
SELECT avg(v) FROM unnest(ARRAY['[1,2,3]'::vector, '[3,5,7]']) v;
SELECT avg(v) FROM unnest(ARRAY['[1,2,3]'::vector, '[3,5,7]', NULL]) v;
SELECT avg(v) FROM unnest(ARRAY[]::vector[]) v;
SELECT avg(v) FROM unnest(ARRAY['[1,2]'::vector, '[3]']) v;
SELECT avg(v) FROM unnest(ARRAY['[3e38]'::vector, '[3e38]']) v;
SELECT vector_avg(array_agg(n)) FROM generate_series(1, 16002) n;
SELECT vector_accum('{0}', '[1,2,3]');
SELECT vector_accum('{0,0,0,0}', '[1,2,3]');
SELECT vector_accum('{}', '[1,2,3]');
SELECT vector_accum('{0,0}', '[1,2,3]');
SELECT vector_combine('{1,2}', '{3,4}');
SELECT vector_combine('{{1,2}}', '{3,4}');
SELECT vector_combine('{1,2}', '{{3,4}}');
SELECT vector_combine('{}', '{0}');
SELECT vector_combine('{0}', '{}');
-- DIFFERENCE: two empty states make an empty state (pgvector: an error)
SELECT vector_combine('{0}', '{0}');
SELECT vector_combine('{0}', (SELECT array_agg(n) FROM generate_series(1, 16002) n));
SELECT vector_combine((SELECT array_agg(n) FROM generate_series(1, 16002) n), '{0}');
SELECT vector_combine((SELECT array_agg(n) FROM generate_series(1, 16002) n), (SELECT array_agg(n) FROM generate_series(1, 16002) n));
SELECT sum(v) FROM unnest(ARRAY['[1,2,3]'::vector, '[3,5,7]']) v;
SELECT sum(v) FROM unnest(ARRAY['[1,2,3]'::vector, '[3,5,7]', NULL]) v;
SELECT sum(v) FROM unnest(ARRAY[]::vector[]) v;
SELECT sum(v) FROM unnest(ARRAY['[1,2]'::vector, '[3]']) v;
SELECT sum(v) FROM unnest(ARRAY['[3e38]'::vector, '[3e38]']) v;

-- subvector against a reference computed with arrays: every (start, count) in -3..8 x -2..8 over
-- a 6-element vector either equals the array slice [max(start,1) .. min(start+count-1, 6)] or,
-- when that slice is empty, is the 22000 error.
CREATE FUNCTION pg_temp.sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END $$;
CREATE FUNCTION pg_temp.subvector_or_error(v vector, s integer, c integer) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  RETURN subvector(v, s, c)::text;
EXCEPTION WHEN data_exception THEN
  RETURN SQLSTATE;
END $$;
SELECT count(*) AS cases,
       count(*) FILTER (WHERE got = want) AS agree,
       count(*) FILTER (WHERE got = '22000') AS errors
FROM (
  SELECT pg_temp.subvector_or_error('[1.5,2,-3,4e10,5,6]', s, c) AS got,
         CASE WHEN greatest(s, 1) <= least(s + c - 1, 6)
              THEN ((ARRAY[1.5,2,-3,4e10,5,6]::real[])[greatest(s, 1):least(s + c - 1, 6)])::vector::text
              ELSE '22000' END AS want
  FROM generate_series(-3, 8) s, generate_series(-2, 8) c
) t;
-- the extremes of int4 cannot overflow the bounds
SELECT subvector('[1,2,3]', -2147483648, 2147483647) AS empty_or_error;
SELECT subvector('[1,2,3]', 2147483647, 2147483647) AS past_the_end;
SELECT subvector('[1,2,3]', -2147483648, -2147483648) AS negative_count;
SELECT subvector('[1,2,3]', 1, 2147483647) AS all_of_it, subvector('[1,2,3]', 3, 1) AS last;
-- the result of a vector(n) column is an unconstrained vector
SELECT pg_typeof(subvector('[1,2,3]'::vector(3), 1, 2)), vector_dims(subvector(array_fill(1, ARRAY[16000])::vector, 100, 15000));
SELECT pg_temp.sqlstate_of($$SELECT subvector('[1,2,3]', 4, 1)$$) AS past_the_end,
       pg_temp.sqlstate_of($$SELECT subvector('[1,2,3]', 1, 0)$$) AS zero_count;

-- || : the elements of both, in order; 16000 in all is the limit
SELECT '[1]'::vector || '[2]' || '[3,4]' AS chained, vector_dims(array_fill(0, ARRAY[8000])::vector || array_fill(0, ARRAY[8000])::vector) AS dims_16000;
SELECT pg_temp.sqlstate_of($$SELECT array_fill(0, ARRAY[8000])::vector || array_fill(0, ARRAY[8001])::vector$$) AS over_16000;
-- concatenation agrees with array concatenation
SELECT count(*) AS pairs, count(*) FILTER (WHERE (a || b)::real[] = a::real[] || b::real[]) AS agree
FROM (SELECT ARRAY(SELECT (random() * 100 - 50)::real FROM generate_series(1, n))::vector AS a,
             ARRAY(SELECT (random() * 100 - 50)::real FROM generate_series(1, m))::vector AS b
      FROM generate_series(1, 20) n, generate_series(1, 20, 7) m) t;
-- text concatenation still works when an operand is text
SELECT '[1,2]'::vector::text || 'x' AS text_concat, '[1,2]'::vector || '[3]'::text AS vector_then_text;
SELECT '[1,2]'::vector(2) || '[3]'::vector(1) AS typmods_dropped;

-- binary_quantize: a bit string, bit i set where element i > 0 (zero and -0 give 0), against a
-- reference built with string_agg; lengths that are not a multiple of 8 included
SELECT binary_quantize('[0,-0,1e-45,-1e-45]') AS zeros_and_denormals, pg_typeof(binary_quantize('[1]'));
SELECT count(*) AS vectors,
       count(*) FILTER (WHERE binary_quantize(v)::text =
                        (SELECT string_agg(CASE WHEN x > 0 THEN '1' ELSE '0' END, '' ORDER BY i)
                         FROM unnest(v::real[]) WITH ORDINALITY u(x, i))) AS agree,
       count(*) FILTER (WHERE length(binary_quantize(v)) = vector_dims(v)) AS right_length
FROM (SELECT ARRAY(SELECT (random() * 2 - 1)::real FROM generate_series(1, n))::vector AS v
      FROM generate_series(1, 70) n) t;
SELECT length(binary_quantize(array_fill(1, ARRAY[16000])::vector)) AS bits_16000,
       bit_count(binary_quantize(array_fill(1, ARRAY[16000])::vector)) AS ones;
-- the bit type's operators apply: Hamming distance of two quantized vectors
SELECT bit_count(binary_quantize('[1,-1,1,-1,1]') # binary_quantize('[1,1,1,1,-1]')) AS hamming_3;

-- underflow: values too small for a float become a signed zero or a denormal, in text input and
-- in double precision[] casts; overflow stays an error
SELECT '[1e-46,-1e-46,1e-45,1e-39]'::vector AS from_text,
       '{1e-46,-1e-46,1e-300}'::double precision[]::vector AS from_float8;
SELECT pg_temp.sqlstate_of($$SELECT '[1e39]'::vector$$) AS text_overflow,
       pg_temp.sqlstate_of($$SELECT '{1e39}'::double precision[]::vector$$) AS float8_overflow;

-- avg over no rows is NULL, also when parallel workers hand over empty states
CREATE TABLE pgvector_vector_t (v vector(2));
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
SET parallel_leader_participation = off;
EXPLAIN (COSTS OFF) SELECT avg(v), sum(v) FROM pgvector_vector_t;
SELECT avg(v) AS avg_no_rows, sum(v) AS sum_no_rows FROM pgvector_vector_t;
INSERT INTO pgvector_vector_t SELECT ARRAY[i, -i] FROM generate_series(1, 5) i;
ANALYZE pgvector_vector_t;
SELECT avg(v) AS avg_3_m3, sum(v) AS sum_15_m15 FROM pgvector_vector_t;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
RESET parallel_leader_participation;
DROP TABLE pgvector_vector_t;
