#!/usr/bin/env python3
"""Ratios of `kata bench` (HDF5 /summary) against the PyTorch SDPA baseline (JSON from sdpa_baseline.py, every
backend that ran), each against the FASTEST backend at the same (B, H, T, d_head) and against flash, and the
acceptance items of issue 11 marked pass / MISS (by how much). Also the tree-vs-sequential ratios when the run
has them (table10 / table11 presets), and the forward + backward rows of `--shapes table9` against the SDPA
forward + backward records of sdpa_baseline.py --pass fwdbwd (issue 12, acceptance 3).

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
        return [{k: dec(cols[k][i]) for k in cols} for i in range(n)]


def key(r):
    return (int(r["B"]), int(r["H"]), int(r["T"]), int(r["d_head"]))


def verdict(value, target):
    return "pass" if value >= target else f"MISS by {target / value:.2f}x"


def main():
    rows = load_summary(sys.argv[1])
    sdpa, sdpa_fb = {}, {}
    for r in json.load(open(sys.argv[2])):
        if r.get("status", "ok") == "ok":
            into = sdpa_fb if r.get("pass", "fwd") == "fwdbwd" else sdpa
            into.setdefault((r["B"], r["H"], r["T"], r["d_head"]), {})[r["backend"]] = r["ms_median"]
    fwdbwd = [r for r in rows if r.get("pass", "fwd") == "fwdbwd"]
    rows = [r for r in rows if r.get("pass", "fwd") != "fwdbwd"]
    T = lambda t: f"{t // 1024}K"
    out = []
    if sdpa:
        out.append("## SDPA backends (ms) and the fastest, same GPU, same run")
        for k in sorted(sdpa):
            b = sdpa[k]
            best = min(b, key=b.get)
            out.append(f"B={k[0]} H={k[1]:>2} T={T(k[2]):>5} d={k[3]:>3}: " +
                       "  ".join(f"{n} {b[n]:.3f}" for n in sorted(b)) + f"   fastest {best}")
    out.append("")
    out.append("## ours vs SDPA: ratio = SDPA ms / ours ms (> 1: ours faster)")
    out.append(f"{'group':<14}{'form':<10}{'map':<24}{'B':>3}{'H':>4}{'T':>7}{'d':>5}{'variant':>22}{'ours ms':>10}"
               f"{'fastest':>10}{'vs fastest':>11}{'vs flash':>9}  target")
    by = {}
    for r in rows:
        by.setdefault((r["group"], r["kernel"], r["map"].split(":")[0], key(r), r["variant"]), r)
        k = key(r)
        if k not in sdpa or r["kernel"] not in ("quadratic", "chunked") or not r["group"].startswith("a"):
            continue
        b = sdpa[k]
        best = min(b, key=b.get)
        vf, vfl = b[best] / r["ms_median"], (b["flash"] / r["ms_median"] if "flash" in b else float("nan"))
        target = ""
        name = r["map"].split(":")[0]
        g = r["group"]
        if g.startswith("a2") and name in ("m1", "m2") and k[2] >= 8 * 1024:
            target = f">=1.2x fastest: {verdict(vf, 1.2)}"
        elif g.startswith("a3"):  # every chunked variant timed there
            target = f">=25x flash: {verdict(vfl, 25)}; >=15x fastest: {verdict(vf, 15)}"
        elif g.startswith("a5"):
            target = f">=1.3x fastest: {verdict(vf, 1.3)}"
        elif g.startswith("a6"):
            target = f">=1.1x fastest: {verdict(vf, 1.1)}"
        out.append(f"{g:<14}{r['kernel']:<10}{r['map'][:23]:<24}{k[0]:>3}{k[1]:>4}{T(k[2]):>7}{k[3]:>5}"
                   f"{r['variant']:>22}{r['ms_median']:>10.3f}{b[best]:>10.3f}{vf:>10.2f}x{vfl:>8.2f}x  {target}")
    # item 3: stage split and fractions of the ceilings
    a3 = [r for r in rows if r["group"].startswith("a3")]
    if a3:
        out.append("")
        out.append("## item 3: chunked M2, B=8 H=16 T=128K C=64 (stages of one extra launch; fractions of the ceilings)")
        for r in a3:
            out.append(f"{r['variant']:<18} {r['ms_median']:9.3f} ms  {r['stage_ms']}  {r['tflops']:.1f} TFLOP/s "
                       f"({r['fraction_of_gemm_ceiling']:.3f} of GEMM {r['ceiling_gemm_tflops']:.0f})  "
                       f"{r['gbps']:.0f} GB/s ({r['fraction_of_copy_ceiling']:.3f} of copy {r['ceiling_copy_gbps']:.0f})")
    # item 4: B = H = 1, chunked vs quadratic and vs the sequential chunk scan
    a4 = [r for r in rows if r["group"].startswith("a4")]
    if a4:
        out.append("")
        out.append("## item 4: B = H = 1, d = 64: chunked (T split) vs quadratic, and vs its sequential chunk scan")
        ms = {(r["kernel"], r["map"].split(":")[0], int(r["T"]), r["variant"].split("/")[1]): r["ms_median"] for r in a4}
        for m in ("m1", "m2"):
            for t in sorted({k[2] for k in ms}):
                q = ms.get(("quadratic", m, t, "ws3")) or ms.get(("quadratic", m, t, "ws2"))
                split = {k[3]: x for k, x in ms.items()  # every T-split variant timed (not the sequential scan)
                         if k[:3] == ("chunked", m, t) and k[3] != "fused-seq"}
                c = min(split.values()) if split else None
                if q is None:
                    q = next((v for k, v in ms.items() if k[0] == "quadratic" and k[1] == m and k[2] == t), None)
                if q and c:
                    each = ", ".join(f"{v} {x:.3f}" for v, x in sorted(split.items()))
                    out.append(f"{m} T={T(t):>5}: quadratic {q:.3f} ms, chunked {c:.3f} ms ({each}) -> "
                               f"{'chunked faster: pass' if c < q else f'MISS by {c / q:.2f}x'}")
            s = ms.get(("chunked", m, 128 * 1024, "fused-seq"))
            c = min((x for k, x in ms.items() if k[:3] == ("chunked", m, 128 * 1024) and k[3] != "fused-seq"),
                    default=None)
            if s and c:
                out.append(f"{m} T=128K: sequential chunk scan {s:.3f} ms / split {c:.3f} ms = {s / c:.2f}x "
                           f"(>=3x: {verdict(s / c, 3)})")
        out.append("stage split of the chunked rows (ms, one extra launch):")
        for r in a4:
            if r["kernel"] == "chunked" and r["stage_ms"]:
                out.append(f"  {r['map'].split(':')[0]} T={T(int(r['T'])):>5} {r['variant']:<18} {r['stage_ms']}")
    # forward + backward (table9; issue 12 acceptance 3): the MQAR mixer cores vs SDPA forward + backward
    if fwdbwd:
        out.append("")
        out.append("## forward + backward (table9): ours (MQAR mixer cores; mma/NAME = bf16 tensor-core backward after quadratic forward variant NAME; chunked/NAME = chunked O(T) backward after chunked forward variant NAME) vs SDPA fwd+bwd, "
                   "ratio = SDPA ms / ours ms")
        for k in sorted(sdpa_fb):
            b = sdpa_fb[k]
            out.append(f"SDPA fwd+bwd B={k[0]} H={k[1]:>2} T={T(k[2]):>5} d={k[3]:>3}: " +
                       "  ".join(f"{n} {b[n]:.3f}" for n in sorted(b)) + f"   fastest {min(b, key=b.get)}")
        out.append(f"{'mixer':<9}{'T':>6}{'kernel':>9}{'prec':>6}{'ours ms':>11}{'fastest':>10}{'vs fastest':>11}"
                   f"{'vs flash':>9}  target")
        for r in fwdbwd:
            k = key(r)
            b = sdpa_fb.get(k, {})
            ours = r["ms_median"]
            vf = min(b.values()) / ours if b else float("nan")
            vfl = b["flash"] / ours if "flash" in b else float("nan")
            target = ""
            chunked = str(r["variant"]).startswith("chunked")
            if r["map"].split(":")[0] == "m2" and chunked and k[2] == 32 * 1024 and b:
                target = f">=2x flash (chunked): {verdict(vfl, 2.0)}"
            elif r["map"].split(":")[0] == "m2" and not chunked and 4 * 1024 <= k[2] <= 32 * 1024 and b:
                target = f">=1.5x flash: {verdict(vfl, 1.5)}; >=1.0x fastest: {verdict(vf, 1.0)}"
            best = min(b, key=b.get) if b else "-"
            out.append(f"{r['map'][:8]:<9}{T(k[2]):>6}{r['variant']:>9}{r['dtype']:>6}{ours:>11.3f}"
                       f"{(b[best] if b else float('nan')):>10.3f}{vf:>10.2f}x{vfl:>8.2f}x  {target}")
    # tree vs sequential (table10 / table11)
    seq = {(r["group"], key(r)): r for r in rows if r["kernel"] == "chunked" and r["map"] == "linear"}
    tree = [r for r in rows if r["kernel"] == "tree"]
    if tree:
        out.append("")
        out.append("## tree scan vs sequential chunk scan (linear feature, same chunk)")
        for r in tree:
            s = seq.get((r["group"], key(r)))
            if s:
                out.append(f"{r['group']:<10} B={key(r)[0]:>2} T={T(key(r)[2]):>5}: chunked {s['ms_median']:.3f} ms "
                           f"({s['variant']}), tree {r['ms_median']:.3f} ms -> {s['ms_median'] / r['ms_median']:.2f}x")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
