-- pgvector's documented examples (its README: storing, querying, distances, aggregates,
-- half-precision vectors and indexing, sparse vectors and indexing, binary quantization,
-- subvectors), run as a new user moving over would.  Two changes: pgvector's index types (hnsw,
-- ivfflat) become vs_flat, with the same operator classes, and subqueries in FROM get an alias
-- (PostgreSQL 15 requires one).  The half-precision expression index's answers are checked
-- against the sequential scan's.
-- quiet: another suite of the same run may have created the extension already
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
RESET client_min_messages;

-- Getting started
CREATE TABLE items (id bigserial PRIMARY KEY, embedding vector(3));
INSERT INTO items (embedding) VALUES ('[1,2,3]'), ('[4,5,6]');
SELECT * FROM items ORDER BY embedding <-> '[3,1,2]' LIMIT 5;

-- Storing
ALTER TABLE items ADD COLUMN category_id integer;
INSERT INTO items (embedding, category_id) VALUES ('[1,2,3]', 1), ('[4,5,6]', 2);
INSERT INTO items (id, embedding) VALUES (1, '[1,2,3]'), (2, '[4,5,6]')
    ON CONFLICT (id) DO UPDATE SET embedding = EXCLUDED.embedding;
UPDATE items SET embedding = '[1,2,3]' WHERE id = 1;
SELECT id, embedding, category_id FROM items ORDER BY id;

-- Querying
SELECT id FROM items ORDER BY embedding <-> '[3,1,2]', id LIMIT 5;
SELECT id FROM items WHERE id != 1 ORDER BY embedding <-> (SELECT embedding FROM items WHERE id = 1), id LIMIT 5;
SELECT id FROM items WHERE embedding <-> '[3,1,2]' < 5 ORDER BY id;
SELECT id, embedding <-> '[3,1,2]' AS distance FROM items ORDER BY id;
SELECT id, (embedding <#> '[3,1,2]') * -1 AS inner_product FROM items ORDER BY id;
SELECT id, 1 - (embedding <=> '[3,1,2]') AS cosine_similarity FROM items ORDER BY id;
SELECT AVG(embedding) FROM items;
SELECT category_id, AVG(embedding) FROM items GROUP BY category_id ORDER BY category_id NULLS LAST;

-- Indexing (pgvector: USING hnsw / ivfflat): one index per distance
CREATE INDEX items_l2 ON items USING vs_flat (embedding vector_l2_ops);
CREATE INDEX items_ip ON items USING vs_flat (embedding vector_ip_ops);
CREATE INDEX items_cos ON items USING vs_flat (embedding vector_cosine_ops);
CREATE INDEX items_l1 ON items USING vs_flat (embedding vector_l1_ops);
SET enable_seqscan = off;
SELECT id FROM items ORDER BY embedding <=> '[3,1,2]', id LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <+> '[3,1,2]' LIMIT 5;
RESET enable_seqscan;

-- Half-precision vectors
CREATE TABLE half_items (id bigserial PRIMARY KEY, embedding halfvec(3));
INSERT INTO half_items (embedding) VALUES ('[1,2,3]'), ('[4,5,6]'), ('[0.1,0.2,0.30000001]');
SELECT id, embedding FROM half_items ORDER BY embedding <-> '[3,1,2]' LIMIT 5;
-- Half-precision indexing: index vectors at half precision (an expression index)
CREATE INDEX items_half ON items USING vs_flat ((embedding::halfvec(3)) halfvec_l2_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding::halfvec(3) <-> '[1,2,3]' LIMIT 5;
CREATE TEMP TABLE half_via_index AS
  SELECT id, embedding::halfvec(3) <-> '[1,2,3]' AS d FROM items ORDER BY embedding::halfvec(3) <-> '[1,2,3]' LIMIT 5;
RESET enable_seqscan;
SET enable_indexscan = off;
SELECT count(*) AS rows, count(*) FILTER (WHERE i.id = s.id AND i.d = s.d) AS same_as_seqscan
FROM (SELECT row_number() OVER (ORDER BY d, id) AS r, * FROM half_via_index) i
JOIN (SELECT row_number() OVER (ORDER BY d, id) AS r, * FROM (
        SELECT id, embedding::halfvec(3) <-> '[1,2,3]' AS d FROM items
        ORDER BY embedding::halfvec(3) <-> '[1,2,3]' LIMIT 5) x) s USING (r);
RESET enable_indexscan;

-- Sparse vectors: {index:value}/dimensions, indices from 1
CREATE TABLE sparse_items (id bigserial PRIMARY KEY, embedding sparsevec(5));
INSERT INTO sparse_items (embedding) VALUES ('{1:1,3:2,5:3}/5'), ('{1:4,3:5,5:6}/5');
SELECT * FROM sparse_items ORDER BY embedding <-> '{1:3,3:1,5:2}/5' LIMIT 5;
-- Sparse indexing (pgvector: USING hnsw)
CREATE INDEX ON sparse_items USING vs_flat (embedding sparsevec_l2_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM sparse_items ORDER BY embedding <-> '{1:3,3:1,5:2}/5' LIMIT 5;
SELECT *, embedding <-> '{1:3,3:1,5:2}/5' AS d FROM sparse_items ORDER BY embedding <-> '{1:3,3:1,5:2}/5' LIMIT 5;
RESET enable_seqscan;

-- Binary quantization: Hamming distance on the quantized vectors, then re-ranking by the original
-- vectors
SELECT id FROM items ORDER BY binary_quantize(embedding)::bit(3) <~> binary_quantize('[1,-2,3]'), id LIMIT 5;
SELECT id FROM (
    SELECT * FROM items ORDER BY binary_quantize(embedding)::bit(3) <~> binary_quantize('[1,-2,3]'), id LIMIT 20
) AS candidates ORDER BY embedding <=> '[1,-2,3]', id LIMIT 5;

-- Subvectors: index and query the first elements only (an expression index)
CREATE TABLE long_items (id bigserial PRIMARY KEY, embedding vector(5));
INSERT INTO long_items (embedding) VALUES ('[1,2,3,4,5]'), ('[5,4,3,2,1]'), ('[1,1,1,9,9]');
CREATE INDEX long_items_sub ON long_items USING vs_flat ((subvector(embedding, 1, 3)::vector(3)) vector_cosine_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM long_items ORDER BY subvector(embedding, 1, 3)::vector(3) <=> subvector('[1,2,3,4,5]'::vector, 1, 3) LIMIT 5;
SELECT id, subvector(embedding, 1, 3)::vector(3) <=> subvector('[1,2,3,4,5]'::vector, 1, 3) AS d
FROM long_items ORDER BY subvector(embedding, 1, 3)::vector(3) <=> subvector('[1,2,3,4,5]'::vector, 1, 3), id LIMIT 5;
RESET enable_seqscan;
-- and re-rank by the full vectors
SELECT id FROM (
    SELECT * FROM long_items ORDER BY subvector(embedding, 1, 3)::vector(3) <=> subvector('[1,2,3,4,5]'::vector, 1, 3), id LIMIT 20
) AS candidates ORDER BY embedding <=> '[1,2,3,4,5]', id LIMIT 5;

-- Aggregates and the other functions of the reference
SELECT SUM(embedding) AS sum, vector_dims(SUM(embedding)) AS dims FROM items;
SELECT l2_distance('[1,2,3]'::vector, '[3,1,2]'), inner_product('[1,2,3]'::vector, '[3,1,2]'),
       cosine_distance('[1,2,3]'::vector, '[3,1,2]'), l1_distance('[1,2,3]'::vector, '[3,1,2]');
SELECT vector_norm('[3,4]'::vector), l2_norm('[3,4]'::halfvec), l2_normalize('[3,4]'::vector),
       '[1,2]'::vector || '[3]' AS concat, binary_quantize('[1,-2,3]'::vector);
SELECT hamming_distance(B'101', B'011'), jaccard_distance(B'101', B'011');

DROP TABLE items, half_items, sparse_items, long_items;
