#!/usr/bin/env python3
"""Table 2 of the KATA paper as a figure, from a `kata mqar table2` result: accuracy against K on the
MQAR evaluation diagonal (T = 4K) per mixer at its best learning rate (/best, mean over seeds), and
beside it the repeated-key overwrite accuracy against K for the mixers that have it. Prints the table.

Usage: experiments/plots/with_python.sh experiments/plots/kata_table2.py RESULT.h5 [-o kata_table2.png]
"""
import argparse
import re

import numpy as np

from memcap_plot import open_result, pyplot, text

plt = pyplot()
SLICE = re.compile(r"^(ow_)?acc_T(\d+)_K(\d+)$")


def load(path):
    with open_result(path, ("summary", "best"), "kata mqar table2") as f:
        b = f["best"]
        cols = {k: b[k][()] for k in b}
    mixers = [text(m) for m in cols["mixer"]]
    mq, ow = [], []
    for k in cols:
        m = SLICE.match(k)
        if m and not np.all(np.isnan(np.asarray(cols[k], dtype=float))):  # a run without overwrite rows: all NaN
            (ow if m.group(1) else mq).append((int(m.group(3)), int(m.group(2)), k))
    return mixers, cols, sorted(mq), sorted(ow)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by kata mqar table2 (or kata merge of its shards)")
    ap.add_argument("-o", "--out", default="kata_table2.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    mixers, cols, mq, ow = load(a.results)
    fig, axes = plt.subplots(1, 2 if ow else 1, figsize=(11 if ow else 6, 4.2), squeeze=False)
    for ax, slices, title in ((axes[0][0], mq, "MQAR"), (axes[0][-1] if ow else None, ow, "repeated-key overwrite")):
        if ax is None or not slices:
            continue
        K = np.array([s[0] for s in slices])
        for i, m in enumerate(mixers):
            acc = np.array([cols[s[2]][i] for s in slices], dtype=float)
            if np.all(np.isnan(acc)):
                continue
            lr_col = "mqar_lr" if slices is mq else "ow_lr"
            ax.plot(K, acc, marker="o", label=f"{m} (lr {cols[lr_col][i]:.0e})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(K, [str(k) for k in K])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("keys K")
        ax.set_ylabel("accuracy")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    head = "mixer".ljust(10) + "".join(f"{'K=' + str(s[0]):>9}" for s in mq) + f"{'OOD':>8}"
    print(head)
    for i, m in enumerate(mixers):
        print(m.ljust(10) + "".join(f"{cols[s[2]][i]:9.3f}" for s in mq) + f"{cols['ood_avg'][i]:8.3f}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
