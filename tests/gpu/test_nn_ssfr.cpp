// GPU SSFR block and trainer (src/nn/ssfr_train_cuda.cpp, kernels/nn_ssfr.cu) against the CPU float64
// reference (src/nn/ssfr_model.cpp, ssfr_train.cpp):
//   batches: the kernel draws exactly the CPU's tokens, lengths, query rows and targets;
//   one step, every trainable set × residual × inserted MLP: loss, logits and gradient within
//     kTolStepF64 = 1e-10 (float64: only summation order differs) and kTolStepF32 = 2e-4 (float32,
//     relative over the whole vector; the MLP is cast to float32 as in the released code);
//   100 training steps: float64 loss curve per point and final weights within kTolTrainF64 = 1e-8,
//     the same evaluation accuracies; float32 loss curve within kTolCurveF32 = 2e-3 per point and
//     best accuracies within kTolAccF32 = 0.02; two GPU runs bit-identical; a non-finite loss stops
//     at the CPU's step with the CPU's last finite loss; a size far too large refused before any
//     allocation;
//   a training killed at a checkpoint and resumed (nn::SsfrCheckpoint) equals the uninterrupted
//     run bit for bit in float32, and a CPU checkpoint resumed on the GPU in float64 ends within
//     kTolTrainF64 of the CPU run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/rng.hpp"
#include "mlp/ssfr_setup.hpp"
#include "nn/ssfr_train.hpp"
#include "nn_ssfr.cuh"

using namespace memcap;
using namespace memcap::nn;

namespace {

constexpr double kTolStepF64 = 1e-10;
constexpr double kTolStepF32 = 2e-4;
constexpr double kTolTrainF64 = 1e-8;
constexpr double kTolCurveF32 = 2e-3;
constexpr double kTolAccF32 = 0.02;

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;  // NaN never passes
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

mlp::SsfrSetup setup(const std::string& mlp_text, bool vo, bool res, std::int64_t d = 16, std::int64_t F = 48) {
  mlp::SsfrSetupSpec spec;
  spec.task = SsfrTask::make(F, 1, 3, 4);
  spec.block.dim = d;
  spec.block.vo_trainable = vo;
  spec.block.attn_residual = res;
  spec.width = mlp_text == "identity" ? 0 : 64;
  spec.seed = 5;
  return mlp::make_ssfr_setup(spec, mlp::parse_ssfr_mlp(mlp_text), nullptr);
}

}  // namespace

TEST_CASE("SSFR GPU batches equal the CPU batches") {
  const SsfrTask task = SsfrTask::make(40, 2, 5, 3, 17);
  std::vector<std::int32_t> map(40);
  for (int i = 0; i < 40; ++i) map[static_cast<std::size_t>(i)] = (i * 7 + 1) % 40;
  const std::int64_t B = 300;
  SsfrBatch cpu;
  ssfr_batch(cpu, task, map.data(), B, 9, rng::kSsfrEval, 5);
  gpu::Stream s;
  gpu::Tensor dmap({40}, gpu::DType::i32), tok({B, task.seq_len}, gpu::DType::i32), len({B}, gpu::DType::i32),
      qrow({B}, gpu::DType::i32), target({B}, gpu::DType::i32);
  dmap.upload(map.data(), s);
  cuda::ssfr_batch(tok.data<std::int32_t>(), len.data<std::int32_t>(), qrow.data<std::int32_t>(),
                   target.data<std::int32_t>(), dmap.data<std::int32_t>(), task.dims(), 9, rng::kSsfrEval, 5, nullptr, B,
                   s.get());
  std::vector<std::int32_t> t(static_cast<std::size_t>(B * task.seq_len)), l(B), q(B), g(B);
  tok.download(t.data(), s);
  len.download(l.data(), s);
  qrow.download(q.data(), s);
  target.download(g.data(), s);
  s.synchronize();
  CHECK(t == cpu.tokens);
  CHECK(g == cpu.target);
  for (std::int64_t i = 0; i < B; ++i) {
    CHECK(l[static_cast<std::size_t>(i)] == cpu.query_pos[static_cast<std::size_t>(i)] + 1);
    CHECK(q[static_cast<std::size_t>(i)] == task.query_token());
  }
}

TEST_CASE("SSFR GPU step: loss, logits and gradient match the CPU reference") {
  for (const std::string mt : {"identity", "hebbian:whitened", "ntk", "gd:transformer,epochs=30"})
    for (const bool vo : {false, true})
      for (const bool res : {false, true}) {
        CAPTURE(mt);
        CAPTURE(vo);
        CAPTURE(res);
        const mlp::SsfrSetup st = setup(mt, vo, res);
        const SsfrProblem& p = st.problem;
        const std::int64_t B = 96, step = 3;
        std::vector<double> params(static_cast<std::size_t>(ssfr_layout(p.block).numel()));
        for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.5 * rng::normal(2, rng::kUser + 9, i);
        SsfrWorkspace ws(p, B);
        SsfrBatch batch;
        ssfr_batch(batch, p.task, p.map_a.data(), B, 11, rng::kSsfrTrain, step);
        const double cpu_loss = ssfr_forward(ws, params.data(), batch, p.mlp_a).loss;
        const std::vector<double> cpu_logits(ws.logits.begin(), ws.logits.begin() + B * p.task.vocab());
        std::vector<double> cpu_grad(params.size(), 0.0);
        ssfr_backward(ws, params.data(), cpu_grad.data(), batch, p.mlp_a);
        gpu::Stream s;
        gpu::Handles h(s);
        for (const std::string prec : {"f64", "f32"}) {
          CAPTURE(prec);
          const double tol = prec == "f64" ? kTolStepF64 : kTolStepF32;
          std::vector<double> grad, logits;
          const double loss = ssfr_loss_grad_cuda(p, params, 11, step, B, prec, &grad, &logits, h);
          CHECK(std::abs(loss - cpu_loss) <= tol * cpu_loss);
          CHECK(rel_err(logits, cpu_logits) < tol);
          CHECK(rel_err(grad, cpu_grad) < tol);
        }
      }
}

TEST_CASE("SSFR GPU training: 100 steps against the CPU reference, determinism, NaN stop") {
  for (const bool vo : {false, true}) {
    CAPTURE(vo);
    const mlp::SsfrSetup st = setup("hebbian:whitened", vo, vo);
    SsfrTrainConfig cfg;
    cfg.steps = 100;
    cfg.batch = 128;
    cfg.lr = 5e-3;
    cfg.eval_every = 25;
    cfg.eval_batches = 3;
    cfg.seed = 4;
    const SsfrTrainResult ref = train_ssfr_cpu(st.problem, cfg);
    gpu::Stream s;
    gpu::Handles h(s);
    cfg.precision = "f64";
    const SsfrTrainResult g64 = train_ssfr_cuda(st.problem, cfg, h);
    CHECK(g64.path == "cuda:f64");
    REQUIRE(g64.loss_curve.size() == ref.loss_curve.size());
    for (std::size_t i = 0; i < ref.loss_curve.size(); ++i)
      CHECK(std::abs(g64.loss_curve[i] - ref.loss_curve[i]) <= kTolTrainF64 * ref.loss_curve[i]);
    CHECK(rel_err(g64.params, ref.params) < kTolTrainF64);
    CHECK(g64.eval_step == ref.eval_step);
    CHECK(g64.eval_acc == ref.eval_acc);
    CHECK(g64.train_acc == ref.train_acc);
    CHECK(g64.batch_acc_curve == ref.batch_acc_curve);

    cfg.precision = "f32";
    const SsfrTrainResult g32 = train_ssfr_cuda(st.problem, cfg, h);
    CHECK(g32.path == "cuda:f32");
    for (std::size_t i = 0; i < ref.loss_curve.size(); ++i)
      CHECK(std::abs(g32.loss_curve[i] - ref.loss_curve[i]) <= kTolCurveF32 * ref.loss_curve[i]);
    CHECK(std::abs(g32.best_acc - ref.best_acc) <= kTolAccF32);
    CHECK(std::abs(g32.best_train_acc - ref.best_train_acc) <= kTolAccF32);
    const SsfrTrainResult again = train_ssfr_cuda(st.problem, cfg, h);
    CHECK(again.params == g32.params);
    CHECK(again.loss_curve == g32.loss_curve);
  }
  {
    const mlp::SsfrSetup st = setup("identity", true, false);
    SsfrTrainConfig cfg;
    cfg.steps = 20;
    cfg.batch = 32;
    cfg.eval_batches = 1;
    cfg.lr = 1e300;
    std::string cpu_msg, gpu_msg;
    try {
      train_ssfr_cpu(st.problem, cfg);
    } catch (const NumericError& e) {
      cpu_msg = e.what();
    }
    gpu::Stream s;
    gpu::Handles h(s);
    cfg.precision = "f64";
    try {
      train_ssfr_cuda(st.problem, cfg, h);
    } catch (const NumericError& e) {
      gpu_msg = e.what();
    }
    CHECK(cpu_msg.find("non-finite loss at step 1") != std::string::npos);
    CHECK(gpu_msg == cpu_msg);
  }
  {
    const mlp::SsfrSetup st = setup("identity", false, false);
    SsfrTrainConfig cfg;
    cfg.batch = 1 << 24;
    cfg.steps = 20000000000LL;  // the loss history alone: 16 bytes per step, 320 GB
    gpu::Stream s;
    gpu::Handles h(s);
    CHECK_THROWS_AS(train_ssfr_cuda(st.problem, cfg, h), UserError);
  }
}

TEST_CASE("SSFR GPU training resumed from a checkpoint equals the uninterrupted run") {
  struct Killed {};
  const mlp::SsfrSetup st = setup("hebbian:whitened", true, true);
  SsfrTrainConfig cfg;
  cfg.steps = 120;
  cfg.batch = 64;
  cfg.lr = 5e-3;
  cfg.eval_every = 25;
  cfg.eval_batches = 2;
  cfg.seed = 4;
  cfg.precision = "f32";
  gpu::Stream s;
  gpu::Handles h(s);
  const SsfrTrainResult full = train_ssfr_cuda(st.problem, cfg, h);
  std::optional<SsfrCheckpoint> ck;
  SsfrTrainConfig c2 = cfg;
  c2.on_checkpoint = [&](const SsfrCheckpoint& c) {
    if (c.next_step == 51) {
      ck = c;
      throw Killed{};
    }
  };
  CHECK_THROWS_AS(train_ssfr_cuda(st.problem, c2, h), Killed);
  REQUIRE(ck.has_value());
  CHECK(ck->round == 3);  // evaluations after steps 0, 25, 50
  SsfrTrainConfig c3 = cfg;
  c3.resume = &*ck;
  const SsfrTrainResult res = train_ssfr_cuda(st.problem, c3, h);
  CHECK(res.params == full.params);
  CHECK(res.loss_curve == full.loss_curve);
  CHECK(res.batch_acc_curve == full.batch_acc_curve);
  CHECK(res.eval_step == full.eval_step);
  CHECK(res.eval_acc == full.eval_acc);
  CHECK(res.train_acc == full.train_acc);
  CHECK(res.best_acc == full.best_acc);
  CHECK(res.final_acc == full.final_acc);

  // A CPU checkpoint continued on the GPU in float64 ends where the CPU run ends.
  SsfrTrainConfig cc = cfg;
  cc.precision = "f64";
  const SsfrTrainResult cpu_full = train_ssfr_cpu(st.problem, cc);
  std::optional<SsfrCheckpoint> cpu_ck;
  SsfrTrainConfig c4 = cc;
  c4.on_checkpoint = [&](const SsfrCheckpoint& c) {
    if (c.next_step == 76) {
      cpu_ck = c;
      throw Killed{};
    }
  };
  CHECK_THROWS_AS(train_ssfr_cpu(st.problem, c4), Killed);
  REQUIRE(cpu_ck.has_value());
  SsfrTrainConfig c5 = cc;
  c5.resume = &*cpu_ck;
  const SsfrTrainResult g = train_ssfr_cuda(st.problem, c5, h);
  CHECK(rel_err(g.params, cpu_full.params) < kTolTrainF64);
  CHECK(g.eval_acc == cpu_full.eval_acc);
  REQUIRE(g.loss_curve.size() == cpu_full.loss_curve.size());
  for (std::size_t i = 0; i < g.loss_curve.size(); ++i)
    CHECK(std::abs(g.loss_curve[i] - cpu_full.loss_curve[i]) <= kTolTrainF64 * cpu_full.loss_curve[i]);
}
