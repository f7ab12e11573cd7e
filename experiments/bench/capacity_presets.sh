#!/usr/bin/env bash
# Runs `hebb capacity` presets on the GPU with a time limit each and prints the per-point table
# (method, d, F, m*, W*) and the claim ratios through experiments/plots/fig2c.py's text summary.
#   experiments/bench/capacity_presets.sh HEBB OUTDIR PRESET[@--flag=value@...] ...   (@ stands for a space)
# A preset that hits its limit (LIMIT seconds, default 240) leaves OUT.partial/ behind; rerun with
# --resume to continue it.
set -uo pipefail
HEBB=${1:?hebb executable}; OUTDIR=${2:?output folder}; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
export MEMCAP_PRESETS=${MEMCAP_PRESETS:-$HERE/../presets}
mkdir -p "$OUTDIR"
for item in "$@"; do
  name=${item%%@*}; flags=""; [ "$item" != "$name" ] && flags=${item#*@}; flags=${flags//@/ }
  tag=$(echo "$item" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout "${LIMIT:-240}" "$HEBB" capacity --preset "$name" $flags --device cuda --progress lines \
    --out "$OUTDIR/$tag.h5" > "$OUTDIR/$tag.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "preset $item rc=$rc wall $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"
  [ -f "$OUTDIR/$tag.h5" ] && python3 - "$OUTDIR/$tag.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    s = {k: f["summary"][k][()] for k in f["summary"]}
t = lambda v: v.decode() if isinstance(v, bytes) else str(v)
for i in range(len(s["m_star"])):
    print(f"  {t(s['method'][i]):<24} d={int(s['dim'][i]):>4} F={int(s['facts'][i]):>6} seed={int(s['seed'][i])} "
          f"m*={s['m_star'][i]:>8.0f} W*={s['params_star'][i]:>12.0f} probes={int(s['probes'][i]):>3} "
          f"wall={s['wall_s'][i]:7.2f}s")
PY
  [ $rc -ne 0 ] && tail -5 "$OUTDIR/$tag.log"
done
