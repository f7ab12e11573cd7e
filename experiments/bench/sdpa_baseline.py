#!/usr/bin/env python3
"""PyTorch scaled-dot-product attention baseline for `kata bench`: causal, bf16, FlashAttention
backend only, layout [B, H, T, d] (same as our kernels), timed with CUDA events (warm-up, repeats,
median). Writes one JSON record per shape to --out.

  python3 experiments/bench/sdpa_baseline.py --shapes accept --out sdpa.json
"""
import argparse
import json
import statistics
import sys

K = 1024
SHAPES = {
    # (B, H, T, d) — the shapes at which `kata bench` runs its quadratic / chunked M2 kernels
    "accept": [(8, 16, t, 64) for t in (4 * K, 8 * K, 16 * K, 32 * K, 128 * K)],
    "table8": [(8, 16, t, 64) for t in (1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K)],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="accept", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True, help="JSON output path")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_baseline: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 5
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    rows = []
    for (B, H, T, d) in SHAPES[a.shapes]:
        q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(3))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            for _ in range(a.warmup):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
            ms = []
            for _ in range(a.repeats):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                e1.record()
                e1.synchronize()
                ms.append(e0.elapsed_time(e1))
        assert torch.isfinite(o).all().item(), "SDPA produced non-finite output"
        med = statistics.median(ms)
        flops = 2 * B * H * (T * (T + 1) / 2) * (d + d)  # same causal work model as `kata bench`
        rows.append(dict(kernel="sdpa-flash", B=B, H=H, T=T, d_head=d, dtype="bf16", ms_median=med,
                         ms_min=min(ms), ms_max=max(ms), repeats=a.repeats, tflops=flops / (med * 1e-3) / 1e12,
                         device=torch.cuda.get_device_name(), torch=torch.__version__))
        print(f"sdpa-flash B={B} H={H} T={T:>6} d={d}: {med:9.3f} ms  {rows[-1]['tflops']:7.1f} TFLOP/s", flush=True)
        del q, k, v, o
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
