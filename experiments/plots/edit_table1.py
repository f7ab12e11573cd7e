#!/usr/bin/env python3
"""Fig. 3c and Fig. 8 of 'MLPs are Hebbians' (spec hebbian.md §4.9) from a `hebb edit table1` result: the
best score per method against the edit fraction (Fig. 3c), and the r_NF of each method's best run at each
fraction (Fig. 8), both from /best (the best hyper-parameter point per (fraction, method)); the paper's
Table 1 cells are drawn as open markers where /best has them. Prints Table 1 beside the paper's.

Usage: experiments/plots/with_python.sh experiments/plots/edit_table1.py RESULT.h5 [-o edit_table1.png]
"""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, texts

plt = pyplot()
LABEL = {"swap": "MLP Swapping", "swap-constructed": "MLP Swapping (constructed)", "memit": "MEMIT",
         "alphaedit": "AlphaEdit", "rome": "ROME"}


def load(path):
    with open_result(path, ("summary", "best"), "hebb edit table1") as f:
        b = {k: f["best"][k][()] for k in f["best"]}
    b["method"] = texts(b["method"])
    return b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by hebb edit table1 (or hebb merge of its shards)")
    ap.add_argument("-o", "--out", default="edit_table1.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    b = load(a.results)
    methods = list(dict.fromkeys(b["method"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(methods))
    fracs = np.unique(b["fraction"])
    for i, m in enumerate(methods):
        sel = b["method"] == m
        order = np.argsort(b["fraction"][sel])
        f, s, r = (b[k][sel][order] for k in ("fraction", "score", "r_nf"))
        ps, pr = b["paper_score"][sel][order], b["paper_r_nf"][sel][order]
        line = ax1.plot(100 * f, s, marker="o", label=LABEL.get(m, m))[0]
        if np.any(np.isfinite(ps)):
            ax1.plot(100 * f, ps, marker="o", ls=":", mfc="none", color=line.get_color())
        x = np.searchsorted(fracs, f) + (i - (len(methods) - 1) / 2) * width
        ax2.bar(x, r, width, color=line.get_color(), label=LABEL.get(m, m))
        if np.any(np.isfinite(pr)):
            ax2.plot(x, pr, ls="none", marker="_", ms=12, mew=2, color="k")
    ax1.set_xlabel("edit fraction (%)")
    ax1.set_ylabel("score (harmonic mean)")
    ax1.set_ylim(-0.02, 1.02)
    ax1.set_title("Fig. 3c: best score per method (dotted: paper)")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.set_xticks(range(len(fracs)), [f"{100 * f:g}%" for f in fracs])
    ax2.set_ylabel("r_NF = exp(CE_post - CE_pre)")
    ax2.set_title("Fig. 8: non-fact CE ratio of the best run (black: paper)")
    ax2.grid(alpha=0.3, axis="y")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"{'edit%':>5} {'method':<16} {'Eff':>6} {'Para':>6} {'Spec':>6} {'Score':>6} {'r_NF':>7} | {'paper':>6} {'r_NF':>7}")
    for k in np.lexsort((np.arange(len(b["method"])), b["fraction"])):
        print(f"{100 * b['fraction'][k]:5.3g} {b['method'][k]:<16} {b['efficacy'][k]:6.3f} {b['paraphrase'][k]:6.3f} "
              f"{b['specificity'][k]:6.3f} {b['score'][k]:6.3f} {b['r_nf'][k]:7.3f} | {b['paper_score'][k]:6.3f} "
              f"{b['paper_r_nf'][k]:7.3f}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
