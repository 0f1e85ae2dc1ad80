# Helpers for the GPU worker's script tests (tests/worker/*).  Source it; each test ends with
# `finish`, which prints "N passed, M failed" and sets the exit status.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/tests/lib/cluster.sh"

passed=0 failed=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }
fail() { echo "FAIL - $*"; failed=$((failed + 1)); }
# check DESCRIPTION ACTUAL EXPECTED
check() { if [[ "$2" == "$3" ]]; then ok "$1"; else fail "$1: got '$2', expected '$3'"; fi; }
# check_knn DESCRIPTION GOT EXPECTED: kNN answers, rows tied at the LIMIT may differ
source "$root/tests/lib/knn.sh"
# check_true DESCRIPTION SQL-BOOLEAN-RESULT (t/f)
check_true() { check "$1" "$2" t; }
finish() {
  if ((failed)) && [ -n "${CLUSTER_LOG:-}" ] && [ -f "$CLUSTER_LOG" ]; then
    echo "--- server log (last 40 lines)"; tail -40 "$CLUSTER_LOG"
  fi
  echo "$passed passed, $failed failed"
  ((failed == 0))
}

# q [psql args...]: quiet, unaligned, stop on error
q() { pg psql -X -At -q -v ON_ERROR_STOP=1 "$@"; }
stat() { q -c "select $1 from vsearch_stat"; }

# wait_worker STATE...: waits up to 30 s until vsearch_stat.worker_state is one of STATEs
wait_worker() {
  local s
  for _ in $(seq 1 300); do
    s=$(q -c "select worker_state from vsearch_stat" 2>/dev/null)
    for want in "$@"; do [[ $s == "$want" ]] && return 0; done
    sleep 0.1
  done
  echo "worker state is '$s', expected one of: $*" >&2
  return 1
}

# make_table DB TABLE ROWS DIM [SEED]: TABLE(id, v vector(DIM)) with random rows, a vs_flat index
# TABLE_v_idx (L2), and QUERY table TABLE_q(qid, q) of 20 random queries.
make_table() {
  local db=$1 t=$2 n=$3 dim=$4 seed=${5:-0.5}
  q -d "$db" >/dev/null <<SQL
select setseed($seed);
create table $t (id bigserial primary key, v vector($dim));
insert into $t (v)
  select (select array_agg(random()::real) from generate_series(1, $dim) where s.i > 0)::vector
    from generate_series(1, $n) s(i);
create index ${t}_v_idx on $t using vs_flat (v vector_l2_ops);
create table ${t}_q (qid int primary key, q vector($dim));
insert into ${t}_q
  select s.i, (select array_agg(random()::real) from generate_series(1, $dim) where s.i > 0)::vector
    from generate_series(1, 20) s(i);
analyze $t;
SQL
}

# knn_sql TABLE K [CONDITION [QUERIES]]: "qid|id:distance id:distance ..." per query of QUERIES
# (default TABLE_q; those meeting CONDITION), the K nearest rows of TABLE by <->, for check_knn.
knn_sql() {
  echo "select qid, (select string_agg(id || ':' || d, ' ' order by d, id)
                     from (select id, v <-> qq.q as d from $1 order by v <-> qq.q limit $2) s)
          from ${4:-${1}_q} qq ${3:+where $3} order by qid"
}
# knn_answers DB TABLE K SETTINGS: knn_sql's answers, planned under SETTINGS (e.g. "set
# enable_seqscan = off;").
knn_answers() { q -d "$1" -c "$4" -c "$(knn_sql "$2" "$3")"; }
INDEX_PLAN="set enable_seqscan = off; set enable_bitmapscan = off; set enable_indexscan = on;"
SEQ_PLAN="set enable_seqscan = on; set enable_indexscan = off; set enable_bitmapscan = off;"

# use_worker: makes the worker serve, on the GPU if it has one, else on the CPU
# (vsearch.worker_device = cpu); prints the device.
use_worker() {
  wait_worker serving unavailable || return 1
  if [[ $(stat worker_state) != serving ]]; then
    q -c "alter system set vsearch.worker_device = cpu" -c "select pg_reload_conf()" >/dev/null
    sleep 0.2
    wait_worker serving || return 1
  fi
  echo "# the worker serves on: $(stat device)"
}
