-- vsearch_index_check: a structural check of a vsearch index (vs_flat, vs_ivfpq, vs_graph, vs_lc,
-- vs_sss), in the spirit of amcheck.  Walks every page, verifies the access method's invariants
-- and that every entry names a valid heap tid and no row has two entries; with heapallindexed,
-- also that every row of the table the index should hold (visible to a fresh snapshot) has an
-- entry.  Returns a jsonb report; raises ERROR with SQLSTATE XX002 (index_corrupted) on
-- corruption.  Only the index's owner (or a superuser) may run it.  docs/RELIABILITY.md.
CREATE FUNCTION vsearch_index_check(index regclass, heapallindexed boolean DEFAULT false)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'vsearch_index_check' LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
