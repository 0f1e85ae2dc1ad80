-- vector: distances, norms, element-wise arithmetic, comparison and the btree operator class
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Distances of [1,2,3] and [4,5,6]: differences 3,3,3; dot 32; norms^2 14 and 77
SELECT '[1,2,3]'::vector <-> '[4,5,6]' AS l2_sqrt_27,
       l2_distance('[1,2,3]', '[4,5,6]') AS l2_sqrt_27;
SELECT '[1,2,3]'::vector <#> '[4,5,6]' AS neg_ip,
       inner_product('[1,2,3]', '[4,5,6]') AS ip,
       vector_negative_inner_product('[1,2,3]', '[4,5,6]') AS neg_ip;
SELECT '[1,2,3]'::vector <=> '[4,5,6]' AS cos_1_minus_32_over_sqrt_1078,
       cosine_distance('[1,2,3]', '[4,5,6]') AS same;
SELECT '[1,2,3]'::vector <+> '[4,5,6]' AS l1_9,
       l1_distance('[1,2,3]', '[4,5,6]') AS l1_9;
-- symmetric
SELECT '[4,5,6]'::vector <-> '[1,2,3]' AS l2, '[4,5,6]'::vector <#> '[1,2,3]' AS neg_ip,
       '[4,5,6]'::vector <=> '[1,2,3]' AS cos, '[4,5,6]'::vector <+> '[1,2,3]' AS l1;
SELECT '[3,4]'::vector <-> '[0,0]' AS l2_5, '[1,-1]'::vector <+> '[-2,3]' AS l1_7,
       '[1,-1]'::vector <#> '[-2,3]' AS neg_ip_5, '[0,0]'::vector <#> '[1,1]' AS neg_ip_minus_0;
-- cosine: parallel 0, orthogonal 1, opposite 2, zero vector NaN (like pgvector)
SELECT '[1,2]'::vector <=> '[2,4]' AS parallel, '[1,0]'::vector <=> '[0,1]' AS orthogonal,
       '[1,2]'::vector <=> '[-2,-4]' AS opposite, '[0,0]'::vector <=> '[1,1]' AS zero,
       '[0,0]'::vector <=> '[0,0]' AS both_zero;
-- float rounding makes these similarities 1.00000002 and -1.00000002: clamped to 0 and 2
SELECT '[0.1,0.1,0.1]'::vector <=> '[0.5,0.5,0.5]' AS clamped_0,
       '[0.1,0.1,0.1]'::vector <=> '[-0.5,-0.5,-0.5]' AS clamped_2;
-- many dimensions exercise the SIMD kernels: 40 dimensions, all exact in float
SELECT a <-> b AS l2_sqrt_160, a <#> b AS neg_ip_40, a <=> b AS cos_2, a <+> b AS l1_80,
       a <-> a AS l2_0, a <=> a AS cos_0
FROM (SELECT array_fill(1, ARRAY[40])::vector AS a, array_fill(-1, ARRAY[40])::vector AS b) s;
-- [1..20] against zeros and itself: sum of i^2 = 2870, sum of i = 210
SELECT v <-> w AS l2_sqrt_2870, v <#> w AS neg_ip_minus_0, v <+> w AS l1_210,
       v <#> v AS neg_ip_minus_2870, v <=> v AS cos_0
FROM (SELECT array_agg(i)::vector AS v, array_fill(0, ARRAY[20])::vector AS w
      FROM generate_series(1, 20) i) s;
-- Every length from 1 to 70 (SIMD bodies and block tails) against a double-precision reference.
-- Elements are multiples of 1/8 and 1/4, so every sum is exact and the results must be equal: the
-- distances are computed in double and rounded once to float (the root of L2 is taken in double).
WITH elements AS (
  SELECT n, i, ((i * 7) % 11 - 5) / 4.0 AS x, ((i * 5) % 13 - 6) / 8.0 AS y
  FROM generate_series(1, 70) n, generate_series(1, n) i
), pairs AS (
  SELECT n, array_agg(x ORDER BY i)::vector AS a, array_agg(y ORDER BY i)::vector AS b,
         sum((x - y) * (x - y))::float8 AS l2sq, sum(x * y)::float8 AS dot,
         sum(x * x)::float8 AS aa, sum(y * y)::float8 AS bb, sum(abs(x - y))::float8 AS l1
  FROM elements GROUP BY n
)
SELECT count(*) AS lengths,
       count(*) FILTER (WHERE a <-> b = sqrt(l2sq)) AS l2_equal,
       count(*) FILTER (WHERE a <#> b = -dot AND inner_product(a, b) = dot) AS ip_equal,
       count(*) FILTER (WHERE a <=> b = (1 - greatest(-1, least(1, dot / sqrt(aa * bb))))::real)
         AS cosine_equal,
       count(*) FILTER (WHERE a <+> b = l1) AS l1_equal,
       count(*) FILTER (WHERE vector_norm(a) = sqrt(aa)) AS norm_equal
FROM pairs;
-- a sum beyond float's range is infinite, not an error (as in pgvector)
SELECT '[3e38]'::vector <-> '[-3e38]' AS l2_inf;
-- NULL in, NULL out
SELECT NULL::vector <-> '[1]' AS l2, '[1]'::vector <#> NULL AS ip, cosine_distance(NULL, '[1]') AS cos,
       l1_distance('[1]', NULL) AS l1;

-- Dimension mismatch, for every binary operator and function
SELECT '[1,2]'::vector <-> '[1,2,3]';
SELECT '[1,2]'::vector <#> '[1,2,3]';
SELECT '[1,2]'::vector <=> '[1,2,3]';
SELECT '[1,2]'::vector <+> '[1,2,3]';
SELECT l2_distance('[1,2]', '[1,2,3]');
SELECT inner_product('[1,2]', '[1,2,3]');
SELECT cosine_distance('[1,2]', '[1,2,3]');
SELECT l1_distance('[1,2]', '[1,2,3]');
SELECT '[1,2]'::vector + '[1,2,3]';
SELECT '[1,2]'::vector - '[1,2,3]';
SELECT '[1,2]'::vector * '[1,2,3]';

-- Dimensions, norm, normalization
SELECT vector_dims('[1,2,3]') AS dims_3, vector_dims('[0]') AS dims_1;
SELECT vector_norm('[3,4]') AS norm_5, vector_norm('[1,1]') AS norm_sqrt_2, vector_norm('[-2]') AS norm_2,
       vector_norm('[0,0,0]') AS norm_0;
-- squares of very large or very small elements leave float's range: such norms are summed in
-- double (3e30 and 4e30 are not exact floats, hence not exactly 5e30; sqrt of the double sum)
SELECT vector_norm('[3e30,4e30]') AS norm_about_5e30, vector_norm('[3e-30,4e-30]') AS norm_about_5e_30;
SELECT l2_normalize('[3,4]') AS l2n_06_08, l2_normalize('[0,-5]') AS l2n_0_minus1, l2_normalize('[0,0]') AS zero,
       l2_normalize('[3e30,4e30]') AS big, l2_normalize('[1e-45]') AS tiny;
SELECT vector_norm(l2_normalize('[1,1,1,1]')) AS norm_1;

-- Element-wise arithmetic
SELECT '[1,2,3]'::vector + '[4,5,6]' AS sum_579, '[1,2,3]'::vector - '[4,5,6]' AS diff_333,
       '[1,2,3]'::vector * '[4,5,6]' AS prod_4_10_18;
SELECT '[0.5,-1.5]'::vector + '[0.25,1.5]' AS sum_075_0, '[1e-30]'::vector * '[0]' AS prod_0;
SELECT '[1]'::vector + NULL AS sum, NULL::vector - '[1]' AS diff, '[1]'::vector * NULL AS prod;
-- overflow and underflow are errors, never infinity or a silent zero
SELECT '[3e38]'::vector + '[3e38]';
SELECT '[-3e38]'::vector - '[3e38]';
SELECT '[1,1e20]'::vector * '[1,1e20]';
SELECT '[1e-30]'::vector * '[1e-30]';

-- Comparison: element by element, then the shorter vector first
SELECT '[1,2,3]'::vector < '[1,2,4]' AS lt, '[1,2,3]'::vector <= '[1,2,3]' AS le,
       '[1,2,3]'::vector = '[1,2,3]' AS eq, '[1,2,3]'::vector <> '[1,2,3]' AS ne,
       '[1,2,4]'::vector >= '[1,2,3]' AS ge, '[1,2,4]'::vector > '[1,2,3]' AS gt;
SELECT '[1,2]'::vector < '[1,2,3]' AS prefix_first, '[2]'::vector > '[1,5]' AS elements_first,
       '[0]'::vector = '[-0]' AS zero_eq_minus_zero, '[1,2]'::vector = '[1,2,0]' AS dims_differ;
SELECT vector_cmp('[1,2]', '[1,3]') AS minus_1, vector_cmp('[1,2]', '[1,2]') AS zero,
       vector_cmp('[1,3]', '[1,2]') AS plus_1, vector_cmp('[1,2,3]', '[1,2]') AS plus_1;
SELECT '[1]'::vector = NULL AS eq, vector_cmp(NULL, '[1]') AS cmp;

-- btree operator class: ORDER BY, DISTINCT and index scans
CREATE TABLE vector_ops_t (id integer, v vector);
INSERT INTO vector_ops_t VALUES
  (1, '[1,2,3]'), (2, '[1,2]'), (3, '[0,5]'), (4, '[1,2,3]'), (5, '[-1,0,0,0]'), (6, NULL), (7, '[1,2,2.5]');
SELECT id, v FROM vector_ops_t ORDER BY v, id;
SELECT DISTINCT v FROM vector_ops_t ORDER BY v DESC NULLS LAST;
SELECT opcname, opcdefault FROM pg_opclass
WHERE opcintype = 'vector'::regtype AND opcmethod = (SELECT oid FROM pg_am WHERE amname = 'btree');
CREATE INDEX vector_ops_t_v ON vector_ops_t (v);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM vector_ops_t WHERE v = '[1,2,3]';
SELECT id FROM vector_ops_t WHERE v = '[1,2,3]' ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id, v FROM vector_ops_t WHERE v < '[1,2,3]' ORDER BY v;
SELECT id, v FROM vector_ops_t WHERE v < '[1,2,3]' ORDER BY v;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- nearest neighbours by a sequential scan
SELECT id, v <-> '[1,2,3]' AS l2 FROM vector_ops_t WHERE vector_dims(v) = 3 ORDER BY v <-> '[1,2,3]', id;

-- Every function of the type is IMMUTABLE, PARALLEL SAFE and STRICT
SELECT count(*) AS functions,
       count(*) FILTER (WHERE provolatile = 'i' AND proparallel = 's' AND proisstrict) AS immutable_safe_strict
FROM pg_proc
WHERE prokind = 'f' AND proname = ANY ('{vector_in,vector_out,vector_typmod_in,vector_typmod_out,
  vector_recv,vector_send,vector,array_to_vector,vector_to_float4,vector_to_float8,vector_to_int4,
  vector_to_numeric,l2_distance,inner_product,vector_negative_inner_product,cosine_distance,
  l1_distance,vector_dims,vector_norm,l2_normalize,vector_add,vector_sub,vector_mul,vector_accum,
  vector_combine,vector_avg,vector_cmp,vector_lt,vector_le,vector_eq,vector_ne,vector_ge,
  vector_gt}'::name[]);

DROP TABLE vector_ops_t;
