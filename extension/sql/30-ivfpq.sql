
-- =============================================================================================
-- The vs_ivfpq index (extension/ivfpq*.c): inverted lists of product-quantized residuals,
-- re-ranked with exact distances.  docs/INDEXES.md describes it.
-- =============================================================================================

CREATE FUNCTION vs_ivfpq_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_ivfpq TYPE INDEX HANDLER vs_ivfpq_handler;

COMMENT ON ACCESS METHOD vs_ivfpq IS 'approximate vector search: IVF-PQ candidates re-ranked with exact distances';

-- The operator classes have vs_flat's names and shape: 1 = the distance (ORDER BY), 2 = the range
-- test (WHERE), support function 1 = the metric.  There is no vector_l1_ops: the product quantizer
-- works in Euclidean / inner-product space.
CREATE OPERATOR CLASS vector_l2_ops
	DEFAULT FOR TYPE vector USING vs_ivfpq AS
		OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<->> (vector, sphere),
		FUNCTION 1 vsearch_metric_l2(internal);

CREATE OPERATOR CLASS vector_ip_ops
	FOR TYPE vector USING vs_ivfpq AS
		OPERATOR 1 <#> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<#>> (vector, sphere),
		FUNCTION 1 vsearch_metric_ip(internal);

CREATE OPERATOR CLASS vector_cosine_ops
	FOR TYPE vector USING vs_ivfpq AS
		OPERATOR 1 <=> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<=>> (vector, sphere),
		FUNCTION 1 vsearch_metric_cosine(internal);
