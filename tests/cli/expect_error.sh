# Shared by the CLI error tests (sourced; not a test itself). Defines `expect`:
#   expect CODE PATTERN -- TOOL_ARGS...
# runs "$TOOL" TOOL_ARGS --device cpu --out <tmp file> and checks: exit code CODE, exactly one line
# on stderr matching PATTERN (grep -Ei), no output file left behind, and no NaN printed on stdout.
# Needs TOOL (executable path) and sets up $tmp and $fails; finish with `expect_summary NAME`.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

expect() {
  local code=$1 pattern=$2
  shift 3
  local out="$tmp/out.h5" name
  name=$(basename "$TOOL")
  rm -rf "$out" "$out".*
  "$TOOL" "$@" --device cpu --out "$out" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [[ $rc -ne $code ]]; then
    echo "FAIL: $name $* -> exit $rc, expected $code"; cat "$tmp/stderr"; fails=$((fails + 1)); return
  fi
  if ! grep -Eqi -- "$pattern" "$tmp/stderr"; then
    echo "FAIL: $name $* -> stderr does not match '$pattern':"; cat "$tmp/stderr"; fails=$((fails + 1)); return
  fi
  if ls "$out"* >/dev/null 2>&1; then
    echo "FAIL: $name $* left an output file"; ls "$out"*; fails=$((fails + 1)); return
  fi
  if grep -Eqiw "nan" "$tmp/stdout"; then
    echo "FAIL: $name $* printed NaN:"; cat "$tmp/stdout"; fails=$((fails + 1)); return
  fi
  [[ $(wc -l <"$tmp/stderr") -eq 1 ]] || { echo "FAIL: $name $* printed more than one line:"; cat "$tmp/stderr"; fails=$((fails + 1)); return; }
  echo "ok: $name $* -> $rc: $(head -n1 "$tmp/stderr")"
}

expect_summary() {
  if [[ $fails -ne 0 ]]; then echo "$fails failure(s)"; exit 1; fi
  echo "all $1 error cases ok"
}
