#!/usr/bin/env python3
"""PyTorch baseline for `hebb ssfr train` (issue 13, acceptance 3): the fact-adaptive SSFR training of spec
hebbian.md §4.6/§6.2 written the straightforward way: every position of every sequence (full causal
attention over T, the frozen MLP, the norms and the tied lm_head at all positions, labels -100 except at the
query position), autograd, fp32 with TF32 off. Same frozen tables as the memcap run it is compared with:
the embeddings, maps A/B and MLP_A/MLP_B come from an .npz exported from `hebb ssfr train --out` (see
ssfr_bench.sh); batches are drawn with torch's generator (same distribution, not the same tokens).
W_q, W_k trained (W_v = W_o = I), no residual, AdamW (lr 2e-4 constant, betas (0.9, 0.999), eps 1e-8,
weight decay 0.1), init N(0, 0.02^2); after the update of every step whose index is a multiple of 100, train
accuracy (MLP_A, map A) and eval accuracy (MLP_B, map B) over --eval-batches fresh batches; best_* are
running maxima. Times the whole job (steps + evaluations) with CUDA synchronisation after a short warm-up
run, and prints one JSON line {"impl", "time_s", "steps", "evaluations", "best_acc", "best_train_acc",
"final_loss", ...}.

  python3 experiments/bench/ssfr_torch.py --data ssfr_tables.npz --steps 4000 --batch 1280
"""
import argparse
import json
import math
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help=".npz with E, map_a, map_b, mlp_a_*, mlp_b_*, facts, junk, junk_vocab")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=1280)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=0, help="0 = 10 max(1, floor(F/1280))")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps of a throw-away model first")
    args = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as Fn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    z = np.load(args.data)
    E = torch.tensor(z["E"], dtype=torch.float32, device=dev)  # |V| x d: facts, junk, query token
    F, J, VJ = int(z["facts"]), int(z["junk"]), int(z["junk_vocab"])
    V, d = E.shape
    assert V == F + VJ + 1, f"embedding rows {V} != F + V_J + 1 = {F + VJ + 1}"
    T = 2 * J + 3
    Q = F + VJ
    maps = {k: torch.tensor(z[k], dtype=torch.long, device=dev) for k in ("map_a", "map_b")}

    def mlp(prefix):
        t = lambda k: torch.tensor(z[prefix + k], dtype=torch.float32, device=dev) if prefix + k in z else None
        return {"A": t("A"), "G": t("G"), "B": t("B"), "bu": t("bias_up"), "bg": t("bias_gate"),
                "bo": t("bias_out"), "gate": str(z[prefix + "gate"])}

    mlps = {"a": mlp("mlp_a_"), "b": mlp("mlp_b_")}

    def mlp_forward(p, u):  # y = B((A u + b_up) * gate(G u + b_gate)) + b_out, frozen
        up, gt = u @ p["A"].T, u @ p["G"].T
        if p["bu"] is not None:
            up = up + p["bu"]
        if p["bg"] is not None:
            gt = gt + p["bg"]
        if p["gate"] == "relu":
            gt = torch.relu(gt)
        elif p["gate"] == "silu":
            gt = Fn.silu(gt)
        y = (up * gt) @ p["B"].T
        return y + p["bo"] if p["bo"] is not None else y

    gen = torch.Generator(device=dev).manual_seed(args.seed)
    pos = torch.arange(T, device=dev)

    def batch(B, mp):
        """Tokens (B x T, -100 = padding) and labels (-100 except f(key) at Q), spec §6.1."""
        p = torch.randint(J, J + 1, (B, 1), generator=gen, device=dev)
        s = torch.randint(J, J + 1, (B, 1), generator=gen, device=dev)
        key = torch.randint(0, F, (B, 1), generator=gen, device=dev)
        tok = F + torch.randint(0, max(VJ, 1), (B, T), generator=gen, device=dev)
        q = p + s + 1
        tok = torch.where(pos == p, key, tok)
        tok = torch.where(pos == q, torch.full_like(tok, Q), tok)
        tok = torch.where(pos == q + 1, mp[key], tok)
        tok = torch.where(pos > q + 1, torch.full_like(tok, -100), tok)
        lab = torch.where(pos == q, mp[key], torch.full_like(tok, -100))
        return tok, lab

    scale = 1.0 / math.sqrt(d)
    causal = torch.ones(T, T, device=dev, dtype=torch.bool).tril()

    def forward(Wq, Wk, tok, p):
        x = E[tok.clamp_min(0)] * (tok >= 0).unsqueeze(-1)                 # B x T x d, padding = 0
        h = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-30)        # RMSNorm, no gain
        q, k = h @ Wq.T, h @ Wk.T                                          # W_v = W_o = I
        sc = (q @ k.transpose(1, 2)) * scale
        att = torch.softmax(sc.masked_fill(~causal, float("-inf")), dim=-1)
        a = att @ h                                                        # no residual
        u = a / (a.norm(dim=-1, keepdim=True) + 1e-30)
        y = mlp_forward(p, u)
        o = y / (y.norm(dim=-1, keepdim=True) + 1e-30)
        return o @ E.T                                                     # tied lm_head, B x T x |V|

    n_eval = args.eval_batches or 10 * max(1, F // 1280)

    @torch.no_grad()
    def evaluate(Wq, Wk, which):
        hits, n = 0, 0
        for _ in range(n_eval):
            tok, lab = batch(args.batch, maps["map_" + which])
            logits = forward(Wq, Wk, tok, mlps[which])
            m = lab != -100
            hits += (logits.argmax(-1)[m] == lab[m]).sum().item()
            n += int(m.sum().item())
        return hits / n

    def train(steps, record):
        Wq = torch.nn.Parameter(0.02 * torch.randn(d, d, generator=gen, device=dev))
        Wk = torch.nn.Parameter(0.02 * torch.randn(d, d, generator=gen, device=dev))
        opt = torch.optim.AdamW([Wq, Wk], lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=args.weight_decay)
        best, best_train, loss_v, evals = 0.0, 0.0, float("nan"), 0
        for t in range(steps):
            tok, lab = batch(args.batch, maps["map_a"])
            logits = forward(Wq, Wk, tok, mlps["a"])
            loss = Fn.cross_entropy(logits.reshape(-1, V), lab.reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if record and t % args.eval_every == 0:
                best_train = max(best_train, evaluate(Wq, Wk, "a"))
                best = max(best, evaluate(Wq, Wk, "b"))
                evals += 1
        loss_v = float(loss.item())
        return best, best_train, loss_v, evals

    train(args.warmup, False)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    best, best_train, loss_v, evals = train(args.steps, True)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    print(json.dumps({"impl": "torch-fullseq-autograd-fp32", "device": str(dev), "time_s": secs,
                      "steps": args.steps, "evaluations": evals, "eval_batches": n_eval, "batch": args.batch,
                      "best_acc": best, "best_train_acc": best_train, "final_loss": loss_v, "facts": F, "dim": d,
                      "width": int(mlps["a"]["A"].shape[0]), "junk": J, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
