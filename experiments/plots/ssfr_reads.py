#!/usr/bin/env python3
"""Which facts the trained SSFR attention misreads, and why (issue 13: the error floor of Fig. 3b at F >= 2048).

Reads one `hebb ssfr train` result (final weights, embeddings, map B, MLP_A and MLP_B) and evaluates the block of
spec hebbian.md §6.2 at the query position in float64 for EVERY fact under --contexts random junk contexts each
(the junk draws of §6.1: p, s ~ U{J_min..J_max}, junk tokens uniform over V_J), instead of the training's
with-replacement evaluation batches. Prints, for the evaluation map (B, MLP_B; --map a for the training map):

  * the clean read: the MLP alone on the key's own embedding (the attention reading only the key), per fact;
  * the end-to-end error rate over all facts x contexts, the facts with at least one error and their error rates;
  * how junk-like the keys are: each key's summed cosine with the junk and Q rows, in standard deviations (z);
  * the attention's view of each fact. With W_v = W_o = I and the query token fixed, the score of token t is
    s_t = (W_q h_Q) . (W_k h_t) / sqrt(d) = sqrt(d) c . x_t with c = W_k^T W_q x_Q: a linear classifier of the
    token's embedding. The key's gap g_k = s_k - max over the junk rows and Q of s is what softmax turns into
    the key's weight; a misread fact is one whose gap is small (the junk takes weight) and whose MLP margin cannot
    absorb the mixture;
  * with scipy, a c that separates every key from the junk and Q by a wide gap (a linear program: maximise
    min_k c.x_k - max_j c.x_j over |c|_inf <= 1, reported as gap / |c|_2, so a lower bound on the widest gap any
    attention can reach on these embeddings) beside the trained c's: whether the §6.2 block can read every key
    at all, and how far training got.

With -o, draws the fact gaps (normalised, sorted) with the misread facts marked and each fact's error rate against
its gap. Usage: ssfr_reads.py RESULT.h5 [--contexts 32] [--map b|a] [--seed 1] [-o reads.png]"""
import argparse
import math
import sys
from statistics import NormalDist

import numpy as np

import memcap_plot as mp

KIND = "hebb ssfr train"


def load(path, which):
    """Summary values, final weights, embeddings, the chosen map's MLP (None: identity) and the map itself."""
    need = ("summary", "runs/train/weights", "runs/train/embeddings")
    with mp.open_result(path, need, KIND) as f:
        s = f["summary"]
        one = lambda k: (lambda v: mp.text(v) if isinstance(v, bytes) else v)(s[k][()][0])
        cfg = {k: one(k) for k in ("facts", "junk", "junk_min", "junk_vocab", "best_acc", "attn_residual")}
        w = {k: f["runs/train/weights"][k][()] for k in f["runs/train/weights"]}
        E = f["runs/train/embeddings"][()]
        has_b = "eval_map" in s and one("eval_map") == "B" and "runs/train/map_b" in f
        if which == "auto":
            which = "b" if has_b else "a"
        if which == "b" and not has_b:
            sys.exit(f"{path}: trained without an evaluation map B (e.g. --mlp identity); use --map a")
        grp = f["mlp_b" if which == "b" else "mlp"] if "mlp" in f else None  # no /mlp: the identity MLP
        F = int(cfg["facts"])
        fmap = f["runs/train/map_b"][()] if which == "b" else f["facts/map"][()] if "facts/map" in f else np.arange(F)
        mlp = None
        if grp is not None:
            mlp = {k: grp[k][()] for k in ("A", "G", "B", "bias_up", "bias_gate", "bias_out") if k in grp}
            mlp["gate"] = mp.text(grp.attrs["gate"])
    return which, cfg, w, E, mlp, np.asarray(fmap, dtype=np.int64)


def mlp_forward(p, u):
    """y = B((A u + b_up) * gate(G u + b_gate)) + b_out for the rows of u (the frozen MLP of §6.2); None: y = u."""
    if p is None:
        return u
    up, gt = u @ p["A"].T, u @ p["G"].T
    if "bias_up" in p:
        up = up + p["bias_up"]
    if "bias_gate" in p:
        gt = gt + p["bias_gate"]
    if p["gate"] == "relu":
        gt = np.maximum(gt, 0.0)
    elif p["gate"] == "silu":
        gt = gt / (1.0 + np.exp(-gt))
    elif p["gate"] != "identity":
        sys.exit(f"unknown MLP gate '{p['gate']}'")
    y = (up * gt) @ p["B"].T
    return y + p["bias_out"] if "bias_out" in p else y


def unit(x):
    return x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-30)


def decode(E, mlp, u, targets):
    """Correct (argmax over the full vocabulary == target) and the logit margin target - best other."""
    logits = unit(mlp_forward(mlp, u)) @ E.T
    tgt = logits[np.arange(len(targets)), targets]
    logits[np.arange(len(targets)), targets] = -np.inf
    return tgt > logits.max(axis=1), tgt - logits.max(axis=1)


def max_gap(X, O):
    """The c maximising min_k c.x_k - max_j c.o_j over |c|_inf <= 1 (scipy's HiGHS), as (gap / |c|_2, c), or
    None without scipy. gap / |c|_2 is a lower bound of the widest gap over unit c (the L2 problem is a QP)."""
    try:
        from scipy.optimize import linprog
    except ImportError:
        return None
    F, d = X.shape
    A = np.zeros((F + len(O), d + 2))  # variables c (d), b, t: maximise t, c.x_k - b >= t, b - c.o_j >= t
    A[:F, :d], A[:F, d], A[:F, d + 1] = -X, 1.0, 1.0
    A[F:, :d], A[F:, d], A[F:, d + 1] = O, -1.0, 1.0
    r = linprog(np.r_[np.zeros(d + 1), -1.0], A_ub=A, b_ub=np.zeros(len(A)),
                bounds=[(-1, 1)] * d + [(None, None), (None, 10)], method="highs")
    if r.status != 0:
        return None
    c = r.x[:d]
    return ((X @ c).min() - (O @ c).max()) / np.linalg.norm(c), c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file of `hebb ssfr train`")
    ap.add_argument("--contexts", type=int, default=32, help="random junk contexts per fact (default 32)")
    ap.add_argument("--map", choices=("auto", "a", "b"), default="auto",
                    help="b: evaluation map and MLP_B; a: training map and MLP_A; auto (default): b where present")
    ap.add_argument("--seed", type=int, default=1, help="seed of the junk contexts (numpy)")
    ap.add_argument("--list", type=int, default=12, help="misread facts to list (worst first)")
    ap.add_argument("-o", "--out", help="PNG with the gaps and error rates")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args()
    if args.contexts < 1:
        sys.exit("--contexts must be >= 1")
    which, cfg, w, E, mlp, fmap = load(args.results, args.map)
    F, VJ, jmax, jmin = int(cfg["facts"]), int(cfg["junk_vocab"]), int(cfg["junk"]), int(cfg["junk_min"])
    V, d = E.shape
    if V != F + VJ + 1 or len(fmap) != F:
        sys.exit(f"{args.results}: {V} embedding rows for F = {F}, V_J = {VJ} (expected F + V_J + 1)")
    Q = F + VJ
    I = np.eye(d)
    Wq, Wk = w["W_q"], w["W_k"]
    Wv, Wo = w.get("W_v", I), w.get("W_o", I)
    residual = int(cfg["attn_residual"]) != 0
    H = E / np.sqrt((E ** 2).mean(axis=1, keepdims=True) + 1e-30)      # RMSNorm, no gain
    scores = (H @ Wk.T) @ (Wq @ H[Q]) / math.sqrt(d)                    # s_t for every vocabulary row
    Vrows = H @ Wv.T
    X = unit(E)
    others = np.r_[np.arange(F, F + VJ), Q]
    gap = scores[:F] - scores[others].max()
    scale = np.linalg.norm(Wk.T @ Wq @ X[Q]) * math.sqrt(d)             # s_t = scale * (unit c) . x_t

    clean = Vrows[:F] @ Wo.T + (E[Q] if residual else 0.0)             # the attention reading only the key
    clean_ok, clean_margin = decode(E, mlp, unit(clean), fmap)

    rng = np.random.default_rng(args.seed)
    errors = np.zeros(F, dtype=np.int64)
    alpha_key = np.zeros(F)
    L = 2 * jmax + 2                                                    # positions up to and including Q
    for k0 in range(0, F, max(1, 4096 // args.contexts)):
        keys = np.repeat(np.arange(k0, min(F, k0 + max(1, 4096 // args.contexts))), args.contexts)
        n = len(keys)
        p = rng.integers(jmin, jmax + 1, n)
        s = rng.integers(jmin, jmax + 1, n)
        tok = F + rng.integers(0, max(VJ, 1), (n, L))
        pos = np.arange(L)
        q = p + s + 1
        tok = np.where(pos == p[:, None], keys[:, None], tok)
        tok = np.where(pos == q[:, None], Q, tok)
        live = pos <= q[:, None]
        sc = np.where(live, scores[tok], -np.inf)
        att = np.exp(sc - sc.max(axis=1, keepdims=True))
        att /= att.sum(axis=1, keepdims=True)
        a = np.einsum("nl,nld->nd", att, Vrows[tok]) @ Wo.T
        z = a + E[Q] if residual else a
        ok, _ = decode(E, mlp, unit(z), fmap[keys])
        np.add.at(errors, keys, ~ok)
        np.add.at(alpha_key, keys, att[np.arange(n), p])
    alpha_key /= args.contexts
    rate = errors / args.contexts

    best = float(cfg["best_acc"])
    print(f"{args.results}: d {d}, F {F}, J {jmin}..{jmax}, V_J {VJ}, map {which.upper()}, "
          + (f"MLP gate {mlp['gate']}, width {mlp['A'].shape[0]}" if mlp else "identity MLP")
          + f", residual {'on' if residual else 'off'}")
    print(f"clean read (MLP alone on the key's embedding): {int(clean_ok.sum())}/{F} correct, "
          f"min logit margin {clean_margin.min():.4g}")
    tot = errors.sum() / (F * args.contexts)
    print(f"end to end: {errors.sum()} wrong of {F * args.contexts} reads ({args.contexts} contexts per fact) = "
          f"{tot:.3g} per query (1 - best_acc of the training: {1 - best:.3g}); "
          f"{int((errors > 0).sum())} facts misread at least once")
    rank = np.argsort(np.argsort(gap))                                 # 0 = smallest gap
    print(f"attention: score scale |c| sqrt(d) = {scale:.3f}; key gaps g_k / scale: min {gap.min() / scale:.4f}, "
          f"median {np.median(gap) / scale:.4f}; mean key weight {alpha_key.mean():.5f} (min {alpha_key.min():.4f})")
    # a key that looks like the junk: its summed cosine with the V_J + 1 non-key rows, in standard deviations of
    # that sum for independent uniform directions (sqrt((V_J + 1) / d))
    zsum = (X[:F] @ X[others].T).sum(axis=1) / math.sqrt(len(others) / d)
    zmed = NormalDist().inv_cdf(0.5 ** (1.0 / F))                       # median of the largest of F normals
    print(f"keys like the junk: largest summed cosine with the junk and Q rows z = {zsum.max():.2f} "
          f"(fact {int(zsum.argmax())}; median of the largest of {F} independent normals {zmed:.2f})")
    bad = np.argsort(-rate)[: min(args.list, int((errors > 0).sum()))]
    if len(bad):
        print("  fact  error-rate  gap/scale  gap-rank  key-weight  clean-margin  junk-z")
        for k in bad:
            print(f"  {k:5d}  {rate[k]:10.3f}  {gap[k] / scale:9.4f}  {rank[k]:8d}  {alpha_key[k]:10.4f}  "
                  f"{clean_margin[k]:12.4g}  {zsum[k]:6.2f}")
    best_gap = max_gap(X[:F], X[others])
    if best_gap is None:
        print("gap reached by the LP's c: scipy not available (or the LP failed)")
    else:
        print(f"normalised min gap an LP's c reaches on these embeddings: {best_gap[0]:.4f} "
              f"(trained c: {gap.min() / scale:.4f})")
    if args.out:
        plt = mp.pyplot()
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        order = np.argsort(gap)
        a1.plot(np.arange(F), gap[order] / scale, lw=1, label="trained c")
        mis = np.nonzero(errors[order] > 0)[0]
        a1.plot(mis, gap[order][mis] / scale, "rx", ms=5, label="misread facts")
        if best_gap is not None:
            a1.axhline(best_gap[0], color="k", ls=":", lw=0.8, label="min gap of the LP's c")
        a1.set_xlabel("facts, sorted by gap")
        a1.set_ylabel("key gap $g_k$ / scale")
        a1.legend(fontsize=7)
        a2.scatter(gap / scale, rate, s=4)
        a2.set_xlabel("key gap $g_k$ / scale")
        a2.set_ylabel("error rate over contexts")
        a2.grid(True, alpha=0.3)
        fig.suptitle(f"SSFR reads at F = {F} (map {which.upper()})", fontsize=10)
        mp.save(fig, args.out, args.dpi)


if __name__ == "__main__":
    main()
