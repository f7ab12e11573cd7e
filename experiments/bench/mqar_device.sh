#!/usr/bin/env bash
# MQAR training speed on one GPU (issue 12, acceptance 3): one epoch of the §4.1 training mixture (707 steps of
# 256 sequences) plus one evaluation of the diagonal (T = 512..4096, K = T/4, 1000 examples each) with
# `kata mqar train --device cuda` for each mixer in MIXERS, and the same epoch + evaluation of the PyTorch script
# experiments/bench/mqar_torch.py (softmax mixer, SDPA, fp32) in the same call; prints seconds and the ratio.
# A Table 2 row is 3 learning rates x up to 32 epochs (early stop at 0.999): row time ≈ 3 x 32 x (epoch + eval).
#   experiments/bench/mqar_device.sh BUILD_DIR OUTDIR
#   env: MIXERS ("softmax m2 delta-m2"; MIXER[:KERNEL[:PRECISION]] picks the mixer-core variant and precision,
#   e.g. softmax:tiled or softmax:auto:tf32), EPOCHS (1), TORCH_PYTHON, TORCH_TF32=1 (also time the torch script
#   with TF32 matmuls; the ratio of a tf32 run is printed against both)
set -uo pipefail
BUILD=${1:?usage: mqar_device.sh BUILD_DIR OUTDIR}
OUTDIR=${2:?usage: mqar_device.sh BUILD_DIR OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
MIXERS=${MIXERS:-softmax m2 delta-m2}
EPOCHS=${EPOCHS:-1}
mkdir -p "$OUTDIR"
H5PY=""
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import h5py' >/dev/null 2>&1 && { H5PY=$py; break; }
done
TPY=""
for py in "${TORCH_PYTHON:-}" "$(command -v python3 2>/dev/null)" /usr/bin/python3; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1 && { TPY=$py; break; }
done
declare -A T_S
for mxk in $MIXERS; do
  IFS=: read -r mx kern prec <<< "$mxk"
  kern=${kern:-auto}
  prec=${prec:-f32}
  f=$OUTDIR/epoch_${mx}_${kern}_$prec.h5
  rm -f "$f"
  if timeout "${LIMIT:-200}" "$BUILD/kata" mqar train --device cuda --mixer "$mx" --mixer-kernel "$kern" --precision "$prec" \
       --epochs "$EPOCHS" --lr 1e-3 --progress none --out "$f" > "$OUTDIR/epoch_${mx}_${kern}_$prec.log" 2>&1 && [ -n "$H5PY" ]; then
    line=$("$H5PY" - "$f" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    s = h["summary"]
    g = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else v)(s[k][()][0])
    accs = [k for k in s.keys() if k.startswith("acc_")]
    print(g("train_s"), g("eval_s"), g("steps"), g("path") + ":" + g("mixer_kernel"),
          " ".join(f"{k}={g(k):.3f}" for k in sorted(accs)))
PYEOF
)
    read -r tr ev st path rest <<< "$line"
    [ "$kern" = auto ] && T_S[$mx:$prec]=$(awk -v a="$tr" -v b="$ev" 'BEGIN { print a + b }')
    printf 'memcap %-15s %s  epochs %s  steps %s  train %.2f s  eval %.2f s  %s\n' "$mxk" "$path" "$EPOCHS" "$st" "$tr" "$ev" "$rest"
  else
    echo "memcap $mxk: failed (rc $?)"; tail -5 "$OUTDIR/epoch_${mx}_${kern}_$prec.log"
  fi
done
if [ -n "$TPY" ]; then
  for tt in 0 ${TORCH_TF32:+1}; do
    flag=""; name="fp32"
    [ "$tt" = 1 ] && { flag="--tf32"; name="tf32"; }
    j=$(timeout "${LIMIT:-200}" "$TPY" "$HERE/mqar_torch.py" --epochs "$EPOCHS" $flag 2> "$OUTDIR/torch_$name.err" | tail -1)
    echo "torch-$name $j"
    te=$(echo "$j" | "$TPY" -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["epoch_s"] * d["epochs"] + d["eval_s"])' 2>/dev/null)
    for key in "${!T_S[@]}"; do
      [[ "$key" == softmax:* ]] || continue
      [ -n "$te" ] && awk -v t="$te" -v m="${T_S[$key]}" -v k="$key" -v n="$name" \
        'BEGIN { printf "ratio torch-%s / memcap %s (epoch + eval) = %.2fx (acceptance: >= 5x)\n", n, k, t / m }'
    done
  done
else
  echo "no python with torch: no baseline"
fi
