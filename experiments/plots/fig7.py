#!/usr/bin/env python3
"""Figure 7 analogue: per-key margins and usable keys (spec hebbian.md §4.3, claim 14), from the same file
as fig2a. Left: the per-key normalized-output margins gamma_i pooled over seeds, one violin per width.
Right: frac(gamma_i > tau) against the Transformer accuracy for tau in {0, 0.1, 0.2, 0.3, tau*}, tau* =
argmin over linspace(-1, 1, 2001) of mean_w (frac(gamma_i > tau) - acc_w)^2 (stored by hebb as
/usability attribute tau_star; recomputed here from /runs/*/key_margins and checked).
Usage: fig7.py RESULTS.h5 [-o fig7.png]      Results: hebb ssfr usability --preset fig2a"""
import argparse

import numpy as np

import memcap_plot as mp
import ssfr_plot as sp


def pooled_margins(path):
    """Widths, pooled per-key margins per width and mean Transformer accuracy per width."""
    s = sp.summary(path, "hebb ssfr usability", ("summary", "runs", "usability"))
    with mp.open_result(path, ("runs", "usability"), "hebb ssfr usability") as f:
        widths = sorted(set(int(w) for w in s["width"]))
        pooled, acc = [], []
        for w in widths:
            jobs = [j for j, ww in zip(s["job"], s["width"]) if ww == w]
            pooled.append(np.concatenate([f["runs"][j.replace("/", ",").replace(".", "p")]["key_margins"][()]
                                          for j in jobs]))
            acc.append(float(np.mean(s["combined_acc"][s["width"] == w])))
        tau_file = float(f["usability"].attrs["tau_star"])
    return widths, pooled, np.array(acc), tau_file


def fit_tau(pooled, acc):
    taus = np.linspace(-1, 1, 2001)
    loss = [np.mean([(np.mean(m > t) - a) ** 2 for m, a in zip(pooled, acc)]) for t in taus]
    return float(taus[int(np.argmin(loss))])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file of `hebb ssfr usability`")
    ap.add_argument("-o", "--out", default="fig7.png")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    widths, pooled, acc, tau_file = pooled_margins(args.results)
    tau = fit_tau(pooled, acc)
    if abs(tau - tau_file) > 1e-9:
        print(f"warning: tau* recomputed {tau:.4f} differs from the file's {tau_file:.4f}")
    plt = mp.pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.violinplot(pooled, showmedians=True)
    a1.set_xticks(range(1, len(widths) + 1), [str(w) for w in widths], rotation=90, fontsize=7)
    a1.axhline(0, color="k", lw=0.6)
    a1.axhline(tau, color="C3", lw=0.8, ls="--", label=f"tau* = {tau:.3f}")
    a1.set_xlabel("MLP width m")
    a1.set_ylabel("per-key margin $\\gamma_i$")
    a1.legend(fontsize=7)
    for k, t in enumerate([0.0, 0.1, 0.2, 0.3, tau]):
        frac = np.array([np.mean(m > t) for m in pooled])
        r = np.corrcoef(frac, acc)[0, 1] if np.std(frac) > 0 and np.std(acc) > 0 else float("nan")
        label = f"tau = {t:.3g}" + (" (tau*)" if k == 4 else "") + f", r = {r:.3f}"
        a2.plot(frac, acc, marker="o", ms=4, ls="", color=f"C{k}", label=label)
        print(f"{label}: mean |frac - acc| = {np.mean(np.abs(frac - acc)):.4f}")
    a2.plot([0, 1], [0, 1], "k:", lw=0.8)
    a2.set_xlabel("frac($\\gamma_i > \\tau$)")
    a2.set_ylabel("Transformer accuracy")
    a2.legend(fontsize=7)
    a2.grid(True, alpha=0.3)
    fig.suptitle("Usable keys track end-to-end accuracy", fontsize=10)
    print(f"tau* = {tau:.4f}")
    mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
