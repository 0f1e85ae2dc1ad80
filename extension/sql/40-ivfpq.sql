
-- =============================================================================================
-- The vs_ivfpq index (extension/ivfpq*.c): inverted lists of product-quantized residuals,
-- re-ranked with exact distances.  docs/INDEXES.md describes it.
-- =============================================================================================

CREATE FUNCTION vs_ivfpq_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_ivfpq TYPE INDEX HANDLER vs_ivfpq_handler;

COMMENT ON ACCESS METHOD vs_ivfpq IS 'approximate vector search: IVF-PQ candidates re-ranked with exact distances';

-- The operator classes (10-search.sql).  There is no vector_l1_ops: the product quantizer works in
-- Euclidean / inner-product space.
SELECT vsearch_create_opclasses('vs_ivfpq', ARRAY['l2', 'ip', 'cosine']);

-- halfvec columns (pgvector's opclass names): trained and searched on the halves' float values,
-- so an index over a halfvec column answers as one over a vector column of the same values
CREATE OPERATOR CLASS halfvec_l2_ops DEFAULT FOR TYPE halfvec USING vs_ivfpq AS
	OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l2(internal);
CREATE OPERATOR CLASS halfvec_ip_ops FOR TYPE halfvec USING vs_ivfpq AS
	OPERATOR 1 <#> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_ip(internal);
CREATE OPERATOR CLASS halfvec_cosine_ops FOR TYPE halfvec USING vs_ivfpq AS
	OPERATOR 1 <=> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_cosine(internal);
