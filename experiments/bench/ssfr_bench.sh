#!/usr/bin/env bash
# SSFR training benchmark (issue 13, acceptance 3): one fact-adaptive training
#   d = 128, F = 2048, m = 1024, hebbian:whitened, J = 9, 4000 steps, batch 1280, 40 evaluations
# with `hebb ssfr train --device cuda` (f32) against the straightforward PyTorch script
# experiments/bench/ssfr_torch.py (full sequence, autograd, fp32, TF32 off) in the same call, on the
# same frozen tables (embeddings, maps, MLP_A and MLP_B exported from the memcap result to an .npz).
# First a validation on a small size: GPU f64 vs CPU float64 (same batches: equal best_acc, final
# loss within 1e-8 relative). memcap time = train_s + eval_s of /summary (the training and its 40
# evaluations; the MLP build and file writing excluded; acceptance: <= 3 s); torch time = its steps
# and evaluations after a warm-up (CUDA-synchronised wall clock). Prints the ratio torch / memcap
# (acceptance: >= 10). Logs and files go to OUTDIR (or $OUT).
#   experiments/bench/ssfr_bench.sh BUILD_DIR [OUTDIR]
#   env: STEPS (4000), DIM (128), FACTS (2048), WIDTH (1024), JUNK (9), BATCH (1280),
#        TORCH_PYTHON (python with torch; default: the first python3 that imports it)
set -uo pipefail
BUILD=${1:?usage: ssfr_bench.sh BUILD_DIR [OUTDIR]}
OUTDIR=${2:-${OUT:-$(mktemp -d)}}
HEBB=$BUILD/hebb
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-4000}
DIM=${DIM:-128}
FACTS=${FACTS:-2048}
WIDTH=${WIDTH:-1024}
JUNK=${JUNK:-9}
BATCH=${BATCH:-1280}
mkdir -p "$OUTDIR"
[ -x "$HEBB" ] || { echo "ssfr_bench: no hebb executable at $HEBB (build the hebb target first)" >&2; exit 2; }
H5PY=""
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)" "$(command -v python3.11 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import h5py, numpy' >/dev/null 2>&1 && { H5PY=$py; break; }
done
[ -n "$H5PY" ] || { echo "ssfr_bench: no python3 that imports h5py (install python3-h5py)" >&2; exit 77; }
TPY=""
for py in "${TORCH_PYTHON:-}" "$(command -v python3 2>/dev/null)" /usr/bin/python3 "$(command -v python 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import torch, numpy' >/dev/null 2>&1 && { TPY=$py; break; }
done
[ -n "$TPY" ] || echo "ssfr_bench: no python with torch and numpy (set TORCH_PYTHON); no ratio" >&2

# summary FILE -> "train_s eval_s best_acc best_train_acc final_loss steps_run evaluations path"
summary() {
  "$H5PY" - "$1" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    g = lambda k: (lambda v: v.decode() if isinstance(v, bytes) else v)(s[k][()][0])
    print(g("train_s"), g("eval_s"), g("best_acc"), g("best_train_acc"), g("final_loss"), g("steps_run"),
          g("evaluations"), g("path") + ":" + g("precision"))
PYEOF
}

train() {  # device precision dim facts width junk steps batch out
  "$HEBB" ssfr train --device "$1" --precision "$2" --mlp hebbian:whitened --dim "$3" --facts "$4" --width "$5" \
    --junk "$6" --steps "$7" --batch "$8" --seed 42 --progress none --out "$9" >> "$OUTDIR/hebb.log" 2>&1
}

status=0
echo "== validation: GPU f64 vs CPU float64, d=16 F=64 m=128 J=4, 100 steps, batch 256" | tee "$OUTDIR/validation.txt"
rm -f "$OUTDIR/val_cpu.h5" "$OUTDIR/val_gpu.h5"
if train cpu f64 16 64 128 4 100 256 "$OUTDIR/val_cpu.h5" && train cuda f64 16 64 128 4 100 256 "$OUTDIR/val_gpu.h5"; then
  read -r _ _ c_acc _ c_loss _ _ _ < <(summary "$OUTDIR/val_cpu.h5")
  read -r _ _ g_acc _ g_loss _ _ g_path < <(summary "$OUTDIR/val_gpu.h5")
  v=$("$H5PY" -c "import sys; a,b,c,d=map(float,sys.argv[1:]); print('PASS' if a==c and abs(b-d)<=1e-8*abs(b) else 'FAIL')" \
      "$c_acc" "$c_loss" "$g_acc" "$g_loss")
  [ "$v" = PASS ] || status=1
  echo "  best_acc cpu $c_acc gpu $g_acc; final_loss cpu $c_loss gpu $g_loss ($g_path)  $v" | tee -a "$OUTDIR/validation.txt"
else
  echo "  validation run FAILED (see hebb.log)" | tee -a "$OUTDIR/validation.txt"
  status=1
fi

echo "== d=$DIM F=$FACTS m=$WIDTH hebbian:whitened J=$JUNK, $STEPS steps, batch $BATCH" | tee "$OUTDIR/table.txt"
S="$OUTDIR/ssfr.h5"
rm -f "$S"
if ! train cuda f32 "$DIM" "$FACTS" "$WIDTH" "$JUNK" "$STEPS" "$BATCH" "$S"; then
  echo "hebb ssfr train --device cuda FAILED (see hebb.log)" | tee -a "$OUTDIR/table.txt"
  exit 1
fi
read -r m_train m_eval m_acc m_tacc m_loss m_steps m_evals m_path < <(summary "$S")
m_s=$("$H5PY" -c "import sys; print(float(sys.argv[1]) + float(sys.argv[2]))" "$m_train" "$m_eval")
printf '  memcap %-14s steps %s evals %s  train %.3f s + eval %.3f s = %.3f s  best_acc %s best_train_acc %s final_loss %s\n' \
  "$m_path" "$m_steps" "$m_evals" "$m_train" "$m_eval" "$m_s" "$m_acc" "$m_tacc" "$m_loss" | tee -a "$OUTDIR/table.txt"
ok=$("$H5PY" -c "import sys; print('PASS' if float(sys.argv[1]) <= 3.0 else 'FAIL')" "$m_s")
echo "  acceptance: training + 40 evaluations <= 3 s: $ok" | tee -a "$OUTDIR/table.txt"

if [ -n "$TPY" ]; then
  "$H5PY" - "$S" "$OUTDIR/ssfr_tables.npz" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    out = {"E": f["runs/train/embeddings"][()], "map_a": f["facts/map"][()], "map_b": f["runs/train/map_b"][()],
           "facts": f["summary/facts"][0], "junk": f["summary/junk"][0], "junk_vocab": f["summary/junk_vocab"][0]}
    for src, dst in (("mlp", "mlp_a_"), ("mlp_b", "mlp_b_")):
        for k in ("A", "G", "B", "bias_up", "bias_gate", "bias_out"):
            if k in f[src]:
                out[dst + k] = f[src][k][()]
        gate = f[src].attrs["gate"]
        out[dst + "gate"] = np.array(gate.decode() if isinstance(gate, bytes) else str(gate))
np.savez(sys.argv[2], **out)
PYEOF
  "$TPY" "$HERE/ssfr_torch.py" --data "$OUTDIR/ssfr_tables.npz" --steps "$STEPS" --batch "$BATCH" \
    > "$OUTDIR/torch.json" 2>> "$OUTDIR/torch.log"
  read -r t_s t_acc t_evals < <("$H5PY" -c 'import json,sys
try:
    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(r["time_s"], r["best_acc"], r["evaluations"])
except Exception:
    print("- - -")' "$OUTDIR/torch.json")
  if [ "$t_s" = "-" ]; then
    echo "  torch FAILED (see torch.log)" | tee -a "$OUTDIR/table.txt"
    status=1
  else
    ratio=$("$H5PY" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.1f}')" "$t_s" "$m_s")
    printf '  torch  full-seq autograd fp32  evals %s  %.3f s  best_acc %s\n' "$t_evals" "$t_s" "$t_acc" | tee -a "$OUTDIR/table.txt"
    echo "  ratio torch / memcap = ${ratio}x (acceptance: >= 10x)" | tee -a "$OUTDIR/table.txt"
  fi
fi
[ "$ok" = PASS ] || status=1
exit $status
