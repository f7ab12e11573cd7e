#!/usr/bin/env python3
"""Figure 2c analogue: MLP fact-storage capacity, log2 F (y) against log2 W (x), one line per (method, d),
with the paper's ratio ranges W_data/W_gd and W_ntk/W_data printed (spec hebbian.md §4.2, §5 claims 6-8).
Usage: fig2c.py RESULTS.h5 [MORE.h5 ...] [-o fig2c.png] [--fit] [--stat w50|median]
Results: hebb capacity --preset fig2c --out RESULTS.h5 (or any `hebb capacity` file). Several files are drawn as
one figure when the preset ran in pieces (e.g. the closed forms in one run, GD per d in others); a (method, d, F)
point may appear in only one of them, and all must share one spike beta.
Markers sit at W50 (the smallest W at which at least half of the fact-set seeds store every fact; with one
seed, W(m*)); the error bar reaches W100 (all seeds). A point no seed stored is left out."""
import argparse
import math

import numpy as np

import memcap_plot as mp

LABELS = {
    "gd": "GD",
    "hebbian": "Ours (no whitening)",
    "hebbian:whitened": "Ours (whitened)",
    "hebbian:data-dependent": "Ours (data-dependent)",
    "ntk": "NTK",
}
COLORS = {"gd": "C3", "hebbian": "C1", "hebbian:whitened": "C0", "hebbian:data-dependent": "C2", "ntk": "C4"}
MARKERS = ["o", "s", "^", "D", "v", "P"]


def family(method):
    """Canonical method name of a stored spec text ("gd,epochs=500" -> "gd")."""
    head = method.split(",")[0]
    return "gd" if head.startswith("gd") else head


def load_points(path):
    """/points of a `hebb capacity` file as a dict of numpy arrays (method as str)."""
    with mp.open_result(path, ("points", "summary"), "hebb capacity") as f:
        pts = {k: f["points"][k][()] for k in f["points"]}
        beta = float(np.max(f["summary"]["beta"][()])) if "beta" in f["summary"] else 0.0
    pts["method"] = mp.texts(pts["method"])
    pts["family"] = np.array([family(m) for m in pts["method"]])
    return pts, beta


def combine(parts):
    """One points dict from several (path, pts, beta) pieces; refuses mixed beta and a repeated point."""
    betas = {b for _, _, b in parts}
    if len(betas) > 1:
        raise SystemExit("fig2c: the files have different spike beta (" +
                         ", ".join(f"{p}: {b:g}" for p, _, b in parts) + "); draw them separately")
    seen = {}
    for path, pts, _ in parts:
        for i in range(len(pts["method"])):
            key = (str(pts["method"][i]), int(pts["dim"][i]), int(pts["facts"][i]))
            if key in seen:
                raise SystemExit(f"fig2c: point method={key[0]} d={key[1]} F={key[2]} is in both {seen[key]} and "
                                 f"{path}; pass each point once")
            seen[key] = path
    keys = set.intersection(*(set(pts) for _, pts, _ in parts))
    pts = {k: np.concatenate([np.asarray(q[k]) for _, q, _ in parts]) for k in keys}
    return pts, parts[0][2]


def by_point(pts, stat):
    """{(d, F): {method family: W}} in (d, F) order; W is NaN where the point stored no fact set."""
    by = {}
    for i, fam in enumerate(pts["family"]):
        by.setdefault((int(pts["dim"][i]), int(pts["facts"][i])), {})[fam] = value(pts, i, stat)
    return dict(sorted(by.items()))


def data_gd_by_point(pts, stat="w50"):
    """(d, F, W_gd, W_data, W_data/W_gd) at every point where both GD and data-dependent stored every fact,
    whether or not NTK did (the paper's range, ratio_ranges, also needs NTK)."""
    rows = []
    for (d, F), w in by_point(pts, stat).items():
        g, dd = w.get("gd", math.nan), w.get("hebbian:data-dependent", math.nan)
        if np.isfinite(g) and np.isfinite(dd):
            rows.append((d, F, g, dd, dd / g))
    return rows


def value(pts, i, stat):
    w = pts["params50"][i] if stat == "w50" else pts["params_median"][i]
    return float(w) if np.isfinite(w) and w > 0 else math.nan


def ratio_ranges(pts, stat="w50"):
    """Paper ratios (plot_fig2.py `_capacity_savings_ranges`): over the (d, F) points where gd,
    data-dependent and ntk all stored every fact, min-max of W_data/W_gd and W_ntk/W_data. When gd is
    absent from the file, W_ntk/W_data over the points where both of those succeeded."""
    have_gd = "gd" in set(pts["family"])
    data_gd, ntk_data = [], []
    for w in by_point(pts, stat).values():
        g, dd, n = w.get("gd", math.nan), w.get("hebbian:data-dependent", math.nan), w.get("ntk", math.nan)
        if have_gd:
            if all(np.isfinite([g, dd, n])):
                data_gd.append(dd / g)
                ntk_data.append(n / dd)
        elif np.isfinite(dd) and np.isfinite(n):
            ntk_data.append(n / dd)
    return data_gd, ntk_data


def fmt_range(r):
    return f"{min(r):.3g}-{max(r):.3g}x over {len(r)} point(s)" if r else "n/a (no point where the methods all succeeded)"


def powerlaw(ws, fs):
    """Slope and intercept of log2 F = a log2 W + b (least squares); None with < 2 points."""
    if len(ws) < 2:
        return None
    a, b = np.polyfit(np.log2(ws), np.log2(fs), 1)
    return a, b


def plot(pts, ax, stat="w50", fit=False):
    fams = [f for f in LABELS if f in set(pts["family"])] + sorted(set(pts["family"]) - set(LABELS))
    dims = sorted(set(int(d) for d in pts["dim"]))
    for fam in fams:
        color = COLORS.get(fam, None)
        all_w, all_f = [], []
        for k, d in enumerate(dims):
            idx = [i for i in range(len(pts["dim"])) if pts["family"][i] == fam and int(pts["dim"][i]) == d]
            idx = [i for i in idx if np.isfinite(value(pts, i, stat))]
            if not idx:
                continue
            idx.sort(key=lambda i: pts["facts"][i])
            w = np.array([value(pts, i, stat) for i in idx])
            F = np.array([float(pts["facts"][i]) for i in idx])
            w100 = np.array([float(pts["params100"][i]) for i in idx])
            right = np.where(np.isfinite(w100), np.maximum(w100 - w, 0), 0)
            seeds = int(np.max(pts["seeds"][idx]))
            label = f"{LABELS.get(fam, fam)}, d={d}"
            ax.errorbar(w, F, xerr=[np.zeros_like(w), right] if seeds > 1 else None, marker=MARKERS[k % len(MARKERS)],
                        ms=4, lw=1.2, color=color, capsize=2, label=label)
            all_w += list(w)
            all_f += list(F)
        if fit:
            pl = powerlaw(all_w, all_f)
            if pl:
                a, b = pl
                ws = np.array([min(all_w), max(all_w)])
                ax.plot(ws, 2 ** b * ws ** a, ":", color=color, lw=1,
                        label=f"{LABELS.get(fam, fam)} fit: F ~ W^{a:.2f}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("parameters W at the smallest width storing every fact")
    ax.set_ylabel("facts F")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2, loc="upper left")


def main(default_out="fig2c.png", title="MLP fact-storage capacity (isotropic)", expect_beta=0.0, doc=__doc__):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="HDF5 file(s) written by `hebb capacity` (pieces of one preset)")
    ap.add_argument("-o", "--out", default=default_out, help="PNG to write (default: %(default)s)")
    ap.add_argument("--fit", action="store_true", help="per-method power-law fit F ~ c W^slope (log2 polyfit)")
    ap.add_argument("--stat", choices=["w50", "median"], default="w50",
                    help="W per point: w50 (smallest W where >= 50%% of seeds succeed) or median over seeds")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    plt = mp.pyplot()
    pts, beta = combine([(p, *load_points(p)) for p in args.results])
    if abs(beta - expect_beta) > 1e-12:
        print(f"note: {', '.join(args.results)} has spike beta = {beta:g} (this figure is drawn for beta = "
              f"{expect_beta:g})")
    rows = data_gd_by_point(pts, args.stat)
    if rows:
        print("W_data/W_gd where both stored every fact:  d      F     W_gd   W_data  ratio")
        for d, F, g, dd, r in rows:
            print(f"{'':42s}{d:3d} {F:6d} {g:8.0f} {dd:8.0f} {r:6.2f}")
    data_gd, ntk_data = ratio_ranges(pts, args.stat)
    print(f"W_data/W_gd : {fmt_range(data_gd)}   (paper, isotropic: 6-10x; anisotropic: 4-8x; as the paper's "
          f"plot code, only where gd, data-dependent and NTK all stored every fact)")
    print(f"W_ntk/W_data: {fmt_range(ntk_data)}   (paper: 10-10^4x)")
    fig, ax = plt.subplots(figsize=(7, 5))
    plot(pts, ax, args.stat, args.fit)
    nseeds = int(np.max(pts["seeds"])) if len(pts["seeds"]) else 0
    ax.set_title(f"{title}, beta={beta:g}, {nseeds} seed(s)", fontsize=10)
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
