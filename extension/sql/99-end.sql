-- The install script's helpers, not part of the extension.
DROP FUNCTION vsearch_create_opclasses(name, text[]);
