#!/usr/bin/env bash
# GD-training speed probe for ONE device call (docs/perf.md "GD training speed"): builds hebb and the
# two GPU test binaries, runs those tests, times the training loop (/summary train_loop_s) of every
# kernel variant x precision x graph size on a few sizes, then ncu per-kernel summaries of one graph.
#   experiments/bench/gd_perf_probe.sh            (on the device machine, from the repository root)
#   env: STAGES ("time tests ncu"; also "sanitize": compute-sanitizer memcheck on the fused CE test,
#        "bench": gd_train_bench.sh at 10000 epochs, "short": fewer sizes/configs), BUILD (build-gpu),
#        OUT (output folder; at most 8 files come back)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gd_perf_probe}
B=${BUILD:-build-gpu}
STAGES=${STAGES:-time tests ncu}
mkdir -p "$OUT"
T=$OUT/timings.txt
: > "$T"
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader > "$OUT/build.log" 2>&1
{ cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMEMCAP_ENABLE_CUDA=ON &&
  cmake --build "$B" -j16 --target hebb gpu_test_nn_layers gpu_test_mlp_gd_cuda; } >> "$OUT/build.log" 2>&1 ||
  { grep -B2 -A12 -E "error" "$OUT/build.log" | head -80; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"

# one training: tag F m prec epochs -> line "tag F m prec kernel steps loop_s wall_s ms/step acc loss"
fields() {
  python3 - "$1" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    g = lambda k: s[k][()][0]
    k = f["runs/train"].attrs.get("kernel", b"?")
    k = k.decode() if isinstance(k, bytes) else str(k)
    e = int(g("epochs_run"))
    lp = float(g("train_loop_s")) if "train_loop_s" in s else float("nan")
    print(k, e, "%.4f" % lp, "%.4f" % float(g("wall_s")), "%.4f" % (1e3 * lp / max(e, 1)),
          "%.4f" % float(g("accuracy")), "%.4g" % float(g("final_loss")))
EOF
}
train() {  # F m prec epochs out
  "$B/hebb" train --method "gd,precision=$3" --device cuda --dim 64 --facts "$1" --width "$2" --tied \
    --map permutation --epochs "$4" --seed 1 --progress none --out "$5" >> "$OUT/hebb.log" 2>&1
}
one() {  # F m prec epochs kernel graph_steps
  local f=/tmp/gdp_$1_$2_$3_$5_$6.h5
  rm -f "$f"
  if MEMCAP_GD_KERNEL=$5 MEMCAP_GD_GRAPH_STEPS=$6 train "$1" "$2" "$3" "$4" "$f"; then
    printf '%-10s %-5s %-7s K=%-4s %s\n' "$1x$2" "$3" "$5" "$6" "$(fields "$f")" | tee -a "$T"
  else
    printf '%-10s %-5s %-7s K=%-4s FAILED\n' "$1x$2" "$3" "$5" "$6" | tee -a "$T"
  fi
}
if [[ " $STAGES " == *" time "* ]]; then
  echo "size prec variant K | kernel epochs loop_s wall_s ms/step acc loss" | tee -a "$T"
  if [[ " $STAGES " == *" short "* ]]; then
    for p in f32 tf32; do for v in fused cublas; do one 256 64 $p 10000 $v 16; one 4096 4096 $p 2000 $v 16; done; done
    for p in f32 tf32; do one 1024 1024 $p 3000 cublas 16; one 4096 512 $p 3000 cublas 16; done
  else
  for v in fused cublas; do for p in f32 tf32; do
    for k in 16 64; do one 256 64 $p 10000 $v $k; done
  done; done
  for v in fused cublas; do for p in f32 tf32; do one 4096 4096 $p 2000 $v auto; done; done
  for sz in "1024 1024" "4096 512"; do
    set -- $sz
    for v in fused cublas; do one "$1" "$2" tf32 3000 $v auto; one "$1" "$2" f32 3000 $v auto; done
  done
  for p in f32 tf32; do one 256 64 $p 10000 auto auto; one 4096 4096 $p 2000 auto auto; done
  fi
fi

if [[ " $STAGES " == *" tests "* ]]; then
  for t in gpu_test_nn_layers gpu_test_mlp_gd_cuda; do
    "$B/tests/$t" > "$OUT/tests.log.$t" 2>&1; echo "$t rc=$?" | tee -a "$OUT/tests.txt"
    tail -4 "$OUT/tests.log.$t" >> "$OUT/tests.txt"
  done
  cat "$OUT"/tests.log.* >> "$OUT/tests.txt" 2>/dev/null; rm -f "$OUT"/tests.log.*
fi

if [[ " $STAGES " == *" sanitize "* ]] && command -v compute-sanitizer > /dev/null; then
  timeout 60 compute-sanitizer --tool memcheck "$B/tests/gpu_test_nn_layers" -tc='fused cross-entropy*' \
    > "$OUT/sanitize.txt" 2>&1
  echo "compute-sanitizer memcheck (fused CE test) rc=$?" | tee -a "$OUT/tests.txt"
  tail -3 "$OUT/sanitize.txt" | tee -a "$OUT/tests.txt"
fi

if [[ " $STAGES " == *" bench "* ]]; then
  BO=/tmp/gd_bench
  EPOCHS=10000 TORCH_COMPILE=0 timeout 150 bash experiments/bench/gd_train_bench.sh "$B" "$BO" > /dev/null 2>&1
  echo "gd_train_bench rc=$?"
  cat "$BO/validation.txt" "$BO/table.txt" > "$OUT/bench.txt" 2>/dev/null
fi

if [[ " $STAGES " == *" ncu "* ]] && command -v ncu > /dev/null; then
  N=$OUT/ncu.txt
  : > "$N"
  CFGS=("4096 4096 tf32 cublas" "4096 4096 tf32 fused" "256 64 tf32 fused" "256 64 tf32 cublas")
  [[ " $STAGES " == *" short "* ]] && CFGS=("4096 4096 tf32 cublas" "256 64 tf32 cublas")
  for cfg in "${CFGS[@]}"; do
    set -- $cfg
    echo "===== ncu F=$1 m=$2 $3 $4 (4 epochs = one graph of 4 + the warm-up step)" >> "$N"
    MEMCAP_GD_KERNEL=$4 MEMCAP_GD_GRAPH_STEPS=4 timeout 40 ncu --clock-control none --section SpeedOfLight \
      --print-summary per-kernel "$B/hebb" train --method "gd,precision=$3" --device cuda --dim 64 --facts "$1" \
      --width "$2" --tied --map permutation --epochs 4 --seed 1 --progress none --out /tmp/gdp_ncu.h5 \
      >> "$N" 2>&1
    echo "rc=$?" >> "$N"
    rm -f /tmp/gdp_ncu.h5
  done
  # condensed: per config, kernels by total time (mean duration x invocations), and the sum per step
  python3 - "$N" > "$OUT/ncu_short.txt" <<'EOF'
import re, sys
rows, order, name = {}, [], None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("====="):
        cfg = line.strip("= \n"); rows[cfg] = []; order.append(cfg); continue
    m = re.match(r"  (\S.*?) \((\d+, \d+, \d+)\)x\((\d+, \d+, \d+)\), Device \d+, CC [\d.]+, Invocations (\d+)", line)
    if m:
        n = m.group(1)
        n = n if n.startswith("void cutlass") else re.sub(r"\(.*", "", n)
        name = (n.replace("memcap::", "").replace("<unnamed>::", "")[:70], m.group(2), int(m.group(4))); continue
    m = re.match(r"\s+Duration\s+(\S+)\s+\S+\s+\S+\s+([\d.,]+)", line)
    if m and name:
        a = float(m.group(2).replace(",", "")) * {"ms": 1e3, "ns": 1e-3}.get(m.group(1), 1.0)
        rows[cfg].append((name[0], name[1], name[2], a)); name = None
for c in order:
    print(c); tot = 0.0
    for n, g, i, a in sorted(rows[c], key=lambda r: -r[3] * r[2]):
        print(f"  {a:8.2f} us  x{i:<3} grid {g:<12} {n}"); tot += a * i
    print(f"  sum: {tot:.1f} us over 5 steps (4 + the warm-up) -> {tot / 5:.1f} us/step")
EOF
  cat "$OUT/ncu_short.txt"
fi
echo "total $(( $(date +%s) - t0 )) s"
echo "== timings (loop_s = CUDA events around the graph replays)"
cat "$T"
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt"
[ -f "$OUT/tests.txt" ] && grep -E "rc=|test cases" "$OUT/tests.txt"
