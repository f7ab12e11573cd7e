#!/usr/bin/env bash
# Runs every sweep command that spreads jobs over GPUs (hebb capacity, kata mqar table2, kata induction, hebb ssfr
# capacity, hebb edit table1, ramnet recall) at small sizes twice on a host with two or more GPUs: with --devices all
# and with --devices 0. Samples, every 0.2 s, which GPUs each run's process holds memory on (nvidia-smi
# --query-compute-apps; a run with --devices all must be seen on two GPUs or more, one with --devices 0 on one), and
# compares the two runs' /summary tables (experiments/bench/compare_multi_gpu.py: every
# column but times and the device path must be equal, since a job's numbers must not depend on the GPU it ran on).
#   bash experiments/bench/multi_gpu_check.sh BIN_DIR OUT_DIR
# BIN_DIR holds the kata, hebb and ramnet executables (a build folder, or pack_binaries.sh's archive unpacked);
# run from the repository root (presets, data/edit). Prints one line per run and the comparison; exit 1 when a
# comparison differs or a run fails, 2 on bad arguments.
set -u
BIN=${1:-}
OUTD=${2:-}
[ -n "$BIN" ] && [ -n "$OUTD" ] || { echo "usage: multi_gpu_check.sh BIN_DIR OUT_DIR" >&2; exit 2; }
for b in kata hebb ramnet; do
  [ -x "$BIN/$b" ] || { echo "multi_gpu_check.sh: no executable $BIN/$b" >&2; exit 2; }
done
[ -f experiments/presets/reduced.toml ] && [ -d data/edit ] || { echo "run from the repository root" >&2; exit 2; }
command -v nvidia-smi > /dev/null || { echo "multi_gpu_check.sh: nvidia-smi not found" >&2; exit 2; }
export MEMCAP_PRESETS=$PWD/experiments/presets
mkdir -p "$OUTD"
W=$(cd "$OUTD" && pwd)
nvidia-smi --query-gpu=index,pci.bus_id,name --format=csv,noheader | tee "$W/gpus.txt"
NGPU=$(wc -l < "$W/gpus.txt")
[ "$NGPU" -ge 2 ] || echo "note: fewer than two GPUs: --devices all is then --devices 0" >&2
fail=0
# run NAME DEVICES CMD...: CMD --devices DEVICES --out W/NAME-DEVICES.h5, sampling the GPUs of its process
run() {
  local name=$1 dev=$2
  shift 2
  local t1
  t1=$(date +%s%N)
  "$@" --devices "$dev" --out "$W/$name-$dev.h5" > "$W/$name-$dev.txt" 2>&1 &
  local pid=$!
  : > "$W/$name-$dev.smi"
  while kill -0 $pid 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader 2>/dev/null |
      grep "^$pid," >> "$W/$name-$dev.smi"
    sleep 0.2
  done
  wait $pid
  local rc=$?
  [ $rc -eq 0 ] || fail=1
  local used
  used=$(cut -d, -f2 "$W/$name-$dev.smi" | tr -d ' ' | sort -u | tr '\n' ' ')
  printf '%-5s --devices %-3s exit %d  %6d ms  GPUs seen (bus ids): %s\n' "$name" "$dev" $rc \
    $(( ($(date +%s%N) - t1) / 1000000 )) "${used:-none}" | tee -a "$W/summary.txt"
  # --devices all must spread work over more than one GPU (a worker holds its context until the process exits, so
  # the sampling sees it; not every GPU need get a job when there are more GPUs than jobs), --devices 0 on one GPU
  local seen ok=1
  seen=$(echo "$used" | wc -w)
  if [ "$dev" = all ] && [ "$NGPU" -ge 2 ]; then [ "$seen" -ge 2 ] || ok=0; else [ "$seen" -eq 1 ] || ok=0; fi
  if [ $ok -eq 0 ]; then
    echo "FAIL: $name --devices $dev: work seen on $seen GPU(s) of $NGPU" | tee -a "$W/summary.txt"
    fail=1
  fi
}
"$BIN/hebb" edit base --device cuda --data data/edit --facts 64 --templates 4 --dim 32 --expert-hidden 24 \
  --expert-epochs 2000 --epochs 100 --lr 6e-3 --target-accuracy 1 --progress none --out "$W/base.h5" \
  > "$W/base.txt" 2>&1 || { echo "hebb edit base failed: $(tail -2 "$W/base.txt")" >&2; exit 1; }
for dev in all 0; do
  run cap "$dev" "$BIN/hebb" capacity --preset reduced --device cuda --jobs-per-gpu 2 --progress none
  run t2 "$dev" "$BIN/kata" mqar table2 --preset table2-smoke --device cuda --jobs 2 --progress none
  run ind "$dev" "$BIN/kata" induction --preset induction-smoke --device cuda --jobs 1 --progress none
  run ssfr "$dev" "$BIN/hebb" ssfr capacity --device cuda --dim 16 --lr 3e-3 --junk 2 --batch 256 \
    --methods hebbian:whitened,ntk --facts 32,64 --steps 600 --search-hi 256 --jobs-per-gpu 1 --progress none
  run edit "$dev" "$BIN/hebb" edit table1 --preset edit-table1-smoke --base "$W/base.h5" --data data/edit \
    --device cuda --jobs-per-gpu 1 --progress none
  run ram "$dev" "$BIN/ramnet" recall --mixers ramnet,kappa,ram-linear,softmax,elu,favor --dp 4 --U 3 --beta 4 \
    --seeds 4 --dv 32 --device cuda --jobs-per-gpu 1 --progress none
done
PYRUN=$(dirname "$0")/../plots/with_python.sh
bash "$PYRUN" "$(dirname "$0")/compare_multi_gpu.py" "$W" | tee -a "$W/summary.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || fail=1
exit $fail
