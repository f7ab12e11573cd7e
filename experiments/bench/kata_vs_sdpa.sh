#!/usr/bin/env bash
# Runs `kata bench` (validated, CUDA events) and the PyTorch SDPA flash baseline on the same GPU,
# then prints the side-by-side ratio table. Usage:
#   experiments/bench/kata_vs_sdpa.sh KATA_EXE OUTDIR [accept|table8|table9|table10|table11] [extra kata bench flags...]
# (table9: forward + backward of the MQAR mixer cores against SDPA forward + backward, issue 12)
set -euo pipefail
KATA=${1:?path to the kata executable}
OUT=${2:?output folder}
SHAPES=${3:-accept}
shift 3 || true
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
"$KATA" bench --device cuda --shapes "$SHAPES" --out "$OUT/kata_bench_$SHAPES.h5" "$@" | tee "$OUT/kata_bench_$SHAPES.txt"
case "$SHAPES" in
  accept|table8) python3 "$HERE/sdpa_baseline.py" --shapes "$SHAPES" --out "$OUT/sdpa_$SHAPES.json" | tee "$OUT/sdpa_$SHAPES.txt" ;;
  table9) python3 "$HERE/sdpa_baseline.py" --shapes table9 --pass fwdbwd --out "$OUT/sdpa_$SHAPES.json" | tee "$OUT/sdpa_$SHAPES.txt" ;;
  *) echo '[]' > "$OUT/sdpa_$SHAPES.json" ;;
esac
python3 "$HERE/compare.py" "$OUT/kata_bench_$SHAPES.h5" "$OUT/sdpa_$SHAPES.json" | tee "$OUT/compare_$SHAPES.txt"
