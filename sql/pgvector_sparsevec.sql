-- sparsevec: pgvector's sparse vector.  First the cases of pgvector's own sparsevec tests (text
-- form, typmod, comparisons, norms, distances), whose results are pgvector's except where marked.
-- Then checks against independent references: every distance equals the vector operator's on the
-- dense vectors, bit for bit; casts both ways; the binary format, bad binary input and COPY; the
-- SQLSTATE of each class of error; overload resolution with the other vector types.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Text form
SELECT '{1:1.5,3:3.5}/5'::sparsevec;
SELECT '{1:-2,3:-4}/5'::sparsevec;
SELECT '{1:2.,3:4.}/5'::sparsevec;
SELECT ' { 1 : 1.5 ,  3  :  3.5  } / 5 '::sparsevec;
SELECT '{1:1.23456}/1'::sparsevec;
SELECT '{1:1.5e38,2:-1.5e38}/2'::sparsevec;
SELECT '{1:1.5e-38,2:-1.5e-38}/2'::sparsevec;
SELECT '{1:hello,2:1}/2'::sparsevec;
SELECT '{1:NaN,2:1}/2'::sparsevec;
SELECT '{1:Infinity,2:1}/2'::sparsevec;
SELECT '{1:-Infinity,2:1}/2'::sparsevec;
SELECT '{1:4e38,2:1}/2'::sparsevec;
SELECT '{1:-4e38,2:1}/2'::sparsevec;
-- differs on purpose: too small for a float is zero (so not stored), as for vector in pgvector
-- 0.8; pgvector's sparsevec reports it out of range
SELECT '{1:1e-46,2:1}/2'::sparsevec;
SELECT '{1:-1e-46,2:1}/2'::sparsevec;
SELECT ''::sparsevec;
SELECT '{'::sparsevec;
SELECT '{ '::sparsevec;
SELECT '{:'::sparsevec;
SELECT '{,'::sparsevec;
SELECT '{}'::sparsevec;
SELECT '{}/'::sparsevec;
SELECT '{}/1'::sparsevec;
SELECT '{}/1a'::sparsevec;
SELECT '{ }/1'::sparsevec;
SELECT '{:}/1'::sparsevec;
SELECT '{,}/1'::sparsevec;
SELECT '{1,}/1'::sparsevec;
SELECT '{:1}/1'::sparsevec;
SELECT '{1:}/1'::sparsevec;
SELECT '{1a:1}/1'::sparsevec;
SELECT '{1:1a}/1'::sparsevec;
SELECT '{1:1,}/1'::sparsevec;
SELECT '{1:0,2:1,3:0}/3'::sparsevec;
SELECT '{2:1,1:1}/2'::sparsevec;
SELECT '{1:1,1:1}/2'::sparsevec;
SELECT '{1:1,2:1,1:1}/2'::sparsevec;
SELECT '{}/5'::sparsevec;
SELECT '{}/-1'::sparsevec;
SELECT '{}/1000000001'::sparsevec;
SELECT '{}/2147483648'::sparsevec;
SELECT '{}/-2147483649'::sparsevec;
SELECT '{}/9223372036854775808'::sparsevec;
SELECT '{}/-9223372036854775809'::sparsevec;
SELECT '{2147483647:1}/1'::sparsevec;
SELECT '{2147483648:1}/1'::sparsevec;
SELECT '{-2147483648:1}/1'::sparsevec;
SELECT '{-2147483649:1}/1'::sparsevec;
SELECT '{0:1}/1'::sparsevec;
SELECT '{2:1}/1'::sparsevec;
SELECT '{}/3'::sparsevec(3);
SELECT '{}/3'::sparsevec(2);
SELECT '{}/3'::sparsevec(3, 2);
SELECT '{}/3'::sparsevec('a');
SELECT '{}/3'::sparsevec(0);
SELECT '{}/3'::sparsevec(1000000001);
-- the limits: 1 000 000 000 dimensions, 16000 non-zero elements
SELECT '{1:1,1000000000:-1}/1000000000'::sparsevec;
SELECT length(('{' || string_agg(i || ':1', ',') || '}/16000')::sparsevec::text) AS nnz_16000
FROM generate_series(1, 16000) i;
SELECT ('{' || string_agg(i || ':1', ',') || '}/16001')::sparsevec FROM generate_series(1, 16001) i;
SELECT ('{' || string_agg(i || ':' || (i % 2), ',') || '}/32000')::sparsevec
         = ('{' || string_agg(i || ':1', ',') FILTER (WHERE i % 2 = 1) || '}/32000')::sparsevec
  AS zeros_do_not_count FROM generate_series(1, 32000) i;

-- Comparisons
SELECT '{1:1,2:2,3:3}/3'::sparsevec < '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec < '{1:1,2:2}/2';
SELECT '{1:1,2:2,3:3}/3'::sparsevec <= '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec <= '{1:1,2:2}/2';
SELECT '{1:1,2:2,3:3}/3'::sparsevec = '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec = '{1:1,2:2}/2';
SELECT '{1:1,2:2,3:3}/3'::sparsevec != '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec != '{1:1,2:2}/2';
SELECT '{1:1,2:2,3:3}/3'::sparsevec >= '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec >= '{1:1,2:2}/2';
SELECT '{1:1,2:2,3:3}/3'::sparsevec > '{1:1,2:2,3:3}/3';
SELECT '{1:1,2:2,3:3}/3'::sparsevec > '{1:1,2:2}/2';
SELECT sparsevec_cmp('{1:1,2:2,3:3}/3', '{1:1,2:2,3:3}/3');
SELECT sparsevec_cmp('{1:1,2:2,3:3}/3', '{}/3');
SELECT sparsevec_cmp('{}/3', '{1:1,2:2,3:3}/3');
SELECT sparsevec_cmp('{1:1,2:2}/2', '{1:1,2:2,3:3}/3');
SELECT sparsevec_cmp('{1:1,2:2,3:3}/3', '{1:1,2:2}/2');
SELECT sparsevec_cmp('{1:1,2:2}/2', '{1:2,2:3,3:4}/3');
SELECT sparsevec_cmp('{1:2,2:3}/2', '{1:1,2:2,3:3}/3');

-- Norms and distances
SELECT round(l2_norm('{1:1,2:1}/2'::sparsevec)::numeric, 5);
SELECT l2_norm('{1:3,2:4}/2'::sparsevec);
SELECT l2_norm('{2:1}/2'::sparsevec);
SELECT l2_norm('{1:3e37,2:4e37}/2'::sparsevec)::real;
SELECT l2_norm('{}/2'::sparsevec);
SELECT l2_norm('{1:2}/1'::sparsevec);
SELECT l2_distance('{}/2'::sparsevec, '{1:3,2:4}/2');
SELECT l2_distance('{1:3}/2'::sparsevec, '{2:4}/2');
SELECT l2_distance('{2:4}/2'::sparsevec, '{1:3}/2');
SELECT l2_distance('{1:3,2:4}/2'::sparsevec, '{}/2');
SELECT l2_distance('{}/2'::sparsevec, '{2:1}/2');
SELECT '{}/2'::sparsevec <-> '{1:3,2:4}/2';
SELECT inner_product('{1:1,2:2}/2'::sparsevec, '{1:2,2:4}/2');
SELECT inner_product('{1:1,2:2}/2'::sparsevec, '{1:3}/1');
SELECT inner_product('{1:1,3:3}/4'::sparsevec, '{2:2,4:4}/4');
SELECT inner_product('{2:2,4:4}/4'::sparsevec, '{1:1,3:3}/4');
SELECT inner_product('{1:1,3:3,5:5}/5'::sparsevec, '{2:4,3:6,4:8}/5');
SELECT inner_product('{1:1}/2'::sparsevec, '{}/2');
SELECT inner_product('{}/2'::sparsevec, '{1:1}/2');
SELECT inner_product('{1:3e38}/1'::sparsevec, '{1:3e38}/1');
SELECT '{1:1,2:2}/2'::sparsevec <#> '{1:3,2:4}/2';
SELECT cosine_distance('{1:1,2:2}/2'::sparsevec, '{1:2,2:4}/2');
SELECT cosine_distance('{1:1,2:2}/2'::sparsevec, '{}/2');
SELECT cosine_distance('{1:1,2:1}/2'::sparsevec, '{1:1,2:1}/2');
SELECT cosine_distance('{1:1}/2'::sparsevec, '{2:2}/2');
SELECT cosine_distance('{1:1,2:1}/2'::sparsevec, '{1:-1,2:-1}/2');
SELECT cosine_distance('{1:2}/2'::sparsevec, '{2:2}/2');
SELECT cosine_distance('{2:2}/2'::sparsevec, '{1:2}/2');
SELECT cosine_distance('{1:1,2:2}/2'::sparsevec, '{1:3}/1');
SELECT cosine_distance('{1:1,2:1}/2'::sparsevec, '{1:1.1,2:1.1}/2');
SELECT cosine_distance('{1:1,2:1}/2'::sparsevec, '{1:-1.1,2:-1.1}/2');
-- differs on purpose, as for vector: the exact distance (0) where pgvector's float sums give NaN
SELECT cosine_distance('{1:3e38}/1'::sparsevec, '{1:3e38}/1');
SELECT cosine_distance('{}/1'::sparsevec, '{}/1');
SELECT '{1:1,2:2}/2'::sparsevec <=> '{1:2,2:4}/2';
SELECT l1_distance('{}/2'::sparsevec, '{1:3,2:4}/2');
SELECT l1_distance('{}/2'::sparsevec, '{2:1}/2');
SELECT l1_distance('{1:1,2:2}/2'::sparsevec, '{1:3}/1');
SELECT l1_distance('{1:3e38}/1'::sparsevec, '{1:-3e38}/1');
SELECT l1_distance('{1:1,3:3,5:5,7:7}/8'::sparsevec, '{2:2,4:4,6:6,8:8}/8');
SELECT l1_distance('{1:1,3:3,5:5,7:7,9:9}/9'::sparsevec, '{2:2,4:4,6:6,8:8}/9');
SELECT '{}/2'::sparsevec <+> '{1:3,2:4}/2';
SELECT l2_normalize('{1:3,2:4}/2'::sparsevec);
SELECT l2_normalize('{1:3}/2'::sparsevec);
SELECT l2_normalize('{2:0.1}/2'::sparsevec);
SELECT l2_normalize('{}/2'::sparsevec);
SELECT l2_normalize('{1:3e38}/1'::sparsevec);
SELECT l2_normalize('{1:3e38,2:1e-37}/2'::sparsevec);
SELECT l2_normalize('{2:3e37,4:3e-37,6:4e37,8:4e-37}/9'::sparsevec);

-- Casts (pgvector's cast tests)
SELECT '[1,0,2,0,3,0]'::vector::sparsevec;
SELECT '[1,0,2,0,3,0]'::vector::sparsevec(6);
SELECT '[1,0,2,0,3,0]'::vector::sparsevec(5);
SELECT '[1,0,2,0,3,0]'::halfvec::sparsevec;
SELECT '[1,0,2,0,3,0]'::halfvec::sparsevec(5);
SELECT '{1:1,3:2,5:3}/6'::sparsevec::vector;
SELECT '{1:1,3:2,5:3}/6'::sparsevec::vector(5);
SELECT '{1:1,3:2,5:3}/6'::sparsevec::halfvec;
SELECT '{1:1,3:2,5:3}/6'::sparsevec::halfvec(5);
SELECT '{1:1e10}/1'::sparsevec::halfvec;
SELECT '{}/16001'::sparsevec::vector;
SELECT '{}/16001'::sparsevec::halfvec;
SELECT '{}/16000'::sparsevec::vector = array_fill(0, ARRAY[16000])::vector AS widest_dense;
-- a sparsevec column takes vectors, halfvecs and text
CREATE TEMP TABLE sv_assign (v sparsevec(4));
INSERT INTO sv_assign VALUES ('[0,1.5,0,-2]'::vector), ('[0,0,0,1]'::halfvec), ('{4:7}/4');
SELECT v, v::vector AS dense FROM sv_assign ORDER BY v;
INSERT INTO sv_assign VALUES ('[1,2,3]'::vector);

-- Every distance is the vector operator's on the dense vectors, bit for bit (random vectors of
-- 1..100 dimensions, densities 0 to 1, overlapping and disjoint supports); the norm is summed in
-- double (pgvector's l2_norm), so against the same sum in SQL, and l2_normalize divides by it
SELECT setseed(0.5);
CREATE TEMP TABLE sv_pairs AS
SELECT n, a, b FROM (
  SELECT n, d,
         ARRAY(SELECT CASE WHEN random() < d THEN (random() * 20 - 10)::real ELSE 0 END
               FROM generate_series(1, d0) WHERE n > 0)::vector AS a,
         ARRAY(SELECT CASE WHEN random() < 1 - d THEN (random() * 20 - 10)::real ELSE 0 END
               FROM generate_series(1, d0) WHERE n > 0)::vector AS b
  FROM (SELECT n, 1 + (n * 37) % 100 AS d0, (n % 11) / 10.0 AS d FROM generate_series(1, 400) n) s) t;
SELECT count(*) AS pairs,
       count(*) FILTER (WHERE a::sparsevec <-> b::sparsevec = a <-> b) AS l2,
       count(*) FILTER (WHERE a::sparsevec <#> b::sparsevec = a <#> b) AS negative_ip,
       count(*) FILTER (WHERE inner_product(a::sparsevec, b::sparsevec) = inner_product(a, b)) AS ip,
       count(*) FILTER (WHERE a::sparsevec <=> b::sparsevec = a <=> b
                           OR (a::sparsevec <=> b::sparsevec)::text = 'NaN' AND (a <=> b)::text = 'NaN') AS cosine,
       count(*) FILTER (WHERE a::sparsevec <+> b::sparsevec = a <+> b) AS l1,
       count(*) FILTER (WHERE l2_norm(a::sparsevec) = (SELECT sqrt(sum(x::float8 * x::float8)) FROM unnest(a::real[]) x)) AS norm,
       count(*) FILTER (WHERE l2_normalize(a::sparsevec)::vector = ARRAY(
         SELECT CASE WHEN x = 0 THEN 0 ELSE (x / l2_norm(a::sparsevec))::real END
         FROM unnest(a::real[]) WITH ORDINALITY u(x, i) ORDER BY i)::vector) AS normalize,
       count(*) FILTER (WHERE a::sparsevec::vector = a AND a::sparsevec::text::sparsevec = a::sparsevec) AS round_trips,
       count(*) FILTER (WHERE sign(sparsevec_cmp(a::sparsevec, b::sparsevec)) = sign(vector_cmp(a, b))) AS order_as_vector
FROM sv_pairs;
-- the btree opclass sorts as the dense vectors do
SELECT array_agg(n ORDER BY a::sparsevec, n) = array_agg(n ORDER BY a, n) AS same_order FROM sv_pairs;
CREATE INDEX sv_pairs_btree ON sv_pairs ((a::sparsevec));
SET enable_seqscan = off;
SELECT count(*) AS found_by_btree FROM sv_pairs p WHERE a::sparsevec = (SELECT a::sparsevec FROM sv_pairs WHERE n = p.n);
RESET enable_seqscan;

-- Binary form, pgvector's: int32 dim, int32 nnz, int32 unused, nnz int32 0-based indices, nnz
-- float4 values, network order
SELECT sparsevec_send('{1:1,3:-2}/5') AS one_at_0_minus2_at_2;
CREATE FUNCTION pg_temp.recv_sparsevec(bytes bytea, typmod integer DEFAULT -1) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  path text := current_setting('data_directory') || '/sparsevec_recv.bin';
  result text;
  detail text;
BEGIN
  IF to_regclass('pg_temp.sparsevec_recv') IS NOT NULL THEN
    DROP TABLE pg_temp.sparsevec_recv;
  END IF;
  EXECUTE format('CREATE TEMP TABLE sparsevec_recv (v %s)', format_type('sparsevec'::regtype, typmod));
  EXECUTE format('COPY (SELECT %L::bytea) TO %L (FORMAT binary)', bytes, path);
  EXECUTE format('COPY sparsevec_recv FROM %L (FORMAT binary)', path);
  SELECT v::text INTO result FROM sparsevec_recv;
  RETURN result;
EXCEPTION WHEN others THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN SQLSTATE || ': ' || SQLERRM || coalesce(' / ' || nullif(detail, ''), '');
END $$;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000000000000000000023f800000c0000000') AS valid;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000000000000000000023f800000c0000000', 5) AS valid_typmod;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000000000000000000023f800000c0000000', 4) AS wrong_typmod;
SELECT pg_temp.recv_sparsevec('\x000000050000000000000000') AS empty;
SELECT pg_temp.recv_sparsevec('\x0000000500000002') AS short_header;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000000000000000000023f800000') AS short_values;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000100000000000000023f800000c0000000') AS unused_not_zero;
SELECT pg_temp.recv_sparsevec('\x000000000000000000000000') AS zero_dim;
SELECT pg_temp.recv_sparsevec('\x3b9aca010000000000000000') AS too_many_dims;
SELECT pg_temp.recv_sparsevec('\x0000000500000006000000000000000000000000') AS more_elements_than_dims;
SELECT pg_temp.recv_sparsevec('\x0000000500000002000000000000000200000000c00000003f800000') AS out_of_order;
SELECT pg_temp.recv_sparsevec('\x00000005000000020000000000000002000000023f800000c0000000') AS duplicate;
SELECT pg_temp.recv_sparsevec('\x0000000500000001000000000000000540000000') AS index_past_dim;
SELECT pg_temp.recv_sparsevec('\x000000050000000100000000ffffffff3f800000') AS index_negative;
SELECT pg_temp.recv_sparsevec('\x00000005000000010000000000000000000000ff') AS denormal_kept;
SELECT pg_temp.recv_sparsevec('\x00000005000000010000000000000001' || '\x7fc00000'::bytea) AS nan;
SELECT pg_temp.recv_sparsevec('\x00000005000000010000000000000001ff800000') AS minus_infinity;
SELECT pg_temp.recv_sparsevec('\x0000000500000001000000000000000100000000') AS explicit_zero;
-- binary COPY round trip
CREATE TEMP TABLE sv_copy (id integer, v sparsevec);
INSERT INTO sv_copy SELECT n, a::sparsevec FROM sv_pairs WHERE n <= 50;
INSERT INTO sv_copy VALUES (1001, '{}/7'), (1002, NULL), (1003, '{1:1e-45,1000000000:-3e38}/1000000000');
SELECT current_setting('data_directory') || '/sparsevec_copy.bin' AS copy_file \gset
COPY sv_copy TO :'copy_file' (FORMAT binary);
CREATE TEMP TABLE sv_copy2 (id integer, v sparsevec);
COPY sv_copy2 FROM :'copy_file' (FORMAT binary);
SELECT count(*) AS rows, count(*) FILTER (WHERE sparsevec_send(a.v) = sparsevec_send(b.v)) AS same_bits,
       count(*) FILTER (WHERE a.v IS NULL AND b.v IS NULL) AS nulls
FROM sv_copy a JOIN sv_copy2 b USING (id);
SELECT v FROM sv_copy2 WHERE id > 1000 ORDER BY id;

-- The SQLSTATE of each class of error
CREATE FUNCTION pg_temp.sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN others THEN
  RETURN SQLSTATE;
END $$;
SELECT query, pg_temp.sqlstate_of(query) AS sqlstate FROM (VALUES
  ($$SELECT '{1:1'::sparsevec$$),
  ($$SELECT '{1:1}/2x'::sparsevec$$),
  ($$SELECT '{1:NaN}/2'::sparsevec$$),
  ($$SELECT '{1:-Infinity}/2'::sparsevec$$),
  ($$SELECT '{1:1e39}/2'::sparsevec$$),
  ($$SELECT '{3:1}/2'::sparsevec$$),
  ($$SELECT '{0:1}/2'::sparsevec$$),
  ($$SELECT '{2:1,2:3}/2'::sparsevec$$),
  ($$SELECT '{}/0'::sparsevec$$),
  ($$SELECT '{}/1000000001'::sparsevec$$),
  ($$SELECT '{}/3'::sparsevec(2)$$),
  ($$SELECT '{}/3'::sparsevec(0)$$),
  ($$SELECT '{1:1}/2'::sparsevec <-> '{1:1}/3'$$),
  ($$SELECT '{}/20000'::sparsevec::vector$$),
  ($$SELECT '{1:70000}/2'::sparsevec::halfvec$$)
) AS t(query);

-- Overload resolution.  sparsevec shares the category of vector and halfvec, where vector is
-- preferred: a literal or NULL argument still resolves to vector where a vector overload fits, so
-- a sparsevec literal needs its type (the first call fails to parse '{..}' as a vector).  A
-- function with halfvec and sparsevec overloads but no vector one (l2_norm) is ambiguous for an
-- untyped argument, as in pgvector: cast it.
SELECT l2_distance('{1:1}/2', '{2:1}/2');
SELECT l2_distance('{1:1}/2'::sparsevec, '{2:1}/2') AS typed, l2_distance(NULL, NULL) AS nulls;
SELECT l2_norm(NULL);
SELECT l2_norm('{1:3,2:4}/2');
SELECT l2_norm('{1:3,2:4}/2'::sparsevec) AS sparse, l2_norm(NULL::halfvec) AS null_halfvec;
-- a vector with a sparsevec: the vector is cast to sparsevec (implicit), exactly
SELECT '[3,0]'::vector <-> '{2:4}/2'::sparsevec AS mixed_l2, pg_typeof(l2_normalize('[3,0]'::vector::sparsevec)) AS normalize_type;
