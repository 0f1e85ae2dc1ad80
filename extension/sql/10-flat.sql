
-- =============================================================================================
-- Range search (extension/range.c) and the vs_flat index (extension/flat*.c, search.c, batch.c)
-- =============================================================================================

-- A sphere: a center and a radius, the right operand of the range operators.  The radius must be
-- finite, and not negative except for <<#>> (negative inner products can be negative).
CREATE TYPE sphere AS (center vector, radius double precision);

CREATE FUNCTION sphere(center vector, radius double precision) RETURNS sphere
	AS 'MODULE_PATHNAME', 'vsearch_sphere' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- vector <<op>> sphere: the distance <op> between the vector and the center is <= the radius.
CREATE FUNCTION vector_l2_within(vector, sphere) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vector_ip_within(vector, sphere) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vector_cosine_within(vector, sphere) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vector_l1_within(vector, sphere) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Selectivity: no statistics can tell, so the estimators of geometric containment (0.1 %),
-- which make an index worth using on tables of some size.
CREATE OPERATOR <<->> (
	LEFTARG = vector, RIGHTARG = sphere, FUNCTION = vector_l2_within,
	RESTRICT = contsel, JOIN = contjoinsel
);

CREATE OPERATOR <<#>> (
	LEFTARG = vector, RIGHTARG = sphere, FUNCTION = vector_ip_within,
	RESTRICT = contsel, JOIN = contjoinsel
);

CREATE OPERATOR <<=>> (
	LEFTARG = vector, RIGHTARG = sphere, FUNCTION = vector_cosine_within,
	RESTRICT = contsel, JOIN = contjoinsel
);

CREATE OPERATOR <<+>> (
	LEFTARG = vector, RIGHTARG = sphere, FUNCTION = vector_l1_within,
	RESTRICT = contsel, JOIN = contjoinsel
);

-- The vs_flat access method ------------------------------------------------------------------

CREATE FUNCTION vs_flat_handler(internal) RETURNS index_am_handler
	AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD vs_flat TYPE INDEX HANDLER vs_flat_handler;

COMMENT ON ACCESS METHOD vs_flat IS 'exact vector search: every query reads all vectors (GPU or CPU)';

-- Support function 1 of the operator classes: the metric, as the engine numbers it.
CREATE FUNCTION vsearch_metric_l2(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_ip(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_cosine(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_l1(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Operator classes: 1 = the distance (ORDER BY), 2 = the range test (WHERE).
CREATE OPERATOR CLASS vector_l2_ops
	DEFAULT FOR TYPE vector USING vs_flat AS
		OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<->> (vector, sphere),
		FUNCTION 1 vsearch_metric_l2(internal);

CREATE OPERATOR CLASS vector_ip_ops
	FOR TYPE vector USING vs_flat AS
		OPERATOR 1 <#> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<#>> (vector, sphere),
		FUNCTION 1 vsearch_metric_ip(internal);

CREATE OPERATOR CLASS vector_cosine_ops
	FOR TYPE vector USING vs_flat AS
		OPERATOR 1 <=> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<=>> (vector, sphere),
		FUNCTION 1 vsearch_metric_cosine(internal);

CREATE OPERATOR CLASS vector_l1_ops
	FOR TYPE vector USING vs_flat AS
		OPERATOR 1 <+> (vector, vector) FOR ORDER BY float_ops,
		OPERATOR 2 <<+>> (vector, sphere),
		FUNCTION 1 vsearch_metric_l1(internal);

-- Batch searches: every query in one request; the visible rows per query, nearest first.
-- query is the 1-based position in the array; join back with ON t.ctid = b.row_ctid.
CREATE FUNCTION vsearch_knn_batch(index regclass, queries vector[], k integer)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;

CREATE FUNCTION vsearch_range_batch(index regclass, queries vector[], radius double precision)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;
