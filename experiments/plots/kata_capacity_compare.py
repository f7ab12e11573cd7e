#!/usr/bin/env python3
"""Compare the k_star columns of two `kata capacity-sweep` files (e.g. --device cuda vs --device cpu).

Prints how many capacities agree; for each one that differs, the measured median pSNR and accuracy
at the K values around both answers on both devices, so one can check that the difference sits
within float tolerance of the threshold. Exit 0 always (a report, not a test).
Usage: kata_capacity_compare.py A.h5 B.h5 [--gpu-s SECONDS --cpu-s SECONDS] [--labels gpu,cpu]
"""
import argparse

from memcap_plot import open_result, texts


def table(f):
    s = f["summary"]
    jobs = list(texts(s["job"][()]))
    return {j: {k: s[k][()][i] for k in s} for i, j in enumerate(jobs)}


def point(f, job, K):
    r = f["runs"][job.replace("/", ",").replace(".", "p")]
    Ks = [int(k) for k in r["K"][()]]
    if K not in Ks:
        return None
    i = Ks.index(K)
    return round(float(r["psnr_median"][i]), 7), round(float(r["acc"][i]), 7)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--gpu-s", type=float, default=None)
    ap.add_argument("--cpu-s", type=float, default=None)
    ap.add_argument("--labels", default="gpu,cpu")
    args = ap.parse_args()
    la, lb = args.labels.split(",")
    fa = open_result(args.a, ("summary", "runs"), "kata capacity-sweep")
    fb = open_result(args.b, ("summary", "runs"), "kata capacity-sweep")
    ta, tb = table(fa), table(fb)
    common = sorted(set(ta) & set(tb))
    if set(ta) != set(tb):
        print(f"note: jobs only in {la}: {sorted(set(ta) - set(tb))}; only in {lb}: {sorted(set(tb) - set(ta))}")
    same, diff = 0, []
    for job in common:
        for col in ("k_star_psnr", "k_star_acc"):
            x, y = int(ta[job][col]), int(tb[job][col])
            if x == y:
                same += 1
                continue
            lo, hi = min(x, y), max(x, y)
            near = [(K, point(fa, job, K), point(fb, job, K)) for K in sorted({lo, lo + 1, hi, hi + 1})]
            diff.append((job, col, x, y, near))
    print(f"{len(common)} jobs, {2 * len(common)} capacities: {same} equal, {len(diff)} differ")
    for job, col, x, y, near in diff:
        print(f"  DIFF {job} {col}: {la} {x} {lb} {y}")
        for K, pa, pb in near:
            if pa or pb:
                print(f"     K={K}: (median pSNR, acc) {la} {pa}  {lb} {pb}")
    for lab, t in ((la, ta), (lb, tb)):
        print(f"max state/closed-form deviation ({lab}): {max(float(t[j]['max_deviation']) for j in t):.2e}")
    print(f"{'job':<44} {'K*_psnr ' + la:>14} {'K*_psnr ' + lb:>14} {'K*_acc ' + la:>13} {'K*_acc ' + lb:>13}")
    for job in common:
        print(f"{job:<44} {int(ta[job]['k_star_psnr']):>14} {int(tb[job]['k_star_psnr']):>14} "
              f"{int(ta[job]['k_star_acc']):>13} {int(tb[job]['k_star_acc']):>13}")
    if args.gpu_s and args.cpu_s:
        print(f"time: {lb} {args.cpu_s:.1f} s, {la} {args.gpu_s:.1f} s, speedup {args.cpu_s / args.gpu_s:.1f}x")


if __name__ == "__main__":
    main()
