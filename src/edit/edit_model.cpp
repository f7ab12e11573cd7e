// §6.4 fact-editing block, CPU float64 forward/backward (edit/edit_model.hpp). Rows are the N = B·T
// token positions; attention runs per sequence through kata::mqar::softmax_head_* (one head, width d,
// scale 1/√d, v = h, output = a).
#include "edit/edit_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/mqar_mixers.hpp"
#include "nn/edit_layers.hpp"
#include "nn/layernorm.hpp"
#include "nn/layers.hpp"
#include "nn/rmsnorm_gain.hpp"
#include "nn/tied_ce.hpp"

namespace memcap::edit {

using Mat = kata::mqar::Mat<double>;
using Vec = kata::mqar::Vec<double>;

void EditModelConfig::validate() const {
  require(d >= 2 && d % 2 == 0, "edit model: d = {} must be even and at least 2 (RoPE pairs)", d);
  require(vocab >= 1, "edit model: vocabulary size {} must be positive", vocab);
  require(qk_hidden >= 1 && rank >= 1 && fact_hidden >= 1,
          "edit model: qk_hidden = {}, rank = {}, fact_hidden = {} must be positive", qk_hidden, rank, fact_hidden);
  require(rms_eps >= 0 && ln_eps > 0, "edit model: rms_eps = {} must be >= 0 and ln_eps = {} > 0", rms_eps, ln_eps);
}

nn::ArenaLayout edit_trainable_layout(const EditModelConfig& c) {
  c.validate();
  const std::int64_t d = c.d, H = c.qk_hidden, R = c.rank;
  nn::ArenaLayout L;
  L.add("rms1.g", {d});
  for (const char* p : {"q", "k"}) {
    const std::string s(p);
    L.add(s + ".ln.w", {d});
    L.add(s + ".ln.b", {d});
    L.add(s + ".w1", {H, d});
    L.add(s + ".b1", {H});
    L.add(s + ".w2", {d, H});
    L.add(s + ".b2", {d});
  }
  L.add("router.w1", {d, d});
  L.add("router.b1", {d});
  L.add("router.w2", {1, d});
  L.add("router.b2", {1});
  L.add("lowrank.U", {d, R});
  L.add("lowrank.V", {R, d});
  L.add("rmsf.g", {d});
  return L;
}

nn::ArenaLayout edit_frozen_layout(const EditModelConfig& c) {
  c.validate();
  const std::int64_t d = c.d, h = c.fact_hidden;
  nn::ArenaLayout L;
  L.add("embed.E", {c.vocab, d});
  L.add("fact.U", {h, d});
  L.add("fact.bU", {h});
  L.add("fact.G", {h, d});
  L.add("fact.bG", {h});
  L.add("fact.D", {d, h});
  L.add("fact.bD", {d});
  return L;
}

std::int64_t edit_trainable_count(const EditModelConfig& c) {
  const std::int64_t d = c.d, H = c.qk_hidden, R = c.rank;
  return d + 2 * (2 * d + 2 * d * H + H + d) + (d * d + 2 * d + 1) + 2 * d * R + d;
}

void EditActs::resize(const EditModelConfig& c, std::int64_t B_, std::int64_t T_) {
  require(B_ >= 1 && T_ >= 1, "edit model: batch {} x {} tokens must be positive", B_, T_);
  B = B_;
  T = T_;
  const auto N = static_cast<std::size_t>(B * T), d = static_cast<std::size_t>(c.d),
             H = static_cast<std::size_t>(c.qk_hidden), hf = static_cast<std::size_t>(c.fact_hidden),
             R = static_cast<std::size_t>(c.rank);
  x.assign(N * d, 0);
  h.assign(N * d, 0);
  rstd1.assign(N, 0);
  for (auto* v : {&lnq, &qlin, &q, &lnk, &klin, &k, &a, &xt, &f, &rh, &l, &ffn, &o}) v->assign(N * d, 0);
  rpre.assign(N * d, 0);
  for (auto* v : {&lnq_mean, &lnq_rstd, &lnk_mean, &lnk_rstd, &lse_attn, &rstd_a, &z, &alpha, &rstdf, &losses, &lse})
    v->assign(N, 0);
  for (auto* v : {&preq, &hq, &prek, &hk}) v->assign(N * H, 0);
  for (auto* v : {&fu, &fg, &fh}) v->assign(N * hf, 0);
  mid.assign(N * R, 0);
  argmax.assign(N, 0);
  for (auto* v : {&g_o, &g_ffn, &g_f, &g_l, &g_rh, &g_rpre, &g_xt, &g_tmp, &g_a, &g_q, &g_k, &g_h, &g_lin, &g_ln})
    v->assign(N * d, 0);
  g_z.assign(N, 0);
  g_mid.assign(N * R, 0);
  for (auto* v : {&g_fh, &g_fu, &g_fg}) v->assign(N * hf, 0);
  for (auto* v : {&g_hid, &g_pre}) v->assign(N * H, 0);
}

EditModel::EditModel(const EditModelConfig& c) : cfg_(c) {
  train_.layout = edit_trainable_layout(c);
  frozen_.layout = edit_frozen_layout(c);
  train_.allocate();
  frozen_.allocate();
}

void EditModel::init(std::uint64_t seed) {
  std::uint64_t stream = rng::kUser + 600;
  auto normal = [&](double* p, std::int64_t n, double sd) {
    const std::uint64_t s = stream++;
    for (std::int64_t i = 0; i < n; ++i) p[i] = sd * rng::normal(seed, s, static_cast<std::uint64_t>(i));
  };
  auto uniform = [&](double* p, std::int64_t n, double lim) {
    const std::uint64_t s = stream++;
    for (std::int64_t i = 0; i < n; ++i) p[i] = lim * (2 * rng::uniform(seed, s, static_cast<std::uint64_t>(i)) - 1);
  };
  std::fill(train_.params.begin(), train_.params.end(), 0.0);
  for (const auto& v : train_.layout.views()) {
    double* p = train_.params.data() + v.offset;
    if (v.name == "rms1.g" || v.name == "rmsf.g" || v.name == "q.ln.w" || v.name == "k.ln.w")
      std::fill(p, p + v.numel, 1.0);
    else if (v.name == "lowrank.U" || v.name == "lowrank.V")
      normal(p, v.numel, 1.0);
    else if (v.shape.size() == 2)
      normal(p, v.numel, 0.02);
  }
  const double d = static_cast<double>(cfg_.d), h = static_cast<double>(cfg_.fact_hidden);
  uniform(frozen_.param("embed.E"), cfg_.vocab * cfg_.d, 1.0 / std::sqrt(d));
  for (const char* n : {"fact.U", "fact.bU", "fact.G", "fact.bG"})
    uniform(frozen_.param(n), frozen_.layout.view(n).numel, 1.0 / std::sqrt(d));
  for (const char* n : {"fact.D", "fact.bD"}) uniform(frozen_.param(n), frozen_.layout.view(n).numel, 1.0 / std::sqrt(h));
}

namespace {

// Per-sequence copies between [B, T, d] row buffers and Eigen matrices.
Mat seq(const std::vector<double>& buf, std::int64_t b, std::int64_t T, std::int64_t d) {
  Mat m(T, d);
  std::copy_n(buf.data() + b * T * d, T * d, m.data());
  return m;
}
void put(std::vector<double>& buf, const Mat& m, std::int64_t b) {
  std::copy_n(m.data(), m.size(), buf.data() + b * m.size());
}

}  // namespace

double EditModel::forward(EditActs& A, const std::int32_t* tokens, const std::int32_t* targets, std::int64_t B,
                          std::int64_t T) const {
  const auto& P = train_;
  const auto& F = frozen_;
  const std::int64_t d = cfg_.d, H = cfg_.qk_hidden, hf = cfg_.fact_hidden, R = cfg_.rank, V = cfg_.vocab;
  if (A.B != B || A.T != T || static_cast<std::int64_t>(A.x.size()) != B * T * d) A.resize(cfg_, B, T);
  const std::int64_t N = B * T;
  // embedding (padding −100 -> zero row)
  const double* E = F.param("embed.E");
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int32_t t = tokens[n];
    require(t == nn::kIgnoreLabel || (t >= 0 && t < V), "edit model: token {} at position {} is outside [0, {})", t,
            n, V);
    double* x = A.x.data() + n * d;
    if (t == nn::kIgnoreLabel)
      std::fill(x, x + d, 0.0);
    else
      std::copy_n(E + static_cast<std::int64_t>(t) * d, d, x);
  }
  nn::cpu::rmsnorm_gain_forward(A.h.data(), A.rstd1.data(), A.x.data(), P.param("rms1.g"), N, d, cfg_.rms_eps);
  // Q and K projections: RoPE(W2 GELU(W1 LN(h) + b1) + b2)
  const double base = nn::rope_base_for(d);
  auto proj = [&](const std::string& p, std::vector<double>& ln, std::vector<double>& mean, std::vector<double>& rstd,
                  std::vector<double>& pre, std::vector<double>& hid, std::vector<double>& lin, std::vector<double>& out) {
    nn::cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), A.h.data(), P.param(p + ".ln.w"),
                               P.param(p + ".ln.b"), N, d, cfg_.ln_eps);
    nn::cpu::linear_forward(pre.data(), ln.data(), P.param(p + ".w1"), P.param(p + ".b1"), N, d, H);
    nn::cpu::gelu_forward(hid.data(), pre.data(), N * H);
    nn::cpu::linear_forward(lin.data(), hid.data(), P.param(p + ".w2"), P.param(p + ".b2"), N, H, d);
    nn::cpu::rope_forward(out.data(), lin.data(), B, T, std::int64_t{1}, d, base);
  };
  proj("q", A.lnq, A.lnq_mean, A.lnq_rstd, A.preq, A.hq, A.qlin, A.q);
  proj("k", A.lnk, A.lnk_mean, A.lnk_rstd, A.prek, A.hk, A.klin, A.k);
  // causal softmax attention, v = h, W_o = I
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t b = 0; b < B; ++b) {
    Mat o;
    Vec lse;
    kata::mqar::softmax_head_forward(o, lse, seq(A.q, b, T, d), seq(A.k, b, T, d), seq(A.h, b, T, d), scale);
    put(A.a, o, b);
    std::copy_n(lse.data(), T, A.lse_attn.data() + b * T);
  }
  // fact expert on the unit-norm a: x̃ = rmsnorm(a)·(1/√d)
  const std::vector<double> wf(static_cast<std::size_t>(d), 1.0 / std::sqrt(static_cast<double>(d)));
  nn::cpu::rmsnorm_gain_forward(A.xt.data(), A.rstd_a.data(), A.a.data(), wf.data(), N, d, cfg_.rms_eps);
  nn::cpu::linear_forward(A.fu.data(), A.xt.data(), F.param("fact.U"), F.param("fact.bU"), N, d, hf);
  nn::cpu::linear_forward(A.fg.data(), A.xt.data(), F.param("fact.G"), F.param("fact.bG"), N, d, hf);
  nn::cpu::gated_forward(A.fh.data(), A.fu.data(), A.fg.data(), N * hf, cfg_.fact_gate);
  nn::cpu::linear_forward(A.f.data(), A.fh.data(), F.param("fact.D"), F.param("fact.bD"), N, hf, d);
  if (static_cast<std::int64_t>(A.f_add.size()) == N * d)
    for (std::int64_t i = 0; i < N * d; ++i) A.f[static_cast<std::size_t>(i)] += A.f_add[static_cast<std::size_t>(i)];
  // router on the pre-norm a, low-rank path, mix
  nn::cpu::linear_forward(A.rpre.data(), A.a.data(), P.param("router.w1"), P.param("router.b1"), N, d, d);
  nn::cpu::gelu_forward(A.rh.data(), A.rpre.data(), N * d);
  nn::cpu::linear_forward(A.z.data(), A.rh.data(), P.param("router.w2"), P.param("router.b2"), N, d, 1);
  nn::cpu::lowrank_forward(A.l.data(), A.mid.data(), A.a.data(), P.param("lowrank.U"), P.param("lowrank.V"), N, d, R);
  nn::cpu::router_mix_forward(A.ffn.data(), A.alpha.data(), A.z.data(), A.f.data(), A.l.data(), N, d);
  nn::cpu::rmsnorm_gain_forward(A.o.data(), A.rstdf.data(), A.ffn.data(), P.param("rmsf.g"), N, d, cfg_.rms_eps);
  return nn::cpu::tied_logits_ce_forward(A.losses.data(), A.lse.data(), A.argmax.data(), A.o.data(), E, targets, N, V,
                                         d, &A.n_valid);
}

void EditModel::backward(EditActs& A, const std::int32_t* targets) {
  auto& P = train_;
  const auto& F = frozen_;
  const std::int64_t d = cfg_.d, H = cfg_.qk_hidden, hf = cfg_.fact_hidden, R = cfg_.rank, V = cfg_.vocab;
  const std::int64_t B = A.B, T = A.T, N = B * T;
  const double scale_ce = A.n_valid > 0 ? 1.0 / static_cast<double>(A.n_valid) : 0.0;
  nn::cpu::tied_logits_ce_backward(A.g_o.data(), static_cast<double*>(nullptr), A.o.data(), F.param("embed.E"), targets,
                                   A.lse.data(), N, V, d, scale_ce);
  nn::cpu::rmsnorm_gain_backward(A.g_ffn.data(), P.grad("rmsf.g"), A.g_o.data(), A.ffn.data(), P.param("rmsf.g"),
                                 A.rstdf.data(), N, d);
  nn::cpu::router_mix_backward(A.g_z.data(), A.g_f.data(), A.g_l.data(), A.g_ffn.data(), A.alpha.data(), A.f.data(),
                               A.l.data(), N, d);
  // low-rank path -> g_a
  nn::cpu::lowrank_backward(A.g_a.data(), P.grad("lowrank.U"), P.grad("lowrank.V"), A.g_mid.data(), A.g_l.data(),
                            A.a.data(), A.mid.data(), P.param("lowrank.U"), P.param("lowrank.V"), N, d, R);
  // router -> g_tmp, added to g_a
  nn::cpu::linear_backward(A.g_rh.data(), P.grad("router.w2"), P.grad("router.b2"), A.g_z.data(), A.rh.data(),
                           P.param("router.w2"), N, d, 1);
  nn::cpu::gelu_backward(A.g_rpre.data(), A.g_rh.data(), A.rpre.data(), N * d);
  nn::cpu::linear_backward(A.g_tmp.data(), P.grad("router.w1"), P.grad("router.b1"), A.g_rpre.data(), A.a.data(),
                           P.param("router.w1"), N, d, d);
  for (std::int64_t i = 0; i < N * d; ++i) A.g_a[static_cast<std::size_t>(i)] += A.g_tmp[static_cast<std::size_t>(i)];
  // frozen fact expert (input gradient only) -> unit norm -> g_a
  nn::cpu::linear_backward(A.g_fh.data(), nullptr, nullptr, A.g_f.data(), A.fh.data(), F.param("fact.D"), N, hf, d);
  nn::cpu::gated_backward(A.g_fu.data(), A.g_fg.data(), A.g_fh.data(), A.fu.data(), A.fg.data(), N * hf,
                          cfg_.fact_gate);
  nn::cpu::linear_backward(A.g_xt.data(), nullptr, nullptr, A.g_fu.data(), A.xt.data(), F.param("fact.U"), N, d, hf);
  nn::cpu::linear_backward(A.g_tmp.data(), nullptr, nullptr, A.g_fg.data(), A.xt.data(), F.param("fact.G"), N, d, hf);
  for (std::int64_t i = 0; i < N * d; ++i) A.g_xt[static_cast<std::size_t>(i)] += A.g_tmp[static_cast<std::size_t>(i)];
  const std::vector<double> wf(static_cast<std::size_t>(d), 1.0 / std::sqrt(static_cast<double>(d)));
  nn::cpu::rmsnorm_gain_backward(A.g_tmp.data(), static_cast<double*>(nullptr), A.g_xt.data(), A.a.data(), wf.data(),
                                 A.rstd_a.data(), N, d);
  for (std::int64_t i = 0; i < N * d; ++i) A.g_a[static_cast<std::size_t>(i)] += A.g_tmp[static_cast<std::size_t>(i)];
  // attention: g_q, g_k, and g_h (through v = h)
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t b = 0; b < B; ++b) {
    Mat dq, dk, dv;
    Vec lse(T);
    std::copy_n(A.lse_attn.data() + b * T, T, lse.data());
    kata::mqar::softmax_head_backward(dq, dk, dv, seq(A.g_a, b, T, d), seq(A.q, b, T, d), seq(A.k, b, T, d),
                                      seq(A.h, b, T, d), seq(A.a, b, T, d), lse, scale);
    put(A.g_q, dq, b);
    put(A.g_k, dk, b);
    put(A.g_h, dv, b);
  }
  // Q and K projections back to h (added into g_h)
  const double base = nn::rope_base_for(d);
  auto proj_back = [&](const std::string& p, std::vector<double>& gout, const std::vector<double>& ln,
                       const std::vector<double>& mean, const std::vector<double>& rstd, const std::vector<double>& pre,
                       const std::vector<double>& hid) {
    nn::cpu::rope_backward(A.g_lin.data(), gout.data(), B, T, std::int64_t{1}, d, base);
    nn::cpu::linear_backward(A.g_hid.data(), P.grad(p + ".w2"), P.grad(p + ".b2"), A.g_lin.data(), hid.data(),
                             P.param(p + ".w2"), N, H, d);
    nn::cpu::gelu_backward(A.g_pre.data(), A.g_hid.data(), pre.data(), N * H);
    nn::cpu::linear_backward(A.g_ln.data(), P.grad(p + ".w1"), P.grad(p + ".b1"), A.g_pre.data(), ln.data(),
                             P.param(p + ".w1"), N, d, H);
    nn::cpu::layernorm_backward(A.g_tmp.data(), P.grad(p + ".ln.w"), P.grad(p + ".ln.b"), A.g_ln.data(), A.h.data(),
                                P.param(p + ".ln.w"), mean.data(), rstd.data(), N, d);
    for (std::int64_t i = 0; i < N * d; ++i) A.g_h[static_cast<std::size_t>(i)] += A.g_tmp[static_cast<std::size_t>(i)];
  };
  proj_back("q", A.g_q, A.lnq, A.lnq_mean, A.lnq_rstd, A.preq, A.hq);
  proj_back("k", A.g_k, A.lnk, A.lnk_mean, A.lnk_rstd, A.prek, A.hk);
  // RMSNorm_γ1: only its gain is trainable (the embedding is frozen)
  nn::cpu::rmsnorm_gain_backward(static_cast<double*>(nullptr), P.grad("rms1.g"), A.g_h.data(), A.x.data(),
                                 P.param("rms1.g"), A.rstd1.data(), N, d);
}

}  // namespace memcap::edit
