#!/usr/bin/env python3
"""Figure 2a analogue: margins govern usability (spec hebbian.md §4.3, claim 13). x = MLP parameters;
left axis: standalone MLP accuracy and Transformer accuracy (pre-trained attention + inserted MLP on
SSFR(B)), mean +- std over seeds; right axis: normalized-output gamma_min, mean +- std. Prints the smallest
width where the MLP stores every fact (gamma_min > 0) and where the Transformer reaches 99%.
Usage: fig2a.py RESULTS.h5 [-o fig2a.png]      Results: hebb ssfr usability --preset fig2a (fig7 reads it too)"""
import argparse

import numpy as np

import memcap_plot as mp


def usability(path):
    with mp.open_result(path, ("usability", "summary"), "hebb ssfr usability") as f:
        u = {k: f["usability"][k][()] for k in f["usability"]}
        tau = float(f["usability"].attrs["tau_star"])
    return u, tau


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file of `hebb ssfr usability`")
    ap.add_argument("-o", "--out", default="fig2a.png")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    u, _ = usability(args.results)
    W = u["mlp_params"].astype(float)
    plt = mp.pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for key, label, color in (("mlp_acc", "MLP accuracy", "C0"), ("combined_acc", "Transformer accuracy", "C3")):
        m, s = u[key + "_mean"], u[key + "_std"]
        ax.plot(W, m, marker="o", ms=4, color=color, label=label)
        ax.fill_between(W, m - s, m + s, color=color, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("MLP parameters")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax2 = ax.twinx()
    g, gs = u["gamma_min_mean"], u["gamma_min_std"]
    ax2.plot(W, g, "--", marker="s", ms=3, color="C2", label="$\\gamma_{min}$")
    ax2.fill_between(W, g - gs, g + gs, color="C2", alpha=0.15)
    ax2.axhline(0, color="k", lw=0.6)
    ax2.set_ylabel("$\\gamma_{min}$ (normalized output)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="center right")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("Margins govern usability", fontsize=10)
    pos = np.flatnonzero(g > 0)
    full = np.flatnonzero(u["combined_acc_mean"] >= 0.99)
    print("first width with mean gamma_min > 0: " + (f"m={u['width'][pos[0]]} (MLP acc {u['mlp_acc_mean'][pos[0]]:.4f}, "
          f"Transformer acc {u['combined_acc_mean'][pos[0]]:.4f})" if len(pos) else "none"))
    print("first width with Transformer accuracy >= 0.99: " +
          (f"m={u['width'][full[0]]} (gamma_min {g[full[0]]:.4f})" if len(full) else "none"))
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
