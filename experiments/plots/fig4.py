#!/usr/bin/env python3
"""Figure 4 analogue: kernel-memory margin vs number of facts F (d=64, m=512; or the exact-K2 sweep)
with the fitted rkrv curve.  Usage: fig4.py RESULTS.h5 [-o fig4.png]
Results: hebb margin-sweep --preset fig4-facts (or --preset exact-k2-facts) --out RESULTS.h5."""

import memcap_plot as mp

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig4.png")
axis, d, best, fit, _ = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, d[axis], d, best, fit, "number of facts F" if axis == "facts" else axis, logx=True, bounds=args.bounds)
ax.set_title(f"Margin vs facts (d={int(best['dim'][0])}, rank/width m={int(best['width'][0])})")
mp.save(fig, args.out, args.dpi)
