#!/usr/bin/env python3
"""Figure 5b analogue: margin under anisotropy (values spiked, beta sweep) against the paper's x-axis
ev_lv, with the fitted rkav curve.  Usage: fig5b.py RESULTS.h5 [-o fig5b.png]
Results: hebb margin-sweep --preset fig5b-values --out RESULTS.h5."""

import memcap_plot as mp

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig5b.png")
axis, d, best, fit, cfg = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, best["ev_lv"], d, best, fit, r"$E_v L_v$", logx=True, bounds=args.bounds)
ax.set_title("Margin, values spiked (beta = %g..%g)" % (d[axis].min(), d[axis].max()) + mp.dfm(cfg, axis), fontsize=10)
mp.save(fig, args.out, args.dpi)
