#!/usr/bin/env bash
# GD-training benchmark: `hebb train --method gd,precision=P --device cuda` (P = f32, tf32, bf16) against the
# PyTorch reference (experiments/bench/gd_torch.py, fp32, TF32 off; and its torch.compile peer) on
#   F = 4096, m = 4096, d = 64, 10000 epochs   (GEMM-bound)
#   F = 256,  m = 64,   d = 64, 10000 epochs   (launch-bound)
# after validating on a small size that the GPU result matches `--device cpu` (same accuracy, loss
# close). Builds nothing. memcap times from /summary of the output file: wall_s (the trainer's own
# clock: upload, graph capture, warm-up and training; process start and HDF5 writing excluded) and
# train_loop_s (CUDA events around the graph replays only); torch time = CUDA events around its
# training loop after a warm-up, so ratio_loop = torch_s / loop_s compares like with like and
# ratio_wall = torch_s / wall_s charges memcap its setup too. Logs and files go to OUTDIR (or $OUT).
#   experiments/bench/gd_train_bench.sh BUILD_DIR [OUTDIR]
#   env: EPOCHS (10000), SIZES ("4096:4096:64 256:64:64" as F:m:d), PRECISIONS ("f32 tf32"),
#        TORCH_COMPILE (1; 0 skips the torch.compile peer), TORCH_PYTHON (python with torch),
#        ROUNDS (1): per size, the torch runs and memcap's alternate ROUNDS times, one table row per round
#        (round column) and, when ROUNDS > 1, a 'median' row per precision and peer: the medians of the
#        times and of the rounds' ratios (the torch script's time varies by ~30 % between runs of one call).
set -uo pipefail
BUILD=${1:?usage: gd_train_bench.sh BUILD_DIR [OUTDIR]}
OUTDIR=${2:-${OUT:-$(mktemp -d)}}
HEBB=$BUILD/hebb
HERE=$(cd "$(dirname "$0")" && pwd)
EPOCHS=${EPOCHS:-10000}
SIZES=${SIZES:-"4096:4096:64 256:64:64"}
PRECISIONS=${PRECISIONS:-"f32 tf32"}
TORCH_COMPILE=${TORCH_COMPILE:-1}
ROUNDS=${ROUNDS:-1}
[[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "gd_train_bench: ROUNDS must be an integer in [1, 99] (got '$ROUNDS')" >&2; exit 2; }
mkdir -p "$OUTDIR"
[ -x "$HEBB" ] || { echo "gd_train_bench: no hebb executable at $HEBB (build the hebb target first)" >&2; exit 2; }

# A python that imports h5py (as experiments/plots/with_python.sh looks for one), and one that imports torch.
H5PY=""
for py in /usr/bin/python3 "$(command -v python3 2>/dev/null)" "$(command -v python3.11 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import h5py' >/dev/null 2>&1 && { H5PY=$py; break; }
done
[ -n "$H5PY" ] || { echo "gd_train_bench: no python3 that imports h5py (install python3-h5py)" >&2; exit 77; }
TPY=""
for py in "${TORCH_PYTHON:-}" "$(command -v python3 2>/dev/null)" /usr/bin/python3 "$(command -v python 2>/dev/null)"; do
  [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import torch' >/dev/null 2>&1 && { TPY=$py; break; }
done
[ -n "$TPY" ] || echo "gd_train_bench: no python with torch found (set TORCH_PYTHON); torch columns will be empty" >&2

# summary FILE -> "wall_s accuracy final_loss epochs_run path train_loop_s"
summary() {
  "$H5PY" - "$1" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    def get(k):
        v = s[k][()][0]
        return v.decode() if isinstance(v, bytes) else v
    kernel = f["runs/train"].attrs.get("kernel", b"?")
    kernel = kernel.decode() if isinstance(kernel, bytes) else str(kernel)
    loop = get("train_loop_s") if "train_loop_s" in s else get("wall_s")
    print(get("wall_s"), get("accuracy"), get("final_loss"), get("epochs_run"), get("path") + "/" + kernel, loop)
EOF
}

# torch JSON line -> "time_s accuracy final_loss epochs_run" (or "- - - -")
torch_fields() {
  "$H5PY" -c 'import json,sys
try:
    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    print(r["time_s"], r["accuracy"], r["final_loss"], r["epochs_run"]) if "time_s" in r else print("- - - -")
except Exception:
    print("- - - -")' "$1"
}

train() {  # F m d P epochs device out
  "$HEBB" train --method "gd,precision=$4" --device "$6" --dim "$3" --facts "$1" --width "$2" --tied \
    --map permutation --epochs "$5" --seed 1 --progress none --out "$7" >> "$OUTDIR/hebb.log" 2>&1
}

echo "== validation: GPU vs CPU on F=64 m=256 d=16, 1000 epochs (trains to 100%)" | tee "$OUTDIR/validation.txt"
status=0
rm -f "$OUTDIR/val_cpu.h5"
train 64 256 16 f32 1000 cpu "$OUTDIR/val_cpu.h5" || { echo "hebb train --device cpu failed (see hebb.log)"; exit 1; }
read -r _ c_acc c_loss _ _ _ < <(summary "$OUTDIR/val_cpu.h5")
for P in $PRECISIONS; do
  rm -f "$OUTDIR/val_$P.h5"
  if ! train 64 256 16 "$P" 1000 cuda "$OUTDIR/val_$P.h5"; then
    echo "  $P: hebb train --device cuda FAILED (see hebb.log)" | tee -a "$OUTDIR/validation.txt"; status=1; continue
  fi
  read -r _ g_acc g_loss _ g_path _ < <(summary "$OUTDIR/val_$P.h5")
  tol=1e-3; [ "$P" = tf32 ] && tol=3e-2; [ "$P" = bf16 ] && tol=5e-2
  verdict=$("$H5PY" -c "import sys; ca,cl,ga,gl,t=map(float,sys.argv[1:]); print('PASS' if ca==ga and abs(gl-cl)<=t*abs(cl) else 'FAIL')" \
            "$c_acc" "$c_loss" "$g_acc" "$g_loss" "$tol")
  [ "$verdict" = PASS ] || status=1
  printf '  %-5s %-18s accuracy %s (cpu %s)  final_loss %s (cpu %s, rel tol %s)  %s\n' "$P" "$g_path" "$g_acc" \
    "$c_acc" "$g_loss" "$c_loss" "$tol" "$verdict" | tee -a "$OUTDIR/validation.txt"
done

TABLE=$OUTDIR/table.txt
{
  echo "== GD training, $EPOCHS epochs, tied sphere table, permutation map (memcap: /summary wall_s and train_loop_s; torch: CUDA events)"
  printf '%-18s %-6s %-5s %-22s %10s %10s %10s %10s %10s %11s %11s %14s\n' "F,m,d" round prec "memcap path/kernel" \
    "wall_s" "loop_s" "torch_s" ratio_wall ratio_loop "acc_memcap" "acc_torch" "torch_impl"
} | tee "$TABLE"
ratio() { "$H5PY" -c "import sys
try: print('%.1fx' % (float(sys.argv[2]) / float(sys.argv[1])))
except Exception: print('-')" "$1" "$2"; }
# median FORMAT VALUE...: the median of the numbers among the values ('12.3x' counts as 12.3; '-' and other
# non-numbers are skipped) printed with FORMAT, or '-'
median() { "$H5PY" -c "import sys, statistics
v = []
for a in sys.argv[2:]:
    try: v.append(float(a.rstrip('x')))
    except ValueError: pass
print((sys.argv[1] % statistics.median(v)) if v else '-')" "$@"; }
for size in $SIZES; do
  IFS=: read -r F M D <<< "$size"
  declare -A col=()  # "P peer" -> space-separated per-round values of wall, loop, torch, ratio_wall, ratio_loop
  for ((r = 1; r <= ROUNDS; r++)); do
    tt="- - - -"; tc="- - - -"
    if [ -n "$TPY" ]; then
      "$TPY" "$HERE/gd_torch.py" --dim "$D" --facts "$F" --width "$M" --epochs "$EPOCHS" --seed 1 \
        > "$OUTDIR/torch_${F}_${M}_${D}_r$r.json" 2>> "$OUTDIR/torch.log"
      tt=$(torch_fields "$OUTDIR/torch_${F}_${M}_${D}_r$r.json")
      if [ "$TORCH_COMPILE" = 1 ]; then
        "$TPY" "$HERE/gd_torch.py" --compile --dim "$D" --facts "$F" --width "$M" --epochs "$EPOCHS" --seed 1 \
          > "$OUTDIR/torch_compile_${F}_${M}_${D}_r$r.json" 2>> "$OUTDIR/torch.log"
        tc=$(torch_fields "$OUTDIR/torch_compile_${F}_${M}_${D}_r$r.json")
      fi
    fi
    read -r t_s t_acc _ _ <<< "$tt"
    read -r c_s c_acc _ _ <<< "$tc"
    for P in $PRECISIONS; do
      f="$OUTDIR/memcap_${F}_${M}_${D}_${P}_r$r.h5"
      rm -f "$f"
      if ! train "$F" "$M" "$D" "$P" "$EPOCHS" cuda "$f"; then
        printf '%-18s %-6s %-5s FAILED (see hebb.log)\n' "$F,$M,$D" "$r" "$P" | tee -a "$TABLE"; status=1; continue
      fi
      read -r m_s m_acc _ _ m_path m_loop < <(summary "$f")
      for peer in torch torch-compile; do
        if [ "$peer" = torch ]; then p_s=$t_s; p_acc=$t_acc; else p_s=$c_s; p_acc=$c_acc; fi
        [ "$peer" = torch-compile ] && [ "$TORCH_COMPILE" != 1 ] && continue
        rw=$(ratio "$m_s" "$p_s"); rl=$(ratio "$m_loop" "$p_s")
        printf '%-18s %-6s %-5s %-22s %10.3f %10.3f %10s %10s %10s %11s %11s %14s\n' "$F,$M,$D" "$r" "$P" "$m_path" \
          "$m_s" "$m_loop" "$p_s" "$rw" "$rl" "$m_acc" "$p_acc" "$peer" | tee -a "$TABLE"
        k="$P $peer"
        col[$k.path]=$m_path
        col[$k.wall]="${col[$k.wall]:-} $m_s"; col[$k.loop]="${col[$k.loop]:-} $m_loop"
        col[$k.torch]="${col[$k.torch]:-} $p_s"; col[$k.rw]="${col[$k.rw]:-} $rw"; col[$k.rl]="${col[$k.rl]:-} $rl"
      done
    done
  done
  if [ "$ROUNDS" -gt 1 ]; then
    for P in $PRECISIONS; do
      for peer in torch torch-compile; do
        k="$P $peer"
        [ -n "${col[$k.wall]:-}" ] || continue
        # shellcheck disable=SC2086  # the per-round lists split on purpose
        printf '%-18s %-6s %-5s %-22s %10s %10s %10s %10s %10s %11s %11s %14s\n' "$F,$M,$D" median "$P" \
          "${col[$k.path]}" "$(median %.3f ${col[$k.wall]})" "$(median %.3f ${col[$k.loop]})" \
          "$(median %.3f ${col[$k.torch]})" "$(median %.1fx ${col[$k.rw]})" "$(median %.1fx ${col[$k.rl]})" - - \
          "$peer" | tee -a "$TABLE"
      done
    done
  fi
  unset col
done
echo "ratio_wall = torch_s / wall_s, ratio_loop = torch_s / loop_s; logs and files in $OUTDIR"
exit $status
