# Throwaway PostgreSQL clusters for tests, the main job and benchmarks.  Source this file, then:
#   cluster_start [setting=value ...]   # initdb + start in a fresh temp dir on a free port
#   pg psql -c 'select 1'               # run a client as the cluster's owner against it
#   cluster_stop                        # stop and remove (also runs on EXIT)
# As root the cluster is owned by the unprivileged 'postgres' account (PostgreSQL refuses to run
# as root); otherwise by the calling user.  Only a Unix socket in the temp dir is used, so clusters
# never collide with each other or with a system cluster.

PG_BINDIR=${PG_BINDIR:-$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}
[ -x "$PG_BINDIR/initdb" ] || PG_BINDIR=/usr/lib/postgresql/15/bin

if [ -z "${CLUSTER_OWNER:-}" ]; then
  if [ "$(id -u)" = 0 ]; then CLUSTER_OWNER=postgres; else CLUSTER_OWNER=$(id -un); fi
fi

# Run a command as the cluster owner with the connection environment set.
pg() {
  if [ "$(id -un)" = "$CLUSTER_OWNER" ]; then
    env PATH="$PG_BINDIR:$PATH" PGHOST="$CLUSTER_DIR" PGPORT="$CLUSTER_PORT" PGUSER=postgres \
      PGDATABASE=postgres "$@"
  else
    # VSEARCH_* variables (VSEARCH_CUDA_LIBRARY, VSEARCH_CUDA_STATS, ...) reach the server too
    local passthrough
    mapfile -t passthrough < <(env | grep -E '^VSEARCH_[A-Z0-9_]*=' || true)
    runuser -u "$CLUSTER_OWNER" -- env PATH="$PG_BINDIR:$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" PGHOST="$CLUSTER_DIR" \
      PGPORT="$CLUSTER_PORT" PGUSER=postgres PGDATABASE=postgres "${passthrough[@]}" "$@"
  fi
}

_free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
  echo 54329
}

cluster_start() {
  CLUSTER_DIR=$(mktemp -d /tmp/vsearch-pg.XXXXXX)
  CLUSTER_PORT=$(_free_port)
  chmod 700 "$CLUSTER_DIR"
  [ "$(id -u)" = 0 ] && chown "$CLUSTER_OWNER" "$CLUSTER_DIR"
  trap cluster_stop EXIT
  pg initdb -D "$CLUSTER_DIR/data" -U postgres -A trust --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 ||
    { cat "$CLUSTER_DIR/initdb.log" >&2; return 1; }
  local opts="-c listen_addresses= -k $CLUSTER_DIR -p $CLUSTER_PORT -c fsync=off"
  opts="$opts -c max_parallel_workers_per_gather=2 -c jit=off"
  local s
  for s in "$@"; do opts="$opts -c $s"; done
  pg pg_ctl -D "$CLUSTER_DIR/data" -o "$opts" -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null ||
    { cat "$CLUSTER_DIR/server.log" >&2; return 1; }
  CLUSTER_LOG=$CLUSTER_DIR/server.log
}

cluster_stop() {
  [ -n "${CLUSTER_DIR:-}" ] || return 0
  [ -d "$CLUSTER_DIR/data" ] && pg pg_ctl -D "$CLUSTER_DIR/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$CLUSTER_DIR"
  CLUSTER_DIR=
}

# check_indexes [database]: vsearch_index_check(index, heapallindexed => true) of every vsearch
# index of the database (default postgres); succeeds when there is one and none raised an ERROR.
check_indexes() {
  local n
  n=$(pg psql -X -q -v ON_ERROR_STOP=1 -d "${1:-postgres}" -At -c "SELECT count(*) FROM pg_class c
        JOIN pg_am a ON a.oid = c.relam, LATERAL vsearch_index_check(c.oid::regclass, true) r
        WHERE a.amname LIKE 'vs\_%'") || return 1
  ((n > 0))
}
