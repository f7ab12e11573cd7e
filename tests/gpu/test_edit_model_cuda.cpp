// GPU fact-editing model and base trainer (src/edit/edit_model_cuda.cpp, src/edit/edit_train_cuda.cpp) against
// the CPU float64 reference (src/edit/edit_model.cpp, src/edit/edit_pipeline.cpp), on random small
// configurations (d = 16..32, qk_hidden, rank, vocabulary ~100, silu and identity gates), B = 3 sequences of
// T = 7 tokens with right padding (token and target −100) and ignored targets inside a sequence:
//   (a) double: loss within kTolF64 = 1e-9 relative, argmax of every row identical, EVERY trainable tensor's
//       gradient within kTolF64 (relative Frobenius, per tensor); with f_add (the local editors' residual)
//       also its gradient g_f; logits_at and the tail (tail_capture / tail_forward / tail_backward) at chosen
//       rows against the CPU model with targets (and the residual) at those rows only;
//   (b) float (inputs rounded to float for the CPU reference): loss within kTolLossF32 = 1e-4 relative,
//       every gradient within kTolGradF32 = 1e-3 of the tensor's max |CPU gradient| (float32 storage through
//       ~20 layers: a few ulps per layer, amplified by the two RMSNorms at rms_eps = 1e-30), argmax equal on
//       every row whose top-two CPU logits are more than kArgmaxGap = 1e-3 apart;
//   (c) 20 AdamW steps (2 epochs of 10 batches, evaluation after each): GPU f64 vs CPU step losses, epoch
//       value accuracy / non-fact CE and the kept parameters within kTolTrainF64 = 1e-8; GPU evaluation vs
//       evaluate_prompts (f64: predictions identical, CE within 1e-9); two GPU f32 runs bit-identical, and
//       their step losses within kTolCurveF32 = 5e-3 of the f64 ones;
//   (d) CUDA-graph replay bit-identical to eager launches (the model's forward + backward captured by hand,
//       and the whole f32 trainer with graphs on vs off).
// Fresh gradients are NaN-poisoned before the graph replay, so an unwritten entry cannot pass.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "core/rng.hpp"
#include "edit/edit_model.hpp"
#include "edit/edit_model_cuda.hpp"
#include "edit/edit_pipeline.hpp"
#include "edit/edit_train_cuda.hpp"
#include "gpu_test_util.hpp"
#include "nn/tied_ce.hpp"

using namespace memcap;
using namespace memcap::edit;
using gputest::rel_err;

namespace {

constexpr double kTolF64 = 1e-9;
constexpr double kTolLossF32 = 1e-4;
constexpr double kTolGradF32 = 1e-3;
constexpr double kArgmaxGap = 1e-3;
constexpr double kTolTrainF64 = 1e-8;
constexpr double kTolEvalF64 = 1e-9;
constexpr double kTolCurveF32 = 5e-3;

struct Case {
  std::int64_t d, H, R, V, hf;
  nn::Activation gate;
};

const Case kCases[] = {
    {16, 24, 4, 97, 20, nn::Activation::silu},
    {32, 32, 8, 101, 48, nn::Activation::identity},
    {18, 16, 3, 100, 33, nn::Activation::silu},
};

EditModelConfig config_of(const Case& c) {
  EditModelConfig cfg;
  cfg.d = c.d;
  cfg.qk_hidden = c.H;
  cfg.rank = c.R;
  cfg.vocab = c.V;
  cfg.fact_hidden = c.hf;
  cfg.fact_gate = c.gate;
  return cfg;
}

// §6.4 init, then every trainable value perturbed (gains, biases and LayerNorms away from 1 / 0, so every
// gradient path is exercised) and the low-rank path scaled down (U, V ~ N(0, 1) would saturate the mix).
EditModel make_model(const EditModelConfig& cfg, std::uint64_t seed) {
  EditModel m(cfg);
  m.init(seed);
  auto& P = m.trainable();
  for (std::size_t i = 0; i < P.params.size(); ++i) P.params[i] += 0.1 * rng::normal(seed, rng::kUser + 77, i);
  for (const char* nm : {"lowrank.U", "lowrank.V"}) {
    double* p = P.param(nm);
    for (std::int64_t i = 0; i < P.layout.view(nm).numel; ++i) p[i] *= 0.3;
  }
  return m;
}

// B = 3 sequences of T = 7: lengths 7, 5, 3 (right padding: token and target −100), one ignored target
// inside sequence 0 and one inside sequence 1.
struct Batch {
  std::int64_t B = 3, T = 7;
  std::vector<std::int32_t> tok, tgt;
};
Batch make_batch(std::int64_t V, std::uint64_t seed) {
  Batch b;
  const std::int64_t len[3] = {7, 5, 3};
  b.tok.assign(21, nn::kIgnoreLabel);
  b.tgt.assign(21, nn::kIgnoreLabel);
  for (std::int64_t s = 0; s < 3; ++s)
    for (std::int64_t t = 0; t < len[s]; ++t) {
      const auto i = static_cast<std::size_t>(s * 7 + t);
      b.tok[i] = static_cast<std::int32_t>(rng::uniform(seed, rng::kUser + 5, i) * static_cast<double>(V));
      b.tgt[i] = static_cast<std::int32_t>(rng::uniform(seed, rng::kUser + 6, i) * static_cast<double>(V));
    }
  b.tgt[2] = nn::kIgnoreLabel;
  b.tgt[7 + 1] = nn::kIgnoreLabel;
  return b;
}

struct GpuOut {
  double loss = 0;
  std::int64_t n_valid = 0;
  std::vector<std::int32_t> argmax;
  std::vector<double> grads, g_f;
};

template <class T>
GpuOut run_gpu(const EditModel& m, const Batch& b, const std::vector<double>* f_add, gpu::Handles& h) {
  const gpu::Stream& s = h.stream();
  EditDeviceModel<T> dm(m.config(), {EditShape{b.B, b.T}}, h);
  dm.upload_params(m.trainable().params);
  dm.upload_frozen(m.frozen().params);
  const EditShape sh = dm.upload_batch(b.tok.data(), b.tgt.data(), b.B, b.T);
  if (f_add) dm.set_f_add(*f_add, sh);
  // poison the gradient arena: backward must overwrite every entry
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(dm.grads(), 0xFF, static_cast<std::size_t>(dm.n()) * sizeof(T), s.get()));
  dm.forward(sh);
  dm.backward(sh);
  GpuOut o;
  const std::int64_t N = b.B * b.T, d = m.config().d;
  o.argmax.resize(static_cast<std::size_t>(N));
  std::vector<T> gf(static_cast<std::size_t>(N * d));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&o.loss, dm.loss_mean(), sizeof(double), cudaMemcpyDeviceToHost, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&o.n_valid, dm.n_valid(), sizeof(std::int64_t), cudaMemcpyDeviceToHost, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(o.argmax.data(), dm.argmax(), o.argmax.size() * 4, cudaMemcpyDeviceToHost, s.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(gf.data(), dm.g_f(), gf.size() * sizeof(T), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  o.grads = dm.download(1);
  o.g_f.assign(gf.begin(), gf.end());
  return o;
}

struct CpuOut {
  double loss = 0;
  std::int64_t n_valid = 0;
  std::vector<std::int32_t> argmax;
  std::vector<double> grads, g_f, o;
};

CpuOut run_cpu(EditModel& m, const Batch& b, const std::vector<double>* f_add) {
  EditActs acts;
  acts.resize(m.config(), b.B, b.T);
  if (f_add) acts.f_add = *f_add;
  CpuOut c;
  c.loss = m.forward(acts, b.tok.data(), b.tgt.data(), b.B, b.T);
  m.trainable().zero_grads();
  m.backward(acts, b.tgt.data());
  c.n_valid = acts.n_valid;
  c.argmax = acts.argmax;
  c.grads = m.trainable().grads;
  c.g_f = acts.g_f;
  c.o = acts.o;
  return c;
}

std::vector<double> slice(const std::vector<double>& v, const nn::TensorView& t) {
  return std::vector<double>(v.begin() + t.offset, v.begin() + t.offset + t.numel);
}

double max_abs_err_scaled(const std::vector<double>& g, const std::vector<double>& c) {
  REQUIRE(g.size() == c.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(g[i] - c[i]));
    scale = std::max(scale, std::abs(c[i]));
  }
  return scale > 0 ? err / scale : err;
}

EditModel rounded_to_float(const EditModel& m) {
  EditModel r = m;
  r.trainable().params = gputest::rounded<float>(r.trainable().params);
  r.frozen().params = gputest::rounded<float>(r.frozen().params);
  return r;
}

// Synthetic packed sequences (EditLabels::all layout): S rows of width T, lengths in [2, T], right padding.
nn::EditSequences make_seqs(std::int64_t S, std::int64_t T, std::int64_t V, std::uint64_t seed) {
  nn::EditSequences q;
  q.S = S;
  q.T = T;
  q.input_ids.assign(static_cast<std::size_t>(S * T), nn::kIgnoreLabel);
  q.labels.assign(q.input_ids.size(), nn::kIgnoreLabel);
  q.length.resize(static_cast<std::size_t>(S));
  q.fact.resize(static_cast<std::size_t>(S));
  q.tmpl.assign(static_cast<std::size_t>(S), 0);
  for (std::int64_t s = 0; s < S; ++s) {
    const auto L = 2 + static_cast<std::int32_t>(rng::uniform(seed, rng::kUser + 9, s) * static_cast<double>(T - 1));
    q.length[static_cast<std::size_t>(s)] = L;
    q.fact[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(s);
    for (std::int64_t t = 0; t < L; ++t) {
      const auto i = static_cast<std::size_t>(s * T + t);
      q.input_ids[i] = static_cast<std::int32_t>(rng::uniform(seed, rng::kUser + 10, i) * static_cast<double>(V));
      q.labels[i] = static_cast<std::int32_t>(rng::uniform(seed, rng::kUser + 11, i) * static_cast<double>(V));
    }
  }
  return q;
}

BaseTrainConfig train_cfg(std::vector<double>* losses) {
  BaseTrainConfig c;
  c.epochs = 2;
  c.batch = 4;  // S = 40: 10 steps per epoch, 20 in all
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  c.target_accuracy = 1.0;
  c.seed = 1234;
  c.eval_batch = 16;
  c.on_step = [losses](std::int64_t, std::int64_t, std::int64_t, double l) { losses->push_back(l); };
  return c;
}

}  // namespace

TEST_CASE("EditDeviceModel<double>: loss, argmax and every gradient match the CPU float64 model") {
  gpu::Stream s;
  gpu::Handles h(s);
  std::uint64_t seed = 100;
  for (const Case& k : kCases) {
    CAPTURE(k.d);
    CAPTURE(k.H);
    CAPTURE(k.R);
    const EditModelConfig cfg = config_of(k);
    EditModel m = make_model(cfg, ++seed);
    const Batch b = make_batch(k.V, seed);
    for (const bool with_f_add : {false, true}) {
      CAPTURE(with_f_add);
      const std::vector<double> fa = gputest::randn(b.B * b.T * k.d, seed + 50, 0.5);
      const CpuOut c = run_cpu(m, b, with_f_add ? &fa : nullptr);
      const GpuOut g = run_gpu<double>(m, b, with_f_add ? &fa : nullptr, h);
      CHECK(c.n_valid == 13);  // 7 + 5 + 3 valid positions less the two ignored targets
      CHECK(g.n_valid == c.n_valid);
      CHECK(std::abs(g.loss - c.loss) <= kTolF64 * std::abs(c.loss));
      CHECK(g.argmax == c.argmax);
      for (const auto& v : m.trainable().layout.views()) {
        CAPTURE(v.name);
        const double e = rel_err(slice(g.grads, v), slice(c.grads, v));
        CHECK(e <= kTolF64);
      }
      CHECK(rel_err(g.g_f, c.g_f) <= kTolF64);
    }
    // the one-call test path gives the same loss, argmax and gradient
    std::vector<double> grad;
    std::vector<std::int32_t> arg;
    const double loss = edit_loss_grad_cuda<double>(m, b.tok.data(), b.tgt.data(), b.B, b.T, &grad, &arg, nullptr, h);
    const CpuOut c = run_cpu(m, b, nullptr);
    CHECK(std::abs(loss - c.loss) <= kTolF64 * std::abs(c.loss));
    CHECK(arg == c.argmax);
    CHECK(rel_err(grad, c.grads) <= kTolF64);
  }
}

TEST_CASE("EditDeviceModel<double>: logits_at and the tail at chosen rows match the full CPU model there") {
  gpu::Stream s;
  gpu::Handles h(s);
  std::uint64_t seed = 300;
  const std::vector<std::int64_t> rows = {6, 2, 7 + 4, 14 + 0};  // valid positions of the batch, out of order
  const std::int64_t n = static_cast<std::int64_t>(rows.size());
  for (const Case& k : kCases) {
    CAPTURE(k.d);
    const EditModelConfig cfg = config_of(k);
    EditModel m = make_model(cfg, ++seed);
    Batch b = make_batch(k.V, seed);
    // targets at the chosen rows only; a residual at those rows only (the local editors' layout)
    std::vector<std::int32_t> tg(static_cast<std::size_t>(n));
    Batch bt = b;
    std::fill(bt.tgt.begin(), bt.tgt.end(), nn::kIgnoreLabel);
    std::vector<double> fa(static_cast<std::size_t>(b.B * b.T * k.d), 0.0);
    const std::vector<double> r = gputest::randn(n * k.d, seed + 9, 0.5);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t g = static_cast<std::size_t>(rows[static_cast<std::size_t>(i)]);
      tg[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((7 * i + 3) % k.V);
      bt.tgt[g] = tg[static_cast<std::size_t>(i)];
      for (std::int64_t j = 0; j < k.d; ++j) fa[g * static_cast<std::size_t>(k.d) + static_cast<std::size_t>(j)] = r[static_cast<std::size_t>(i * k.d + j)];
    }
    const CpuOut plain = run_cpu(m, bt, nullptr);
    const CpuOut with_r = run_cpu(m, bt, &fa);
    EditDeviceModel<double> dm(cfg, {EditShape{b.B, b.T}}, h);
    dm.upload_params(m.trainable().params);
    dm.upload_frozen(m.frozen().params);
    const EditShape sh = dm.upload_batch(b.tok.data(), b.tgt.data(), b.B, b.T);
    gpu::Tensor rows_d({n}, gpu::DType::i64), tg_d({n}, gpu::DType::i32);
    rows_d.upload(rows.data(), s);
    tg_d.upload(tg.data(), s);
    dm.forward(sh, false);
    // logits_at: the mean CE and argmax at the rows = the CPU model with targets there
    dm.logits_at(rows_d.data<std::int64_t>(), tg_d.data<std::int32_t>(), n);
    double loss = 0;
    std::int64_t nv = 0;
    std::vector<std::int32_t> am(static_cast<std::size_t>(n));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dm.loss_mean(), 8, cudaMemcpyDeviceToHost, s.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&nv, dm.n_valid(), 8, cudaMemcpyDeviceToHost, s.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(am.data(), dm.argmax(), am.size() * 4, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    CHECK(nv == n);
    CHECK(plain.n_valid == n);
    CHECK(std::abs(loss - plain.loss) <= kTolF64 * std::abs(plain.loss));
    for (std::int64_t i = 0; i < n; ++i)
      CHECK(am[static_cast<std::size_t>(i)] == plain.argmax[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)])]);
    // the tail with the residual: loss and g_f at the rows = the full CPU model with f_add there
    dm.tail_capture(rows_d.data<std::int64_t>(), tg_d.data<std::int32_t>(), n);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm.tail_add(), r.data(), r.size() * 8, cudaMemcpyHostToDevice, s.get()));
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(dm.g_f(), 0xFF, r.size() * 8, s.get()));  // poisoned: must be overwritten
    dm.tail_forward(n);
    dm.tail_backward(n);
    std::vector<double> gf(r.size());
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, dm.loss_mean(), 8, cudaMemcpyDeviceToHost, s.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(gf.data(), dm.g_f(), gf.size() * 8, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    CHECK(std::abs(loss - with_r.loss) <= kTolF64 * std::abs(with_r.loss));
    CHECK(std::abs(loss - plain.loss) > 1e-6);  // the residual changed the loss
    std::vector<double> cg(r.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k.d; ++j)
        cg[static_cast<std::size_t>(i * k.d + j)] =
            with_r.g_f[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)] * k.d + j)];
    CHECK(rel_err(gf, cg) <= kTolF64);
  }
}

TEST_CASE("EditDeviceModel<float>: loss and gradients match the CPU model within float32 tolerances") {
  gpu::Stream s;
  gpu::Handles h(s);
  std::uint64_t seed = 200;
  for (const Case& k : kCases) {
    CAPTURE(k.d);
    const EditModelConfig cfg = config_of(k);
    EditModel m = rounded_to_float(make_model(cfg, ++seed));
    const Batch b = make_batch(k.V, seed);
    const std::vector<double> fa = gputest::rounded<float>(gputest::randn(b.B * b.T * k.d, seed + 50, 0.5));
    for (const bool with_f_add : {false, true}) {
      CAPTURE(with_f_add);
      const CpuOut c = run_cpu(m, b, with_f_add ? &fa : nullptr);
      const GpuOut g = run_gpu<float>(m, b, with_f_add ? &fa : nullptr, h);
      CHECK(g.n_valid == c.n_valid);
      CHECK(std::abs(g.loss - c.loss) <= kTolLossF32 * std::abs(c.loss));
      for (const auto& v : m.trainable().layout.views()) {
        CAPTURE(v.name);
        CHECK(max_abs_err_scaled(slice(g.grads, v), slice(c.grads, v)) <= kTolGradF32);
      }
      CHECK(max_abs_err_scaled(g.g_f, c.g_f) <= kTolGradF32);
      // argmax: identical wherever the CPU's top two logits are clearly apart
      const double* E = m.frozen().param("embed.E");
      std::int64_t compared = 0;
      for (std::int64_t r = 0; r < b.B * b.T; ++r) {
        double top = -INFINITY, second = -INFINITY;
        for (std::int64_t j = 0; j < k.V; ++j) {
          double z = 0;
          for (std::int64_t i = 0; i < k.d; ++i)
            z += c.o[static_cast<std::size_t>(r * k.d + i)] * E[j * k.d + i];
          if (z > top) {
            second = top;
            top = z;
          } else if (z > second) {
            second = z;
          }
        }
        if (top - second > kArgmaxGap) {
          CHECK(g.argmax[static_cast<std::size_t>(r)] == c.argmax[static_cast<std::size_t>(r)]);
          ++compared;
        }
      }
      CHECK(compared >= 10);
    }
  }
}

TEST_CASE("train_base_cuda: 20 AdamW steps in f64 match the CPU trainer; f32 runs are bit-identical") {
  const Case k{16, 24, 4, 97, 20, nn::Activation::silu};
  const EditModelConfig cfg = config_of(k);
  const nn::EditSequences seqs = make_seqs(40, 7, k.V, 31);
  const EditModel init = make_model(cfg, 300);

  EditModel cpu = init;
  std::vector<double> lc, lg;
  const BaseTrainResult rc = train_base(cpu, seqs, train_cfg(&lc));
  EditModel gm = init;
  BaseTrainCudaOptions o64;
  o64.precision = "f64";
  o64.eval_batch = 16;  // 40 prompts: batches of 16, 16 and 8
  const BaseTrainCudaResult rg = train_base_cuda(gm, seqs, train_cfg(&lg), o64);
  CHECK(rg.path == "cuda:f64");
  REQUIRE(lc.size() == 20);
  REQUIRE(lg.size() == lc.size());
  for (std::size_t i = 0; i < lc.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(lg[i] - lc[i]) <= kTolTrainF64 * std::abs(lc[i]));
  }
  CHECK(rc.epoch_loss.at(1) < rc.epoch_loss.at(0));  // it trains
  CHECK(rg.train.steps_run == rc.steps_run);
  CHECK(rg.train.epochs_run == rc.epochs_run);
  CHECK(rg.train.best_epoch == rc.best_epoch);
  CHECK(rg.train.epoch_value_acc == rc.epoch_value_acc);
  REQUIRE(rg.train.epoch_nonfact_ce.size() == rc.epoch_nonfact_ce.size());
  for (std::size_t e = 0; e < rc.epoch_nonfact_ce.size(); ++e) {
    CHECK(std::abs(rg.train.epoch_nonfact_ce[e] - rc.epoch_nonfact_ce[e]) <= kTolTrainF64 * rc.epoch_nonfact_ce[e]);
    CHECK(std::abs(rg.train.epoch_loss[e] - rc.epoch_loss[e]) <= kTolTrainF64 * rc.epoch_loss[e]);
  }
  CHECK(rel_err(gm.trainable().params, cpu.trainable().params) <= kTolTrainF64);
  // the kept state's evaluation = evaluate_prompts on it
  const PromptEval ec = evaluate_prompts(cpu, seqs, 16);
  CHECK(rg.final_eval.predicted == ec.predicted);
  CHECK(rg.final_eval.value_accuracy == ec.value_accuracy);
  CHECK(rg.final_eval.nonfact_tokens == ec.nonfact_tokens);
  CHECK(std::abs(rg.final_eval.nonfact_ce - ec.nonfact_ce) <= kTolTrainF64 * ec.nonfact_ce);
  // the standalone GPU evaluation (f64) of the CPU-trained model
  const PromptEval eg = evaluate_prompts_cuda(cpu, seqs, "f64", 16);
  CHECK(eg.predicted == ec.predicted);
  CHECK(eg.nonfact_tokens == ec.nonfact_tokens);
  CHECK(std::abs(eg.nonfact_ce - ec.nonfact_ce) <= kTolEvalF64 * ec.nonfact_ce);

  // f32: two runs bit-identical, and graphs on == graphs off
  BaseTrainCudaOptions o32;
  o32.eval_batch = 16;
  std::vector<double> l1, l2, l3;
  EditModel g1 = init, g2 = init, g3 = init;
  const BaseTrainCudaResult r1 = train_base_cuda(g1, seqs, train_cfg(&l1), o32);
  const BaseTrainCudaResult r2 = train_base_cuda(g2, seqs, train_cfg(&l2), o32);
  o32.graphs = false;
  const BaseTrainCudaResult r3 = train_base_cuda(g3, seqs, train_cfg(&l3), o32);
  CHECK(r1.path == "cuda:f32");
  REQUIRE(l1.size() == 20);
  CHECK(l1 == l2);
  CHECK(l1 == l3);
  CHECK(g1.trainable().params == g2.trainable().params);
  CHECK(g1.trainable().params == g3.trainable().params);
  CHECK(r1.train.epoch_nonfact_ce == r3.train.epoch_nonfact_ce);
  // and f32 follows f64 within kTolCurveF32 per step (float32 master weights over 20 Adam steps)
  for (std::size_t i = 0; i < l1.size(); ++i) CHECK(std::abs(l1[i] - lg[i]) <= kTolCurveF32 * std::abs(lg[i]));
}

TEST_CASE("EditDeviceModel: a captured forward + backward replays bit-identically to eager launches") {
  gpu::Stream s;
  gpu::Handles h(s);
  const Case k{32, 32, 8, 101, 48, nn::Activation::silu};
  const EditModelConfig cfg = config_of(k);
  const EditModel m = make_model(cfg, 400);
  const Batch b = make_batch(k.V, 400);
  EditDeviceModel<float> dm(cfg, {EditShape{b.B, b.T}}, h);
  dm.upload_params(m.trainable().params);
  dm.upload_frozen(m.frozen().params);
  const EditShape sh = dm.upload_batch(b.tok.data(), b.tgt.data(), b.B, b.T);
  dm.forward(sh);
  dm.backward(sh);
  double loss_eager = 0, loss_graph = 0;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss_eager, dm.loss_mean(), 8, cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  const std::vector<double> g_eager = dm.download(1);
  gpu::Graph g;
  g.capture(s, [&] {
    dm.forward(sh);
    dm.backward(sh);
  });
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(dm.grads(), 0xFF, static_cast<std::size_t>(dm.n()) * sizeof(float), s.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(dm.loss_mean(), 0xFF, 8, s.get()));
  g.launch(s);
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss_graph, dm.loss_mean(), 8, cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  const std::vector<double> g_graph = dm.download(1);
  CHECK(std::isfinite(loss_eager));
  CHECK(loss_graph == loss_eager);
  CHECK(g_graph == g_eager);
  for (double x : g_graph) REQUIRE(std::isfinite(x));
}
