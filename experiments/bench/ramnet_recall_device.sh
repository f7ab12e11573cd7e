#!/usr/bin/env bash
# One device call for `ramnet recall` (docs/perf.md "ramnet recall on the H200"): build the two targets,
# run the GPU-vs-CPU test, time the E7 preset on the GPU, run the CPU on the configurations it can afford
# (dp = 4, U <= 4 and dp = 8, U <= 3) and compare the N* of every job both ran. Stays inside BUDGET
# seconds (default 385): the preset and the CPU runs get what the build and the test left.
# Into $OUT: summary.log (printed last), gputest.log, e7_gpu.txt and results.tar.gz (every log, table
# and HDF5 file). Env: BUDGET, JOBS_PER_GPU (default 2), SKIP_CPU=1.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
R=$(mktemp -d)
mkdir -p "$OUT"
S=$OUT/summary.log
: >"$S"
BUDGET=${BUDGET:-385}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
finish() {
  cp "$R/gputest.log" "$OUT/" 2>/dev/null
  cp "$R/e7_gpu.txt" "$OUT/" 2>/dev/null
  tar czf "$OUT/results.tar.gz" -C "$R" .
  cat "$S"
}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv >"$R/gpu.txt" 2>&1
cat "$R/gpu.txt" >>"$S"
t0=$(date +%s.%N)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >"$R/cmake.log" 2>&1 || { tail -40 "$R/cmake.log"; exit 1; }
cmake --build build-gpu -j16 --target ramnet gpu_test_ramnet_recall >"$R/build.log" 2>&1 ||
  { grep -B2 -A12 -E "error" "$R/build.log" | head -80; exit 1; }
t1=$(date +%s.%N)
echo "build: $(elapsed "$t0" "$t1") s" | tee -a "$S"
./build-gpu/tests/gpu_test_ramnet_recall >"$R/gputest.log" 2>&1
echo "gpu_test_ramnet_recall rc=$?" | tee -a "$S"
grep -E "test cases|assertions|rel error|relative error|N\*_0.1|ERROR|FAILED|SKIP|CHECK|REQUIRE" "$R/gputest.log" | head -60 | tee -a "$S"
t2=$(date +%s.%N)
echo "gpu test: $(elapsed "$t1" "$t2") s" | tee -a "$S"

RAMNET=./build-gpu/ramnet
JPG=${JOBS_PER_GPU:-2}
left=$((BUDGET - SECONDS))
pt=$((left - 75))
[ $pt -gt 300 ] && pt=300
if [ $pt -lt 20 ]; then
  echo "no time left for the preset ($left s)" | tee -a "$S"
  finish
  exit 0
fi
timeout "$pt" $RAMNET recall --preset ramnet-e7 --device cuda --jobs-per-gpu "$JPG" --progress lines \
  --out "$R/e7_gpu.h5" >"$R/e7_gpu.txt" 2>"$R/e7_gpu.err"
rc=$?
t3=$(date +%s.%N)
echo "E7 preset on the GPU (jobs-per-gpu $JPG, timeout $pt s): rc=$rc, wall $(elapsed "$t2" "$t3") s" | tee -a "$S"
tail -3 "$R/e7_gpu.err" | tee -a "$S"

left=$((BUDGET - SECONDS))
if [ -z "${SKIP_CPU:-}" ] && [ $left -gt 30 ]; then
  ct=$(((left - 10) / 2))
  timeout "$ct" $RAMNET recall --preset ramnet-e7 --dp 4 --U 2,3,4 --device cpu --cpu-max-tflop 1e6 --progress none \
    --out "$R/e7_cpu_dp4.h5" >"$R/e7_cpu_dp4.txt" 2>"$R/e7_cpu_dp4.err"
  echo "CPU dp=4 U=2..4: rc=$?" | tee -a "$S"
  timeout "$ct" $RAMNET recall --preset ramnet-e7 --dp 8 --U 2,3 --device cpu --cpu-max-tflop 1e6 --progress none \
    --out "$R/e7_cpu_dp8.h5" >"$R/e7_cpu_dp8.txt" 2>"$R/e7_cpu_dp8.err"
  echo "CPU dp=8 U=2,3: rc=$?" | tee -a "$S"
  t4=$(date +%s.%N)
  echo "CPU runs: $(elapsed "$t3" "$t4") s" | tee -a "$S"
  python3 - "$R/e7_gpu.h5" "$R/e7_cpu_dp4.h5" "$R/e7_cpu_dp8.h5" <<'EOF' 2>&1 | tee -a "$S"
import sys, h5py
def table(p):
    try:
        f = h5py.File(p, "r")
    except OSError as e:
        print("cannot open", p); return {}
    s = f["summary"]
    keys = [k.decode() if isinstance(k, bytes) else k for k in s["job"][()]]
    return {k: (int(s["n_star_01"][i]), int(s["n_star_05"][i]), float(s["eval_s"][i])) for i, k in enumerate(keys)}
g = table(sys.argv[1])
same = diff = 0
for p in sys.argv[2:]:
    c = table(p)
    for k, v in c.items():
        if k not in g:
            continue
        if g[k][:2] == v[:2]:
            same += 1
        else:
            diff += 1
            print("N* differ:", k, "gpu", g[k][:2], "cpu", v[:2])
    if c:
        print(f"{p.split('/')[-1]}: {len(c)} jobs, CPU job time {sum(v[2] for v in c.values()):.1f} s; "
              f"the same jobs on the GPU {sum(g[k][2] for k in c if k in g):.1f} s")
print(f"GPU vs CPU N*: {same} jobs equal, {diff} differ")
if g:
    print(f"GPU jobs: {len(g)}, sum of job times {sum(v[2] for v in g.values()):.1f} s; slowest:",
          sorted(((round(v[2], 2), k) for k, v in g.items()), reverse=True)[:6])
EOF
fi
# With time left: the preset again with one job at a time (the perf table; N* must not depend on it).
gpu_wall=$(elapsed "$t2" "$t3")
left=$((BUDGET - SECONDS))
if awk -v l="$left" -v w="$gpu_wall" 'BEGIN { exit !(l > 1.3 * w + 15) }'; then
  t5=$(date +%s.%N)
  $RAMNET recall --preset ramnet-e7 --device cuda --jobs-per-gpu 1 --progress none --out "$R/e7_gpu1.h5" \
    >"$R/e7_gpu1.txt" 2>"$R/e7_gpu1.err"
  rc=$?
  t6=$(date +%s.%N)
  echo "E7 preset on the GPU (jobs-per-gpu 1): rc=$rc, wall $(elapsed "$t5" "$t6") s" | tee -a "$S"
  python3 - "$R/e7_gpu.h5" "$R/e7_gpu1.h5" <<'EOF' 2>&1 | tee -a "$S"
import sys, h5py
def t(p):
    s = h5py.File(p, "r")["summary"]
    return {(k.decode() if isinstance(k, bytes) else k): (int(a), int(b))
            for k, a, b in zip(s["job"][()], s["n_star_01"][()], s["n_star_05"][()])}
a, b = t(sys.argv[1]), t(sys.argv[2])
print(f"GPU jobs-per-gpu 2 vs 1: {sum(a[k] == b[k] for k in a if k in b)} of {len(a)} jobs with the same N*")
EOF
fi
cat "$R/e7_gpu.txt" >>"$S"
finish
