#!/usr/bin/env python3
"""PyTorch baseline for `hebb edit base` / `hebb edit run` (issue 15, speed item): the one-layer fact-editing
language model of spec hebbian.md §6.4 written the straightforward way (nn.Module layers, autograd, fp32 with
TF32 off unless --tf32, F.scaled_dot_product_attention with is_causal=True, full-vocabulary logits and
F.cross_entropy with ignore_index=-100), mirroring memcap's CPU reference src/edit/edit_model.{hpp,cpp}:

    h = RMSNorm_g1(x)                                   eps 1e-30, learned gain
    q = RoPE(W_q2 GELU(W_q1 LN(h) + b_q1) + b_q2)       LayerNorm eps 1e-5 (affine), exact-erf GELU, k likewise
    a = causal softmax(q k^T / sqrt(d)) h               one head of width d, W_v = W_o = I
    x~ = rmsnorm(a) / sqrt(d)                           eps 1e-30, unit L2 norm
    f = D((U x~ + b_U) * silu(G x~ + b_G)) + b_D        frozen fact expert (spec §2.7, h = 512, biases)
    alpha = sigmoid(w2^T GELU(W1 a + b1) + b2)          router on the pre-norm a
    o = RMSNorm_gf(alpha f + (1 - alpha) a U V)         low-rank path U [d, 8], V [8, d]
    loss = CE(E o) over the labelled positions          tied, frozen embeddings E over the full vocabulary

RoPE: HF Llama convention on the full head, base 10000^(d/1024) (= 10 at d = 256), angles in float64.
Init as EditModel::init: Linear weights N(0, 0.02^2) (the router's d -> 1 gate too), biases 0, LayerNorm (1, 0),
RMSNorm gains 1, U, V ~ N(0, 1), E ~ U(-1/sqrt(d), 1/sqrt(d)); the frozen fact expert is RANDOM-INITIALISED
(PyTorch-Linear bounds U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weights and biases), not the trained GD-MSE expert:
the timing does not depend on its values, but the printed accuracies are not the base model's.

Data: the same facts, templates, vocabulary and sequences as memcap (src/nn/edit_data.cpp, re-implemented
here in pure Python): the first --facts rows of data/edit/book_authors.csv, the first --templates templates of
data/edit/author_templates.txt, template text split into words/punctuation, every " {book}" / " {author}"
string one atomic token (sorted bytewise after the template tokens), sequences s = fact * K + template,
input_ids = toks[:-1], labels = toks[1:] (all positions trained, as `hebb edit base`), right-padded with -100
(zero embedding). Vocabulary 32,815 at 16,384 facts x 16 templates; 529 at 256 x 4.

Timed (CUDA events, after an untimed warm-up on a throw-away model), in one process:
  * epoch_s: one training epoch: AdamW (lr 2e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.1 on the >= 2-D
    trainables only, as memcap), batch 32 sequences of a fresh torch.randperm (shuffled), all S = F * K
    sequences (8,192 steps at paper scale, the last batch smaller when 32 does not divide S); the corpus lives
    on the device, batches are gathered there; no host synchronisation per step.
  * eval_s: one editor evaluation: every prompt (or the first --eval-prompts) through the model, argmax over
    the full vocabulary at the last (author) position (efficacy-style value accuracy) and the non-fact CE over
    the other labelled positions, as memcap's evaluate_prompts. --eval-batch 1 (default): one prompt at a time,
    unpadded, as the reference evaluates; --eval-batch N: N right-padded prompts per forward (memcap's GPU
    path uses 1,024). Results stay on the device until the end (no synchronisation per prompt).

Prints one JSON line {"impl", "epoch_s", "eval_s", "steps", "params", ..., "torch"}. The pure-Python data
functions (split_words, load_*, build_corpus, pack_sequences) import without torch; `--data-only` prints
the corpus statistics and exits without importing torch.

  python3 experiments/bench/edit_torch.py                                   # paper scale, one prompt at a time
  python3 experiments/bench/edit_torch.py --eval-batch 1024                 # batched evaluation
  python3 experiments/bench/edit_torch.py --device cpu --facts 256 --templates 4 --dim 48 --expert-hidden 32
"""
import argparse
import csv
import json
import math
import os
import sys
import time

IGNORE = -100
BOOK_SLOT = -1
AUTHOR_SLOT = -2
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "edit")


# ---------------------------------------------------------------------------------------------------------
# Data (pure Python; the rules of src/nn/edit_data.cpp)
# ---------------------------------------------------------------------------------------------------------

def _is_word_char(c):
    # ASCII letters, digits, apostrophe, and every non-ASCII character (the C++ code: bytes >= 0x80).
    o = ord(c)
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "'" or o >= 0x80


def split_words(text):
    """Tokens: an optional single leading space, then a maximal word run or one other character; a space not
    followed by a word or punctuation mark (i.e. followed by a space or the end) is a token " " of its own."""
    out = []
    i, n = 0, len(text)
    while i < n:
        start = i
        if text[i] == " ":
            if i + 1 < n and text[i + 1] != " ":
                i += 1
            else:
                out.append(" ")
                i += 1
                continue
        if _is_word_char(text[i]):
            while i < n and _is_word_char(text[i]):
                i += 1
        else:
            i += 1
        out.append(text[start:i])
    return out


def template_problem(t):
    """Empty when the template is well formed (load_author_templates' rules), otherwise what is wrong."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in t):
        return "it holds a control character"
    if t.count("{book}") != 1:
        return 'it must hold "{book}" exactly once'
    if t.count("{author}") != 1:
        return 'it must hold "{author}" exactly once'
    if t.count("{") != 2 or t.count("}") != 2:
        return "it holds a '{' or '}' other than the placeholders"
    pb, pa = t.find("{book}"), t.find("{author}")
    if pa < pb:
        return '"{book}" must come before "{author}"'
    if pa + len("{author}") != len(t):
        return 'it must end with "{author}"'
    if pb == 0 or t[pb - 1] != " " or t[pa - 1] != " ":
        return '"{book}" and "{author}" must each follow a space'
    return ""


def load_author_facts(path, count):
    """The first `count` (book, author) rows of a CSV whose header names `book` and `author`."""
    if count < 1:
        raise ValueError(f"the number of facts must be >= 1 (got {count})")
    facts, seen_b, seen_a = [], set(), set()
    with open(path, newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
        rows = csv.reader(fh)
        header = None
        for row in rows:
            if not row:
                continue  # blank line
            if header is None:
                header = row
                if "book" not in header or "author" not in header:
                    raise ValueError(f"{path}: the header has no 'book' and 'author' columns")
                cb, ca = header.index("book"), header.index("author")
                continue
            if len(facts) >= count:
                break
            if len(row) != len(header):
                raise ValueError(f"{path}: a row with {len(row)} fields where the header has {len(header)}")
            book, author = row[cb], row[ca]
            if not book or not author:
                raise ValueError(f"{path}: empty book or author")
            if book in seen_b or author in seen_a:
                raise ValueError(f"{path}: book {book!r} or author {author!r} repeated")
            seen_b.add(book)
            seen_a.add(author)
            facts.append((book, author))
    if len(facts) != count:
        raise ValueError(f"{path} holds {len(facts)} facts, fewer than the {count} asked for")
    return facts


def load_author_templates(path, count):
    if count < 1:
        raise ValueError(f"the number of templates must be >= 1 (got {count})")
    out = []
    with open(path, "rb") as fh:
        data = fh.read().decode("utf-8", errors="surrogateescape")
    for lineno, t in enumerate(data.split("\n"), 1):
        if len(out) >= count:
            break
        if t.endswith("\r"):
            t = t[:-1]
        if not t:
            continue
        why = template_problem(t)
        if why:
            raise ValueError(f"{path}: line {lineno}: template {t!r} is malformed: {why}")
        out.append(t)
    if len(out) != count:
        raise ValueError(f"{path} holds {len(out)} templates, fewer than the {count} asked for")
    return out


def _utf8(s):
    return s.encode("utf-8", errors="surrogateescape")


def build_corpus(facts, templates):
    """Vocabulary (template words in order of first appearance, then the sorted atomic strings), per-template
    token lists with BOOK_SLOT / AUTHOR_SLOT, and per-fact book / author token ids (build_edit_corpus)."""
    vocab, index = [], {}

    def add(tok):
        if tok not in index:
            index[tok] = len(vocab)
            vocab.append(tok)
        return index[tok]

    template_tokens = []
    for k, t in enumerate(templates):
        why = template_problem(t)
        if why:
            raise ValueError(f"template {k} {t!r} is malformed: {why}")
        pb, pa = t.find("{book}"), t.find("{author}")
        ids = [add(w) for w in split_words(t[:pb - 1])]
        ids.append(BOOK_SLOT)
        mid = pb + len("{book}")
        ids += [add(w) for w in split_words(t[mid:pa - 1])]
        ids.append(AUTHOR_SLOT)
        template_tokens.append(ids)
    template_vocab = len(vocab)
    atomic = sorted({" " + b for b, _ in facts} | {" " + a for _, a in facts}, key=_utf8)
    for a in atomic:
        add(a)
    book_token = [index[" " + b] for b, _ in facts]
    author_token = [index[" " + a] for _, a in facts]
    if len(set(book_token)) != len(facts) or len(set(author_token)) != len(facts):
        raise ValueError("two facts share a book token or an author token")
    return {"vocab": vocab, "index": index, "template_vocab": template_vocab, "template_tokens": template_tokens,
            "book_token": book_token, "author_token": author_token, "facts": facts, "templates": templates}


def sentence(corpus, fact, tmpl):
    b, a = corpus["book_token"][fact], corpus["author_token"][fact]
    return [b if t == BOOK_SLOT else a if t == AUTHOR_SLOT else t for t in corpus["template_tokens"][tmpl]]


def make_example(toks, mode="all"):
    ids, labels = toks[:-1], toks[1:]
    last = len(labels) - 1
    if mode == "last":
        labels = [IGNORE] * last + [labels[last]]
    elif mode == "all_but_last":
        labels = labels[:last] + [IGNORE]
    return ids, labels


def pack_sequences(corpus, mode="all"):
    """All facts x templates as rows s = fact * K + template of width T (right-padded with -100); length[s] =
    unpadded input length (the author is predicted at position length - 1). Flat row-major lists."""
    F, K = len(corpus["facts"]), len(corpus["templates"])
    T = max(len(t) - 1 for t in corpus["template_tokens"])
    input_ids, labels, length = [], [], []
    for f in range(F):
        for k in range(K):
            ids, lab = make_example(sentence(corpus, f, k), mode)
            pad = [IGNORE] * (T - len(ids))
            input_ids += ids + pad
            labels += lab + pad
            length.append(len(ids))
    return {"S": F * K, "T": T, "input_ids": input_ids, "labels": labels, "length": length}


def trainable_count(d, H, R):
    """edit_trainable_count: d + 2(2d + 2dH + H + d) + (d^2 + 2d + 1) + 2dR + d (334,849 at d = H = 256, R = 8)."""
    return d + 2 * (2 * d + 2 * d * H + H + d) + (d * d + 2 * d + 1) + 2 * d * R + d


# ---------------------------------------------------------------------------------------------------------
# Model and timing (torch imported here only)
# ---------------------------------------------------------------------------------------------------------

def build_model(torch, d, V, H, R, hf, T_max, dev, attn="sdpa", rms_eps=1e-30, ln_eps=1e-5):
    nn = torch.nn
    Fn = torch.nn.functional

    def rmsnorm(x, g, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    class QKProj(nn.Module):  # RoPE is applied by the model
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(d, eps=ln_eps)
            self.w1 = nn.Linear(d, H)
            self.act = nn.GELU()  # exact erf
            self.w2 = nn.Linear(H, d)

        def forward(self, h):
            return self.w2(self.act(self.w1(self.ln(h))))

    class FactExpert(nn.Module):  # frozen SwiGLU-style gated MLP with biases (§2.7)
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(d, hf)
            self.gate = nn.Linear(d, hf)
            self.down = nn.Linear(hf, d)

        def forward(self, x):
            return self.down(self.up(x) * Fn.silu(self.gate(x)))

    class Router(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(d, d)
            self.act = nn.GELU()
            self.w2 = nn.Linear(d, 1)

        def forward(self, a):
            return torch.sigmoid(self.w2(self.act(self.w1(a))))

    class EditLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Parameter(torch.empty(V, d), requires_grad=False)  # tied, frozen
            self.rms1 = nn.Parameter(torch.ones(d))
            self.q = QKProj()
            self.k = QKProj()
            self.router = Router()
            self.U = nn.Parameter(torch.empty(d, R))
            self.V = nn.Parameter(torch.empty(R, d))
            self.rmsf = nn.Parameter(torch.ones(d))
            self.fact = FactExpert()
            self.fact.requires_grad_(False)
            base = 10000.0 ** (d / 1024.0)  # nn::rope_base_for
            inv = torch.tensor([base ** (-2.0 * j / d) for j in range(d // 2)], dtype=torch.float64)
            ang = torch.arange(T_max, dtype=torch.float64)[:, None] * inv[None, :]
            ang = torch.cat([ang, ang], dim=-1)
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

        def rope(self, x):
            T = x.shape[1]
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return x * self.cos[:T] + torch.cat([-x2, x1], dim=-1) * self.sin[:T]

        def forward(self, tok):  # tok [B, T], -100 = padding (zero embedding) -> logits [B, T, V]
            x = self.E[tok.clamp_min(0)] * (tok >= 0).unsqueeze(-1).to(self.E.dtype)
            h = rmsnorm(x, self.rms1, rms_eps)
            q = self.rope(self.q(h))
            k = self.rope(self.k(h))
            if attn == "sdpa":  # scale 1/sqrt(d), v = h, W_o = I
                a = Fn.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), h.unsqueeze(1),
                                                    is_causal=True).squeeze(1)
            else:  # explicit causal softmax (--attn math)
                T = tok.shape[1]
                sc = (q @ k.transpose(1, 2)) / math.sqrt(d)
                mask = torch.ones(T, T, dtype=torch.bool, device=sc.device).tril()
                a = torch.softmax(sc.masked_fill(~mask, float("-inf")), dim=-1) @ h
            xt = rmsnorm(a, 1.0 / math.sqrt(d), rms_eps)
            f = self.fact(xt)
            alpha = self.router(a)
            ffn = alpha * f + (1 - alpha) * ((a @ self.U) @ self.V)
            o = rmsnorm(ffn, self.rmsf, rms_eps)
            return o @ self.E.t()

    model = EditLM()
    with torch.no_grad():  # EditModel::init
        for name, p in model.named_parameters():
            if name.startswith("fact.") or name == "E":
                continue
            if name in ("U", "V"):
                p.normal_(0.0, 1.0)
            elif p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif name in ("rms1", "rmsf") or name.endswith("ln.weight"):
                p.fill_(1.0)
            else:
                p.zero_()
        model.E.uniform_(-1.0 / math.sqrt(d), 1.0 / math.sqrt(d))
        for lin, fan_in in ((model.fact.up, d), (model.fact.gate, d), (model.fact.down, hf)):
            lin.weight.uniform_(-1.0 / math.sqrt(fan_in), 1.0 / math.sqrt(fan_in))
            lin.bias.uniform_(-1.0 / math.sqrt(fan_in), 1.0 / math.sqrt(fan_in))
    return model.to(dev)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=16384)
    ap.add_argument("--templates", type=int, default=16)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--qk-hidden", type=int, default=0, help="0 = --dim")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--expert-hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-batch", type=int, default=1, help="prompts per forward (1 = one at a time, unpadded)")
    ap.add_argument("--eval-prompts", type=int, default=0, help="evaluate the first N prompts only (0 = all)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps (and prompts) of a throw-away model first")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (default: exact fp32)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True) (default: PyTorch's default AdamW)")
    ap.add_argument("--attn", choices=["sdpa", "math"], default="sdpa",
                    help="F.scaled_dot_product_attention(is_causal=True) or an explicit masked softmax")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--seed", type=int, default=10042)
    ap.add_argument("--data", default=DEFAULT_DATA, help="folder with book_authors.csv and author_templates.txt")
    ap.add_argument("--data-only", action="store_true", help="print the corpus statistics as JSON; no torch")
    args = ap.parse_args()
    for name in ("facts", "templates", "dim", "rank", "expert_hidden", "batch", "eval_batch"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.dim % 2:
        ap.error("--dim must be even (RoPE rotates pairs)")
    if args.qk_hidden < 0 or args.eval_prompts < 0 or args.warmup < 0:
        ap.error("--qk-hidden, --eval-prompts and --warmup must be >= 0")

    t_data = time.perf_counter()
    try:
        facts = load_author_facts(os.path.join(args.data, "book_authors.csv"), args.facts)
        templates = load_author_templates(os.path.join(args.data, "author_templates.txt"), args.templates)
        corpus = build_corpus(facts, templates)
    except (OSError, ValueError) as e:
        print(f"edit_torch.py: {e}", file=sys.stderr)
        sys.exit(2)
    seqs = pack_sequences(corpus, "all")
    data_s = time.perf_counter() - t_data
    S, T, Vn = seqs["S"], seqs["T"], len(corpus["vocab"])
    d, H, R, hf = args.dim, args.qk_hidden or args.dim, args.rank, args.expert_hidden
    if args.data_only:
        print(json.dumps({"facts": len(facts), "templates": len(templates), "vocab": Vn,
                          "template_vocab": corpus["template_vocab"], "sequences": S, "seq_len": T,
                          "tokens": sum(seqs["length"]) + S, "params": trainable_count(d, H, R)}))
        return

    try:
        import torch
    except ImportError:
        print("edit_torch.py: PyTorch is not installed (pip install torch)", file=sys.stderr)
        sys.exit(2)
    Fn = torch.nn.functional
    if args.device == "cuda" and not torch.cuda.is_available():
        print("edit_torch.py: --device cuda but no usable CUDA device (torch.cuda.is_available() is False); "
              "use --device cpu with a tiny configuration (e.g. --facts 256 --templates 4 --dim 48 "
              "--expert-hidden 32)", file=sys.stderr)
        sys.exit(2)
    cuda = args.device == "cuda"
    attn = args.attn if hasattr(Fn, "scaled_dot_product_attention") else "math"  # SDPA needs torch >= 2.0
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32

    ids = torch.tensor(seqs["input_ids"], dtype=torch.long, device=dev).view(S, T)
    labels = torch.tensor(seqs["labels"], dtype=torch.long, device=dev).view(S, T)
    length_host = seqs["length"]
    length = torch.tensor(length_host, dtype=torch.long, device=dev)
    n_eval = min(S, args.eval_prompts) if args.eval_prompts else S
    B = min(args.batch, S)
    steps = (S + B - 1) // B

    def make():
        torch.manual_seed(args.seed)
        model = build_model(torch, d, Vn, H, R, hf, T, dev, attn)
        dec = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        nodec = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        kw = {"fused": True} if args.fused else {}
        opt = torch.optim.AdamW([{"params": dec, "weight_decay": args.weight_decay},
                                 {"params": nodec, "weight_decay": 0.0}],
                                lr=args.lr, betas=(0.9, 0.999), eps=1e-8, **kw)
        return model, opt

    def train_epoch(model, opt, n_steps, gen):
        model.train()
        perm = torch.randperm(S, generator=gen).to(dev)
        loss_sum = torch.zeros((), device=dev)
        for i in range(n_steps):
            idx = perm[i * B:(i + 1) * B]
            tok, lab = ids[idx], labels[idx]
            logits = model(tok)
            loss = Fn.cross_entropy(logits.reshape(-1, Vn), lab.reshape(-1), ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
        return loss_sum

    @torch.no_grad()
    def evaluate(model, n):
        model.eval()
        correct = torch.zeros((), dtype=torch.long, device=dev)
        ce_sum = torch.zeros((), device=dev)
        ce_cnt = 0
        preds = torch.empty(n, dtype=torch.long, device=dev)
        if args.eval_batch == 1:
            for s in range(n):  # one prompt at a time, unpadded
                L = length_host[s]
                logits = model(ids[s:s + 1, :L])[0]
                lab = labels[s, :L]
                p = logits[L - 1].argmax()
                preds[s] = p
                correct += (p == lab[L - 1]).long()
                if L > 1:
                    ce_sum += Fn.cross_entropy(logits[:L - 1], lab[:L - 1], reduction="sum")
                    ce_cnt += L - 1
        else:
            pos = torch.arange(T, device=dev)
            for s0 in range(0, n, args.eval_batch):
                s1 = min(n, s0 + args.eval_batch)
                logits = model(ids[s0:s1])
                lab = labels[s0:s1]
                last = length[s0:s1] - 1
                rows = torch.arange(s1 - s0, device=dev)
                p = logits[rows, last].argmax(-1)
                preds[s0:s1] = p
                correct += (p == lab[rows, last]).sum()
                nf = torch.where(pos[None, :] < last[:, None], lab, torch.full_like(lab, IGNORE))
                ce_sum += Fn.cross_entropy(logits.reshape(-1, Vn), nf.reshape(-1), ignore_index=IGNORE,
                                           reduction="sum")
                ce_cnt += sum(length_host[s0:s1]) - (s1 - s0)
        return correct, ce_sum, ce_cnt, preds

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # Untimed warm-up (kernels, cuBLAS heuristics, allocator) on a throw-away model.
    if args.warmup:
        model, opt = make()
        train_epoch(model, opt, min(args.warmup, steps), torch.Generator().manual_seed(args.seed + 1))
        evaluate(model, min(S, max(args.warmup, 16 if args.eval_batch == 1 else args.eval_batch)))
        sync()
        del model, opt

    model, opt = make()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    expected = trainable_count(d, H, R)
    if params != expected:
        raise AssertionError(f"trainable parameters {params} != edit_trainable_count {expected}")
    gen = torch.Generator().manual_seed(args.seed)
    sync()
    if cuda:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
    w0 = time.perf_counter()
    loss_sum = train_epoch(model, opt, steps, gen)
    if cuda:
        ev[1].record()
    else:
        w1 = time.perf_counter()
    correct, ce_sum, ce_cnt, _ = evaluate(model, n_eval)
    if cuda:
        ev[2].record()
    sync()
    w2 = time.perf_counter()
    if cuda:
        epoch_s = ev[0].elapsed_time(ev[1]) / 1000.0
        eval_s = ev[1].elapsed_time(ev[2]) / 1000.0
        timer = "cuda events"
    else:
        epoch_s, eval_s, timer = w1 - w0, w2 - w1, "perf_counter"
    impl = ("torch eager, nn.Module + autograd, " + ("SDPA causal" if attn == "sdpa" else "explicit causal softmax")
            + ", full-vocab logits + F.cross_entropy, fp32"
            + (" tf32" if args.tf32 else "") + (", AdamW fused" if args.fused else ", AdamW default"))
    print(json.dumps({
        "impl": impl, "device": torch.cuda.get_device_name() if cuda else "cpu", "timer": timer,
        "attn": attn, "sdpa_backend": "auto (PyTorch picks; fp32 at d = 256 is not flash)" if attn == "sdpa" else None,
        "epoch_s": epoch_s, "eval_s": eval_s, "wall_s": w2 - w0,
        "eval_s_per_prompt": eval_s / n_eval, "eval_s_all_est": eval_s * S / n_eval,
        "steps": steps, "batch": B, "sequences": S, "seq_len": T, "eval_prompts": n_eval,
        "eval_batch": args.eval_batch, "params": params, "frozen_params": frozen, "vocab": Vn,
        "facts": len(facts), "templates": len(templates), "dim": d, "qk_hidden": H, "rank": R,
        "expert_hidden": hf, "expert": "random-init U(+-1/sqrt(fan_in)), frozen (not the trained GD-MSE expert)",
        "epoch_loss": float(loss_sum.item()) / steps, "eval_value_acc": int(correct.item()) / n_eval,
        "eval_nonfact_ce": float(ce_sum.item()) / max(ce_cnt, 1), "lr": args.lr, "weight_decay": args.weight_decay,
        "seed": args.seed, "tf32": args.tf32, "data_s": data_s, "torch": torch.__version__,
        "cuda": torch.version.cuda}))


if __name__ == "__main__":
    main()
