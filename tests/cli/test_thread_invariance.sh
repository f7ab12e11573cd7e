#!/usr/bin/env bash
# Results do not depend on the thread count: every command (hebb build, margin, train, capacity,
# margin-sweep; kata dict, psnr, capacity, capacity-sweep) run with --threads 1 and --threads 2
# (OMP_NUM_THREADS to match) writes the same datasets, bit for bit, and the same attributes apart from
# provenance (times, host, command line, threads; wall-clock columns); and a margin sweep / capacity sweep
# split into shards run with different thread counts merges to the bytes of the full run.
# Env: HEBB, KATA, MEMCAP_SRC. Needs h5py (experiments/plots/with_python.sh); exits 77 without it.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${KATA:?set KATA to the kata executable}"
: "${MEMCAP_SRC:?set MEMCAP_SRC to the repository root}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

# Same-results comparison of two HDF5 files; prints each difference, exits 1 on any.
cat >"$T/same.py" <<'PY'
import sys, json, struct, h5py, numpy as np
PROVENANCE = {"command_line", "start_utc", "end_utc", "hostname", "threads", "sweep_shard"}  # root attributes
VOLATILE = {"out", "shard", "resume", "progress", "threads", "dry-run", "print-config", "config", "help"}
TIMING = {"wall_s", "build_s", "eval_s", "coherence_s", "train_loop_s"}  # wall-clock columns / attributes (and any *wall_s)
def canon(v, f):
    if isinstance(v, h5py.Reference): return ("ref", f[v].name if v else None)
    if isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and v.dtype.names is None:
        return ("arr", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (np.ndarray, list, tuple, np.void)): return tuple(canon(x, f) for x in v)
    if isinstance(v, (float, np.floating)): return ("f", struct.pack("<d", float(v)))
    if isinstance(v, np.generic): return v.item()
    if isinstance(v, bytes): return v.decode("utf-8", "replace")
    return v
def attrs(obj, f, root):
    out = {}
    for k, v in obj.attrs.items():
        if root and (k in PROVENANCE or k.lower().startswith("slurm")): continue
        if k in TIMING: continue
        if k == "json" and obj.name == "/config":
            v = json.dumps({a: b for a, b in json.loads(v).items() if a not in VOLATILE}, sort_keys=True)
        out[k] = canon(v, f)
    return out
def diff(pa, pb, data_only):
    # data_only (merged vs full run): the merge writes its own provenance (subcommand, merged_from) on
    # the root and /config, so those two are left out; every dataset and its attributes still count.
    bad = []
    with h5py.File(pa, "r") as a, h5py.File(pb, "r") as b:
        if not data_only and attrs(a, a, True) != attrs(b, b, True): bad.append("root attributes")
        oa, ob = {}, {}
        # /provenance/shard<i>: merge keeps each input's root attributes (merged files only)
        a.visititems(lambda n, o: None if n.startswith("provenance") else oa.__setitem__(n, o))
        b.visititems(lambda n, o: None if n.startswith("provenance") else ob.__setitem__(n, o))
        if set(oa) != set(ob): bad.append(f"objects differ: {sorted(set(oa) ^ set(ob))[:8]}")
        ndata = 0
        for n in sorted(set(oa) & set(ob)):
            x, y = oa[n], ob[n]
            if not (data_only and n == "config") and attrs(x, a, False) != attrs(y, b, False):
                bad.append(f"{n}: attributes")
            leaf = n.split("/")[-1]
            if not isinstance(x, h5py.Dataset) or leaf in TIMING or leaf.endswith("wall_s"): continue
            ndata += 1
            if x.dtype != y.dtype or x.shape != y.shape: bad.append(f"{n}: dtype/shape"); continue
            vx, vy = x[()], y[()]
            if canon(vx, a) != canon(vy, b):
                msg = f"{n}: values differ"
                if isinstance(vx, np.ndarray) and vx.dtype.kind == "f" and vx.size:
                    msg += f" (max |diff| {np.nanmax(np.abs(vx - vy)):.3e})"
                bad.append(msg)
        if ndata == 0: bad.append("no datasets compared")
    return bad
bad = diff(sys.argv[1], sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "data")
for m in bad[:20]: print(f"  {m}")
sys.exit(1 if bad else 0)
PY
# Probe for h5py once: exit 77 (skipped) when no interpreter has it.
echo 'pass' >"$T/probe.py"
bash "$MEMCAP_SRC/experiments/plots/with_python.sh" "$T/probe.py" >/dev/null 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then echo "SKIP: no python3 with h5py (see experiments/plots/with_python.sh)"; exit 77; fi
[[ $rc -eq 0 ]] || { echo "FAIL: python probe exited $rc"; exit 1; }
same() { bash "$MEMCAP_SRC/experiments/plots/with_python.sh" "$T/same.py" "$@"; }

# case NAME TOOL ARGS...: run with 1 and 2 threads, compare.
case_() {
  local name=$1; shift
  local tool=$1; shift
  for t in 1 2; do
    if ! OMP_NUM_THREADS=$t "$tool" "$@" --device cpu --threads "$t" --out "$T/$name.t$t.h5" >"$T/$name.t$t.log" 2>&1; then
      echo "FAIL: $name --threads $t exited non-zero:"; tail -n 3 "$T/$name.t$t.log"; fail=1; return
    fi
  done
  if same "$T/$name.t1.h5" "$T/$name.t2.h5"; then echo "ok: $name"; else echo "FAIL: $name differs between 1 and 2 threads"; fail=1; fi
}

start=$(date +%s)
case_ hebb-build "$HEBB" build --dim 48 --facts 1000 --tied --map permutation --seed 5 --method hebbian:whitened --width 400
case_ hebb-build-dual "$HEBB" build --dim 32 --facts 300 --tied --map permutation --seed 6 --method hebbian:whitened --width 400
case_ hebb-margin "$HEBB" margin --dim 48 --facts 700 --width 500 --seed 3 --noise 0.05
case_ hebb-train "$HEBB" train --method gd --dim 16 --facts 128 --tied --map permutation --width 64 --epochs 300 \
  --progress none
case_ hebb-capacity "$HEBB" capacity --methods hebbian:whitened,ntk --dim 16 --facts 32 --seeds 2 --progress none
case_ hebb-margin-sweep "$HEBB" margin-sweep --dim 32 --facts 300 --widths 96,300 --seeds 2 --tile 100 --progress none
case_ kata-dict "$KATA" dict --type random --dim 64 --count 3000 --block 700 --map m2 --map softmax:tau=0.125 --seed 2
case_ kata-dict-greedy "$KATA" dict --type greedy --dim 12 --max-coherence 0.5 --max-fail 2000 --seed 2
case_ kata-psnr "$KATA" psnr --p 32 --T 64,512,2048 --trials 2 --queries 300
case_ kata-capacity "$KATA" capacity --map m2 --dim 32 --trials 2 --k-max 2048
case_ kata-capacity-sweep "$KATA" capacity-sweep --maps linear,m2,softmax:tau=0.125 --dims 16,32 --trials 2 --k-max 512 \
  --progress none

# Shards run with different thread counts merge to the full run's bytes.
shards() {
  local name=$1 tool=$2; shift 2
  OMP_NUM_THREADS=2 "$tool" "$@" --device cpu --threads 2 --progress none --out "$T/$name.full.h5" >/dev/null 2>&1 &&
    OMP_NUM_THREADS=1 "$tool" "$@" --device cpu --threads 1 --progress none --shard 0/2 --out "$T/$name.h5" >/dev/null 2>&1 &&
    OMP_NUM_THREADS=2 "$tool" "$@" --device cpu --threads 2 --progress none --shard 1/2 --out "$T/$name.h5" >/dev/null 2>&1 &&
    "$tool" merge "$T/$name.shard0of2.h5" "$T/$name.shard1of2.h5" --out "$T/$name.merged.h5" >/dev/null 2>&1 ||
    { echo "FAIL: $name shard runs or merge exited non-zero"; fail=1; return; }
  if same "$T/$name.full.h5" "$T/$name.merged.h5" data; then echo "ok: $name shards (1 + 2 threads) merge to the full run"
  else echo "FAIL: $name merged shards differ from the full run"; fail=1; fi
}
shards margin-sweep "$HEBB" margin-sweep --dim 32 --facts 300 --widths 96,300 --seeds 2 --tile 100
shards capacity-sweep "$KATA" capacity-sweep --maps linear,m2,softmax:tau=0.125 --dims 16,32 --trials 2 --k-max 512

echo "thread invariance: $(( $(date +%s) - start )) s"
[[ $fail -eq 0 ]] && echo "test_thread_invariance: all passed"
exit "$fail"
