#!/usr/bin/env python3
"""Plot a `kata capacity` / `kata capacity-sweep` result: per map, decode accuracy and median pSNR
against K (log axes), one line per (d_head, key source), with the measured capacities (dots at
K*_psnr on pSNR = 1) and the theory thresholds of spec §4.6 stored beside them (vertical lines:
random-key prediction, Welch-ideal 2p and T*_PSD, softmax T_Soft). Reads /summary and /runs/<job>/.

Usage: kata_capacity.py RESULT.h5 [-o kata_capacity.png] [--dims 32,64] [--keys random]
"""
import argparse
import math
import sys

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()


def load(path):
    with open_result(path, ("summary", "runs"), "kata capacity") as f:
        s = f["summary"]
        n = len(s["job"][()])
        rows = []
        for i in range(n):
            row = {k: s[k][()][i] for k in s}
            row = {k: (text(v) if isinstance(v, (bytes, str)) else v) for k, v in row.items()}
            if "k_star_psnr" not in row:
                continue
            grp = f["runs"][row["job"].replace("/", ",").replace(".", "p")]
            row["curve"] = {k: grp[k][()] for k in ("K", "acc", "psnr_median", "psnr_mean_log10")}
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by kata capacity or kata capacity-sweep")
    ap.add_argument("-o", "--out", default="kata_capacity.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dims", default="", help="only these d_head values (comma-separated)")
    ap.add_argument("--keys", default="", help="only these key sources (comma-separated)")
    ap.add_argument("--dpi", type=int, default=130)
    args = ap.parse_args()
    rows = load(args.results)
    if args.dims:
        keep = {int(x) for x in args.dims.split(",")}
        rows = [r for r in rows if int(r["dim"]) in keep]
    if args.keys:
        keep = set(args.keys.split(","))
        rows = [r for r in rows if r["keys"] in keep]
    if not rows:
        sys.exit("no jobs to plot")
    maps = list(dict.fromkeys(r["map"] for r in rows))
    series = list(dict.fromkeys((int(r["dim"]), r["keys"]) for r in rows))
    colors = {s: f"C{i % 10}" for i, s in enumerate(series)}
    fig, axes = plt.subplots(2, len(maps), figsize=(3.4 * len(maps), 6.4), squeeze=False, sharex="col")
    for c, m in enumerate(maps):
        ax_acc, ax_p = axes[0][c], axes[1][c]
        for r in (r for r in rows if r["map"] == m):
            s = (int(r["dim"]), r["keys"])
            cur = r["curve"]
            order = np.argsort(cur["K"])
            K = np.asarray(cur["K"])[order]
            col = colors[s]
            ax_acc.plot(K, np.asarray(cur["acc"])[order], "-", color=col, lw=1.2, label=f"d={s[0]} {s[1]}")
            ax_p.plot(K, np.asarray(cur["psnr_median"])[order], "-", color=col, lw=1.2)
            ks = int(r["k_star_psnr"])
            if ks > 0:
                ax_p.plot([ks], [1.0], "o", color=col, ms=5, mfc="none" if int(r["k_star_psnr_censored"]) else col)
            # Theory thresholds for this (map, d): dashed = random-key prediction, dotted = Welch-ideal.
            for key, style in (("theory_random_map", "--"), ("theory_welch_softmax", ":")):
                v = float(r.get(key, float("nan")))
                if math.isfinite(v) and v > 0 and v < 10 * K.max():
                    ax_p.axvline(v, color=col, ls=style, lw=0.8)
            if m.startswith(("m1", "deg2")):
                ax_p.axvline(float(r["theory_welch_psd"]), color=col, ls=":", lw=0.8)
            if m.startswith("lin"):
                ax_p.axvline(float(r["theory_welch_linear"]), color=col, ls=":", lw=0.8)
            th = float(r["acc_threshold"])
        ax_acc.axhline(th, color="k", lw=0.6, ls="--")
        ax_p.axhline(1.0, color="k", lw=0.6, ls="--")
        ax_acc.set_title(m, fontsize=9)
        ax_acc.set_xscale("log", base=2)
        ax_p.set_xscale("log", base=2)
        ax_p.set_yscale("log")
        ax_acc.set_ylim(-0.02, 1.02)
        ax_p.set_xlabel("K (stored bindings)")
        if c == 0:
            ax_acc.set_ylabel("decode accuracy")
            ax_p.set_ylabel("median pSNR")
    # One legend for all panels (the panels share their line styles), below the grid.
    seen = {}
    for a in axes.flat:
        for h, lab in zip(*a.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), fontsize=7, loc="lower center",
                   ncol=min(4, len(seen)), bbox_to_anchor=(0.5, 0.0))
    import textwrap
    caption = ("kata capacity: dots = K*_psnr (open: censored at k_max); dashed = random-key prediction, "
               "dotted = Welch-ideal / softmax threshold")
    fig.suptitle(textwrap.fill(caption, width=max(40, int(48 * len(maps)))), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
