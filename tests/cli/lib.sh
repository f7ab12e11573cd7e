# Shared by the CLI end-to-end tests (sourced; not a test itself): a scratch folder $T removed on
# exit, the failure flag $fail, and
#   check 'CONDITION' MESSAGE  evaluates CONDITION (in the caller's shell); when false prints
#                              "FAIL: MESSAGE" and sets fail=1
#   field KEY FILE             the word after the first KEY on a line of FILE
#   ge A B                     true when the number A >= the number B
#   run_and_kill PATH DELAY CMD...  runs CMD in the background (output discarded), waits up to 30 s for PATH
#                              to exist, DELAY seconds more, then kills it with SIGKILL (a run dying mid-way)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
field() { awk -v k="$1" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' "$2" | head -1; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a + 0 >= b + 0)}'; }
run_and_kill() {
  local path=$1 delay=$2 pid _
  shift 2
  "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    [ -e "$path" ] && break
    sleep 0.01
  done
  sleep "$delay"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
}
