#!/usr/bin/env bash
# Acceptance benchmark of `hebb capacity`: the `reduced` preset (d = 64, alpha in {1/16, 1/4, 1}, the four
# closed-form methods, fact-set seed 42) on the GPU, and its alpha = 1/16 subset on the CPU (the issue's
# budget: < 5 min on 2 cores); prints both wall times, a per-job table, and checks that GPU and CPU find
# the same m* on the points both ran (exit 1 on any difference, naming the accuracies around it).
# Usage: experiments/bench/capacity_bench.sh        (files under $OUT, default ./capacity_bench)
#   env HEBB (default build/hebb), OUT, GPU_FLAGS (extra flags of the GPU run, e.g. "--jobs-per-gpu 2"),
#   CPU_FLAGS (e.g. "--threads 2"), CPU_ALPHA (default 0.0625; e.g. 0.0625,0.25), SKIP_CPU=1, SKIP_GPU=1.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
HEBB=${HEBB:-build/hebb}
OUT=${OUT:-capacity_bench}
GPU_FLAGS=${GPU_FLAGS:-}
CPU_FLAGS=${CPU_FLAGS:-}
CPU_ALPHA=${CPU_ALPHA:-0.0625}
export MEMCAP_PRESETS=${MEMCAP_PRESETS:-$SRC/experiments/presets}
mkdir -p "$OUT"
rm -rf "$OUT"/gpu.h5* "$OUT"/cpu.h5*
now() { date +%s.%N; }
# GPU vs CPU m* on the jobs both ran.
cat >"$OUT/compare.py" <<'EOF'
import sys, h5py, numpy as np
def rows(p):
    with h5py.File(p, "r") as f:
        s = {k: f["summary"][k][()] for k in f["summary"]}
    t = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    return {(t(s["method"][i]), int(s["dim"][i]), int(s["facts"][i]), int(s["seed"][i])):
            (s["m_star"][i], s["accuracy_star"][i], int(s["m_below"][i]), s["accuracy_below"][i], s["wall_s"][i],
             s["probes"][i]) for i in range(len(s["m_star"]))}
g, c = rows(sys.argv[1]), rows(sys.argv[2])
shared = sorted(set(g) & set(c))
bad = 0
print(f"{'method':<24} {'d':>4} {'F':>6} {'seed':>4} {'m* gpu':>8} {'m* cpu':>8} {'probes':>6} {'gpu s':>8} {'cpu s':>8}")
for k in shared:
    a, b = g[k], c[k]
    same = (np.isnan(a[0]) and np.isnan(b[0])) or a[0] == b[0]
    bad += not same
    fm = lambda v: "-" if np.isnan(v) else f"{v:.0f}"
    print(f"{k[0]:<24} {k[1]:>4} {k[2]:>6} {k[3]:>4} {fm(a[0]):>8} {fm(b[0]):>8} {a[5]:>6} {a[4]:>8.2f} {b[4]:>8.2f}"
          + ("" if same else f"   DIFFER: gpu acc {a[1]:.6f} at m*, {a[3]:.6f} at {a[2]}; cpu acc {b[1]:.6f} at m*, {b[3]:.6f} at {b[2]}"))
print(f"{len(shared)} shared jobs, {bad} with a different m*")
sys.exit(1 if bad else 0)
EOF
echo "host $(hostname), $(nproc) cores, $(date -u +%FT%TZ), git $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"

gpu_s=""
if [[ "${SKIP_GPU:-0}" != 1 ]]; then
  t0=$(now)
  # shellcheck disable=SC2086
  "$HEBB" capacity --preset reduced --device cuda --progress lines $GPU_FLAGS --out "$OUT/gpu.h5" \
    >"$OUT/gpu.txt" 2>"$OUT/gpu.err" || { echo "GPU run failed:"; tail -5 "$OUT/gpu.err"; exit 1; }
  gpu_s=$(awk "BEGIN{printf \"%.2f\", $(now) - $t0}")
  echo "gpu (reduced preset, all alpha): ${gpu_s} s"
  cat "$OUT/gpu.txt"
fi
cpu_s=""
if [[ "${SKIP_CPU:-0}" != 1 ]]; then
  t0=$(now)
  # shellcheck disable=SC2086
  "$HEBB" capacity --preset reduced --alpha "$CPU_ALPHA" --device cpu --progress lines $CPU_FLAGS \
    --out "$OUT/cpu.h5" >"$OUT/cpu.txt" 2>"$OUT/cpu.err" || { echo "CPU run failed:"; tail -5 "$OUT/cpu.err"; exit 1; }
  cpu_s=$(awk "BEGIN{printf \"%.2f\", $(now) - $t0}")
  echo "cpu (reduced preset, alpha $CPU_ALPHA): ${cpu_s} s  (flags: ${CPU_FLAGS:-none}, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset})"
  cat "$OUT/cpu.txt"
fi
[[ -s "$OUT/gpu.h5" && -s "$OUT/cpu.h5" ]] || exit 0
bash "$SRC/experiments/plots/with_python.sh" "$OUT/compare.py" "$OUT/gpu.h5" "$OUT/cpu.h5"
rc=$?
echo "times: gpu ${gpu_s} s (all alpha), cpu ${cpu_s} s (alpha $CPU_ALPHA)"
exit $rc
