#!/usr/bin/env python3
"""Figure 10 analogue: Transformer capacity under the 99% training-accuracy criterion (spec hebbian.md §4.7,
claim 11): log2 F* (the largest F with best_train_acc >= 0.99 at each fixed width) against log2 W, one line
per method; with --compare FACT_ADAPTIVE.h5 the fact-adaptive points (fig3b) are drawn dashed and the ratio
F_train99 / F_fact-adaptive at equal W (log-log interpolation of the fact-adaptive curve) is printed
(paper: 2-8x more facts).
Usage: fig10.py RESULTS.h5 [--compare fig3b.h5] [-o fig10.png]
Results: hebb ssfr capacity --preset fig10 --out RESULTS.h5"""
import argparse

import numpy as np

import memcap_plot as mp
import ssfr_plot as sp
from fig3b import capacity_points, draw


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file of `hebb ssfr capacity --protocol train99`")
    ap.add_argument("--compare", help="HDF5 file of the fact-adaptive protocol (fig3b) to draw beside it")
    ap.add_argument("-o", "--out", default="fig10.png")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    pts = capacity_points(sp.summary(args.results, "hebb ssfr capacity"), "train99")
    plt = mp.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    draw(ax, pts, "-", " (train 99%)")
    if args.compare:
        fa = capacity_points(sp.summary(args.compare, "hebb ssfr capacity"), "fact-adaptive")
        draw(ax, fa, "--", " (fact-adaptive)")
        for fam, (F, W) in pts.items():
            if fam not in fa or len(fa[fam][0]) < 2:
                continue
            Ff, Wf = fa[fam]
            order = np.argsort(Wf)
            inside = (W >= Wf.min()) & (W <= Wf.max())
            if not inside.any():
                print(f"{fam}: no train-99 width inside the fact-adaptive W range")
                continue
            f_fa = 2 ** np.interp(np.log2(W[inside]), np.log2(Wf[order]), np.log2(Ff[order]))
            r = list(F[inside] / f_fa)
            print(f"{sp.LABELS.get(fam, fam)}: F_train99 / F_fact-adaptive = {sp.fmt_range(r)}   (paper: 2-8x)")
    sp.capacity_axes(ax, "MLP parameters W", "Transformer capacity, 99% training accuracy")
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
