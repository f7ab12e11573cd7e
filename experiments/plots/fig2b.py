#!/usr/bin/env python3
"""Figure 2b analogue: kernel-memory margin vs feature width m (d=64, F=256) with the fitted rkrv
curve C_s - C_x sqrt(F L/(m d)).  Usage: fig2b.py RESULTS.h5 [-o fig2b.png]
Results: hebb margin-sweep --preset fig2b-width --out RESULTS.h5 (or plain `hebb margin-sweep`)."""

import memcap_plot as mp

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig2b.png")
axis, d, best, fit, _ = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, d[axis], d, best, fit, "feature width m" if axis == "width" else axis, logx=True, bounds=args.bounds)
ax.set_title(f"Margin vs width (d={int(best['dim'][0])}, F={int(best['facts'][0])})")
mp.save(fig, args.out, args.dpi)
