// GPU trainer of the GD gated MLP (spec hebbian.md §2.6/§2.7), same semantics as train_gd_cpu: per
// epoch t forward (loss_t, train accuracy), backward, Adam/AdamW with lr = cosine_lr(t), stop after
// the update when loss_t ≤ stop_loss. K steps are captured ONCE as a CUDA graph (gd_cuda_device.hpp)
// and replayed; the step counter, lr schedule, loss history and early-stop flags live on the device,
// so the host only synchronizes every few hundred steps (≈ 0.25 s) to fill the curves, call the
// progress hook and write checkpoints. No global state: concurrent trainings on distinct streams
// (one gpu::Handles each, from different host threads) do not interact.
#include "mlp/gd_train.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/timing.hpp"
#include "mlp/gd_checkpoint.hpp"
#include "mlp/gd_cuda_device.hpp"
#include "mlp/gd_init.hpp"

namespace memcap::mlp {

namespace {

using Clock = std::chrono::steady_clock;

// Sets a cuBLAS math mode for the training and restores the caller's on exit.
class MathModeGuard {
 public:
  MathModeGuard(cublasHandle_t h, cublasMath_t mode) : h_(h) {
    MEMCAP_CUBLAS_CHECK(cublasGetMathMode(h_, &saved_));
    MEMCAP_CUBLAS_CHECK(cublasSetMathMode(h_, mode));
  }
  ~MathModeGuard() { cublasSetMathMode(h_, saved_); }
  MathModeGuard(const MathModeGuard&) = delete;
  MathModeGuard& operator=(const MathModeGuard&) = delete;

 private:
  cublasHandle_t h_;
  cublasMath_t saved_ = CUBLAS_DEFAULT_MATH;
};

constexpr double kSyncTargetS = 0.25;     // host reads the histories about this often
constexpr std::int64_t kMaxSyncSteps = 8192;

}  // namespace

std::size_t gd_cuda_bytes(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg) {
  return gd_cuda_plan_bytes(make_gd_cuda_plan(F, P, d, m, cfg));
}

GdResult train_gd_cuda(const FactSet& facts, std::int64_t width, std::uint64_t seed, const GdConfig& cfg,
                       gpu::Handles& h) {
  const auto t_start = Clock::now();
  facts.validate();
  validate_gd_config(cfg);
  const std::int64_t F = facts.F(), P = facts.P(), d = facts.d(), m = width;
  require(m >= 1, "GD training needs width m >= 1 (got {})", m);
  const GdCudaPlan plan = make_gd_cuda_plan(F, P, d, m, cfg);
  gpu::require_device_memory(gd_cuda_plan_bytes(plan),
                             fmt::format("GD training on the GPU (F = {}, P = {}, d = {}, m = {}, {}, {} kernels)", F,
                                         P, d, m, plan.precision, plan.kernel));
  const GdLayout& layout = plan.layout;
  const std::size_t n = static_cast<std::size_t>(layout.total);

  GdResult res;
  res.path = "cuda:" + plan.precision;
  res.kernel = plan.kernel;
  std::int64_t start = 0;
  double wall_before = 0;
  bool finished = false;
  std::vector<double> params, mom1, mom2;
  const std::string fingerprint = gd_fingerprint(facts, m, seed, cfg, res.path);
  if (!cfg.checkpoint.empty()) {
    if (auto ck = read_gd_checkpoint(cfg.checkpoint, fingerprint)) {
      if (ck->params.size() != n || ck->epoch > cfg.epochs)
        throw IoError(fmt::format("checkpoint '{}' does not fit this model ({} parameters, epoch {}); delete it",
                                  cfg.checkpoint, ck->params.size(), ck->epoch));
      params = std::move(ck->params);
      mom1 = std::move(ck->m);
      mom2 = std::move(ck->v);
      start = ck->epoch;
      finished = ck->finished;
      res.stopped_early = ck->stopped_early;
      res.final_loss = ck->final_loss;
      res.loss_curve = std::move(ck->loss_curve);
      res.accuracy_curve = std::move(ck->accuracy_curve);
      res.curve_epoch = std::move(ck->curve_epoch);
      wall_before = ck->wall_s;
      res.resumed = true;
    }
  }
  if (!res.resumed) {
    params = gd_init_params(m, d, cfg.bias, seed);
    mom1.assign(n, 0.0);
    mom2.assign(n, 0.0);
  }
  res.epochs_run = start;
  if (finished || start >= cfg.epochs) {
    res.mlp = gd_to_mlp(params, layout, cfg);
    res.wall_s = wall_before + seconds_since(t_start);
    return res;
  }

  const gpu::Stream& stream = h.stream();
  GdDevice dev(plan, stream);
  dev.set_optimizer(cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.adamw);
  dev.upload_tables(facts);
  dev.upload_arenas(params, mom1, mom2);
  dev.upload_schedule(nn::cuda::adam_schedule(cfg.lr, cfg.lr_min, cfg.epochs, cfg.beta1, cfg.beta2, cfg.weight_decay));
  cublasHandle_t blas = h.blas();
  MathModeGuard math(blas, plan.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);

  nn::cuda::TrainState st0;
  st0.step = start;
  st0.end = cfg.epochs;
  st0.stop_loss = cfg.stop_loss;
  st0.record_every = cfg.record_every;
  // Warm-up outside capture with every gated kernel disabled: first-use work of cuBLAS and the kernel
  // attributes happen here, not inside the capture. Parameters are untouched.
  st0.stop = 1;
  dev.upload_state(st0);
  dev.enqueue_step(blas);
  stream.synchronize();
  st0.stop = 0;
  dev.upload_state(st0);

  const int K = plan.graph_steps;
  gpu::Graph graph;
  graph.capture(stream, [&] {
    for (int k = 0; k < K; ++k) dev.enqueue_step(blas);
  });

  const bool ck_on = !cfg.checkpoint.empty();
  auto save = [&](std::int64_t epochs_done, bool done) {
    std::vector<double> p, m, v;
    dev.download_arenas(&p, &m, &v);
    write_gd_checkpoint(cfg.checkpoint, make_gd_checkpoint(std::move(p), std::move(m), std::move(v), res, epochs_done,
                                                           done, wall_before + seconds_since(t_start), fingerprint));
  };

  std::int64_t host_step = start;
  std::int64_t sync_steps = K;  // first round short: it measures the step time
  auto last_ck = Clock::now();
  std::vector<double> hist_loss;
  std::vector<long long> hist_correct;
  std::vector<std::pair<std::int64_t, double>> hooks;
  // train_loop_s: device time of the graph replays only (what the PyTorch reference's timer measures),
  // without upload, capture, warm-up, history downloads and checkpoints.
  gpu::Event ev_begin, ev_end;
  double loop_s = 0;
  while (true) {
    const std::int64_t want = std::min(sync_steps, cfg.epochs - host_step);
    const std::int64_t launches = (want + K - 1) / K;
    const auto t_launch = Clock::now();
    ev_begin.record(stream);
    for (std::int64_t i = 0; i < launches; ++i) graph.launch(stream);
    ev_end.record(stream);
    const nn::cuda::TrainState st = dev.download_state();  // synchronizes
    const double dt = seconds_since(t_launch);
    loop_s += static_cast<double>(gpu::Event::elapsed_ms(ev_begin, ev_end)) * 1e-3;
    const std::int64_t ran = st.step - host_step;
    if (ran > 0) {
      const double per_step = dt / static_cast<double>(ran);
      const std::int64_t target = static_cast<std::int64_t>(kSyncTargetS / std::max(per_step, 1e-9));
      sync_steps = std::clamp<std::int64_t>((target + K - 1) / K * K, K, kMaxSyncSteps);
    }
    if (ck_on && cfg.checkpoint_every_s == 0) sync_steps = K;

    dev.download_history(host_step, st.step, hist_loss, hist_correct);
    hooks.clear();
    for (std::int64_t t = host_step; t < st.step; ++t) {
      const std::size_t k = static_cast<std::size_t>(t - host_step);
      const double loss = hist_loss[k];
      const bool stop = loss <= cfg.stop_loss;
      const bool last = stop || t + 1 == cfg.epochs;
      if (t % cfg.record_every == 0 || last) {
        res.loss_curve.push_back(loss);
        res.accuracy_curve.push_back(static_cast<double>(hist_correct[k]) / static_cast<double>(F));
        res.curve_epoch.push_back(t);
        hooks.emplace_back(t + 1, loss);
      }
      res.final_loss = loss;
      res.stopped_early = stop;
    }
    res.epochs_run = st.step;
    if (st.nonfinite)
      throw NumericError(fmt::format("training diverged: non-finite loss at epoch {}; lower --lr (now {}) or the "
                                     "method's lr=",
                                     st.step, cfg.lr));
    const bool done = st.stop || st.step >= cfg.epochs;
    if (!done && ran <= 0)
      throw DeviceError(fmt::format("GPU GD training made no progress at epoch {} (internal error)", st.step));
    if (ck_on && (done || seconds_since(last_ck) >= cfg.checkpoint_every_s)) {
      save(st.step, done);
      last_ck = Clock::now();
    }
    if (cfg.on_epoch)
      for (const auto& [epochs_done, loss] : hooks) cfg.on_epoch(epochs_done, loss);
    host_step = st.step;
    if (done) break;
  }

  dev.download_arenas(&params, nullptr, nullptr);
  for (const double p : params)
    if (!std::isfinite(p))
      throw NumericError(fmt::format("training diverged: non-finite parameters after epoch {}; lower --lr (now {})",
                                     res.epochs_run, cfg.lr));
  res.mlp = gd_to_mlp(params, layout, cfg);
  res.wall_s = wall_before + seconds_since(t_start);
  res.train_loop_s = loop_s;
  return res;
}

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA
