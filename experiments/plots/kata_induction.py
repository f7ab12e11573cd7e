#!/usr/bin/env python3
"""Induction-head probe (KATA paper E.2) from a `kata induction` result: left, held-out accuracy
against training step per training (mixer, T, learning rate, seed) with the phase step marked; right, the phase
step (first evaluation with accuracy >= the threshold; /induction: the mean over the seeds that reached it, with
"k/n seeds" beside a point that not every seed reached) against T per mixer.

Usage: experiments/plots/with_python.sh experiments/plots/kata_induction.py RESULT.h5 [-o kata_induction.png]
"""
import argparse
import json

import numpy as np

from memcap_plot import open_result, pyplot, text, texts

plt = pyplot()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by kata induction")
    ap.add_argument("-o", "--out", default="kata_induction.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    with open_result(a.results, ("summary", "runs", "induction"), "kata induction") as f:
        s = f["summary"]
        jobs, status = texts(s["job"][()]), texts(s["status"][()])
        mix, T, ph = texts(s["mixer"][()]), s["seq_len"][()], s["phase_step"][()]
        # the model (files written before the backbone column existed: the zoology backbone)
        backbone = sorted(set(texts(s["backbone"][()]))) if "backbone" in s else ["zoology"]
        # RoPE bases of the jobs (NaN: no RoPE; files written before the column existed: the run's --rope options)
        if "rope_base" in s:
            rope = sorted({"none" if np.isnan(b) else f"{b:g}" for b in s["rope_base"][()]})
        else:
            opts = json.loads(f["config"].attrs["json"]) if "config" in f else {}
            rope = [opts.get("rope-base", "10000") if opts.get("rope") == "true" else "none"]
        # seed and learning rate of each training (several seeds of one row are told apart in the legend)
        seeds = s["seed"][()] if "seed" in s else np.zeros(len(jobs), dtype=int)
        lrs = s["lr"][()] if "lr" in s else np.full(len(jobs), np.nan)
        curves = []
        for j, st, m, t, p, sd, lr in zip(jobs, status, mix, T, ph, seeds, lrs):
            if st != "done":
                continue
            g = f["runs"][j.replace("/", ",").replace(".", "p")]
            curves.append((f"{m} T={int(t)} lr={lr:g} seed {int(sd)}", int(p), g["eval_step"][()],
                           g["eval_accuracy"][()][:, 0]))
        ind = f["induction"]
        table = {k: ind[k][()] for k in ind}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, p, step, acc in curves:
        line, = a1.plot(step, acc, label=label)
        if p >= 0:
            a1.axvline(p, color=line.get_color(), ls=":", lw=0.8)
    a1.set_xlabel("training step")
    a1.set_ylabel("held-out accuracy")
    a1.set_ylim(-0.02, 1.02)
    a1.grid(alpha=0.3)
    a1.legend(fontsize=7)
    mixers = [text(m) for m in table["mixer"]]
    for m in dict.fromkeys(mixers):
        idx = [i for i, x in enumerate(mixers) if x == m]
        t = np.array([table["seq_len"][i] for i in idx])
        p = np.array([table["phase_step"][i] for i in idx], dtype=float)
        p[p < 0] = np.nan
        a2.plot(t, p, marker="o", label=m)
        for i in idx:
            # /induction's phase step is the mean over the seeds that reached it (phase_seeds of seeds; files
            # written before phase_seeds existed: not said)
            n, k = int(table["seeds"][i]), int(table["phase_seeds"][i]) if "phase_seeds" in table else -1
            part = f" ({k} of {n} seeds)" if 0 < k < n else ""
            if part:
                a2.annotate(f"{k}/{n} seeds", (table["seq_len"][i], table["phase_step"][i]), fontsize=7,
                            textcoords="offset points", xytext=(4, 4))
            print(f"{m:<10} T={int(table['seq_len'][i]):<6} acc {table['final_acc'][i]:.3f}  phase step "
                  f"{'-' if table['phase_step'][i] < 0 else int(table['phase_step'][i])}{part}")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("sequence length T")
    a2.set_ylabel("phase step")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=7)
    what = {"transformer": " (E.2 as read: mixer + 4x GELU MLP per layer)",
            "zoology-mlp": " (BaseConv / mixer layers, each with a 4x GELU MLP)"}
    fig.suptitle("backbone " + ", ".join(backbone) + (what.get(backbone[0], "") if len(backbone) == 1 else "")
                 + "; RoPE base " + ", ".join(rope), fontsize=9)
    print("backbone:", ", ".join(backbone), "; RoPE base:", ", ".join(rope))
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
