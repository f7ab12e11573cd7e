#!/usr/bin/env bash
# Runs the same `kata capacity-sweep` with --device cuda and --device cpu, times both, and compares
# the k_star columns (python3 + h5py). Any K* that differs is named with the measured median pSNR /
# accuracy beside the threshold on both devices, so one can see it sits within float tolerance.
# Usage: experiments/capacity_gpu_vs_cpu.sh [OUTDIR]
#   (files from two machines: experiments/plots/kata_capacity_compare.py GPU.h5 CPU.h5 --gpu-s S --cpu-s S)
#   env KATA (default build/kata), CAP_ARGS (the sweep flags; default: all nine maps at the command's own
#   defaults, --trials 3 and --k-max up to 16384), CPU_FLAGS (extra CPU-run flags, e.g.
#   "--threads 2"), CPU_TIMEOUT (seconds, default 0 = none),
#   SKIP_CPU=1 (GPU only; compares nothing).
set -uo pipefail
KATA=${KATA:-build/kata}
OUTDIR=${1:-capacity_gpu_vs_cpu}
CAP_ARGS=${CAP_ARGS:---maps linear,orthant,lorentz,m1,m2,m4,sigma2,sigma4,softmax:tau=0.125 --dims 32,64,128 --keys random,mub --seed 0 --progress none}
CPU_TIMEOUT=${CPU_TIMEOUT:-0}
CPU_FLAGS=${CPU_FLAGS:-}   # e.g. "--threads 2"
mkdir -p "$OUTDIR"
rm -rf "$OUTDIR"/gpu.h5* "$OUTDIR"/cpu.h5*

now() { date +%s.%N; }
t0=$(now)
# shellcheck disable=SC2086
"$KATA" capacity-sweep $CAP_ARGS --device cuda --out "$OUTDIR/gpu.h5" >"$OUTDIR/gpu.txt" 2>"$OUTDIR/gpu.err" || {
  echo "GPU sweep failed:"; tail -5 "$OUTDIR/gpu.err"; exit 1; }
t1=$(now)
gpu_s=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
echo "gpu sweep: ${gpu_s} s"
if [[ "${SKIP_CPU:-0}" == 1 ]]; then exit 0; fi
t0=$(now)
if [[ "$CPU_TIMEOUT" -gt 0 ]]; then tcmd=(timeout "$CPU_TIMEOUT"); else tcmd=(); fi
# shellcheck disable=SC2086
"${tcmd[@]}" "$KATA" capacity-sweep $CAP_ARGS $CPU_FLAGS --device cpu --out "$OUTDIR/cpu.h5" >"$OUTDIR/cpu.txt" 2>"$OUTDIR/cpu.err"
rc=$?
t1=$(now)
cpu_s=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
if [[ $rc -ne 0 ]]; then echo "CPU sweep stopped (rc=$rc) after ${cpu_s} s"; tail -3 "$OUTDIR/cpu.err"; exit 1; fi
echo "cpu sweep: ${cpu_s} s  (flags: ${CPU_FLAGS:-none}, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}, $(nproc) cores)"

python3 "$(dirname "$0")/plots/kata_capacity_compare.py" "$OUTDIR/gpu.h5" "$OUTDIR/cpu.h5" --gpu-s "$gpu_s" --cpu-s "$cpu_s"
