#!/usr/bin/env python3
"""Figure 5a analogue: margin under anisotropy (keys spiked, beta sweep) against the paper's x-axis
e_k, with the fitted akrv curve.  Usage: fig5a.py RESULTS.h5 [-o fig5a.png]
Results: hebb margin-sweep --preset fig5a-keys --out RESULTS.h5."""

import memcap_plot as mp

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig5a.png")
axis, d, best, fit, cfg = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, best["e_k"], d, best, fit, r"$E_K$ (kernel column energy)", logx=True, bounds=args.bounds)
ax.set_title("Margin, keys spiked (beta = %g..%g)" % (d[axis].min(), d[axis].max()) + mp.dfm(cfg, axis), fontsize=10)
mp.save(fig, args.out, args.dpi)
