#!/usr/bin/env python3
"""PyTorch scaled-dot-product attention baseline for `kata bench`: causal, bf16, layout [B, H, T, d] (same as
our kernels), every SDPA backend that runs on this GPU (FlashAttention, memory-efficient, cuDNN fused attention,
and the math reference where its T x T scores fit), each timed alone through torch.nn.attention.sdpa_kernel
with CUDA events (warm-up, repeats, median). A backend that refuses a shape is recorded as skipped with the
reason. Writes one JSON record per (shape, backend) to --out; compare.py takes ratios against the fastest.

  python3 experiments/bench/sdpa_baseline.py --shapes accept --out sdpa.json
  python3 experiments/bench/sdpa_baseline.py --shapes table9 --pass fwdbwd --out sdpa_fb.json   # forward + backward
"""
import argparse
import json
import statistics
import sys

K = 1024
SHAPES = {
    # (B, H, T, d): the shapes at which `kata bench --shapes accept` runs (issue 11)
    "accept": [(8, 16, t, 64) for t in (4 * K, 8 * K, 16 * K, 32 * K, 128 * K)]
    + [(8, 8, t, 128) for t in (4 * K, 8 * K, 16 * K, 32 * K)]
    + [(1, 1, t, 64) for t in (32 * K, 64 * K, 128 * K)],
    "table8": [(8, 16, t, 64) for t in (1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K)],
    # forward + backward (spec §5.5 Table 9; `kata bench --shapes table9`): use with --pass fwdbwd
    "table9": [(8, 16, t, 64) for t in (1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K)],
}
MATH_MAX_SCORES = 1 << 30  # the math backend materialises B*H*T*T scores: only where that stays small


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="accept", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True, help="JSON output path")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pass", dest="pass_", default="fwd", choices=["fwd", "fwdbwd"],
                    help="fwd: the forward alone; fwdbwd: forward + backward (o.backward(dout), the gradients of q, k, v)")
    a = ap.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_baseline: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 5
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    rows = []
    for (B, H, T, d) in SHAPES[a.shapes]:
        fb = a.pass_ == "fwdbwd"
        q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_(fb)
                   for _ in range(3))
        dout = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, generator=gen) if fb else None

        def step():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if fb:
                o.backward(dout)
            return o

        def clear():
            for t in (q, k, v):
                t.grad = None
        ref = None
        for name, backend in backends:
            rec = dict(kernel="sdpa-" + name, backend=name, B=B, H=H, T=T, d_head=d, dtype="bf16", **{"pass": a.pass_},
                       device=torch.cuda.get_device_name(), torch=torch.__version__)
            if name == "math" and B * H * T * T > MATH_MAX_SCORES:
                rec.update(status="skipped", reason=f"math backend not timed above {MATH_MAX_SCORES} scores")
                rows.append(rec)
                continue
            try:
                with sdpa_kernel([backend]):
                    for _ in range(a.warmup):
                        clear()
                        o = step()
                    torch.cuda.synchronize()
                    ms = []
                    for _ in range(a.repeats):
                        clear()
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        o = step()
                        e1.record()
                        e1.synchronize()
                        ms.append(e0.elapsed_time(e1))
                    o = o.detach()
            except (RuntimeError, torch.OutOfMemoryError) as err:
                rec.update(status="skipped", reason=str(err).splitlines()[0][:200])
                rows.append(rec)
                torch.cuda.empty_cache()
                continue
            assert torch.isfinite(o).all().item(), f"SDPA {name} produced non-finite output"
            if ref is None:
                ref = o.float()
            else:  # every backend computes the same function
                err = ((o.float() - ref).norm() / ref.norm()).item()
                assert err < 2e-2, f"SDPA {name} disagrees with the first backend: {err}"
            med = statistics.median(ms)
            flops = 2 * B * H * (T * (T + 1) / 2) * (d + d)  # same causal work model as `kata bench`
            if fb:
                flops *= 3.5  # forward + backward: the backward does 2.5 forwards' products (flash convention)
            rec.update(status="ok", ms_median=med, ms_min=min(ms), ms_max=max(ms), repeats=a.repeats,
                       tflops=flops / (med * 1e-3) / 1e12)
            rows.append(rec)
            print(f"sdpa-{name:<9} {a.pass_:<6} B={B} H={H:>2} T={T:>6} d={d:>3}: {med:9.3f} ms  "
                  f"{rec['tflops']:7.1f} TFLOP/s", flush=True)
            del o
        for r in rows:
            if r["B"] == B and r["H"] == H and r["T"] == T and r["d_head"] == d and r["status"] == "skipped":
                print(f"sdpa-{r['backend']:<9} B={B} H={H:>2} T={T:>6} d={d:>3}: skipped ({r['reason']})", flush=True)
        del q, k, v, ref, dout
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
