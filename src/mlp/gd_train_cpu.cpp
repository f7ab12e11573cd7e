// CPU float64 reference trainer of the GD gated MLP (spec hebbian.md §2.6/§2.7), built from the
// nn::cpu layers on flat arenas: full batch, forward a = K Uᵀ + b_u, g = K Gᵀ + b_g, h = a ⊙ σ(g),
// out = h Dᵀ + b_d; CE over logits out·V_allᵀ (targets = the map) or MSE against C_f; Adam/AdamW
// with cosine lr per epoch; early stop; periodic checkpoints with resume (gd_checkpoint.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/timing.hpp"
#include "mlp/gd_checkpoint.hpp"
#include "mlp/gd_init.hpp"
#include "mlp/gd_train.hpp"
#include "nn/arena.hpp"
#include "nn/layers.hpp"

namespace memcap::mlp {

namespace {

using Clock = std::chrono::steady_clock;

// MemAvailable from /proc/meminfo (bytes); 0 when unknown.
double available_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::vector<double> row_major(const Eigen::MatrixXd& M) {
  std::vector<double> out(static_cast<std::size_t>(M.size()));
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(out.data(), M.rows(), M.cols()) = M;
  return out;
}

// Fraction of rows whose argmax (smallest index on ties) is the target.
double argmax_accuracy(const double* logits, const std::int32_t* targets, std::int64_t F, std::int64_t P) {
  std::int64_t hits = 0;
  for (std::int64_t n = 0; n < F; ++n) {
    const double* x = logits + n * P;
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < P; ++j)
      if (x[j] > x[best]) best = j;
    hits += best == targets[n];
  }
  return static_cast<double>(hits) / static_cast<double>(F);
}

// Buffers and tables of one CPU training, allocated once; evaluate() runs one full-batch forward
// (and backward) at a parameter arena.
struct GdCpuModel {
  GdLayout layout;
  nn::Activation act;
  bool ce;
  std::int64_t F, P, d, m;
  std::vector<double> K, V, C;
  std::vector<std::int32_t> targets;
  std::vector<double> a, g, h, da, dg, dh, out, dout, logits, dlogits, losses;
  std::vector<std::uint8_t> correct;

  GdCpuModel(const FactSet& facts, std::int64_t width, const GdConfig& cfg)
      : layout(GdLayout::make(width, facts.d(), cfg.bias)), act(cfg.gate), ce(cfg.loss == nn::Loss::ce),
        F(facts.F()), P(facts.P()), d(facts.d()), m(width) {
    K = row_major(facts.keys);
    V = row_major(facts.values);
    if (!ce) C = row_major(facts.targets());
    targets.resize(static_cast<std::size_t>(F));
    for (std::int64_t i = 0; i < F; ++i) targets[static_cast<std::size_t>(i)] = facts.map[i];
    auto buf = [](std::int64_t n) { return std::vector<double>(static_cast<std::size_t>(n)); };
    a = buf(F * m), g = buf(F * m), h = buf(F * m), da = buf(F * m), dg = buf(F * m), dh = buf(F * m);
    out = buf(F * d), dout = buf(F * d), logits = buf(F * P), dlogits = buf(ce ? F * P : 0), losses = buf(F);
    correct.resize(static_cast<std::size_t>(F));
  }

  // Bytes the model's buffers and the arenas (params, grads, 2 moments) take.
  static double bytes(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg) {
    const bool ce = cfg.loss == nn::Loss::ce;
    const double total = static_cast<double>(gd_param_count(m, d, cfg.bias));
    return 8.0 * (4.0 * total + 6.0 * static_cast<double>(F) * static_cast<double>(m) +
                  (ce ? 2.0 : 1.0) * static_cast<double>(F) * static_cast<double>(P) +
                  5.0 * static_cast<double>(F) * static_cast<double>(d) + 2.0 * static_cast<double>(P) * d +
                  2.0 * static_cast<double>(F));
  }

  // Argmax accuracy of the outputs of the last forward (MSE: extra logits GEMM; CE: from them).
  double output_accuracy() {
    nn::cpu::linear_forward(logits.data(), out.data(), V.data(), nullptr, F, d, P);
    return argmax_accuracy(logits.data(), targets.data(), F, P);
  }

  // Loss at `params`; with grads non-null the gradient is ADDED to grads (zero it first); with
  // acc non-null the argmax train accuracy of this forward is stored there.
  double evaluate(const double* params, double* grads, double* acc) {
    using namespace nn::cpu;
    const double* U = params + layout.U;
    const double* G = params + layout.G;
    const double* D = params + layout.D;
    const double* b_u = layout.bias ? params + layout.b_u : nullptr;
    const double* b_g = layout.bias ? params + layout.b_g : nullptr;
    const double* b_d = layout.bias ? params + layout.b_d : nullptr;
    linear_forward(a.data(), K.data(), U, b_u, F, d, m);
    linear_forward(g.data(), K.data(), G, b_g, F, d, m);
    gated_forward(h.data(), a.data(), g.data(), F * m, act);
    linear_forward(out.data(), h.data(), D, b_d, F, m, d);
    double loss;
    if (ce) {
      linear_forward(logits.data(), out.data(), V.data(), nullptr, F, d, P);
      loss = cross_entropy_forward(losses.data(), logits.data(), targets.data(), F, P, correct.data());
      if (acc) {
        std::int64_t hits = 0;
        for (const auto c : correct) hits += c;
        *acc = static_cast<double>(hits) / static_cast<double>(F);
      }
    } else {
      loss = mse_forward(out.data(), C.data(), F, d);
      if (acc) *acc = output_accuracy();
    }
    if (!grads || !std::isfinite(loss)) return loss;
    if (ce) {
      cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), F, P);
      linear_backward(dout.data(), nullptr, nullptr, dlogits.data(), out.data(), V.data(), F, d, P);
    } else {
      mse_backward(dout.data(), out.data(), C.data(), F, d);
    }
    auto gp = [&](std::int64_t off) { return off >= 0 ? grads + off : nullptr; };
    linear_backward(dh.data(), grads + layout.D, gp(layout.b_d), dout.data(), h.data(), D, F, m, d);
    gated_backward(da.data(), dg.data(), dh.data(), a.data(), g.data(), F * m, act);
    linear_backward(nullptr, grads + layout.U, gp(layout.b_u), da.data(), K.data(), U, F, d, m);
    linear_backward(nullptr, grads + layout.G, gp(layout.b_g), dg.data(), K.data(), G, F, d, m);
    return loss;
  }
};

void check_memory(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg) {
  const double need = GdCpuModel::bytes(F, P, d, m, cfg), avail = available_ram_bytes();
  if (avail > 0 && need > avail)
    throw UserError(fmt::format("GD training on the CPU (F = {}, P = {}, d = {}, m = {}) needs {:.2f} GiB of memory "
                                "but only {:.2f} GiB are available; use fewer facts or a smaller width, or "
                                "--device cuda",
                                F, P, d, m, need / 1073741824.0, avail / 1073741824.0));
}

}  // namespace

double gd_loss_cpu(const FactSet& facts, std::int64_t width, const GdConfig& cfg, const std::vector<double>& params,
                   std::vector<double>* grad) {
  facts.validate();
  require(width >= 1, "GD model needs width m >= 1 (got {})", width);
  GdCpuModel model(facts, width, cfg);
  require(static_cast<std::int64_t>(params.size()) == model.layout.total,
          "GD parameter vector has {} entries, the layout needs {}", params.size(), model.layout.total);
  if (grad) grad->assign(params.size(), 0.0);
  return model.evaluate(params.data(), grad ? grad->data() : nullptr, nullptr);
}

GdResult train_gd_cpu(const FactSet& facts, std::int64_t width, std::uint64_t seed, const GdConfig& cfg) {
  facts.validate();
  validate_gd_config(cfg);
  const std::int64_t F = facts.F(), P = facts.P(), d = facts.d(), m = width;
  require(m >= 1, "GD training needs width m >= 1 (got {})", m);
  check_memory(F, P, d, m, cfg);

  const auto t_start = Clock::now();
  GdCpuModel model(facts, m, cfg);
  const GdLayout& layout = model.layout;
  nn::ParamArena<double> ar;
  ar.layout = layout.arena();
  ar.allocate();
  ar.params = gd_init_params(m, d, cfg.bias, seed);

  GdResult res;
  res.path = "cpu";
  std::int64_t start = 0;
  double wall_before = 0;
  bool finished = false;
  const std::string fingerprint = gd_fingerprint(facts, m, seed, cfg, res.path);
  if (!cfg.checkpoint.empty()) {
    if (auto ck = read_gd_checkpoint(cfg.checkpoint, fingerprint)) {
      if (static_cast<std::int64_t>(ck->params.size()) != layout.total || ck->epoch > cfg.epochs)
        throw IoError(fmt::format("checkpoint '{}' does not fit this model ({} parameters, epoch {}); delete it",
                                  cfg.checkpoint, ck->params.size(), ck->epoch));
      ar.params = std::move(ck->params);
      ar.m = std::move(ck->m);
      ar.v = std::move(ck->v);
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
  res.epochs_run = start;

  auto save = [&](std::int64_t epochs_done, bool done) {
    write_gd_checkpoint(cfg.checkpoint, make_gd_checkpoint(ar.params, ar.m, ar.v, res, epochs_done, done,
                                                           wall_before + seconds_since(t_start), fingerprint));
  };

  auto last_ck = Clock::now();
  for (std::int64_t t = start; t < cfg.epochs && !finished; ++t) {
    // Step order of epoch t: forward (loss_t, accuracy), backward, Adam step t + 1 with the epoch's
    // cosine lr, then stop when loss_t <= stop_loss.
    // The accuracy is free with CE; with MSE it costs a logits GEMM, so only on recorded epochs.
    ar.zero_grads();
    const bool record = t % cfg.record_every == 0 || t + 1 == cfg.epochs;
    double acc = -1;
    const double loss = model.evaluate(ar.params.data(), ar.grads.data(), model.ce || record ? &acc : nullptr);
    if (!std::isfinite(loss))
      throw NumericError(fmt::format("training diverged: non-finite loss at epoch {}; lower --lr (now {}) or the "
                                     "method's lr=",
                                     t, cfg.lr));
    const bool stop = loss <= cfg.stop_loss;
    const bool last = stop || t + 1 == cfg.epochs;
    if (record || last) {
      if (acc < 0) acc = model.output_accuracy();  // early stop on an unrecorded MSE epoch
      res.loss_curve.push_back(loss);
      res.accuracy_curve.push_back(acc);
      res.curve_epoch.push_back(t);
    }
    const double lr = nn::cosine_lr(cfg.lr, cfg.lr_min, t, cfg.epochs);
    nn::cpu::adam_update(ar.params.data(), ar.grads.data(), ar.m.data(), ar.v.data(), layout.total, lr, cfg.beta1,
                         cfg.beta2, cfg.eps, cfg.weight_decay, t + 1, cfg.adamw);
    res.epochs_run = t + 1;
    res.final_loss = loss;
    res.stopped_early = stop;
    finished = last;
    if (!cfg.checkpoint.empty() && (last || seconds_since(last_ck) >= cfg.checkpoint_every_s)) {
      save(t + 1, last);
      last_ck = Clock::now();
    }
    if (cfg.on_epoch) cfg.on_epoch(t + 1, loss);
  }

  for (const double p : ar.params)
    if (!std::isfinite(p))
      throw NumericError(fmt::format("training diverged: non-finite parameters after epoch {}; lower --lr (now {})",
                                     res.epochs_run, cfg.lr));
  res.mlp = gd_to_mlp(ar.params, layout, cfg);
  res.wall_s = wall_before + seconds_since(t_start);
  return res;
}

}  // namespace memcap::mlp
