#!/usr/bin/env bash
# One device call for the training core (issue 9): build the CUDA tree, run the gpu-labelled tests,
# then (STAGES) the GD-training benchmark against PyTorch and the capacity benchmarks. Logs go to
# $OUT/r (tarred into $OUT/results.tar.gz); a short summary is printed last.
#   STAGES="tests gd capacity fig"  (default: tests gd capacity)
#   FULL_CTEST=1 builds everything and runs every ctest test instead of only the gpu label.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
R=$OUT/r
mkdir -p "$R"
STAGES=${STAGES:-tests gd capacity}
S=$OUT/summary.log
: > "$S"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader > "$R/gpu.txt" 2>&1
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMEMCAP_ENABLE_CUDA=ON \
  > "$R/cmake.log" 2>&1 || { tail -40 "$R/cmake.log"; exit 1; }
if [ -n "${FULL_CTEST:-}" ]; then
  cmake --build build-gpu -j16 > "$R/build.log" 2>&1 || { grep -B2 -A12 -E "error" "$R/build.log" | head -120; exit 1; }
else
  TARGETS=${TARGETS:-hebb gpu_test_gpu_runtime gpu_test_nn_layers gpu_test_mlp_gd_cuda gpu_test_mlp_construct_cuda \
    gpu_test_mlp_capacity_cuda gpu_test_core_rng_device gpu_test_kata_attention gpu_test_kata_capacity}
  cmake --build build-gpu -j16 --target $TARGETS \
    > "$R/build.log" 2>&1 || { grep -B2 -A12 -E "error" "$R/build.log" | head -120; exit 1; }
fi
echo "build $(( $(date +%s) - t0 )) s" | tee -a "$S"
if [[ " $STAGES " == *" tests "* ]]; then
  if [ -n "${FULL_CTEST:-}" ]; then
    (cd build-gpu && ctest -j8 --output-on-failure > "$R/ctest.log" 2>&1); echo "ctest rc=$?" | tee -a "$S"
    grep -E "tests passed|tests failed|\*\*\*|Failed" "$R/ctest.log" | head -40 | tee -a "$S"
  fi
  for t in build-gpu/tests/gpu_test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    timeout 300 "$t" ${TEST_ARGS:-} > "$R/$n.log" 2>&1; rc=$?
    echo "$n rc=$rc $(grep -E '^\[doctest\] (test cases|assertions)' "$R/$n.log" | tr '\n' ' ')" | tee -a "$S"
    [ $rc -ne 0 ] && grep -B3 -A12 -E "ERROR|error|FAILED|what\(\)" "$R/$n.log" | head -60 >> "$R/failures.log"
  done
fi
if [[ " $STAGES " == *" gd "* ]]; then
  timeout ${GD_TIMEOUT:-240} experiments/bench/gd_train_bench.sh build-gpu "$R/gd" > "$R/gd_bench.log" 2>&1
  echo "gd bench rc=$?" | tee -a "$S"; tail -12 "$R/gd_bench.log" >> "$S"
fi
if [[ " $STAGES " == *" capacity "* ]]; then
  HEBB=build-gpu/hebb OUT="$R/cap" CPU_ALPHA=${CPU_ALPHA:-0.0625} \
    timeout ${CAP_TIMEOUT:-240} experiments/bench/capacity_bench.sh > "$R/cap_bench.log" 2>&1
  echo "capacity bench rc=$?" | tee -a "$S"; tail -12 "$R/cap_bench.log" >> "$S"
fi
if [ -n "${PRESETS:-}" ]; then
  # shellcheck disable=SC2086
  experiments/bench/capacity_presets.sh build-gpu/hebb "$R/presets" $PRESETS > "$R/presets.log" 2>&1
  echo "presets rc=$?" | tee -a "$S"; grep -E "^preset" "$R/presets.log" >> "$S"
fi
if [ -n "${EXTRA_CMD:-}" ]; then
  bash -c "$EXTRA_CMD" > "$R/extra.log" 2>&1; echo "extra rc=$?" | tee -a "$S"; tail -30 "$R/extra.log" >> "$S"
fi
tar czf "$OUT/results.tar.gz" -C "$OUT" r 2>/dev/null
[ -f "$R/failures.log" ] && head -80 "$R/failures.log"
cat "$R/gpu.txt"
cat "$S"
