-- halfvec: pgvector's half-precision vector.  First the statements of pgvector 0.8's own tests of
-- halfvec (and its halfvec casts), run unchanged: the results are pgvector's except for the
-- wording of some errors.  Then checks against independent references: every finite half through
-- text I/O against its value computed in SQL, rounding ties to even, distances against a
-- double-precision (numeric) reference, the binary format and COPY.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

SELECT '[1,2,3]'::halfvec;
SELECT '[-1,-2,-3]'::halfvec;
SELECT '[1.,2.,3.]'::halfvec;
SELECT ' [ 1,  2 ,    3  ] '::halfvec;
SELECT '[1.23456]'::halfvec;
SELECT '[hello,1]'::halfvec;
SELECT '[NaN,1]'::halfvec;
SELECT '[Infinity,1]'::halfvec;
SELECT '[-Infinity,1]'::halfvec;
SELECT '[65519,-65519]'::halfvec;
SELECT '[65520,-65520]'::halfvec;
SELECT '[1e-8,-1e-8]'::halfvec;
SELECT '[4e38,1]'::halfvec;
SELECT '[1e-46,1]'::halfvec;
SELECT '[1,2,3'::halfvec;
SELECT '[1,2,3]9'::halfvec;
SELECT '1,2,3'::halfvec;
SELECT ''::halfvec;
SELECT '['::halfvec;
SELECT '[ '::halfvec;
SELECT '[,'::halfvec;
SELECT '[]'::halfvec;
SELECT '[ ]'::halfvec;
SELECT '[,]'::halfvec;
SELECT '[1,]'::halfvec;
SELECT '[1a]'::halfvec;
SELECT '[1,,3]'::halfvec;
SELECT '[1, ,3]'::halfvec;
SELECT '[1,2,3]'::halfvec(3);
SELECT '[1,2,3]'::halfvec(2);
SELECT '[1,2,3]'::halfvec(3, 2);
SELECT '[1,2,3]'::halfvec('a');
SELECT '[1,2,3]'::halfvec(0);
SELECT '[1,2,3]'::halfvec(16001);
SELECT unnest('{"[1,2,3]", "[4,5,6]"}'::halfvec[]);
SELECT '{"[1,2,3]"}'::halfvec(2)[];
SELECT '[1,2,3]'::halfvec + '[4,5,6]';
SELECT '[65519]'::halfvec + '[65519]';
SELECT '[1,2]'::halfvec + '[3]';
SELECT '[1,2,3]'::halfvec - '[4,5,6]';
SELECT '[-65519]'::halfvec - '[65519]';
SELECT '[1,2]'::halfvec - '[3]';
SELECT '[1,2,3]'::halfvec * '[4,5,6]';
SELECT '[65519]'::halfvec * '[65519]';
SELECT '[1e-7]'::halfvec * '[1e-7]';
SELECT '[1,2]'::halfvec * '[3]';
SELECT '[1,2,3]'::halfvec || '[4,5]';
SELECT array_fill(0, ARRAY[16000])::halfvec || '[1]';
SELECT '[1,2,3]'::halfvec < '[1,2,3]';
SELECT '[1,2,3]'::halfvec < '[1,2]';
SELECT '[1,2,3]'::halfvec <= '[1,2,3]';
SELECT '[1,2,3]'::halfvec <= '[1,2]';
SELECT '[1,2,3]'::halfvec = '[1,2,3]';
SELECT '[1,2,3]'::halfvec = '[1,2]';
SELECT '[1,2,3]'::halfvec != '[1,2,3]';
SELECT '[1,2,3]'::halfvec != '[1,2]';
SELECT '[1,2,3]'::halfvec >= '[1,2,3]';
SELECT '[1,2,3]'::halfvec >= '[1,2]';
SELECT '[1,2,3]'::halfvec > '[1,2,3]';
SELECT '[1,2,3]'::halfvec > '[1,2]';
SELECT halfvec_cmp('[1,2,3]', '[1,2,3]');
SELECT halfvec_cmp('[1,2,3]', '[0,0,0]');
SELECT halfvec_cmp('[0,0,0]', '[1,2,3]');
SELECT halfvec_cmp('[1,2]', '[1,2,3]');
SELECT halfvec_cmp('[1,2,3]', '[1,2]');
SELECT halfvec_cmp('[1,2]', '[2,3,4]');
SELECT halfvec_cmp('[2,3]', '[1,2,3]');
SELECT vector_dims('[1,2,3]'::halfvec);
SELECT round(l2_norm('[1,1]'::halfvec)::numeric, 5);
SELECT l2_norm('[3,4]'::halfvec);
SELECT l2_norm('[0,1]'::halfvec);
SELECT l2_norm('[0,0]'::halfvec);
SELECT l2_norm('[2]'::halfvec);
SELECT l2_distance('[0,0]'::halfvec, '[3,4]');
SELECT l2_distance('[0,0]'::halfvec, '[0,1]');
SELECT l2_distance('[1,2]'::halfvec, '[3]');
SELECT l2_distance('[1,1,1,1,1,1,1,1,1]'::halfvec, '[1,1,1,1,1,1,1,4,5]');
SELECT '[0,0]'::halfvec <-> '[3,4]';
SELECT inner_product('[1,2]'::halfvec, '[3,4]');
SELECT inner_product('[1,2]'::halfvec, '[3]');
SELECT inner_product('[65504]'::halfvec, '[65504]');
SELECT inner_product('[1,1,1,1,1,1,1,1,1]'::halfvec, '[1,2,3,4,5,6,7,8,9]');
SELECT '[1,2]'::halfvec <#> '[3,4]';
SELECT cosine_distance('[1,2]'::halfvec, '[2,4]');
SELECT cosine_distance('[1,2]'::halfvec, '[0,0]');
SELECT cosine_distance('[1,1]'::halfvec, '[1,1]');
SELECT cosine_distance('[1,0]'::halfvec, '[0,2]');
SELECT cosine_distance('[1,1]'::halfvec, '[-1,-1]');
SELECT cosine_distance('[1,2]'::halfvec, '[3]');
SELECT cosine_distance('[1,1]'::halfvec, '[1.1,1.1]');
SELECT cosine_distance('[1,1]'::halfvec, '[-1.1,-1.1]');
SELECT cosine_distance('[1,2,3,4,5,6,7,8,9]'::halfvec, '[1,2,3,4,5,6,7,8,9]');
SELECT cosine_distance('[1,2,3,4,5,6,7,8,9]'::halfvec, '[-1,-2,-3,-4,-5,-6,-7,-8,-9]');
SELECT '[1,2]'::halfvec <=> '[2,4]';
SELECT l1_distance('[0,0]'::halfvec, '[3,4]');
SELECT l1_distance('[0,0]'::halfvec, '[0,1]');
SELECT l1_distance('[1,2]'::halfvec, '[3]');
SELECT l1_distance('[1,2,3,4,5,6,7,8,9]'::halfvec, '[1,2,3,4,5,6,7,8,9]');
SELECT l1_distance('[1,2,3,4,5,6,7,8,9]'::halfvec, '[0,3,2,5,4,7,6,9,8]');
SELECT '[0,0]'::halfvec <+> '[3,4]';
SELECT l2_normalize('[3,4]'::halfvec);
SELECT l2_normalize('[3,0]'::halfvec);
SELECT l2_normalize('[0,0.1]'::halfvec);
SELECT l2_normalize('[0,0]'::halfvec);
SELECT l2_normalize('[65504]'::halfvec);
SELECT binary_quantize('[1,0,-1]'::halfvec);
SELECT binary_quantize('[0,0.1,-0.2,-0.3,0.4,0.5,0.6,-0.7,0.8,-0.9,1]'::halfvec);
SELECT binary_quantize('[1,2,3,-4,5,6,-7,8,1,-2,-3,4,5,-6,7,8,-1,2,3]'::halfvec);
SELECT subvector('[1,2,3,4,5]'::halfvec, 1, 3);
SELECT subvector('[1,2,3,4,5]'::halfvec, 3, 2);
SELECT subvector('[1,2,3,4,5]'::halfvec, -1, 3);
SELECT subvector('[1,2,3,4,5]'::halfvec, 3, 9);
SELECT subvector('[1,2,3,4,5]'::halfvec, 1, 0);
SELECT subvector('[1,2,3,4,5]'::halfvec, 3, -1);
SELECT subvector('[1,2,3,4,5]'::halfvec, -1, 2);
SELECT subvector('[1,2,3,4,5]'::halfvec, 2147483647, 10);
SELECT subvector('[1,2,3,4,5]'::halfvec, 3, 2147483647);
SELECT subvector('[1,2,3,4,5]'::halfvec, -2147483644, 2147483647);
SELECT avg(v) FROM unnest(ARRAY['[1,2,3]'::halfvec, '[3,5,7]']) v;
SELECT avg(v) FROM unnest(ARRAY['[1,2,3]'::halfvec, '[3,5,7]', NULL]) v;
SELECT avg(v) FROM unnest(ARRAY[]::halfvec[]) v;
SELECT avg(v) FROM unnest(ARRAY['[1,2]'::halfvec, '[3]']) v;
SELECT avg(v) FROM unnest(ARRAY['[65504]'::halfvec, '[65504]']) v;
SELECT halfvec_avg(array_agg(n)) FROM generate_series(1, 16002) n;
SELECT sum(v) FROM unnest(ARRAY['[1,2,3]'::halfvec, '[3,5,7]']) v;
SELECT sum(v) FROM unnest(ARRAY['[1,2,3]'::halfvec, '[3,5,7]', NULL]) v;
SELECT sum(v) FROM unnest(ARRAY[]::halfvec[]) v;
SELECT sum(v) FROM unnest(ARRAY['[1,2]'::halfvec, '[3]']) v;
SELECT sum(v) FROM unnest(ARRAY['[65504]'::halfvec, '[65504]']) v;
-- pgvector's casts of halfvec
SELECT '[1,2,3]'::vector::halfvec;
SELECT '[1,2,3]'::vector::halfvec(3);
SELECT '[1,2,3]'::vector::halfvec(2);
SELECT '[65520]'::vector::halfvec;
SELECT '[1e-8]'::vector::halfvec;
SELECT '[1,2,3]'::halfvec::vector;
SELECT '[1,2,3]'::halfvec::vector(3);
SELECT '[1,2,3]'::halfvec::vector(2);
SELECT '{1,2,3}'::real[]::halfvec;
SELECT '{1,2,3}'::real[]::halfvec(3);
SELECT '{1,2,3}'::real[]::halfvec(2);
SELECT '{65520,-65520}'::real[]::halfvec;
SELECT '{1e-8,-1e-8}'::real[]::halfvec;

-- Every finite half, both signs: its value computed here in double from its fields, written as
-- text, read as halfvec: the stored bits are the half's, the value read back (as real[]) is the
-- reference, and the printed text reads back to the same bits.
CREATE TEMP TABLE halves AS
SELECT h, CASE WHEN e = 0 THEN m * 2.0::float8 ^ -24
               ELSE (1 + m / 1024.0::float8) * 2.0::float8 ^ (e - 15) END AS value
FROM (SELECT h, h >> 10 AS e, h & 1023 AS m FROM generate_series(0, 31743) h) t;
SELECT count(*) AS halves,
       count(*) FILTER (WHERE halfvec_send(p) = '\x00010000'::bytea || substring(int4send(h) FROM 3))
         AS positive_bits,
       count(*) FILTER (WHERE halfvec_send(n) = '\x00010000'::bytea || substring(int4send(h | 32768) FROM 3))
         AS negative_bits,
       count(*) FILTER (WHERE (p::real[])[1] = value AND (n::real[])[1] = -value) AS values_exact,
       count(*) FILTER (WHERE halfvec_send(p::text::halfvec) = halfvec_send(p)
                          AND halfvec_send(n::text::halfvec) = halfvec_send(n)) AS text_round_trips,
       max(value) AS largest
FROM (SELECT h, value, ('[' || value || ']')::halfvec AS p, ('[' || -value || ']')::halfvec AS n
      FROM halves) t;
-- Halfway between two neighbouring halves rounds to the one with the even bit pattern; a quarter
-- of their gap above / below the midpoint rounds to the upper / lower one (all exact floats).
SELECT count(*) AS midpoints,
       count(*) FILTER (WHERE halfvec_send(('[' || mid || ']')::halfvec)
                             = '\x00010000'::bytea || substring(int4send(CASE WHEN h % 2 = 0 THEN h ELSE h + 1 END) FROM 3))
         AS ties_to_even,
       count(*) FILTER (WHERE halfvec_send(ARRAY[mid + gap / 4]::halfvec)
                             = '\x00010000'::bytea || substring(int4send(h + 1) FROM 3)
                          AND halfvec_send(ARRAY[mid - gap / 4]::halfvec)
                             = '\x00010000'::bytea || substring(int4send(h) FROM 3)) AS off_ties_nearest
FROM (SELECT a.h, (a.value + b.value) / 2 AS mid, b.value - a.value AS gap
      FROM halves a JOIN halves b ON b.h = a.h + 1) t;

-- Distances against a double-precision reference over the exact half values (every length
-- 1..40, and 3072, the size of large embedding models; products of halves are exact in double and
-- the sums' rounding is far below float's): each distance is the exact one rounded once to float,
-- so within 2^-24 relative; and each equals the vector operator's on the same values, bit for bit.
SELECT setseed(0.23);
CREATE TEMP TABLE hv_pairs AS
SELECT n, ARRAY(SELECT (random() * 8 - 4)::real FROM generate_series(1, n))::halfvec AS a,
          ARRAY(SELECT (random() * 8 - 4)::real FROM generate_series(1, n))::halfvec AS b
FROM (SELECT generate_series(1, 40) AS n UNION ALL SELECT 3072) s;
WITH ref AS (
  SELECT n, a, b,
         (SELECT sum((x::float8 - y::float8) ^ 2) FROM unnest(a::real[], b::real[]) u(x, y)) AS l2sq,
         (SELECT sum(x::float8 * y::float8) FROM unnest(a::real[], b::real[]) u(x, y)) AS dot,
         (SELECT sum(x::float8 ^ 2) FROM unnest(a::real[]) u(x)) AS aa,
         (SELECT sum(y::float8 ^ 2) FROM unnest(b::real[]) u(y)) AS bb,
         (SELECT sum(abs(x::float8 - y::float8)) FROM unnest(a::real[], b::real[]) u(x, y)) AS l1
  FROM hv_pairs
)
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE abs((a <-> b) - sqrt(l2sq)) <= 6e-8 * sqrt(l2sq)) AS l2_ok,
       count(*) FILTER (WHERE abs((a <#> b) + dot) <= 6e-8 * abs(dot)
                          AND inner_product(a, b) = -(a <#> b)) AS ip_ok,
       count(*) FILTER (WHERE abs((a <=> b) - (1 - dot / sqrt(aa * bb)))
                              <= 6e-8 * abs(1 - dot / sqrt(aa * bb)) + 1e-12) AS cosine_ok,
       count(*) FILTER (WHERE abs((a <+> b) - l1) <= 6e-8 * l1) AS l1_ok,
       count(*) FILTER (WHERE abs(l2_norm(a) - sqrt(aa)) <= 1e-12 * sqrt(aa)) AS norm_ok,
       count(*) FILTER (WHERE a <-> b = a::vector <-> b::vector AND a <#> b = a::vector <#> b::vector
                          AND a <=> b = a::vector <=> b::vector AND a <+> b = a::vector <+> b::vector)
         AS same_as_vector
FROM ref;
-- a halfvec and its vector have the same elements; vector -> halfvec -> vector is the identity on
-- half values, and rounds any other float to its nearest half
SELECT count(*) FILTER (WHERE a::vector::halfvec = a) AS round_trip,
       count(*) FILTER (WHERE a::real[] = a::vector::real[]) AS same_elements
FROM hv_pairs;
SELECT '[0.1,1000.3,-3.14159]'::vector::halfvec AS rounded, '[0.1,1000.3,-3.14159]'::halfvec::vector AS widened;
-- arithmetic rounds the float result to half
SELECT '[0.1,1000]'::halfvec + '[0.2,0.3]' AS sum, '[3,1e-3]'::halfvec * '[1,1e-3]' AS product;

-- casts from every array type, and into halfvec(n) columns (assignment)
SELECT ARRAY[1,2,3]::halfvec AS from_int, ARRAY[1.5,2,3]::numeric[]::halfvec AS from_numeric,
       ARRAY[1.5,2,3]::float8[]::halfvec AS from_float8, '[1,2]'::halfvec::real[] AS to_real;
CREATE TEMP TABLE hv_t (id integer, v halfvec(3));
INSERT INTO hv_t VALUES (1, '[1,2,3]'), (2, ARRAY[4,5,6]), (3, '[0.5,-0.5,0]'::vector), (4, NULL);
INSERT INTO hv_t VALUES (5, '[1,2]');
SELECT id, v, pg_column_size(v) AS bytes FROM hv_t ORDER BY id;
SELECT typstorage, typlen FROM pg_type WHERE oid = 'halfvec'::regtype;
SELECT pg_column_size('[1,2,3]'::halfvec) AS bytes_8_plus_6;
-- btree: ORDER BY and an index agree with the order of the elements
CREATE INDEX ON hv_t (v);
SET enable_seqscan = off;
SELECT id FROM hv_t WHERE v = '[4,5,6]';
RESET enable_seqscan;
SELECT id, v FROM hv_t ORDER BY v NULLS FIRST;

-- the SQLSTATE of each class of error
CREATE FUNCTION pg_temp.sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END $$;
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '[1,,2]'::halfvec$$), ($$SELECT '[65520]'::halfvec$$),
  ($$SELECT '[1e39]'::halfvec$$), ($$SELECT '[nan]'::halfvec$$), ($$SELECT '[]'::halfvec$$),
  ($$SELECT array_fill(1, ARRAY[16001])::halfvec$$), ($$SELECT '[1,2]'::halfvec <-> '[1]'$$),
  ($$SELECT '[60000]'::halfvec + '[60000]'$$), ($$SELECT '[1e5]'::vector::halfvec$$),
  ($$SELECT '{1,NULL}'::real[]::halfvec$$), ($$SELECT NULL::halfvec(0)$$),
  ($$SELECT subvector('[1,2]'::halfvec, 3, 1)$$)
) AS t(query);

-- Binary form, pgvector's: int16 dim, int16 unused, binary16 values, network order
SELECT halfvec_send('[1,-2,0.5]') AS one_minus2_half, halfvec_send('[65504,6e-8]') AS max_and_tiny;
CREATE FUNCTION pg_temp.recv_halfvec(bytes bytea, typmod integer DEFAULT -1) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  path text := current_setting('data_directory') || '/halfvec_recv.bin';
  result text;
  detail text;
BEGIN
  IF to_regclass('pg_temp.halfvec_recv') IS NOT NULL THEN
    DROP TABLE pg_temp.halfvec_recv;
  END IF;
  EXECUTE format('CREATE TEMP TABLE halfvec_recv (v %s)', format_type('halfvec'::regtype, typmod));
  EXECUTE format('COPY (SELECT %L::bytea) TO %L (FORMAT binary)', bytes, path);
  EXECUTE format('COPY halfvec_recv FROM %L (FORMAT binary)', path);
  SELECT v::text INTO result FROM halfvec_recv;
  RETURN result;
EXCEPTION WHEN others THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' / ' || nullif(detail, ''), '');
END $$;
SELECT pg_temp.recv_halfvec('\x000200003c00c000') AS valid;
SELECT pg_temp.recv_halfvec('\x000200003c00c000', 2) AS valid_typmod;
SELECT pg_temp.recv_halfvec('\x000200003c00c000', 3) AS wrong_typmod;
SELECT pg_temp.recv_halfvec('\x00') AS short_header;
SELECT pg_temp.recv_halfvec('\x000200003c00') AS short_values;
SELECT pg_temp.recv_halfvec('\x000100013c00') AS unused_not_zero;
SELECT pg_temp.recv_halfvec('\x00000000') AS zero_dim;
SELECT pg_temp.recv_halfvec('\x3e810000') AS too_many_dims;
SELECT pg_temp.recv_halfvec('\x000100007e00') AS nan;
SELECT pg_temp.recv_halfvec('\x00010000fc00') AS minus_infinity;
-- binary COPY round trip, 16000 dimensions included
CREATE TEMP TABLE hv_copy (id integer, v halfvec);
INSERT INTO hv_copy SELECT 1, a FROM hv_pairs WHERE n = 3072;
INSERT INTO hv_copy VALUES (2, '[1,-0,6e-8,-65504]'), (3, NULL),
  (4, array_fill(0.333, ARRAY[16000])::halfvec);
SELECT current_setting('data_directory') || '/halfvec_copy.bin' AS copy_file \gset
COPY hv_copy TO :'copy_file' (FORMAT binary);
CREATE TEMP TABLE hv_copy2 (id integer, v halfvec);
COPY hv_copy2 FROM :'copy_file' (FORMAT binary);
SELECT a.id, vector_dims(a.v), a.v IS NULL AS is_null, halfvec_send(a.v) = halfvec_send(b.v) AS same_bits
FROM hv_copy a JOIN hv_copy2 b USING (id) ORDER BY a.id;
SELECT v FROM hv_copy2 WHERE id = 2;

-- Overload resolution: an argument of unknown type (a literal, NULL) is taken as vector, the
-- preferred type of the category vector and halfvec share; a halfvec mixed with a vector is
-- widened to vector (exactly)
SELECT l2_distance('[1,2]', '[3,4]') AS l2, pg_typeof(subvector('[1,2]', 1, 1)) AS subvector_type,
       vector_dims(NULL) AS dims_null;
SELECT '[1,2]'::halfvec <-> '[3,4.1]'::vector AS mixed_l2, pg_typeof('[1,2]'::halfvec + '[3,4.1]'::vector) AS mixed_sum,
       pg_typeof('[1,2]'::halfvec || '[3]') AS halfvec_concat;
