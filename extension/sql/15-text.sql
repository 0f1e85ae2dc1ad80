
-- =============================================================================================
-- Text under edit distance (extension/textdist.c): the operators of the text operator classes
-- of the metric indexes, in the vocabulary of the vector ones (10-search.sql)
-- =============================================================================================

-- a <~> b: Levenshtein distance on characters (not bytes): 'año' <~> 'ano' = 1 in UTF-8.
CREATE FUNCTION text_levenshtein_distance(text, text) RETURNS double precision
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR <~> (
	LEFTARG = text, RIGHTARG = text, FUNCTION = text_levenshtein_distance, COMMUTATOR = <~>
);

-- A text sphere: a center string and a radius (an edit distance).  The constructor takes a real
-- radius so that sphere('[1,2]', 0.5) and sphere('[1,2]', 1), with an untyped literal, still build
-- a vector sphere (its double precision radius is the preferred type); write the text center
-- typed: sphere('casa'::text, 2).
CREATE TYPE text_sphere AS (center text, radius double precision);

CREATE FUNCTION sphere(center text, radius real) RETURNS text_sphere
	AS 'MODULE_PATHNAME', 'vsearch_text_sphere' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- text <<~>> text_sphere: the edit distance between the text and the center is <= the radius.
CREATE FUNCTION text_levenshtein_within(text, text_sphere) RETURNS boolean
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR <<~>> (
	LEFTARG = text, RIGHTARG = text_sphere, FUNCTION = text_levenshtein_within,
	RESTRICT = contsel, JOIN = contjoinsel
);

-- Support function 1 of the text operator classes: the metric (textdist.h).
CREATE FUNCTION vsearch_metric_levenshtein(internal) RETURNS integer
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
