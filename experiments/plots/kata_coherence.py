"""KATA dictionaries over the field size s: coherence of MUB, random codes and DeVore (r = 2) against
the Welch floor for the same (d, T), and the number of lines a greedy packing reaches at the MUB
coherence 1/sqrt(s) next to s(s+1). Input: the folder written by experiments/kata_theory_plots.sh."""
import argparse
import glob
import os
import re
import sys

import numpy as np

from memcap_plot import open_result, pyplot

plt = pyplot()


def welch(D, T):
    T = np.asarray(T, float)
    return np.where(T > D, np.sqrt(np.maximum(T - D, 0) / (D * (T - 1))), 0.0)


def load(folder, family):
    rows = []
    for path in glob.glob(os.path.join(folder, f"{family}_s*.h5")):
        s = int(re.search(r"_s(\d+)\.h5$", path).group(1))
        with open_result(path, ("summary",), "kata dict") as f:
            g = f["summary"]
            rows.append((s, int(g["count"][0]), int(g["dim"][0]), float(g["coherence"][0])))
    if not rows:
        return None
    rows.sort()
    s, T, d, c = map(np.array, zip(*rows))
    return {"s": s, "T": T, "d": d, "coh": c}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("folder", help="folder with mub_s*.h5, random_s*.h5, greedy_s*.h5, devore_s*.h5 (kata dict)")
    ap.add_argument("-o", "--out", default="kata_coherence.png")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    fam = {k: load(a.folder, k) for k in ("mub", "random", "greedy", "devore")}
    if fam["mub"] is None and fam["devore"] is None:
        sys.exit(f"{a.folder}: no mub_s*.h5 or devore_s*.h5 files (run experiments/kata_theory_plots.sh)")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    if fam["mub"] is not None:
        m = fam["mub"]
        ax.plot(m["s"], m["coh"], "o-", color="C0", label="MUB (realified), $d=2s$, $T=s(s+1)$")
        ax.plot(m["s"], welch(m["d"], m["T"]), "--", color="C0", alpha=0.7, label="Welch floor, same $(d,T)$")
    if fam["random"] is not None:
        r = fam["random"]
        ax.plot(r["s"], r["coh"], "s:", color="C2", ms=4, label="random code, same $(d,T)$ as MUB")
    if fam["devore"] is not None:
        v = fam["devore"]
        ax.plot(v["s"], v["coh"], "^-", color="C3", label="DeVore $r=2$, $d=s^2$, $T=s^3$")
        ax.plot(v["s"], welch(v["d"], v["T"]), "--", color="C3", alpha=0.7, label="Welch floor (DeVore $(d,T)$)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("field size $s$")
    ax.set_ylabel("coherence $\\max_{i\\neq j}|\\langle u_i,u_j\\rangle|$")
    ax.set_title("dictionary coherence vs Welch floor")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if fam["greedy"] is not None:
        g = fam["greedy"]
        bx.plot(g["s"], g["T"], "d-", color="C1", label="greedy line packing, $a=1/\\sqrt{s}$ in $R^{2s}$")
    if fam["mub"] is not None:
        bx.plot(fam["mub"]["s"], fam["mub"]["T"], "o-", color="C0", label="MUB $s(s+1)$ at coherence $1/\\sqrt{s}$")
    bx.set_xscale("log", base=2)
    bx.set_yscale("log")
    bx.set_xlabel("field size $s$")
    bx.set_ylabel("number of vectors $T$")
    bx.set_title("vectors at coherence $1/\\sqrt{s}$ (PSD interference $1/s$)")
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
