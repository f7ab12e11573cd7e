"""pSNR ladder across cones against the number of keys T (spec kata.md §3.9): Welch-scale values per
rung (lines), the random-key estimate (thin dashed) and Monte-Carlo medians with 10-90% bars (markers),
retrievability threshold pSNR = 1. Input: `kata psnr --out FILE.h5` (optionally a second run with
packed keys, e.g. --keys mub, drawn as open markers)."""
import argparse

import numpy as np

from memcap_plot import open_result, pyplot, texts

plt = pyplot()


def load(path):
    with open_result(path, ("summary/psnr_welch",), "kata psnr") as f:
        s = {k: f["summary"][k][()] for k in f["summary"]}
        p = int(s["p"][0])
    s["rung"] = texts(s["rung"])
    s["source"] = texts(s["source"])
    return s, p


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results", help="HDF5 written by `kata psnr`")
    ap.add_argument("--mub", help="optional second `kata psnr` file with packed keys (open markers)")
    ap.add_argument("-o", "--out", default="kata_psnr_ladder.png")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    s, p = load(a.results)
    fig, ax = plt.subplots(figsize=(9.5, 5))
    rungs = list(dict.fromkeys(s["rung"]))
    for i, r in enumerate(rungs):
        m = s["rung"] == r
        T = s["T"][m]
        o = np.argsort(T)
        T = T[o]
        col = f"C{i}"
        src = s["source"][m][0]
        ax.plot(T, s["psnr_welch"][m][o], "-", color=col, label=f"{r} ({src}, Welch-scale)")
        est = s["psnr_random_est"][m][o]
        if np.isfinite(est).any():
            ax.plot(T, est, "--", color=col, lw=0.8, alpha=0.7)
        med = s["psnr_mc_median"][m][o]
        ok = np.isfinite(med)
        if ok.any():
            lo, hi = s["psnr_mc_q10"][m][o], s["psnr_mc_q90"][m][o]
            ax.errorbar(T[ok], med[ok], yerr=[med[ok] - lo[ok], hi[ok] - med[ok]], fmt="o", ms=3, color=col,
                        elinewidth=0.8, capsize=2)
    if a.mub:
        t, pm = load(a.mub)
        for i, r in enumerate(rungs):
            m = t["rung"] == r
            if m.any() and np.isfinite(t["psnr_mc_median"][m]).any():
                ax.plot(t["T"][m], t["psnr_mc_median"][m], "o", mfc="none", color=f"C{i}", ms=7,
                        label=f"{r}: MUB keys (s={pm // 2}) MC median")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axvline(p, color="gray", lw=0.6, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(1e-5, 1e7)
    ax.set_xlabel("number of keys $T$ per cone")
    ax.set_ylabel("pSNR $= a_\\star^2/\\sum_{j\\neq\\star}a_j^2$")
    ax.set_title(f"pSNR ladder at $p={p}$: lines Welch-scale, dashed random-key estimate, dots MC (random keys)")
    ax.title.set_fontsize(9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # off the curves
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi, bbox_inches="tight")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
