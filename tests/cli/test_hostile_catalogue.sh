#!/usr/bin/env bash
# Hostile-input catalogue (tests/cli/hostile_cases*.tsv): every case must exit with its documented
# code, print exactly one line on stderr (besides the "device: ..." line) containing the expected
# fragment, and leave the working folder $T exactly as it was (no result, no .partial, no .tmp).
# Usage: HEBB=... KATA=... bash test_hostile_catalogue.sh [-v]   (run by ctest as cli_test_hostile_catalogue)
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${KATA:?set KATA to the kata executable}"
RAMNET=${RAMNET:-$(dirname "$KATA")/ramnet}
export HEBB KATA RAMNET
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# hostile_cases.tsv, then hostile_cases_<area>.tsv (same columns; reported line numbers count through them in order)
CASES=$(ls "$SRC"/tests/cli/hostile_cases*.tsv | sort)
verbose=${1:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export T="$W/t"
mkdir -p "$T/dir.h5"
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX

# Fixtures: a tiny valid model, and files that are not what they claim to be.
"$HEBB" build --device cpu --dim 4 --facts 8 --width 8 --out "$T/model.h5" >/dev/null 2>&1 \
  || { echo "fixture: hebb build failed"; exit 1; }
: >"$T/empty.h5"
printf 'this is not HDF5\n' >"$T/text.h5"
head -c 1200 "$T/model.h5" >"$T/trunc.h5"
printf 'dim = 8\n' >"$T/ok.toml"
printf 'widthz = [64, 128]\n' >"$T/unknown_key.toml"
printf '[frobnicate]\ndim = 8\n' >"$T/unknown_section.toml"
printf 'widths = [1,\n' >"$T/truncated.toml"
printf 'seeds = "many"\n' >"$T/wrong_type.toml"
printf 'dry-run = "yes"\n' >"$T/flag_string.toml"
printf 'dim = [8, 16]\n' >"$T/array_for_scalar.toml"
printf 'dim = 8\ndim = 9\n' >"$T/dup_key.toml"
printf '[margin-sweep.inner]\ndim = 8\n' >"$T/nested.toml"
printf 'when = 1979-05-27\n' >"$T/date.toml"
printf 'methods = []\n' >"$T/empty_array.toml"
printf 'seed = -1\n' >"$T/neg_seed.toml"
printf 'out = "x.h5"\nout = "y.h5"\n' >"$T/dup_out.toml"
printf 'force = true\n' >"$T/force.toml"
printf '\x89HDF\r\n\x1a\n\x00\x00' >"$T/binary.toml"
mkdir -p "$T/dupcol"  # an edit data folder whose CSV header names 'book' twice
printf ',author,book,book\n0,a,b,c\n1,d,e,f\n' >"$T/dupcol/book_authors.csv"
printf 'The author of {book} is {author}\n' >"$T/dupcol/author_templates.txt"
before=$(cd "$T" && find . -printf '%p %s %m\n' | sort)

pass=0 fail=0 n=0 line_no=0
while IFS=$'\t' read -r code frag owner cmd; do
  line_no=$((line_no + 1))
  [[ -z "$code" || "$code" == \#* ]] && continue
  n=$((n + 1))
  (cd "$T" && eval "$cmd") >"$W/stdout" 2>"$W/stderr" </dev/null
  rc=$?
  grep -v '^device: ' "$W/stderr" >"$W/msg"
  why=""
  [[ $rc -eq $code ]] || why="exit $rc, expected $code"
  [[ -z "$why" && $(wc -l <"$W/msg") -ne 1 ]] && why="$(wc -l <"$W/msg") lines on stderr, expected 1"
  [[ -z "$why" ]] && ! grep -qiF -- "$frag" "$W/msg" && why="message lacks '$frag'"
  after=$(cd "$T" && find . -printf '%p %s %m\n' | sort)
  if [[ "$after" != "$before" ]]; then
    [[ -z "$why" ]] && why="changed files: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | tr '\n' ' ')"
    # Remove what the case left so the next case starts from the same folder.
    comm -13 <(echo "$before" | cut -d' ' -f1) <(echo "$after" | cut -d' ' -f1) | sort -r |
      while read -r p; do (cd "$T" && rm -rf -- "$p"); done
  fi
  if [[ -z "$why" ]]; then
    pass=$((pass + 1))
    [[ "$verbose" == "-v" ]] && echo "ok   $line_no: $cmd"
  else
    fail=$((fail + 1))
    echo "FAIL $line_no [$owner]: $cmd -> $why"
    sed 's/^/     | /' "$W/stderr" | head -5
  fi
done < <(for f in $CASES; do cat "$f"; echo "# --- end of $(basename "$f")"; done)
echo "hostile catalogue: $pass/$n passed"
[[ $n -ge 80 ]] || { echo "catalogue has only $n cases (want >= 80)"; exit 1; }
[[ $fail -eq 0 ]]
