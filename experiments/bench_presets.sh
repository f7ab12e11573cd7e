#!/usr/bin/env bash
# Runs every margin-sweep preset of the Hebbian-MLP paper (spec hebbian.md §4.1) and prints the wall
# time per preset and in total, plus each fit's R². Results land in OUTDIR (default: a temp folder,
# removed at the end unless --keep).
# Usage: experiments/bench_presets.sh [--hebb PATH] [--outdir DIR] [--keep] [--threads N] [PRESET ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
HEBB=${HEBB:-}
outdir=""
keep=0
threads=0
presets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hebb) HEBB=$2; shift 2 ;;
    --outdir) outdir=$2; keep=1; shift 2 ;;
    --keep) keep=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) presets+=("$1"); shift ;;
  esac
done
if [ -z "$HEBB" ]; then
  for c in "$here"/../build/hebb "$here"/../build-*/hebb; do [ -x "$c" ] && HEBB=$c && break; done
fi
[ -x "${HEBB:-}" ] || { echo "bench_presets.sh: no hebb executable (use --hebb PATH or HEBB=...)" >&2; exit 2; }
[ ${#presets[@]} -gt 0 ] || presets=(fig2b-width fig4-facts exact-k2-facts fig5a-keys fig5b-values fig5c-both fig6-noise)
[ -n "$outdir" ] || outdir=$(mktemp -d)
mkdir -p "$outdir"
export MEMCAP_PRESETS="$here/presets"
echo "hebb: $HEBB  host: $(hostname)  cores: $(nproc)  date: $(date -u +%FT%TZ)  outdir: $outdir"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)  (wall times scale with other load; cpu_s = user+sys)"
printf "%-16s %10s %8s %8s %s\n" preset wall_s cpu_s R2 fit
total=0
cpu_total=0
TIMEFORMAT='%R %U %S'
for p in "${presets[@]}"; do
  { time "$HEBB" margin-sweep --preset "$p" --threads "$threads" --progress none --out "$outdir/$p.h5" \
    >"$outdir/$p.txt" 2>"$outdir/$p.err"; } 2>"$outdir/$p.time" || { echo "$p failed:"; cat "$outdir/$p.err"; exit 1; }
  read -r real user sys <"$outdir/$p.time"
  dt=$(awk -v a="$real" 'BEGIN{printf "%.1f", a}')
  cpu=$(awk -v a="$user" -v b="$sys" 'BEGIN{printf "%.1f", a+b}')
  total=$(awk -v a="$total" -v b="$dt" 'BEGIN{printf "%.1f", a+b}')
  cpu_total=$(awk -v a="$cpu_total" -v b="$cpu" 'BEGIN{printf "%.1f", a+b}')
  fitline=$(grep "^(\* = best seed) fit" "$outdir/$p.txt" | sed 's/^(\* = best seed) //')
  r2=$(echo "$fitline" | sed -n 's/.*R2=\([-0-9.naife]*\).*/\1/p')
  printf "%-16s %10s %8s %8s %s\n" "$p" "$dt" "$cpu" "$r2" "$fitline"
done
echo "total: ${total} s wall, ${cpu_total} s cpu (user+sys)"
[ "$keep" -eq 1 ] || rm -rf "$outdir"
