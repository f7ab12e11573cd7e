#!/usr/bin/env python3
"""End-to-end sweep engine checks on the real `hebb margin-sweep` executable, read back with h5py:
(1) the same command and seed twice give identical datasets (wall_s excepted: it is a timing),
(2) --shard 0/2 + --shard 1/2 merged with `hebb merge` equal the unsharded run,
(3) a run killed with SIGKILL mid-sweep and rerun with --resume ends with the same summary.
Exit 77 (skipped) when h5py is unavailable."""
import os
import signal
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
except ImportError:
    print("SKIP: h5py/numpy not importable")
    sys.exit(77)

HEBB = os.environ.get("HEBB", "build/hebb")
GRID = ["--sweep", "width", "--dim", "32", "--facts", "64", "--widths", "32,48,64,96,128,192", "--seeds", "3",
        "--progress", "none"]
# Big enough (a few seconds) that a SIGKILL lands mid-sweep.
BIG = ["--sweep", "width", "--dim", "64", "--facts", "256", "--widths", "256,384,512,768,1024", "--seeds", "4",
       "--progress", "none"]


def run(args, grid=GRID, **kw):
    r = subprocess.run([HEBB, "margin-sweep", *grid, *args], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"hebb margin-sweep {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.endswith("wall_s"):
                out[name] = obj[()]
        f.visititems(visit)
    return out


def same(a, b, what):
    assert a.keys() == b.keys(), f"{what}: dataset names differ: {sorted(set(a) ^ set(b))}"
    for k in a:
        x, y = a[k], b[k]
        if getattr(x, "dtype", None) is not None and x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), f"{what}: {k} differs"
        else:
            assert np.array_equal(x, y), f"{what}: {k} differs"


def main():
    tmp = tempfile.mkdtemp(prefix="memcap_resume_")
    p = lambda n: os.path.join(tmp, n)
    # (1) determinism
    run(["--seed", "5", "--out", p("a.h5")])
    run(["--seed", "5", "--out", p("b.h5")])
    ref = datasets(p("a.h5"))
    assert "summary/min_margin" in ref and len(ref["summary/min_margin"]) == 18
    same(ref, datasets(p("b.h5")), "rerun")
    # (2) shards + merge
    run(["--seed", "5", "--shard", "0/2", "--out", p("s.h5")])
    run(["--seed", "5", "--shard", "1/2", "--out", p("s.h5")])
    r = subprocess.run([HEBB, "merge", p("s.shard0of2.h5"), p("s.shard1of2.h5"), "--out", p("m.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    same(ref, datasets(p("m.h5")), "merged shards")
    # (3) SIGKILL mid-run, then --resume
    run(["--seed", "5", "--out", p("kref.h5")], grid=BIG)
    bigger = ["--seed", "5", "--out", p("k.h5")]
    proc = subprocess.Popen([HEBB, "margin-sweep", *BIG, *bigger], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    partial = p("k.h5.partial")
    deadline = time.time() + 60
    while time.time() < deadline:
        done = [n for n in os.listdir(partial) if n.startswith("job-")] if os.path.isdir(partial) else []
        if len(done) >= 2 or proc.poll() is not None:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the sweep finished before it could be killed: enlarge BIG"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(p("k.h5")), "a killed run must not leave a final file"
    n_done = len([n for n in os.listdir(partial) if n.startswith("job-")])
    print(f"killed after {n_done} finished jobs")
    r = subprocess.run([HEBB, "margin-sweep", *BIG, *bigger], capture_output=True, text=True)
    assert r.returncode != 0 and "--resume" in r.stderr, "an interrupted run must not be overwritten silently"
    run([*bigger, "--resume"], grid=BIG)
    same(datasets(p("kref.h5")), datasets(p("k.h5")), "killed + resumed")
    assert not os.path.exists(partial)
    print("determinism, shard merge and kill/resume: OK")


if __name__ == "__main__":
    main()
