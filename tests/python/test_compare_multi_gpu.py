#!/usr/bin/env python3
"""experiments/bench/compare_multi_gpu.py on hand-made result pairs (NAME-all.h5 and NAME-0.h5 for the six
commands that multi_gpu_check.sh runs): tables that differ only in times and in the device path (`path`, or
ramnet recall's `compute_path`) compare equal, with the GPUs of the --devices all run listed; a changed
result column, a job missing from one run and a missing file each make it exit 1 and name the cause. Exit 77
(skipped) when h5py is unavailable."""
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError:
    print("SKIP: h5py/numpy not importable")
    sys.exit(77)

SRC = os.environ.get("MEMCAP_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "experiments", "bench", "compare_multi_gpu.py")
NAMES = ("cap", "t2", "ind", "ssfr", "edit", "ram")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def write(path, jobs, score, wall, dev, path_col="path"):
    """A /summary like the sweep engine's: job keys, a result column, a time and the device path."""
    with h5py.File(path, "w") as f:
        s = f.create_group("summary")
        s["job"] = np.array([j.encode() for j in jobs])
        s["score"] = np.asarray(score, dtype=float)
        s["wall_s"] = np.asarray(wall, dtype=float)
        s[path_col] = np.array([d.encode() for d in dev])


def make(d, tweak=None):
    """Writes all six pairs; the --devices all run lists its jobs in another order (jobs finish out of order)."""
    jobs = ["a", "b", "c"]
    for name in NAMES:
        col = "compute_path" if name == "ram" else "path"
        score = [0.5, float("nan"), 0.25]  # NaN where a job has no value: equal to itself here
        write(f"{d}/{name}-0.h5", jobs, score, [1.0, 2.0, 3.0], ["cuda:0"] * 3, col)
        all_jobs, all_score = ["c", "a", "b"], [0.25, 0.5, float("nan")]
        if tweak == name:
            all_score = [0.25, 0.5, 1.0]
        if tweak == "jobs" and name == "t2":
            all_jobs = ["c", "a", "z"]
        write(f"{d}/{name}-all.h5", all_jobs, all_score, [9.0, 8.0, 7.0], ["cuda:1", "cuda:0", "cuda:1"], col)
    if tweak == "missing":
        os.remove(f"{d}/ssfr-0.h5")


def run(d):
    r = subprocess.run([sys.executable, SCRIPT, d], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


with tempfile.TemporaryDirectory() as tmp:
    for case in ("equal", "ram", "jobs", "missing"):
        d = os.path.join(tmp, case)
        os.mkdir(d)
        make(d, None if case == "equal" else case)
        rc, out = run(d)
        lines = {ln.split(":")[0]: ln for ln in out.splitlines() if ":" in ln}
        if case == "equal":
            check(rc == 0, f"equal tables: exit {rc}: {out}")
            for name in NAMES:
                ln = lines.get(name, "")
                check("differing: none" in ln, f"{name}: not equal: {ln!r}")
                check("cuda:0, cuda:1" in ln, f"{name}: the GPUs of the --devices all run not listed: {ln!r}")
            # job and score: compute_path (ram) and path (the others) are not compared, nor wall_s
            for name in NAMES:
                check("3 rows, 2 columns compared" in lines.get(name, ""),
                      f"{name}: a device path or time compared as a result column: {lines.get(name)!r}")
        elif case == "ram":
            check(rc == 1, f"a changed score: exit {rc}, expected 1")
            check("differing: score" in lines.get("ram", ""), f"ram: the changed score not named: {out}")
            check("differing: none" in lines.get("cap", ""), f"cap: should still be equal: {out}")
        elif case == "jobs":
            check(rc == 1, f"different jobs: exit {rc}, expected 1")
            check("the two runs hold different jobs" in lines.get("t2", ""), f"t2: different jobs not named: {out}")
        else:
            check(rc == 1, f"a missing file: exit {rc}, expected 1")
            check("result file missing" in lines.get("ssfr", ""), f"ssfr: missing file not named: {out}")
        print(f"{case}: exit {rc}")

if failures:
    sys.exit(1)
print("compare_multi_gpu.py: equal pairs pass (path and compute_path ignored), a changed score, other jobs and a "
      "missing file each exit 1")
