#!/usr/bin/env bash
# Runs `hebb capacity` presets with a time limit each and prints the per-point table (method, d, F, seed, m*, W*,
# probes, wall) from /summary.
#   experiments/bench/capacity_presets.sh HEBB OUTDIR PRESET[@--flag=value@...] ...   (@ stands for a space)
# DEVICE (default cuda) picks the device. A preset that hits its limit (LIMIT seconds, default 240) leaves
# OUT.partial/ behind; rerun with RESUME=1 (adds --resume) to continue it: every call appends its wall time to
# OUTDIR/TAG.walls and prints the sum over the calls so far, so a preset cut into pieces by a time limit is still
# timed whole (each restart re-runs the probes that were in flight, so the sum is an upper bound). The last line sums
# the jobs' recorded probe walls (/summary probe_wall_s, every call's probes) and divides them by the concurrent jobs
# (--jobs-per-gpu in the flags, else 1): a lower bound on one uninterrupted run with the same per-job times.
set -uo pipefail
HEBB=${1:?hebb executable}; OUTDIR=${2:?output folder}; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
export MEMCAP_PRESETS=${MEMCAP_PRESETS:-$HERE/../presets}
mkdir -p "$OUTDIR"
for item in "$@"; do
  name=${item%%@*}; flags=""; [ "$item" != "$name" ] && flags=${item#*@}; flags=${flags//@/ }
  tag=$(echo "$item" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
  if [ -z "${RESUME:-}" ]; then : > "$OUTDIR/$tag.walls"; : > "$OUTDIR/$tag.log"; fi
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout -s INT "${LIMIT:-240}" "$HEBB" capacity --preset "$name" $flags --device "${DEVICE:-cuda}" --progress lines \
    ${RESUME:+--resume} --out "$OUTDIR/$tag.h5" >> "$OUTDIR/$tag.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  awk "BEGIN{printf \"%.1f\n\", $t1 - $t0}" >> "$OUTDIR/$tag.walls"
  echo "preset $item rc=$rc wall $(tail -n 1 "$OUTDIR/$tag.walls") s; over $(wc -l < "$OUTDIR/$tag.walls") call(s)" \
       "$(awk '{s += $1} END {printf "%.1f", s}' "$OUTDIR/$tag.walls") s"
  workers=$(echo " $flags " | sed -n 's/.* --jobs-per-gpu[ =]\([0-9][0-9]*\) .*/\1/p'); workers=${workers:-1}
  [ -f "$OUTDIR/$tag.h5" ] && PY_NEEDS=h5py "$HERE/../plots/with_python.sh" - "$OUTDIR/$tag.h5" "$workers" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    s = {k: f["summary"][k][()] for k in f["summary"]}
t = lambda v: v.decode() if isinstance(v, bytes) else str(v)
for i in range(len(s["m_star"])):
    print(f"  {t(s['method'][i]):<24} d={int(s['dim'][i]):>4} F={int(s['facts'][i]):>6} seed={int(s['seed'][i])} "
          f"m*={s['m_star'][i]:>8.0f} W*={s['params_star'][i]:>12.0f} probes={int(s['probes'][i]):>3} "
          f"wall={s['wall_s'][i]:7.2f}s")
pw, w = s["probe_wall_s"], int(sys.argv[2])
gd = np.array([t(m).startswith("gd") for m in s["method"]])
print(f"  job time (recorded probe walls, every call): {pw.sum():.1f} s, gd {pw[gd].sum():.1f} s; "
      f"/ {w} concurrent job(s) = {pw.sum() / w:.1f} s")
PY
  [ $rc -ne 0 ] && tail -5 "$OUTDIR/$tag.log"
done
