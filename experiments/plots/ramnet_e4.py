#!/usr/bin/env python3
"""Experiment E4 (spec ramnet.md §3, paper Fig. 4): value fields on S¹×S¹ from a `ramnet field` result.
Left column: the full-attention reference; then one row per β = f·β* and one column per memory
configuration (dp, K, readout), each showing f(θ0, θ1) with the stored keys as markers coloured by value.
Panel titles carry the quantified checks: MSE against the reference, the fraction of the grid whose
dominant key differs, and the oblique fraction of the gradient orientations.

Usage: ramnet_e4.py RESULT.h5 [-o ramnet_e4.png]
Results: ramnet field --out RESULT.h5
"""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by ramnet field")
    ap.add_argument("-o", "--out", default="ramnet_e4.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=120)
    a = ap.parse_args()
    with open_result(a.results, ("summary", "grid/field", "grid/reference", "stored"), "ramnet field") as f:
        F = f["grid/field"][()]
        ref = f["grid/reference"][()]
        th = f["grid/theta0"][()]
        bf = f["grid/beta_factor"][()]
        cols = [text(c) for c in f["grid/column_name"][()]]
        ang = f["stored/key_angles"][()]
        val = f["stored/values"][()]
        g = f["summary"]
        s = {k: (np.array([text(x) for x in g[k][()]]) if g[k].dtype.kind in "SO" else g[k][()]) for k in g}
        oref = float(f.attrs.get("reference_oblique_fraction", np.nan))
    B, C = F.shape[:2]
    ext = [th[0], th[-1] + (th[1] - th[0]), th[0], th[-1] + (th[1] - th[0])]
    # Fields average the stored values, so they span less than [-1, 1]: the background gets its own
    # symmetric scale (shared by every panel), the markers the values' [-1, 1].
    fmax = float(max(np.abs(F).max(), np.abs(ref).max(), 1e-12))
    fig, ax = plt.subplots(B, C + 1, figsize=(3.1 * (C + 1), 3.0 * B), squeeze=False)

    def show(axis, field, title):
        axis.imshow(field.T, origin="lower", extent=ext, cmap="coolwarm", vmin=-fmax, vmax=fmax, aspect="equal")
        axis.scatter(ang[:, 0], ang[:, 1], c=val, cmap="coolwarm", vmin=-1, vmax=1, edgecolors="k", s=28)
        axis.set_title(title, fontsize=8)
        axis.set_xticks([])
        axis.set_yticks([])

    for b in range(B):
        if b == 0:
            show(ax[0][0], ref, f"reference softmax\noblique {oref:.2f}")
        else:
            ax[b][0].axis("off")
        for c in range(C):
            i = b * C + c
            show(ax[b][c + 1], F[b, c],
                 f"{cols[c]}, β={bf[b]:g}β*\nMSE {s['mse'][i]:.2g}, region≠ {s['region_diff'][i]:.2f}, "
                 f"obl. {s['oblique_fraction'][i]:.2f}")
    fig.suptitle(f"E4: value fields on S¹×S¹ (θ0 horizontal, θ1 vertical; background scale ±{fmax:.2f}, markers ±1)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
