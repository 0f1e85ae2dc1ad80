-- vector: text and binary input/output, the type modifier, storage, NULLs
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Text form: '[...]', spaces tolerated around brackets and elements
SELECT '[1,2,3]'::vector;
SELECT '[1,2.5,-3e-2]'::vector;
SELECT '  [ 1 ,2.5 ,	-3e-2 ]  '::vector;
SELECT '[+1.5,-0,1E3,0.000001]'::vector;

-- Output is the shortest text that reads back to the same float, whatever extra_float_digits
SELECT '[0.1,0.3333333333,123456789,1e-45,3.4028235e38,-1e-10]'::vector;
SET extra_float_digits = -3;
SELECT '[0.1,1.2345678]'::vector;
RESET extra_float_digits;

-- Text round trip is exact: vector_send compares the bits
SELECT count(*) AS differing
FROM generate_series(1, 1000) AS i,
     LATERAL (SELECT ARRAY[i * 0.1234567, 1.0 / i, i * 1e30, -i * 1e-30]::real[]::vector AS v) AS s
WHERE vector_send(v::text::vector) <> vector_send(v);

-- Malformed text
SELECT '[1,,2]'::vector;
SELECT '[1,2,]'::vector;
SELECT '[,1]'::vector;
SELECT '1,2'::vector;
SELECT '[1 2]'::vector;
SELECT '[1,2]x'::vector;
SELECT '[1,2] ]'::vector;
SELECT '[1,2'::vector;
SELECT '['::vector;
SELECT ''::vector;
SELECT '[a]'::vector;
SELECT '[1a]'::vector;
SELECT '{1,2}'::vector;

-- Values that are not finite floats, empty vectors
SELECT '[NaN]'::vector;
SELECT '[1,nan]'::vector;
SELECT '[Infinity]'::vector;
SELECT '[-inf]'::vector;
SELECT '[1e39]'::vector;
SELECT '[-1e39]'::vector;
-- too small for a float: a zero, as in pgvector
SELECT '[1e-50]'::vector;
SELECT '[]'::vector;
SELECT '[ ]'::vector;

-- Up to 16000 dimensions
SELECT vector_dims(('[' || array_to_string(array_fill(1, ARRAY[16000]), ',') || ']')::vector);
SELECT vector_dims(('[' || array_to_string(array_fill(1, ARRAY[16001]), ',') || ']')::vector);

-- Type modifier
SELECT '[1,2,3]'::vector(3);
SELECT '[1,2]'::vector(3);
SELECT '[1,2,3,4]'::vector(3);
SELECT '[1,2]'::vector::vector(2);
SELECT '[1,2]'::vector::vector(3);
SELECT format_type('vector'::regtype, -1), format_type('vector'::regtype, 3);
CREATE TABLE vector_io_t (id integer, v vector(3));
\d vector_io_t
INSERT INTO vector_io_t VALUES (1, '[1,2,3]'), (2, NULL);
INSERT INTO vector_io_t VALUES (3, '[1,2]');
INSERT INTO vector_io_t VALUES (3, '[1,2,3,4]'::vector);
UPDATE vector_io_t SET v = '[1,2]' WHERE id = 1;
SELECT * FROM vector_io_t ORDER BY id;
CREATE TABLE vector_io_bad (v vector(0));
CREATE TABLE vector_io_bad (v vector(16001));
CREATE TABLE vector_io_bad (v vector(2, 3));
SELECT '[1]'::vector(16000);

-- NULLs
SELECT NULL::vector, NULL::vector(3);
SELECT vector_dims(NULL), vector_send(NULL);

-- Storage: pgvector's layout (header, int16 dim, int16 unused, float4[]), stored external
SELECT typstorage, typalign, typlen FROM pg_type WHERE oid = 'vector'::regtype;
SELECT pg_column_size('[1,2,3]'::vector) AS bytes_4_plus_4_plus_12;
SELECT pg_column_size(v) AS bytes_1_plus_4_plus_12 FROM vector_io_t WHERE id = 1;

-- Binary form, pgvector's wire format: int16 dim, int16 unused, float4 values, network order
SELECT vector_send('[1,2]');
SELECT vector_send('[-0.5,0,3.4028235e38]');

-- Binary COPY round trip through a server-side file
CREATE TABLE vector_io_copy (id integer, v vector);
INSERT INTO vector_io_copy VALUES
  (1, '[1,2,3]'), (2, '[0.1,-0,1e-45,-3.4028235e38]'), (3, NULL),
  (4, ('[' || array_to_string(array_fill(0.5, ARRAY[16000]), ',') || ']')::vector);
SELECT current_setting('data_directory') || '/vector_io_copy.bin' AS copy_file \gset
COPY vector_io_copy TO :'copy_file' (FORMAT binary);
CREATE TABLE vector_io_copy2 (id integer, v vector);
COPY vector_io_copy2 FROM :'copy_file' (FORMAT binary);
SELECT id, vector_dims(v), a.v IS NULL AS is_null,
       vector_send(a.v) = (SELECT vector_send(b.v) FROM vector_io_copy2 b WHERE b.id = a.id) AS same_bits
FROM vector_io_copy a ORDER BY id;
SELECT id, v FROM vector_io_copy2 WHERE id < 4 ORDER BY id;
-- into a vector(3) column only the 3-dimensional row fits
CREATE TABLE vector_io_copy3 (id integer, v vector(3));
COPY vector_io_copy3 FROM :'copy_file' (FORMAT binary);
DELETE FROM vector_io_copy WHERE id <> 1;
COPY vector_io_copy TO :'copy_file' (FORMAT binary);
COPY vector_io_copy3 FROM :'copy_file' (FORMAT binary);
SELECT * FROM vector_io_copy3;

-- Binary input: bytes written as a bytea field of a binary COPY file and read back as vector
CREATE FUNCTION pg_temp.recv_vector(bytes bytea, typmod integer DEFAULT -1) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  path text := current_setting('data_directory') || '/vector_io_recv.bin';
  result text;
  detail text;
BEGIN
  IF to_regclass('pg_temp.vector_io_recv') IS NOT NULL THEN
    DROP TABLE pg_temp.vector_io_recv;
  END IF;
  EXECUTE format('CREATE TEMP TABLE vector_io_recv (v %s)', format_type('vector'::regtype, typmod));
  EXECUTE format('COPY (SELECT %L::bytea) TO %L (FORMAT binary)', bytes, path);
  EXECUTE format('COPY vector_io_recv FROM %L (FORMAT binary)', path);
  SELECT v::text INTO result FROM vector_io_recv;
  RETURN result;
EXCEPTION WHEN others THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' / ' || nullif(detail, ''), '');
END $$;
SELECT pg_temp.recv_vector('\x000200003f80000040000000') AS valid;
SELECT pg_temp.recv_vector('\x000200003f80000040000000', 2) AS valid_typmod;
SELECT pg_temp.recv_vector('\x000200003f80000040000000', 3) AS wrong_typmod;
SELECT pg_temp.recv_vector('\x00') AS short_header;
SELECT pg_temp.recv_vector('\x00020000') AS no_values;
SELECT pg_temp.recv_vector('\x000200003f800000') AS short_values;
SELECT pg_temp.recv_vector('\x000200003f8000004000000000') AS extra_byte;
SELECT pg_temp.recv_vector('\x000100013f800000') AS unused_not_zero;
SELECT pg_temp.recv_vector('\x00000000') AS zero_dim;
SELECT pg_temp.recv_vector('\xffff0000') AS negative_dim;
SELECT pg_temp.recv_vector('\x3e810000') AS too_many_dims;
SELECT pg_temp.recv_vector('\x000100007fc00000') AS nan;
SELECT pg_temp.recv_vector('\x00010000ff800000') AS minus_infinity;

DROP TABLE vector_io_t, vector_io_copy, vector_io_copy2, vector_io_copy3;
