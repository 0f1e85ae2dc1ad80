
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

-- halfvec columns (pgvector's opclass names): the graph holds the halves' float values, so an
-- index over a halfvec column answers as one over a vector column of the same values
CREATE OPERATOR CLASS halfvec_l2_ops DEFAULT FOR TYPE halfvec USING vs_graph AS
	OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l2(internal);
CREATE OPERATOR CLASS halfvec_ip_ops FOR TYPE halfvec USING vs_graph AS
	OPERATOR 1 <#> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_ip(internal);
CREATE OPERATOR CLASS halfvec_cosine_ops FOR TYPE halfvec USING vs_graph AS
	OPERATOR 1 <=> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_cosine(internal);
