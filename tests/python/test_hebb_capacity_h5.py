#!/usr/bin/env python3
"""Runs a small `hebb capacity` (CPU; whitened, data-dependent, NTK and a short GD, two (d, F) points, three
fact-set seeds) and reads the HDF5 the documented way: a pandas DataFrame from /summary, /grid arrays with
their dimension scales, /points and /runs/<job>/probes. Asserts the contents: one row per (method, d, F,
seed); m* is the smallest succeeding probe and m* - 1 failed (fast search); W = the spec §3.7 count;
m50 / m100 / medians of /points recomputed from the per-seed m*; then draws fig2c.py and fig11.py from
the file, and fig2c.py from it plus a second run at another F (one figure from a preset run in pieces), refusing
a point passed twice and files of different spike beta. Exit 77 (skipped) when h5py is unavailable."""
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

HEBB = os.environ.get("HEBB", "build/hebb")
SRC = os.environ.get("MEMCAP_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
METHODS = "hebbian:whitened,hebbian:data-dependent,ntk,gd,epochs=400,lr=0.01"
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def s(x):
    return x.decode() if isinstance(x, bytes) else str(x)


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "cap.h5")
    r = subprocess.run([HEBB, "capacity", "--methods", METHODS, "--dim", "16", "--facts", "24,40", "--seeds", "3",
                        "--device", "cpu", "--progress", "none", "--out", path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hebb capacity failed ({r.returncode}):\n{r.stderr}")
    check("m50" in r.stdout and "W100" in r.stdout, "stdout per-point table missing")
    with h5py.File(path, "r") as f:
        cols = {k: f["summary"][k][()] for k in f["summary"]}
        n = len(cols["m_star"])
        check(n == 4 * 2 * 3, f"expected 24 summary rows (method x F x seed), got {n}")
        for c in ["method", "dim", "facts", "alpha", "seed", "m_star", "params_star", "accuracy_star", "status",
                  "probes", "path", "wall_s", "m_below", "accuracy_below", "max_width", "search"]:
            check(c in cols, f"/summary lacks column {c}")
        check(all(len(v) == n for v in cols.values()), "summary columns of unequal length")
        try:
            import pandas as pd
            df = pd.DataFrame({k: v for k, v in cols.items()})
            check(df.shape[0] == n and "m_star" in df.columns, "pandas DataFrame from /summary")
            check(df.groupby(["method", "dim", "facts"]).size().eq(3).all(), "3 seeds per point")
        except ImportError:
            print("note: pandas not importable, DataFrame check skipped")
        method = np.array([s(m) for m in cols["method"]])
        status = np.array([s(x) for x in cols["status"]])
        found = np.isfinite(cols["m_star"])
        check(np.array_equal(found, status == "found"), "status found <=> m_star finite")
        check(set(cols["seed"]) == {42, 43, 44}, "fact-set seeds 42, 43, 44")
        check(np.all(cols["path"] == b"cpu") or all(s(p) == "cpu" for p in cols["path"]), "path recorded as cpu")
        m, d = cols["m_star"], cols["dim"]
        w = np.where(method == "ntk", 3 * m * d + 2 * m + d, 3 * m * d)
        check(np.allclose(cols["params_star"][found], w[found]), "params_star != spec §3.7 count")
        check(np.all(cols["accuracy_star"][found] == 1.0), "accuracy at m* must be 1.0")
        check(found[method == "hebbian:whitened"].all(), "whitened stores every fact at these sizes")
        # Probes: m* is the smallest succeeding width measured, m* - 1 was measured and failed.
        for r_ in range(n):
            key = s(cols["job"][r_]).replace("/", ",").replace(".", "p")
            p = f["runs"][key]["probes"]
            pm, acc, ok = p["m"][()], p["accuracy"][()], p["success"][()].astype(bool)
            check(np.array_equal(ok, acc >= 1.0), f"{key}: success != (accuracy >= threshold)")
            check(int(cols["probes"][r_]) == len(set(pm)), f"{key}: probes count")
            if found[r_]:
                ms = int(m[r_])
                check(ms == pm[ok].min(), f"{key}: m* is not the smallest succeeding probe")
                if ms > 1:
                    check(ms - 1 in set(pm[~ok]), f"{key}: m* - 1 not measured as a failure")
                    check(int(cols["m_below"][r_]) == ms - 1, f"{key}: m_below")
        # /grid over (method_id, dim, alpha, seed) with dimension scales.
        g = f["grid"]["m_star"]
        check(g.shape == (4, 1, 2, 3), f"/grid/m_star shape {g.shape}")
        check([x.name.split("/")[-1] for x in (g.dims[k][0] for k in range(4))] == ["method_id", "dim", "alpha", "seed"],
              "grid scale names")
        check(list(g.dims[3][0][()]) == [42, 43, 44], "grid seed scale")
        # /points recomputed from the per-seed m*.
        pts = {k: f["points"][k][()] for k in f["points"]}
        check(len(pts["m50"]) == 8, "one /points row per (method, d, F)")
        for i in range(len(pts["m50"])):
            sel = (method == s(pts["method"][i])) & (cols["facts"] == pts["facts"][i])
            ms = np.sort(np.where(found[sel], m[sel], np.inf))
            want50 = ms[(len(ms) + 1) // 2 - 1]
            check(pts["m50"][i] == (want50 if np.isfinite(want50) else 0), f"m50 of point {i}")
            check(pts["m100"][i] == (ms[-1] if np.isfinite(ms[-1]) else 0), f"m100 of point {i}")
            check(pts["found"][i] == found[sel].sum(), f"found of point {i}")
            check(np.isclose(pts["m_median"][i], np.median(ms)) or (np.isnan(pts["m_median"][i]) and not np.isfinite(np.median(ms))),
                  f"m_median of point {i}")

    # The figure scripts run on this file.
    plots = os.path.join(SRC, "experiments", "plots")
    for script, png in (("fig2c.py", "f2c.png"), ("fig11.py", "f11.png")):
        out = os.path.join(tmp, png)
        r = subprocess.run([sys.executable, os.path.join(plots, script), path, "-o", out, "--fit"], capture_output=True,
                           text=True)
        check(r.returncode == 0 and os.path.exists(out) and os.path.getsize(out) > 10000, f"{script} failed: {r.stderr[-500:]}")
        check("W_data/W_gd" in r.stdout and "W_ntk/W_data" in r.stdout, f"{script}: ratio ranges not printed")

    # A preset run in pieces: a second file at another F joins the first in one figure; the per-point
    # W_data/W_gd table lists the points of both files where GD and data-dependent stored every fact.
    more = os.path.join(tmp, "more.h5")
    r = subprocess.run([HEBB, "capacity", "--methods", "hebbian:data-dependent,gd,epochs=400,lr=0.01", "--dim", "16",
                        "--facts", "56", "--seeds", "1", "--device", "cpu", "--progress", "none", "--out", more],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"second hebb capacity failed: {r.stderr[-300:]}")
    fig = os.path.join(plots, "fig2c.py")
    both = os.path.join(tmp, "both.png")
    r = subprocess.run([sys.executable, fig, path, more, "-o", both], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.exists(both) and os.path.getsize(both) > 10000, f"fig2c.py on two files failed: {r.stderr[-500:]}")
    with h5py.File(path, "r") as f1, h5py.File(more, "r") as f2:
        def both_found(f):
            p_ = f["points"]
            fam = [s(m).split(",")[0] for m in p_["method"][()]]
            ok = {}
            for i, m_ in enumerate(fam):
                ok.setdefault(int(p_["facts"][i]), set()).update({m_} if p_["params50"][i] > 0 else set())
            return {F for F, ms in ok.items() if {"gd", "hebbian:data-dependent"} <= ms}
        want = both_found(f1) | both_found(f2)
    check(56 in want and len(want) >= 2, f"GD and data-dependent should both succeed at F = 56 and one more: {want}")
    table = [ln.split() for ln in r.stdout.splitlines() if ln.strip() and ln.split()[0] == "16"]
    check(sorted(int(t[1]) for t in table) == sorted(want),
          f"per-point W_data/W_gd rows {[t[1] for t in table]} != points where both succeeded {sorted(want)}")
    for t in table:
        check(abs(float(t[4]) - float(t[3]) / float(t[2])) < 0.01, f"ratio column of F={t[1]}")
    r = subprocess.run([sys.executable, fig, path, path, "-o", both], capture_output=True, text=True)
    check(r.returncode != 0 and "in both" in r.stderr, f"a point passed twice must be refused: {r.stderr[-300:]}")
    spiked = os.path.join(tmp, "spiked.h5")
    r = subprocess.run([HEBB, "capacity", "--methods", "hebbian:whitened", "--dim", "16", "--facts", "24",
                        "--beta", "1.5", "--seeds", "1", "--device", "cpu", "--progress", "none", "--out", spiked],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"spiked hebb capacity failed: {r.stderr[-300:]}")
    r = subprocess.run([sys.executable, fig, more, spiked, "-o", both], capture_output=True, text=True)
    check(r.returncode != 0 and "different spike beta" in r.stderr, f"mixed beta must be refused: {r.stderr[-300:]}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ok")
