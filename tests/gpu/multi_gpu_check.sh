#!/usr/bin/env bash
# ctest gpu_multi_gpu_check (labels gpu, multigpu): experiments/bench/multi_gpu_check.sh on this build's kata, hebb
# and ramnet, i.e. every sweep command that spreads jobs over GPUs, run with --devices all and with --devices 0, each
# run's GPUs sampled, and the two /summary tables compared (equal but for times and device paths). Needs two or more
# GPUs: exit 77 (skipped) otherwise. Results under BUILD/multi_gpu_check (replaced on every run).
#   BIN_DIR=build MEMCAP_SRC=. OUT_DIR=build/multi_gpu_check bash tests/gpu/multi_gpu_check.sh
set -u
: "${BIN_DIR:?set BIN_DIR to the folder of the kata, hebb and ramnet executables}"
: "${OUT_DIR:?set OUT_DIR}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v nvidia-smi > /dev/null || { echo "SKIP: no nvidia-smi (no GPU driver)"; exit 77; }
n=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
[ "$n" -ge 2 ] || { echo "SKIP: $n GPU(s) visible; the multi-GPU check needs two or more"; exit 77; }
case "$OUT_DIR" in */multi_gpu_check) rm -rf "$OUT_DIR" ;; esac  # only a folder of this name is replaced
cd "$SRC" && exec bash experiments/bench/multi_gpu_check.sh "$BIN_DIR" "$OUT_DIR"
