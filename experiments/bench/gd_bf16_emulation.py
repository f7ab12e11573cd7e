#!/usr/bin/env python3
"""Which bf16 rounding costs GD its capacity? An emulation of `hebb train --method gd,precision=bf16`.

memcap's bf16 GD step (kernels/nn_gd_bf16.cu) multiplies bf16-rounded operands with fp32 accumulation; on the
fig2c grid it needs 1-4 more hidden units than f32 from F = 2048 up (docs/hebb-training.md), and near m* its
final loss is several times f32's. This script trains the same model (tied sphere table, permutation map,
out = D((U x) * (G x)), CE over all F value logits, Adam + cosine per epoch, full batch; forward and backward
written out by hand) in fp32, rounding to bf16 (round-to-nearest-even, as __float2bfloat16_rn) only the operand
groups a variant names:
  x  keys X in the U / G products and the backward's dU, dG      v  the value table V in the logits and dy
  w  the weights U, G, D wherever a product reads them           h  the hidden h = a * g (y = h D^T, dD)
  y  the output y in the logits                                  p  the softmax weights in dy = P V
  g  the backward operands dy, da, dg
and prints one line per (seed, width, variant): the last epoch's loss and train accuracy. 'xvwhypg' is memcap's
bf16 path, 'fp32' (or an empty name) plain fp32, 'vyp' precision bf16ce (float32 MLP, bf16 logits).
Backends: torch on a CUDA device (TF32 off), or numpy on the CPU (float32 BLAS, Adam in float64; about 20 ms a
step at F = 1024 on one core). The two draw their fact sets and initial weights from their own generators.

  python3 experiments/bench/gd_bf16_emulation.py --facts 4096 --width 112 --seeds 42 --variants fp32,w,vyp,xvwhypg
  OPENBLAS_NUM_THREADS=1 python3 experiments/bench/gd_bf16_emulation.py --backend numpy --facts 1024 --width 23
"""
import argparse
import math
import sys
import time

GROUPS = "xvwhypg"


def train_torch(F, d, m, seed, T, lrs, on):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(seed)
    E = torch.randn(F, d, generator=gen, dtype=torch.float64)
    E = (E / E.norm(dim=1, keepdim=True)).float().to(dev)
    tgt = torch.randperm(F, generator=gen).to(dev)
    rows = torch.arange(F, device=dev)
    rnd = {c: ((lambda t: t.to(torch.bfloat16).float()) if on[c] else (lambda t: t)) for c in GROUPS}
    torch.manual_seed(seed)
    bu, bd = 1 / math.sqrt(d), 1 / math.sqrt(m)  # nn.Linear default init bounds
    params = [(torch.rand(m, d, device=dev) * 2 - 1) * bu, (torch.rand(m, d, device=dev) * 2 - 1) * bu,
              (torch.rand(d, m, device=dev) * 2 - 1) * bd]
    m1 = [torch.zeros_like(p) for p in params]
    m2 = [torch.zeros_like(p) for p in params]
    Xr, Vr = rnd["x"](E), rnd["v"](E)
    loss_v = acc = float("nan")
    for t in range(T):
        U, G, D = params
        Uw, Gw, Dw = rnd["w"](U), rnd["w"](G), rnd["w"](D)
        A, Gt = Xr @ Uw.T, Xr @ Gw.T
        H = rnd["h"](A * Gt)
        Z = rnd["y"](H @ Dw.T) @ Vr.T
        lse = torch.logsumexp(Z, dim=1)
        if t == T - 1:
            loss_v = float((lse - Z[rows, tgt]).mean())
            acc = float((Z.argmax(dim=1) == tgt).float().mean())
        P = torch.exp(Z - lse[:, None])
        P[rows, tgt] -= 1.0
        dY = rnd["g"](rnd["p"](P) @ Vr / F)
        dH = dY @ Dw
        dA, dG = rnd["g"](dH * Gt), rnd["g"](dH * A)
        grads = (dA.T @ Xr, dG.T @ Xr, dY.T @ H)
        step = t + 1
        for p, gr, mm, vv in zip(params, grads, m1, m2):
            mm.lerp_(gr, 0.1)
            vv.mul_(0.999).addcmul_(gr, gr, value=0.001)
            denom = (vv.sqrt() / math.sqrt(1 - 0.999 ** step)).add_(1e-8)
            p.addcdiv_(mm, denom, value=-lrs[t] / (1 - 0.9 ** step))
    torch.cuda.synchronize()
    return loss_v, acc


def train_numpy(F, d, m, seed, T, lrs, on):
    import numpy as np

    def bf16(a):
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return u.view(np.float32)

    rnd = {c: (bf16 if on[c] else (lambda a: a)) for c in GROUPS}
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((F, d))
    E = (E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32)
    tgt = rng.permutation(F)
    rows = np.arange(F)
    ir = np.random.default_rng(seed + 1)
    bu, bd = 1 / math.sqrt(d), 1 / math.sqrt(m)
    params = [((ir.random((m, d)) * 2 - 1) * bu).astype(np.float32),
              ((ir.random((m, d)) * 2 - 1) * bu).astype(np.float32),
              ((ir.random((d, m)) * 2 - 1) * bd).astype(np.float32)]
    m1 = [np.zeros(p.shape) for p in params]
    m2 = [np.zeros(p.shape) for p in params]
    Xr, Vr = rnd["x"](E), rnd["v"](E)
    loss_v = acc = float("nan")
    for t in range(T):
        U, G, D = params
        Uw, Gw, Dw = rnd["w"](U), rnd["w"](G), rnd["w"](D)
        A, Gt = Xr @ Uw.T, Xr @ Gw.T
        H = rnd["h"](A * Gt)
        Z = rnd["y"](H @ Dw.T) @ Vr.T
        mx = Z.max(axis=1, keepdims=True)
        Ez = np.exp(Z - mx)
        s = Ez.sum(axis=1, keepdims=True)
        if t == T - 1:
            loss_v = float(np.mean(np.log(s[:, 0]) + mx[:, 0] - Z[rows, tgt]))
            acc = float(np.mean(Z.argmax(axis=1) == tgt))
        P = Ez / s
        P[rows, tgt] -= 1
        dY = rnd["g"](rnd["p"](P) @ Vr / F)
        dH = dY @ Dw
        dA, dG = rnd["g"](dH * Gt), rnd["g"](dH * A)
        grads = (dA.T @ Xr, dG.T @ Xr, dY.T @ H)
        step = t + 1
        for i in range(3):
            g = grads[i].astype(np.float64)
            m1[i] += 0.1 * (g - m1[i])
            m2[i] = m2[i] * 0.999 + 0.001 * g * g
            upd = lrs[t] / (1 - 0.9 ** step) * m1[i] / (np.sqrt(m2[i]) / math.sqrt(1 - 0.999 ** step) + 1e-8)
            params[i] = (params[i] - upd).astype(np.float32)
    return loss_v, acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--facts", type=int, default=4096)
    ap.add_argument("--width", type=str, default="112", help="comma list of widths m")
    ap.add_argument("--epochs", type=int, default=10000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-min", type=float, default=1e-6)
    ap.add_argument("--seeds", type=str, default="42", help="comma list of seeds (fact set and init)")
    ap.add_argument("--variants", type=str, default="fp32,xvwhypg",
                    help="comma list of rounded groups (fp32 or '' = none)")
    a = ap.parse_args()
    try:
        widths = [int(w) for w in a.width.split(",") if w]
        seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        sys.exit("gd_bf16_emulation: --width and --seeds take comma lists of integers")
    variants = ["" if v == "fp32" else v for v in a.variants.split(",")]
    bad = [v for v in variants if set(v) - set(GROUPS)]
    if bad:
        sys.exit(f"gd_bf16_emulation: unknown groups in {bad} (use x v w h y p g, or fp32)")
    if a.facts < 2 or a.dim < 1 or a.epochs < 1 or min(widths, default=0) < 1 or not seeds:
        sys.exit("gd_bf16_emulation: need --facts >= 2, --dim >= 1, --epochs >= 1, widths >= 1 and a seed")
    if a.backend == "torch":
        try:
            import torch
        except ImportError:
            sys.exit("gd_bf16_emulation: the torch backend needs PyTorch (or use --backend numpy)")
        if not torch.cuda.is_available():
            sys.exit("gd_bf16_emulation: the torch backend needs a CUDA device (or use --backend numpy)")
    train = train_torch if a.backend == "torch" else train_numpy
    T = a.epochs
    lrs = [a.lr_min + (a.lr - a.lr_min) * (1 + math.cos(math.pi * t / T)) / 2 for t in range(T)]
    print(f"backend {a.backend}, d = {a.dim}, F = {a.facts}, {T} epochs")
    print("variant   F      m     seed   final_loss    train_acc   s", flush=True)
    for seed in seeds:
        for m in widths:
            for var in variants:
                t0 = time.time()
                loss_v, acc = train(a.facts, a.dim, m, seed, T, lrs, {c: c in var for c in GROUPS})
                print(f"{var or 'fp32':9s} {a.facts:<6d} {m:<5d} {seed:<6d} {loss_v:<13.6g} {acc:<11.6f} "
                      f"{time.time() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
