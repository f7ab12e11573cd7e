#!/usr/bin/env python3
"""PyTorch baseline for `kata mqar train` (issue 12, acceptance 3): the Zoology-style MQAR language model of
spec kata.md §4.4 with the softmax mixer, written the straightforward way (nn.Module layers, autograd,
F.scaled_dot_product_attention with is_causal=True, fp32 with TF32 off unless --tf32), trained with the same
loop as memcap: AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1), global-norm clip 1.0, cosine schedule,
batch 256 sequences of one slice, the training mixture of §4.1 (T, K, examples) = (64, 4, 100k), (128, 8,
20k), (256, 16, 20k), (256, 32, 20k), (256, 64, 20k), then one evaluation of the diagonal K = T/4 for T in
512..4096 (1000 examples each, --eval-batch sequences per forward). The tokens follow the MQAR
layout (K key/value pairs, then query/filler slots, labels at the K query positions) drawn with torch's
generator: the same shapes and label counts as memcap's batches, not the same tokens (the timing does not
depend on them); the §4.4 init (N(0, 0.02²) weights). Times --epochs epochs and one evaluation after a short untimed warm-up, with CUDA
synchronisation, and prints one JSON line {"impl", "epoch_s", "eval_s", "steps", "params", ...}.

  python3 experiments/bench/mqar_torch.py --epochs 1
"""
import argparse
import json
import math
import time

TRAIN = [(64, 4, 100000), (128, 8, 20000), (256, 16, 20000), (256, 32, 20000), (256, 64, 20000)]
EVAL = [(512, 128, 1000), (1024, 256, 1000), (2048, 512, 1000), (3072, 768, 1000), (4096, 1024, 1000)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--eval-batch", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (default: exact fp32)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each slice's examples (quick runs)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as Fn

    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    dev = torch.device("cuda")
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed)
    D, V = args.d_model, args.vocab

    class BaseConv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(D, D, 3, groups=D, padding=2)
            self.proj = nn.Linear(D, D)

        def forward(self, u):  # u: B, T, D
            T = u.shape[1]
            c = self.conv(u.transpose(1, 2))[..., :T].transpose(1, 2)
            return c * self.proj(u) + u

    class MHA(nn.Module):
        def __init__(self):
            super().__init__()
            self.wqkv = nn.Linear(D, 3 * D)
            self.wo = nn.Linear(D, D)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.wqkv(x).view(B, T, 3, 1, D).permute(2, 0, 3, 1, 4)
            o = Fn.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(B, T, D))

    class Block(nn.Module):
        def __init__(self, mixer):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.mixer = mixer
            self.ln2 = nn.LayerNorm(D)

        def forward(self, s):
            mid = s + self.mixer(self.ln1(s))
            return mid + self.ln2(mid)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, D)
            self.blocks = nn.ModuleList([Block(BaseConv()), Block(MHA())])
            self.lnf = nn.LayerNorm(D)

        def forward(self, x, labels):
            s = self.embed(x)
            for b in self.blocks:
                s = b(s)
            out = self.lnf(s)
            m = labels >= 0
            logits = out[m] @ self.embed.weight.t()
            return Fn.cross_entropy(logits, labels[m]), logits.argmax(-1) == labels[m]

    def batch(T, K, B):
        # MQAR layout: k_1 v_1 ... k_K v_K, then (T - 2K)/2 (query, filler) slots; K of them hold the keys.
        keys = torch.randint(1, V // 2, (B, K), generator=g, device=dev)
        vals = torch.randint(V // 2, V, (B, K), generator=g, device=dev)
        x = torch.randint(0, V, (B, T), generator=g, device=dev)
        x[:, 0:2 * K:2] = keys
        x[:, 1:2 * K:2] = vals
        slots = (T - 2 * K) // 2
        pick = torch.rand(B, slots, generator=g, device=dev).argsort(dim=1)[:, :K]
        pos = 2 * K + 2 * pick
        x.scatter_(1, pos, keys)
        labels = torch.full((B, T), -100, dtype=torch.long, device=dev)
        labels.scatter_(1, pos, vals)
        return x, labels

    def init_(model):
        # §4.4 / Zoology: Linear and Embedding weights N(0, 0.02^2), W_o of the mixer 0.02/sqrt(2 n_layers),
        # biases 0, LayerNorm gains 1; the depthwise convs keep PyTorch's Conv1d default.
        for name, p in model.named_parameters():
            if name.endswith("conv.weight") or name.endswith("conv.bias"):
                continue
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * len(model.blocks)) if ".wo." in name else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif "ln" in name and name.endswith("weight"):
                torch.nn.init.ones_(p)
            else:
                torch.nn.init.zeros_(p)

    def make():
        torch.manual_seed(args.seed)
        model = LM().to(dev)
        init_(model)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        return model, opt

    plan = []
    for T, K, n in TRAIN:
        steps = max(1, math.ceil(n * args.scale / args.batch))
        plan += [(T, K)] * steps
    total = len(plan) * args.epochs

    def run_epochs(model, opt, sched, steps_plan):
        model.train()
        for T, K in steps_plan:
            x, y = batch(T, K, args.batch)
            loss, _ = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()

    @torch.no_grad()
    def evaluate(model):
        model.eval()
        acc = []
        for T, K, n in EVAL:
            hits = cnt = 0
            for i in range(0, n, args.eval_batch):
                x, y = batch(T, K, min(args.eval_batch, n - i))
                _, ok = model(x, y)
                hits += int(ok.sum())
                cnt += ok.numel()
            acc.append(hits / cnt)
        return acc

    # Untimed warm-up (kernels, allocator) on a throw-away model.
    model, opt = make()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    run_epochs(model, opt, sched, [(64, 4), (256, 64)] * 3)
    torch.cuda.synchronize()

    model, opt = make()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    order = torch.randperm(len(plan), generator=torch.Generator().manual_seed(args.seed)).tolist()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        run_epochs(model, opt, sched, [plan[i] for i in order])
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    acc = evaluate(model)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"impl": "torch eager, SDPA causal, fp32" + (" tf32" if args.tf32 else ""),
                      "sdpa_backend": "auto (flash / efficient / cuDNN as PyTorch picks)",
                      "epochs": args.epochs, "steps": total, "epoch_s": (t1 - t0) / args.epochs,
                      "eval_s": t2 - t1, "eval_acc": acc, "params": params, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
