#!/usr/bin/env bash
# End-to-end `hebb capacity` on the CPU: the dry run prints the plan and creates nothing; presets
# expand to the spec's grids; a tiny run; --shard 0/2 + 1/2 merged with `hebb merge` equals the full
# run; a run killed with SIGKILL in the middle of a search resumes (--resume) from its recorded
# probes (and a gd training in flight from its checkpoint) to the same result; bad input exits 2 with one line
# and no file left.
# HDF5 contents are compared with Python (h5py) when with_python.sh finds it, else those checks are
# skipped with a note.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${MEMCAP_SRC:?set MEMCAP_SRC to the repository root}"
export MEMCAP_PRESETS="$MEMCAP_SRC/experiments/presets"
. "$MEMCAP_SRC/tests/cli/lib.sh"
PY="$MEMCAP_SRC/experiments/plots/with_python.sh"
TINY=(--methods hebbian:whitened,ntk --dim 16 --facts 32 --seeds 2 --device cpu --progress none)

# Compare two result files: every dataset equal (NaN = NaN) except timings. Exit 77: no h5py.
same_h5() {
  cat >"$T/same.py" <<'EOF'
import sys, h5py, numpy as np
def load(p):
    out = {}
    with h5py.File(p, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) and "wall_s" not in n else None)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
only = sorted(set(a) ^ set(b))
if only: sys.exit(f"datasets only in one file: {only[:5]}")
for k in a:
    x, y = np.asarray(a[k]), np.asarray(b[k])
    eq = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else np.array_equal(x, y)
    if not eq: sys.exit(f"{k} differs: {x} vs {y}")
EOF
  bash "$PY" "$T/same.py" "$1" "$2"
}
compare() {  # compare A B WHAT
  same_h5 "$1" "$2" >"$T/cmp.txt" 2>&1
  local rc=$?
  if [ $rc -eq 77 ]; then echo "note: no h5py, skipped: $3"; elif [ $rc -ne 0 ]; then echo "FAIL: $3: $(cat "$T/cmp.txt")"; fail=1; fi
}

# Dry run: the plan, nothing created.
"$HEBB" capacity "${TINY[@]}" --dry-run --out "$T/d.h5" >"$T/dry.txt" 2>"$T/dry.err"
rc=$?; check '[ $rc -eq 0 ]' "dry run failed: $(cat "$T/dry.err")"
check 'grep -q "jobs: 4 in the plan" "$T/dry.txt"' "tiny plan is not 4 jobs: $(cat "$T/dry.txt")"
check 'grep -q "method=ntk/dim=16/facts=32/seed=43" "$T/dry.txt"' "plan lacks the ntk seed-43 job"
check '[ -z "$(ls -A "$T" | grep -v -e dry -e same)" ]' "dry run created files: $(ls "$T")"

# Presets: Fig. 2c and Fig. 11 are 5 methods x 21 (d, alpha) points x 3 seeds; reduced 4 x 3 x 1.
for p in fig2c:315 fig11:315 reduced:12; do
  name=${p%%:*}; n=${p##*:}
  "$HEBB" capacity --preset "$name" --dry-run --device cuda --out "$T/x.h5" >"$T/p.txt" 2>&1 ||
    "$HEBB" capacity --preset "$name" --dry-run --device cpu --cpu-max-tflop 1e9 --out "$T/x.h5" >"$T/p.txt" 2>&1
  check 'grep -q "jobs: $n in the plan" "$T/p.txt"' "preset $name: expected $n jobs: $(tail -n 3 "$T/p.txt")"
done
"$HEBB" capacity --preset fig2c --dry-run --device cpu --cpu-max-tflop 1e9 --out "$T/x.h5" >"$T/p.txt" 2>&1
check 'grep -q "method=gd,precision=bf16x3/dim=90/facts=8100/seed=44" "$T/p.txt" && grep -q "method=ntk/dim=128/facts=16384/seed=42" "$T/p.txt" && grep -q "facts=253/" "$T/p.txt"' \
  "fig2c grid (F = int(alpha d^2)) endpoints"
# The dry run shows where each search starts: gd at the fig2c fit (round(0.6645 F^1.1133 / d), x1.015, capped at
# 64F/d), closed forms at 1 doubling.
check 'grep -q "method=gd,precision=bf16x3/dim=128/facts=16384/seed=42  search fast from m = 255 (x1.015) in \[1, 8192\]" "$T/p.txt" && grep -q "method=ntk/dim=64/facts=128/seed=42  search fast from m = 1 (x2) in \[1, 65536\]" "$T/p.txt"' \
  "fig2c dry run: each job's search start and range"
"$HEBB" capacity --preset reduced --facts 100 --seeds 2 --dry-run --device cpu --out "$T/x.h5" >"$T/p.txt" 2>&1
check 'grep -q "jobs: 8 in the plan" "$T/p.txt"' "--facts does not replace the preset's alpha grid"

# The full tiny run.
"$HEBB" capacity "${TINY[@]}" --out "$T/full.h5" >"$T/full.txt" 2>"$T/full.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/full.h5" ] && [ ! -e "$T/full.h5.partial" ]' "tiny run failed: $(cat "$T/full.err")"
check '[ "$(grep -c "^hebbian:whitened \|^ntk " "$T/full.txt")" -eq 2 ]' "stdout table should have 2 point rows"

# Shards + merge = the full run.
for s in 0 1; do
  "$HEBB" capacity "${TINY[@]}" --shard $s/2 --out "$T/sh.h5" >/dev/null 2>"$T/sh.err"
  rc=$?; check '[ $rc -eq 0 ]' "shard $s/2 failed: $(cat "$T/sh.err")"
done
"$HEBB" merge "$T/sh.shard0of2.h5" "$T/sh.shard1of2.h5" --out "$T/merged.h5" >/dev/null 2>"$T/m.err"
rc=$?; check '[ $rc -eq 0 ]' "merge failed: $(cat "$T/m.err")"
compare "$T/full.h5" "$T/merged.h5" "merged shards != full run"

# SIGKILL in the middle of a search (the ntk job), then --resume.
KILL=(--methods hebbian:whitened,ntk --dim 32 --facts 256 --seeds 1 --device cpu --progress none)
"$HEBB" capacity "${KILL[@]}" --out "$T/ref.h5" >/dev/null 2>&1
run_and_kill "$T/k.h5.partial/scratch-00000001" 0.2 "$HEBB" capacity "${KILL[@]}" --out "$T/k.h5"
check '[ ! -e "$T/k.h5" ] && [ -e "$T/k.h5.partial/scratch-00000001" ]' "the kill did not land inside the ntk search"
"$HEBB" capacity "${KILL[@]}" --out "$T/k.h5" >/dev/null 2>"$T/k.err"
check '[ $? -ne 0 ] && grep -q -- "--resume" "$T/k.err"' "a rerun without --resume must refuse the partial run"
"$HEBB" capacity "${KILL[@]}" --out "$T/k.h5" --resume >/dev/null 2>"$T/k.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/k.h5" ] && [ ! -e "$T/k.h5.partial" ]' "resume failed: $(cat "$T/k.err")"
check 'grep -q "resumed the search from [1-9][0-9]* recorded probes" "$T/k.err"' "resume did not replay the recorded probes"
compare "$T/ref.h5" "$T/k.h5" "killed + resumed run != uninterrupted run"

# SIGKILL inside a gd probe's training (m = 10, after m = 11 was recorded), then --resume: the training goes on
# from its checkpoint (every 0.2 s) and the result equals an uninterrupted run. A recorded probe's checkpoint is gone.
GD=(--methods gd,epochs=3000 --dim 32 --facts 128 --start-width 11 --min-width 10 --max-width 11 --device cpu
    --progress none --checkpoint-every 0.2)
"$HEBB" capacity "${GD[@]}" --out "$T/gref.h5" >/dev/null 2>&1
run_and_kill "$T/g.h5.partial/scratch-00000000-gd-m10-cpu" 0.3 "$HEBB" capacity "${GD[@]}" --out "$T/g.h5"
check '[ ! -e "$T/g.h5" ] && [ -e "$T/g.h5.partial/scratch-00000000-gd-m10-cpu" ]' \
  "the kill did not land inside the m = 10 training: $(ls "$T/g.h5.partial" 2>&1)"
check '[ ! -e "$T/g.h5.partial/scratch-00000000-gd-m11-cpu" ]' "the recorded m = 11 probe kept its checkpoint"
"$HEBB" capacity "${GD[@]}" --out "$T/g.h5" --resume >/dev/null 2>"$T/g.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/g.h5" ] && [ ! -e "$T/g.h5.partial" ]' "gd resume failed: $(cat "$T/g.err")"
check 'grep -q "at m = 10: resumed the training from its checkpoint" "$T/g.err" &&
       grep -q "resumed the search from 1 recorded probes" "$T/g.err"' \
  "gd resume did not use the checkpoint: $(cat "$T/g.err")"
compare "$T/gref.h5" "$T/g.h5" "killed + resumed gd search != uninterrupted run"

# A resume checks the sizes of the jobs still to run only: a sweep whose big job finished elsewhere (on a GPU, or
# under a higher --cpu-max-tflop) ends on this CPU. data-dependent's first probe at d = 32, F = 512 is ~5e-5 TFLOP,
# ntk's ~1.7e-5: a limit of 3e-5 refuses a fresh run, but not the resume after the data-dependent job (job 0, the
# costlier, run first) was recorded and the kill landed inside the ntk search (~8 s here).
LIM=(--methods hebbian:data-dependent,ntk --dim 32 --facts 512 --seeds 1 --device cpu --progress none)
"$HEBB" capacity "${LIM[@]}" --cpu-max-tflop 3e-5 --out "$T/lim.h5" >/dev/null 2>"$T/lim.err"
rc=$?; check '[ $rc -eq 2 ] && grep -q "hebbian:data-dependent at d = 32, F = 512" "$T/lim.err" && [ ! -e "$T/lim.h5" ] &&
       [ ! -e "$T/lim.h5.partial" ]' "a fresh run over the TFLOP limit was not refused: $(cat "$T/lim.err")"
run_and_kill "$T/lim.h5.partial/job-00000000.h5" 0 "$HEBB" capacity "${LIM[@]}" --out "$T/lim.h5"
check '[ ! -e "$T/lim.h5" ] && [ -e "$T/lim.h5.partial/job-00000000.h5" ] &&
       [ ! -e "$T/lim.h5.partial/job-00000001.h5" ]' "the kill did not land inside the ntk search: $(ls "$T/lim.h5.partial")"
"$HEBB" capacity "${LIM[@]}" --cpu-max-tflop 3e-5 --resume --out "$T/lim.h5" >/dev/null 2>"$T/lim.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/lim.h5" ] && [ ! -e "$T/lim.h5.partial" ]' \
  "the resume was refused over a finished job's size: $(cat "$T/lim.err")"

# Bad input: exit 2, one line, no file.
bad() {
  rm -rf "$T/bad.h5" "$T"/bad.h5.*
  "$HEBB" capacity "$@" --device cpu --out "$T/bad.h5" >"$T/bad.txt" 2>"$T/bad.err"
  local rc=$?
  check "[ $rc -eq 2 ]" "expected exit 2 for: $* (got $rc: $(cat "$T/bad.err"))"
  check '[ -z "$(ls "$T" | grep "^bad.h5")" ]' "output left behind for: $*"
  check '[ "$(wc -l <"$T/bad.err")" -eq 1 ]' "error message is not one line for: $*: $(cat "$T/bad.err")"
}
bad --alpha 0
bad --methods nope
bad --dim 0
bad --facts 1e30
bad --preset nope
bad --facts 32 --alpha 0.5
bad --methods hebbian:exact-k2 --facts 32
bad --methods ntk,ntk --facts 32
bad --seeds 0 --facts 32
bad --threshold 1.5 --facts 32
bad --max-width 8 --min-width 9 --facts 32
bad --devices 0 --facts 32
bad --search nope --facts 32
bad --growth 1 --facts 32
bad --growth nan --facts 32
bad --start-width -3 --facts 32
exit $fail
