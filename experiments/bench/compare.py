#!/usr/bin/env python3
"""Side-by-side table of `kata bench` (HDF5 /summary) against the SDPA baseline (JSON), plus the
tree-vs-sequential-scan ratios, with the acceptance targets of issue 5 marked pass/MISS.

  python3 experiments/bench/compare.py KATA.h5 SDPA.json
"""
import json
import sys

import h5py


def load_summary(path):
    with h5py.File(path, "r") as f:
        g = f["summary"]
        cols = {k: g[k][()] for k in g}
        n = len(next(iter(cols.values())))
        dec = lambda x: x.decode() if isinstance(x, bytes) else x
        return [{k: dec(cols[k][i]) for k in cols} for i in range(n)], dict(f.attrs)


def main():
    rows, attrs = load_summary(sys.argv[1])
    sdpa = {(r["B"], r["H"], r["T"]): r for r in json.load(open(sys.argv[2]))}
    print("## ours vs PyTorch SDPA (flash, bf16, causal), same GPU, same run of this script")
    print(f"{'kernel':<10}{'map':<16}{'B':>3}{'H':>4}{'T':>8}{'C':>5}{'ours ms':>11}{'sdpa ms':>11}{'speedup':>9}  target")
    for r in rows:
        key = (int(r["B"]), int(r["H"]), int(r["T"]))
        if key not in sdpa or r["kernel"] not in ("quadratic", "chunked") or not r["map"].startswith("m"):
            continue
        s = sdpa[key]["ms_median"]
        sp = s / r["ms_median"]
        target = ""
        if r["group"] == "accept-quadratic":
            target = f">=1.3x {'pass' if sp >= 1.3 else f'MISS by {1.3 / sp:.2f}x'}"
        if r["group"] == "accept-chunked":
            target = f">=11x {'pass' if sp >= 11 else f'MISS by {11 / sp:.2f}x'}"
        print(f"{r['kernel']:<10}{r['map']:<16}{key[0]:>3}{key[1]:>4}{key[2]:>8}{int(r['chunk']):>5}"
              f"{r['ms_median']:>11.3f}{s:>11.3f}{sp:>8.2f}x  {target}")
    print("\n## tree scan vs sequential chunk scan (linear feature, same chunk)")
    print(f"{'group':<14}{'B':>3}{'H':>4}{'T':>8}{'seq ms':>10}{'tree ms':>10}{'seq Mtok/s':>12}{'tree Mtok/s':>12}{'speedup':>9}  target")
    seq = {(r["group"], int(r["B"]), int(r["H"]), int(r["T"])): r for r in rows
           if r["kernel"] == "chunked" and r["map"] == "linear"}
    for r in rows:
        if r["kernel"] != "tree":
            continue
        key = (r["group"], int(r["B"]), int(r["H"]), int(r["T"]))
        if key not in seq:
            continue
        sq = seq[key]
        sp = sq["ms_median"] / r["ms_median"]
        target = ""
        if r["group"] == "accept-tree":
            target = f">=2x {'pass' if sp >= 2 else f'MISS by {2 / sp:.2f}x'}"
        print(f"{key[0]:<14}{key[1]:>3}{key[2]:>4}{key[3]:>8}{sq['ms_median']:>10.3f}{r['ms_median']:>10.3f}"
              f"{sq['tokens_per_s'] / 1e6:>12.1f}{r['tokens_per_s'] / 1e6:>12.1f}{sp:>8.2f}x  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
