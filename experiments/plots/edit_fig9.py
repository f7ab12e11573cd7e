#!/usr/bin/env python3
"""Fig. 9 of 'MLPs are Hebbians' (spec hebbian.md §4.9, §5 claim 17) from a `hebb edit table1` result on a
base with the data-dependent (constructed) fact expert (--methods swap-constructed,memit,alphaedit,rome):
the constructed-MLP swap's score against the edit fraction beside the best baseline (the best of MEMIT,
AlphaEdit and ROME at each fraction, after their own grid search), with r_NF of both. The paper: swap
score > 0.98 through 10%, best baseline 0.847 at 10%, swap r_NF < 1.11.

Usage: experiments/plots/with_python.sh experiments/plots/edit_fig9.py RESULT.h5 [-o edit_fig9.png]
"""
import argparse
import sys

import numpy as np

from memcap_plot import open_result, pyplot, texts

plt = pyplot()
SWAPS = ("swap-constructed", "swap")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by hebb edit table1 (or hebb merge of its shards)")
    ap.add_argument("-o", "--out", default="edit_fig9.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    with open_result(a.results, ("summary", "best"), "hebb edit table1") as f:
        b = {k: f["best"][k][()] for k in f["best"]}
    meth = texts(b["method"])
    swap = next((m for m in SWAPS if np.any(meth == m)), None)
    if swap is None:
        sys.exit(f"{a.results}: /best has no swap or swap-constructed rows (run hebb edit table1 with one of them)")
    if swap != "swap-constructed":
        print("note: the swap rows are the GD-MSE expert's (swap), not the constructed expert's of Fig. 9")
    fracs = np.unique(b["fraction"])
    rows = []
    for fr in fracs:
        at = b["fraction"] == fr
        s = np.flatnonzero(at & (meth == swap))
        base = np.flatnonzero(at & (meth != swap) & np.isfinite(b["score"]))
        bb = base[np.argmax(b["score"][base])] if len(base) else None
        rows.append((fr, b["score"][s[0]] if len(s) else np.nan, b["r_nf"][s[0]] if len(s) else np.nan,
                     meth[bb] if bb is not None else "-", b["score"][bb] if bb is not None else np.nan,
                     b["r_nf"][bb] if bb is not None else np.nan))
    fr = np.array([r[0] for r in rows])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(100 * fr, [r[1] for r in rows], marker="o", label=f"MLP Swapping ({swap})")
    ax1.plot(100 * fr, [r[4] for r in rows], marker="s", label="best baseline")
    for r in rows:
        ax1.annotate(r[3], (100 * r[0], r[4]), fontsize=7, textcoords="offset points", xytext=(3, -10))
    ax1.set_xlabel("edit fraction (%)")
    ax1.set_ylabel("score")
    ax1.set_ylim(-0.02, 1.02)
    ax1.set_title("Fig. 9: constructed-MLP swap vs best baseline")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.plot(100 * fr, [r[2] for r in rows], marker="o", label="MLP Swapping")
    ax2.plot(100 * fr, [r[5] for r in rows], marker="s", label="best baseline")
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.set_xlabel("edit fraction (%)")
    ax2.set_ylabel("r_NF")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"{'edit%':>5} {'swap':>7} {'r_NF':>7} | {'baseline':<10} {'score':>7} {'r_NF':>7} | {'gap pp':>7}")
    for r in rows:
        print(f"{100 * r[0]:5.3g} {r[1]:7.3f} {r[2]:7.3f} | {r[3]:<10} {r[4]:7.3f} {r[5]:7.3f} | {100 * (r[1] - r[4]):7.1f}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
