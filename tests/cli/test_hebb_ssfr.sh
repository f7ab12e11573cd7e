#!/usr/bin/env bash
# End-to-end `hebb ssfr train` on the CPU: a tiny fact-adaptive run (whitened MLP, W_q/W_k only)
# learns to attend to the key and reaches eval accuracy >= 0.95 on map B; the accuracy numbers are
# sane (in [0, 1], final loss above the bounded-logit floor log(1 + (|V|-1) e^-2) of spec §7.1.8);
# a 20-step smoke run of the paper's setting (gd MLP, J = 9, T = 21); the identity MLP with V/O
# trainable, the residual and early stopping; an inserted-MLP file from hebb build; --config with a
# [ssfr-train] table and --print-config; the output
# opens in `hebb margin --in` and (with h5py) has its /summary, /runs/train and weights; a
# non-finite loss exits 4 naming the step; --device cuda without a GPU exits 5; no file on failure.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

# 1. Tiny fact-adaptive run: d 16, F 32, J 2 (vocabulary 32 + 2 + 1 = 35), m 64 > F (whitened interpolates).
"$HEBB" ssfr train --device cpu --mlp hebbian:whitened --dim 16 --facts 32 --width 64 --junk 2 --steps 201 \
  --batch 64 --lr 1e-2 --eval-batches 4 --progress none --out "$T/s.h5" >"$T/s.txt" 2>"$T/s.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/s.h5" ]' "tiny run failed (exit $rc): $(cat "$T/s.err")"
best=$(field best_acc "$T/s.txt")
best_train=$(field best_train_acc "$T/s.txt")
loss=$(field final_loss "$T/s.txt")
check 'ge "$best" 0.95 && ge 1 "$best"' "best_acc $best not in [0.95, 1]: $(cat "$T/s.txt")"
check 'ge "$best_train" 0.95 && ge 1 "$best_train"' "best_train_acc $best_train not in [0.95, 1]"
floor=$(awk 'BEGIN {printf "%.6f", log(1 + 34 * exp(-2))}')
check 'ge "$loss" "$floor" && ge 4 "$loss"' "final_loss $loss outside [$floor, 4] (bounded logits, §7.1.8)"
check 'grep -q "steps 201 " "$T/s.txt"' "steps_run != 201"
check 'grep -q "standalone accuracy A 1.0000, B 1.0000" "$T/s.err"' "MLP_A/MLP_B do not store every fact"

# The file opens in hebb margin --in (/facts with map A and /mlp = MLP_A).
"$HEBB" margin --device cpu --in "$T/s.h5" --convention raw >"$T/m.txt" 2>"$T/m.err"
rc=$?
check '[ $rc -eq 0 ] && [ "$(awk "NR==2 {print \$7}" "$T/m.txt")" = "1.000000" ]' \
  "hebb margin --in on the ssfr result (exit $rc): $(cat "$T/m.txt" "$T/m.err")"

cat >"$T/check.py" <<'PYEOF'
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    for c in ["best_acc", "best_train_acc", "final_loss", "steps_run", "final_acc", "mlp_acc_a", "mlp_acc_b",
              "width", "attn_params", "path"]:
        assert c in s and s[c].shape == (1,), f"/summary/{c} missing or not one row"
    assert s["steps_run"][0] == 201 and s["attn_params"][0] == 2 * 16 * 16
    r = f["runs/train"]
    assert r["loss"].shape == (201,) and r["batch_accuracy"].shape == (201,)
    assert list(r["eval_step"][()]) == [0, 100, 200]
    acc = r["eval_accuracy"][()]
    assert abs(max(acc) - s["best_acc"][0]) < 1e-12 and all(0 <= a <= 1 for a in acc)
    assert max(r["train_accuracy"][()]) == s["best_train_acc"][0]
    assert set(r["weights"].keys()) == {"W_q", "W_k"} and r["weights/W_q"].shape == (16, 16)
    assert r["embeddings"].shape == (35, 16) and r["map_b"].shape == (32,)
    assert r.attrs["trainable"] in ("qk", b"qk") and r.attrs["eval_batches"] == 4
    assert sorted(r["map_b"][()]) == list(range(32))
PYEOF
bash "$SRC/experiments/plots/with_python.sh" "$T/check.py" "$T/s.h5" >"$T/py.txt" 2>&1
rc=$?
if [ $rc -eq 77 ]; then echo "note: no h5py, HDF5 layout checks skipped"; else check '[ $rc -eq 0 ]' "layout: $(cat "$T/py.txt")"; fi

# 2. 20-step smoke run of the paper's setting (gd = gd:transformer MLP, J = V_J = 9, T = 21), small sizes.
"$HEBB" ssfr train --device cpu --mlp gd --dim 8 --facts 16 --steps 20 --batch 32 --progress none \
  --out "$T/smoke.h5" >"$T/smoke.txt" 2>"$T/smoke.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/smoke.h5" ]' "20-step smoke run failed (exit $rc): $(cat "$T/smoke.err")"
check 'grep -q "mlp gd:transformer .* J 9 " "$T/smoke.txt" && grep -q "steps 20 " "$T/smoke.txt"' \
  "smoke run: $(cat "$T/smoke.txt")"
b=$(field best_acc "$T/smoke.txt")
check 'ge "$b" 0 && ge 1 "$b"' "smoke best_acc $b not in [0, 1]"

# 3. Identity MLP (attention only, identity map), V/O trainable, residual, early stop at 0.99.
"$HEBB" ssfr train --device cpu --mlp identity --trainable qkvo --attn-residual --early-stop --lr 3e-2 --dim 16 \
  --facts 32 --junk 3 --steps 3000 --batch 64 --eval-batches 2 --progress none --out "$T/id.h5" >"$T/id.txt" 2>"$T/id.err"
rc=$?
check '[ $rc -eq 0 ] && grep -q "(early stop)" "$T/id.txt"' "identity run did not stop early (exit $rc): $(cat "$T/id.txt" "$T/id.err")"
check 'ge "$(field best_acc "$T/id.txt")" 0.99' "identity run best_acc < 0.99"

# 4. An inserted-MLP file from hebb build (tied table, random permutation): d and F come from the file.
"$HEBB" build --device cpu --method hebbian:whitened --dim 16 --facts 32 --width 64 --tied --map permutation \
  --out "$T/model.h5" >/dev/null 2>&1 || { echo "FAIL: hebb build"; fail=1; }
"$HEBB" ssfr train --device cpu --mlp "$T/model.h5" --junk 2 --steps 101 --batch 64 --lr 1e-2 --eval-batches 4 \
  --progress none --out "$T/f.h5" >"$T/f.txt" 2>"$T/f.err"
rc=$?
check '[ $rc -eq 0 ] && grep -q " d 16  F 32 " "$T/f.txt"' "file run (exit $rc): $(cat "$T/f.txt" "$T/f.err")"
check 'ge "$(field best_train_acc "$T/f.txt")" 0.9' "file run best_train_acc < 0.9: $(cat "$T/f.txt")"

# Config files: a [ssfr-train] table is read, [train] (hebb train's) is skipped; --print-config reads back.
printf 'steps = 7\n[ssfr-train]\ndim = 8\nfacts = 16\njunk = 1\n[train]\nepochs = 3\n' >"$T/c.toml"
"$HEBB" ssfr train --device cpu --config "$T/c.toml" --mlp identity --batch 8 --print-config "$T/p.toml" 2>"$T/c.err"
check 'grep -q "^dim = 8" "$T/p.toml" && grep -q "^steps = 7" "$T/p.toml" && grep -q "^mlp = \"identity\"" "$T/p.toml"' \
  "--config [ssfr-train] / --print-config: $(cat "$T/c.err" "$T/p.toml" 2>/dev/null)"
"$HEBB" ssfr train --config "$T/p.toml" --progress none --out "$T/c.h5" >"$T/c.txt" 2>"$T/c.err"
check 'grep -q " d 8  F 16  J 1 " "$T/c.txt" && grep -q "steps 7 " "$T/c.txt"' "--config round trip: $(cat "$T/c.txt" "$T/c.err")"

# 5. Failures: non-finite loss (exit 4, the step and the last finite loss), no GPU (exit 5); no file left.
"$HEBB" ssfr train --device cpu -q --mlp identity --lr 1e300 --dim 8 --facts 16 --junk 1 --steps 5 --batch 8 \
  --out "$T/nan.h5" >/dev/null 2>"$T/nan.err"
rc=$?
check '[ $rc -eq 4 ] && grep -q "non-finite loss at step 1 (last finite loss .* at step 0)" "$T/nan.err" && [ ! -e "$T/nan.h5" ]' \
  "NaN run: exit $rc, $(cat "$T/nan.err")"
"$HEBB" ssfr train --device cuda -q --mlp identity --dim 8 --facts 16 --junk 1 --steps 2 --batch 8 --out "$T/gpu.h5" \
  >/dev/null 2>"$T/gpu.err"
rc=$?
if [ $rc -eq 0 ]; then
  check '[ -s "$T/gpu.h5" ]' "--device cuda succeeded without a result"
else
  check '[ $rc -eq 5 ] && [ ! -e "$T/gpu.h5" ] && [ $(wc -l <"$T/gpu.err") -eq 1 ]' \
    "--device cuda without a usable GPU / CUDA path: exit $rc (expected 5), $(cat "$T/gpu.err")"
fi
ls "$T" | grep -q "tmp-" && { echo "FAIL: temporary files left: $(ls "$T")"; fail=1; }

[ "$fail" -eq 0 ] && echo "test_hebb_ssfr: all passed"
exit "$fail"
