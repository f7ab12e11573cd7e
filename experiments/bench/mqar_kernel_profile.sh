#!/usr/bin/env bash
# Where the time of an MQAR training step and of an evaluation goes, kernel by kernel (issue 12, acceptance 3:
# the training speed against PyTorch). Runs `kata mqar train --device cuda` twice under Nsight Compute with only
# the kernel-duration metric (clocks left alone): A = 24 training steps of the Table 2 shape (T = 256, K = 64,
# batch 256) with a tiny evaluation, B = one training step and the evaluation diagonal at 256 examples per slice.
# Prints per run the kernels grouped by name (total µs, share, launches) and, for A, the kernel time per step
# beside the step's wall time from the HDF5 file (the difference is launch gaps inside the captured graph).
#   experiments/bench/mqar_kernel_profile.sh BUILD_DIR OUTDIR [MIXER[:KERNEL[:PRECISION]]]   (softmax:auto:tf32)
set -uo pipefail
BUILD=${1:?usage: mqar_kernel_profile.sh BUILD_DIR OUTDIR [MIXER:KERNEL:PRECISION]}
OUTDIR=${2:?usage: mqar_kernel_profile.sh BUILD_DIR OUTDIR [MIXER:KERNEL:PRECISION]}
IFS=: read -r MX KERN PREC <<< "${3:-softmax:auto:tf32}"
KERN=${KERN:-auto}
PREC=${PREC:-tf32}
mkdir -p "$OUTDIR"
command -v ncu > /dev/null || { echo "ncu not on PATH" >&2; exit 2; }
PY=""
for py in "$(command -v python3 2>/dev/null)" /usr/bin/python3; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import csv' > /dev/null 2>&1 && { PY=$py; break; }
done
[ -n "$PY" ] || { echo "no python3" >&2; exit 2; }
common=(mqar train --device cuda --mixer "$MX" --mixer-kernel "$KERN" --precision "$PREC" --lr 1e-3 --epochs 1
        --progress none --force)
run() {  # run NAME KATA-ARGS...
  local name=$1; shift
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$BUILD/kata" "${common[@]}" "$@" --out "$OUTDIR/$name.h5" > "$OUTDIR/$name.csv" 2> "$OUTDIR/$name.err" ||
    { echo "$name: ncu or kata failed"; tail -5 "$OUTDIR/$name.err"; return 1; }
  "$PY" - "$OUTDIR/$name.csv" "$name" "$@" <<'PYEOF'
import csv, sys, collections
path, name = sys.argv[1], sys.argv[2]
rows = [l for l in open(path) if l.startswith('"')]
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    k = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("void ", "")
    k = k.split("(")[0].split("<")[0].strip()[:70]
    tot[k] += float(r["Metric Value"].replace(",", "")) / 1e3; cnt[k] += 1
all_us = sum(tot.values())
print(f"== {name}: {sum(cnt.values())} kernels, {all_us:.0f} us of kernel time")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:28]:
    print(f"  {v:10.1f} us {100 * v / all_us:5.1f} %  {cnt[k]:6d}x  {k}")
PYEOF
}
run train_steps --train-slices 256:64:6144 --eval-slices 64:16:8
run eval_diag --train-slices 256:64:256 --eval-examples 256
"$BUILD/kata" "${common[@]}" --train-slices 256:64:6144 --eval-slices 64:16:8 --out "$OUTDIR/wall.h5" > /dev/null 2>&1 &&
  "$PY" - "$OUTDIR/wall.h5" <<'PYEOF'
import sys
try:
    import h5py
except ImportError:
    sys.exit(0)
with h5py.File(sys.argv[1], "r") as h:
    s = h["summary"]
    print(f"== wall without ncu: 24 steps train_s {float(s['train_s'][0]):.4f} s "
          f"({1e3 * float(s['train_s'][0]) / 24:.3f} ms a step, first step's capture included)")
PYEOF
