#!/usr/bin/env python3
"""Figure 5c analogue: margin under anisotropy (keys and values spiked, beta sweep) against the paper's x-axis
ek_sqrt_ev_kappa, with the fitted akav curve.  Usage: fig5c.py RESULTS.h5 [-o fig5c.png]
Results: hebb margin-sweep --preset fig5c-both --out RESULTS.h5."""

import memcap_plot as mp

plt = mp.pyplot()

args = mp.parse_args(__doc__, "fig5c.png")
axis, d, best, fit, cfg = mp.load(args.results)
fig, ax = plt.subplots(figsize=(6, 4.2))
mp.plot_margin(ax, best["ek_sqrt_ev_kappa"], d, best, fit, r"$\sqrt{E_K}\sqrt{E_v}\,\kappa$", logx=False, bounds=args.bounds)
ax.set_title("Margin, keys + values spiked, beta = %g..%g" % (d[axis].min(), d[axis].max()) + mp.dfm(cfg, axis), fontsize=10)
nseeds = d["gamma_seeds"].shape[1] if d["gamma_seeds"].ndim == 2 else 1
if nseeds <= 1:
    # spec §4.1: the beta sweeps use one seed, so there is no seed band to draw.
    fig.text(0.01, 0.005, "one seed per beta (preset fig5c-both, spec §4.1): no seed band; "
             "rerun with --seeds N for a mean ± 2 std band", fontsize=6, va="bottom")
mp.save(fig, args.out, args.dpi)
