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
A variant 'ce=MODE' keeps everything in fp32 but the two F x F x d logit products (Z = Y V^T and dy = P V), which
it forms the way a tensor-core kernel would, each product accumulated in fp32:
  bf16 / tf32      the operands rounded once (one pass; tf32 = 10 explicit mantissa bits, round to nearest)
  bf16x3 / tf32x3  split products: A = A_hi + A_lo with A_hi = round(A), A_lo = round(A - A_hi), and
                   A B ~ A_hi B_hi + A_hi B_lo + A_lo B_hi (three passes; the lo x lo term dropped), about
                   16 / 22 significant bits
  bf16x6           A = A_hi + A_mid + A_lo (three bf16 pieces), the six products of total order <= 2 (~24 bits)
  bf16x3p2         Z as bf16x3; dy = P V as the one-pass kernel forms it, the target's term in float and the other
                   weights in two passes, rounded once: P_hi V_hi + P_hi V_lo
  bf16x3v2         the same with the value table rounded once instead: P_hi V_hi + P_lo V_hi
  bf16x2v          the value table rounded to bf16 once (V' = round(V), fixed: no V_lo) and the other operand
                   split: Z = Y_hi V'^T + Y_lo V'^T, dy = P_hi V' + P_lo V' with the target's term in float on V'
                   (four passes instead of six; exactly a training on the table V' in about 16-bit arithmetic)
which asks whether a fused CE kernel on tensor cores with split operands would train as fp32 does.
--beta B trains on the anisotropic table of fig11 instead (spec hebbian.md §1.3: every row spiked along one unit
vector u drawn from seed 42, e' = (e + B (e.u) u) / ||.||; keys and values stay the same table).
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
SPIKE_SEED = 42  # the anisotropic spike direction's seed (spec hebbian.md §1.3; fig11 uses beta = 1.5)


def spike(E, u, beta, unit_rows):
    """spec hebbian.md §1.3 on unit rows E (float64, either backend): e' = (e + beta (e.u) u) / ||.||, u a unit
    vector; unit_rows(A) divides every row of A by its norm."""
    return unit_rows(E + beta * (E @ u)[:, None] * u[None, :])


class TorchOps:
    """torch on the CUDA device, fp32 with TF32 off."""

    def __init__(self):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        self.t, self.dev = torch, torch.device("cuda")

    def facts(self, F, d, seed, beta=0.0):
        t = self.t
        gen = t.Generator().manual_seed(seed)
        unit_rows = lambda A: A / A.norm(dim=1, keepdim=True)  # noqa: E731
        E = unit_rows(t.randn(F, d, generator=gen, dtype=t.float64))
        perm = t.randperm(F, generator=gen)
        if beta > 0:
            u = t.randn(d, generator=t.Generator().manual_seed(SPIKE_SEED), dtype=t.float64)
            E = spike(E, u / u.norm(), beta, unit_rows)
        return E.float().to(self.dev), perm.to(self.dev)

    def init(self, m, d, seed):  # U, G [m][d], D [d][m]: nn.Linear's default U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        self.t.manual_seed(seed)
        return [(self.t.rand(*shape, device=self.dev) * 2 - 1) * (1 / math.sqrt(shape[1]))
                for shape in ((m, d), (m, d), (d, m))]

    def bf16(self, a):
        return a.to(self.t.bfloat16).float()

    def tf32(self, a):  # round to nearest (ties away, as cvt.rna.tf32.f32) on the low 13 bits
        u = a.contiguous().view(self.t.int32)
        return ((u + 0x1000) & ~0x1FFF).view(self.t.float32)

    def softmax_stats(self, Z, tgt, want):  # softmax(Z) - onehot, and (loss, accuracy) if want
        rows = self.t.arange(Z.shape[0], device=self.dev)
        lse = self.t.logsumexp(Z, dim=1)
        stats = None
        if want:
            stats = (float((lse - Z[rows, tgt]).mean()), float((Z.argmax(dim=1) == tgt).float().mean()))
        P = self.t.exp(Z - lse[:, None])
        P[rows, tgt] -= 1.0
        return P, stats

    def moment(self, p):
        return self.t.zeros_like(p)

    def rows(self, n):
        return self.t.arange(n, device=self.dev)

    def adam(self, p, g, m1, m2, lr, step):  # torch.optim.Adam's order (lerp for the first moment)
        m1.lerp_(g, 0.1)
        m2.mul_(0.999).addcmul_(g, g, value=0.001)
        denom = (m2.sqrt() / math.sqrt(1 - 0.999 ** step)).add_(1e-8)
        return p.addcdiv_(m1, denom, value=-lr / (1 - 0.9 ** step)), m1, m2

    def sync(self):
        self.t.cuda.synchronize()


class NumpyOps:
    """numpy on the CPU: float32 BLAS products, Adam moments in float64."""

    def __init__(self):
        import numpy as np

        self.np = np

    def facts(self, F, d, seed, beta=0.0):
        np = self.np
        rng = np.random.default_rng(seed)
        unit_rows = lambda A: A / np.linalg.norm(A, axis=1, keepdims=True)  # noqa: E731
        E = unit_rows(rng.standard_normal((F, d)))
        perm = rng.permutation(F)
        if beta > 0:
            u = np.random.default_rng(SPIKE_SEED).standard_normal(d)
            E = spike(E, u / np.linalg.norm(u), beta, unit_rows)
        return E.astype(np.float32), perm

    def init(self, m, d, seed):
        rng = self.np.random.default_rng(seed + 1)
        return [((rng.random(shape) * 2 - 1) * (1 / math.sqrt(shape[1]))).astype(self.np.float32)
                for shape in ((m, d), (m, d), (d, m))]

    def bf16(self, a):  # round to nearest even on the top 16 bits (finite values)
        np = self.np
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return u.view(np.float32)

    def tf32(self, a):  # round to nearest (ties away, as cvt.rna.tf32.f32) on the low 13 bits
        np = self.np
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)

    def softmax_stats(self, Z, tgt, want):
        np = self.np
        rows = np.arange(Z.shape[0])
        mx = Z.max(axis=1, keepdims=True)
        Ez = np.exp(Z - mx)
        s = Ez.sum(axis=1, keepdims=True)
        stats = None
        if want:
            stats = (float(np.mean(np.log(s[:, 0]) + mx[:, 0] - Z[rows, tgt])), float(np.mean(Z.argmax(axis=1) == tgt)))
        P = Ez / s
        P[rows, tgt] -= 1
        return P, stats

    def moment(self, p):
        return self.np.zeros(p.shape)

    def rows(self, n):
        return self.np.arange(n)

    def adam(self, p, g, m1, m2, lr, step):
        g = g.astype(self.np.float64)
        m1 = m1 + 0.1 * (g - m1)
        m2 = m2 * 0.999 + 0.001 * g * g
        upd = lr / (1 - 0.9 ** step) * m1 / (self.np.sqrt(m2) / math.sqrt(1 - 0.999 ** step) + 1e-8)
        return (p - upd).astype(self.np.float32), m1, m2

    def sync(self):
        pass


CE_MODES = ("bf16", "tf32", "bf16x3", "tf32x3", "bf16x6", "bf16x3p2", "bf16x3v2", "bf16x2v")


def product(ops, A, B, mode):
    """A @ B as a tensor-core kernel in `mode` would form it (fp32 accumulation of every pass); mode None = fp32."""
    if mode is None:
        return A @ B
    rnd = ops.bf16 if mode.startswith("bf16") else ops.tf32
    Ah, Bh = rnd(A), rnd(B)
    if mode in ("bf16", "tf32"):
        return Ah @ Bh
    if mode == "bf16x2a":  # A rounded once, B split
        return Ah @ Bh + Ah @ rnd(B - Bh)
    if mode == "bf16x2b":  # A split, B rounded once
        return Ah @ Bh + rnd(A - Ah) @ Bh
    Al, Bl = rnd(A - Ah), rnd(B - Bh)
    if mode != "bf16x6":
        return Ah @ Bh + (Ah @ Bl + Al @ Bh)
    Am, Bm = Al, Bl  # three pieces: hi, mid, lo; keep every product of total order <= 2
    Al, Bl = rnd(A - Ah - Am), rnd(B - Bh - Bm)
    return Ah @ Bh + (Ah @ Bm + Am @ Bh) + (Ah @ Bl + Am @ Bm + Al @ Bh)


def train(ops, F, d, m, seed, T, lrs, on, ce=None, beta=0.0):
    """One full-batch training; returns the last epoch's (loss, train accuracy). ce: how the two logit products
    are formed (one of CE_MODES; None = fp32). beta: the table's rank-1 spike (0 = isotropic)."""
    keep = lambda a: a  # noqa: E731
    r = {c: (ops.bf16 if on[c] else keep) for c in GROUPS}
    E, tgt = ops.facts(F, d, seed, beta)
    params = ops.init(m, d, seed)
    m1 = [ops.moment(p) for p in params]
    m2 = [ops.moment(p) for p in params]
    Xr, Vr = r["x"](E), (ops.bf16(E) if ce == "bf16x2v" else r["v"](E))
    # The logit product's mode and the numerator's (dy = P V): the x3p2 / x3v2 modes form the second in two passes.
    # bf16x2v: V' = round(V) is exact in bf16, so "A split, B rounded" forms Y V'^T and P V' in two passes each.
    ce_z, ce_n = {"bf16x3p2": ("bf16x3", "bf16x2a"), "bf16x3v2": ("bf16x3", "bf16x2b"),
                  "bf16x2v": ("bf16x2b", "bf16x2b")}.get(ce, (ce, ce))
    stats = (float("nan"), float("nan"))
    for t in range(T):
        Uw, Gw, Dw = (r["w"](p) for p in params)
        A, Gt = Xr @ Uw.T, Xr @ Gw.T
        H = r["h"](A * Gt)
        Z = product(ops, r["y"](H @ Dw.T), Vr.T, ce_z)
        P, st = ops.softmax_stats(Z, tgt, t == T - 1)
        stats = st or stats
        if ce_n in ("bf16x2a", "bf16x2b"):  # as the one-pass kernel: the target's term in float, the rest rounded
            rows = ops.rows(F)
            w_t = P[rows, tgt].clone() if hasattr(P, "clone") else P[rows, tgt].copy()
            P[rows, tgt] = 0
            dY = (product(ops, P, Vr, ce_n) + w_t[:, None] * Vr[tgt]) / F
        else:
            dY = r["g"](product(ops, r["p"](P), Vr, ce_n) / F)
        dH = dY @ Dw
        dA, dG = r["g"](dH * Gt), r["g"](dH * A)
        grads = (dA.T @ Xr, dG.T @ Xr, dY.T @ H)
        for i in range(3):
            params[i], m1[i], m2[i] = ops.adam(params[i], grads[i], m1[i], m2[i], lrs[t], t + 1)
    ops.sync()
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--facts", type=int, default=4096)
    ap.add_argument("--width", type=str, default="112", help="comma list of widths m")
    ap.add_argument("--epochs", type=int, default=10000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-min", type=float, default=1e-6)
    ap.add_argument("--beta", type=float, default=0.0,
                    help="rank-1 spike on the tied table (spec hebbian.md §1.3; fig11: 1.5; 0 = isotropic)")
    ap.add_argument("--seeds", type=str, default="42", help="comma list of seeds (fact set and init)")
    ap.add_argument("--variants", type=str, default="fp32,xvwhypg",
                    help="comma list of rounded groups (fp32 or '' = none), or ce=MODE (" + ", ".join(CE_MODES) + ")")
    a = ap.parse_args()
    try:
        widths = [int(w) for w in a.width.split(",") if w]
        seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        sys.exit("gd_bf16_emulation: --width and --seeds take comma lists of integers")
    variants = ["" if v == "fp32" else v for v in a.variants.split(",")]
    bad = [v for v in variants if (v[3:] not in CE_MODES if v.startswith("ce=") else set(v) - set(GROUPS))]
    if bad:
        sys.exit(f"gd_bf16_emulation: unknown variants {bad} (groups of x v w h y p g, fp32, or ce=MODE with MODE "
                 f"one of {', '.join(CE_MODES)})")
    if not (math.isfinite(a.beta) and a.beta >= 0):
        sys.exit(f"gd_bf16_emulation: --beta must be a finite number >= 0 (got {a.beta})")
    if a.facts < 2 or a.dim < 1 or a.epochs < 1 or min(widths, default=0) < 1 or not seeds:
        sys.exit("gd_bf16_emulation: need --facts >= 2, --dim >= 1, --epochs >= 1, widths >= 1 and a seed")
    if a.backend == "torch":
        try:
            import torch
        except ImportError:
            sys.exit("gd_bf16_emulation: the torch backend needs PyTorch (or use --backend numpy)")
        if not torch.cuda.is_available():
            sys.exit("gd_bf16_emulation: the torch backend needs a CUDA device (or use --backend numpy)")
    else:
        try:
            import numpy  # noqa: F401
        except ImportError:
            sys.exit("gd_bf16_emulation: the numpy backend needs numpy (Debian's python3-numpy serves "
                     "/usr/bin/python3)")
    ops = TorchOps() if a.backend == "torch" else NumpyOps()
    T = a.epochs
    lrs = [a.lr_min + (a.lr - a.lr_min) * (1 + math.cos(math.pi * t / T)) / 2 for t in range(T)]
    print(f"backend {a.backend}, d = {a.dim}, F = {a.facts}, beta = {a.beta:g}, {T} epochs")
    print("variant   F      m     seed   final_loss    train_acc   s", flush=True)
    for seed in seeds:
        for m in widths:
            for var in variants:
                t0 = time.time()
                ce = var[3:] if var.startswith("ce=") else None
                loss_v, acc = train(ops, a.facts, a.dim, m, seed, T, lrs,
                                    {c: (ce is None and c in var) for c in GROUPS}, ce, a.beta)
                print(f"{var or 'fp32':9s} {a.facts:<6d} {m:<5d} {seed:<6d} {loss_v:<13.6g} {acc:<11.6f} "
                      f"{time.time() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
