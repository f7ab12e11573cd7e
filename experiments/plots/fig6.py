#!/usr/bin/env python3
"""Figure 6 analogue: noisy-query margin gamma_min(k + eps u) vs eps (d=64, F=256, m=512; noisy margin of the
best clean seed, band = ±2 std over seeds) with the fitted noisy model
C_s - C_x sqrt(n L/(m d)) - C_eps L_bil eps sqrt(n L/d).  Usage: fig6.py RESULTS.h5 [-o fig6.png]
Results: hebb margin-sweep --preset fig6-noise --out RESULTS.h5."""

import memcap_plot as mp
import numpy as np

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig6.png")
axis, d, best, fit, _ = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, d[axis], d, best, fit, r"query noise $\varepsilon$", logx=True)
if args.bounds and "bound_eq74" in best:
    # The plug-in Eq. 74 (C = 1) falls far below the data: keep the y-range on the measurements.
    lo, hi = ax.get_ylim()
    o = np.argsort(d[axis])
    ax.plot(d[axis][o], best["bound_eq74"][o], ":", color="C5", label="Eq. 74 plug-in (C=1), clipped")
    ax.set_ylim(lo, hi)
    ax.legend(fontsize=8)
ax.set_title("Noisy-query margin (best clean seed)")
mp.save(fig, args.out, args.dpi)
