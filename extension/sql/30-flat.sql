-- =============================================================================================
-- The vs_flat index (extension/flat*.c): exact search, every query reads all vectors
-- =============================================================================================

CREATE FUNCTION vs_flat_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_flat TYPE INDEX HANDLER vs_flat_handler;

COMMENT ON ACCESS METHOD vs_flat IS 'exact vector search: every query reads all vectors (GPU or CPU)';

SELECT vsearch_create_opclasses('vs_flat', ARRAY['l2', 'ip', 'cosine', 'l1']);

-- halfvec columns (pgvector's opclass names): the index holds the halves' float values, so its
-- answers are the sequential scan's over the halfvec column; ORDER BY only (sphere() takes a
-- vector center)
CREATE OPERATOR CLASS halfvec_l2_ops DEFAULT FOR TYPE halfvec USING vs_flat AS
	OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l2(internal);
CREATE OPERATOR CLASS halfvec_ip_ops FOR TYPE halfvec USING vs_flat AS
	OPERATOR 1 <#> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_ip(internal);
CREATE OPERATOR CLASS halfvec_cosine_ops FOR TYPE halfvec USING vs_flat AS
	OPERATOR 1 <=> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_cosine(internal);
CREATE OPERATOR CLASS halfvec_l1_ops FOR TYPE halfvec USING vs_flat AS
	OPERATOR 1 <+> (halfvec, halfvec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l1(internal);

-- sparsevec columns (pgvector's opclass names): each row is densified as it is loaded, so sparse
-- values of at most the index's dimension limit; the answers are the sequential scan's over the
-- sparsevec column (the sparse distances are the dense ones bit for bit); ORDER BY only
CREATE OPERATOR CLASS sparsevec_l2_ops DEFAULT FOR TYPE sparsevec USING vs_flat AS
	OPERATOR 1 <-> (sparsevec, sparsevec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l2(internal);
CREATE OPERATOR CLASS sparsevec_ip_ops FOR TYPE sparsevec USING vs_flat AS
	OPERATOR 1 <#> (sparsevec, sparsevec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_ip(internal);
CREATE OPERATOR CLASS sparsevec_cosine_ops FOR TYPE sparsevec USING vs_flat AS
	OPERATOR 1 <=> (sparsevec, sparsevec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_cosine(internal);
CREATE OPERATOR CLASS sparsevec_l1_ops FOR TYPE sparsevec USING vs_flat AS
	OPERATOR 1 <+> (sparsevec, sparsevec) FOR ORDER BY float_ops, FUNCTION 1 vsearch_metric_l1(internal);
