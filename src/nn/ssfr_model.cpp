// CPU float64 reference of the SSFR block (nn/ssfr_model.hpp): forward and backward at the query
// position, built from nn::cpu layers, plus the full-sequence oracle written with plain loops.
#include "nn/ssfr_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace memcap::nn {

namespace {

const double* view_or_null(const ArenaLayout& l, const double* base, const char* name) {
  return l.has(name) ? base + l.view(name).offset : nullptr;
}
double* view_or_null(const ArenaLayout& l, double* base, const char* name) {
  return l.has(name) ? base + l.view(name).offset : nullptr;
}

void check_map(const std::vector<std::int32_t>& map, std::int64_t F, const char* name) {
  require(static_cast<std::int64_t>(map.size()) == F, "SSFR {} has {} entries for F = {} facts", name, map.size(), F);
  std::vector<char> used(static_cast<std::size_t>(F), 0);
  for (std::int64_t i = 0; i < F; ++i) {
    const std::int32_t v = map[static_cast<std::size_t>(i)];
    require(v >= 0 && v < F, "SSFR {}[{}] = {} is outside [0, {})", name, i, v, F);
    require(!used[static_cast<std::size_t>(v)], "SSFR {} is not a bijection: value {} is used twice", name, v);
    used[static_cast<std::size_t>(v)] = 1;
  }
}

double act_value(double x, Activation a) {
  switch (a) {
    case Activation::identity: return x;
    case Activation::relu: return x > 0 ? x : 0.0;
    case Activation::silu: return x / (1.0 + std::exp(-x));
  }
  return x;
}

}  // namespace

void SsfrProblem::validate() const {
  task.validate();
  const std::int64_t d = block.dim, V = task.vocab();
  require(d >= 1, "SSFR model dimension must be >= 1 (got {})", d);
  require(static_cast<std::int64_t>(embed_in.size()) == V * d && static_cast<std::int64_t>(embed_out.size()) == V * d,
          "SSFR embedding tables must be |V| x d = {} x {}", V, d);
  for (double x : embed_in) require(std::isfinite(x), "SSFR input embedding table holds a non-finite value");
  for (double x : embed_out) require(std::isfinite(x), "SSFR output embedding table holds a non-finite value");
  check_map(map_a, task.facts, "map A");
  check_map(map_b, task.facts, "map B");
  for (const FrozenMlp* mlp : {&mlp_a, &mlp_b}) {
    mlp->validate();
    require(mlp->d == d, "the inserted MLP has d = {} but the model has d = {}", mlp->d, d);
  }
}

ArenaLayout ssfr_layout(const SsfrBlockConfig& cfg) {
  ArenaLayout l;
  for (const char* name : {"W_q", "W_k"}) l.add(name, {cfg.dim, cfg.dim});
  if (cfg.vo_trainable)
    for (const char* name : {"W_v", "W_o"}) l.add(name, {cfg.dim, cfg.dim});
  return l;
}

std::vector<double> ssfr_init_params(const SsfrBlockConfig& cfg, std::uint64_t seed) {
  const ArenaLayout l = ssfr_layout(cfg);
  std::vector<double> p(static_cast<std::size_t>(l.numel()));
  const std::int64_t dd = cfg.dim * cfg.dim;
  const char* names[] = {"W_q", "W_k", "W_v", "W_o"};
  for (int j = 0; j < 4; ++j) {
    if (!l.has(names[j])) continue;
    const double sd = j == 3 ? 0.02 / std::sqrt(2.0) : 0.02;
    double* w = p.data() + l.view(names[j]).offset;
    for (std::int64_t i = 0; i < dd; ++i)
      w[i] = sd * rng::normal(seed, rng::kSsfrInit, static_cast<std::uint64_t>(j * dd + i));
  }
  return p;
}

SsfrWorkspace::SsfrWorkspace(const SsfrProblem& p, std::int64_t rows)
    : prob(&p), layout(ssfr_layout(p.block)), d(p.block.dim), V(p.task.vocab()), T(p.task.seq_len), max_rows(rows),
      m(std::max(p.mlp_a.m, p.mlp_b.m)) {
  MEMCAP_ASSERT(rows >= 1, "SsfrWorkspace: rows >= 1");
  auto sz = [](std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); };
  H.resize(sz(V, d));
  cpu::rmsnorm_forward(H.data(), p.embed_in.data(), V, d, kSsfrNormEps);
  for (auto* v : {&Ktab, &Vtab, &dKtab, &dVtab}) v->resize(sz(V, d));
  for (auto* v : {&hq, &q, &ctx, &attn, &z, &u, &y, &o, &d_o, &d_y, &d_u, &d_z, &d_ctx, &d_q, &tmp})
    v->resize(sz(rows, d));
  for (auto* v : {&ma, &mg, &mh, &dma, &dmg}) v->resize(sz(rows, std::max<std::int64_t>(m, 1)));
  logits.resize(sz(rows, V));
  dlogits.resize(sz(rows, V));
  att.resize(sz(rows, T));
  dscores.resize(sz(rows, T));
  for (auto* v : {&losses, &norm_z, &norm_y}) v->resize(sz(rows, 1));
  len.resize(sz(rows, 1));
  qrow.resize(sz(rows, 1));
  correct.resize(sz(rows, 1));
}

SsfrStats ssfr_forward(SsfrWorkspace& ws, const double* params, const SsfrBatch& batch, const FrozenMlp& mlp) {
  const SsfrProblem& p = *ws.prob;
  const std::int64_t B = batch.B, d = ws.d, V = ws.V, T = ws.T;
  MEMCAP_ASSERT(B >= 1 && B <= ws.max_rows && batch.T == T, "ssfr_forward: batch does not fit the workspace");
  MEMCAP_ASSERT(mlp.identity() || mlp.m <= ws.m, "ssfr_forward: MLP wider than the workspace");
  const double* Wq = params + ws.layout.view("W_q").offset;
  const double* Wk = params + ws.layout.view("W_k").offset;
  const double* Wv = view_or_null(ws.layout, params, "W_v");
  const double* Wo = view_or_null(ws.layout, params, "W_o");

  // Per-token key/value tables, gathered by the attention layer.
  cpu::linear_forward(ws.Ktab.data(), ws.H.data(), Wk, nullptr, V, d, d);
  const double* Vsrc = ws.H.data();
  if (Wv) {
    cpu::linear_forward(ws.Vtab.data(), ws.H.data(), Wv, nullptr, V, d, d);
    Vsrc = ws.Vtab.data();
  }
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int32_t Q = batch.query_pos[static_cast<std::size_t>(b)];
    ws.len[b] = Q + 1;
    ws.qrow[b] = batch.tokens[static_cast<std::size_t>(b * T + Q)];
    std::copy_n(ws.H.data() + static_cast<std::int64_t>(ws.qrow[b]) * d, d, ws.hq.data() + b * d);
  }
  cpu::linear_forward(ws.q.data(), ws.hq.data(), Wq, nullptr, B, d, d);
  cpu::attention_query_forward(ws.ctx.data(), ws.att.data(), ws.q.data(), ws.Ktab.data(), Vsrc, batch.tokens.data(),
                               ws.len.data(), B, T, d);
  if (Wo)
    cpu::linear_forward(ws.attn.data(), ws.ctx.data(), Wo, nullptr, B, d, d);
  else
    std::copy_n(ws.ctx.data(), B * d, ws.attn.data());
  std::copy_n(ws.attn.data(), B * d, ws.z.data());
  if (p.block.attn_residual)
    for (std::int64_t b = 0; b < B; ++b) {
      const double* x = p.embed_in.data() + static_cast<std::int64_t>(ws.qrow[b]) * d;
      for (std::int64_t c = 0; c < d; ++c) ws.z[b * d + c] += x[c];
    }
  cpu::l2norm_forward(ws.u.data(), ws.norm_z.data(), ws.z.data(), B, d, kSsfrNormEps);
  cpu::frozen_mlp_forward(ws.y.data(), ws.ma.data(), ws.mg.data(), ws.mh.data(), ws.u.data(), mlp, B);
  cpu::l2norm_forward(ws.o.data(), ws.norm_y.data(), ws.y.data(), B, d, kSsfrNormEps);
  cpu::linear_forward(ws.logits.data(), ws.o.data(), p.embed_out.data(), nullptr, B, d, V);
  SsfrStats st;
  st.loss = cpu::cross_entropy_forward(ws.losses.data(), ws.logits.data(), batch.target.data(), B, V,
                                       ws.correct.data());
  for (std::int64_t b = 0; b < B; ++b) st.correct += ws.correct[b];
  return st;
}

void ssfr_backward(SsfrWorkspace& ws, const double* params, double* grads, const SsfrBatch& batch,
                   const FrozenMlp& mlp) {
  const SsfrProblem& p = *ws.prob;
  const std::int64_t B = batch.B, d = ws.d, V = ws.V, T = ws.T;
  const double* Wq = params + ws.layout.view("W_q").offset;
  const double* Wk = params + ws.layout.view("W_k").offset;
  const double* Wv = view_or_null(ws.layout, params, "W_v");
  const double* Wo = view_or_null(ws.layout, params, "W_o");
  double* dWq = grads + ws.layout.view("W_q").offset;
  double* dWk = grads + ws.layout.view("W_k").offset;
  double* dWv = view_or_null(ws.layout, grads, "W_v");
  double* dWo = view_or_null(ws.layout, grads, "W_o");

  cpu::cross_entropy_backward(ws.dlogits.data(), ws.logits.data(), batch.target.data(), B, V);
  cpu::linear_backward(ws.d_o.data(), nullptr, nullptr, ws.dlogits.data(), ws.o.data(), p.embed_out.data(), B, d, V);
  cpu::l2norm_backward(ws.d_y.data(), ws.d_o.data(), ws.y.data(), B, d, kSsfrNormEps);
  cpu::frozen_mlp_backward(ws.d_u.data(), ws.dma.data(), ws.dmg.data(), ws.tmp.data(), ws.d_y.data(), ws.ma.data(),
                           ws.mg.data(), mlp, B);
  cpu::l2norm_backward(ws.d_z.data(), ws.d_u.data(), ws.z.data(), B, d, kSsfrNormEps);
  // The residual x_Q is a frozen embedding: d(attn) = d_z.
  if (Wo)
    cpu::linear_backward(ws.d_ctx.data(), dWo, nullptr, ws.d_z.data(), ws.ctx.data(), Wo, B, d, d);
  else
    std::copy_n(ws.d_z.data(), B * d, ws.d_ctx.data());
  std::fill(ws.dKtab.begin(), ws.dKtab.end(), 0.0);
  if (Wv) std::fill(ws.dVtab.begin(), ws.dVtab.end(), 0.0);
  cpu::attention_query_backward(ws.d_q.data(), ws.dKtab.data(), Wv ? ws.dVtab.data() : nullptr, ws.dscores.data(),
                                ws.d_ctx.data(), ws.att.data(), ws.q.data(), ws.Ktab.data(),
                                Wv ? ws.Vtab.data() : ws.H.data(), batch.tokens.data(), ws.len.data(), B, T, d);
  cpu::linear_backward(nullptr, dWq, nullptr, ws.d_q.data(), ws.hq.data(), Wq, B, d, d);
  cpu::linear_backward(nullptr, dWk, nullptr, ws.dKtab.data(), ws.H.data(), Wk, V, d, d);
  if (Wv) cpu::linear_backward(nullptr, dWv, nullptr, ws.dVtab.data(), ws.H.data(), Wv, V, d, d);
}

std::vector<double> ssfr_logits_full_sequence(const SsfrProblem& p, const double* params, const SsfrBatch& batch,
                                              const FrozenMlp& mlp) {
  const std::int64_t B = batch.B, T = batch.T, d = p.block.dim, V = p.task.vocab();
  const ArenaLayout l = ssfr_layout(p.block);
  const double* Wq = params + l.view("W_q").offset;
  const double* Wk = params + l.view("W_k").offset;
  const double* Wv = view_or_null(l, params, "W_v");
  const double* Wo = view_or_null(l, params, "W_o");
  auto matvec = [d](const double* W, const double* x, double* out) {  // out = W x (d×d)
    for (std::int64_t i = 0; i < d; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < d; ++j) s += W[i * d + j] * x[j];
      out[i] = s;
    }
  };
  auto unit = [](std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    const double r = std::sqrt(s) + kSsfrNormEps;
    for (double& x : v) x /= r;
  };
  std::vector<double> out(static_cast<std::size_t>(B * V));
  std::vector<double> x(static_cast<std::size_t>(T * d)), h(x.size()), q(x.size()), k(x.size()), v(x.size());
  std::vector<double> ctx(d), a(d), z(d), y(d), sc(T);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int32_t tok = batch.tokens[static_cast<std::size_t>(b * T + t)];
      double ss = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        x[t * d + c] = tok == kSsfrPad ? 0.0 : p.embed_in[static_cast<std::size_t>(tok * d + c)];
        ss += x[t * d + c] * x[t * d + c];
      }
      const double r = std::sqrt(ss / static_cast<double>(d) + kSsfrNormEps);
      for (std::int64_t c = 0; c < d; ++c) h[t * d + c] = x[t * d + c] / r;
      matvec(Wq, &h[t * d], &q[t * d]);
      matvec(Wk, &h[t * d], &k[t * d]);
      if (Wv)
        matvec(Wv, &h[t * d], &v[t * d]);
      else
        std::copy_n(&h[t * d], d, &v[t * d]);
    }
    // Every position attends causally; the logits of position Q are kept.
    for (std::int64_t t = 0; t < T; ++t) {
      double mx = -INFINITY;
      for (std::int64_t s = 0; s <= t; ++s) {
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += q[t * d + c] * k[s * d + c];
        sc[s] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, sc[s]);
      }
      double zsum = 0;
      for (std::int64_t s = 0; s <= t; ++s) zsum += (sc[s] = std::exp(sc[s] - mx));
      std::fill(ctx.begin(), ctx.end(), 0.0);
      for (std::int64_t s = 0; s <= t; ++s)
        for (std::int64_t c = 0; c < d; ++c) ctx[c] += sc[s] / zsum * v[s * d + c];
      if (Wo)
        matvec(Wo, ctx.data(), a.data());
      else
        a = ctx;
      for (std::int64_t c = 0; c < d; ++c) z[c] = a[c] + (p.block.attn_residual ? x[t * d + c] : 0.0);
      unit(z);
      if (mlp.identity()) {
        y = z;
      } else {
        std::fill(y.begin(), y.end(), 0.0);
        for (std::int64_t r = 0; r < mlp.m; ++r) {
          double av = mlp.bias_up.empty() ? 0.0 : mlp.bias_up[static_cast<std::size_t>(r)];
          double gv = mlp.bias_gate.empty() ? 0.0 : mlp.bias_gate[static_cast<std::size_t>(r)];
          for (std::int64_t c = 0; c < d; ++c) {
            av += mlp.A[static_cast<std::size_t>(r * d + c)] * z[c];
            gv += mlp.G[static_cast<std::size_t>(r * d + c)] * z[c];
          }
          const double hr = av * act_value(gv, mlp.gate);
          for (std::int64_t c = 0; c < d; ++c) y[c] += mlp.B[static_cast<std::size_t>(c * mlp.m + r)] * hr;
        }
        if (!mlp.bias_out.empty())
          for (std::int64_t c = 0; c < d; ++c) y[c] += mlp.bias_out[static_cast<std::size_t>(c)];
      }
      unit(y);
      if (t != batch.query_pos[static_cast<std::size_t>(b)]) continue;
      for (std::int64_t j = 0; j < V; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < d; ++c) s += p.embed_out[static_cast<std::size_t>(j * d + c)] * y[c];
        out[static_cast<std::size_t>(b * V + j)] = s;
      }
    }
  }
  return out;
}

double ssfr_cpu_bytes(const SsfrTask& task, std::int64_t d_, std::int64_t m_, std::int64_t rows_) {
  const double V = static_cast<double>(task.vocab()), T = static_cast<double>(task.seq_len),
               d = static_cast<double>(d_), m = static_cast<double>(m_), rows = static_cast<double>(rows_);
  const double tables = 7 * V * d;                         // E_in, E_out, H, K, V and their gradients
  const double acts = rows * (16 * d + 5 * m + 2 * V + 2 * T + 3);
  const double arenas = 4 * 4 * d * d;                     // params, grads, Adam moments
  const double mlps = 2 * (3 * m * d + 2 * m + d);
  const double batch = 6 * rows * T / 2;                   // int32 tokens and per-sequence fields
  return 8 * (tables + acts + arenas + mlps + batch);
}

}  // namespace memcap::nn
