
-- =============================================================================================
-- The vs_graph index (extension/graph*.c): a fixed-degree proximity graph searched by beam
-- search, exact distances.  docs/INDEXES.md describes it.
-- =============================================================================================

CREATE FUNCTION vs_graph_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_graph TYPE INDEX HANDLER vs_graph_handler;

COMMENT ON ACCESS METHOD vs_graph IS 'approximate vector search: a proximity graph searched by beam search, exact distances';

-- The operator classes (10-search.sql).
SELECT vsearch_create_opclasses('vs_graph', ARRAY['l2', 'ip', 'cosine']);
