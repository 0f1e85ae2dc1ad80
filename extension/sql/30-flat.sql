-- =============================================================================================
-- The vs_flat index (extension/flat*.c): exact search, every query reads all vectors
-- =============================================================================================

CREATE FUNCTION vs_flat_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_flat TYPE INDEX HANDLER vs_flat_handler;

COMMENT ON ACCESS METHOD vs_flat IS 'exact vector search: every query reads all vectors (GPU or CPU)';

SELECT vsearch_create_opclasses('vs_flat', ARRAY['l2', 'ip', 'cosine', 'l1']);
