#!/usr/bin/env python3
"""Experiment E2 (spec ramnet.md §3, paper Fig. 3 / Fig. 5 analogue): attention JS and head NMSE of
κ-attention against the softmax teacher as β = f·β* varies, each divided by its value at f = 1, from a
`ramnet attn` result (its /relative table). One curve per generator (e.g. gauss σ = 0.5, 1, 1.5); the
vertical lines mark f = 1.26 and 1.58. --student picks another student (kinf, topk, gsu_mass, ...).

Usage: ramnet_e2.py RESULT.h5 [-o ramnet_e2.png] [--student kappa] [--codebook circular]
Results: ramnet attn --out RESULT.h5 (default: the E2 grid, gauss sigma = 0.5, 1, 1.5).
"""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()


def table(f, group):
    g = f[group]
    return {k: (np.array([text(x) for x in g[k][()]]) if g[k].dtype.kind in "SO" else g[k][()])
            for k in g if k != "grid"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by ramnet attn")
    ap.add_argument("-o", "--out", default="ramnet_e2.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--student", default="kappa", help="student column suffix (default: %(default)s)")
    ap.add_argument("--codebook", default=None, help="codebook to plot (default: the first)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    with open_result(a.results, ("summary", "relative"), "ramnet attn") as f:
        r = table(f, "relative")
    js, nm = f"js_{a.student}_rel", f"nmse_{a.student}_rel"
    if js not in r:
        raise SystemExit(f"{a.results}: no /relative/{js} (students: "
                         f"{sorted(k[3:-4] for k in r if k.startswith('js_') and k.endswith('_rel'))})")
    cb = a.codebook if a.codebook is not None else r["codebook"][0]
    sel = r["codebook"] == cb
    if not np.any(sel):
        raise SystemExit(f"{a.results}: no job with codebook {cb}")
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for gen in dict.fromkeys(r["generator"][sel]):
        for key in sorted(set(zip(r["dp"][sel], r["U"][sel], r["topk"][sel]))):
            m = sel & (r["generator"] == gen) & (r["dp"] == key[0]) & (r["U"] == key[1]) & (r["topk"] == key[2])
            o = np.argsort(r["beta_factor"][m])
            lab = f"{gen}" + (f" dp={key[0]:g} U={key[1]:g}" if len(set(r["U"][sel])) > 1 or len(set(r["dp"][sel])) > 1 else "")
            ax[0].semilogx(r["beta_factor"][m][o], r[js][m][o], "o-", label=lab)
            ax[1].semilogx(r["beta_factor"][m][o], r[nm][m][o], "o-", label=lab)
    for x in ax:
        x.axhline(1, color="k", lw=0.6)
        for v in (1.26, 1.58):
            x.axvline(v, color="gray", ls=":", lw=0.8)
        x.set_xlabel("β / β*")
        x.set_yscale("log")
        x.grid(True, which="both", alpha=0.3)
    ax[0].set_ylabel(f"JS / JS(β*)  [{a.student}]")
    ax[1].set_ylabel(f"head NMSE / NMSE(β*)  [{a.student}]")
    ax[0].legend(fontsize=8)
    fig.suptitle(f"E2: β sweep against softmax(q·k/τ), codebook {cb}")
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
