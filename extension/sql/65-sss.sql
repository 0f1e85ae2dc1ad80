-- =============================================================================================
-- The vs_sss index (extension/sss*.c): Sparse Spatial Selection pivot tables, exact range and
-- kNN search in metric spaces: vectors under L2 or L1, text under edit distance
-- =============================================================================================

CREATE FUNCTION vs_sss_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_sss TYPE INDEX HANDLER vs_sss_handler;

COMMENT ON ACCESS METHOD vs_sss IS 'exact metric-space search: SSS pivot table (vectors under L2/L1, text under edit distance)';

-- ip and cosine exist so that choosing them is refused with an explanation (neither is a metric)
SELECT vsearch_create_opclasses('vs_sss', ARRAY['l2', 'ip', 'cosine', 'l1']);

-- halfvec columns under the two metrics (pgvector's opclass names): the index holds the halves'
-- float values, so its answers are the sequential scan's over the halfvec column; ORDER BY only
-- (sphere() takes a vector center)
CREATE OPERATOR CLASS halfvec_l2_ops DEFAULT FOR TYPE halfvec USING vs_sss AS
	OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l2(internal);
CREATE OPERATOR CLASS halfvec_l1_ops FOR TYPE halfvec USING vs_sss AS
	OPERATOR 1 <+> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l1(internal);

CREATE OPERATOR CLASS text_levenshtein_ops DEFAULT FOR TYPE text USING vs_sss AS
	OPERATOR 1 <~> (text, text) FOR ORDER BY float_ops,
	OPERATOR 2 <<~>> (text, text_sphere),
	FUNCTION 1 vsearch_metric_levenshtein(internal);

-- The batch functions' text twins (extension/lcbatch.c): vs_lc or vs_sss indexes on text.
CREATE FUNCTION vsearch_knn_batch(index regclass, queries text[], k integer)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME', 'vsearch_knn_batch_text' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;

CREATE FUNCTION vsearch_range_batch(index regclass, queries text[], radius double precision)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME', 'vsearch_range_batch_text' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;
