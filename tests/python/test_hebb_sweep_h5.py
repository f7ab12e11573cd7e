#!/usr/bin/env python3
"""Runs small `hebb margin-sweep`s (every sweep kind at reduced size/seeds) and opens the HDF5 as a
user would: h5py, a pandas DataFrame from /summary (when pandas is importable), /grid arrays with
their dimension scales (ds.dims[k][0]), /points and /fit. Asserts the contents, including the
deterministic invariants of spec §8.1 item 4 (Eq. 44, Eq. 43 and the signal bound at or below the
measured margin at every point). Exit 77 (skipped) when h5py is unavailable."""
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
TOL = 1e-9  # round-off of O(1) sums of <= F*P float64 terms
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(args, out):
    env = dict(os.environ, MEMCAP_PRESETS=os.path.join(SRC, "experiments", "presets"))
    r = subprocess.run([HEBB, "margin-sweep", "--progress", "none", "--out", out, *args], capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"hebb margin-sweep {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def s(x):
    return x.decode() if isinstance(x, bytes) else str(x)


with tempfile.TemporaryDirectory() as tmp:
    # 1. The width sweep, read the way a user would.
    path = os.path.join(tmp, "w.h5")
    stdout = run(["--dim", "16", "--facts", "64", "--widths", "32,64,128", "--seeds", "2"], path)
    check("R2=" in stdout and "min_margin" in stdout, "stdout summary table missing")
    with h5py.File(path, "r") as f:
        summ = f["summary"]
        cols = {k: summ[k][()] for k in summ}
        n = len(cols["min_margin"])
        check(n == 6, f"expected 6 summary rows, got {n}")
        for c in ["width", "facts", "dim", "beta", "noise", "seed", "min_margin", "accuracy", "params", "e_k", "kappa",
                  "v_min", "l_v", "bound_eq9", "bound_eq44", "bound_eq43", "bound_signal", "bound_thm43",
                  "bound_ladder_akrv", "bound_ladder_rkav", "bound_welch_upper", "bound_info_bits", "p_key"]:
            check(c in cols, f"/summary lacks column {c}")
        check(all(len(v) == n for v in cols.values()), "summary columns of unequal length")
        check(np.all(cols["params"] == 3 * cols["width"] * cols["dim"]), "params != 3 m d")
        check(np.allclose(cols["min_margin"], cols["min_margin_check"], atol=TOL),
              "streamed statistics margin differs from margins.hpp")
        try:
            import pandas as pd
            df = pd.DataFrame({k: v for k, v in cols.items()})
            check(df.shape[0] == 6 and "min_margin" in df.columns, "pandas DataFrame from /summary")
        except ImportError:
            print("note: pandas not importable, DataFrame check skipped")
        g = f["grid"]["min_margin"]
        check(g.shape == (3, 2), f"/grid/min_margin shape {g.shape} != (3, 2)")
        check(list(g.dims[0][0][()]) == [32, 64, 128], "grid axis 0 scale is not the widths")
        check(list(g.dims[1][0][()]) == [0, 1], "grid axis 1 scale is not the seeds")
        check(g.dims[0][0].name.endswith("width") and g.dims[1][0].name.endswith("seed"), "scale names")
        for r in range(n):
            i = [32, 64, 128].index(int(cols["width"][r]))
            check(abs(g[i, int(cols["seed"][r])] - cols["min_margin"][r]) < TOL, "grid value != summary value")
        pts = f["points"]
        check(s(pts.attrs["axis"]) == "width", "/points axis attribute")
        check(np.allclose(pts["gamma_mean"][()], g[()].mean(axis=1)), "gamma_mean != mean over seeds")
        check(np.allclose(pts["gamma_std"][()], g[()].std(axis=1)), "gamma_std != population std over seeds")
        check(pts["gamma_mean"].dims[0][0].name.endswith("width"), "/points/gamma_mean has no width scale")
        fit = f["fit"].attrs
        check(s(fit["model"]) == "rkrv", "default model of the width sweep is rkrv")
        for k in ["r2", "mse", "C_s", "C_x", "C_L"]:
            check(k in fit, f"/fit lacks attribute {k}")
        check(fit["C_s"] >= 0 and fit["C_x"] >= 0 and fit["C_L"] >= 1e-6, "fit constants must be non-negative")
        pred = pts["fit_prediction"][()]
        y = pts["fit_target"][()]
        r2 = 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)
        check(abs(r2 - fit["r2"]) < 1e-9, "stored R^2 does not match its definition")
        check(abs(np.mean((y - pred) ** 2) - fit["mse"]) < 1e-12, "stored MSE does not match its definition")
        check("akav" in f["fit"], "secondary model fits missing")
        # Per-job heavy arrays.
        runs = f["runs"]
        check(len(runs) == 6, f"expected 6 /runs groups, got {len(runs)}")
        key = s(cols["job"][0]).replace("/", ",").replace(".", "p")
        check(abs(runs[key]["per_key"][()].min() - cols["min_margin"][0]) < TOL, "per_key min != min_margin")

    # 2. Every preset kind at reduced size: deterministic bounds below the measured margin.
    kinds = {
        "fig2b-width": ["--widths", "48,96,192", "--seeds", "2", "--facts", "96"],
        "fig4-facts": ["--facts-grid", "32,64,128", "--seeds", "2", "--width", "128"],
        "exact-k2-facts": ["--facts-grid", "32,100,300", "--seeds", "2", "--dim", "12"],
        "fig5a-keys": ["--beta-points", "4", "--facts", "64"],
        "fig5b-values": ["--beta-points", "4", "--facts", "64"],
        "fig5c-both": ["--beta-points", "4", "--facts", "64"],
        "fig6-noise": ["--noise-grid", "0.01,0.05,0.2,0.5,1,2", "--seeds", "2", "--facts", "64", "--width", "128"],
    }
    for preset, extra in kinds.items():
        p = os.path.join(tmp, preset + ".h5")
        run(["--preset", preset, *extra], p)
        with h5py.File(p, "r") as f:
            c = {k: f["summary"][k][()] for k in f["summary"]}
            clean = c["clean_min_margin"]
            for b in ["bound_eq44", "bound_eq44_abs", "bound_eq43"]:
                bad = np.sum(c[b] > clean + TOL)
                check(bad == 0, f"{preset}: {b} above the measured clean margin at {bad} points")
            check(np.all(c["bound_signal"] <= c["signal_min"] + TOL), f"{preset}: signal bound above s_min")
            check(np.all(c["k_max_off"] <= np.sqrt(c["e_k"]) + TOL), f"{preset}: K_max^off > sqrt(E_K)")
            check(np.all(c["e_k"] >= c["bound_welch_ecol_lower"] - TOL), f"{preset}: Welch E_col bound violated")
            check(np.all(c["v_min"] >= -TOL), f"{preset}: V_min < 0 for equal-norm values")
            check(np.isfinite(f["fit"].attrs["r2"]), f"{preset}: fit R^2 not finite")
            if preset == "fig6-noise":
                check(s(f["fit"].attrs["model"]) == "noisy", "noise sweep fits the noisy model")
                check(np.all(c["l_bil"] > 0), "L_bil must be positive")
            if preset == "exact-k2-facts":
                check(np.all(c["width"] == 12 * 13 // 2), "exact-K2 rank d(d+1)/2 recorded as width")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ok")
