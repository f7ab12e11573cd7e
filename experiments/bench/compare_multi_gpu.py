#!/usr/bin/env python3
"""Compares the /summary tables of multi_gpu_check.sh's two runs of each command (NAME-all.h5, NAME-0.h5 in DIR):
rows matched by their job key, every column compared exactly except times and the device path; prints one line per
command with the device paths seen (the columns path or compute_path, which hold cuda:<ordinal>). Exit 1 when any
differs.
Usage: experiments/plots/with_python.sh experiments/bench/compare_multi_gpu.py DIR"""
import os
import re
import sys

import h5py
import numpy as np

# Times, not compared.
SKIP = re.compile(r"(_s$|^wall|^eta|time|^started|seconds)")
# The device path column, not compared but listed: path in hebb, kata and ramnet attn; compute_path in ramnet recall.
PATHS = ("path", "compute_path")


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    d, bad = sys.argv[1], 0
    for name in ("cap", "t2", "ind", "ssfr", "edit", "ram"):
        fa, f0 = f"{d}/{name}-all.h5", f"{d}/{name}-0.h5"
        if not (os.path.exists(fa) and os.path.exists(f0)):
            print(f"{name}: result file missing")
            bad = 1
            continue
        a, z = h5py.File(fa, "r")["summary"], h5py.File(f0, "r")["summary"]
        n = len(a[next(iter(a))])
        ka = list(a["job"][...]) if "job" in a else list(range(n))
        kz = list(z["job"][...]) if "job" in z else list(range(len(z[next(iter(z))])))
        if sorted(ka) != sorted(kz):
            print(f"{name}: the two runs hold different jobs")
            bad = 1
            continue
        oa, oz = np.argsort(ka), np.argsort(kz)
        diff, cols = [], 0
        for c in a:
            if c in PATHS or SKIP.search(c):
                continue
            if c not in z:
                diff.append(f"{c} (missing)")
                continue
            x, y = a[c][...][oa], z[c][...][oz]
            cols += 1
            same = np.array_equal(x, y, equal_nan=True) if x.dtype.kind in "fc" else np.array_equal(x, y)
            if not same:
                diff.append(c)
        raw = [p for c in PATHS if c in a for p in a[c][...]]
        paths = sorted({(p.decode() if isinstance(p, bytes) else str(p)) for p in raw})
        print(f"{name}: {n} rows, {cols} columns compared, differing: {', '.join(diff) or 'none'}; "
              f"paths (--devices all): {', '.join(paths) or '-'}")
        bad |= bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
