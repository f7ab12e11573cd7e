#!/usr/bin/env python3
"""Replays the gd searches of a `hebb capacity` result through a monotone oracle (success iff m >= the recorded m*)
and prints, per first-step factor g, how many widths the fast search would probe and what they would cost at each
job's recorded time per probe. Used to choose the fitted start's first step (docs/hebb-capacity.md).

  experiments/plots/with_python.sh experiments/bench/search_replay.py RESULT.h5 [--growth 1.05,1.015] [--scale ...]

The search is memcap's `fast` mode (src/mlp/capacity.cpp): gallop from the start by g, g^2, ... (capped at
max(g, 2)), then integer bisection. --scale k replays m* = round(k m*) to show the cost of a fit that is off by k.
"""
import argparse
import math

import h5py


def fast_probes(start, g, m_star, lo, hi):
    probes = 0

    def test(m):
        nonlocal probes
        probes += 1
        return m >= m_star

    fail, ok, cap, f = lo - 1, 0, max(g, 2.0), g
    m = min(max(start, lo), hi)
    if test(m):
        ok = m
        while ok > lo:
            down = min(max(math.floor(ok / f), lo), ok - 1)
            f = min(f * f, cap)
            if not test(down):
                fail = down
                break
            ok = down
    else:
        fail = m
        while True:
            if m >= hi:
                return probes
            nxt = math.ceil(m * f)
            f = min(f * f, cap)
            m = hi if nxt >= hi else max(m + 1, nxt)
            if test(m):
                ok = m
                break
            fail = m
    while ok - fail > 1:
        mid = fail + (ok - fail) // 2
        if test(mid):
            ok = mid
        else:
            fail = mid
    return probes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="a `hebb capacity` HDF5 file with gd rows in /summary")
    ap.add_argument("--growth", default="1.05,1.03,1.02,1.015,1.01", help="first-step factors g to replay")
    ap.add_argument("--scale", default="1", help="replay m* scaled by these factors (comma list)")
    ap.add_argument("--min-alpha", type=float, default=0.0, help="only points with F / d^2 >= this")
    a = ap.parse_args()
    with h5py.File(a.result, "r") as f:
        s = {k: f["summary"][k][()] for k in f["summary"]}
    dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    jobs = []
    for i in range(len(s["m_star"])):
        if not dec(s["method"][i]).startswith("gd") or s["m_star"][i] <= 0:
            continue
        d, F = int(s["dim"][i]), int(s["facts"][i])
        if F / d**2 < a.min_alpha:
            continue
        n = int(s["probes"][i])
        jobs.append(dict(d=d, F=F, start=int(s["start_width"][i]), m=int(s["m_star"][i]), lo=int(s["min_width"][i]),
                         hi=int(s["max_width"][i]), probes=n, per=float(s["probe_wall_s"][i]) / max(n, 1)))
    if not jobs:
        raise SystemExit("search_replay.py: no found gd searches in " + a.result)
    print(f"{len(jobs)} gd searches; recorded: {sum(j['probes'] for j in jobs)} probes, "
          f"{sum(j['probes'] * j['per'] for j in jobs):.0f} job-s")
    print("g       scale  probes  job-s (at each job's recorded s/probe)")
    for g in (float(x) for x in a.growth.split(",")):
        for k in (float(x) for x in a.scale.split(",")):
            n = [fast_probes(j["start"], g, max(1, round(j["m"] * k)), j["lo"], j["hi"]) for j in jobs]
            cost = sum(p * j["per"] for p, j in zip(n, jobs))
            print(f"{g:<7} {k:<6} {sum(n):>6}  {cost:>8.0f}")


if __name__ == "__main__":
    main()
