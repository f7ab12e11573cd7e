#!/usr/bin/env bash
# End-to-end `ramnet recall` on the CPU: a tiny capacity table (ram-linear, kappa and full cumulative
# mass-aware RAM-Net give the same N*, spec §2.9; the hard-write prediction columns are the closed form
# of T15), one --N evaluation, the dry run of the E7 preset (110 jobs, nothing created), a run killed
# with SIGKILL inside a search and resumed from its recorded points (--resume) to the uninterrupted
# result, and bad input (exit 2, one line, no file). HDF5 contents are checked with h5py when
# with_python.sh finds it, else those checks are skipped with a note. Env: RAMNET, MEMCAP_SRC.
set -u
: "${RAMNET:?set RAMNET to the ramnet executable}"
: "${MEMCAP_SRC:?set MEMCAP_SRC to the repository root}"
export MEMCAP_PRESETS="$MEMCAP_SRC/experiments/presets"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
PY="$MEMCAP_SRC/experiments/plots/with_python.sh"
py() {  # py WHAT SCRIPT ARGS...: exit 77 = no h5py (skip with a note)
  local what=$1
  shift
  bash "$PY" "$@" >"$T/py.txt" 2>&1
  local rc=$?
  if [ $rc -eq 77 ]; then echo "note: no h5py, skipped: $what"; elif [ $rc -ne 0 ]; then echo "FAIL: $what: $(cat "$T/py.txt")"; fail=1; fi
}

# ---- a tiny table: dp = 4, U = 3 (|A| = 64), beta = 4 ----
TINY=(--mixers ramnet,kappa,ram-linear,softmax,elu,favor --dp 4 --U 3 --beta 4 --seeds 4 --dv 32 --device cpu --progress none)
"$RAMNET" recall "${TINY[@]}" --out "$T/tiny.h5" >"$T/tiny.txt" 2>"$T/tiny.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/tiny.h5" ] && [ ! -e "$T/tiny.h5.partial" ]' "tiny run failed: $(cat "$T/tiny.err")"
nstar() { awk -v m="$1" '$1 == m { print $7 " " $8 }' "$T/tiny.txt"; }
check '[ -n "$(nstar ramnet)" ] && [ "$(nstar ramnet)" = "$(nstar kappa)" ] && [ "$(nstar kappa)" = "$(nstar ram-linear)" ]' \
  "ram-linear, kappa and cumulative RAM-Net must share N*: $(cat "$T/tiny.txt")"
check '[ "$(awk '\''$1 == "ramnet" { print $9 " " $10 }'\'' "$T/tiny.txt")" = "14 102" ]' \
  "hard-write prediction for |A| = 64 must be N* = 14 (delta 0.1) and 102 (delta 0.5)"
check '[ "$(awk '\''$1 == "softmax" { print $7 }'\'' "$T/tiny.txt")" = "256+" ]' \
  "softmax at tau = 1/8 with exact queries must keep every item up to n_max = 256 (censored)"
cat >"$T/tiny.py" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
s = {k: f["summary"][k][()] for k in f["summary"]}
mix = [m.decode() if isinstance(m, bytes) else m for m in s["mixer"]]
n01 = dict(zip(mix, s["n_star_01"])); n05 = dict(zip(mix, s["n_star_05"]))
assert n01["ramnet"] == n01["kappa"] == n01["ram-linear"], n01
assert n05["ramnet"] == n05["kappa"] == n05["ram-linear"], n05
assert all(s["pred_n_star_01"] == 14) and all(s["pred_n_star_05"] == 102)
assert list(s["state_size"]) == [64 * 32, -1, 64 * 32, -1, 6 * 32, 64 * 32], list(s["state_size"])
for name in f["runs"]:
    r = f["runs"][name]
    N = r["N"][()]
    assert np.all(np.diff(N) > 0), N
    acc = r["acc"][()]
    assert np.allclose(acc, r["acc_seeds"][()].mean(axis=1))
    # every item of every seed lands in one age bin; hits <= counts
    assert np.array_equal(r["recency_count"][()].sum(axis=1), N * 4)
    assert np.all(r["recency_hits"][()] <= r["recency_count"][()])
    assert np.allclose(r["recency_hits"][()].sum(axis=1) / (N * 4), acc)
    n = int(r.attrs["n_star_01"])
    if 0 < n < N[-1]:
        assert acc[list(N).index(n)] >= 0.9
assert f["grid/n_star_01"].shape == (6, 1, 1, 1, 1)
EOF
py "tiny table HDF5" "$T/tiny.py" "$T/tiny.h5"

# ---- one evaluation ----
"$RAMNET" recall --mixers ramnet --dp 4 --U 3 --beta 200 --N 32 --seeds 40 --device cpu --progress none --out "$T/one.h5" \
  >"$T/one.txt" 2>"$T/one.err"
rc=$?
acc=$(grep -o "acc=[0-9.]*" "$T/one.txt" | cut -d= -f2)
# 40 seeds x 32 items: sd of the mean accuracy ~0.012; accept 0.7917 +- 0.05.
check '[ $rc -eq 0 ] && grep -q "N=32 " "$T/one.txt" && grep -q "pred=0.7917" "$T/one.txt" && awk -v a="$acc" "BEGIN { exit !(a > 0.74 && a < 0.84) }"' \
  "--N 32 at beta = 200 must be near the hard-write prediction 0.7917: $(cat "$T/one.txt" "$T/one.err")"

# ---- dry run of the E7 preset: the plan, nothing created ----
mkdir "$T/dry" && cd "$T/dry" || exit 1
"$RAMNET" recall --preset ramnet-e7 --device cpu --dry-run --out e7.h5 >"$T/dry.txt" 2>"$T/dry.err"
rc=$?
check '[ $rc -eq 0 ] && grep -q "jobs: 110 in the plan" "$T/dry.txt"' "E7 preset is not 110 jobs: $(tail -n 3 "$T/dry.txt")"
check 'grep -q "mixer=favor/dp=8/U=5/K=0/beta=3.18108" "$T/dry.txt" && grep -q "mixer=ramnet/dp=8/U=5/K=32/beta=0.795271" "$T/dry.txt"' \
  "E7 plan lacks its corner jobs"
check 'grep -q "cpu-max-tflop" "$T/dry.err"' "the dry run on the CPU must warn that dp=8, U=5 exceeds --cpu-max-tflop"
check '[ -z "$(ls -A "$T/dry")" ]' "dry run created files: $(ls "$T/dry")"
cd "$T" || exit 1
"$RAMNET" recall --preset ramnet-e7 --device cpu --out "$T/refused.h5" >/dev/null 2>"$T/ref.err"
rc=$?
check '[ $rc -eq 2 ] && [ ! -e "$T/refused.h5" ] && [ ! -e "$T/refused.h5.partial" ] && grep -q "TFLOP" "$T/ref.err"' \
  "the full E7 preset on the CPU must be refused before anything is created: $(cat "$T/ref.err")"

# ---- SIGKILL inside a search, then --resume ----
KILL=(--mixers elu,ramnet --dp 4 --U 4 --beta 4 --seeds 6 --device cpu --progress none)
"$RAMNET" recall "${KILL[@]}" --out "$T/ref.h5" >/dev/null 2>&1
"$RAMNET" recall "${KILL[@]}" --out "$T/k.h5" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  [ -e "$T/k.h5.partial/scratch-00000001" ] && [ "$(wc -l <"$T/k.h5.partial/scratch-00000001")" -ge 6 ] && break
  sleep 0.01
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
check '[ ! -e "$T/k.h5" ] && [ -e "$T/k.h5.partial/scratch-00000001" ]' "the kill did not land inside the ramnet search"
"$RAMNET" recall "${KILL[@]}" --out "$T/k.h5" >/dev/null 2>"$T/k.err"
rc=$?
check '[ $rc -ne 0 ] && grep -q -- "--resume" "$T/k.err"' "a rerun without --resume must refuse the partial run"
"$RAMNET" recall "${KILL[@]}" --out "$T/k.h5" --resume >/dev/null 2>"$T/k.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/k.h5" ] && [ ! -e "$T/k.h5.partial" ]' "resume failed: $(cat "$T/k.err")"
check 'grep -q "resumed from [1-9][0-9]* recorded points" "$T/k.err"' "resume did not reuse the recorded points"
cat >"$T/same.py" <<'EOF'
import sys, h5py, numpy as np
def load(p):
    out = {}
    with h5py.File(p, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) and not n.endswith(("wall_s", "eval_s")) else None)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
for k in a:
    x, y = np.asarray(a[k]), np.asarray(b[k])
    eq = np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else np.array_equal(x, y)
    assert eq, f"{k} differs: {x} vs {y}"
EOF
py "killed + resumed run == uninterrupted run" "$T/same.py" "$T/ref.h5" "$T/k.h5"

# ---- bad input: exit 2, one line, no file ----
bad() {
  rm -rf "$T/bad.h5" "$T"/bad.h5.*
  "$RAMNET" recall "$@" --device cpu --out "$T/bad.h5" >"$T/bad.txt" 2>"$T/bad.err"
  local rc=$?
  check "[ $rc -eq 2 ]" "expected exit 2 for: $* (got $rc: $(cat "$T/bad.err"))"
  check '[ -z "$(ls "$T" | grep "^bad.h5")" ]' "output left behind for: $*"
  check '[ "$(grep -vc "^device: " "$T/bad.err")" -eq 1 ]' "error message is not one line for: $*: $(cat "$T/bad.err")"
}
bad --mixers nope
bad --mixers ramnet,ramnet
bad --dp 1
bad --U 0
bad --topk 100 --dp 4 --U 3
bad --beta 1 --beta-factor 2
bad --keys torus:rho=-1
bad --keys cube
bad --sigma-q -0.1
bad --dv 0
bad --seeds 0
bad --n-min 0
bad --n-max 5 --n-min 8
bad --N 0
bad --gamma nan
bad --eps -1
bad --readout both
bad --devices 0
exit $fail
