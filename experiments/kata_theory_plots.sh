#!/usr/bin/env bash
# KATA theory figures: coherence of each dictionary family against the Welch floor over the field
# size s, and the pSNR ladder against the number of keys per cone (spec kata.md §3.2–3.9).
# Usage: experiments/kata_theory_plots.sh [OUTDIR] (default results/kata_theory); KATA=path/to/kata
# (default: build/kata). Writes OUTDIR/*.h5 and OUTDIR/kata_coherence.png, OUTDIR/kata_psnr_ladder.png.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
KATA=${KATA:-$here/../build/kata}
out=${1:-results/kata_theory}
mkdir -p "$out"
py="$here/plots/with_python.sh"
[[ -x "$py" ]] || py=/usr/bin/python3
run() { echo "+ kata $*" >&2; "$KATA" "$@" --device cpu >/dev/null; }

# Table 1 and the bound tables (printed and stored)
"$KATA" bounds table1 --device cpu --out "$out/table1.h5"
run bounds psd --p 16,32,64,128 --eps 0.1,0.25,0.5 --out "$out/psd_bounds.h5"
run bounds rankin --dim 64,128 --out "$out/rankin.h5"

# dictionaries over s: MUB (d = 2s, T = s(s+1)), random codes of the same (d, T), greedy line packings
# in R^{2s} at a = 1/sqrt(s) (the MUB coherence), DeVore r = 2 (d = s^2, T = s^3)
for s in 2 3 4 5 7 8 9 11 13 16 17 19 23 25 27 29 31 32; do
  run dict --type mub --field-size "$s" --no-vectors --out "$out/mub_s$s.h5"
  run dict --type random --dim $((2 * s)) --count $((s * (s + 1))) --seed 1 --no-vectors --out "$out/random_s$s.h5"
  a=$(awk -v s="$s" 'BEGIN { printf "%.17g", 1 / sqrt(s) }')
  run dict --type greedy --dim $((2 * s)) --max-coherence "$a" --max-fail 2000 --seed 1 --no-vectors \
    --out "$out/greedy_s$s.h5"
done
for s in 3 4 5 7 8 9 11 13 16; do
  run dict --type devore --field-size "$s" --degree 2 --no-vectors --out "$out/devore_s$s.h5"
done

# pSNR ladder at p = 64 with random keys, and with realified MUB keys (s = 32, d = 64)
run psnr --p 64 --tau 0.125,1 --T-min 16 --T-max 65536 --per-octave 2 --trials 3 --queries 256 --seed 1 \
  --out "$out/psnr_p64.h5"
run psnr --keys mub --field-size 32 --rungs linear,psd,softmax --tau 0.125 --T 64,128,256,512,1024,1056 \
  --trials 3 --queries 256 --seed 1 --out "$out/psnr_p64_mub.h5"

"$py" "$here/plots/kata_coherence.py" "$out" -o "$out/kata_coherence.png"
"$py" "$here/plots/kata_psnr_ladder.py" "$out/psnr_p64.h5" --mub "$out/psnr_p64_mub.h5" -o "$out/kata_psnr_ladder.png"
echo "wrote $out/kata_coherence.png $out/kata_psnr_ladder.png" >&2
