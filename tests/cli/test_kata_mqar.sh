#!/usr/bin/env bash
# End-to-end `kata mqar train` on the CPU (issue 12, acceptance item 4): a tiny MQAR training
# (2 layers, d_model 64, T = 64, K = 4, V = 8192, 400 steps at lr 1e-2) reaches accuracy >= 0.9 on its
# slice in under 2 minutes of training for softmax and for KATA-M2 (asserted from stdout and, with
# h5py, from /summary and /runs/train of the HDF5 file); --dry-run prints Table 2's parameter counts and
# state sizes for the paper's d_model = 128 models; --device cuda trains on a GPU (exit 5 without one); bad input
# exits 2 with one line and no file.
set -u
: "${KATA:?set KATA to the kata executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

# 1. Dry runs: Table 2's #params and state (spec §2.9, §2.10) for the issue's command line.
dry() {
  "$KATA" mqar train --device cpu --mixer "$1" --d-model 128 --seq-len 256 --keys 16 --lr 1e-3 --dry-run "${@:2}" \
    >"$T/dry_$1.txt" 2>"$T/dry_$1.err"
}
for row in "softmax 1132928 1048576" "m1 1134016 266240" "m2 1134016 135168" "m4 1134016 69632" \
  "sigma2 1134016 67584" "sigma4 1134016 17408" "delta-m1 1134272 266240" "delta-m2 1134272 135168"; do
  read -r mixer want_params want_state <<<"$row"
  dry "$mixer"
  rc=$?
  check '[ $rc -eq 0 ]' "dry run --mixer $mixer failed (exit $rc): $(cat "$T/dry_$mixer.err")"
  got_params=$(awk '/^  params/ {print $2}' "$T/dry_$mixer.txt")
  got_state=$(awk '/^  state/ {print $2}' "$T/dry_$mixer.txt")
  echo "dry run --mixer $mixer: params $got_params (Table 2: $want_params), state $got_state (Table 2: $want_state)"
  check '[ "$got_params" = "$want_params" ]' "--mixer $mixer: params $got_params != $want_params"
  check '[ "$got_state" = "$want_state" ]' "--mixer $mixer: state $got_state != $want_state"
done
check 'grep -q "train     256:16:20000" "$T/dry_m2.txt"' "dry run: training slice not 256:16:20000"
check 'grep -q "eval      512:128:1000,1024:256:1000,2048:512:1000,3072:768:1000,4096:1024:1000" "$T/dry_m2.txt"' \
  "dry run: evaluation slices are not the §4.1 diagonal"
# The gated variants of §2.11 (CPU only; §2.10: GatedKATA +258, GatedDeltaKATA +516) and RoPE (no parameters).
for row in "gated-m2 1134274 135168" "convex-m2 1134274 135168" "gated-delta-m2 1134532 135168"; do
  read -r mixer want_params want_state <<<"$row"
  dry "$mixer" --rope
  rc=$?
  check '[ $rc -eq 0 ]' "dry run --mixer $mixer --rope failed (exit $rc): $(cat "$T/dry_$mixer.err")"
  got_params=$(awk '/^  params/ {print $2}' "$T/dry_$mixer.txt")
  got_state=$(awk '/^  state/ {print $2}' "$T/dry_$mixer.txt")
  echo "dry run --mixer $mixer --rope: params $got_params (§2.10: $want_params), state $got_state"
  check '[ "$got_params" = "$want_params" ]' "--mixer $mixer: params $got_params != $want_params"
  check '[ "$got_state" = "$want_state" ]' "--mixer $mixer: state $got_state != $want_state"
  check 'grep -q "rope 10000" "$T/dry_$mixer.txt"' "--mixer $mixer --rope: the plan does not show RoPE"
done
check '[ -z "$(ls "$T"/*.h5 2>/dev/null)" ]' "a dry run wrote a file"
"$KATA" mqar train --device cpu --mixer m2 --dry-run >"$T/mix.txt" 2>&1
check 'grep -q "train     64:4:100000,128:8:20000,256:16:20000,256:32:20000,256:64:20000" "$T/mix.txt"' \
  "default training data is not the §4.1 mixture: $(cat "$T/mix.txt")"

# 2. The tiny training (CI acceptance): softmax and KATA-M2.
TINY=(--device cpu --d-model 64 --seq-len 64 --keys 4 --train-examples 25600 --epochs 1 --batch 64 --lr 1e-2
  --eval-slices 64:4:500 --progress none)
cat >"$T/check.py" <<'PYEOF'
import sys, h5py
path, params = sys.argv[1], int(sys.argv[2])
with h5py.File(path, "r") as f:
    s = f["summary"]
    for c in ["mixer", "params", "state", "acc_T64_K4", "loss_T64_K4", "eval_avg", "ood_avg", "cap_0.99", "cap_0.90",
              "steps", "train_s", "path", "lr", "training_set"]:
        assert c in s and s[c].shape == (1,), f"/summary/{c} missing or not one row"
    assert s["training_set"][0] == b"fixed", s["training_set"][0]  # MQAR: one fixed set without --fresh-examples
    acc = s["acc_T64_K4"][0]
    assert acc >= 0.9, f"accuracy {acc} < 0.9"
    assert s["train_s"][0] < 120, f"training took {s['train_s'][0]} s"
    assert s["params"][0] == params and s["steps"][0] == 400 and s["cap_0.90"][0] == 4
    r = f["runs/train"]
    assert r["loss"].shape == (400,) and r["lr"][0] == 1e-2 and r["loss"][-1] < r["loss"][0]
    assert r["eval_accuracy"].shape == (1, 1) and abs(r["eval_accuracy"][0, 0] - acc) < 1e-15
    assert list(r["eval_T"][()]) == [64] and list(r["eval_K"][()]) == [4]
PYEOF
for row in "softmax 545984" "m2 546560"; do
  read -r mixer want_params <<<"$row"
  "$KATA" mqar train --mixer "$mixer" "${TINY[@]}" --out "$T/$mixer.h5" >"$T/$mixer.txt" 2>"$T/$mixer.err"
  rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/$mixer.h5" ]' "tiny --mixer $mixer failed (exit $rc): $(cat "$T/$mixer.err")"
  acc=$(awk '/T=64,K=4/ {print $3}' "$T/$mixer.txt")
  train_s=$(field train "$T/$mixer.txt")
  echo "tiny MQAR --mixer $mixer: accuracy $acc, training $train_s s"
  check 'ge "$acc" 0.9' "--mixer $mixer: accuracy $acc < 0.9 on T=64,K=4: $(cat "$T/$mixer.txt")"
  check 'ge 120 "$train_s"' "--mixer $mixer: training took $train_s s (>= 2 minutes)"
  check 'grep -q "params $want_params " "$T/$mixer.txt"' "--mixer $mixer: params != $want_params"
  bash "$SRC/experiments/plots/with_python.sh" "$T/check.py" "$T/$mixer.h5" "$want_params" >"$T/py.txt" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then echo "note: no h5py, HDF5 checks skipped"; else check '[ $rc -eq 0 ]' "HDF5 --mixer $mixer: $(cat "$T/py.txt")"; fi
done

# 3. --device cuda: with a GPU a short run writes path cuda:f32; without one, exit 5, one line, no file.
"$KATA" mqar train --device cuda --mixer m2 --d-model 64 --seq-len 64 --keys 4 --train-examples 640 --epochs 1 \
  --batch 64 --eval-slices 64:4:100 --out "$T/cuda.h5" >"$T/cuda.txt" 2>"$T/cuda.err"
rc=$?
if [ $rc -eq 0 ]; then
  check 'grep -q "path cuda:f32" "$T/cuda.txt" && [ -e "$T/cuda.h5" ]' "--device cuda: $(cat "$T/cuda.txt")"
else
  check '[ $rc -eq 5 ] && [ "$(wc -l <"$T/cuda.err")" -eq 1 ] && grep -q -- "--device cuda" "$T/cuda.err" && [ ! -e "$T/cuda.h5" ]' \
    "--device cuda: exit $rc, $(cat "$T/cuda.err")"
fi

# 4. Bad input: exit 2, one line on stderr, no file.
bad() {
  "$KATA" mqar train --device cpu "$@" --out "$T/bad.h5" >/dev/null 2>"$T/bad.err"
  local rc=$?
  [ $rc -eq 2 ] && [ "$(grep -vc '^device: ' "$T/bad.err")" -eq 1 ] && [ ! -e "$T/bad.h5" ]
}
check 'bad --mixer m3' "--mixer m3 accepted"
check 'bad --seq-len 64' "--seq-len without --keys accepted"
check 'bad --seq-len 64 --keys 32' "4K > T accepted"
check 'bad --seq-len 64 --keys 4 --train-slices 64:4:10' "--seq-len with --train-slices accepted"
check 'bad --heads 3' "--heads 3 (not dividing 128) accepted"
check 'bad --ow-examples fixed' "--ow-examples with --task mqar accepted"
check 'bad --task overwrite --ow-examples fixed --fresh-examples' "--ow-examples fixed with --fresh-examples accepted"
check 'bad --task overwrite --ow-examples often' "--ow-examples often accepted"

# 5. --task overwrite draws a new training set every epoch unless --ow-examples fixed (the plan and /summary say so).
"$KATA" mqar train --device cpu --task overwrite --dry-run >"$T/ow.txt" 2>&1
"$KATA" mqar train --device cpu --task overwrite --ow-examples fixed --dry-run >"$T/owf.txt" 2>&1
check 'grep -q "new training examples every epoch" "$T/ow.txt" && grep -q "one fixed training set" "$T/owf.txt"' \
  "--task overwrite: the plan does not show the training set: $(grep schedule "$T/ow.txt" "$T/owf.txt")"

# --print-config reads back (its file holds every default, --ow-examples and --train-examples included) to the
# same plan; a --rope-base without --rope is refused, the printed default is not
for extra in "" "--task overwrite" "--seq-len 64 --keys 4 --train-examples 100" "--rope --rope-base 500"; do
  rm -f "$T/pc.toml"
  # shellcheck disable=SC2086
  "$KATA" mqar train --device cpu $extra --print-config "$T/pc.toml" >/dev/null 2>&1
  # shellcheck disable=SC2086
  "$KATA" mqar train --device cpu $extra --dry-run >"$T/pc_a.txt" 2>&1
  "$KATA" mqar train --device cpu --config "$T/pc.toml" --dry-run >"$T/pc_b.txt" 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && cmp -s "$T/pc_a.txt" "$T/pc_b.txt"' \
    "--print-config [$extra] does not read back (exit $rc): $(tail -2 "$T/pc_b.txt")"
done
"$KATA" mqar train --device cpu --rope-base 500 --dry-run >/dev/null 2>"$T/rb.err"
rc=$?
check '[ $rc -eq 2 ] && grep -q "changes nothing without --rope" "$T/rb.err"' "--rope-base without --rope (exit $rc)"

exit $fail
