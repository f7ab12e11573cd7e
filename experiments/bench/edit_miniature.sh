#!/usr/bin/env bash
# Acceptance item 4 of `hebb edit` (issue 15): the CI miniature of the whole pipeline (256 facts, tiny model,
# CPU, one thread: base training + a 10% swap) in under 2 minutes with swap score 1.0. Runs the CLI test that
# builds and checks the miniature (tests/cli/test_hebb_edit.sh: score, r_NF, the result files) and checks the
# time it prints for base + swap against the budget. Exit 1 when the test fails or the time is over.
# Usage: experiments/bench/edit_miniature.sh   env HEBB (default build/hebb), LIMIT_S (default 120)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export HEBB=${HEBB:-$SRC/build/hebb} MEMCAP_SRC=$SRC OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
LIMIT_S=${LIMIT_S:-120}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash "$SRC/tests/cli/test_hebb_edit.sh" >"$log" 2>&1
rc=$?
t=$(sed -n 's/^miniature base + swap: \([0-9]*\) s$/\1/p' "$log" | tail -1)
grep -m1 "^efficacy" "$log"  # the swap's metrics
if [ $rc -ne 0 ] || [ -z "$t" ]; then
  echo "edit_miniature: the test failed (rc $rc):"; tail -20 "$log"; exit 1
fi
if [ "$t" -ge "$LIMIT_S" ]; then echo "edit_miniature: base + swap took $t s, over the $LIMIT_S s budget"; exit 1; fi
echo "edit_miniature: base + swap $t s < $LIMIT_S s, test passed"
