
-- =============================================================================================
-- Sharded tables (docs/SHARDING.md): a partitioned table whose partitions are postgres_fdw foreign
-- tables on other vsearch servers.  PostgreSQL 15 ships ORDER BY <op> q to every shard but not the
-- LIMIT when a query names the partitioned table; these functions send the LIMIT, or a whole
-- batch, to every partition and merge the answers here.  Local partitions are searched here.
-- On the shards vsearch must live in the schema it has here (postgres_fdw assumes the same).
-- The functions find that schema at run time (the extension is relocatable) and name every object
-- of it with that schema; they run with search_path = pg_catalog, pg_temp, so nothing they call
-- resolves through the caller's search_path (a schema put ahead of pg_catalog cannot replace a
-- function or operator they use: suite security).
-- =============================================================================================

-- The vsearch index that answers ORDER BY column <operator> q on a table: a valid single-column
-- index of a vsearch access method whose operator class orders by that operator, vs_flat (exact)
-- before any other kind.  The sharded batch functions call it on each shard.
CREATE FUNCTION vsearch_index_for(tbl regclass, column_name name, op text) RETURNS regclass
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	found regclass;
BEGIN
	SELECT i.indexrelid::regclass INTO found
	  FROM pg_catalog.pg_index i
	  JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
	  JOIN pg_catalog.pg_am am ON am.oid = ic.relam
	  JOIN pg_catalog.pg_opclass oc ON oc.oid = i.indclass[0]
	  JOIN pg_catalog.pg_amop ao ON ao.amopfamily = oc.opcfamily AND ao.amopstrategy = 1
								AND ao.amoppurpose = 'o'
	  JOIN pg_catalog.pg_operator o ON o.oid = ao.amopopr
	  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
	  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_am'::regclass AND d.objid = am.oid
								   AND d.deptype = 'e'
	  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'vsearch'
	 WHERE i.indrelid = tbl AND i.indnatts = 1 AND i.indisvalid AND a.attname = column_name
	   AND o.oprname = op
	 ORDER BY am.amname <> 'vs_flat', ic.relname
	 LIMIT 1;
	IF found IS NULL THEN
		RAISE EXCEPTION 'table % has no vsearch index on column "%" for operator %',
			tbl, column_name, op
			USING ERRCODE = 'undefined_object',
				  HINT = format('Create one, e.g. CREATE INDEX ON %s USING vs_flat (%I %s).', tbl,
								column_name,
								CASE op WHEN '<#>' THEN 'vector_ip_ops'
											  WHEN '<=>' THEN 'vector_cosine_ops'
											  WHEN '<+>' THEN 'vector_l1_ops'
											  ELSE 'vector_l2_ops' END);
	END IF;
	RETURN found;
END
$$;

-- Internal: the leaf partitions of a table (the table itself when it is not partitioned) and
-- what it takes to search each: for a postgres_fdw foreign table its server and the remote names
-- of the table and of two columns (the options schema_name, table_name, column_name); for a
-- local table its own names.  Checks the arguments the sharded functions share.
CREATE FUNCTION vsearch_shard_parts(tbl regclass, column_name name, id_column name, op text)
	RETURNS TABLE (part regclass, server name, remote_table text, remote_column name,
				   remote_id name)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	col name;
	r record;
BEGIN
	IF op IS NULL OR op NOT IN ('<->', '<#>', '<=>', '<+>') THEN
		RAISE EXCEPTION 'unknown vsearch distance operator "%"', op
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use <-> (L2), <#> (negative inner product), <=> (cosine) or <+> (L1).';
	END IF;
	FOREACH col IN ARRAY ARRAY[column_name, id_column] LOOP
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = tbl AND attname = col
					   AND attnum > 0 AND NOT attisdropped) THEN
			RAISE EXCEPTION 'column "%" of relation % does not exist', col, tbl
				USING ERRCODE = 'undefined_column';
		END IF;
	END LOOP;
	FOR r IN
		WITH leaves AS (
			SELECT p.relid FROM pg_catalog.pg_partition_tree(tbl) p WHERE p.isleaf
			UNION ALL
			SELECT tbl WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_partition_tree(tbl))
		)
		SELECT l.relid, c.relkind, n.nspname, c.relname, s.srvname, w.fdwname, ft.ftoptions,
			   (SELECT a FROM pg_catalog.pg_attribute a
				 WHERE a.attrelid = l.relid AND a.attname = column_name) AS vcol,
			   (SELECT a FROM pg_catalog.pg_attribute a
				 WHERE a.attrelid = l.relid AND a.attname = id_column) AS idcol
		  FROM leaves l
		  JOIN pg_catalog.pg_class c ON c.oid = l.relid
		  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		  LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = l.relid
		  LEFT JOIN pg_catalog.pg_foreign_server s ON s.oid = ft.ftserver
		  LEFT JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw
		 ORDER BY l.relid
	LOOP
		part := r.relid;
		IF r.relkind <> 'f' THEN
			server := NULL;
			remote_table := part::text;
			remote_column := column_name;
			remote_id := id_column;
		ELSIF r.fdwname = 'postgres_fdw' THEN
			server := r.srvname;
			remote_table := format('%I.%I',
				coalesce((SELECT substr(o, 13) FROM unnest(r.ftoptions) o WHERE o LIKE 'schema_name=%'),
						 r.nspname),
				coalesce((SELECT substr(o, 12) FROM unnest(r.ftoptions) o WHERE o LIKE 'table_name=%'),
						 r.relname));
			remote_column := coalesce((SELECT substr(o, 13) FROM unnest((r.vcol).attfdwoptions) o
										WHERE o LIKE 'column_name=%'), column_name);
			remote_id := coalesce((SELECT substr(o, 13) FROM unnest((r.idcol).attfdwoptions) o
									WHERE o LIKE 'column_name=%'), id_column);
		ELSE
			RAISE EXCEPTION 'partition % is a foreign table of foreign-data wrapper "%"',
				part, r.fdwname
				USING ERRCODE = 'feature_not_supported',
					  HINT = 'The sharded vsearch functions search local and postgres_fdw partitions.';
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;

-- kNN over every partition with the LIMIT sent to each: one "ORDER BY column <op> q LIMIT k" per
-- partition in a UNION ALL, so postgres_fdw ships ORDER BY and LIMIT to every shard and runs the
-- shards concurrently (Async Foreign Scans under an Append: the OFFSET 0 keeps the planner from a
-- Merge Append, which PostgreSQL 15 runs one shard after the other).  Returns the k nearest of
-- those, nearest first, as rows of the table:
--   SELECT * FROM vsearch_knn_sharded(NULL::items, 'embedding', '[1,2,3]', 10);
CREATE FUNCTION vsearch_knn_sharded(rel anyelement, column_name name, query vector, k integer,
									op text DEFAULT '<->')
	RETURNS SETOF anyelement
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	tbl regclass;
	vs name;
	cols text;
	part regclass;
	branches text[] := '{}';
BEGIN
	SELECT typrelid INTO tbl FROM pg_catalog.pg_type WHERE oid = pg_typeof(rel) AND typrelid <> 0;
	IF tbl IS NULL THEN
		RAISE EXCEPTION 'vsearch_knn_sharded needs the row type of a table, not %', pg_typeof(rel)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass a NULL of the table''s row type: vsearch_knn_sharded(NULL::items, ...).';
	END IF;
	IF k < 1 THEN
		RAISE EXCEPTION 'k must be at least 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT n.nspname INTO vs FROM pg_catalog.pg_extension e
	  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vsearch';
	SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
	  FROM pg_catalog.pg_attribute WHERE attrelid = tbl AND attnum > 0 AND NOT attisdropped;
	-- Each branch returns its distance too: a branch whose output is exactly its foreign scan's
	-- needs no subquery scan of its own, and only then can the Append run it asynchronously.
	FOR part IN EXECUTE format('SELECT part FROM %I.vsearch_shard_parts($1, $2, $2, $3)', vs)
				USING tbl, column_name, op
	LOOP
		branches := branches ||
			format('(SELECT %s, t.%I OPERATOR(%I.%s) $1 AS vsearch_distance FROM ONLY %s t '
				   'ORDER BY t.%I OPERATOR(%I.%s) $1 LIMIT $2)',
				   cols, column_name, vs, op, part, column_name, vs, op);
	END LOOP;
	IF query IS NULL OR k IS NULL THEN
		RETURN;  -- like ORDER BY a NULL query: no row is near it
	END IF;
	RETURN QUERY EXECUTE format('SELECT %s FROM (%s OFFSET 0) s ORDER BY s.vsearch_distance LIMIT $2',
								cols, array_to_string(branches, ' UNION ALL '))
		USING query, k;
END
$$;

-- Internal (extension/shards.c): the inverse of array_send(vector[]), which carries a batch's
-- queries to a shard in binary; and the merge of the shards' answers, by query, distance and id,
-- the first k of each query (all with k NULL).
CREATE FUNCTION vsearch_unpack_vectors(bytea) RETURNS vector[]
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE FUNCTION vsearch_merge_batch(queries integer[], ids bigint[], distances double precision[],
									k integer)
	RETURNS TABLE (query integer, id bigint, distance double precision)
	AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE PARALLEL SAFE ROWS 1000;

-- Internal: vsearch_knn_batch or vsearch_range_batch on every partition (on the shards through
-- dblink, all at once; local partitions here), each row named by the id column; then the k
-- nearest per query (kNN) or every row (range), ordered by query, distance and id.
CREATE FUNCTION vsearch_batch_sharded(knn boolean, tbl regclass, column_name name,
									  queries vector[], k integer, radius double precision,
									  op text, id_column name)
	RETURNS TABLE (query integer, id bigint, distance double precision)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	vs name;
	dbl name;
	p record;
	remote text;
	qlit text;
	conn text;
	conns text[];
	cached boolean;
	reused boolean;
	sent integer;
	busy text[];
	nap double precision;
	waited double precision;
	qs integer[];
	ids bigint[];
	ds double precision[];
	rq integer[];
	rid bigint[];
	rd double precision[];
	st text;
	msg text;
	det text;
BEGIN
	IF knn AND k < 1 THEN
		RAISE EXCEPTION 'k must be at least 1' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT n.nspname INTO vs FROM pg_catalog.pg_extension e
	  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vsearch';
	SELECT n.nspname INTO dbl FROM pg_catalog.pg_extension e
	  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'dblink';

	-- A cached connection may have died with its shard since the last call: then the call runs
	-- once more on fresh connections (every search is read-only).
	FOR attempt IN 1..2 LOOP
		conns := '{}'; qs := '{}'; ids := '{}'; ds := '{}'; reused := false;
		BEGIN
			-- the shards first: local partitions are searched here while they work; a shard
			-- gets the queries in binary (vsearch_unpack_vectors), made once
			FOR p IN EXECUTE format('SELECT * FROM %I.vsearch_shard_parts($1, $2, $3, $4) '
									'ORDER BY server IS NULL, part', vs)
					 USING tbl, column_name, id_column, op
			LOOP
				-- here the queries are parameters; a shard gets them as a literal (dblink has none)
				IF p.server IS NOT NULL AND qlit IS NULL THEN
					qlit := format('%I.vsearch_unpack_vectors(%L)', vs, array_send(queries));
				END IF;
				remote := format('SELECT b.query, t.%I::bigint, b.distance '
								 'FROM %I.%I(%I.vsearch_index_for(%L, %L, %L), %s, %s) b '
								 'JOIN ONLY %s t ON t.ctid = b.row_ctid',
								 p.remote_id, vs,
								 CASE WHEN knn THEN 'vsearch_knn_batch' ELSE 'vsearch_range_batch' END,
								 vs, p.remote_table, p.remote_column, op,
								 CASE WHEN p.server IS NULL THEN '$1' ELSE qlit END,
								 CASE WHEN p.server IS NULL AND knn THEN '$2'
									  WHEN p.server IS NULL THEN '$3'
									  WHEN knn THEN k::text ELSE radius::text END,
								 p.remote_table);
				IF p.server IS NULL THEN
					EXECUTE format('SELECT array_agg(r.query), array_agg(r.id), array_agg(r.distance) '
								   'FROM (%s) r(query, id, distance)', remote)
						INTO rq, rid, rd
						USING queries, k, radius;
					qs := qs || rq; ids := ids || rid; ds := ds || rd;
					CONTINUE;
				END IF;
				IF dbl IS NULL THEN
					RAISE EXCEPTION 'searching the foreign partition % needs the dblink extension',
						p.part
						USING ERRCODE = 'undefined_object',
							  HINT = 'CREATE EXTENSION dblink; (it comes with PostgreSQL''s contrib).';
				END IF;
				-- A connection per foreign server, user and partition of that server, kept for the
				-- session: each shard's backend then keeps its cached copies of the index.
				conn := format('vsearch_%s_%s_',
							   (SELECT oid FROM pg_catalog.pg_foreign_server WHERE srvname = p.server),
							   (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user));
				conn := conn || (SELECT count(*) FROM unnest(conns) c WHERE starts_with(c, conn));
				EXECUTE format('SELECT %L = ANY (%I.dblink_get_connections())', conn, dbl)
					INTO cached;
				IF cached THEN
					reused := true;
				ELSE
					BEGIN
						EXECUTE format('SELECT %I.dblink_connect(%L, %L)', dbl, conn, p.server);
					EXCEPTION WHEN OTHERS THEN
						GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
												det = PG_EXCEPTION_DETAIL;
						RAISE EXCEPTION 'could not connect to server "%"', p.server
							USING ERRCODE = st,
								  DETAIL = coalesce(nullif(det, ''), msg),
								  HINT = format('Partition %s of %s is there: a sharded search '
												'needs every partition.', p.part, tbl);
					END;
				END IF;
				conns := conns || conn;
				EXECUTE format('SELECT %I.dblink_send_query($1, $2)', dbl) INTO sent USING conn, remote;
				IF sent <> 1 THEN
					RAISE EXCEPTION 'could not send the search to server "%"', p.server
						USING ERRCODE = 'connection_failure';
				END IF;
			END LOOP;

			-- Wait for the shards without blocking inside libpq, where PostgreSQL 15 lets no
			-- cancel or statement_timeout interrupt a backend: poll, sleeping in between.
			waited := 0;
			WHILE cardinality(conns) > 0 LOOP
				EXECUTE format('SELECT array_agg(c) FROM unnest($1) c WHERE %I.dblink_is_busy(c) = 1',
							   dbl) INTO busy USING conns;
				EXIT WHEN busy IS NULL;
				nap := least(0.01, greatest(0.001, waited / 10));
				PERFORM pg_sleep(nap);
				waited := waited + nap;
			END LOOP;
			FOREACH conn IN ARRAY conns LOOP
				EXECUTE format('SELECT array_agg(r.query), array_agg(r.id), array_agg(r.distance) '
							   'FROM %I.dblink_get_result(%L) '
							   'AS r(query integer, id bigint, distance double precision)', dbl, conn)
					INTO rq, rid, rd;
				qs := qs || rq; ids := ids || rid; ds := ds || rd;
				-- the empty result that ends a query readies the connection for the next one
				EXECUTE format('SELECT count(*) FROM %I.dblink_get_result(%L) '
							   'AS r(query integer, id bigint, distance double precision)', dbl, conn);
			END LOOP;
			EXIT;
		EXCEPTION WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
			-- a connection in an unknown state is closed; the next call opens a fresh one
			FOREACH conn IN ARRAY conns LOOP
				EXECUTE format('SELECT %I.dblink_disconnect(%L)', dbl, conn);
			END LOOP;
			-- 08: the connection failed; 57P01-57P03: the shard ended it (shutdown, crash)
			IF attempt = 1 AND reused AND (st LIKE '08%' OR st IN ('57P01', '57P02', '57P03')) THEN
				CONTINUE;
			END IF;
			RAISE;
		END;
	END LOOP;

	RETURN QUERY EXECUTE format('SELECT * FROM %I.vsearch_merge_batch($1, $2, $3, $4)', vs)
		USING qs, ids, ds, CASE WHEN knn THEN k END;
END
$$;

-- The batch functions over a sharded (or any) table: per query (its 1-based position in the
-- array) the rows vsearch_knn_batch / vsearch_range_batch return on every partition, merged,
-- named by the id column (cast to bigint) with their distances.
CREATE FUNCTION vsearch_knn_batch_sharded(tbl regclass, column_name name, queries vector[],
										  k integer, op text DEFAULT '<->',
										  id_column name DEFAULT 'id')
	RETURNS TABLE (query integer, id bigint, distance double precision)
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RETURN QUERY EXECUTE format('SELECT * FROM %I.vsearch_batch_sharded(true, $1, $2, $3, $4, NULL, $5, $6)',
								(SELECT n.nspname FROM pg_catalog.pg_extension e
								   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
								  WHERE e.extname = 'vsearch'))
		USING tbl, column_name, queries, k, op, id_column;
END
$$;

CREATE FUNCTION vsearch_range_batch_sharded(tbl regclass, column_name name, queries vector[],
											radius double precision, op text DEFAULT '<->',
											id_column name DEFAULT 'id')
	RETURNS TABLE (query integer, id bigint, distance double precision)
LANGUAGE plpgsql STRICT
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	RETURN QUERY EXECUTE format('SELECT * FROM %I.vsearch_batch_sharded(false, $1, $2, $3, NULL, $4, $5, $6)',
								(SELECT n.nspname FROM pg_catalog.pg_extension e
								   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
								  WHERE e.extname = 'vsearch'))
		USING tbl, column_name, queries, radius, op, id_column;
END
$$;
