#!/usr/bin/env bash
# The forms of the data-dependent CG operator (MEMCAP_CG_KERNEL; docs/hebb-constructions.md, "Data-dependent
# CG") on one GPU, as measured in docs/perf.md (sixth session): per form, the data-dependent search at d = 64,
# F = 4096 (the reduced grid's slowest job), the `reduced` preset REPS times (issue 9's <= 6 s target, process
# wall) and fig2c's seven data-dependent searches at d = 64. Validation first: every probe of every form must
# equal the first form's (default `fused`, plain float32 FMAs: the reference's arithmetic) — same widths probed,
# same accuracy at each; exit 1 on any difference. Prints one table of wall times last. (GPU against CPU m*:
# experiments/bench/capacity_bench.sh.)
# Usage: experiments/bench/cg_variants.sh [FORM ...]   (default: fused fused-prefetch fused-tf32x3 cublas)
#   env HEBB (default build/hebb), OUT (default ./cg_variants), REPS (default 2), JOBS (--jobs-per-gpu, 4).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
HEBB=${HEBB:-build/hebb}
OUT=${OUT:-cg_variants}
REPS=${REPS:-2}
JOBS=${JOBS:-4}
FORMS=("$@")
[ ${#FORMS[@]} -eq 0 ] && FORMS=(fused fused-prefetch fused-tf32x3 cublas)
export MEMCAP_PRESETS=${MEMCAP_PRESETS:-$SRC/experiments/presets}
[ -x "$HEBB" ] || { echo "cg_variants.sh: no executable $HEBB (set HEBB)" >&2; exit 2; }
case "$REPS" in '' | *[!0-9]* | 0) echo "cg_variants.sh: REPS must be a positive integer" >&2; exit 2 ;; esac
mkdir -p "$OUT"
now() { date +%s.%N; }
declare -A WALL
# run NAME FORM ARGS...: one `hebb capacity` run on the GPU, its process wall recorded.
run() {
  local name=$1 form=$2
  shift 2
  rm -f "$OUT/$name.h5"
  local t1 rc
  t1=$(now)
  MEMCAP_CG_KERNEL=$form "$HEBB" capacity "$@" --device cuda --progress none --out "$OUT/$name.h5" \
    > "$OUT/$name.txt" 2>&1
  rc=$?
  WALL[$name]=$(awk -v a="$t1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')
  [ $rc -eq 0 ] || { echo "cg_variants.sh: $name (MEMCAP_CG_KERNEL=$form) failed, rc $rc:" >&2; tail -5 "$OUT/$name.txt" >&2; exit 1; }
}
for f in "${FORMS[@]}"; do
  run "dd_$f" "$f" --methods hebbian:data-dependent --dim 64 --facts 4096 --seeds 1
  for r in $(seq 1 "$REPS"); do run "reduced_${f}_$r" "$f" --preset reduced --jobs-per-gpu "$JOBS"; done
  run "fig2c64_$f" "$f" --preset fig2c --methods hebbian:data-dependent --dim 64 --seeds 1 --jobs-per-gpu "$JOBS"
done
status=0
ref=${FORMS[0]}
for what in dd reduced fig2c64; do
  files=()
  for f in "${FORMS[@]}"; do
    if [ $what = reduced ]; then
      for r in $(seq 1 "$REPS"); do files+=("$OUT/reduced_${f}_$r.h5"); done
    else
      files+=("$OUT/${what}_$f.h5")
    fi
  done
  bash "$SRC/experiments/plots/with_python.sh" "$HERE/compare_probes.py" "${files[@]}" || status=1
done
printf '\n%-16s %14s %s\n' form "dd d=64 F=4096" "reduced grid (s, each repetition)   fig2c d=64 dd"
for f in "${FORMS[@]}"; do
  reps=""
  for r in $(seq 1 "$REPS"); do reps+="${WALL[reduced_${f}_$r]} "; done
  printf '%-16s %12s s  %-36s %s s\n' "$f" "${WALL[dd_$f]}" "$reps" "${WALL[fig2c64_$f]}"
done
[ $status -eq 0 ] && echo "every form's probes equal those of $ref" || echo "PROBES DIFFER between forms (see above)"
exit $status
