
-- =============================================================================================
-- What every vsearch index shares: range search (extension/range.c), the operator classes'
-- metric functions and shape (extension/amutils.c, validate.c), the batch functions (batch.c)
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

-- Support function 1 of the operator classes: the metric, as the engine numbers it.
CREATE FUNCTION vsearch_metric_l2(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_ip(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_cosine(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_metric_l1(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The operator classes of a vsearch access method: one per metric, all of one shape (validate.c):
-- OPERATOR 1 the distance, FOR ORDER BY; OPERATOR 2 the range test; FUNCTION 1 the metric.
-- vector_l2_ops is the default.  Each access method's script calls this with the metrics it
-- supports; 99-end.sql drops it.
CREATE FUNCTION vsearch_create_opclasses(am name, metrics text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	metric text;
	op text;
BEGIN
	FOREACH metric IN ARRAY metrics LOOP
		op := CASE metric WHEN 'l2' THEN '<->' WHEN 'ip' THEN '<#>' WHEN 'cosine' THEN '<=>'
						  WHEN 'l1' THEN '<+>' END;
		EXECUTE format('CREATE OPERATOR CLASS %I %s FOR TYPE vector USING %I AS '
					   'OPERATOR 1 %s (vector, vector) FOR ORDER BY float_ops, '
					   'OPERATOR 2 <%s> (vector, sphere), '
					   'FUNCTION 1 %I(internal)',
					   'vector_' || metric || '_ops',
					   CASE WHEN metric = 'l2' THEN 'DEFAULT' ELSE '' END, am, op, op,
					   'vsearch_metric_' || metric);
	END LOOP;
END
$$;

-- Batch searches: every query in one request; the visible rows per query, nearest first.
-- query is the 1-based position in the array; join back with ON t.ctid = b.row_ctid.
CREATE FUNCTION vsearch_knn_batch(index regclass, queries vector[], k integer)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;

CREATE FUNCTION vsearch_range_batch(index regclass, queries vector[], radius double precision)
	RETURNS TABLE (query integer, row_ctid tid, distance double precision)
	AS 'MODULE_PATHNAME' LANGUAGE C STABLE STRICT PARALLEL SAFE ROWS 100;
