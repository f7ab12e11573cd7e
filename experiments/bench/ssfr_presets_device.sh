#!/usr/bin/env bash
# SSFR presets on one GPU for the claims of issue 13 (spec hebbian.md §5 claims 10–14): runs each preset
# (or a reduced grid of it) with `--device cuda`, times it, and leaves the HDF5 files in OUTDIR for the
# plot scripts (experiments/plots/fig3a.py, fig3b.py, fig10.py, fig2a.py, fig7.py), which print the
# numbers the claims are checked with. Each run has its own time limit; a run cut by its limit leaves
# OUT.partial/ (resume it with the same command plus --resume).
#   experiments/bench/ssfr_presets_device.sh HEBB OUTDIR [RUN ...]
#   RUN: fig3a | fig3b | fig3b-small (F ≤ 512) | fig10-small (m ≤ 176) | fig2a | fig2a-2seeds
#   env: JOBS_PER_GPU (4), LIMIT_<RUN> seconds (default 240; '-' in the name becomes '_')
set -uo pipefail
HEBB=${1:?usage: ssfr_presets_device.sh HEBB OUTDIR [RUN ...]}
OUTDIR=${2:?usage: ssfr_presets_device.sh HEBB OUTDIR [RUN ...]}
shift 2
RUNS=${*:-fig3a fig3b-small fig2a-2seeds}
J=${JOBS_PER_GPU:-4}
mkdir -p "$OUTDIR"
for run in $RUNS; do
  case $run in
    fig3a) args=(noise --preset fig3a) ;;
    fig3b) args=(capacity --preset fig3b) ;;
    fig3b-small) args=(capacity --preset fig3b --facts 64,128,256,512) ;;
    fig10-small) args=(capacity --preset fig10 --widths 44,88,176) ;;
    fig2a) args=(usability --preset fig2a) ;;
    fig2a-2seeds) args=(usability --preset fig2a --seeds 2) ;;
    *) echo "ssfr_presets_device: unknown run '$run'" >&2; exit 2 ;;
  esac
  var=LIMIT_${run//-/_}
  limit=${!var:-240}
  t0=$(date +%s.%N)
  timeout "$limit" "$HEBB" ssfr "${args[@]}" --device cuda --jobs-per-gpu "$J" --progress lines \
    --out "$OUTDIR/$run.h5" > "$OUTDIR/$run.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf 'preset %-13s rc=%d wall_s=%.1f (%s)\n' "$run" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "hebb ssfr ${args[*]}"
  [ $rc -ne 0 ] && tail -5 "$OUTDIR/$run.log"
done
exit 0
