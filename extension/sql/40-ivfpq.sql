
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
