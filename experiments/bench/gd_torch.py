#!/usr/bin/env python3
"""PyTorch reference for `hebb train --method gd` (spec hebbian.md §2.6), written the way the authors'
release trains its GD baseline: fp32 with TF32 OFF, three nn.Linear(bias=False) layers U, G, D,
out = D(U(x) * G(x)), logits = out @ V.T, F.cross_entropy, torch.optim.Adam(lr=1e-3) with
CosineAnnealingLR(T_max=epochs, eta_min=1e-6) stepped once per epoch, full batch, and a loss.item()
early-stop check every epoch (one host sync per epoch, as in the reference). Tied sphere table (keys
= values), random permutation map. Times the training loop of a fresh model with CUDA events after a
short warm-up run, and prints one JSON line:
  {"impl", "time_s", "final_loss", "accuracy", "epochs_run", "facts", "width", "dim", "epochs", ...}

  python3 experiments/bench/gd_torch.py --dim 64 --facts 4096 --width 4096 --epochs 10000
  python3 experiments/bench/gd_torch.py --dim 64 --facts 256 --width 64 --compile   # torch.compile peer
"""
import argparse
import json
import sys


def build(d, F, seed, torch, dev):
    gen = torch.Generator().manual_seed(seed)
    E = torch.randn(F, d, generator=gen, dtype=torch.float64)
    E = E / E.norm(dim=1, keepdim=True).clamp_min(1e-30)  # rows uniform on the sphere
    perm = torch.randperm(F, generator=gen)
    return E.float().to(dev), perm.to(dev)


def make_model(torch, d, m, dev):
    """out = D(U(x) * G(x)), PyTorch nn.Linear default init, no biases (identity gate)."""

    class GatedMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.U = torch.nn.Linear(d, m, bias=False)
            self.G = torch.nn.Linear(d, m, bias=False)
            self.D = torch.nn.Linear(m, d, bias=False)

        def forward(self, x):
            return self.D(self.U(x) * self.G(x))

    return GatedMLP().to(dev)


def train(torch, model, X, V, targets, epochs, lr, lr_min, stop_loss, loss_fn):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=lr_min)
    loss_val, run = float("nan"), 0
    for _ in range(epochs):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, X, V, targets)
        loss.backward()
        opt.step()
        sched.step()
        run += 1
        loss_val = loss.item()  # the reference's per-epoch early-stop check (a host sync)
        if loss_val <= stop_loss:
            break
    return loss_val, run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--facts", type=int, default=256)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-min", type=float, default=1e-6)
    ap.add_argument("--stop-loss", type=float, default=1e-7)
    ap.add_argument("--warmup", type=int, default=20, help="epochs of a throw-away run before timing")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward + loss (reported as torch-compile)")
    a = ap.parse_args()
    impl = "torch-compile" if a.compile else "torch"

    try:
        import torch
        import torch.nn.functional as Fn
    except ImportError as e:
        print(json.dumps({"impl": impl, "error": f"no torch: {e}"}))
        return 3
    if not torch.cuda.is_available():
        print(json.dumps({"impl": impl, "error": "no CUDA GPU visible to PyTorch"}))
        return 5
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device("cuda")
    X, targets = build(a.dim, a.facts, a.seed, torch, dev)
    V = X  # tied table: the values are the keys

    def loss_fn(model, X, V, targets):
        return Fn.cross_entropy(model(X) @ V.T, targets)

    if a.compile:
        try:
            loss_fn = torch.compile(loss_fn)
        except Exception as e:  # noqa: BLE001 - report and stop
            print(json.dumps({"impl": impl, "error": f"torch.compile failed: {e}"}))
            return 4

    try:
        # One model object for warm-up and timing (a torch.compile'd function would recompile for a
        # new one inside the timed loop); its weights are re-drawn from the seed before timing.
        torch.manual_seed(a.seed)
        model = make_model(torch, a.dim, a.width, dev)
        train(torch, model, X, V, targets, max(a.warmup, 1), a.lr, a.lr_min, -1.0, loss_fn)
        torch.cuda.synchronize()
        torch.manual_seed(a.seed)
        with torch.no_grad():
            for lin in (model.U, model.G, model.D):
                lin.reset_parameters()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        final_loss, run = train(torch, model, X, V, targets, a.epochs, a.lr, a.lr_min, a.stop_loss, loss_fn)
        e1.record()
        e1.synchronize()
        time_s = e0.elapsed_time(e1) / 1000.0
        with torch.no_grad():
            acc = (model(X) @ V.T).argmax(dim=1).eq(targets).float().mean().item()
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"impl": impl, "error": f"{type(e).__name__}: {e}"}))
        return 4
    print(json.dumps(dict(impl=impl, time_s=time_s, final_loss=final_loss, accuracy=acc, epochs_run=run,
                          facts=a.facts, width=a.width, dim=a.dim, epochs=a.epochs, seed=a.seed, tf32=False,
                          device=torch.cuda.get_device_name(), torch=torch.__version__)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
