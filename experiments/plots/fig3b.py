#!/usr/bin/env python3
"""Figure 3b analogue: Transformer storage capacity, fact-adaptive protocol (spec hebbian.md §4.6, claim 10):
log2 F (y) against log2 W (x) at the smallest width m* whose MLP makes the trained attention reach
best_acc = 1 on map B, one line per method, with the fit W = C F (log2 F + b) for GD and data-dependent and
the paper's ratios W_data/W_gd (paper: <= 3x) and W_ntk/W_data (paper: 15-63x) over the F where GD,
data-dependent and NTK all succeeded.
Usage: fig3b.py RESULTS.h5 [MORE.h5 ...] [-o fig3b.png]
Results: hebb ssfr capacity --preset fig3b --out RESULTS.h5; a preset run in pieces (--facts subsets) is drawn
from all its files at once (a point given in two files is refused)."""
import argparse

import numpy as np

import memcap_plot as mp
import ssfr_plot as sp


def capacity_points(s, protocol):
    """{family: (F array, W array)} of the found points of one protocol, sorted by F."""
    keep = (s["protocol"] == protocol) & (s["found"] == 1)
    out = {}
    for fam in sorted(set(sp.family(m) for m in s["mlp"][keep])):
        idx = [i for i in np.flatnonzero(keep) if sp.family(s["mlp"][i]) == fam]
        idx.sort(key=lambda i: s["facts"][i])
        out[fam] = (s["facts"][idx].astype(float), s["params"][idx].astype(float))
    return out


def ratios(pts):
    by = {fam: dict(zip(F, W)) for fam, (F, W) in pts.items()}
    common = set(by.get("gd", {})) & set(by.get("hebbian:data-dependent", {})) & set(by.get("ntk", {}))
    dd_gd = [by["hebbian:data-dependent"][f] / by["gd"][f] for f in sorted(common)]
    ntk_dd = [by["ntk"][f] / by["hebbian:data-dependent"][f] for f in sorted(common)]
    return dd_gd, ntk_dd


def draw(ax, pts, style="-", suffix=""):
    for fam, (F, W) in pts.items():
        ax.plot(W, F, style, marker="o", ms=4, color=sp.COLORS.get(fam), label=sp.LABELS.get(fam, fam) + suffix)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="HDF5 file(s) of `hebb ssfr capacity --protocol fact-adaptive`")
    ap.add_argument("-o", "--out", default="fig3b.png")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    s = sp.summaries(args.results, "hebb ssfr capacity")
    pts = capacity_points(s, "fact-adaptive")
    plt = mp.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    draw(ax, pts)
    for fam in ("gd", "hebbian:data-dependent"):
        if fam in pts:
            fit = sp.fit_f_log_f(*pts[fam])
            if fit:
                C, b = fit
                F = np.geomspace(pts[fam][0].min(), pts[fam][0].max(), 50)
                ax.plot(C * F * (np.log2(F) + b), F, ":", color=sp.COLORS[fam], lw=1,
                        label=f"{sp.LABELS[fam]} fit W = {C:.3g} F (log2 F + {b:.2f})")
                edge = b >= sp.FIT_B_HI - 1e-9
                print(f"{fam}: W = {C:.4g} F (log2 F + {b:.3f})"
                      + ("  [b at the fit's upper end: W grows slower than F log F over these points;"
                         " the fit is not a measurement of the F log F law]" if edge else ""))
    dd_gd, ntk_dd = ratios(pts)
    print(f"W_data/W_gd : {sp.fmt_range(dd_gd)}   (paper: <= 3x)")
    print(f"W_ntk/W_data: {sp.fmt_range(ntk_dd)}   (paper: 15-63x)")
    sp.capacity_axes(ax, "MLP parameters W at m*", "Transformer capacity (fact-adaptive, best_acc = 1 on map B)")
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
