// GPU trainer of the SSFR block (nn/ssfr_train.hpp), the same function as train_ssfr_cpu on the
// same batches: the sequences come from the same counter-based draws (kernels/nn_ssfr.cu), the
// initial weights from ssfr_init_params. The attention moves W_k and W_v off the tokens: with
// H = RMSNorm(E_in) (constant), q·k_t = q·(W_k h_t) = (q W_k)·h_t and Σ_t α_t v_t = W_v Σ_t α_t h_t,
// so the query attention runs on gathered rows of H alone (nn::cuda::attention_query_forward with
// q̃ = q W_k, K = V = H: O(B·T·d) instead of GEMMs over all |V| vocabulary rows), ctx = c W_vᵀ, and
// the backward needs no scatter onto vocabulary rows: dW_k = qᵀ g, dq = g W_kᵀ (g = ∂L/∂q̃), dW_v =
// dctxᵀ c. Every reduction is a cuBLAS GEMM or a fixed-order kernel: runs are bit-identical. One training step
// (batch draw, forward, backward, AdamW) is captured once as a CUDA graph; the step counter, the
// AdamW scalars and the loss history live on the device (nn_train_state.cuh), so the host syncs
// only at the evaluations (every eval_every steps). float32 (default; the MLP is cast to float32
// like the released code, exact fp32 GEMMs, no TF32) or float64.
#include "nn/ssfr_train.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/rng.hpp"
#include "nn_layers.cuh"
#include "nn_softmax_ce_fused.cuh"
#include "nn_ssfr.cuh"
#include "nn_train_state.cuh"

namespace memcap::nn {

namespace {

namespace cu = nn::cuda;
using gpu::DType;
using gpu::Tensor;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using cu::gemm_rm;

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
Tensor upload(const std::vector<double>& host, const gpu::Stream& s) {
  Tensor t({static_cast<std::int64_t>(std::max<std::size_t>(host.size(), 1))}, gpu::dtype_of<T>());
  if (!host.empty()) {
    const std::vector<T> c = cast<T>(host);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(t.raw(), c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, s.get()));
    s.synchronize();  // c goes out of scope
  }
  return t;
}

Tensor upload_i32(const std::vector<std::int32_t>& host, const gpu::Stream& s) {
  Tensor t({static_cast<std::int64_t>(host.size())}, DType::i32);
  t.upload(host.data(), s);
  s.synchronize();
  return t;
}

template <class T>
struct DevMlp {
  bool identity = true;
  std::int64_t m = 0;
  Activation gate = Activation::identity;
  Tensor A, G, B, bu, bg, bo;
  const T* ptr(const Tensor& t, bool has) const { return has ? t.data<T>() : nullptr; }
  bool has_bu = false, has_bg = false, has_bo = false;

  DevMlp(const FrozenMlp& f, const gpu::Stream& s) : identity(f.identity()), m(f.m), gate(f.gate) {
    if (identity) return;
    A = upload<T>(f.A, s);
    G = upload<T>(f.G, s);
    B = upload<T>(f.B, s);
    has_bu = !f.bias_up.empty();
    has_bg = !f.bias_gate.empty();
    has_bo = !f.bias_out.empty();
    if (has_bu) bu = upload<T>(f.bias_up, s);
    if (has_bg) bg = upload<T>(f.bias_gate, s);
    if (has_bo) bo = upload<T>(f.bias_out, s);
  }
};

std::size_t bytes_of(const SsfrTask& task, std::int64_t dim, std::int64_t width, std::int64_t B, std::int64_t steps,
                     std::size_t el) {
  const double d = static_cast<double>(dim), V = static_cast<double>(task.vocab()),
               Tn = static_cast<double>(task.seq_len), b = static_cast<double>(B), m = static_cast<double>(width);
  const double elems = 3 * V * d + 4 * 4 * d * d + b * (19 * d + 5 * m + V + 2 * Tn + 2) +
                       2 * (3 * m * d + 2 * m + d);
  const double ints = b * (Tn + 3) + 2 * static_cast<double>(task.facts);
  const double total = elems * static_cast<double>(el) + 4 * ints + 16 * static_cast<double>(steps) + 4096;
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

// Device state of one SSFR training (buffers allocated once; see the file comment for the layout).
template <class T>
struct SsfrDevice {
  const SsfrProblem& p;
  const gpu::Stream& s;
  cublasHandle_t blas;
  ArenaLayout layout;
  std::int64_t d, V, Tn, B, n;
  bool vo, res;
  Tensor Ein, Eout, H, map_a, map_b;
  DevMlp<T> mlp_a, mlp_b;
  Tensor params, grads, m1, m2;
  Tensor tokens, len, qrow, target;
  Tensor hq, xq, q, qt, cv, g, ctx, attn, z, u, y, o, d_o, d_y, d_u, d_z, d_ctx, d_c, d_q;
  Tensor att, ds;
  Tensor ma, mg, mh, dma, dmg;
  Tensor logits, losses, correct, loss_mean, n_correct;
  Tensor state, sched, hist_loss, hist_correct, acc_loss, acc_correct;

  T* P(const char* name) const { return params.data<T>() + layout.view(name).offset; }
  T* Gr(const char* name) const { return grads.data<T>() + layout.view(name).offset; }
  cu::TrainState* st() const { return static_cast<cu::TrainState*>(state.raw()); }

  SsfrDevice(const SsfrProblem& prob, std::int64_t batch, std::int64_t steps, const gpu::Stream& stream,
             cublasHandle_t h)
      : p(prob), s(stream), blas(h), layout(ssfr_layout(prob.block)), d(prob.block.dim), V(prob.task.vocab()),
        Tn(prob.task.seq_len), B(batch), n(layout.numel()), vo(prob.block.vo_trainable),
        res(prob.block.attn_residual), mlp_a(prob.mlp_a, stream), mlp_b(prob.mlp_b, stream) {
    const DType dt = gpu::dtype_of<T>();
    std::vector<double> Hh(static_cast<std::size_t>(V * d));
    cpu::rmsnorm_forward(Hh.data(), p.embed_in.data(), V, d, kSsfrNormEps);  // in float64, then cast
    Ein = upload<T>(p.embed_in, s);
    Eout = upload<T>(p.embed_out, s);
    H = upload<T>(Hh, s);
    map_a = upload_i32(p.map_a, s);
    map_b = upload_i32(p.map_b, s);
    for (Tensor* t : {&params, &grads, &m1, &m2}) *t = Tensor({n}, dt);
    tokens = Tensor({B, Tn}, DType::i32);
    for (Tensor* t : {&len, &qrow, &target}) *t = Tensor({B}, DType::i32);
    for (Tensor* t : {&hq, &xq, &q, &qt, &cv, &g, &ctx, &attn, &z, &u, &y, &o, &d_o, &d_y, &d_u, &d_z, &d_ctx, &d_c,
                      &d_q})
      *t = Tensor({B, d}, dt);
    logits = Tensor({B, V}, dt);
    for (Tensor* t : {&att, &ds}) *t = Tensor({B, Tn}, dt);
    const std::int64_t m = std::max<std::int64_t>(std::max(p.mlp_a.m, p.mlp_b.m), 1);
    for (Tensor* t : {&ma, &mg, &mh, &dma, &dmg}) *t = Tensor({B, m}, dt);
    losses = Tensor({B}, dt);
    correct = Tensor({B}, DType::u8);
    loss_mean = Tensor({1}, DType::f64);
    n_correct = Tensor({1}, DType::i64);
    state = Tensor({static_cast<std::int64_t>(sizeof(cu::TrainState))}, DType::u8);
    sched = Tensor({static_cast<std::int64_t>(std::max<std::int64_t>(steps, 1) * sizeof(cu::AdamScalars))}, DType::u8);
    hist_loss = Tensor({std::max<std::int64_t>(steps, 1)}, DType::f64);
    hist_correct = Tensor({std::max<std::int64_t>(steps, 1)}, DType::i64);
    acc_loss = Tensor({1}, DType::f64);
    acc_correct = Tensor({1}, DType::i64);
  }

  void upload_params(const std::vector<double>& host) {
    const std::vector<T> c = cast<T>(host);
    params.upload(c.data(), s);
    m1.fill_zero(s);
    m2.fill_zero(s);
    s.synchronize();
  }
  // A checkpoint's weights and AdamW moments.
  void upload_state(const SsfrCheckpoint& ck) {
    const std::vector<T> c = cast<T>(ck.params), a = cast<T>(ck.adam_m), b = cast<T>(ck.adam_v);
    params.upload(c.data(), s);
    m1.upload(a.data(), s);
    m2.upload(b.data(), s);
    s.synchronize();
  }
  std::vector<double> download(const Tensor& t, std::int64_t count) const {
    std::vector<T> h(static_cast<std::size_t>(count));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(h.data(), t.raw(), h.size() * sizeof(T), cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    return std::vector<double>(h.begin(), h.end());
  }

  // Draws the batch, runs the forward at Q; train: loss, accuracy and dlogits (in place) recorded
  // under the gate; eval: loss and correct count added to the accumulators.
  void forward(const Tensor& map, const DevMlp<T>& mlp, std::uint64_t stream_id, std::uint64_t batch,
               const cu::TrainState* batch_from_state, bool train, cu::TrainState* gate) {
    cudaStream_t cs = s.get();
    cu::ssfr_batch(tokens.data<std::int32_t>(), len.data<std::int32_t>(), qrow.data<std::int32_t>(),
                   target.data<std::int32_t>(), map.data<std::int32_t>(), p.task.dims(), seed, stream_id, batch,
                   batch_from_state, B, cs);
    cu::ssfr_gather_rows<T>(hq.data<T>(), H.data<T>(), qrow.data<std::int32_t>(), B, d, cs);
    if (res) cu::ssfr_gather_rows<T>(xq.data<T>(), Ein.data<T>(), qrow.data<std::int32_t>(), B, d, cs);
    gemm_rm(blas, false, true, B, d, d, hq.data<T>(), P("W_q"), q.data<T>(), 0.0);
    gemm_rm(blas, false, false, B, d, d, q.data<T>(), P("W_k"), qt.data<T>(), 0.0);  // q̃ = q W_k
    // c = Σ_t α_t h_t (ctx itself when W_v = I), α = softmax_t(q̃·h_t/√d) over t ≤ Q.
    cu::attention_query_forward<T>(vo ? cv.data<T>() : ctx.data<T>(), att.data<T>(), qt.data<T>(), H.data<T>(),
                                   H.data<T>(), tokens.data<std::int32_t>(), len.data<std::int32_t>(), B, Tn, d, cs);
    if (vo) gemm_rm(blas, false, true, B, d, d, cv.data<T>(), P("W_v"), ctx.data<T>(), 0.0);  // ctx = c W_vᵀ
    if (vo) gemm_rm(blas, false, true, B, d, d, ctx.data<T>(), P("W_o"), attn.data<T>(), 0.0);
    cu::ssfr_l2norm_forward<T>(u.data<T>(), nullptr, z.data<T>(), a_ptr(), res ? xq.data<T>() : nullptr, B, d,
                               kSsfrNormEps, cs);
    if (!mlp.identity) {
      const std::int64_t m = mlp.m;
      cu::linear_forward<T>(ma.data<T>(), u.data<T>(), mlp.A.template data<T>(), mlp.ptr(mlp.bu, mlp.has_bu), B, d, m,
                            blas, cs);
      cu::linear_forward<T>(mg.data<T>(), u.data<T>(), mlp.G.template data<T>(), mlp.ptr(mlp.bg, mlp.has_bg), B, d, m,
                            blas, cs);
      cu::gated_forward<T>(mh.data<T>(), ma.data<T>(), mg.data<T>(), B * m, mlp.gate, cs);
      cu::linear_forward<T>(y.data<T>(), mh.data<T>(), mlp.B.template data<T>(), mlp.ptr(mlp.bo, mlp.has_bo), B, m, d,
                            blas, cs);
    }
    cu::ssfr_l2norm_forward<T>(o.data<T>(), nullptr, nullptr, y_ptr(mlp), nullptr, B, d, kSsfrNormEps, cs);
    gemm_rm(blas, false, true, B, V, d, o.data<T>(), Eout.data<T>(), logits.data<T>(), 0.0);
    if (train) {
      cu::cross_entropy_forward_backward<T>(logits.data<T>(), losses.data<T>(), logits.data<T>(),
                                            target.data<std::int32_t>(), B, V, correct.data<std::uint8_t>(),
                                            loss_mean.data<double>(), n_correct.data<std::int64_t>(), 1.0, cs);
      cu::record_loss_parts(loss_mean.data<double>(), 1, 1.0, n_correct.data<std::int64_t>(), gate,
                            hist_loss.data<double>(), reinterpret_cast<long long*>(hist_correct.data<std::int64_t>()),
                            cs);
    } else {
      cu::cross_entropy_forward<T>(losses.data<T>(), logits.data<T>(), target.data<std::int32_t>(), B, V,
                                   correct.data<std::uint8_t>(), loss_mean.data<double>(),
                                   n_correct.data<std::int64_t>(), cs);
      cu::ssfr_accumulate(acc_loss.data<double>(), reinterpret_cast<long long*>(acc_correct.data<std::int64_t>()),
                          loss_mean.data<double>(), n_correct.data<std::int64_t>(), cs);
    }
  }

  const T* a_ptr() const { return vo ? attn.data<T>() : ctx.data<T>(); }          // attention output
  const T* z_ptr() const { return res ? z.data<T>() : a_ptr(); }                   // input of the first norm
  const T* y_ptr(const DevMlp<T>& mlp) const { return mlp.identity ? u.data<T>() : y.data<T>(); }

  // Gradients (overwritten) of the mean CE of the last training forward (dlogits in `logits`).
  void backward(const DevMlp<T>& mlp) {
    cudaStream_t cs = s.get();
    gemm_rm(blas, false, false, B, d, V, logits.data<T>(), Eout.data<T>(), d_o.data<T>(), 0.0);
    cu::ssfr_l2norm_backward<T>(d_y.data<T>(), d_o.data<T>(), y_ptr(mlp), B, d, kSsfrNormEps, cs);
    const T* du = d_y.data<T>();
    if (!mlp.identity) {
      const std::int64_t m = mlp.m;
      gemm_rm(blas, false, false, B, m, d, d_y.data<T>(), mlp.B.template data<T>(), dma.data<T>(), 0.0);  // dh
      cu::gated_backward<T>(dma.data<T>(), dmg.data<T>(), dma.data<T>(), ma.data<T>(), mg.data<T>(), B * m, mlp.gate,
                            cs);
      gemm_rm(blas, false, false, B, d, m, dma.data<T>(), mlp.A.template data<T>(), d_u.data<T>(), 0.0);
      gemm_rm(blas, false, false, B, d, m, dmg.data<T>(), mlp.G.template data<T>(), d_u.data<T>(), 1.0);
      du = d_u.data<T>();
    }
    cu::ssfr_l2norm_backward<T>(d_z.data<T>(), du, z_ptr(), B, d, kSsfrNormEps, cs);
    const T* dctx = d_z.data<T>();
    if (vo) {
      gemm_rm(blas, false, false, B, d, d, d_z.data<T>(), P("W_o"), d_ctx.data<T>(), 0.0);
      gemm_rm(blas, true, false, d, d, B, d_z.data<T>(), ctx.data<T>(), Gr("W_o"), 0.0);
      dctx = d_ctx.data<T>();
    }
    const T* dc = dctx;
    if (vo) {
      gemm_rm(blas, true, false, d, d, B, dctx, cv.data<T>(), Gr("W_v"), 0.0);        // dW_v = dctxᵀ c
      gemm_rm(blas, false, false, B, d, d, dctx, P("W_v"), d_c.data<T>(), 0.0);       // dc = dctx W_v
      dc = d_c.data<T>();
    }
    // g = ∂L/∂q̃ = Σ_t ds_t h_t; then dq = g W_kᵀ, dW_k = qᵀ g, dW_q = dqᵀ hq.
    cu::attention_query_backward<T>(g.data<T>(), ds.data<T>(), dc, att.data<T>(), H.data<T>(), H.data<T>(),
                                    tokens.data<std::int32_t>(), len.data<std::int32_t>(), B, Tn, d, cs);
    gemm_rm(blas, false, true, B, d, d, g.data<T>(), P("W_k"), d_q.data<T>(), 0.0);
    gemm_rm(blas, true, false, d, d, B, q.data<T>(), g.data<T>(), Gr("W_k"), 0.0);
    gemm_rm(blas, true, false, d, d, B, d_q.data<T>(), hq.data<T>(), Gr("W_q"), 0.0);
  }

  std::uint64_t seed = 0;
};

template <class T>
SsfrEval evaluate(SsfrDevice<T>& dv, const Tensor& map, const DevMlp<T>& mlp, std::int64_t batches,
                  std::uint64_t first) {
  dv.acc_loss.fill_zero(dv.s);
  dv.acc_correct.fill_zero(dv.s);
  for (std::int64_t j = 0; j < batches; ++j)
    dv.forward(map, mlp, rng::kSsfrEval, first + static_cast<std::uint64_t>(j), nullptr, false, nullptr);
  double loss = 0;
  long long hits = 0;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dv.acc_loss.raw(), sizeof(double), cudaMemcpyDeviceToHost, dv.s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&hits, dv.acc_correct.raw(), sizeof(long long), cudaMemcpyDeviceToHost, dv.s.get()));
  dv.s.synchronize();
  SsfrEval e;
  e.accuracy = static_cast<double>(hits) / static_cast<double>(batches * dv.B);
  e.loss = loss / static_cast<double>(batches);
  return e;
}

template <class T>
SsfrTrainResult train_impl(const SsfrProblem& p, const SsfrTrainConfig& cfg, gpu::Handles& h) {
  const auto t_start = Clock::now();
  const std::int64_t B = cfg.batch, nev = cfg.resolved_eval_batches(p.task.facts);
  const gpu::Stream& s = h.stream();
  cublasHandle_t blas = h.blas();
  MEMCAP_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  SsfrDevice<T> dv(p, B, cfg.steps, s, blas);
  dv.seed = cfg.seed;
  if (cfg.resume) {
    cfg.resume->check(cfg, dv.n);
    dv.upload_state(*cfg.resume);
  } else {
    dv.upload_params(ssfr_init_params(p.block, cfg.seed));
  }
  {
    const auto sc = cu::adam_schedule(cfg.lr, cfg.lr, cfg.steps, cfg.beta1, cfg.beta2, cfg.weight_decay);
    dv.sched.upload(sc.data(), s);
    s.synchronize();  // sc is a host temporary
  }
  cu::TrainState st0;
  st0.step = cfg.resume ? cfg.resume->next_step : 0;
  st0.end = cfg.steps;
  st0.stop_loss = -1;  // the loss is never <= -1: no loss-based early stop
  st0.record_every = 1;
  auto upload_state = [&](const cu::TrainState& st) {
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dv.state.raw(), &st, sizeof st, cudaMemcpyHostToDevice, s.get()));
    s.synchronize();
  };
  auto download_state = [&] {
    cu::TrainState st;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&st, dv.state.raw(), sizeof st, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    return st;
  };
  auto step = [&] {
    dv.forward(dv.map_a, dv.mlp_a, rng::kSsfrTrain, 0, dv.st(), true, dv.st());
    dv.backward(dv.mlp_a);
    cu::adam_step_gated<T>(dv.params.template data<T>(), dv.grads.template data<T>(), 1, 0, dv.m1.template data<T>(),
                           dv.m2.template data<T>(), dv.n, static_cast<const cu::AdamScalars*>(dv.sched.raw()), dv.st(),
                           cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, true, s.get());
  };
  // Warm-up outside the capture with the step gated off (cuBLAS first-use work), then capture one step.
  st0.stop = 1;
  upload_state(st0);
  step();
  s.synchronize();
  st0.stop = 0;
  upload_state(st0);
  gpu::Graph graph;
  graph.capture(s, step);

  SsfrTrainResult r;
  std::int64_t round = 0, t = 0;
  double eval_s = 0, last_loss = NAN, spent_s = 0;
  if (cfg.resume) {
    r = cfg.resume->partial;
    t = cfg.resume->next_step;
    round = cfg.resume->round;
    eval_s = r.eval_s;
    spent_s = r.wall_s;
  }
  r.path = std::is_same_v<T, float> ? "cuda:f32" : "cuda:f64";
  std::vector<double> hist(static_cast<std::size_t>(cfg.steps));
  std::vector<long long> hist_c(static_cast<std::size_t>(cfg.steps));
  auto fetch_history = [&](std::int64_t from, std::int64_t to) {
    if (to <= from) return;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hist.data() + from, dv.hist_loss.template data<double>() + from,
                                      static_cast<std::size_t>(to - from) * sizeof(double), cudaMemcpyDeviceToHost,
                                      s.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hist_c.data() + from,
                                      static_cast<const long long*>(dv.hist_correct.raw()) + from,
                                      static_cast<std::size_t>(to - from) * sizeof(long long), cudaMemcpyDeviceToHost,
                                      s.get()));
    s.synchronize();
  };
  while (t < cfg.steps) {
    // Run through the next step whose index is a multiple of eval_every (inclusive), or to the end.
    const std::int64_t next_eval = ((t + cfg.eval_every - 1) / cfg.eval_every) * cfg.eval_every;
    const std::int64_t t1 = std::min(cfg.steps, next_eval + 1);
    for (std::int64_t k = t; k < t1; ++k) graph.launch(s);
    const cu::TrainState st = download_state();
    fetch_history(t, std::min<std::int64_t>(st.step + (st.nonfinite ? 1 : 0), t1));
    if (st.nonfinite) {
      const std::int64_t bad = st.step;
      if (bad == 0)
        throw NumericError("training diverged: non-finite loss at step 0 (no finite loss before it); check the "
                           "inserted MLP and lower --lr");
      throw NumericError(fmt::format("training diverged: non-finite loss at step {} (last finite loss {:.6g} at step "
                                     "{}); lower --lr",
                                     bad, hist[static_cast<std::size_t>(bad - 1)], bad - 1));
    }
    MEMCAP_ASSERT(st.step == t1, "SSFR GPU trainer: step counter out of sync");
    for (std::int64_t k = t; k < t1; ++k) {
      r.loss_curve.push_back(hist[static_cast<std::size_t>(k)]);
      r.batch_acc_curve.push_back(static_cast<double>(hist_c[static_cast<std::size_t>(k)]) / static_cast<double>(B));
    }
    last_loss = hist[static_cast<std::size_t>(t1 - 1)];
    r.steps_run = t1;
    r.final_loss = last_loss;
    t = t1;
    const std::int64_t done = t1 - 1;
    if (done % cfg.eval_every == 0) {
      const auto te = Clock::now();
      const SsfrEval tr = evaluate(dv, dv.map_a, dv.mlp_a, nev, ssfr_eval_first_batch(round, 0, nev));
      const SsfrEval ev = evaluate(dv, dv.map_b, dv.mlp_b, nev, ssfr_eval_first_batch(round, 1, nev));
      eval_s += since(te);
      ++round;
      if (ssfr_record_eval(r, done, tr, ev, cfg)) {
        if (cfg.on_step) cfg.on_step(t1, last_loss);
        break;
      }
      if (cfg.on_checkpoint && t1 < cfg.steps)
        cfg.on_checkpoint(SsfrCheckpoint::of(dv.download(dv.params, dv.n), dv.download(dv.m1, dv.n),
                                             dv.download(dv.m2, dv.n), t1, round, r, eval_s,
                                             spent_s + since(t_start)));
    }
    if (cfg.on_step) cfg.on_step(t1, last_loss);
  }
  const auto te = Clock::now();
  r.final_train_acc = evaluate(dv, dv.map_a, dv.mlp_a, nev, ssfr_eval_first_batch(round, 0, nev)).accuracy;
  r.final_acc = evaluate(dv, dv.map_b, dv.mlp_b, nev, ssfr_eval_first_batch(round, 1, nev)).accuracy;
  eval_s += since(te);
  r.params = dv.download(dv.params, dv.n);
  r.wall_s = spent_s + since(t_start);
  r.eval_s = eval_s;
  r.train_loop_s = r.wall_s - eval_s;
  return r;
}

template <class T>
double loss_grad_impl(const SsfrProblem& p, const std::vector<double>& params, std::uint64_t seed, std::int64_t step,
                      std::int64_t batch, std::vector<double>* grad, std::vector<double>* logits, gpu::Handles& h) {
  const gpu::Stream& s = h.stream();
  cublasHandle_t blas = h.blas();
  MEMCAP_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  SsfrDevice<T> dv(p, batch, 1, s, blas);
  dv.seed = seed;
  dv.upload_params(params);
  dv.grads.fill_nan(s);  // every gradient entry must be written
  // The loss is recorded through a state at step 0 (the history holds one entry); the batch is
  // training batch `step`, given as an explicit batch id.
  cu::TrainState rec;
  rec.step = 0;
  rec.end = 1;
  rec.stop_loss = -1;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dv.state.raw(), &rec, sizeof rec, cudaMemcpyHostToDevice, s.get()));
  dv.forward(dv.map_a, dv.mlp_a, rng::kSsfrTrain, static_cast<std::uint64_t>(step), nullptr, true, dv.st());
  dv.backward(dv.mlp_a);
  double loss = 0;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dv.loss_mean.raw(), sizeof loss, cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  if (grad) *grad = dv.download(dv.grads, dv.n);
  if (logits) {  // the training forward left dlogits in place of the logits: run the evaluation forward
    dv.forward(dv.map_a, dv.mlp_a, rng::kSsfrTrain, static_cast<std::uint64_t>(step), nullptr, false, nullptr);
    *logits = dv.download(dv.logits, batch * dv.V);
  }
  return loss;
}

}  // namespace

std::size_t ssfr_cuda_bytes(const SsfrTask& task, std::int64_t d, std::int64_t m, const SsfrTrainConfig& cfg) {
  return bytes_of(task, d, m, cfg.batch, cfg.steps, cfg.precision == "f64" ? 8 : 4);
}

SsfrTrainResult train_ssfr_cuda(const SsfrProblem& p, const SsfrTrainConfig& cfg, gpu::Handles& h) {
  cfg.validate();
  p.validate();
  gpu::require_device_memory(ssfr_cuda_bytes(p.task, p.block.dim, std::max(p.mlp_a.m, p.mlp_b.m), cfg),
                             fmt::format("SSFR training on the GPU (d = {}, F = {}, batch {}, {})", p.block.dim,
                                         p.task.facts, cfg.batch, cfg.precision));
  if (cfg.precision == "f64") return train_impl<double>(p, cfg, h);
  return train_impl<float>(p, cfg, h);
}

double ssfr_loss_grad_cuda(const SsfrProblem& p, const std::vector<double>& params, std::uint64_t seed,
                           std::int64_t step, std::int64_t batch, const std::string& precision,
                           std::vector<double>* grad, std::vector<double>* logits, gpu::Handles& h) {
  p.validate();
  require(static_cast<std::int64_t>(params.size()) == ssfr_layout(p.block).numel(),
          "ssfr_loss_grad_cuda: {} parameters for a layout of {}", params.size(), ssfr_layout(p.block).numel());
  require(precision == "f32" || precision == "f64", "SSFR GPU precision must be f32 or f64 (got '{}')", precision);
  if (precision == "f64") return loss_grad_impl<double>(p, params, seed, step, batch, grad, logits, h);
  return loss_grad_impl<float>(p, params, seed, step, batch, grad, logits, h);
}

}  // namespace memcap::nn

#endif  // MEMCAP_HAVE_CUDA
