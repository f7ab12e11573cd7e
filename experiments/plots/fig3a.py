#!/usr/bin/env python3
"""Figure 3a analogue: attention-noise ceiling eps_attn = max ||o_Q - e_k|| against the junk length J, one
line per (d, F) (spec hebbian.md §4.4, claim 12: the ceiling grows with J). Drawn as the mean over seeds
with a +-1 std band (the paper's "average over four seeds"); --best draws the value of the seed with the
best training accuracy instead (the released code's choice, spec §7.3.10).
Usage: fig3a.py RESULTS.h5 [--best] [-o fig3a.png]      Results: hebb ssfr noise --preset fig3a"""
import argparse

import numpy as np

import memcap_plot as mp
import ssfr_plot as sp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file of `hebb ssfr noise`")
    ap.add_argument("--best", action="store_true", help="best-seed value (code) instead of the mean over seeds")
    ap.add_argument("-o", "--out", default="fig3a.png")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    s = sp.summary(args.results, "hebb ssfr noise")
    plt = mp.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for k, (d, F) in enumerate(sorted(set(zip(s["dim"], s["facts"])))):
        sel = (s["dim"] == d) & (s["facts"] == F)
        Js = sorted(set(s["junk"][sel]))
        y, e = [], []
        for J in Js:
            i = np.flatnonzero(sel & (s["junk"] == J))
            v = s["eps_attn"][i]
            if args.best:
                y.append(v[np.argmax(s["best_train_acc"][i])])
                e.append(0.0)
            else:
                y.append(v.mean())
                e.append(v.std(ddof=1) if len(v) > 1 else 0.0)
        y, e = np.array(y), np.array(e)
        ax.plot(Js, y, marker="o", color=f"C{k}", label=f"d={d}, F={F}")
        ax.fill_between(Js, y - e, y + e, color=f"C{k}", alpha=0.2)
        grows = all(np.diff(y) > 0)
        print(f"d={d} F={F}: eps_attn " + ", ".join(f"J={J}: {v:.4f}" for J, v in zip(Js, y)) +
              f"   ({'grows' if grows else 'does not grow monotonically'} with J)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("junk length J")
    ax.set_ylabel("attention noise ceiling $\\epsilon_{attn}$")
    ax.set_title("Attention noise grows with junk length", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
