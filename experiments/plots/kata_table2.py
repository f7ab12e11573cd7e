#!/usr/bin/env python3
"""Table 2 of the KATA paper as a figure and a table, from one or more `kata mqar table2` results: accuracy
against K on the MQAR evaluation diagonal (T = 4K) per mixer at its best learning rate (mean over seeds), beside
it the repeated-key overwrite accuracy for the mixers that have it, and the paper's Table 2 row under each of
ours (spec kata.md §6.2) with the acceptance test of issue 12: within 0.05 where the paper's cell is >= 0.9 or
<= 0.1, and elsewhere the paper's order between mixers (pairs the paper separates by more than 0.01).

Several files are combined row by row: each run of /summary is one (task, mixer, precision, learning rate, seed)
training, and the best rate per (task, mixer, precision) is chosen again over all files exactly as `kata mqar
table2` chooses its /best (the best mean eval_avg over finished seeds; ties: the rate met first). So rows run
as separate sweeps (`device_queue.sh table2-row`, one file per row, a second seed in a file of its own) give
one Table 2; a row with two or more seeds at its best rate gets a "seed spread" line under it (max - min over
those seeds, per cell). The same training in two files is an error. Rows of another precision than f32 are labelled
(e.g. "sigma2/tf32") and not averaged with f32 ones.

Usage: experiments/plots/with_python.sh experiments/plots/kata_table2.py RESULT.h5 [MORE.h5 ...]
       [-o kata_table2.png]
"""
import argparse
import json
import math
import re
import sys

import numpy as np

from memcap_plot import open_result, pyplot, text

SLICE = re.compile(r"^(ow_)?acc_T(\d+)_K(\d+)$")

# The paper's Table 2 (spec kata.md §6.2): MQAR at T = 512 / 1024 / 2048 / 3072 / 4096 (K = T/4) and the
# overwrite columns at K = 64 / 128 / 256 / 384, for the rows the `table2` preset trains.
PAPER_MQAR_T = (512, 1024, 2048, 3072, 4096)
PAPER_OW_K = (64, 128, 256, 384)
PAPER = {
    "softmax": ((1.000, 1.000, 1.000, 1.000, 1.000), (0.513, 0.506, 0.499, 0.491)),
    "m1": ((1.000, 1.000, 1.000, 0.998, 0.985), (0.521, 0.511, 0.503, 0.483)),
    "m2": ((1.000, 1.000, 1.000, 0.997, 0.970), (0.521, 0.509, 0.492, 0.436)),
    "sigma2": ((1.000, 1.000, 1.000, 0.995, 0.958), (0.518, 0.505, 0.444, 0.342)),
    "m4": ((1.000, 1.000, 0.982, 0.877, 0.707), (0.515, 0.484, 0.346, 0.219)),
    "sigma4": ((1.000, 0.997, 0.865, 0.610, 0.407), (0.517, 0.493, 0.364, 0.226)),
    "delta-m1": ((1.000, 1.000, 1.000, 1.000, 0.999), (1.000, 1.000, 0.999, 0.998)),
    "delta-m2": ((1.000, 1.000, 1.000, 0.995, 0.955), (1.000, 0.999, 0.992, 0.922)),
}


def read_summary(path):
    """The /summary columns of one result file as numpy arrays (strings decoded)."""
    with open_result(path, ("summary",), "kata mqar table2") as f:
        s = f["summary"]
        cols = {}
        for k in s:
            v = s[k][()]
            cols[k] = np.array([text(x) for x in v]) if v.dtype.kind in "SOU" else np.asarray(v)
        if "training_set" not in cols and "task" in cols:
            # written before the training_set column: every training of the file used one set, fresh only with
            # --fresh-examples (recorded in /config)
            conf = {}
            if "config" in f and "json" in f["config"].attrs:
                conf = json.loads(text(f["config"].attrs["json"]))
            fresh = str(conf.get("fresh-examples", "false")).lower() == "true"
            cols["training_set"] = np.array(["fresh" if fresh else "fixed"] * len(cols["task"]))
    for need in ("task", "mixer", "lr", "seed", "status", "eval_avg"):
        if need not in cols:
            sys.exit(f"{path}: /summary has no '{need}' column (not a `kata mqar table2` result?)")
    return cols


def precision_of(path_value):
    """'cuda:0:tf32' -> 'tf32', 'cpu:f32' -> 'f32' (the last field of the summary's path column)."""
    last = path_value.rsplit(":", 1)[-1] if path_value else ""
    return last if last in ("f32", "tf32", "f64", "bf16") else "f32"


def combine(paths):
    """All trainings of `paths` as a list of dicts (one per /summary row), duplicates refused."""
    runs, seen = [], {}
    for p in paths:
        c = read_summary(p)
        n = len(c["mixer"])
        for i in range(n):
            r = {k: v[i] for k, v in c.items()}
            r["precision"] = precision_of(str(r.get("path", "")))
            r["row"] = r["mixer"] if r["precision"] == "f32" else f"{r['mixer']}/{r['precision']}"
            # Training set (read_summary fills it for older files): table2 trains overwrite on a fresh set every
            # epoch and MQAR on one fixed set; a training on the other kind of set is a row of its own
            tset = str(r["training_set"])
            if tset != ("fresh" if r["task"] == "overwrite" else "fixed"):
                r["row"] += f"/{tset}-set"
            key = (r["task"], r["row"], float(r["lr"]), int(r["seed"]))
            if key in seen:
                sys.exit(f"the same training ({key[0]} {key[1]} lr {key[2]:g} seed {key[3]}) is in {seen[key]} and "
                         f"{p}: give each training once")
            seen[key] = p
            runs.append(r)
    return runs


def slice_cols(runs, ow):
    """The per-slice accuracy columns present, sorted by (K, T): (K, T, name)."""
    out = set()
    for r in runs:
        for k in r:
            m = SLICE.match(k)
            if m and bool(m.group(1)) == ow:
                out.add((int(m.group(3)), int(m.group(2)), k))
    return sorted(out)


def best_rows(runs):
    """Per row (mixer[/precision], in order of first appearance): the best learning rate of the MQAR and of the
    overwrite trainings and the mean of each slice over that rate's finished seeds (kata mqar table2's /best)."""
    order = []
    for r in runs:
        if r["row"] not in order:
            order.append(r["row"])
    mq, ow = slice_cols(runs, False), slice_cols(runs, True)

    def pick(task, row):
        best, best_score, lrs = None, -1.0, []
        for r in runs:
            if r["task"] != task or r["row"] != row or float(r["lr"]) in lrs:
                continue
            lr = float(r["lr"])
            lrs.append(lr)
            done = [q for q in runs if q["task"] == task and q["row"] == row and float(q["lr"]) == lr
                    and q["status"] == "done" and math.isfinite(float(q["eval_avg"]))]
            if not done:
                continue
            score = sum(float(q["eval_avg"]) for q in done) / len(done)
            if score > best_score:
                best, best_score = (lr, done), score
        return best

    table = []
    for row in order:
        out = {"row": row, "mixer": row.split("/")[0]}
        any_mq = next((r for r in runs if r["row"] == row and r["task"] == "mqar"), None)
        for k in ("params", "state"):
            out[k] = int(any_mq[k]) if any_mq is not None and k in any_mq else -1
        for task, cols, lr_key, avg_key in (("mqar", mq, "mqar_lr", "ood_avg"), ("overwrite", ow, "ow_lr", "ow_avg")):
            b = pick(task, row)
            out[lr_key] = b[0] if b else math.nan
            out[lr_key.replace("lr", "seeds")] = len(b[1]) if b else 0
            vals = []
            for _, _, c in cols:
                v = sum(float(q.get(c, math.nan)) for q in b[1]) / len(b[1]) if b else math.nan
                out[c] = v
                vals.append(v)
                seeds = [float(q.get(c, math.nan)) for q in b[1]] if b else []
                out[c + ":spread"] = max(seeds) - min(seeds) if len(seeds) > 1 else math.nan
            out[avg_key] = sum(vals) / len(vals) if vals and b else math.nan
        caps = [(K, out[c]) for K, _, c in mq]
        out["cap_0.99"] = max([K for K, a in caps if a >= 0.99], default=0)
        out["cap_0.90"] = max([K for K, a in caps if a >= 0.90], default=0)
        table.append(out)
    return table, mq, ow


def paper_cells(mixer, cols, ow):
    """The paper's value for each of our slice columns (nan where the paper has no such cell)."""
    if mixer not in PAPER:
        return [math.nan] * len(cols)
    mq_vals, ow_vals = PAPER[mixer]
    out = []
    for K, T, _ in cols:
        if ow:
            out.append(ow_vals[PAPER_OW_K.index(K)] if K in PAPER_OW_K else math.nan)
        else:
            out.append(mq_vals[PAPER_MQAR_T.index(T)] if T in PAPER_MQAR_T and K == T // 4 else math.nan)
    return out


def verdict(ours, paper):
    """Issue 12's cell test: |ours - paper| <= 0.05 where the paper's value is >= 0.9 or <= 0.1."""
    tested = [(o, p) for o, p in zip(ours, paper) if math.isfinite(p) and (p >= 0.9 or p <= 0.1)]
    if not tested or any(not math.isfinite(o) for o, _ in tested):
        return "-"
    worst = max(abs(o - p) for o, p in tested)
    return f"{'ok' if worst <= 0.05 else 'MISS'} (max |diff| {worst:.3f} over {len(tested)} cells)"


def ordering(table, cols, ow, tie=0.01):
    """Issue 12's rule where the paper's cell lies in (0.1, 0.9): the mixers keep the paper's order. Per column, every
    pair of rows of two different mixers with both paper cells known, at least one in (0.1, 0.9), and the paper's
    gap above `tie` (gaps up to 0.01 are within one seed's noise): ours must order the pair the same way."""
    kind = "ow" if ow else "mqar"
    checked, wrong = 0, []
    for i, a in enumerate(table):
        for b in table[i + 1:]:
            if a["mixer"] == b["mixer"] or not (a[f"{kind}_seeds"] and b[f"{kind}_seeds"]):
                continue
            pa, pb = paper_cells(a["mixer"], cols, ow), paper_cells(b["mixer"], cols, ow)
            for (kk, tt, c), x, y in zip(cols, pa, pb):
                key = kk if ow else tt
                if not (math.isfinite(x) and math.isfinite(y)) or abs(x - y) <= tie:
                    continue
                if not (0.1 < x < 0.9 or 0.1 < y < 0.9) or not (math.isfinite(a[c]) and math.isfinite(b[c])):
                    continue
                checked += 1
                if (a[c] - b[c]) * (x - y) <= 0:
                    wrong.append(f"{a['row']} {a[c]:.3f} vs {b['row']} {b[c]:.3f} at {'K' if ow else 'T'}{key}"
                                 f" (paper {x:.3f} vs {y:.3f})")
    return checked, wrong


def print_table(table, mq, ow):
    if not any(r["ow_seeds"] for r in table):
        ow = []  # no overwrite trainings: no overwrite columns
    fmt = lambda x: f"{x:8.3f}" if math.isfinite(x) else f"{'-':>8}"  # noqa: E731
    lr = lambda x: f"{x:7.0e}" if math.isfinite(x) else f"{'-':>7}"  # noqa: E731
    head = f"{'row':<16} {'lr':>7} {'seeds':>5}" + "".join(f"{'T' + str(T):>8}" for _, T, _ in mq) + f"{'OOD':>8}"
    if ow:
        head += f" | {'ow lr':>7}" + "".join(f"{'K' + str(K):>8}" for K, _, _ in ow) + f"{'Avg':>8}"
    print(head)
    for r in table:
        line = f"{r['row']:<16} {lr(r['mqar_lr'])} {r['mqar_seeds']:>5}" + "".join(fmt(r[c]) for _, _, c in mq)
        line += fmt(r["ood_avg"])
        if ow:
            line += f" | {lr(r['ow_lr'])}" + "".join(fmt(r[c]) for _, _, c in ow) + fmt(r["ow_avg"])
        print(line)
        if r["mqar_seeds"] > 1 or (ow and r["ow_seeds"] > 1):  # max - min over the seeds of the best rate
            line = f"{'  seed spread':<16} {'':>7} {'':>5}" + "".join(fmt(r[c + ':spread']) for _, _, c in mq)
            line += f"{'':>8}"
            if ow:
                line += f" | {'':>7}" + "".join(fmt(r[c + ':spread']) for _, _, c in ow) + f"{'':>8}"
            print(line)
        pm, po = paper_cells(r["mixer"], mq, False), paper_cells(r["mixer"], ow, True)
        if r["mixer"] in PAPER:
            line = f"{'  paper':<16} {'':>7} {'':>5}" + "".join(fmt(x) for x in pm) + f"{'':>8}"
            if ow:
                line += f" | {'':>7}" + "".join(fmt(x) for x in po) + f"{'':>8}"
            print(line)
            ours_ow = [r[c] for _, _, c in ow] if r["ow_seeds"] else []
            note = f"  MQAR {verdict([r[c] for _, _, c in mq], pm)}"
            if ours_ow:
                note += f"; overwrite {verdict(ours_ow, po)}"
            print(note)
    for cols, is_ow, name in ((mq, False, "MQAR"), (ow, True, "overwrite")):
        checked, wrong = ordering(table, cols, is_ow)
        if checked:
            print(f"{name} ordering where the paper's cells lie in (0.1, 0.9): "
                  f"{'ok' if not wrong else 'DIFFERS'} ({checked - len(wrong)} of {checked} pairs as the paper)")
            for w in wrong:
                print("  " + w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="HDF5 files written by kata mqar table2 (or kata merge of shards)")
    ap.add_argument("-o", "--out", default="kata_table2.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--dpi", type=int, default=150)
    a = ap.parse_args()
    runs = combine(a.results)
    if not runs:
        sys.exit("no trainings in " + ", ".join(a.results))
    table, mq, ow = best_rows(runs)
    mq_sets = {tuple(sorted(k for k in r if SLICE.match(k) and not k.startswith("ow_"))) for r in runs}
    if len(mq_sets) > 1:
        print("note: the files evaluate different MQAR slices; a row lacking a slice shows '-' there", file=sys.stderr)
    has_ow = any(r["ow_seeds"] for r in table)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if has_ow else 1, figsize=(11 if has_ow else 6, 4.2), squeeze=False)
    panels = [(axes[0][0], mq, "MQAR", "mqar")]
    if has_ow:
        panels.append((axes[0][1], ow, "repeated-key overwrite", "ow"))
    for ax, cols, title, kind in panels:
        K = np.array([c[0] for c in cols])
        for r in table:
            acc = np.array([r[c[2]] for c in cols], dtype=float)
            if np.all(np.isnan(acc)):
                continue
            lr_key = "mqar_lr" if kind == "mqar" else "ow_lr"
            line, = ax.plot(K, acc, marker="o", label=f"{r['row']} (lr {r[lr_key]:.0e})")
            paper = np.array(paper_cells(r["mixer"], cols, kind == "ow"), dtype=float)
            if not np.all(np.isnan(paper)):
                ax.plot(K, paper, linestyle="--", marker="x", color=line.get_color(), alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(K, [str(k) for k in K])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("keys K")
        ax.set_ylabel("accuracy")
        ax.set_title(title + " (dashed: paper)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print_table(table, mq, ow)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
