// §6.4 fact-editing block on the GPU (edit/edit_model_cuda.hpp), mirroring edit_model.cpp buffer by buffer:
// the same layer order, the same activation buffers (EditActs), the same scratch use (g_tmp added into g_a /
// g_xt / g_h). Dense products: cuBLAS in the handle's math mode; reductions: fixed-order kernels, so runs are
// bit-identical. Padding tokens (−100) read a zero row appended to a device copy of E (row V).
#include "edit/edit_model_cuda.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "kata_mqar_gemm.cuh"
#include "nn/edit_layers.hpp"
#include "nn/tied_ce.hpp"
#include "nn_edit_layers.cuh"
#include "nn_layers.cuh"
#include "nn_seq_layers.cuh"

namespace memcap::edit {

namespace cu = nn::cuda;
namespace mx = kata::mqar::cuda;

namespace {

struct Sizes {
  std::int64_t tokens = 1;
  std::size_t attn_ws = 1, col_scratch = 1;
  std::int64_t tile_rows = 1, tile_cols = 1;
};

Sizes sizes_of(const EditModelConfig& c, const std::vector<EditShape>& shapes, std::size_t elem) {
  c.validate();
  Sizes z;
  for (const auto& s : shapes) {
    require(s.B >= 1 && s.T >= 1, "edit model GPU shape B = {}, T = {} must be positive", s.B, s.T);
    z.tokens = std::max(z.tokens, s.B * s.T);
    z.attn_ws = std::max(z.attn_ws, mx::softmax_gemm_workspace_bytes(mx::HeadShape{s.B, s.T, 1, c.d}, elem));
  }
  z.col_scratch = std::max<std::size_t>(1, cu::seq_col_scratch_elems(z.tokens, c.d));
  cu::tied_ce_tile_shape(z.tokens, c.vocab, &z.tile_rows, &z.tile_cols);
  return z;
}

// Activation elements per token (the EditActs buffers, f_add included, and the compact rows of logits_at and
// the tail: 7 of width d, 3 scalars).
double per_token_elems(const EditModelConfig& c) {
  const double d = static_cast<double>(c.d), H = static_cast<double>(c.qk_hidden),
               hf = static_cast<double>(c.fact_hidden), R = static_cast<double>(c.rank);
  return 38 * d + 16 + 6 * H + 6 * hf + 2 * R;
}

// The part of the model after the fact expert, on some rows: ffn = mix(z, f, l), o = RMSNorm_γf(ffn), tied
// logits + CE. The full forward runs it on every row; the residual optimization on compact rows.
template <class T>
struct TailRows {
  T *f, *l, *z, *ffn, *alpha, *o, *rstdf, *g_o, *g_ffn, *g_z, *g_f, *g_l;
  const std::int32_t* targets;
};

}  // namespace

std::size_t edit_device_bytes(const EditModelConfig& c, const std::vector<EditShape>& shapes, std::size_t elem) {
  const Sizes z = sizes_of(c, shapes, elem);
  const double e = static_cast<double>(elem), d = static_cast<double>(c.d);
  const double n = static_cast<double>(edit_trainable_count(c)),
               nf = static_cast<double>(edit_frozen_layout(c).numel());
  const double tok = static_cast<double>(z.tokens);
  const double total = (4 * n + nf + (static_cast<double>(c.vocab) + 1) * d + d) * e + tok * per_token_elems(c) * e +
                       tok * 12 + static_cast<double>(z.tile_rows * z.tile_cols) * e + tok * 8 +
                       static_cast<double>(z.attn_ws) + static_cast<double>(z.col_scratch) * 8 + 65536;
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

void edit_batch_rows(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t N, std::int64_t V,
                     std::int32_t* emb_rows) {
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int32_t t = tokens[n];
    require(t == nn::kIgnoreLabel || (t >= 0 && t < V), "edit model: token {} at position {} is outside [0, {})", t, n,
            V);
    require(targets[n] == nn::kIgnoreLabel || (targets[n] >= 0 && targets[n] < V),
            "tied_logits_ce: target {} of row {} is outside [0, {}) and is not the ignore label {}", targets[n], n, V,
            nn::kIgnoreLabel);
    emb_rows[n] = t == nn::kIgnoreLabel ? static_cast<std::int32_t>(V) : t;
  }
}

template <class T>
struct EditDeviceModel<T>::Impl {
  const EditModelConfig c;
  gpu::Handles& hd;
  const gpu::Stream& s;
  cublasHandle_t blas;
  nn::ArenaLayout tl, fl;
  Sizes z;
  std::int64_t d, H, hf, R, V, n, nf;
  double rope_base, attn_scale;
  gpu::Tensor arena, frozen, epad, wf;  // params | grads | m | v; E | fact.*; [V+1, d] E with a zero row; 1/√d
  gpu::Tensor emb_rows, targets;
  gpu::Tensor x, h, rstd1;
  gpu::Tensor lnq, lnq_mean, lnq_rstd, preq, hq, qlin, q;
  gpu::Tensor lnk, lnk_mean, lnk_rstd, prek, hk, klin, k;
  gpu::Tensor a, lse_attn, xt, rstd_a, fu, fg, fh, f, rpre, rh, z_, alpha, mid, l, ffn, rstdf, o, losses, lse;
  gpu::Tensor argmax, loss_mean, n_valid, f_add;
  gpu::Tensor g_o, g_ffn, g_z, g_f, g_l, g_mid, g_rh, g_rpre, g_fh, g_fu, g_fg, g_xt, g_tmp, g_a;
  gpu::Tensor g_q, g_k, g_h, g_lin, g_hid, g_pre, g_ln;
  gpu::Tensor ce_tile, ce_row_sum, attn_ws, col_scratch;
  gpu::Tensor oc;                                                  // [N, d] the rows of logits_at
  gpu::Tensor cf, cl, cz, cadd, cfs, cffn, calpha, co, crstd, ctargets;  // the tail's compact rows
  std::int64_t f_add_tokens = 0;  // B·T of the shape f_add was set for (0: none)
  std::int64_t tail_rows = 0;     // rows of the last tail_capture

  Impl(const EditModelConfig& cfg, const std::vector<EditShape>& shapes, gpu::Handles& handles)
      : c(cfg),
        hd(handles),
        s(handles.stream()),
        blas(handles.blas()),
        tl(edit_trainable_layout(cfg)),
        fl(edit_frozen_layout(cfg)),
        d(cfg.d),
        H(cfg.qk_hidden),
        hf(cfg.fact_hidden),
        R(cfg.rank),
        V(cfg.vocab) {
    z = sizes_of(c, shapes, sizeof(T));
    n = tl.numel();
    nf = fl.numel();
    rope_base = nn::rope_base_for(d);
    attn_scale = 1.0 / std::sqrt(static_cast<double>(d));
    const gpu::DType dt = gpu::dtype_of<T>();
    const std::int64_t N = z.tokens;
    arena = gpu::Tensor({4 * n}, dt);
    frozen = gpu::Tensor({nf}, dt);
    epad = gpu::Tensor({(V + 1) * d}, dt);
    wf = gpu::Tensor({d}, dt);
    {
      const std::vector<T> w(static_cast<std::size_t>(d), static_cast<T>(1.0 / std::sqrt(static_cast<double>(d))));
      wf.upload(w.data(), s);
      s.synchronize();
    }
    emb_rows = gpu::Tensor({N}, gpu::DType::i32);
    targets = gpu::Tensor({N}, gpu::DType::i32);
    auto vec = [&](std::int64_t len) { return gpu::Tensor({std::max<std::int64_t>(len, 1)}, dt); };
    for (auto* t : {&x, &h, &lnq, &qlin, &q, &lnk, &klin, &k, &a, &xt, &f, &rpre, &rh, &l, &ffn, &o, &f_add})
      *t = vec(N * d);
    for (auto* t : {&rstd1, &lnq_mean, &lnq_rstd, &lnk_mean, &lnk_rstd, &lse_attn, &rstd_a, &z_, &alpha, &rstdf,
                    &losses, &lse, &g_z})
      *t = vec(N);
    for (auto* t : {&preq, &hq, &prek, &hk, &g_hid, &g_pre}) *t = vec(N * H);
    for (auto* t : {&fu, &fg, &fh, &g_fh, &g_fu, &g_fg}) *t = vec(N * hf);
    for (auto* t : {&oc, &cf, &cl, &cadd, &cfs, &cffn, &co}) *t = vec(N * d);
    for (auto* t : {&cz, &calpha, &crstd}) *t = vec(N);
    ctargets = gpu::Tensor({N}, gpu::DType::i32);
    mid = vec(N * R);
    g_mid = vec(N * R);
    for (auto* t : {&g_o, &g_ffn, &g_f, &g_l, &g_rh, &g_rpre, &g_xt, &g_tmp, &g_a, &g_q, &g_k, &g_h, &g_lin, &g_ln})
      *t = vec(N * d);
    argmax = gpu::Tensor({N}, gpu::DType::i32);
    loss_mean = gpu::Tensor({1}, gpu::DType::f64);
    n_valid = gpu::Tensor({1}, gpu::DType::i64);
    ce_tile = vec(z.tile_rows * z.tile_cols);
    ce_row_sum = gpu::Tensor({N}, gpu::DType::f64);
    attn_ws = gpu::Tensor({static_cast<std::int64_t>(z.attn_ws)}, gpu::DType::u8);
    col_scratch = gpu::Tensor({static_cast<std::int64_t>(z.col_scratch)}, gpu::DType::f64);
    s.synchronize();
  }

  T* base() const { return arena.data<T>(); }
  const T* P(const std::string& name) const { return base() + tl.view(name).offset; }
  T* G(const std::string& name) const { return base() + n + tl.view(name).offset; }
  const T* F(const std::string& name) const { return frozen.data<T>() + fl.view(name).offset; }
  static T* p(const gpu::Tensor& t) { return t.data<T>(); }
  double* scratch() const { return col_scratch.data<double>(); }
  cudaStream_t cs() const { return s.get(); }
  cu::TiedCeWorkspace<T> ce_ws() const {
    return cu::TiedCeWorkspace<T>{p(ce_tile), z.tile_rows, z.tile_cols, ce_row_sum.data<double>()};
  }
  mx::HeadShape head(const EditShape& sh) const { return mx::HeadShape{sh.B, sh.T, 1, d}; }

  void check_shape(const EditShape& sh) const {
    MEMCAP_ASSERT(sh.B >= 1 && sh.T >= 1 && sh.B * sh.T <= z.tokens,
                  "EditDeviceModel: shape larger than the buffers it was sized for");
  }

  TailRows<T> main_tail() const {
    return TailRows<T>{p(f), p(l), p(z_), p(ffn), p(alpha), p(o), p(rstdf), p(g_o), p(g_ffn), p(g_z), p(g_f), p(g_l),
                       targets.data<std::int32_t>()};
  }
  TailRows<T> compact_tail() const {
    return TailRows<T>{p(cfs), p(cl), p(cz), p(cffn), p(calpha), p(co), p(crstd), p(g_o), p(g_ffn), nullptr, p(g_f),
                       nullptr, ctargets.data<std::int32_t>()};
  }
  void tail_forward(const TailRows<T>& t, std::int64_t N) {
    cu::router_mix_forward<T>(t.ffn, t.alpha, t.z, t.f, t.l, N, d, cs());
    cu::rmsnorm_gain_forward<T>(t.o, t.rstdf, t.ffn, P("rmsf.g"), N, d, c.rms_eps, cs());
    cu::tied_logits_ce_forward<T>(p(losses), p(lse), argmax.data<std::int32_t>(), t.o, F("embed.E"), t.targets, N, V,
                                  d, loss_mean.data<double>(), n_valid.data<std::int64_t>(), ce_ws(), blas, cs());
  }
  // g_o, g_ffn, g_f (and g_z, g_l where given; the gain gradient when `gain_grad`) from the mean loss.
  void tail_backward(const TailRows<T>& t, std::int64_t N, bool gain_grad) {
    T* nog = nullptr;
    cu::tied_logits_ce_backward_mean<T>(t.g_o, nog, t.o, F("embed.E"), t.targets, p(lse), N, V, d, 1.0,
                                        n_valid.data<std::int64_t>(), ce_ws(), blas, cs());
    cu::rmsnorm_gain_backward<T>(t.g_ffn, gain_grad ? G("rmsf.g") : nog, t.g_o, t.ffn, P("rmsf.g"), t.rstdf, N, d,
                                 scratch(), cs());
    cu::router_mix_backward<T>(t.g_z, t.g_f, t.g_l, t.g_ffn, t.alpha, t.f, t.l, N, d, cs());
  }

  void logits_at(const std::int64_t* rows, const std::int32_t* tg, std::int64_t n) {
    MEMCAP_ASSERT(n >= 1 && n <= z.tokens, "EditDeviceModel::logits_at: row count outside the buffers");
    cu::gather_rows<T>(p(oc), p(o), rows, n, d, cs());
    cu::tied_logits_ce_forward<T>(p(losses), p(lse), argmax.data<std::int32_t>(), p(oc), F("embed.E"), tg, n, V, d,
                                  loss_mean.data<double>(), n_valid.data<std::int64_t>(), ce_ws(), blas, cs());
  }

  void tail_capture(const std::int64_t* rows, const std::int32_t* tg, std::int64_t n) {
    MEMCAP_ASSERT(n >= 1 && n <= z.tokens, "EditDeviceModel::tail_capture: row count outside the buffers");
    cu::gather_rows<T>(p(cf), p(f), rows, n, d, cs());
    cu::gather_rows<T>(p(cl), p(l), rows, n, d, cs());
    cu::gather_rows<T>(p(cz), p(z_), rows, n, 1, cs());
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(ctargets.raw(), tg, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                                      cudaMemcpyDeviceToDevice, cs()));
    tail_rows = n;
  }
  void compact_forward(std::int64_t n) {
    MEMCAP_ASSERT(n == tail_rows, "EditDeviceModel::tail_forward: not the row count of the last tail_capture");
    cu::residual_add<T>(p(cfs), p(cf), p(cadd), n * d, cs());
    tail_forward(compact_tail(), n);
  }
  void compact_backward(std::int64_t n) {
    MEMCAP_ASSERT(n == tail_rows, "EditDeviceModel::tail_backward: not the row count of the last tail_capture");
    tail_backward(compact_tail(), n, false);
  }

  void forward(const EditShape& sh, bool logits) {
    check_shape(sh);
    const std::int64_t B = sh.B, Tl = sh.T, N = B * Tl;
    cu::embedding_forward<T>(p(x), emb_rows.data<std::int32_t>(), p(epad), N, V + 1, d, cs());
    cu::rmsnorm_gain_forward<T>(p(h), p(rstd1), p(x), P("rms1.g"), N, d, c.rms_eps, cs());
    // Q and K projections: RoPE(W2 GELU(W1 LN(h) + b1) + b2)
    auto proj = [&](const std::string& pf, gpu::Tensor& ln, gpu::Tensor& mean, gpu::Tensor& rstd, gpu::Tensor& pre,
                    gpu::Tensor& hid, gpu::Tensor& lin, gpu::Tensor& out) {
      cu::layernorm_forward<T>(p(ln), p(mean), p(rstd), p(h), P(pf + ".ln.w"), P(pf + ".ln.b"), N, d, c.ln_eps, cs());
      cu::linear_forward<T>(p(pre), p(ln), P(pf + ".w1"), P(pf + ".b1"), N, d, H, blas, cs());
      cu::gelu_forward<T>(p(hid), p(pre), N * H, cs());
      cu::linear_forward<T>(p(lin), p(hid), P(pf + ".w2"), P(pf + ".b2"), N, H, d, blas, cs());
      cu::rope_forward<T>(p(out), p(lin), B, Tl, 1, d, rope_base, cs());
    };
    proj("q", lnq, lnq_mean, lnq_rstd, preq, hq, qlin, q);
    proj("k", lnk, lnk_mean, lnk_rstd, prek, hk, klin, k);
    // causal softmax attention, v = h, W_o = I (one head of width d)
    mx::softmax_heads_forward_gemm<T>(p(a), d, p(lse_attn), p(q), p(k), p(h), d, head(sh), attn_scale, blas,
                                      attn_ws.raw(), attn_ws.bytes(), cs());
    // fact expert on the unit-norm a: x̃ = rmsnorm(a)·(1/√d)
    cu::rmsnorm_gain_forward<T>(p(xt), p(rstd_a), p(a), p(wf), N, d, c.rms_eps, cs());
    cu::linear_forward<T>(p(fu), p(xt), F("fact.U"), F("fact.bU"), N, d, hf, blas, cs());
    cu::linear_forward<T>(p(fg), p(xt), F("fact.G"), F("fact.bG"), N, d, hf, blas, cs());
    cu::gated_forward<T>(p(fh), p(fu), p(fg), N * hf, c.fact_gate, cs());
    cu::linear_forward<T>(p(f), p(fh), F("fact.D"), F("fact.bD"), N, hf, d, blas, cs());
    if (f_add_tokens == N) cu::residual_add<T>(p(f), p(f), p(f_add), N * d, cs());
    // router on the pre-norm a, low-rank path, mix, RMSNorm_γf, tied logits + CE
    cu::linear_forward<T>(p(rpre), p(a), P("router.w1"), P("router.b1"), N, d, d, blas, cs());
    cu::gelu_forward<T>(p(rh), p(rpre), N * d, cs());
    cu::linear_forward<T>(p(z_), p(rh), P("router.w2"), P("router.b2"), N, d, 1, blas, cs());
    cu::lowrank_forward<T>(p(l), p(mid), p(a), P("lowrank.U"), P("lowrank.V"), N, d, R, blas, cs());
    if (logits) {
      tail_forward(main_tail(), N);
    } else {
      cu::router_mix_forward<T>(p(ffn), p(alpha), p(z_), p(f), p(l), N, d, cs());
      cu::rmsnorm_gain_forward<T>(p(o), p(rstdf), p(ffn), P("rmsf.g"), N, d, c.rms_eps, cs());
    }
  }

  void backward(const EditShape& sh) {
    check_shape(sh);
    const std::int64_t B = sh.B, Tl = sh.T, N = B * Tl;
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(base() + n, 0, static_cast<std::size_t>(n) * sizeof(T), cs()));  // grads
    T* nog = nullptr;
    tail_backward(main_tail(), N, true);
    // low-rank path -> g_a
    cu::lowrank_backward<T>(p(g_a), G("lowrank.U"), G("lowrank.V"), p(g_mid), p(g_l), p(a), p(mid), P("lowrank.U"),
                            P("lowrank.V"), N, d, R, blas, cs());
    // router -> g_tmp, added to g_a
    cu::linear_backward<T>(p(g_rh), G("router.w2"), G("router.b2"), p(g_z), p(rh), P("router.w2"), N, d, 1, blas, cs());
    cu::gelu_backward<T>(p(g_rpre), p(g_rh), p(rpre), N * d, cs());
    cu::linear_backward<T>(p(g_tmp), G("router.w1"), G("router.b1"), p(g_rpre), p(a), P("router.w1"), N, d, d, blas,
                           cs());
    cu::residual_add<T>(p(g_a), p(g_a), p(g_tmp), N * d, cs());
    // frozen fact expert (input gradient only) -> unit norm -> g_a
    cu::linear_backward<T>(p(g_fh), nog, nog, p(g_f), p(fh), F("fact.D"), N, hf, d, blas, cs());
    cu::gated_backward<T>(p(g_fu), p(g_fg), p(g_fh), p(fu), p(fg), N * hf, c.fact_gate, cs());
    cu::linear_backward<T>(p(g_xt), nog, nog, p(g_fu), p(xt), F("fact.U"), N, d, hf, blas, cs());
    cu::linear_backward<T>(p(g_tmp), nog, nog, p(g_fg), p(xt), F("fact.G"), N, d, hf, blas, cs());
    cu::residual_add<T>(p(g_xt), p(g_xt), p(g_tmp), N * d, cs());
    cu::rmsnorm_gain_backward<T>(p(g_tmp), nog, p(g_xt), p(a), p(wf), p(rstd_a), N, d, scratch(), cs());
    cu::residual_add<T>(p(g_a), p(g_a), p(g_tmp), N * d, cs());
    // attention: g_q, g_k, and g_h (through v = h)
    mx::softmax_heads_backward_gemm<T>(p(g_q), p(g_k), p(g_h), d, p(g_a), p(a), d, p(q), p(k), p(h), d, p(lse_attn),
                                       head(sh), attn_scale, blas, attn_ws.raw(), attn_ws.bytes(), cs());
    // Q and K projections back to h (added into g_h)
    auto proj_back = [&](const std::string& pf, gpu::Tensor& gout, gpu::Tensor& ln, gpu::Tensor& mean,
                         gpu::Tensor& rstd, gpu::Tensor& pre, gpu::Tensor& hid) {
      cu::rope_backward<T>(p(g_lin), p(gout), B, Tl, 1, d, rope_base, cs());
      cu::linear_backward<T>(p(g_hid), G(pf + ".w2"), G(pf + ".b2"), p(g_lin), p(hid), P(pf + ".w2"), N, H, d, blas,
                             cs());
      cu::gelu_backward<T>(p(g_pre), p(g_hid), p(pre), N * H, cs());
      cu::linear_backward<T>(p(g_ln), G(pf + ".w1"), G(pf + ".b1"), p(g_pre), p(ln), P(pf + ".w1"), N, d, H, blas,
                             cs());
      cu::layernorm_backward<T>(p(g_tmp), G(pf + ".ln.w"), G(pf + ".ln.b"), p(g_ln), p(h), P(pf + ".ln.w"), p(mean),
                                p(rstd), N, d, scratch(), cs());
      cu::residual_add<T>(p(g_h), p(g_h), p(g_tmp), N * d, cs());
    };
    proj_back("q", g_q, lnq, lnq_mean, lnq_rstd, preq, hq);
    proj_back("k", g_k, lnk, lnk_mean, lnk_rstd, prek, hk);
    // RMSNorm_γ1: only its gain is trainable (the embedding is frozen)
    cu::rmsnorm_gain_backward<T>(nog, G("rms1.g"), p(g_h), p(x), P("rms1.g"), p(rstd1), N, d, scratch(), cs());
  }
};

template <class T>
EditDeviceModel<T>::EditDeviceModel(const EditModelConfig& c, const std::vector<EditShape>& shapes, gpu::Handles& h)
    : cfg_(c), n_(edit_trainable_count(c)) {
  require(!shapes.empty(), "EditDeviceModel: no batch shape");
  impl_ = std::make_unique<Impl>(c, shapes, h);
  MEMCAP_ASSERT(impl_->n == n_, "EditDeviceModel: trainable layout and count disagree");
}

template <class T>
EditDeviceModel<T>::~EditDeviceModel() = default;

template <class T>
T* EditDeviceModel<T>::params() const {
  return impl_->base();
}
template <class T>
T* EditDeviceModel<T>::grads() const {
  return impl_->base() + n_;
}
template <class T>
T* EditDeviceModel<T>::adam_m() const {
  return impl_->base() + 2 * n_;
}
template <class T>
T* EditDeviceModel<T>::adam_v() const {
  return impl_->base() + 3 * n_;
}
template <class T>
T* EditDeviceModel<T>::frozen() const {
  return impl_->frozen.template data<T>();
}
template <class T>
std::int32_t* EditDeviceModel<T>::emb_rows() const {
  return impl_->emb_rows.template data<std::int32_t>();
}
template <class T>
std::int32_t* EditDeviceModel<T>::targets() const {
  return impl_->targets.template data<std::int32_t>();
}
template <class T>
double* EditDeviceModel<T>::loss_mean() const {
  return impl_->loss_mean.template data<double>();
}
template <class T>
std::int64_t* EditDeviceModel<T>::n_valid() const {
  return impl_->n_valid.template data<std::int64_t>();
}
template <class T>
T* EditDeviceModel<T>::losses() const {
  return impl_->losses.template data<T>();
}
template <class T>
std::int32_t* EditDeviceModel<T>::argmax() const {
  return impl_->argmax.template data<std::int32_t>();
}
template <class T>
T* EditDeviceModel<T>::g_f() const {
  return impl_->g_f.template data<T>();
}
template <class T>
T* EditDeviceModel<T>::fh() const {
  return impl_->fh.template data<T>();
}

template <class T>
void EditDeviceModel<T>::upload_params(const std::vector<double>& p) {
  require(static_cast<std::int64_t>(p.size()) == n_, "EditDeviceModel: {} trainable parameters for a model of {}",
          p.size(), n_);
  const std::vector<T> c(p.begin(), p.end());
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(params(), c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(adam_m(), 0, 2 * static_cast<std::size_t>(n_) * sizeof(T), s.get()));
  s.synchronize();
}

template <class T>
void EditDeviceModel<T>::upload_frozen(const std::vector<double>& f) {
  const std::int64_t nf = impl_->nf, V = cfg_.vocab, d = cfg_.d;
  require(static_cast<std::int64_t>(f.size()) == nf, "EditDeviceModel: {} frozen values for a model of {}", f.size(),
          nf);
  const std::vector<T> c(f.begin(), f.end());
  const gpu::Stream& s = impl_->s;
  T* fr = frozen();
  T* ep = impl_->epad.template data<T>();
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(fr, c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  // E is the first view of the frozen layout: the padded table is E followed by one zero row.
  MEMCAP_ASSERT(impl_->fl.view("embed.E").offset == 0, "EditDeviceModel: embed.E must open the frozen arena");
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(ep, fr, static_cast<std::size_t>(V * d) * sizeof(T), cudaMemcpyDeviceToDevice,
                                    s.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(ep + V * d, 0, static_cast<std::size_t>(d) * sizeof(T), s.get()));
  s.synchronize();
}

template <class T>
std::vector<double> EditDeviceModel<T>::download(int region) const {
  MEMCAP_ASSERT(region >= 0 && region < 4, "EditDeviceModel::download: region 0..3");
  std::vector<T> h(static_cast<std::size_t>(n_));
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(
      cudaMemcpyAsync(h.data(), impl_->base() + region * n_, h.size() * sizeof(T), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  return std::vector<double>(h.begin(), h.end());
}

template <class T>
EditShape EditDeviceModel<T>::upload_batch(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t B,
                                           std::int64_t Tlen) {
  const EditShape sh{B, Tlen};
  require(B >= 1 && Tlen >= 1, "edit model: batch {} x {} tokens must be positive", B, Tlen);
  impl_->check_shape(sh);
  const std::int64_t N = B * Tlen;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(N));
  edit_batch_rows(tokens, targets, N, cfg_.vocab, rows.data());
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(emb_rows(), rows.data(), rows.size() * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(this->targets(), targets, static_cast<std::size_t>(N) * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, s.get()));
  s.synchronize();
  return sh;
}

template <class T>
void EditDeviceModel<T>::set_f_add(const std::vector<double>& host, const EditShape& sh) {
  impl_->check_shape(sh);
  const std::int64_t N = sh.B * sh.T;
  require(static_cast<std::int64_t>(host.size()) == N * cfg_.d, "EditDeviceModel: f_add holds {} values, not {} x {}",
          host.size(), N, cfg_.d);
  const std::vector<T> c(host.begin(), host.end());
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(impl_->f_add.template data<T>(), c.data(), c.size() * sizeof(T),
                                    cudaMemcpyHostToDevice, s.get()));
  s.synchronize();
  impl_->f_add_tokens = N;
}


template <class T>
void EditDeviceModel<T>::clear_f_add() {
  impl_->f_add_tokens = 0;
}

template <class T>
void EditDeviceModel<T>::forward(const EditShape& s, bool logits) {
  impl_->forward(s, logits);
}
template <class T>
void EditDeviceModel<T>::logits_at(const std::int64_t* rows, const std::int32_t* targets, std::int64_t n) {
  impl_->logits_at(rows, targets, n);
}
template <class T>
void EditDeviceModel<T>::tail_capture(const std::int64_t* rows, const std::int32_t* targets, std::int64_t n) {
  impl_->tail_capture(rows, targets, n);
}
template <class T>
T* EditDeviceModel<T>::tail_add() const {
  return impl_->cadd.template data<T>();
}
template <class T>
void EditDeviceModel<T>::tail_forward(std::int64_t n) {
  impl_->compact_forward(n);
}
template <class T>
void EditDeviceModel<T>::tail_backward(std::int64_t n) {
  impl_->compact_backward(n);
}
template <class T>
void EditDeviceModel<T>::backward(const EditShape& s) {
  impl_->backward(s);
}

template <class T>
EditPromptEval<T>::EditPromptEval(const nn::EditSequences& seqs, std::int64_t vocab, std::int64_t batch,
                                  const gpu::Stream& s)
    : seqs_(seqs), s_(s), plan_(plan_prompt_rows(seqs, std::max<std::int64_t>(1, std::min(batch, seqs.S)))) {
  const std::int64_t ST = seqs.S * seqs.T, U = static_cast<std::int64_t>(plan_.row.size()), Tl = seqs.T;
  require(seqs.S >= 1 && U >= 1, "edit: no prompts to evaluate");
  std::vector<std::int32_t> rows(static_cast<std::size_t>(ST));
  edit_batch_rows(seqs.input_ids.data(), seqs.labels.data(), ST, vocab, rows.data());
  corpus_rows_ = gpu::Tensor({ST}, gpu::DType::i32);
  corpus_rows_.upload(rows.data(), s);
  // each distinct row relative to the first row of its batch
  std::vector<std::int64_t> local(static_cast<std::size_t>(U));
  const std::int64_t nb = static_cast<std::int64_t>(plan_.batch_begin.size()) - 1;
  for (std::int64_t k = 0; k < nb; ++k)
    for (std::int64_t u = plan_.batch_begin[static_cast<std::size_t>(k)]; u < plan_.batch_begin[static_cast<std::size_t>(k + 1)]; ++u)
      local[static_cast<std::size_t>(u)] = plan_.row[static_cast<std::size_t>(u)] - k * plan_.batch * Tl;
  rows_local_ = gpu::Tensor({U}, gpu::DType::i64);
  targets_ = gpu::Tensor({U}, gpu::DType::i32);
  rows_local_.upload(local.data(), s);
  targets_.upload(plan_.target.data(), s);
  out_ = std::make_unique<gpu::PinnedBuffer>(static_cast<std::size_t>(U) * (sizeof(T) + 4) + 16);
  s.synchronize();
}

template <class T>
EditPromptEval<T>::~EditPromptEval() = default;

template <class T>
std::size_t EditPromptEval<T>::device_bytes(const nn::EditSequences& seqs) {
  return static_cast<std::size_t>(seqs.S * seqs.T) * (4 + 12) + 4096;  // corpus rows; distinct rows, targets
}

template <class T>
PromptEval EditPromptEval<T>::run(EditDeviceModel<T>& dm) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t S = seqs_.S, Tl = seqs_.T, eb = plan_.batch, U = static_cast<std::int64_t>(plan_.row.size());
  cudaStream_t cs = s_.get();
  T* loss_h = out_->as<T>();
  std::int32_t* arg_h = out_->as<std::int32_t>(static_cast<std::size_t>(U) * sizeof(T));
  for (std::int64_t k = 0, s0 = 0; s0 < S; ++k, s0 += eb) {
    const std::int64_t B = std::min(eb, S - s0), N = B * Tl, r0 = s0 * Tl;
    const std::int64_t u0 = plan_.batch_begin[static_cast<std::size_t>(k)],
                       nu = plan_.batch_begin[static_cast<std::size_t>(k + 1)] - u0;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm.emb_rows(), corpus_rows_.data<std::int32_t>() + r0,
                                      static_cast<std::size_t>(N) * 4, cudaMemcpyDeviceToDevice, cs));
    dm.forward(EditShape{B, Tl}, false);
    if (nu == 0) continue;
    dm.logits_at(rows_local_.data<std::int64_t>() + u0, targets_.data<std::int32_t>() + u0, nu);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(loss_h + u0, dm.losses(), static_cast<std::size_t>(nu) * sizeof(T),
                                      cudaMemcpyDeviceToHost, cs));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(arg_h + u0, dm.argmax(), static_cast<std::size_t>(nu) * 4,
                                      cudaMemcpyDeviceToHost, cs));
  }
  s_.synchronize();
  PromptEval r = reduce_prompt_rows(plan_, loss_h, arg_h);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

template <class T>
double edit_loss_grad_cuda(const EditModel& model, const std::int32_t* tokens, const std::int32_t* targets,
                           std::int64_t B, std::int64_t Tlen, std::vector<double>* grad,
                           std::vector<std::int32_t>* argmax, const std::vector<double>* f_add, gpu::Handles& h) {
  EditDeviceModel<T> dm(model.config(), {EditShape{B, Tlen}}, h);
  dm.upload_params(model.trainable().params);
  dm.upload_frozen(model.frozen().params);
  const EditShape sh = dm.upload_batch(tokens, targets, B, Tlen);
  if (f_add && !f_add->empty()) dm.set_f_add(*f_add, sh);
  const gpu::Stream& s = h.stream();
  dm.forward(sh);
  if (grad) dm.backward(sh);
  double loss = 0;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dm.loss_mean(), sizeof loss, cudaMemcpyDeviceToHost, s.get()));
  if (argmax) {
    argmax->resize(static_cast<std::size_t>(B * Tlen));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(argmax->data(), dm.argmax(), argmax->size() * sizeof(std::int32_t),
                                      cudaMemcpyDeviceToHost, s.get()));
  }
  s.synchronize();
  if (grad) *grad = dm.download(1);
  return loss;
}

template class EditDeviceModel<float>;
template class EditDeviceModel<double>;
template class EditPromptEval<float>;
template class EditPromptEval<double>;
template double edit_loss_grad_cuda<float>(const EditModel&, const std::int32_t*, const std::int32_t*, std::int64_t,
                                           std::int64_t, std::vector<double>*, std::vector<std::int32_t>*,
                                           const std::vector<double>*, gpu::Handles&);
template double edit_loss_grad_cuda<double>(const EditModel&, const std::int32_t*, const std::int32_t*, std::int64_t,
                                            std::int64_t, std::vector<double>*, std::vector<std::int32_t>*,
                                            const std::vector<double>*, gpu::Handles&);

}  // namespace memcap::edit

#endif  // MEMCAP_HAVE_CUDA
