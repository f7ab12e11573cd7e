#!/usr/bin/env bash
# Acceptance 4 of issue 13: a 20-step smoke run of every SSFR preset on the CPU. Each preset runs with
# its own protocol, methods, seeds rule and training settings, and only the sizes shrunk on the command
# line (d 8, F 16, J 2, batch 32, 20 steps, one seed, a small search range). First the presets' full
# paper grids are checked with --dry-run: fig3b 5 methods x 8 F = 40 jobs, fig10 5 methods x 6 widths =
# 30, fig3a 3 (d, F) x 4 J x 4 seeds = 48, fig2a 16 widths x 4 seeds = 64. Then each smoke file is read
# back: one row per job, every training ran at most 20 steps, the protocol columns match the preset.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export MEMCAP_PRESETS="$SRC/experiments/presets"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

dry() {  # dry SUBCOMMAND PRESET JOBS
  local out want=$3
  out=$("$HEBB" ssfr "$1" --preset "$2" --device cpu --dry-run --out "$T/dry.h5" 2>/dev/null)
  check 'echo "$out" | grep -q "jobs: $want in the plan"' "--preset $2 --dry-run: expected $want jobs: $(echo "$out" | tail -2)"
}
dry capacity fig3b 40
dry capacity fig10 30
dry noise fig3a 48
dry usability fig2a 64
check '[ ! -e "$T/dry.h5" ]' "a dry run wrote a file"
# --methods keeps each method's options (as hebb capacity does): 2 methods x 2 F, the option in the job key
out=$("$HEBB" ssfr capacity --preset fig3b --methods gd,precision=tf32,ntk --facts 64,128 --device cpu --dry-run \
  --out "$T/dry.h5" 2>&1)
check 'echo "$out" | grep -q "jobs: 4 in the plan" && echo "$out" | grep -q "mlp=gd:transformer,precision=tf32/facts=64"' \
  "--methods gd,precision=tf32,ntk: $(echo "$out" | tail -3)"
# (its bad values: tests/cli/hostile_cases.tsv)

S="--device cpu --steps 20 --batch 32 --eval-every 10 --eval-batches 1 --dim 8 --junk 2 --seeds 1 --progress none"
smoke() {  # smoke NAME ARGS...
  local name=$1 rc
  shift
  "$HEBB" ssfr "$@" $S --out "$T/$name.h5" >"$T/$name.txt" 2>"$T/$name.err"
  rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/$name.h5" ]' "smoke $name failed (exit $rc): $(tail -3 "$T/$name.err")"
}
smoke fig3b capacity --preset fig3b --facts 16 --search-hi 32
smoke fig10 capacity --preset fig10 --widths 8 --search-hi 24
smoke fig3a noise --preset fig3a --facts 16
smoke fig2a usability --preset fig2a --facts 16 --widths 8,16

PY="bash $SRC/experiments/plots/with_python.sh"
if $PY -c 'import h5py' >/dev/null 2>&1; then
  cat >"$T/check.py" <<'PYEOF'
import json, sys, h5py, numpy as np
T = sys.argv[1]
s = lambda x: x.decode() if isinstance(x, bytes) else str(x)
bad = []
def check(c, m):
    if not c: bad.append(m); print("FAIL:", m)
methods = ["gd:transformer", "hebbian", "hebbian:whitened", "hebbian:data-dependent", "ntk"]
for name, proto in [("fig3b", "fact-adaptive"), ("fig10", "train99")]:
    with h5py.File(f"{T}/{name}.h5", "r") as f:
        u = f["summary"]
        check([s(x) for x in u["mlp"][()]] == methods, f"{name}: methods {u['mlp'][()]}")
        check(all(s(x) == proto for x in u["protocol"][()]), f"{name}: protocol")
        for job in u["job"][()]:
            for note in f["runs"][s(job).replace("/", ",")]["probes/note"][()]:
                check(s(note).startswith("gate") or "best_acc" in s(note), f"{name}: probe note {note}")
with h5py.File(f"{T}/fig3a.h5", "r") as f:
    u = f["summary"]
    check(len(u["job"]) == 1 and u["steps_run"][0] <= 20 and u["dim"][0] == 8, "fig3a smoke: one job, <= 20 steps")
    check(len(f["runs"][s(u["job"][0]).replace("/", ",")]["loss"]) == u["steps_run"][0], "fig3a: loss curve length")
with h5py.File(f"{T}/fig2a.h5", "r") as f:
    u = f["summary"]
    check(list(u["width"][()]) == [8, 16] and all(u["pretrain_steps"][()] <= 20), "fig2a smoke rows")
    check(all(s(x) == "gd:transformer" for x in u["mlp"][()]), "fig2a: gd MLP from the preset")
    check("tau_star" in f["usability"].attrs, "fig2a: /usability with tau*")
sys.exit(1 if bad else 0)
PYEOF
  $PY "$T/check.py" "$T"
  check '[ $? -eq 0 ]' "smoke files (see FAIL lines above)"
fi
[ $fail -eq 0 ] && echo "PASS" && exit 0
exit 1
