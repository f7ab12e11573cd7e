#!/usr/bin/env bash
# The SSFR attention's error floor (issue 13): why Fig. 3b's fact-adaptive search finds no width at F >= 2048.
# Trains the fact-adaptive block (d = 128, J = V_J = 9, batch 1280, W_q, W_k trained, W_v = W_o = I, no residual)
# with `hebb ssfr train --device cuda` at the points below, then reads every fact of each trained block under 32
# random junk contexts with experiments/plots/ssfr_reads.py (float64, all facts, instead of the training's
# with-replacement evaluation batches): end-to-end error rate, misread facts, each key's score gap over the junk
# and the query token, and the gap an LP's separator reaches on those embeddings (a lower bound of the widest).
#   experiments/bench/ssfr_floor.sh BUILD_DIR [OUTDIR]
# env RUNS: space-separated NAME:FACTS:MLP:WIDTH:STEPS:LR:WD:SEED points (default: the list below); CONTEXTS (32);
# DEVICE (cuda; f32 there), DIM (128), JUNK (9), BATCH (1280), EXTRA (more `hebb ssfr train` flags, e.g.
# "--eval-every 1000" where only the reads matter).
# Prints one table row per point (also OUTDIR/table.txt); each point's reads go to OUTDIR/NAME.reads.txt, its
# result file to OUTDIR/NAME.h5 (remove them before copying results back when they are large). The default list
# needs more than one 10-minute device call (13 of its 16 points took 560 s on an H100, about 40 s a point with the
# MLP builds and the reads): give RUNS in parts.
set -uo pipefail
BUILD=${1:?usage: ssfr_floor.sh BUILD_DIR [OUTDIR]}
OUTDIR=${2:-${OUT:-$(mktemp -d)}}
HEBB=$BUILD/hebb
HERE=$(cd "$(dirname "$0")" && pwd)
CONTEXTS=${CONTEXTS:-32}
DEVICE=${DEVICE:-cuda}
DIM=${DIM:-128}
JUNK=${JUNK:-9}
BATCH=${BATCH:-1280}
read -r -a EXTRA_FLAGS <<< "${EXTRA:-}"
# data-dependent at F = 2048 (m = 512 > its gate width 256) with seed 42 (the preset's) and seven more seeds (each
# seed draws other embeddings, maps, batches and init); the bench point (whitened, m = 1024) at 4000 and 64,000
# steps and with a 5x learning rate; F = 4096 and 8192 (data-dependent, m = F/2) with two seeds each; the identity
# MLP (attention alone, the key read back through the tied lm_head) at F = 2048
DD=hebbian:data-dependent
W=hebbian:whitened
RUNS=${RUNS:-"dd2k-s42:2048:$DD:512:4000:2e-4:0.1:42 dd2k-s1:2048:$DD:512:4000:2e-4:0.1:1
dd2k-s2:2048:$DD:512:4000:2e-4:0.1:2 dd2k-s3:2048:$DD:512:4000:2e-4:0.1:3 dd2k-s4:2048:$DD:512:4000:2e-4:0.1:4
dd2k-s5:2048:$DD:512:4000:2e-4:0.1:5 dd2k-s6:2048:$DD:512:4000:2e-4:0.1:6 dd2k-s7:2048:$DD:512:4000:2e-4:0.1:7
w2k:2048:$W:1024:4000:2e-4:0.1:42 w2k-64k:2048:$W:1024:64000:2e-4:0.1:42 w2k-lr1e-3:2048:$W:1024:4000:1e-3:0.1:42
dd4k-s42:4096:$DD:2048:4000:2e-4:0.1:42 dd4k-s1:4096:$DD:2048:4000:2e-4:0.1:1
dd8k-s42:8192:$DD:4096:4000:2e-4:0.1:42 dd8k-s1:8192:$DD:4096:4000:2e-4:0.1:1
id2k:2048:identity:0:4000:2e-4:0.1:42"}
mkdir -p "$OUTDIR"
TABLE=$OUTDIR/table.txt
[ -x "$HEBB" ] || { echo "ssfr_floor: no hebb executable at $HEBB (build the hebb target first)" >&2; exit 2; }
export PY_NEEDS="h5py, numpy, matplotlib"
PY=$HERE/../plots/with_python.sh  # the interpreter that imports them (exit 77 without one)
"$PY" -c pass || exit $?

status=0
printf '%-11s %5s %-22s %6s %6s %7s %4s %4s | %-9s %-9s | %-9s %5s %-8s %-8s %5s\n' point F mlp m steps lr wd seed \
  best_acc final_acc err/query bad min-gap LP-gap wall_s | tee "$TABLE"
for run in $RUNS; do
  # NAME:FACTS:MLP(with its own colons):WIDTH:STEPS:LR:WD:SEED -> fields from both ends
  name=${run%%:*}
  seed=${run##*:}
  rest=${run%:*}
  rest=${rest#*:}
  facts=${rest%%:*}
  rest=${rest#*:}
  wd=${rest##*:}
  rest=${rest%:*}
  lr=${rest##*:}
  rest=${rest%:*}
  steps=${rest##*:}
  rest=${rest%:*}
  width=${rest##*:}
  mlp=${rest%:*}
  h5=$OUTDIR/$name.h5
  t_start=$SECONDS
  rm -f "$h5"
  wflag=()
  [ "$width" != 0 ] && wflag=(--width "$width")
  if ! "$HEBB" ssfr train --device "$DEVICE" --mlp "$mlp" --dim "$DIM" --facts "$facts" "${wflag[@]}" \
      --junk "$JUNK" --steps "$steps" --batch "$BATCH" --lr "$lr" --weight-decay "$wd" --seed "$seed" \
      --progress none "${EXTRA_FLAGS[@]}" --out "$h5" > "$OUTDIR/$name.log" 2>&1; then
    echo "$name: hebb ssfr train FAILED (see $name.log)" | tee -a "$TABLE"
    status=1
    continue
  fi
  if ! "$PY" "$HERE/../plots/ssfr_reads.py" "$h5" --contexts "$CONTEXTS" -o "$OUTDIR/$name.png" \
      > "$OUTDIR/$name.reads.txt" 2>&1; then
    echo "$name: ssfr_reads.py FAILED (see $name.reads.txt)" | tee -a "$TABLE"
    status=1
    continue
  fi
  "$PY" - "$h5" "$OUTDIR/$name.reads.txt" "$name" "$mlp" "$width" "$lr" "$wd" "$seed" $((SECONDS - t_start)) \
    <<'PYEOF' | tee -a "$TABLE"
import re, sys, h5py
h5, reads, name, mlp, width, lr, wd, seed, wall = sys.argv[1:]
with h5py.File(h5, "r") as f:
    s = f["summary"]
    g = lambda k: s[k][()][0]
    F, steps, best, final = int(g("facts")), int(g("steps_run")), float(g("best_acc")), float(g("final_acc"))
t = open(reads).read()
err = re.search(r"= ([0-9.e+-]+) per query", t).group(1)
bad = re.search(r"(\d+) facts misread", t).group(1)
gmin = re.search(r"key gaps g_k / scale: min ([0-9.e+-]+)", t).group(1)
lp = re.search(r"LP's c reaches on these embeddings: ([0-9.e+-]+)", t)
print(f"{name:11s} {F:5d} {mlp:22s} {width:>6s} {steps:6d} {lr:>7s} {wd:>4s} {seed:>4s} | {best:<9.6f} {final:<9.6f} | "
      f"{err:9s} {bad:>5s} {gmin:8s} {lp.group(1) if lp else '-':8s} {wall:>5s}")
PYEOF
done
exit $status
