# kNN answers compared as tests/lib/knn_diff compares them: rows tied at the LIMIT may differ.
# Source it.  GOT and EXPECTED below are lines "KEY|ID:DISTANCE ..." (one per query).
knn_diff=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/knn_diff

# knn_same GOT EXPECTED: succeeds when every answer of GOT is right against EXPECTED's, which must
# not be empty; else prints why.
knn_same() {
  if [[ -z $2 ]]; then echo "no expected answers (got '$1')"; return 1; fi
  "$knn_diff" <(printf '%s\n' "$1") <(printf '%s\n' "$2") 2>&1
}

# check_knn DESCRIPTION GOT EXPECTED: knn_same through the caller's ok and fail.
check_knn() {
  local why
  if why=$(knn_same "$2" "$3"); then ok "$1"; else fail "$1: $why"; fi
}
