#!/usr/bin/env bash
# Bad input to `kata capacity` / `kata capacity-sweep`: one clear line on stderr, a non-zero exit,
# and no output file. Env: KATA (path of the kata executable).
set -u
: "${KATA:?set KATA to the kata executable}"
TOOL=$KATA
# shellcheck source=expect_error.sh
source "$(dirname "$0")/expect_error.sh"

expect 2 "unknown.*map"        -- capacity --map bogus --dim 32
expect 2 "not divisible|divid" -- capacity --map m3 --dim 32
expect 2 "not divisible|divid" -- capacity --map sigma4 --dim 30
expect 2 "K must be >= 1"      -- capacity --map m1 --dim 32 --k-min 0
expect 2 "K must be >= 1"      -- capacity --map m1 --dim 32 --K=-4 --no-search
expect 2 "tau"                 -- capacity --map softmax:tau=0 --dim 32
expect 2 "tau"                 -- capacity --map softmax:tau=-0.5 --dim 32
expect 2 "fewer than K"        -- capacity --map orthant --dim 32 --keys coord --K 64 --no-search
expect 2 "fewer than --k-max"  -- capacity --map m1 --dim 64 --keys mub --k-max 5000
expect 2 "prime power"         -- capacity --map m1 --dim 30 --keys mub
expect 2 "s\^2|s = "           -- capacity --map m1 --dim 32 --keys devore
expect 2 "unknown key source"  -- capacity --map m1 --dim 32 --keys nonsense
expect 2 "value model"         -- capacity --map m1 --dim 32 --values nonsense
expect 2 "d_v >= K"            -- capacity --map m1 --dim 32 --values onehot --dv 8 --K 16 --no-search
expect 2 "unknown.*map"        -- capacity-sweep --maps linear,bogus --dims 32
expect 2 "not divisible|divid" -- capacity-sweep --maps m4 --dims 32,30

# --device cuda without a usable GPU (skipped where a GPU exists: then it must succeed instead).
if "$KATA" capacity --map linear --dim 8 --K 4 --no-search --trials 1 --device cuda --out "$tmp/gpu.h5" \
    >"$tmp/stdout" 2>"$tmp/stderr"; then
  echo "note: a GPU is usable here; --device cuda ran"
  rm -f "$tmp/gpu.h5"
else
  rc=$?
  if [[ $rc -ne 5 ]] || ! grep -Eqi "cuda|gpu" "$tmp/stderr" || ls "$tmp/gpu.h5"* >/dev/null 2>&1; then
    echo "FAIL: --device cuda without GPU -> exit $rc (expected 5)"; cat "$tmp/stderr"; fails=$((fails + 1))
  else
    echo "ok: --device cuda without GPU -> 5: $(head -n1 "$tmp/stderr")"
  fi
fi

# A good run writes the file and the k_star columns (sanity that the errors above are not everything failing).
"$KATA" capacity --map m1 --dim 16 --trials 1 --k-max 64 --device cpu --out "$tmp/good.h5" >"$tmp/stdout" 2>"$tmp/stderr" \
  || { echo "FAIL: a valid run failed"; cat "$tmp/stderr"; fails=$((fails + 1)); }
[[ -f "$tmp/good.h5" ]] || { echo "FAIL: a valid run wrote no file"; fails=$((fails + 1)); }

if [[ $fails -ne 0 ]]; then echo "$fails failure(s)"; exit 1; fi
echo "all capacity error cases behave"
