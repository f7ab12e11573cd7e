// MQAR model forward / backward on the GPU (mqar_model_cuda.hpp), mirroring mqar_model.cpp and
// mqar_layers.cpp buffer by buffer: the same residual stream, the same layer order, the same scratch
// reuse. Dense products: cuBLAS (exact fp32 / fp64, no TF32); reductions: fixed-order kernels, so runs
// are bit-identical.
#include "kata/mqar_model_cuda.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kata/mqar_ops.hpp"
#include "kata/mqar_task.hpp"
#include "kata_mqar_chunked.cuh"
#include "kata_mqar_gemm.cuh"
#include "kata_mqar_mixers.cuh"
#include "kata_mqar_psi_gemm.cuh"
#include "nn_edit_layers.cuh"  // GELU (the transformer backbone's MLP), RoPE
#include "nn_layers.cuh"
#include "nn_seq_layers.cuh"

namespace memcap::kata {

using detail::kBaseConvK;
using detail::kL2Eps;
using detail::kLnEps;
using detail::kMixerConvK;
using detail::kONormEps;
using detail::lname;
namespace cu = nn::cuda;
namespace mx = mqar::cuda;

namespace {

using cu::gemm_rm;

// Sequence lengths of the shapes that run a backward (trained = true) or only a forward.
std::vector<std::int64_t> lengths_of(const std::vector<MqarShape>& shapes, bool trained) {
  std::vector<std::int64_t> ts;
  for (const auto& s : shapes)
    if (s.backward == trained) ts.push_back(s.T);
  return ts;
}

MixerKernelPlan plan_of(const MqarModel& m, const std::string& want, const std::vector<MqarShape>& shapes) {
  return plan_mixer_kernels(m, want, lengths_of(shapes, true), lengths_of(shapes, false));
}

// Largest per-shape sizes.
struct Sizes {
  std::int64_t tokens = 1, labelled = 1;
  std::size_t mixer_ws = 0, embed_ws = 0, col_scratch = 1;
};

Sizes sizes_of(const MqarModel& m, const std::vector<MqarShape>& shapes, std::size_t elem, const MixerKernelPlan& kp) {
  Sizes z;
  const std::int64_t D = m.cfg.d_model, H = m.heads, dh = m.d_head;
  const MapParams mp = m.kind == MixerKind::softmax ? MapParams{} : m.map.params();
  for (const auto& s : shapes) {
    require(s.B >= 1 && s.T >= 1 && s.labelled >= 0, "MQAR GPU shape B = {}, T = {}, labelled = {}", s.B, s.T,
            s.labelled);
    const std::int64_t N = s.B * s.T;
    z.tokens = std::max(z.tokens, N);
    z.labelled = std::max(z.labelled, s.labelled);
    const mx::HeadShape hs{s.B, s.T, H, dh};
    const bool gemm = kp.at(s.T) == "gemm";
    std::size_t w = 0;
    if (kp.at(s.T) == "chunked-eval")
      w = mx::kata_chunked_workspace_bytes(mp, hs, elem);
    else if (kp.at(s.T) == "gemm-psi")
      w = mx::kata_psi_gemm_workspace_bytes(mp, hs, elem);
    else if (gemm && m.kind == MixerKind::softmax)
      w = mx::softmax_gemm_workspace_bytes(hs, elem);
    else if (gemm && m.kind == MixerKind::kata)
      w = mx::kata_gemm_workspace_bytes(mp, hs, elem);
    else if (gemm && mx::delta_gemm_applies(mp, hs, elem))
      w = mx::delta_gemm_workspace_bytes(mp, hs, elem);
    else if (m.kind == MixerKind::softmax)
      w = s.backward ? mx::softmax_heads_backward_workspace_bytes(hs, elem) : 0;
    else if (m.kind == MixerKind::kata)
      w = s.backward ? mx::kata_heads_backward_workspace_bytes(mp, hs, elem) : 0;
    else
      w = std::max(mx::delta_heads_forward_workspace_bytes(mp, hs, m.cfg.chunk, elem),
                   s.backward ? mx::delta_heads_backward_workspace_bytes(mp, hs, m.cfg.chunk, elem) : 0);
    z.mixer_ws = std::max(z.mixer_ws, w);
    z.embed_ws = std::max(z.embed_ws, cu::embedding_backward_workspace_bytes(N, m.cfg.vocab));
    z.col_scratch =
        std::max({z.col_scratch, cu::seq_col_scratch_elems(N, D * kMixerConvK), cu::seq_col_scratch_elems(N * H, dh),
                  cu::seq_col_scratch_elems(N, 3 * D), cu::seq_col_scratch_elems(N, 4 * D)});  // conv weights,
    // head norms, biases (W_qkv: 3D; the transformer backbone's fc1: 4D)
  }
  return z;
}

// Activation elements per token of one layer (the Layer buffers of MqarWorkspace) and of the rest.
double per_token_elems(const MqarModel& m) {
  const double D = static_cast<double>(m.cfg.d_model), H = static_cast<double>(m.heads);
  double e = 0;
  for (std::int64_t i = 0; i < m.cfg.n_layers; ++i) {
    e += 4 * D + 4;
    if (m.has_mlp()) e += 9 * D;  // fc1, act (4D each), fc2
    if (!m.is_mixer_layer(i))
      e += 2 * D;
    else if (m.kind == MixerKind::softmax)
      e += 4 * D + H;
    else {
      e += 8 * D + 2 * H;
      if (m.kind == MixerKind::delta) e += 2 * D + 3 * H;
    }
  }
  return e + 2 * D + 2 + 5 * D + 6 * D + H + (m.has_mlp() ? 4 * D : 0);  // s_final, lnf, stats; g_s..g_d, g_e,
  // g_f, g_g; g_m
}

}  // namespace

void mqar_labelled_rows(const std::int32_t* inputs, const std::int32_t* labels, std::int64_t N, std::int64_t V,
                        std::vector<std::int64_t>& rows, std::vector<std::int32_t>& targets) {
  rows.clear();
  targets.clear();
  for (std::int64_t n = 0; n < N; ++n) {
    require(inputs[n] >= 0 && inputs[n] < V, "embedding: token {} at position {} is outside the vocabulary [0, {})",
            inputs[n], n, V);
    if (labels[n] == kIgnoreLabel) continue;
    require(labels[n] >= 0 && labels[n] < V, "label {} at position {} is outside the vocabulary [0, {})", labels[n], n,
            V);
    rows.push_back(n);
    targets.push_back(labels[n]);
  }
}

std::size_t mqar_device_bytes(const MqarModel& m, const std::vector<MqarShape>& shapes, std::size_t elem,
                              const std::string& mixer_kernel) {
  const Sizes z = sizes_of(m, shapes, elem, plan_of(m, mixer_kernel, shapes));
  const double e = static_cast<double>(elem), D = static_cast<double>(m.cfg.d_model),
               V = static_cast<double>(m.cfg.vocab);
  const double total = 4 * static_cast<double>(m.param_count()) * e +
                       static_cast<double>(z.tokens) * per_token_elems(m) * e +
                       static_cast<double>(z.labelled) * (V + 2 * D + 1) * e + static_cast<double>(z.labelled) * 13 +
                       static_cast<double>(z.tokens) * 4 + static_cast<double>(z.mixer_ws) +
                       static_cast<double>(z.embed_ws) + static_cast<double>(z.col_scratch) * 8 + 65536;
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

template <class T>
struct MqarDeviceModel<T>::Impl {
  const MqarModel& m;
  gpu::Handles& h;
  const gpu::Stream& s;
  cublasHandle_t blas;
  MapParams map;
  Sizes z;
  std::int64_t D, V, H, dh;
  gpu::Tensor arena;  // params | grads | m | v
  gpu::Tensor tokens, rows, targets;
  struct Layer {
    gpu::Tensor s_in, ln1, ln1_mean, ln1_rstd, mid, ln2, ln2_mean, ln2_rstd;
    gpu::Tensor conv, proj, qkv, att, lse, qp, kp, vp, q, k, v, den, onorm, onorm_rstd, beta, qn, kn, q_rstd, k_rstd;
    gpu::Tensor fc1, act, fc2;  // transformer backbone: MLP pre-activation [N, 4D], GELU, output
  };
  std::vector<Layer> layers;
  gpu::Tensor s_final, lnf, lnf_mean, lnf_rstd;
  gpu::Tensor F, dF, logits, losses, correct, loss_mean, n_correct;
  gpu::Tensor g_s, g_a, g_b, g_c, g_d, g_e, g_f, g_g, g_m;
  gpu::Tensor mixer_ws, embed_ws, col_scratch;
  MixerKernelPlan kplan;  // mixer-core variant per sequence length; kplan.name for the results
  // The variant of the shape being run (set by forward / backward from kplan): tiled, gemm, gemm-psi (KATA) or
  // chunked-eval (KATA, forward only).
  enum class Core { tiled, gemm, psi, chunked } core = Core::tiled;
  void select_core(std::int64_t len) {
    const std::string& v = kplan.at(len);
    core = v == "gemm" ? Core::gemm : v == "gemm-psi" ? Core::psi : v == "chunked-eval" ? Core::chunked : Core::tiled;
  }

  Impl(const MqarModel& model, const std::vector<MqarShape>& shapes, gpu::Handles& handles, const std::string& want,
       bool tf32)
      : m(model),
        h(handles),
        s(handles.stream()),
        blas(handles.blas()),
        D(model.cfg.d_model),
        V(model.cfg.vocab),
        H(model.heads),
        dh(model.d_head) {
    require(!tf32 || sizeof(T) == 4, "MqarDeviceModel: TF32 applies to float only");
    MEMCAP_CUBLAS_CHECK(cublasSetMathMode(blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (m.kind != MixerKind::softmax) map = m.map.params();
    kplan = plan_of(m, want, shapes);
    z = sizes_of(m, shapes, sizeof(T), kplan);
    const gpu::DType dt = gpu::dtype_of<T>();
    const std::int64_t n = m.param_count(), N = z.tokens, L = z.labelled;
    arena = gpu::Tensor({4 * n}, dt);
    tokens = gpu::Tensor({N}, gpu::DType::i32);
    rows = gpu::Tensor({L}, gpu::DType::i64);
    targets = gpu::Tensor({L}, gpu::DType::i32);
    auto vec = [&](std::int64_t len) { return gpu::Tensor({std::max<std::int64_t>(len, 1)}, dt); };
    layers.resize(static_cast<std::size_t>(m.cfg.n_layers));
    for (std::int64_t i = 0; i < m.cfg.n_layers; ++i) {
      Layer& l = layers[static_cast<std::size_t>(i)];
      for (auto* t : {&l.s_in, &l.ln1, &l.mid, &l.ln2}) *t = vec(N * D);
      for (auto* t : {&l.ln1_mean, &l.ln1_rstd, &l.ln2_mean, &l.ln2_rstd}) *t = vec(N);
      if (m.has_mlp()) {
        l.fc1 = vec(4 * N * D);
        l.act = vec(4 * N * D);
        l.fc2 = vec(N * D);
      }
      if (!m.is_mixer_layer(i)) {
        l.conv = vec(N * D);
        l.proj = vec(N * D);
      } else if (m.kind == MixerKind::softmax) {
        l.qkv = vec(3 * N * D);
        l.att = vec(N * D);
        l.lse = vec(N * H);
      } else {
        for (auto* t : {&l.qp, &l.kp, &l.vp, &l.q, &l.k, &l.v, &l.att, &l.onorm}) *t = vec(N * D);
        l.den = vec(N * H);
        l.onorm_rstd = vec(N * H);
        if (m.kind == MixerKind::delta) {
          l.beta = vec(N * H);
          l.qn = vec(N * D);
          l.kn = vec(N * D);
          l.q_rstd = vec(N * H);
          l.k_rstd = vec(N * H);
        }
      }
    }
    s_final = vec(N * D);
    lnf = vec(N * D);
    lnf_mean = vec(N);
    lnf_rstd = vec(N);
    F = vec(L * D);
    dF = vec(L * D);
    logits = vec(L * V);
    losses = vec(L);
    correct = gpu::Tensor({L}, gpu::DType::u8);
    loss_mean = gpu::Tensor({1}, gpu::DType::f64);
    n_correct = gpu::Tensor({1}, gpu::DType::i64);
    for (auto* t : {&g_s, &g_a, &g_b, &g_c, &g_d}) *t = vec(N * D);
    g_e = vec(3 * N * D);
    g_f = vec(3 * N * D);
    g_g = vec(N * H);
    if (m.has_mlp()) g_m = vec(4 * N * D);
    mixer_ws = gpu::Tensor({static_cast<std::int64_t>(std::max<std::size_t>(z.mixer_ws, 1))}, gpu::DType::u8);
    embed_ws = gpu::Tensor({static_cast<std::int64_t>(std::max<std::size_t>(z.embed_ws, 1))}, gpu::DType::u8);
    col_scratch = gpu::Tensor({static_cast<std::int64_t>(z.col_scratch)}, gpu::DType::f64);
  }

  T* base() const { return arena.data<T>(); }
  const T* P(const std::string& name) const { return base() + m.layout.view(name).offset; }
  T* G(const std::string& name) const { return base() + m.param_count() + m.layout.view(name).offset; }
  const T* Pl(std::int64_t i, const char* t) const { return P(lname(i, t)); }
  T* Gl(std::int64_t i, const char* t) const { return G(lname(i, t)); }
  static T* d(const gpu::Tensor& t) { return t.data<T>(); }
  double* scratch() const { return col_scratch.data<double>(); }
  cudaStream_t cs() const { return s.get(); }

  // out[N,OC] = in Wᵀ + b
  void linear_fwd(T* out, const T* in, const T* W, const T* b, std::int64_t N, std::int64_t C, std::int64_t OC) {
    cu::linear_forward<T>(out, in, W, b, N, C, OC, blas, cs());
  }
  // din = dout W (overwritten, or added when accumulate; null skips); dW += doutᵀ in; db += Σ dout.
  void linear_bwd(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, std::int64_t N, std::int64_t C,
                  std::int64_t OC, bool accumulate = false) {
    if (din) gemm_rm(blas, false, false, N, C, OC, dout, W, din, accumulate ? 1.0 : 0.0);
    if (dW) gemm_rm(blas, true, false, OC, C, N, dout, in, dW, 1.0);
    if (db) cu::column_sums_add<T>(db, dout, N, OC, scratch(), cs());  // two-stage, deterministic
  }

  // The residual stream's next input adds this to mid (mqar_model.cpp's state_out).
  const T* state_out(const Layer& l) const { return m.has_mlp() ? d(l.fc2) : d(l.ln2); }

  // Transformer backbone: fc2 = GELU(LN2 W1ᵀ + b1) W2ᵀ + b2.
  void mlp_forward(std::int64_t i, Layer& l, std::int64_t N) {
    linear_fwd(d(l.fc1), d(l.ln2), Pl(i, "fc1.w"), Pl(i, "fc1.b"), N, D, 4 * D);
    cu::gelu_forward<T>(d(l.act), d(l.fc1), 4 * N * D, cs());
    linear_fwd(d(l.fc2), d(l.act), Pl(i, "fc2.w"), Pl(i, "fc2.b"), N, 4 * D, D);
  }
  // Its backward: dln2 (overwritten) from dout; parameter gradients added; dh in g_m.
  void mlp_backward(std::int64_t i, const Layer& l, const T* dout, T* dln2, std::int64_t N) {
    T* dh = d(g_m);
    linear_bwd(dh, Gl(i, "fc2.w"), Gl(i, "fc2.b"), dout, d(l.act), Pl(i, "fc2.w"), N, 4 * D, D);
    cu::gelu_backward<T>(dh, dh, d(l.fc1), 4 * N * D, cs());
    linear_bwd(dln2, Gl(i, "fc1.w"), Gl(i, "fc1.b"), dh, d(l.ln2), Pl(i, "fc1.w"), N, D, 4 * D);
  }

  void mixer_forward(std::int64_t i, Layer& l, const MqarShape& sh, T* y) {
    const std::int64_t B = sh.B, Tl = sh.T, N = B * Tl;
    const T* x = d(l.ln1);
    if (!m.is_mixer_layer(i)) {
      cu::causal_conv_forward<T>(d(l.conv), x, Pl(i, "conv.w"), Pl(i, "conv.b"), B, Tl, D, kBaseConvK, cs());
      linear_fwd(d(l.proj), x, Pl(i, "proj.w"), Pl(i, "proj.b"), N, D, D);
      cu::baseconv_gate_forward<T>(y, d(l.conv), d(l.proj), x, N * D, cs());
      return;
    }
    const mx::HeadShape hs{B, Tl, H, dh};
    if (m.kind == MixerKind::softmax) {
      linear_fwd(d(l.qkv), x, Pl(i, "wqkv.w"), Pl(i, "wqkv.b"), N, D, 3 * D);
      if (m.cfg.rope) {  // rotated q, k kept in l.qkv for the backward (mqar_layers.cpp)
        cu::rope_forward_ld<T>(d(l.qkv), d(l.qkv), 3 * D, B, Tl, H, dh, m.cfg.rope_base, cs());
        cu::rope_forward_ld<T>(d(l.qkv) + D, d(l.qkv) + D, 3 * D, B, Tl, H, dh, m.cfg.rope_base, cs());
      }
      const T* qkv = d(l.qkv);
      const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
      if (core == Core::gemm)
        mx::softmax_heads_forward_gemm<T>(d(l.att), D, d(l.lse), qkv, qkv + D, qkv + 2 * D, 3 * D, hs, scale, blas,
                                          mixer_ws.raw(), mixer_ws.bytes(), cs());
      else
        mx::softmax_heads_forward<T>(d(l.att), D, d(l.lse), qkv, qkv + D, qkv + 2 * D, 3 * D, hs, scale, cs());
      linear_fwd(y, d(l.att), Pl(i, "wo.w"), Pl(i, "wo.b"), N, D, D);
      return;
    }
    const T* nob = nullptr;
    linear_fwd(d(l.qp), x, Pl(i, "wq.w"), nob, N, D, D);
    linear_fwd(d(l.kp), x, Pl(i, "wk.w"), nob, N, D, D);
    linear_fwd(d(l.vp), x, Pl(i, "wv.w"), nob, N, D, D);
    cu::causal_conv_forward<T>(d(l.q), d(l.qp), Pl(i, "convq.w"), nob, B, Tl, D, kMixerConvK, cs());
    cu::causal_conv_forward<T>(d(l.k), d(l.kp), Pl(i, "convk.w"), nob, B, Tl, D, kMixerConvK, cs());
    cu::causal_conv_forward<T>(d(l.v), d(l.vp), Pl(i, "convv.w"), nob, B, Tl, D, kMixerConvK, cs());
    if (m.cfg.rope) {  // in place: the convs' backward reads their inputs (qp, kp), not q, k
      cu::rope_forward<T>(d(l.q), d(l.q), B, Tl, H, dh, m.cfg.rope_base, cs());
      cu::rope_forward<T>(d(l.k), d(l.k), B, Tl, H, dh, m.cfg.rope_base, cs());
    }
    if (m.kind == MixerKind::kata) {
      if (core == Core::chunked)  // forward-only lengths (plan_mixer_kernels)
        mx::kata_heads_forward_chunked<T>(d(l.att), D, d(l.den), map, d(l.q), d(l.k), d(l.v), D, hs, blas,
                                          mixer_ws.raw(), mixer_ws.bytes(), cs());
      else if (core == Core::psi)
        mx::kata_heads_forward_psi_gemm<T>(d(l.att), D, d(l.den), map, d(l.q), d(l.k), d(l.v), D, hs, blas,
                                           mixer_ws.raw(), mixer_ws.bytes(), cs());
      else if (core == Core::gemm)
        mx::kata_heads_forward_gemm<T>(d(l.att), D, d(l.den), map, d(l.q), d(l.k), d(l.v), D, hs, blas, mixer_ws.raw(),
                                       mixer_ws.bytes(), cs());
      else
        mx::kata_heads_forward<T>(d(l.att), D, d(l.den), map, d(l.q), d(l.k), d(l.v), D, hs, cs());
    } else {
      linear_fwd(d(l.beta), x, Pl(i, "wbeta.w"), nob, N, D, H);
      cu::sigmoid_forward<T>(d(l.beta), d(l.beta), N * H, cs());
      cu::l2norm_rows_forward<T>(d(l.qn), d(l.q_rstd), d(l.q), N * H, dh, kL2Eps, cs());
      cu::l2norm_rows_forward<T>(d(l.kn), d(l.k_rstd), d(l.k), N * H, dh, kL2Eps, cs());
      if (core == Core::gemm && mx::delta_gemm_applies(map, hs, sizeof(T)))  // kernel space up to kDeltaGemmMaxT tokens
        mx::delta_heads_forward_gemm<T>(d(l.att), D, map, d(l.qn), d(l.kn), d(l.v), D, d(l.beta), hs, blas,
                                        mixer_ws.raw(), mixer_ws.bytes(), cs());
      else
        mx::delta_heads_forward<T>(d(l.att), D, map, d(l.qn), d(l.kn), d(l.v), D, d(l.beta), hs, m.cfg.chunk,
                                   mixer_ws.raw(), cs());
    }
    cu::rmsnorm_gain_forward<T>(d(l.onorm), d(l.onorm_rstd), d(l.att), Pl(i, "onorm.w"), N * H, dh, kONormEps, cs());
    linear_fwd(y, d(l.onorm), Pl(i, "wo.w"), nob, N, D, D);
  }

  void mixer_backward(std::int64_t i, Layer& l, const MqarShape& sh, const T* dy, T* dx) {
    const std::int64_t B = sh.B, Tl = sh.T, N = B * Tl;
    const T* x = d(l.ln1);
    if (!m.is_mixer_layer(i)) {
      T* dconv = d(g_d);
      T* dproj = d(g_e);
      cu::baseconv_gate_backward<T>(dconv, dproj, dy, d(l.conv), d(l.proj), N * D, cs());
      cu::causal_conv_backward<T>(dx, Gl(i, "conv.w"), Gl(i, "conv.b"), dconv, x, Pl(i, "conv.w"), B, Tl, D, kBaseConvK,
                                  scratch(), cs());
      linear_bwd(dx, Gl(i, "proj.w"), Gl(i, "proj.b"), dproj, x, Pl(i, "proj.w"), N, D, D, true);
      cu::residual_add<T>(dx, dx, dy, N * D, cs());
      return;
    }
    const mx::HeadShape hs{B, Tl, H, dh};
    if (m.kind == MixerKind::softmax) {
      T* datt = d(g_d);
      T* dqkv = d(g_e);
      linear_bwd(datt, Gl(i, "wo.w"), Gl(i, "wo.b"), dy, d(l.att), Pl(i, "wo.w"), N, D, D);
      const T* qkv = d(l.qkv);
      const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
      if (core == Core::gemm)
        mx::softmax_heads_backward_gemm<T>(dqkv, dqkv + D, dqkv + 2 * D, 3 * D, datt, d(l.att), D, qkv, qkv + D,
                                           qkv + 2 * D, 3 * D, d(l.lse), hs, scale, blas, mixer_ws.raw(),
                                           mixer_ws.bytes(), cs());
      else
        mx::softmax_heads_backward<T>(dqkv, dqkv + D, dqkv + 2 * D, 3 * D, datt, d(l.att), D, qkv, qkv + D,
                                      qkv + 2 * D, 3 * D, d(l.lse), hs, scale, mixer_ws.raw(), cs());
      if (m.cfg.rope) {  // l.qkv holds the rotated q, k: rotate their gradients back
        cu::rope_backward_ld<T>(dqkv, dqkv, 3 * D, B, Tl, H, dh, m.cfg.rope_base, cs());
        cu::rope_backward_ld<T>(dqkv + D, dqkv + D, 3 * D, B, Tl, H, dh, m.cfg.rope_base, cs());
      }
      linear_bwd(dx, Gl(i, "wqkv.w"), Gl(i, "wqkv.b"), dqkv, x, Pl(i, "wqkv.w"), N, D, 3 * D);
      return;
    }
    T* donorm = d(g_d);
    T* datt = d(g_b);
    T* nog = nullptr;
    linear_bwd(donorm, Gl(i, "wo.w"), nog, dy, d(l.onorm), Pl(i, "wo.w"), N, D, D);
    cu::rmsnorm_gain_backward<T>(datt, Gl(i, "onorm.w"), donorm, d(l.att), Pl(i, "onorm.w"), d(l.onorm_rstd), N * H, dh,
                                 scratch(), cs());
    T* dq = d(g_e);
    T* dk = dq + N * D;
    T* dv = dk + N * D;
    T* dbeta = d(g_g);
    if (m.kind == MixerKind::kata) {
      if (core == Core::psi)
        mx::kata_heads_backward_psi_gemm<T>(dq, dk, dv, D, datt, d(l.att), D, map, d(l.q), d(l.k), d(l.v), D,
                                            d(l.den), hs, blas, mixer_ws.raw(), mixer_ws.bytes(), cs());
      else if (core == Core::gemm)
        mx::kata_heads_backward_gemm<T>(dq, dk, dv, D, datt, d(l.att), D, map, d(l.q), d(l.k), d(l.v), D, d(l.den), hs,
                                        blas, mixer_ws.raw(), mixer_ws.bytes(), cs());
      else
        mx::kata_heads_backward<T>(dq, dk, dv, D, datt, d(l.att), D, map, d(l.q), d(l.k), d(l.v), D, d(l.den), hs,
                                   mixer_ws.raw(), cs());
    } else {
      T* dqn = d(g_f);
      T* dkn = dqn + N * D;
      if (core == Core::gemm && mx::delta_gemm_applies(map, hs, sizeof(T)))
        mx::delta_heads_backward_gemm<T>(dqn, dkn, dv, D, dbeta, datt, D, map, d(l.qn), d(l.kn), d(l.v), D, d(l.beta),
                                         hs, blas, mixer_ws.raw(), mixer_ws.bytes(), cs());
      else
        mx::delta_heads_backward<T>(dqn, dkn, dv, D, dbeta, datt, D, map, d(l.qn), d(l.kn), d(l.v), D, d(l.beta), hs,
                                    m.cfg.chunk, mixer_ws.raw(), cs());
      cu::l2norm_rows_backward<T>(dq, dqn, d(l.q), d(l.q_rstd), N * H, dh, cs());
      cu::l2norm_rows_backward<T>(dk, dkn, d(l.k), d(l.k_rstd), N * H, dh, cs());
      cu::sigmoid_backward<T>(dbeta, dbeta, d(l.beta), N * H, cs());  // β = σ(z): dz = dβ β (1 − β)
    }
    if (m.cfg.rope) {  // the cores' dq, dk are with respect to the rotated q, k
      cu::rope_backward<T>(dq, dq, B, Tl, H, dh, m.cfg.rope_base, cs());
      cu::rope_backward<T>(dk, dk, B, Tl, H, dh, m.cfg.rope_base, cs());
    }
    T* dqp = d(g_f);
    T* dkp = dqp + N * D;
    T* dvp = dkp + N * D;
    cu::causal_conv_backward<T>(dqp, Gl(i, "convq.w"), nog, dq, d(l.qp), Pl(i, "convq.w"), B, Tl, D, kMixerConvK,
                                scratch(), cs());
    cu::causal_conv_backward<T>(dkp, Gl(i, "convk.w"), nog, dk, d(l.kp), Pl(i, "convk.w"), B, Tl, D, kMixerConvK,
                                scratch(), cs());
    cu::causal_conv_backward<T>(dvp, Gl(i, "convv.w"), nog, dv, d(l.vp), Pl(i, "convv.w"), B, Tl, D, kMixerConvK,
                                scratch(), cs());
    linear_bwd(dx, Gl(i, "wq.w"), nog, dqp, x, Pl(i, "wq.w"), N, D, D);
    linear_bwd(dx, Gl(i, "wk.w"), nog, dkp, x, Pl(i, "wk.w"), N, D, D, true);
    linear_bwd(dx, Gl(i, "wv.w"), nog, dvp, x, Pl(i, "wv.w"), N, D, D, true);
    if (m.kind == MixerKind::delta) linear_bwd(dx, Gl(i, "wbeta.w"), nog, dbeta, x, Pl(i, "wbeta.w"), N, D, H, true);
  }

  void check_shape(const MqarShape& sh) const {
    MEMCAP_ASSERT(sh.B * sh.T <= z.tokens && sh.labelled <= z.labelled,
                  "MqarDeviceModel: shape larger than the buffers it was sized for");
  }

  void forward(const MqarShape& sh, bool train) {
    check_shape(sh);
    select_core(sh.T);
    MEMCAP_ASSERT(!(train && core == Core::chunked),
                  "MqarDeviceModel: a training forward at a forward-only (chunked-eval) length");
    const std::int64_t N = sh.B * sh.T, nl = sh.labelled;
    cu::embedding_forward<T>(d(layers[0].s_in), tokens.data<std::int32_t>(), P("embed"), N, V, D, cs());
    for (std::int64_t i = 0; i < m.cfg.n_layers; ++i) {
      Layer& l = layers[static_cast<std::size_t>(i)];
      // each residual add is fused into the LayerNorm that reads its sum (one pass instead of two)
      if (i > 0) {
        const Layer& pl = layers[static_cast<std::size_t>(i - 1)];
        cu::add_layernorm_forward<T>(d(l.s_in), d(l.ln1), d(l.ln1_mean), d(l.ln1_rstd), d(pl.mid), state_out(pl),
                                     Pl(i, "norm1.w"), Pl(i, "norm1.b"), N, D, kLnEps, cs());
      } else {
        cu::layernorm_forward<T>(d(l.ln1), d(l.ln1_mean), d(l.ln1_rstd), d(l.s_in), Pl(i, "norm1.w"), Pl(i, "norm1.b"),
                                 N, D, kLnEps, cs());
      }
      mixer_forward(i, l, sh, d(l.mid));
      cu::add_layernorm_forward<T>(d(l.mid), d(l.ln2), d(l.ln2_mean), d(l.ln2_rstd), d(l.mid), d(l.s_in),
                                   Pl(i, "norm2.w"), Pl(i, "norm2.b"), N, D, kLnEps, cs());
      if (m.has_mlp()) mlp_forward(i, l, N);
    }
    const Layer& last = layers.back();
    cu::add_layernorm_forward<T>(d(s_final), d(lnf), d(lnf_mean), d(lnf_rstd), d(last.mid), state_out(last),
                                 P("normf.w"), P("normf.b"), N, D, kLnEps, cs());
    if (nl == 0) {
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(loss_mean.raw(), 0, sizeof(double), cs()));
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(n_correct.raw(), 0, sizeof(std::int64_t), cs()));
      return;
    }
    cu::gather_rows<T>(d(F), d(lnf), rows.data<std::int64_t>(), nl, D, cs());
    linear_fwd(d(logits), d(F), P("embed"), nullptr, nl, D, V);
    if (train)
      cu::cross_entropy_forward_backward<T>(d(logits), d(losses), d(logits), targets.data<std::int32_t>(), nl, V,
                                            correct.data<std::uint8_t>(), loss_mean.data<double>(),
                                            n_correct.data<std::int64_t>(), 1.0, cs());
    else
      cu::cross_entropy_forward<T>(d(losses), d(logits), targets.data<std::int32_t>(), nl, V,
                                   correct.data<std::uint8_t>(), loss_mean.data<double>(),
                                   n_correct.data<std::int64_t>(), cs());
  }

  void backward(const MqarShape& sh) {
    check_shape(sh);
    select_core(sh.T);
    MEMCAP_ASSERT(core != Core::chunked, "MqarDeviceModel: a backward at a forward-only length");
    const std::int64_t N = sh.B * sh.T, nl = sh.labelled, n = m.param_count();
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(base() + n, 0, static_cast<std::size_t>(n) * sizeof(T), cs()));  // grads
    T* dlnf = d(g_a);
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(dlnf, 0, static_cast<std::size_t>(N * D) * sizeof(T), cs()));
    if (nl > 0) {  // logits hold dlogits of the mean loss (the fused CE backward of the training forward)
      gemm_rm(blas, false, false, nl, D, V, d(logits), P("embed"), d(dF), 0.0);  // dF = dL E
      gemm_rm(blas, true, false, V, D, nl, d(logits), d(F), G("embed"), 1.0);    // dE += dLᵀ F
      cu::scatter_add_rows<T>(dlnf, rows.data<std::int64_t>(), d(dF), nl, D, cs());
    }
    T* ds = d(g_s);
    cu::layernorm_backward<T>(ds, G("normf.w"), G("normf.b"), dlnf, d(s_final), P("normf.w"), d(lnf_mean), d(lnf_rstd),
                              N, D, scratch(), cs());
    T* dmid = d(g_a);
    T* dln1 = d(g_c);
    for (std::int64_t i = m.cfg.n_layers - 1; i >= 0; --i) {
      Layer& l = layers[static_cast<std::size_t>(i)];
      // dmid = ds + LN2's input gradient; ds = dmid + LN1's (the residual adds fused into the LayerNorm backward);
      // LN2's output gradient: ds (Identity state mixer) or the MLP's input gradient (transformer backbone)
      const T* dln2 = ds;
      if (m.has_mlp()) {
        mlp_backward(i, l, ds, dln1, N);  // dln1 is free until the mixer's backward
        dln2 = dln1;
      }
      cu::layernorm_backward_add<T>(dmid, Gl(i, "norm2.w"), Gl(i, "norm2.b"), ds, dln2, d(l.mid), Pl(i, "norm2.w"),
                                    d(l.ln2_mean), d(l.ln2_rstd), N, D, scratch(), cs());
      mixer_backward(i, l, sh, dmid, dln1);
      cu::layernorm_backward_add<T>(ds, Gl(i, "norm1.w"), Gl(i, "norm1.b"), dmid, dln1, d(l.s_in), Pl(i, "norm1.w"),
                                    d(l.ln1_mean), d(l.ln1_rstd), N, D, scratch(), cs());
    }
    cu::embedding_backward<T>(G("embed"), tokens.data<std::int32_t>(), ds, N, V, D, embed_ws.raw(), embed_ws.bytes(),
                              cs());
  }
};

template <class T>
MqarDeviceModel<T>::MqarDeviceModel(const MqarModel& model, const std::vector<MqarShape>& shapes, gpu::Handles& h,
                                    const std::string& mixer_kernel, bool tf32)
    : model_(model), n_(model.param_count()) {
  require(!shapes.empty(), "MqarDeviceModel: no batch shape");
  model.cfg.require_cuda_support();  // the gated mixers have no device path yet
  impl_ = std::make_unique<Impl>(model, shapes, h, mixer_kernel, tf32);
}

template <class T>
const std::string& MqarDeviceModel<T>::mixer_kernel() const {
  return impl_->kplan.name;
}

template <class T>
MqarDeviceModel<T>::~MqarDeviceModel() = default;

template <class T>
T* MqarDeviceModel<T>::params() const {
  return impl_->base();
}
template <class T>
T* MqarDeviceModel<T>::grads() const {
  return impl_->base() + n_;
}
template <class T>
T* MqarDeviceModel<T>::adam_m() const {
  return impl_->base() + 2 * n_;
}
template <class T>
T* MqarDeviceModel<T>::adam_v() const {
  return impl_->base() + 3 * n_;
}
template <class T>
std::int32_t* MqarDeviceModel<T>::tokens() const {
  return impl_->tokens.template data<std::int32_t>();
}
template <class T>
std::int64_t* MqarDeviceModel<T>::rows() const {
  return impl_->rows.template data<std::int64_t>();
}
template <class T>
std::int32_t* MqarDeviceModel<T>::targets() const {
  return impl_->targets.template data<std::int32_t>();
}
template <class T>
double* MqarDeviceModel<T>::loss_mean() const {
  return impl_->loss_mean.template data<double>();
}
template <class T>
std::int64_t* MqarDeviceModel<T>::n_correct() const {
  return impl_->n_correct.template data<std::int64_t>();
}

template <class T>
void MqarDeviceModel<T>::upload_params(const std::vector<double>& p) {
  require(static_cast<std::int64_t>(p.size()) == n_, "MqarDeviceModel: {} parameters for a model of {}", p.size(), n_);
  const std::vector<T> c(p.begin(), p.end());
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(params(), c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(adam_m(), 0, 2 * static_cast<std::size_t>(n_) * sizeof(T), s.get()));
  s.synchronize();
}

template <class T>
std::vector<double> MqarDeviceModel<T>::download(int region) const {
  MEMCAP_ASSERT(region >= 0 && region < 4, "MqarDeviceModel::download: region 0..3");
  std::vector<T> h(static_cast<std::size_t>(n_));
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(
      cudaMemcpyAsync(h.data(), impl_->base() + region * n_, h.size() * sizeof(T), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  return std::vector<double>(h.begin(), h.end());
}

template <class T>
MqarShape MqarDeviceModel<T>::upload_batch(const std::int32_t* inputs, const std::int32_t* labels, std::int64_t B,
                                           std::int64_t Tlen) {
  std::vector<std::int64_t> rows;
  std::vector<std::int32_t> targets;
  mqar_labelled_rows(inputs, labels, B * Tlen, model_.cfg.vocab, rows, targets);
  const MqarShape sh{B, Tlen, static_cast<std::int64_t>(rows.size())};
  impl_->check_shape(sh);
  const gpu::Stream& s = impl_->s;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(tokens(), inputs, static_cast<std::size_t>(B * Tlen) * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, s.get()));
  if (!rows.empty()) {
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(this->rows(), rows.data(), rows.size() * sizeof(std::int64_t),
                                      cudaMemcpyHostToDevice, s.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(this->targets(), targets.data(), targets.size() * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, s.get()));
  }
  s.synchronize();
  return sh;
}

template <class T>
void MqarDeviceModel<T>::forward(const MqarShape& s, bool train) {
  impl_->forward(s, train);
}
template <class T>
void MqarDeviceModel<T>::backward(const MqarShape& s) {
  impl_->backward(s);
}

template <class T>
MqarForward mqar_loss_grad_cuda(const MqarModel& model, const std::vector<double>& params, const std::int32_t* inputs,
                                const std::int32_t* labels, std::int64_t B, std::int64_t Tlen,
                                std::vector<double>* grad, gpu::Handles& h, const std::string& mixer_kernel) {
  std::vector<std::int64_t> rows;
  std::vector<std::int32_t> targets;
  mqar_labelled_rows(inputs, labels, B * Tlen, model.cfg.vocab, rows, targets);
  MqarDeviceModel<T> dm(model, {MqarShape{B, Tlen, static_cast<std::int64_t>(rows.size()), grad != nullptr}}, h,
                        mixer_kernel);
  dm.upload_params(params);
  const MqarShape sh = dm.upload_batch(inputs, labels, B, Tlen);
  const gpu::Stream& s = h.stream();
  dm.forward(sh, grad != nullptr);
  if (grad) dm.backward(sh);
  double loss = 0;
  std::int64_t correct = 0;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dm.loss_mean(), sizeof loss, cudaMemcpyDeviceToHost, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&correct, dm.n_correct(), sizeof correct, cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  MqarForward r;
  r.labelled = sh.labelled;
  r.loss_sum = loss * static_cast<double>(sh.labelled);
  r.correct = correct;
  if (grad) *grad = dm.download(1);
  return r;
}

template class MqarDeviceModel<float>;
template class MqarDeviceModel<double>;
template MqarForward mqar_loss_grad_cuda<float>(const MqarModel&, const std::vector<double>&, const std::int32_t*,
                                                const std::int32_t*, std::int64_t, std::int64_t, std::vector<double>*,
                                                gpu::Handles&, const std::string&);
template MqarForward mqar_loss_grad_cuda<double>(const MqarModel&, const std::vector<double>&, const std::int32_t*,
                                                 const std::int32_t*, std::int64_t, std::int64_t, std::vector<double>*,
                                                 gpu::Handles&, const std::string&);

}  // namespace memcap::kata

#endif  // MEMCAP_HAVE_CUDA
