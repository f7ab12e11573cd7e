// CPU float64 SSFR trainer (nn/ssfr_train.hpp).
#include "nn/ssfr_train.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace memcap::nn {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void SsfrTrainConfig::validate() const {
  require(steps >= 1, "--steps must be >= 1 (got {})", steps);
  require(batch >= 1 && batch <= (std::int64_t{1} << 24), "--batch must be in [1, 16777216] (got {})", batch);
  require(std::isfinite(lr) && lr > 0, "--lr must be a finite number > 0 (got {})", lr);
  require(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay must be finite and >= 0 (got {})",
          weight_decay);
  require(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && eps > 0, "AdamW needs 0 <= beta < 1 and eps > 0");
  require(eval_every >= 1, "--eval-every must be >= 1 step (got {})", eval_every);
  require(eval_batches >= 0 && eval_batches <= (std::int64_t{1} << 20),
          "--eval-batches must be in [0, 1048576] (0 = 10 max(1, floor(F/1280)); got {})", eval_batches);
  require(precision == "f32" || precision == "f64", "--precision must be f32 or f64 (got '{}')", precision);
  require(std::isfinite(early_stop_acc) && early_stop_acc >= 0 && early_stop_acc <= 1,
          "the early-stop accuracy must be in [0, 1] (got {})", early_stop_acc);
}

std::int64_t SsfrTrainConfig::resolved_eval_batches(std::int64_t facts) const {
  return eval_batches > 0 ? eval_batches : 10 * std::max<std::int64_t>(1, facts / 1280);
}

void SsfrCheckpoint::check(const SsfrTrainConfig& cfg, std::int64_t n_params) const {
  const auto n = static_cast<std::size_t>(n_params);
  const auto ne = static_cast<std::size_t>(round);
  require(params.size() == n && adam_m.size() == n && adam_v.size() == n && next_step >= 1 &&
              next_step < cfg.steps && round >= 1 && partial.loss_curve.size() == static_cast<std::size_t>(next_step) &&
              partial.batch_acc_curve.size() == partial.loss_curve.size() && partial.eval_step.size() == ne &&
              partial.eval_acc.size() == ne && partial.train_acc.size() == ne && partial.eval_loss.size() == ne &&
              partial.train_loss.size() == ne,
          "the SSFR checkpoint does not fit this training ({} parameters, step {} of {}); delete it to start over",
          params.size(), next_step, cfg.steps);
}

SsfrCheckpoint SsfrCheckpoint::of(std::vector<double> params, std::vector<double> adam_m, std::vector<double> adam_v,
                                  std::int64_t next_step, std::int64_t round, const SsfrTrainResult& r, double eval_s,
                                  double wall_s) {
  SsfrCheckpoint ck;
  ck.params = std::move(params);
  ck.adam_m = std::move(adam_m);
  ck.adam_v = std::move(adam_v);
  ck.next_step = next_step;
  ck.round = round;
  ck.partial = r;
  ck.partial.params.clear();
  ck.partial.eval_s = eval_s;
  ck.partial.wall_s = wall_s;
  return ck;
}

bool ssfr_record_eval(SsfrTrainResult& r, std::int64_t step, const SsfrEval& tr, const SsfrEval& ev,
                      const SsfrTrainConfig& cfg) {
  r.eval_step.push_back(step);
  r.train_acc.push_back(tr.accuracy);
  r.train_loss.push_back(tr.loss);
  r.eval_acc.push_back(ev.accuracy);
  r.eval_loss.push_back(ev.loss);
  r.best_acc = std::max(r.best_acc, ev.accuracy);
  r.best_train_acc = std::max(r.best_train_acc, tr.accuracy);
  r.stopped_early = cfg.early_stop && ev.accuracy >= cfg.early_stop_acc && tr.accuracy >= cfg.early_stop_acc;
  return r.stopped_early;
}

std::uint64_t ssfr_eval_first_batch(std::int64_t round, int which, std::int64_t eval_batches) {
  return static_cast<std::uint64_t>((2 * round + which) * eval_batches);
}

SsfrEval ssfr_evaluate_cpu(SsfrWorkspace& ws, const double* params, const std::vector<std::int32_t>& map,
                           const FrozenMlp& mlp, std::int64_t batch_size, std::int64_t batches, std::uint64_t seed,
                           std::uint64_t first_batch) {
  SsfrBatch b;
  std::int64_t hits = 0;
  double loss_sum = 0;
  for (std::int64_t j = 0; j < batches; ++j) {
    ssfr_batch(b, ws.prob->task, map.data(), batch_size, seed, rng::kSsfrEval, first_batch + static_cast<std::uint64_t>(j));
    const SsfrStats st = ssfr_forward(ws, params, b, mlp);
    hits += st.correct;
    loss_sum += st.loss;
  }
  SsfrEval e;
  e.accuracy = static_cast<double>(hits) / static_cast<double>(batches * batch_size);
  e.loss = loss_sum / static_cast<double>(batches);
  return e;
}

SsfrTrainResult train_ssfr_cpu(const SsfrProblem& p, const SsfrTrainConfig& cfg) {
  const auto t_start = Clock::now();
  cfg.validate();
  p.validate();
  const std::int64_t B = cfg.batch, nev = cfg.resolved_eval_batches(p.task.facts);
  SsfrWorkspace ws(p, B);
  ParamArena<double> arena;
  arena.layout = ws.layout;
  arena.allocate();
  arena.params = ssfr_init_params(p.block, cfg.seed);

  SsfrTrainResult r;
  SsfrBatch batch;
  double last_finite = NAN;
  std::int64_t round = 0, t_first = 0;
  double eval_s = 0, spent_s = 0;
  if (cfg.resume) {
    const SsfrCheckpoint& ck = *cfg.resume;
    ck.check(cfg, arena.numel());
    arena.params = ck.params;
    arena.m = ck.adam_m;
    arena.v = ck.adam_v;
    r = ck.partial;
    t_first = ck.next_step;
    round = ck.round;
    last_finite = r.loss_curve.back();
    eval_s = r.eval_s;
    spent_s = r.wall_s;
  }
  // at most 65,536 entries up front: the curves grow with the steps actually run (a huge --steps, or an early
  // stop, must not allocate the whole curve before the first step)
  const auto hint = static_cast<std::size_t>(std::min<std::int64_t>(cfg.steps, std::int64_t{1} << 16));
  r.loss_curve.reserve(hint);
  r.batch_acc_curve.reserve(hint);
  for (std::int64_t t = t_first; t < cfg.steps; ++t) {
    ssfr_batch(batch, p.task, p.map_a.data(), B, cfg.seed, rng::kSsfrTrain, static_cast<std::uint64_t>(t));
    const SsfrStats st = ssfr_forward(ws, arena.params.data(), batch, p.mlp_a);
    if (!std::isfinite(st.loss)) {
      if (t == 0)
        throw NumericError("training diverged: non-finite loss at step 0 (no finite loss before it); check the "
                           "inserted MLP and lower --lr");
      throw NumericError(fmt::format("training diverged: non-finite loss at step {} (last finite loss {:.6g} at step "
                                     "{}); lower --lr",
                                     t, last_finite, t - 1));
    }
    last_finite = st.loss;
    r.loss_curve.push_back(st.loss);
    r.batch_acc_curve.push_back(static_cast<double>(st.correct) / static_cast<double>(B));
    arena.zero_grads();
    ssfr_backward(ws, arena.params.data(), arena.grads.data(), batch, p.mlp_a);
    cpu::adam_update(arena.params.data(), arena.grads.data(), arena.m.data(), arena.v.data(), arena.numel(), cfg.lr,
                     cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, t + 1, /*adamw=*/true);
    r.steps_run = t + 1;
    r.final_loss = st.loss;
    if (t % cfg.eval_every == 0) {
      const auto t0 = Clock::now();
      const SsfrEval tr = ssfr_evaluate_cpu(ws, arena.params.data(), p.map_a, p.mlp_a, B, nev, cfg.seed,
                                            ssfr_eval_first_batch(round, 0, nev));
      const SsfrEval ev = ssfr_evaluate_cpu(ws, arena.params.data(), p.map_b, p.mlp_b, B, nev, cfg.seed,
                                            ssfr_eval_first_batch(round, 1, nev));
      eval_s += since(t0);
      ++round;
      if (ssfr_record_eval(r, t, tr, ev, cfg)) {
        if (cfg.on_step) cfg.on_step(t + 1, st.loss);
        break;
      }
      if (cfg.on_checkpoint && t + 1 < cfg.steps)
        cfg.on_checkpoint(SsfrCheckpoint::of(arena.params, arena.m, arena.v, t + 1, round, r, eval_s,
                                             spent_s + since(t_start)));
    }
    if (cfg.on_step) cfg.on_step(t + 1, st.loss);
  }
  const auto t0 = Clock::now();
  r.final_train_acc = ssfr_evaluate_cpu(ws, arena.params.data(), p.map_a, p.mlp_a, B, nev, cfg.seed,
                                        ssfr_eval_first_batch(round, 0, nev))
                          .accuracy;
  r.final_acc = ssfr_evaluate_cpu(ws, arena.params.data(), p.map_b, p.mlp_b, B, nev, cfg.seed,
                                  ssfr_eval_first_batch(round, 1, nev))
                    .accuracy;
  eval_s += since(t0);
  r.params = arena.params;
  r.wall_s = spent_s + since(t_start);
  r.eval_s = eval_s;
  r.train_loop_s = r.wall_s - eval_s;
  return r;
}

}  // namespace memcap::nn
