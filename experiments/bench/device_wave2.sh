#!/usr/bin/env bash
# One device call for the second wave (SSFR, ramnet, regression of the training core): build the named
# targets, run their gpu tests, the SSFR acceptance run (issue 13 item 3) and the ramnet E7 preset
# (issue 14 item 3). Logs under $OUT/r, summary printed last.
#   TARGETS   build targets (default below)   SSFR=0 skips the SSFR timing, RAMNET_BUDGET (s) for E7
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
R=$OUT/r
mkdir -p "$R"
S=$OUT/summary.log
: >"$S"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMEMCAP_ENABLE_CUDA=ON \
  >"$R/cmake.log" 2>&1 || { tail -40 "$R/cmake.log"; exit 1; }
TARGETS=${TARGETS:-hebb ramnet gpu_test_nn_ssfr gpu_test_ramnet_recall gpu_test_nn_layers gpu_test_mlp_gd_cuda \
  gpu_test_gpu_runtime gpu_test_mlp_construct_cuda}
cmake --build build-gpu -j16 --target $TARGETS >"$R/build.log" 2>&1 ||
  { grep -B2 -A12 -E "error" "$R/build.log" | head -120; exit 1; }
echo "build $(($(date +%s) - t0)) s" | tee -a "$S"
for t in build-gpu/tests/gpu_test_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  timeout 300 "$t" >"$R/$n.log" 2>&1
  rc=$?
  echo "$n rc=$rc $(grep -E '^\[doctest\] (test cases|assertions)' "$R/$n.log" | tr '\n' ' ')" | tee -a "$S"
  [ $rc -ne 0 ] && grep -B3 -A12 -E "ERROR|error|FAILED|what\(\)" "$R/$n.log" | head -60 >>"$R/failures.log"
done
if [ "${SSFR:-1}" != 0 ]; then
  H=build-gpu/hebb
  # issue 13 item 3: d = 128, F = 2048, m = 1024, hebbian:whitened, 4000 steps, batch 1280, 40 evaluations
  /usr/bin/time -f "%e s wall" $H ssfr train --device cuda --mlp hebbian:whitened --dim 128 --facts 2048 --width 1024 \
    --steps 4000 --batch 1280 --progress none --out "$R/ssfr_accept.h5" >"$R/ssfr_accept.txt" 2>&1
  echo "ssfr accept rc=$?: $(tail -4 "$R/ssfr_accept.txt" | tr '\n' ' ')" | tee -a "$S"
  /usr/bin/time -f "%e s wall" $H ssfr train --device cpu --mlp hebbian:whitened --dim 32 --facts 64 --junk 4 \
    --steps 200 --progress none --out "$R/ssfr_cpu.h5" >"$R/ssfr_cpu.txt" 2>&1
  /usr/bin/time -f "%e s wall" $H ssfr train --device cuda --mlp hebbian:whitened --dim 32 --facts 64 --junk 4 \
    --steps 200 --progress none --out "$R/ssfr_gpu.h5" >"$R/ssfr_gpu.txt" 2>&1
  echo "ssfr small cpu: $(tail -3 "$R/ssfr_cpu.txt" | tr '\n' ' ')" | tee -a "$S"
  echo "ssfr small gpu: $(tail -3 "$R/ssfr_gpu.txt" | tr '\n' ' ')" | tee -a "$S"
  if [ -f experiments/bench/ssfr_bench.sh ]; then
    timeout ${SSFR_BENCH_TIMEOUT:-150} bash experiments/bench/ssfr_bench.sh build-gpu "$R/ssfr_bench" >"$R/ssfr_bench.log" 2>&1
    echo "ssfr bench rc=$?" | tee -a "$S"; tail -8 "$R/ssfr_bench.log" | tee -a "$S"
  fi
fi
if [ -n "${RAMNET_BUDGET:-}" ]; then
  OUT="$R/ramnet" BUDGET=$RAMNET_BUDGET SKIP_CPU=${RAMNET_SKIP_CPU:-} bash experiments/bench/ramnet_recall_device.sh \
    >"$R/ramnet.log" 2>&1
  echo "ramnet rc=$?" | tee -a "$S"; grep -vE "^name|NVIDIA" "$R/ramnet/summary.log" | head -30 | tee -a "$S"
fi
if [ -n "${EXTRA_CMD:-}" ]; then
  bash -c "$EXTRA_CMD" >"$R/extra.log" 2>&1; echo "extra rc=$?" | tee -a "$S"; tail -30 "$R/extra.log" >>"$S"
fi
tar czf "$OUT/results.tar.gz" -C "$OUT" r 2>/dev/null
[ -f "$R/failures.log" ] && head -60 "$R/failures.log"
cat "$S"
