-- Bit-string distances, pgvector's hamming_distance (<~>) and jaccard_distance (<%>): first
-- pgvector 0.8's own tests of them, run unchanged (the results are pgvector's), then checks
-- against references built from PostgreSQL's bit operators, and the binary-quantization
-- pattern they serve.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT hamming_distance(B'111', B'111');
SELECT hamming_distance(B'111', B'110');
SELECT hamming_distance(B'111', B'100');
SELECT hamming_distance(B'111', B'000');
SELECT hamming_distance(B'111', B'00');
SELECT jaccard_distance(B'1111', B'1111');
SELECT jaccard_distance(B'1111', B'1110');
SELECT jaccard_distance(B'1111', B'1100');
SELECT jaccard_distance(B'1111', B'1000');
SELECT jaccard_distance(B'1111', B'0000');
SELECT jaccard_distance(B'1100', B'1000');
SELECT jaccard_distance(B'1111', B'000');

-- Random strings of every length 1..200 (whole 8-byte words and byte tails), 5 pairs each:
-- hamming = bit_count(a XOR b); jaccard = 1 - bit_count(a AND b) / bit_count(a OR b), and 1 when
-- a AND b is empty (also for two zero strings)
SELECT setseed(0.5);
WITH pairs AS (
  SELECT n, string_agg(CASE WHEN random() < 0.5 THEN '1' ELSE '0' END, '')::varbit AS a,
            string_agg(CASE WHEN random() < 0.3 THEN '1' ELSE '0' END, '')::varbit AS b
  FROM generate_series(1, 200) n, generate_series(1, 5) r, generate_series(1, n) i
  GROUP BY n, r
)
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE a <~> b = bit_count(a # b) AND hamming_distance(b, a) = a <~> b)
         AS hamming_ok,
       count(*) FILTER (WHERE a <%> b = CASE WHEN bit_count(a & b) = 0 THEN 1
                                             ELSE 1 - bit_count(a & b)::float8 / bit_count(a | b) END
                          AND jaccard_distance(b, a) = a <%> b) AS jaccard_ok,
       count(*) FILTER (WHERE bit_count(a & b) = 0) AS disjoint
FROM pairs;
SELECT B'0000' <%> B'0000' AS zeros, B'0000' <~> B'0000' AS zeros_hamming,
       B'1' <%> B'1' AS same, repeat('1', 16000)::varbit <~> repeat('0', 16000)::varbit AS all_differ;
SELECT pg_typeof(B'1' <~> B'1'), pg_typeof(B'1' <%> B'1');
CREATE FUNCTION pg_temp.sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END $$;
SELECT pg_temp.sqlstate_of($$SELECT B'10' <~> B'1'$$) AS hamming_lengths,
       pg_temp.sqlstate_of($$SELECT B'10' <%> B'100'$$) AS jaccard_lengths;
\set VERBOSITY default
SELECT B'10' <~> B'1';

-- Binary quantization: re-rank the Hamming neighbours of binary_quantize(query) by the exact
-- distance.  The Hamming order agrees with the sign pattern (here every row's pattern differs from
-- the query's in exactly id % 4 positions).
CREATE TABLE pgvector_bit_t (id integer, v vector(4));
INSERT INTO pgvector_bit_t
SELECT i, ARRAY[CASE WHEN i % 4 >= 1 THEN -1 ELSE 1 END, CASE WHEN i % 4 >= 2 THEN -2 ELSE 2 END,
                CASE WHEN i % 4 >= 3 THEN -3 ELSE 3 END, i]::vector
FROM generate_series(1, 12) i;
SELECT id, binary_quantize(v) AS bits, binary_quantize(v) <~> binary_quantize('[1,2,3,4]') AS hamming
FROM pgvector_bit_t ORDER BY hamming, id LIMIT 6;
SELECT id FROM (
  SELECT id, v FROM pgvector_bit_t
  ORDER BY binary_quantize(v)::bit(4) <~> binary_quantize('[1,2,3,4]'), id LIMIT 6
) candidates ORDER BY v <-> '[1,2,3,4]' LIMIT 3;
DROP TABLE pgvector_bit_t;
