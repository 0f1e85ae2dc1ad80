-- vsearch_index_check: healthy indexes of every access method pass after build, inserts, deletes,
-- updates and VACUUM, with heapallindexed; wrong objects and other users are refused.
-- (Corrupted pages are tests/index_check: a script test writes into a stopped cluster's files.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vsearch;
SELECT setseed(0.22);

CREATE TABLE chk (id int PRIMARY KEY, v vector(8), w text);
INSERT INTO chk SELECT i, (SELECT array_agg(round((random() * 10)::numeric, 2)::float4)
                           FROM generate_series(1, 8) WHERE i > 0)::vector,
                  substr(md5(i::text), 1, 3 + i % 7)
FROM generate_series(1, 600) i;
UPDATE chk SET v = NULL WHERE id % 97 = 0;   -- NULL keys are not indexed
CREATE INDEX chk_flat ON chk USING vs_flat (v);
CREATE INDEX chk_ivfpq ON chk USING vs_ivfpq (v) WITH (lists = 8, m = 4);
CREATE INDEX chk_ivfpq_sv ON chk USING vs_ivfpq (v vector_ip_ops) WITH (lists = 4, m = 2, nbits = 4, store_vectors = on);
CREATE INDEX chk_graph ON chk USING vs_graph (v) WITH (degree = 8);
CREATE INDEX chk_lc ON chk USING vs_lc (v) WITH (bucket_size = 16);
CREATE INDEX chk_lc_text ON chk USING vs_lc (w) WITH (bucket_size = 8);
CREATE INDEX chk_sss ON chk USING vs_sss (v vector_l1_ops);
CREATE INDEX chk_sss_text ON chk USING vs_sss (w);
CREATE INDEX chk_partial ON chk USING vs_flat (v) WHERE id % 2 = 0;
ALTER TABLE chk ADD COLUMN h halfvec(8);
UPDATE chk SET h = v::halfvec(8);
CREATE INDEX chk_half_flat ON chk USING vs_flat (h);
CREATE INDEX chk_half_graph ON chk USING vs_graph (h) WITH (degree = 8);
CREATE INDEX chk_half_sss ON chk USING vs_sss (h);

-- what every check reports that does not depend on the random layout
CREATE FUNCTION chk_all(heapallindexed boolean) RETURNS TABLE (index text, am text, entries bigint,
	duplicates bigint, heap_rows bigint, unused bigint) LANGUAGE sql AS $$
	SELECT r->>'index', r->>'access_method', (r->>'entries')::bigint,
	       (r->>'duplicate_entries')::bigint, (r->>'heap_rows')::bigint,
	       (r->>'unused_blocks')::bigint
	FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass, heapallindexed) r
	WHERE c.relname LIKE 'chk\_%' AND c.relkind = 'i' AND c.relname <> 'chk_pkey'
	ORDER BY 1 $$;

SELECT * FROM chk_all(true);
-- vs_graph: live nodes no search reaches.  None after a build (its navigability pass:
-- chk_half_graph); inserts (chk_graph's rows again after the UPDATE that added h, then the rows
-- below) leave some, fewer since an insert replaces first an edge its new node covers; VACUUM
-- relinks them
CREATE FUNCTION chk_unreached() RETURNS TABLE (index text, unreached bigint) LANGUAGE sql AS $$
	SELECT c.relname::text, (r->>'unreachable_live_nodes')::bigint
	FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass) r
	WHERE c.relname IN ('chk_graph', 'chk_half_graph') ORDER BY 1 $$;
SELECT * FROM chk_unreached();

-- inserts (new pages, new centers, list appends), updates, deletes, then VACUUM
INSERT INTO chk SELECT i, (SELECT array_agg(round((random() * 12 - 1)::numeric, 2)::float4)
                           FROM generate_series(1, 8) WHERE i > 0)::vector, repeat('x', i % 11)
FROM generate_series(601, 900) i;
UPDATE chk SET v = v + '[1,1,1,1,1,1,1,1]' WHERE id % 5 = 0;
UPDATE chk SET h = v::halfvec(8) WHERE id > 600 OR id % 5 = 0;
DELETE FROM chk WHERE id % 3 = 0;
SELECT * FROM chk_all(true);
SELECT * FROM chk_unreached();
VACUUM chk;
SELECT * FROM chk_all(true);
SELECT * FROM chk_unreached();
DELETE FROM chk WHERE id > 100;
VACUUM chk;
SELECT * FROM chk_all(true);

-- the kinds' own figures: metapage counts agree with the pages of a healthy index
SELECT r->>'access_method' AS am, (r->>'metapage_entries')::bigint = (r->>'entries')::bigint
         AS counts_agree, r->>'count_mismatches' AS mismatches,
       r->>'edges_to_free_nodes' AS to_free, (r->>'emptied_pages')::int > 0 AS emptied
FROM pg_class c, LATERAL vsearch_index_check(c.oid::regclass) r
WHERE c.relname IN ('chk_flat', 'chk_ivfpq_sv', 'chk_graph', 'chk_sss') ORDER BY 1;
SELECT (r->>'centers')::int > 0 AS has_centers, (r->>'members')::int + (r->>'centers')::int
         - (r->>'dead_centers')::int = (r->>'entries')::int AS entries_are_live
FROM vsearch_index_check('chk_lc') r;

-- an empty table, an index built before any row, a REINDEX
CREATE TABLE chk_empty (v vector);
CREATE INDEX chk_empty_flat ON chk_empty USING vs_flat (v);
CREATE INDEX chk_empty_ivf ON chk_empty USING vs_ivfpq (v);
CREATE INDEX chk_empty_graph ON chk_empty USING vs_graph (v);
SELECT r->>'access_method', r->>'entries', r->>'heap_rows' FROM pg_class c,
	LATERAL vsearch_index_check(c.oid::regclass, true) r
WHERE c.relname LIKE 'chk\_empty\_%' ORDER BY 1;
INSERT INTO chk_empty VALUES ('[1,2]'), ('[3,4]'), (NULL);
SELECT r->>'access_method', r->>'entries', r->>'heap_rows', r->>'pending_entries' FROM pg_class c,
	LATERAL vsearch_index_check(c.oid::regclass, true) r
WHERE c.relname LIKE 'chk\_empty\_%' ORDER BY 1;
REINDEX TABLE chk;
SELECT * FROM chk_all(true);

-- wrong objects
SELECT vsearch_index_check('chk');
SELECT vsearch_index_check('chk_pkey');
SELECT vsearch_index_check(NULL);
CREATE TABLE chk_parts (id int, v vector(2)) PARTITION BY RANGE (id);
CREATE TABLE chk_parts_1 PARTITION OF chk_parts FOR VALUES FROM (0) TO (10);
CREATE INDEX chk_parts_idx ON chk_parts USING vs_flat (v);
INSERT INTO chk_parts VALUES (1, '[1,2]'), (2, NULL);
SELECT vsearch_index_check('chk_parts_idx');
SELECT vsearch_index_check(indexrelid, true)->>'entries'
FROM pg_partition_tree('chk_parts_idx') JOIN pg_index ON indexrelid = relid WHERE isleaf;
DROP TABLE chk_parts;

-- only the owner (or a superuser)
CREATE ROLE chk_other;
GRANT SELECT ON chk TO chk_other;
SET ROLE chk_other;
SELECT vsearch_index_check('chk_flat');
RESET ROLE;
ALTER TABLE chk OWNER TO chk_other;
SET ROLE chk_other;
SELECT vsearch_index_check('chk_flat', true)->>'access_method';
RESET ROLE;

DROP TABLE chk, chk_empty;
DROP FUNCTION chk_all(boolean);
DROP ROLE chk_other;
