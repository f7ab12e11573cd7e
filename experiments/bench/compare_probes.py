#!/usr/bin/env python3
"""Compare `hebb capacity` result files probe by probe.

The first file is the reference; for every other file it prints how many jobs have the same m* and how many
have every probe equal (the same widths probed, the same accuracy at each), and names the jobs that differ.
Then one line per file: the summed probe time and the slowest jobs. Exit status 1 if any job differs.

    compare_probes.py REF.h5 OTHER.h5 [OTHER.h5 ...]

Used by experiments/bench/cg_variants.sh (data-dependent CG operator forms must give the same probes).
"""
import math
import os
import sys

import h5py


def jobs(f):
    out = {}
    for key in f["runs"]:
        p = f["runs"][key]["probes"]
        out[key] = [(int(m), float(a)) for m, a in zip(p["m"][()], p["accuracy"][()])]
    return out


def m_star(f):
    s = f["summary"]
    return {text(j): float(m) for j, m in zip(s["job"][()], s["m_star"][()])}


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(paths):
    if len(paths) < 2:
        print("usage: compare_probes.py REF.h5 OTHER.h5 [OTHER.h5 ...]", file=sys.stderr)
        return 2
    files = [h5py.File(p, "r") for p in paths]
    runs = [jobs(f) for f in files]
    bad = 0
    for path, f, r in zip(paths[1:], files[1:], runs[1:]):
        keys = sorted(runs[0])
        same_probes = [k for k in keys if runs[0][k] == r.get(k)]
        m0, m1 = m_star(files[0]), m_star(f)
        same_m = sum(k in m1 and (m0[k] == m1[k] or (math.isnan(m0[k]) and math.isnan(m1[k]))) for k in m0)
        differ = [k for k in keys if k not in same_probes]
        bad += len(differ) + (len(m0) - same_m) + (set(runs[0]) != set(r))
        print(f"{os.path.basename(path)} vs {os.path.basename(paths[0])}: m* equal in {same_m}/{len(m0)} jobs, "
              f"every probe equal in {len(same_probes)}/{len(keys)} jobs" + (f"; differing: {differ[:6]}" if differ else ""))
    for path, f in zip(paths, files):
        s = f["summary"]
        rows = sorted((float(s["probe_wall_s"][i]), text(s["method"][i]), int(s["dim"][i]), int(s["facts"][i]))
                      for i in range(len(s["m_star"])))
        slow = ", ".join(f"{m} d={d} F={F} {t:.2f} s" for t, m, d, F in rows[-2:])
        print(f"  {os.path.basename(path)}: probes {sum(r[0] for r in rows):.2f} s in all; slowest {slow}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
