#!/usr/bin/env python3
"""Plot a `ramnet recall` result (spec ramnet.md §3 E7): (1) recall accuracy against N per mixer, one panel
per (dp, U, beta), with the hard-write prediction |A|(1 - (1 - 1/|A|)^N)/N dashed and the 0.9 / 0.5
thresholds dotted; (2) the capacities N*_0.1 and N*_0.5 against the address count |A| = dp^U (log-log),
one line per mixer (RAM-Net Top-K separately), one column per beta setting, censored capacities (still
above threshold at n_max) as open markers, the prediction as a black line. Reads /summary and /runs/<job>/.

Usage: ramnet_e7.py RESULT.h5 [-o ramnet_e7.png] [--capacity-out ramnet_e7_capacity.png]
"""
import argparse
import sys

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()

COLORS = {"ramnet": "C0", "ramnet K": "C9", "softmax": "C3", "kappa": "C1", "ram-linear": "C2", "elu": "C5",
          "favor": "C4"}


def series_name(row):
    return f"ramnet K={int(row['K'])}" if row["mixer"] == "ramnet" and int(row["K"]) > 0 else row["mixer"]


def color(name):
    return COLORS["ramnet K"] if name.startswith("ramnet K") else COLORS.get(name, "k")


# ramnet (full, cumulative, mass-aware), kappa and ram-linear are the same function (spec §2.9): their
# lines coincide, so they get different dashes and widths to stay visible on top of each other.
STYLES = {"ramnet": dict(lw=2.4, ls="-"), "kappa": dict(lw=1.4, ls="--"), "ram-linear": dict(lw=0.9, ls=":")}


def style(name):
    return STYLES.get(name, dict(lw=1.0, ls="-"))


def load(path):
    with open_result(path, ("summary", "runs"), "ramnet recall") as f:
        s = f["summary"]
        rows = []
        for i in range(len(s["job"][()])):
            row = {k: s[k][()][i] for k in s}
            row = {k: (text(v) if isinstance(v, (bytes, str)) else v) for k, v in row.items()}
            grp = f["runs"][row["job"].replace("/", ",").replace(".", "p")]
            row["curve"] = {k: grp[k][()] for k in ("N", "acc", "pred_acc")}
            rows.append(row)
    return rows


def prediction(addresses, N):
    N = np.asarray(N, dtype=float)
    return -addresses * np.expm1(N * np.log1p(-1.0 / addresses)) / N


def accuracy_figure(rows, out, dpi):
    panels = sorted({(int(r["dp"]), int(r["U"]), int(r["beta_id"])) for r in rows})
    betas = sorted({p[2] for p in panels})
    cols = sorted({(p[0], p[1]) for p in panels})
    fig, axes = plt.subplots(len(betas), len(cols), figsize=(2.8 * len(cols), 2.6 * len(betas)), squeeze=False)
    for bi, b in enumerate(betas):
        for ci, (dp, U) in enumerate(cols):
            ax = axes[bi][ci]
            sel = [r for r in rows if (int(r["dp"]), int(r["U"]), int(r["beta_id"])) == (dp, U, b)]
            for r in sel:
                c = r["curve"]
                o = np.argsort(c["N"])
                name = series_name(r)
                ax.plot(c["N"][o], c["acc"][o], marker=".", ms=3, color=color(name), label=name, **style(name))
            if sel:
                A = float(dp) ** U
                nmax = max(int(r["n_max"]) for r in sel)
                N = np.unique(np.logspace(0, np.log10(max(nmax, 2)), 200).astype(int))
                ax.plot(N, prediction(A, N), "k--", lw=0.8, label="hard-write prediction")
                beta = float(sel[0]["beta_r"])
                ax.set_title(f"dp={dp} U={U} |A|={int(A)} beta={beta:.3g}", fontsize=8)
            for t in (0.9, 0.5):
                ax.axhline(t, color="0.6", lw=0.6, ls=":")
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
            ax.tick_params(labelsize=7)
            if ci == 0:
                ax.set_ylabel("top-1 recall accuracy", fontsize=8)
            if bi == len(betas) - 1:
                ax.set_xlabel("stored pairs N", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=dpi)
    print(f"wrote {out}")


def capacity_figure(rows, out, dpi):
    betas = sorted({int(r["beta_id"]) for r in rows})
    fig, axes = plt.subplots(2, len(betas), figsize=(4.6 * len(betas), 7.0), squeeze=False)
    for bi, b in enumerate(betas):
        sel = [r for r in rows if int(r["beta_id"]) == b]
        for di, (col, cens, delta) in enumerate((("n_star_01", "n_star_01_censored", 0.1),
                                                  ("n_star_05", "n_star_05_censored", 0.5))):
            ax = axes[di][bi]
            names = list(dict.fromkeys(series_name(r) for r in sel))
            for dp, marker in ((4, "o"), (8, "s")):
                for name in names:
                    pts = sorted((float(r["addresses"]), max(float(r[col]), 0.5), int(r[cens]))
                                 for r in sel if series_name(r) == name and int(r["dp"]) == dp)
                    if not pts:
                        continue
                    A = np.array([p[0] for p in pts])
                    n = np.array([p[1] for p in pts])
                    ax.plot(A, n, color=color(name), label=name if dp == 4 else None, **style(name))
                    for a, v, c in pts:
                        ax.plot(a, v, marker, ms=5, color=color(name), mfc="none" if c else color(name))
            A = np.unique([float(r["addresses"]) for r in sel])
            grid = np.logspace(np.log10(A.min()), np.log10(A.max()), 50)
            pred = [next(N for N in range(1, 10 ** 7) if prediction(a, N + 1) < 1 - delta) for a in grid]
            ax.plot(grid, pred, "k-", lw=1.4, label="hard-write prediction")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("|A| = dp^U  (circles dp=4, squares dp=8)", fontsize=8)
            ax.set_ylabel(f"N*_{delta:g}", fontsize=9)
            br = [float(r["beta_r"]) for r in sel]
            ax.set_title(f"beta_id {b} (beta {min(br):.3g}..{max(br):.3g}): N*_{delta:g}; open = censored",
                         fontsize=9)
            ax.tick_params(labelsize=7)
            if di == 0 and bi == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by ramnet recall (capacity search)")
    ap.add_argument("-o", "--out", default="ramnet_e7.png", help="accuracy-vs-N figure (default: %(default)s)")
    ap.add_argument("--capacity-out", default="ramnet_e7_capacity.png",
                    help="N* vs |A| figure (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=130)
    args = ap.parse_args()
    rows = load(args.results)
    if not rows:
        sys.exit("no jobs to plot")
    accuracy_figure(rows, args.out, args.dpi)
    if all(int(r["n_star_01"]) >= 0 for r in rows):
        capacity_figure(rows, args.capacity_out, args.dpi)
    else:
        print("no capacity search in this file (--N runs): skipped the N* figure")


if __name__ == "__main__":
    main()
