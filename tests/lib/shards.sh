# A coordinator and N shard clusters on one machine, for scripts/shards, tests/shards and the
# sharding benchmark.  Source this file, then:
#   shards_start N [setting=value ...]   # N + 1 throwaway clusters (tests/lib/cluster.sh), each
#                                        # listening on 127.0.0.1 only; node 0 is the coordinator
#   on_node I psql -c '...'              # a client as the clusters' owner against node I
#   shards_create_table DIM [SERVER-OPTION ...]
#                                        # extensions, foreign servers, the hash-partitioned table
#                                        # items(id bigint, embedding vector(DIM)) with partition
#                                        # items_pK on shard K+1 (an empty table there)
#   shards_index 'USING vs_flat (embedding vector_l2_ops)'   # the index on every shard, in parallel
#   shard_stop I / shard_start I         # stop (fast) or restart one shard
#   shards_stop                          # stop and remove all (also runs on EXIT)
root=${root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
source "$root/tests/lib/cluster.sh"

NODE_DIRS=() NODE_PORTS=() NODE_OPTS=()
SHARDS=0

shards_start() {
  local n=$1 i; shift
  SHARDS=$n
  trap shards_stop EXIT
  for i in $(seq 0 "$n"); do
    CLUSTER_DIR=
    # listen on loopback TCP too: the coordinator reaches the shards like remote servers
    cluster_start listen_addresses=127.0.0.1 "$@" || { cluster_stop; shards_stop; return 1; }
    NODE_DIRS[i]=$CLUSTER_DIR NODE_PORTS[i]=$CLUSTER_PORT
    NODE_OPTS[i]="-c listen_addresses=127.0.0.1 -k $CLUSTER_DIR -p $CLUSTER_PORT -c fsync=off -c jit=off"
    local s
    for s in "$@"; do NODE_OPTS[i]+=" -c $s"; done
  done
  CLUSTER_DIR=
  trap shards_stop EXIT
  CLUSTER_DIR=${NODE_DIRS[0]} CLUSTER_PORT=${NODE_PORTS[0]} CLUSTER_LOG=${NODE_DIRS[0]}/server.log
}

on_node() {
  local i=$1; shift
  CLUSTER_DIR=${NODE_DIRS[i]} CLUSTER_PORT=${NODE_PORTS[i]} pg "$@"
}

# nq I [psql args]: quiet, unaligned, stop on error, against node I
nq() { local i=$1; shift; on_node "$i" psql -X -At -q -v ON_ERROR_STOP=1 "$@"; }

shard_stop() { on_node "$1" pg_ctl -D "${NODE_DIRS[$1]}/data" -m fast -w stop >/dev/null; }
shard_start() {
  on_node "$1" pg_ctl -D "${NODE_DIRS[$1]}/data" -o "${NODE_OPTS[$1]}" \
    -l "${NODE_DIRS[$1]}/server.log" -w -t 60 start >/dev/null
}

shards_stop() {
  local i
  for i in "${!NODE_DIRS[@]}"; do
    CLUSTER_DIR=${NODE_DIRS[i]} CLUSTER_PORT=${NODE_PORTS[i]} cluster_stop
  done
  NODE_DIRS=() NODE_PORTS=()
  CLUSTER_DIR=
}

shards_create_table() {
  local dim=$1 i; shift
  local opts="host '127.0.0.1', dbname 'postgres', extensions 'vsearch', async_capable 'true'"
  opts+=", connect_timeout '5', batch_size '1000'"
  local o
  for o in "$@"; do opts+=", $o"; done
  for i in $(seq 1 "$SHARDS"); do
    nq "$i" -c "CREATE EXTENSION vsearch" \
      -c "CREATE TABLE items_p$((i - 1)) (id bigint PRIMARY KEY, embedding vector($dim))"
  done
  {
    echo "SET client_min_messages = warning;"
    echo "CREATE EXTENSION vsearch; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;"
    echo "CREATE TABLE items (id bigint NOT NULL, embedding vector($dim)) PARTITION BY HASH (id);"
    for i in $(seq 1 "$SHARDS"); do
      echo "CREATE SERVER shard$i FOREIGN DATA WRAPPER postgres_fdw
              OPTIONS ($opts, port '${NODE_PORTS[i]}');"
      echo "CREATE USER MAPPING FOR CURRENT_USER SERVER shard$i OPTIONS (user 'postgres');"
      echo "CREATE FOREIGN TABLE items_p$((i - 1)) PARTITION OF items
              FOR VALUES WITH (MODULUS $SHARDS, REMAINDER $((i - 1))) SERVER shard$i;"
    done
  } | nq 0
}

shards_index() {
  local i pids=() rc=0
  for i in $(seq 1 "$SHARDS"); do
    nq "$i" -c "SET client_min_messages = error" \
      -c "CREATE INDEX ON items_p$((i - 1)) $1" -c "ANALYZE items_p$((i - 1))" & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  return $rc
}
