#!/usr/bin/env bash
# End-to-end `kata mqar table2` and `kata induction` on the CPU (issue 12): the full preset's dry run
# (33 trainings; Table 2's parameter counts and state sizes; no file); the smoke preset (22 tiny
# trainings, two at once) with /summary, /runs and the best-learning-rate table /best read back; shards
# 0/2 and 1/2 merged equal the full run; a training killed (SIGKILL) after a checkpoint and resumed with
# --resume continues from that checkpoint and ends with the uninterrupted run's numbers (bit-identical
# on the CPU); the induction smoke run with its phase-step table; the two plot scripts (kata_table2.py over
# several files = /best, a training given twice refused).
set -u
: "${KATA:?set KATA to the kata executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export MEMCAP_PRESETS="$SRC/experiments/presets"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
PY="$SRC/experiments/plots/with_python.sh"
py() {  # py SCRIPT ARGS...: runs an h5py check; exit 77 (no h5py) is a note, anything else must be 0
  bash "$PY" "$@" >"$T/py.txt" 2>&1
  local rc=$?
  if [ $rc -eq 77 ]; then echo "note: no h5py, HDF5 checks skipped"; return 0; fi
  [ $rc -eq 0 ] || { echo "FAIL: $* -> $(cat "$T/py.txt")"; fail=1; }
  cat "$T/py.txt"
}

# 1. The paper's preset, planned only.
"$KATA" mqar table2 --preset table2 --device cpu --dry-run --out "$T/full.h5" >"$T/dry.txt" 2>"$T/dry.err"
rc=$?
check '[ $rc -eq 0 ]' "table2 dry run failed (exit $rc): $(cat "$T/dry.err")"
check 'grep -q "kata mqar table2 plan: 33 trainings" "$T/dry.txt"' "dry run: not 33 trainings: $(head -3 "$T/dry.txt")"
check 'grep -q "jobs: 33 in the plan" "$T/dry.txt"' "dry run: no job list"
for row in "softmax 1132928 1048576" "m1 1134016 266240" "m2 1134016 135168" "sigma2 1134016 67584" \
  "m4 1134016 69632" "sigma4 1134016 17408" "delta-m1 1134272 266240" "delta-m2 1134272 135168"; do
  read -r mixer want_params want_state <<<"$row"
  check 'grep -Eq "^  mqar +$mixer +params +$want_params +state +$want_state " "$T/dry.txt"' \
    "dry run: $mixer not params $want_params state $want_state"
done
check 'grep -Eq "^  overwrite +delta-m2 " "$T/dry.txt"' "dry run: no overwrite row for delta-m2"
check 'grep -q "task=mqar/mixer=sigma4/lr=0.003/seed=0" "$T/dry.txt"' "dry run: job key missing"
check 'grep -q "steps 22624 (32 epochs x 707)" "$T/dry.txt"' "dry run: not 32 epochs of 707 steps"
check 'grep -q "backbone zoology (§4.4: BaseConv and mixer layers alternate, Identity state mixer), 2 layers" \
  "$T/dry.txt"' \
  "dry run: no zoology backbone"
# E.2's backbone (preset induction-e2): a mixer and an MLP in both layers; parameter counts at d_model 128, V = 256:
# 256·128 + 2·128 + 2·(12·128² + 13·128) for softmax (the Σ2 mixer is 2,112 more: no biases, short convs, RMSNorm).
"$KATA" induction --preset induction-e2 --device cpu --dry-run --out "$T/e2.h5" >"$T/e2.txt" 2>"$T/e2.err"
rc=$?
check '[ $rc -eq 0 ] && [ ! -e "$T/e2.h5" ]' "induction-e2 dry run failed (exit $rc): $(cat "$T/e2.err")"
check 'grep -q "backbone transformer (E.2 as read: a mixer and a 4x GELU MLP in every layer), 2 layers" "$T/e2.txt"' \
  "induction-e2 dry run: no transformer backbone: $(cat "$T/e2.txt")"
check 'grep -Eq "^  induction +softmax +params +429568 " "$T/e2.txt"' "induction-e2: softmax params not 429568"
check 'grep -Eq "^  induction +sigma2 +params +431680 " "$T/e2.txt"' "induction-e2: sigma2 params not 431680"
# E.2's other reading (--backbone zoology-mlp): the §4.4 layers (softmax 117,120 at V = 256) plus an MLP in each of
# the two, 2·(8·128² + 5·128) = 263,424 more
"$KATA" induction --preset induction-e2 --backbone zoology-mlp --device cpu --dry-run --out "$T/e2z.h5" \
  >"$T/e2z.txt" 2>&1
check 'grep -q "backbone zoology-mlp (BaseConv and mixer layers alternate, a 4x GELU MLP in every layer), 2 layers" \
  "$T/e2z.txt"' "induction-e2 --backbone zoology-mlp dry run: $(cat "$T/e2z.txt")"
check 'grep -Eq "^  induction +softmax +params +380544 " "$T/e2z.txt"' "zoology-mlp: softmax params not 380544"
check '[ ! -e "$T/full.h5" ] && [ ! -e "$T/full.h5.partial" ]' "a dry run wrote a file"
check 'grep -q "^  training  one training set, repeated every epoch" "$T/e2.txt"' "induction-e2: training set not fixed"
# Past E.2's budget (preset induction-long): softmax and Σ2 at T = 1024 and 2048, two seeds, 16,000 steps, a new set
# every epoch
"$KATA" induction --preset induction-long --device cpu --dry-run --out "$T/long.h5" >"$T/long.txt" 2>&1
check 'grep -q "kata induction plan: 8 trainings" "$T/long.txt" && [ ! -e "$T/long.h5" ]' \
  "induction-long dry run: $(head -3 "$T/long.txt")"
check 'grep -q "steps 16000 (64 epochs x 250)" "$T/long.txt"' "induction-long: not 16,000 steps"
check 'grep -q "^  training  a new training set every epoch" "$T/long.txt"' "induction-long: training set not fresh"
check 'grep -q "mixer=sigma2/T=2048/lr=0.001/seed=1" "$T/long.txt"' "induction-long: no second seed of Σ2 at 2048"

# 1b. The H13 preset (orthant / Lorentz collapse past K = d_head): 3 mixers x 3 rates, evaluated at T = 1024,
# K = 16 ... 256, no overwrite trainings; planned only.
"$KATA" mqar table2 --preset h13 --device cpu --dry-run --out "$T/h13.h5" >"$T/dry13.txt" 2>"$T/dry13.err"
rc=$?
check '[ $rc -eq 0 ]' "h13 dry run failed (exit $rc): $(cat "$T/dry13.err")"
check 'grep -q "kata mqar table2 plan: 9 trainings" "$T/dry13.txt"' "h13 dry run: not 9 trainings: $(head -3 "$T/dry13.txt")"
check 'grep -Eq "^  mqar +orthant +params +1134016 +state +8192 " "$T/dry13.txt"' "h13 dry run: orthant row"
check 'grep -q "eval 1024:16:1000,1024:32:1000" "$T/dry13.txt"' "h13 dry run: evaluation slices"
check '! grep -q "^  overwrite" "$T/dry13.txt"' "h13 dry run: overwrite trainings planned"

# 2. The smoke preset: 8 MQAR rows x 2 learning rates + 3 overwrite rows x 2, two trainings at once.
SMOKE=(--preset table2-smoke --device cpu --progress none)
t0=$(date +%s.%N)
"$KATA" mqar table2 "${SMOKE[@]}" --jobs 2 --out "$T/t2.h5" >"$T/t2.txt" 2>"$T/t2.err"
rc=$?
t1=$(date +%s.%N)
echo "table2 smoke: exit $rc in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s"
check '[ $rc -eq 0 ] && [ -s "$T/t2.h5" ]' "table2 smoke failed (exit $rc): $(tail -3 "$T/t2.err")"
check 'grep -q "^Table 2 (best learning rate per row" "$T/t2.txt"' "no Table 2 printed"
check '[ "$(grep -Ec "^(softmax|m1|m2|sigma2|m4|sigma4|delta-m1|delta-m2) " "$T/t2.txt")" -eq 8 ]' \
  "Table 2 printout has not 8 rows: $(cat "$T/t2.txt")"
cat >"$T/t2.py" <<'PYEOF'
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s, b = f["summary"], f["best"]
    n = len(s["job"])
    assert n == 22, n
    task = [x.decode() for x in s["task"][()]]
    mixer = [x.decode() for x in s["mixer"][()]]
    status = [x.decode() for x in s["status"][()]]
    assert task.count("mqar") == 16 and task.count("overwrite") == 6
    assert all(x in ("done", "diverged") for x in status), status
    for c in ["lr", "params", "state", "eval_avg", "ood_avg", "cap_0.99", "cap_0.90", "acc_T32_K8", "acc_T48_K12",
              "ow_acc_T48_K6", "resumed_step", "steps", "path", "rope", "rope_base", "training_set"]:
        assert c in s and s[c].shape == (n,), c
    # --ow-examples fresh (the default): a new training set every epoch for the overwrite trainings only
    tset = [x.decode() for x in s["training_set"][()]]
    assert all((t == "fresh") == (k == "overwrite") for t, k in zip(tset, task)), list(zip(task, tset))
    for i in range(n):
        mq = task[i] == "mqar"
        if status[i] != "done":
            continue
        a = [s["acc_T32_K8"][i], s["acc_T48_K12"][i]] if mq else [s["ow_acc_T48_K6"][i]]
        assert all(0 <= x <= 1 for x in a), (i, a)
        assert abs(s["eval_avg"][i] - sum(a) / len(a)) < 1e-12
        assert math.isnan(s["ow_acc_T48_K6"][i] if mq else s["acc_T32_K8"][i])
        assert s["steps"][i] == 8 and s["resumed_step"][i] == 0
        assert s["path"][i].decode() == "cpu:f32"
        g = f["runs"][s["job"][i].decode().replace("/", ",").replace(".", "p")]
        assert g["loss"].shape == (8,) and g["eval_accuracy"].shape == (2, len(a))
        assert abs(g["eval_accuracy"][-1, 0] - a[0]) < 1e-15
    bm = [x.decode() for x in b["mixer"][()]]
    assert bm == ["softmax", "m1", "m2", "sigma2", "m4", "sigma4", "delta-m1", "delta-m2"], bm
    for i, m in enumerate(bm):
        rows = [k for k in range(n) if mixer[k] == m and task[k] == "mqar" and status[k] == "done"]
        best = max(rows, key=lambda k: s["eval_avg"][k])
        assert b["mqar_lr"][i] == s["lr"][best] and b["acc_T32_K8"][i] == s["acc_T32_K8"][best], m
        assert b["params"][i] == s["params"][rows[0]] and b["state"][i] == s["state"][rows[0]]
        has_ow = m in ("softmax", "m2", "delta-m2")
        assert (b["ow_seeds"][i] == 1) == has_ow and math.isnan(b["ow_avg"][i]) != has_ow, m
    print("table2 smoke: 22 rows, /best", ", ".join(f"{m} {b['ood_avg'][i]:.3f}" for i, m in enumerate(bm)))
PYEOF
py "$T/t2.py" "$T/t2.h5"

# 3. Shards 0/2 and 1/2 (one training at a time), merged: the same table as the full run.
for i in 0 1; do
  "$KATA" mqar table2 "${SMOKE[@]}" --shard "$i/2" --out "$T/sh.h5" >"$T/sh$i.txt" 2>"$T/sh$i.err"
  rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/sh.shard${i}of2.h5" ]' "shard $i/2 failed (exit $rc): $(tail -2 "$T/sh$i.err")"
done
"$KATA" merge "$T/sh.shard0of2.h5" "$T/sh.shard1of2.h5" --out "$T/merged.h5" >"$T/merge.txt" 2>"$T/merge.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/merged.h5" ]' "merge failed (exit $rc): $(cat "$T/merge.err")"
cat >"$T/same.py" <<'PYEOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
skip = {"wall_s", "train_s", "eval_s"}
for g in ("summary", "best"):
    ka, kb = set(a[g]) - skip, set(b[g]) - skip
    assert ka == kb, (g, ka ^ kb)
    for k in ka:
        x, y = a[g][k][()], b[g][k][()]
        assert x.shape == y.shape and (np.array_equal(x, y) if x.dtype.kind in "SOU" else np.array_equal(x, y, equal_nan=True)), (g, k)
for j in a["runs"]:
    for k in ("loss", "eval_accuracy", "grad_norm"):
        assert np.array_equal(a["runs"][j][k][()], b["runs"][j][k][()]), (j, k)
print(f"{sys.argv[2]} equals {sys.argv[1]}: /summary, /best and the curves of {len(a['runs'])} runs")
PYEOF
py "$T/same.py" "$T/t2.h5" "$T/merged.h5"
# The figure script combines result files row by row (rows run as sweeps of their own): over t2.h5 alone and over
# the two shard files it chooses the same learning rates and means as `kata mqar table2`'s /best, cell for cell;
# the same training given twice is refused.
cat >"$T/best.py" <<'PYEOF'
import math, sys
import h5py
sys.path.insert(0, sys.argv[1])
import kata_table2 as kt
ref = h5py.File(sys.argv[2], "r")["best"]
table, mq, ow = kt.best_rows(kt.combine(sys.argv[3:]))
names = [x.decode() for x in ref["mixer"][()]]
assert [r["row"] for r in table] == names, ([r["row"] for r in table], names)
n = 0
for k in ref:
    if k == "mixer":
        continue
    for i, r in enumerate(table):
        a, b = float(ref[k][i]), float(r[k])
        assert (math.isnan(a) and math.isnan(b)) or a == b, (k, names[i], a, b)
        n += 1
assert n > 80, n
print(f"kata_table2.py over {len(sys.argv) - 3} file(s) = /best of {sys.argv[2]}: {n} cells")
PYEOF
py "$T/best.py" "$SRC/experiments/plots" "$T/t2.h5" "$T/t2.h5"
# The ordering rule (cells the paper has in (0.1, 0.9)): rows that keep the paper's order pass, a swapped pair is
# named, near-ties of the paper (gap <= 0.01) are not judged.
cat >"$T/order.py" <<'PYEOF'
import math, sys
sys.path.insert(0, sys.argv[1])
import kata_table2 as kt
cols = [(K, 8 * K, f"ow_acc_T{8 * K}_K{K}") for K in kt.PAPER_OW_K]
def row(name, vals):
    r = {"row": name, "mixer": name, "ow_seeds": 1, "mqar_seeds": 0}
    r.update({c: v for (_, _, c), v in zip(cols, vals)})
    return r
# paper: M2 0.521 / 0.509 / 0.492 / 0.436, softmax 0.513 / 0.506 / 0.499 / 0.491, sigma4 0.517 / 0.493 / 0.364 / 0.226
good = [row("m2", [0.52, 0.40, 0.40, 0.30]), row("softmax", [0.51, 0.50, 0.49, 0.49]),
        row("sigma4", [0.50, 0.39, 0.35, 0.20])]
checked, wrong = kt.ordering(good, cols, True)
# judged pairs: M2-sigma4 at K = 64 (0.004: tie) no, 128 / 256 / 384 yes; softmax-sigma4 at 128 / 256 / 384;
# M2-softmax at 384 only (0.008 / 0.003 / 0.007 are ties)
assert (checked, wrong) == (7, []), (checked, wrong)
bad = [dict(good[0]), good[1], good[2]]
bad[0][cols[3][2]] = 0.10  # M2 below sigma4 (0.20) at K = 384, where the paper has 0.436 > 0.226
checked, wrong = kt.ordering(bad, cols, True)
assert checked == 7 and len(wrong) == 1 and "K384" in wrong[0] and wrong[0].startswith("m2 "), wrong
print(f"kata_table2.py ordering: {checked} pairs judged, a swapped pair named: {wrong[0]}")
PYEOF
py "$T/order.py" "$SRC/experiments/plots"
# The seed spread under a row: max - min over the seeds of the best rate, per cell (none with one seed).
cat >"$T/spread.py" <<'PYEOF'
import contextlib, io, math, sys
sys.path.insert(0, sys.argv[1])
import kata_table2 as kt
c = "acc_T1024_K256"
def run(row, lr, seed, acc):
    return {"row": row, "task": "mqar", "lr": lr, "seed": seed, "status": "done", "eval_avg": acc, c: acc}
runs = [run("m2", 1e-3, 0, 0.90), run("m2", 1e-3, 1, 0.96), run("m2", 1e-2, 0, 0.50), run("m1", 1e-3, 0, 0.99)]
table, mq, ow = kt.best_rows(runs)
m2, m1 = table
assert m2["mqar_lr"] == 1e-3 and m2["mqar_seeds"] == 2 and abs(m2[c] - 0.93) < 1e-12, m2
assert abs(m2[c + ":spread"] - 0.06) < 1e-12 and math.isnan(m1[c + ":spread"]), (m2, m1)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    kt.print_table(table, mq, ow)
lines = buf.getvalue().splitlines()
spread = [l for l in lines if l.startswith("  seed spread")]
assert len(spread) == 1 and spread[0].split()[-1] == "0.060", lines
print("kata_table2.py seed spread: 0.060 under the two-seed row, none under the one-seed row")
PYEOF
py "$T/spread.py" "$SRC/experiments/plots"
py "$T/best.py" "$SRC/experiments/plots" "$T/t2.h5" "$T/sh.shard0of2.h5" "$T/sh.shard1of2.h5"
bash "$PY" "$SRC/experiments/plots/kata_table2.py" "$T/t2.h5" "$T/sh.shard0of2.h5" -o "$T/dup.png" >"$T/dup.txt" 2>&1
rc=$?
check '[ $rc -eq 77 ] || { [ $rc -eq 1 ] && grep -q "is in .*t2.h5 and .*shard0of2.h5: give each training once" "$T/dup.txt" &&
  [ ! -e "$T/dup.png" ]; }' "kata_table2.py took a training twice (exit $rc): $(tail -2 "$T/dup.txt")"

# --tasks splits the plan: the MQAR and the overwrite trainings run as two sweeps give, combined by the figure
# script, t2.h5's /best cell for cell.
"$KATA" mqar table2 "${SMOKE[@]}" --jobs 2 --tasks mqar --out "$T/t2mq.h5" >/dev/null 2>"$T/t2mq.err"
rc1=$?
"$KATA" mqar table2 "${SMOKE[@]}" --jobs 2 --tasks overwrite --out "$T/t2ow.h5" >/dev/null 2>"$T/t2ow.err"
rc2=$?
check '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]' "--tasks mqar / overwrite: exit $rc1 / $rc2: $(tail -2 "$T/t2ow.err")"
py "$T/best.py" "$SRC/experiments/plots" "$T/t2.h5" "$T/t2mq.h5" "$T/t2ow.h5"

# --ow-examples fixed: the overwrite trainings repeat one set (the first epoch is the same set either way, the
# second is not), recorded as training_set; an unknown value is refused before anything is written.
"$KATA" mqar table2 "${SMOKE[@]}" --tasks overwrite --mixers m2 --ow-mixers m2 --lrs 1e-2 --ow-examples fixed \
  --out "$T/t2fixed.h5" >/dev/null 2>"$T/t2fixed.err"
rc=$?
check '[ $rc -eq 0 ]' "--ow-examples fixed failed: $(tail -2 "$T/t2fixed.err")"
cat >"$T/fixed.py" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    sa, sb = a["summary"], b["summary"]
    assert [x.decode() for x in sa["training_set"][()]] == ["fixed"]
    j = [k for k in range(len(sb["job"])) if sb["job"][k] == sa["job"][0]]
    assert len(j) == 1 and sb["training_set"][j[0]] == b"fresh"
    la = a["runs"][sa["job"][0].decode().replace("/", ",").replace(".", "p")]["loss"][()]
    lb = b["runs"][sb["job"][j[0]].decode().replace("/", ",").replace(".", "p")]["loss"][()]
    assert (la[:4] == lb[:4]).all() and (la[4:] != lb[4:]).any(), (la, lb)
print("--ow-examples fixed: the first epoch as fresh, the second differs")
PYEOF
py "$T/fixed.py" "$T/t2fixed.h5" "$T/t2ow.h5"
# kata_table2.py keeps trainings on another training set as rows of their own ("m2/fixed-set"), and reads a file
# written before the training_set column from its /config (no --fresh-examples there: every training fixed).
cat >"$T/tset.py" <<'PYEOF'
import shutil, sys
import h5py
sys.path.insert(0, sys.argv[1])
import kata_table2 as kt
rows = {r["row"] for r in kt.combine([sys.argv[2], sys.argv[3]])}
assert rows == {"m2", "softmax", "delta-m2", "m2/fixed-set"}, rows
old = sys.argv[3] + ".old.h5"
shutil.copy(sys.argv[3], old)
with h5py.File(old, "r+") as f:
    del f["summary"]["training_set"]
rows = {r["row"] for r in kt.combine([old])}
assert rows == {"m2/fixed-set"}, rows
print("kata_table2.py: rows split by training set, old files read from /config")
PYEOF
py "$T/tset.py" "$SRC/experiments/plots" "$T/t2ow.h5" "$T/t2fixed.h5"
"$KATA" mqar table2 "${SMOKE[@]}" --tasks overwrite --ow-examples sometimes --out "$T/t2bad.h5" >/dev/null \
  2>"$T/t2bad.err"
rc=$?
check '[ $rc -eq 2 ] && [ ! -e "$T/t2bad.h5" ] && [ ! -e "$T/t2bad.h5.partial" ]' \
  "--ow-examples sometimes: not exit 2, or a file was created: $(tail -1 "$T/t2bad.err")"
"$KATA" mqar table2 "${SMOKE[@]}" --tasks overwrite --ow-examples fixed --fresh-examples --out "$T/t2bad.h5" \
  >/dev/null 2>"$T/t2bad.err"
rc=$?
check '[ $rc -eq 2 ] && [ ! -e "$T/t2bad.h5" ] && [ ! -e "$T/t2bad.h5.partial" ]' \
  "--ow-examples fixed --fresh-examples: not exit 2, or a file was created: $(tail -1 "$T/t2bad.err")"

# 4. Kill a training after its first checkpoint, resume: the same numbers as the uninterrupted run.
ONE=("${SMOKE[@]}" --mixers delta-m2 --ow-mixers none --lrs 1e-2 --epochs 24 --checkpoint-every 4)
"$KATA" mqar table2 "${ONE[@]}" --out "$T/ref.h5" >/dev/null 2>"$T/ref.err"
rc=$?; check '[ $rc -eq 0 ]' "uninterrupted run failed: $(tail -2 "$T/ref.err")"
"$KATA" mqar table2 "${ONE[@]}" --out "$T/kill.h5" >/dev/null 2>"$T/kill.err" &
pid=$!
for _ in $(seq 1 1000); do
  ls "$T/kill.h5.partial"/scratch-*-ckpt >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
kill -9 $pid 2>/dev/null
killed=$?
wait $pid 2>/dev/null
check '[ $killed -eq 0 ] && [ ! -e "$T/kill.h5" ] && ls "$T/kill.h5.partial"/scratch-*-ckpt >/dev/null 2>&1' \
  "the training was not killed after a checkpoint (finished too early?)"
"$KATA" mqar table2 "${ONE[@]}" --resume --out "$T/kill.h5" >/dev/null 2>"$T/resume.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/kill.h5" ] && grep -q "resuming a delta-m2 training from its checkpoint at step" "$T/resume.err"' \
  "resume failed or did not use the checkpoint (exit $rc): $(cat "$T/resume.err")"
echo "kill and resume: $(grep -o 'checkpoint at step [0-9]*' "$T/resume.err")"
cat >"$T/resumed.py" <<'PYEOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert b["summary"]["resumed_step"][0] > 0 and a["summary"]["resumed_step"][0] == 0
for k in ("acc_T32_K8", "acc_T48_K12", "eval_avg", "final_train_loss", "steps", "cap_0.90"):
    assert a["summary"][k][0] == b["summary"][k][0], k
ja, jb = list(a["runs"]), list(b["runs"])
assert ja == jb and len(ja) == 1
for k in ("loss", "accuracy", "lr", "grad_norm", "eval_step", "eval_accuracy", "eval_loss"):
    assert np.array_equal(a["runs"][ja[0]][k][()], b["runs"][jb[0]][k][()]), k
print(f"resumed from step {b['summary']['resumed_step'][0]}: final accuracy {b['summary']['eval_avg'][0]:.4f}, "
      f"loss {b['summary']['final_train_loss'][0]:.6f}, curves identical to the uninterrupted run")
PYEOF
py "$T/resumed.py" "$T/ref.h5" "$T/kill.h5"

# 5. Induction probe (smoke): phase steps per (mixer, T).
"$KATA" induction --preset induction-smoke --device cpu --progress none --out "$T/ind.h5" >"$T/ind.txt" 2>"$T/ind.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/ind.h5" ] && grep -q "^Induction phase steps" "$T/ind.txt"' \
  "kata induction failed (exit $rc): $(tail -3 "$T/ind.err")"
cat >"$T/ind.py" <<'PYEOF'
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s, t = f["summary"], f["induction"]
    assert len(s["job"]) == 4 and len(t["mixer"]) == 4
    # no --rope: rope 0 and base NaN in every row
    assert list(s["rope"][()]) == [0] * 4 and all(math.isnan(x) for x in s["rope_base"][()])
    for i in range(4):
        g = f["runs"][s["job"][i].decode().replace("/", ",").replace(".", "p")]
        acc, step = g["eval_accuracy"][()][:, 0], g["eval_step"][()]
        assert list(step) == [10, 20, 30, 40] and s["steps"][i] == 40
        hit = [st for st, a in zip(step, acc) if a >= 0.99]
        assert s["phase_step"][i] == (hit[0] if hit else -1)
        assert s["final_acc"][i] == acc[-1]
        assert s["final_eval_loss"][i] == g["eval_loss"][()][-1, 0] and s["training_set"][i] == b"fixed"
    print("induction smoke:", ", ".join(f"{m.decode()} T={T} acc {a:.3f}" for m, T, a in
                                        zip(t["mixer"][()], t["seq_len"][()], t["final_acc"][()])))
PYEOF
py "$T/ind.py" "$T/ind.h5"
# A fixed training set learned by heart (16 sequences, 400 steps) is named on stderr, with the way out; a new set
# every epoch is not memorized and gets no note.
MEM=(--preset induction-smoke --device cpu --progress none --mixers softmax --lengths 24 --batch 8
  --eval-every-steps 2 --steps 400)
"$KATA" induction "${MEM[@]}" --out "$T/mem.h5" >/dev/null 2>"$T/mem.err"
rc1=$?
"$KATA" induction "${MEM[@]}" --fresh-examples --out "$T/memf.h5" >/dev/null 2>"$T/memf.err"
rc2=$?
check '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "memorized its fixed training set of 16 sequences; --fresh-examples" \
  "$T/mem.err" && ! grep -q memorized "$T/memf.err"' \
  "memorization note (exit $rc1 / $rc2): $(cat "$T/mem.err" "$T/memf.err")"
# A training whose held-out loss still falls over the last quarter of its steps (>5%) without reaching the phase is
# named as cut short by the budget (Sigma2 at T = 16 stopped at 140 steps, mid-climb); one that learns nothing
# (lr 1e-5) is not. /summary's late_eval_loss_drop holds the drop.
LATE=(--preset induction-smoke --device cpu --progress none --mixers sigma2 --lengths 16 --batch 32
  --eval-every-steps 10 --fresh-examples --steps 140)
"$KATA" induction "${LATE[@]}" --out "$T/late.h5" >/dev/null 2>"$T/late.err"
rc1=$?
"$KATA" induction "${LATE[@]}" --lrs 1e-5 --out "$T/flat.h5" >/dev/null 2>"$T/flat.err"
rc2=$?
check '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] &&
  grep -q "still learning when the budget ended; a larger --steps" "$T/late.err" &&
  ! grep -q "still learning" "$T/flat.err"' \
  "late-learning note (exit $rc1 / $rc2): $(cat "$T/late.err" "$T/flat.err")"
cat >"$T/late.py" <<'PYEOF'
import sys, h5py
late, flat = (h5py.File(f, "r")["summary"] for f in sys.argv[1:3])
d, f = float(late["late_eval_loss_drop"][0]), float(flat["late_eval_loss_drop"][0])
assert d > 0.05 * float(late["final_eval_loss"][0]) and abs(f) < 1e-3, (d, f)
print(f"late_eval_loss_drop: {d:.3f} (still learning), {f:.1e} (lr 1e-5)")
PYEOF
py "$T/late.py" "$T/late.h5" "$T/flat.h5"

# 6. The figure scripts.
py "$SRC/experiments/plots/kata_table2.py" "$T/t2.h5" -o "$T/t2.png"
check '[ -s "$T/t2.png" ] || grep -q "no python3" "$T/py.txt"' "kata_table2.py wrote no figure"
py "$SRC/experiments/plots/kata_induction.py" "$T/ind.h5" -o "$T/ind.png"
check '[ -s "$T/ind.png" ] || grep -q "no python3" "$T/py.txt"' "kata_induction.py wrote no figure"
# A row that one of two seeds learned (its /induction cells edited so): the script says so.
cat >"$T/split.py" <<'PYEOF'
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    t = f["induction"]
    t["seeds"][0], t["phase_seeds"][0], t["phase_step"][0] = 2, 1, 30
print("split row written")
PYEOF
py "$T/split.py" "$T/ind.h5" "$T/split.h5"
py "$SRC/experiments/plots/kata_induction.py" "$T/split.h5" -o "$T/split.png"
check 'grep -q "phase step 30 (1 of 2 seeds)" "$T/py.txt" || grep -q "no python3" "$T/py.txt"' \
  "kata_induction.py: a row that one of two seeds learned not named: $(cat "$T/py.txt")"

# 7. With a GPU (skipped otherwise): the smoke rows on the CUDA trainer, two trainings per GPU, and a GPU
# training killed after a checkpoint and resumed.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU=(--preset table2-smoke --device cuda --progress none --mixers softmax,m2,delta-m2 --ow-mixers m2)
  "$KATA" mqar table2 "${GPU[@]}" --jobs 2 --out "$T/gpu.h5" >"$T/gpu.txt" 2>"$T/gpu.err"
  rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/gpu.h5" ]' "GPU smoke failed (exit $rc): $(tail -3 "$T/gpu.err")"
  cat >"$T/gpu.py" <<'PYEOF'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    paths = [p.decode() for p in s["path"][()]]
    assert len(paths) == 8 and all(p.startswith("cuda") for p in paths), paths
    assert all(x.decode() == "done" for x in s["status"][()])
    assert np.all(np.isfinite(s["final_train_loss"][()]))
    print("GPU smoke:", ", ".join(f"{m.decode()} {a:.3f}" for m, a in zip(s["mixer"][()], s["eval_avg"][()])))
PYEOF
  py "$T/gpu.py" "$T/gpu.h5"
  ONEG=(--preset table2-smoke --device cuda --progress none --mixers m2 --ow-mixers none --lrs 1e-2 --epochs 400
    --checkpoint-every 40)
  "$KATA" mqar table2 "${ONEG[@]}" --out "$T/gref.h5" >/dev/null 2>"$T/gref.err"
  rc=$?; check '[ $rc -eq 0 ]' "GPU uninterrupted run failed: $(tail -2 "$T/gref.err")"
  "$KATA" mqar table2 "${ONEG[@]}" --out "$T/gkill.h5" >/dev/null 2>"$T/gkill.err" &
  pid=$!
  for _ in $(seq 1 3000); do
    ls "$T/gkill.h5.partial"/scratch-*-ckpt >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  kill -9 $pid 2>/dev/null
  killed=$?
  wait $pid 2>/dev/null
  if [ $killed -eq 0 ]; then
    "$KATA" mqar table2 "${ONEG[@]}" --resume --out "$T/gkill.h5" >/dev/null 2>"$T/gresume.err"
    rc=$?
    check '[ $rc -eq 0 ] && grep -q "from its checkpoint at step" "$T/gresume.err"' \
      "GPU resume failed or did not use the checkpoint (exit $rc): $(cat "$T/gresume.err")"
    cat >"$T/gres.py" <<'PYEOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert b["summary"]["resumed_step"][0] > 0
ja, jb = list(a["runs"]), list(b["runs"])
la, lb = a["runs"][ja[0]]["loss"][()], b["runs"][jb[0]]["loss"][()]
assert la.shape == lb.shape
print(f"GPU resume from step {b['summary']['resumed_step'][0]}: max |loss difference| {np.max(np.abs(la - lb)):.3g}, "
      f"accuracy {a['summary']['eval_avg'][0]:.4f} (uninterrupted) vs {b['summary']['eval_avg'][0]:.4f} (resumed)")
PYEOF
    py "$T/gres.py" "$T/gref.h5" "$T/gkill.h5"
  else
    echo "note: the GPU training ended before a checkpoint could be killed; GPU resume not exercised"
  fi
fi

exit $fail
