#!/usr/bin/env bash
# One device call for the perf report: build, gpu tests (FULL_CTEST=1: the whole tree and every ctest test),
# variant comparisons (--variant all) (SKIP_VARIANTS=1 skips them), then each preset of `kata bench` (PRESETS, default all
# four) with the SDPA baseline. Everything is tarred into $OUT/results.tar.gz; summary.log last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
R=$OUT/r
mkdir -p "$R"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv > "$R/gpu.txt" 2>&1
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DMEMCAP_ENABLE_CUDA=ON \
  > "$R/cmake.log" 2>&1 || { tail -40 "$R/cmake.log"; exit 1; }
if [ -n "${FULL_CTEST:-}" ]; then  # whole tree + every test (CPU, CLI, Python, gpu-labelled)
  cmake --build build-gpu -j16 > "$R/build.log" 2>&1 || { grep -B2 -A8 -E "error|Error" "$R/build.log" | head -80; exit 1; }
  (cd build-gpu && ctest -j8 --output-on-failure > "$R/ctest.log" 2>&1); echo "ctest rc=$?" | tee "$OUT/summary.log"
  grep -E "tests passed|tests failed|Total Test time|\*\*\*|Failed|Skipped" "$R/ctest.log" | tee -a "$OUT/summary.log"
  ./build-gpu/tests/gpu_test_kata_attention > "$R/gputest.log" 2>&1
else
  cmake --build build-gpu -j16 --target gpu_test_kata_attention kata > "$R/build.log" 2>&1 ||
    { grep -B2 -A8 -E "error|Error" "$R/build.log" | head -80; exit 1; }
  ./build-gpu/tests/gpu_test_kata_attention > "$R/gputest.log" 2>&1; echo "gpu tests rc=$?" | tee "$OUT/summary.log"
fi
grep -E "test cases|assertions|agreement" "$R/gputest.log" | tee -a "$OUT/summary.log"
K=build-gpu/kata
PRESETS=${PRESETS:-accept table8 table10 table11}
if [ -z "${SKIP_VARIANTS:-}" ]; then
for T in 4096 32768; do  # every tensor-core variant of the quadratic form (kernels/kata_attention_variants.cu)
  $K bench --device cuda --shapes custom --forms quadratic --maps m2 --B 8 --H 16 --T $T --variant all \
    --repeats 5 --warmup 2 2>&1 | grep -E "^custom" | sed "s/^/VARIANT /"
done > "$R/variants.log" 2>&1
for c in 64 128; do  # chunked variants (fused needs C = 64)
  $K bench --device cuda --shapes custom --forms chunked --maps m2 --B 8 --H 16 --T 131072 --chunk $c --variant all \
    --repeats 5 --warmup 2 2>&1 | grep -E "^custom|stages" | sed "s/^/CHUNKED /"
done >> "$R/variants.log" 2>&1
cat "$R/variants.log" >> "$OUT/summary.log"
fi
for sh in $PRESETS; do
  experiments/bench/kata_vs_sdpa.sh $K "$R" $sh --repeats 5 --warmup 2 > "$R/run_$sh.log" 2>&1; echo "$sh rc=$?" >> "$OUT/summary.log"
done
tar czf "$OUT/results.tar.gz" -C "$OUT" r
cat "$R/gpu.txt" >> "$OUT/summary.log"
head -1 "$R/run_accept.log" >> "$OUT/summary.log"
cat "$R/compare_accept.txt" >> "$OUT/summary.log"
[ -f "$R/compare_table10.txt" ] && tail -17 "$R/compare_table10.txt" >> "$OUT/summary.log"
cat "$OUT/summary.log"
