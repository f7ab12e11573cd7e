#!/usr/bin/env bash
# End-to-end `hebb margin-sweep`: default-grid dry run (the Fig. 2b plan), a small run with its stdout
# table, presets (+ flag overrides), --print-config round trip, and bad input (one-line error,
# non-zero exit, no output file).
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${MEMCAP_SRC:?set MEMCAP_SRC to the repository root}"
export MEMCAP_PRESETS="$MEMCAP_SRC/experiments/presets"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

# Default plan = Fig. 2b: 30 widths x 5 seeds.
"$HEBB" margin-sweep --dry-run --out "$T/d.h5" >"$T/dry.txt" 2>"$T/dry.err"
rc=$?; check '[ $rc -eq 0 ]' "dry run failed: $(cat "$T/dry.err")"
check 'grep -q "jobs: 150 in the plan" "$T/dry.txt"' "default plan is not 150 jobs"
check 'grep -q "width=1024/seed=4" "$T/dry.txt"' "default plan lacks width=1024/seed=4"
check '[ ! -e "$T/d.h5" ]' "dry run wrote a file"

# Presets expand to the spec's grids.
for p in fig2b-width:150 fig4-facts:150 exact-k2-facts:150 fig5a-keys:30 fig5b-values:30 fig5c-both:30 fig6-noise:45; do
  name=${p%%:*}; n=${p##*:}
  "$HEBB" margin-sweep --preset "$name" --dry-run --out "$T/x.h5" >"$T/p.txt" 2>&1
  check 'grep -q "jobs: $n in the plan" "$T/p.txt"' "preset $name: expected $n jobs, got: $(grep jobs: "$T/p.txt")"
  # A preset is also a --config file.
  "$HEBB" margin-sweep --config "$MEMCAP_PRESETS/$name.toml" --dry-run --out "$T/x.h5" >"$T/c.txt" 2>&1
  check 'grep -q "jobs: $n in the plan" "$T/c.txt"' "--config $name.toml: expected $n jobs"
done
# β grid of fig5c: [0] ∪ logspace(1, 3.35, 29).
"$HEBB" margin-sweep --preset fig5c-both --dry-run --out "$T/x.h5" >"$T/b.txt" 2>&1
check 'grep -q "beta=0/seed=0" "$T/b.txt" && grep -q "beta=3.35/seed=0" "$T/b.txt" && grep -q "beta=1/seed=0" "$T/b.txt"' \
  "fig5c beta grid endpoints"
# Flags override the preset.
"$HEBB" margin-sweep --preset fig5a-keys --betas 0,2 --seeds 2 --dry-run --out "$T/x.h5" >"$T/o.txt" 2>&1
check 'grep -q "jobs: 4 in the plan" "$T/o.txt"' "flags do not override the preset"

# A small real run: stdout table with the fit, file written.
"$HEBB" margin-sweep --dim 16 --facts 48 --widths 32,64,128,256 --seeds 2 --progress none --out "$T/r.h5" >"$T/r.txt" 2>"$T/r.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/r.h5" ]' "small sweep failed: $(cat "$T/r.err")"
check '[ "$(grep -cE "^ +[0-9]+ .*±" "$T/r.txt")" -eq 4 ]' "stdout table should have 4 point rows"
check 'grep -q "fit rkrv vs width" "$T/r.txt" && grep -q "R2=" "$T/r.txt"' "stdout lacks the fit line"

# --print-config writes a file that --config reads back to the same plan.
"$HEBB" margin-sweep --preset fig6-noise --seeds 1 --print-config "$T/cfg.toml" >/dev/null 2>&1
check '[ -s "$T/cfg.toml" ] && grep -q "noise" "$T/cfg.toml"' "--print-config wrote nothing"
"$HEBB" margin-sweep --config "$T/cfg.toml" --dry-run --out "$T/x.h5" >"$T/rc.txt" 2>&1
check 'grep -q "jobs: 15 in the plan" "$T/rc.txt"' "print-config round trip: $(grep jobs: "$T/rc.txt")"

# Bad input: one line, non-zero exit, no output.
bad() {
  "$HEBB" margin-sweep "$@" --out "$T/bad.h5" >"$T/bad.txt" 2>"$T/bad.err"
  local rc=$?
  check "[ $rc -ne 0 ]" "expected failure for: $*"
  check '[ ! -e "$T/bad.h5" ]' "output written despite bad input: $*"
  check '[ "$(wc -l <"$T/bad.err")" -le 3 ]' "error message too long for: $*"
}
bad --sweep beta
bad --widths 0,64
bad --seeds 0
bad --method ntk
bad --preset no-such-preset
bad --sweep width --widths 64 --lv maybe
exit $fail
