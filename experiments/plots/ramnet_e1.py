#!/usr/bin/env python3
"""Experiment E1 (spec ramnet.md §3): exact kernel errors against the bounds of Theorem 2, from a
`ramnet bounds` result. Left: max |e_tot| = max |log κ_A − β_rβ_w/2 q·k| (solid) and the eq.-11 bound
(dashed, drawn where ξ < 1) against M, one colour per dp, for one U. Middle: max |e_fin| and the
eq.-20 bound. Right: the range of e_cont/(U M^4) with the eq.-16 interval [−1/4, 1/32] and the sharp
small-M constants −7/32 and 1/32. The title carries the violation count (must be 0).

Usage: ramnet_e1.py RESULT.h5 [-o ramnet_e1.png] [--U 2] [--beta 1]
Results: ramnet bounds --out RESULT.h5 (default grid) or any --dps/--Us/--Ms/--betas grid.
"""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()


def load(path):
    with open_result(path, ("summary",), "ramnet bounds") as f:
        s = f["summary"]
        if "max_abs_e_tot" not in s:
            raise SystemExit(f"{path}: no /summary/max_abs_e_tot (not a `ramnet bounds` result?)")
        return {k: (np.array([text(x) for x in s[k][()]]) if s[k].dtype.kind in "SO" else s[k][()]) for k in s}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by ramnet bounds")
    ap.add_argument("-o", "--out", default="ramnet_e1.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--U", type=int, default=None, help="number of factors to plot (default: the smallest)")
    ap.add_argument("--beta", type=float, default=None, help="beta to plot (default: the first)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    s = load(a.results)
    U = a.U if a.U is not None else int(np.min(s["U"]))
    beta = a.beta if a.beta is not None else float(s["beta"][0])
    sel = (s["U"] == U) & np.isclose(s["beta"], beta)
    if not np.any(sel):
        raise SystemExit(f"{a.results}: no configuration with U = {U}, beta = {beta:g}")
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    dps = sorted(set(int(d) for d in s["dp"][sel]))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(dps)))
    for dp, c in zip(dps, colors):
        m = sel & (s["dp"] == dp)
        order = np.argsort(s["M"][m])
        M = s["M"][m][order]
        for i, (obs, bnd) in enumerate((("max_abs_e_tot", "bound11"), ("max_abs_e_fin", "bound20"))):
            ax[i].loglog(M, s[obs][m][order], "o-", color=c, label=f"dp={dp}")
            b = s[bnd][m][order]
            ok = np.isfinite(b)
            ax[i].loglog(M[ok], b[ok], "--", color=c)
        ax[2].fill_between(M, s["e_cont_lo_scaled"][m][order], s["e_cont_hi_scaled"][m][order], color=c, alpha=0.15)
        ax[2].semilogx(M, s["e_cont_lo_scaled"][m][order], "-", color=c, label=f"dp={dp}")
        ax[2].semilogx(M, s["e_cont_hi_scaled"][m][order], "-", color=c)
    for y, st, lab in ((-0.25, ":", "eq. 16: -1/4, 1/32"), (1 / 32, ":", None), (-7 / 32, "--", "sharp: -7/32, 1/32")):
        ax[2].axhline(y, color="k", ls=st, lw=0.8, label=lab)
    ax[0].set_title(f"max |e_tot| (solid) vs eq. 11 (dashed), U={U}")
    ax[1].set_title("max |e_fin| (solid) vs eq. 20 (dashed)")
    ax[2].set_title("e_cont / (U M^4): observed range")
    for x in ax:
        x.set_xlabel("M = max_u max(β_r|q_u|, β_w|k_u|)")
        x.grid(True, which="both", alpha=0.3)
    ax[0].set_ylabel("nats")
    ax[0].legend(fontsize=8)
    ax[2].legend(fontsize=8)
    viol = int(np.sum(s["violations"]))
    pairs = int(np.max(s["pairs"]))
    fig.suptitle(f"RAM-Net kernel errors vs Theorem 2 (beta={beta:g}, {pairs} pairs/config + adversarial): "
                 f"{viol} bound violations over {len(s['violations'])} configurations")
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
