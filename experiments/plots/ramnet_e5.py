#!/usr/bin/env python3
"""Experiment E5 (spec ramnet.md §3, paper Fig. 8 discussion): what Top-K truncation keeps, from a
`ramnet topk` result. Left: mean retained read and write mass against β (one curve per K; the dotted line
marks β* = sqrt(2/τ)). Middle: fraction of query-key pairs with κ_A^K = 0 and mean |TopK(r) ∩ TopK(w)|.
Right: JS of κ-attention (full) and of the Top-K kernel against the softmax teacher.

Usage: ramnet_e5.py RESULT.h5 [-o ramnet_e5.png] [--generator torus:rho=1]
Results: ramnet topk --beta 0.5,0.7952707287670506,1,1.26,2,4 --out RESULT.h5 (or the default f grid).
"""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by ramnet topk")
    ap.add_argument("-o", "--out", default="ramnet_e5.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--generator", default=None, help="generator to plot (default: the first)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    with open_result(a.results, ("summary",), "ramnet topk") as f:
        g = f["summary"]
        if "read_mass" not in g:
            raise SystemExit(f"{a.results}: no /summary/read_mass (not a `ramnet topk` result?)")
        s = {k: (np.array([text(x) for x in g[k][()]]) if g[k].dtype.kind in "SO" else g[k][()]) for k in g}
    gen = a.generator if a.generator is not None else s["generator"][0]
    sel = s["generator"] == gen
    if not np.any(sel):
        raise SystemExit(f"{a.results}: no job with generator {gen}")
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for key in sorted(set(zip(s["dp"][sel], s["U"][sel], s["topk"][sel]))):
        m = sel & (s["dp"] == key[0]) & (s["U"] == key[1]) & (s["topk"] == key[2])
        o = np.argsort(s["beta_r"][m])
        b = s["beta_r"][m][o]
        lab = f"dp={key[0]:g} U={key[1]:g} K={key[2]:g}"
        l, = ax[0].semilogx(b, s["read_mass"][m][o], "o-", label=f"read, {lab}")
        ax[0].semilogx(b, s["write_mass"][m][o], "s--", color=l.get_color(), label=f"write, {lab}")
        ax[1].semilogx(b, s["zero_kernel_fraction"][m][o], "o-", color=l.get_color(), label=f"κ^K = 0, {lab}")
        ax[1].semilogx(b, s["intersection"][m][o] / key[2], "s--", color=l.get_color(), label=f"|∩|/K, {lab}")
        ax[2].loglog(b, s["js_full"][m][o], "o-", color=l.get_color(), label=f"full κ_A, {lab}")
        ax[2].loglog(b, s["js_topk"][m][o], "s--", color=l.get_color(), label=f"Top-K, {lab}")
        bstar = np.sqrt(2 / s["tau"][m][0])
        for x in ax:
            x.axvline(bstar, color=l.get_color(), ls=":", lw=0.8)
    ax[0].set_ylabel("retained mass Σ r^K, Σ w^K")
    ax[1].set_ylabel("fraction of pairs / |∩| / K")
    ax[2].set_ylabel("JS (nats) against softmax")
    for x in ax:
        x.set_xlabel("β")
        x.grid(True, which="both", alpha=0.3)
        x.legend(fontsize=7)
    fig.suptitle(f"E5: Top-K truncation, {gen} (dotted: β*)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
