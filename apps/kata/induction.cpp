// `kata induction`: the induction-head probe of the KATA paper (spec kata.md §4.3, E.2) on the sweep
// engine: one training of the MQAR model on the induction task per (mixer, length, learning rate, seed),
// with held-out accuracy curves and the phase step; /induction = per (mixer, T) the best learning rate.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "kata/mqar_jobs.hpp"
#include "mqar_sweeps.hpp"

namespace memcap::kata_app {

using namespace memcap::kata;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Mean training loss of the last (up to) 50 steps: the end of the training curve, less noisy than one batch.
double recent_train_loss(const MqarTrainResult& r) {
  const std::size_t n = std::min<std::size_t>(50, r.loss.size());
  if (n == 0) return kNaN;
  double s = 0;
  for (std::size_t i = r.loss.size() - n; i < r.loss.size(); ++i) s += r.loss[i];
  return s / static_cast<double>(n);
}

// How far the held-out loss fell over the last quarter of the training: the loss of the last evaluation at or
// before 3/4 of the final evaluation's step minus the final one (one evaluation slice; NaN without two such
// evaluations). A plateau that ends late shows as a clear drop while the accuracy is still under the phase
// threshold: the budget, not the mixer, stopped it.
struct LateDrop {
  double drop = kNaN, from = kNaN;
  std::int64_t from_step = -1;
};
LateDrop late_eval_loss_drop(const MqarTrainResult& r) {
  LateDrop d;
  if (r.eval_step.size() < 2 || r.eval_loss.size() != r.eval_step.size()) return d;
  const double cut = 0.75 * static_cast<double>(r.eval_step.back());
  for (std::size_t e = 0; e + 1 < r.eval_step.size(); ++e)
    if (static_cast<double>(r.eval_step[e]) <= cut) {
      d.from = r.eval_loss[e];
      d.from_step = r.eval_step[e];
    }
  if (d.from_step >= 0) d.drop = d.from - r.eval_loss.back();
  return d;
}

void run_induction(CLI::App* sub, SweepState& st) {
  Prepared p = prepare_sweep(sub, st, "kata induction");
  if (p.done) return;
  require_list_items(sub, "--lengths");
  require(!st.lengths.empty(), "--lengths is empty");
  std::vector<std::string> shown;
  for (auto T : st.lengths) shown.push_back(std::to_string(T));
  sweep::require_distinct(shown, "--lengths");
  require(st.steps >= 1 && st.steps <= (1 << 24), "--steps {} must be in [1, 16777216]", st.steps);
  require(st.eval_steps >= 1 && st.eval_steps <= st.steps && st.steps % st.eval_steps == 0,
          "--eval-every-steps {} must be in [1, --steps] and divide --steps ({})", st.eval_steps, st.steps);
  require(std::isfinite(st.phase_threshold) && st.phase_threshold > 0 && st.phase_threshold <= 1,
          "--phase-threshold {} must be in (0, 1]", st.phase_threshold);
  const std::int64_t V = st.cfg.model.vocab;
  // One epoch = --eval-every-steps steps over a fixed set of batch * eval_steps examples; an evaluation
  // after every epoch on held-out examples (the phase step is read at this resolution).
  st.cfg.epochs = st.steps / st.eval_steps;
  st.cfg.eval_every = 1;
  std::vector<JobSpec> specs;
  sweep::Plan plan;
  plan.finalizer = kInductionFinalizer;
  for (const auto& m : st.mixers)
    for (const std::int64_t T : st.lengths)
      for (double lr : st.lrs)
        for (int s = 0; s < st.seeds; ++s) {
          TaskSlice tr;
          tr.kind = TaskKind::induction;
          tr.seq_len = T;
          tr.keys = 1;
          tr.vocab = V;
          tr.examples = st.cfg.batch * st.eval_steps;
          tr.validate();
          TaskSlice ev = tr;
          ev.examples = st.eval_examples;
          JobSpec js;
          js.task = "induction";
          js.data_from = "--batch x --eval-every-steps, --eval-examples";
          js.cfg = job_config(st, m, lr, seed_of(st, s), {tr}, {ev});
          sweep::Job j;
          j.index = static_cast<std::int64_t>(plan.jobs.size());
          j.seed = js.cfg.seed;
          j.key = fmt::format("mixer={}/T={}/lr={:g}/seed={}", m, T, lr, j.seed);
          j.params = {{"mixer", m}, {"T", T}, {"lr", lr}, {"seed", j.seed}};
          plan.jobs.push_back(j);
          specs.push_back(std::move(js));
        }
  plan_models(st, p, specs, "kata induction");
  const int rc = run_specs(st, p, plan, specs, [&](const JobSpec& js, const MqarJobRun& run) {
    const MqarModel model = MqarModel::build(js.cfg.model);
    const auto& r = run.res;
    const bool ok = !run.diverged;
    const std::int64_t T = js.cfg.eval.front().seq_len;
    const LateDrop late = ok ? late_eval_loss_drop(r) : LateDrop{};
    io::Row row;
    row.set("task", js.task)
        .set("mixer", js.cfg.model.mixer)
        .set("map", model.map_spec)
        .set("seq_len", T)
        .set("lr", js.cfg.lr)
        .set("d_model", js.cfg.model.d_model)
        .set("backbone", js.cfg.model.backbone)
        .set("rope", static_cast<std::int64_t>(js.cfg.model.rope))
        .set("rope_base", js.cfg.model.rope ? js.cfg.model.rope_base : kNaN)
        .set("heads", model.heads)
        .set("params", model.param_count())
        .set("state", model.state_size(T))
        .set("epochs_run", ok ? r.epochs_run : 0)
        .set("steps", ok ? r.steps : 0)
        .set("resumed_step", run.resumed_step)
        .set("final_train_loss", ok && !r.loss.empty() ? r.loss.back() : kNaN)
        .set("final_acc", ok ? r.final_eval.front().accuracy : kNaN)
        .set("final_eval_loss", ok ? r.final_eval.front().loss : kNaN)
        .set("late_eval_loss_drop", late.drop)
        .set("training_set", js.cfg.fresh_examples ? "fresh" : "fixed")
        .set("phase_step", ok ? mqar_phase_step(r, 1, st.phase_threshold) : -1)
        .set("phase_threshold", st.phase_threshold)
        .set("train_s", ok ? r.train_s : kNaN)
        .set("eval_s", ok ? r.eval_s : kNaN);
    // A fixed training set the model learned by heart: training loss far under the held-out loss, and the task
    // itself not learned. Said once per training, since the accuracy alone reads as "the mixer cannot do it".
    const double tl = ok ? recent_train_loss(r) : kNaN;
    if (ok && !js.cfg.fresh_examples && r.final_eval.front().accuracy < st.phase_threshold &&
        tl < 0.5 * r.final_eval.front().loss && cli::verbosity() >= 0)
      std::fprintf(stderr,
                   "kata induction: note: %s T=%lld lr=%g seed=%llu: training loss %.3g against %.3g on held-out "
                   "sequences (accuracy %.3f): the model memorized its fixed training set of %lld sequences; "
                   "--fresh-examples draws a new set every epoch\n",
                   js.cfg.model.mixer.c_str(), static_cast<long long>(T), js.cfg.lr,
                   static_cast<unsigned long long>(js.cfg.seed), tl, r.final_eval.front().loss,
                   r.final_eval.front().accuracy, static_cast<long long>(js.cfg.train.front().examples));
    // Still learning when the budget ended: the held-out loss fell by more than 5% over the last quarter of the
    // steps and the phase was not reached (a late plateau exit; E.2's softmax at T = 1024 does this on new sets).
    if (ok && r.final_eval.front().accuracy < st.phase_threshold && late.drop > 0.05 * late.from &&
        cli::verbosity() >= 0)
      std::fprintf(stderr,
                   "kata induction: note: %s T=%lld lr=%g seed=%llu: held-out loss fell from %.3g (step %lld) to %.3g "
                   "(step %lld) with accuracy %.3f under the phase threshold %g: still learning when the budget "
                   "ended; a larger --steps may reach the phase\n",
                   js.cfg.model.mixer.c_str(), static_cast<long long>(T), js.cfg.lr,
                   static_cast<unsigned long long>(js.cfg.seed), late.from, static_cast<long long>(late.from_step),
                   r.final_eval.front().loss, static_cast<long long>(r.eval_step.back()),
                   r.final_eval.front().accuracy, st.phase_threshold);
    return row;
  });
  if (rc != 0) throw UserError("kata induction failed", rc);
}

memcap::cli::Register reg_induction("kata", 75, [](CLI::App& tool) {
  register_mqar_finalizers();
  auto* sub = tool.add_subcommand(
      "induction",
      "Induction-head probe of the KATA paper (spec kata.md §4.3, E.2): per (mixer, length T, learning rate,\n"
      "seed) the MQAR language model (§4.4 backbone, or E.2's with --backbone transformer; --heads 4,\n"
      "V = 256) trained on the induction\n"
      "task (content uniform from [0, V-1), trigger V-1 at i ~ U[0, T-3] and at T-1; one label at T-1, the\n"
      "token after the first trigger) for --steps steps, evaluated on held-out examples every\n"
      "--eval-every-steps steps. phase_step = the first evaluation step with accuracy >= --phase-threshold\n"
      "(0.99; -1 when never). Writes /summary (mixer, seq_len, lr, final_acc, phase_step, ...), /runs/<job>\n"
      "(loss and evaluation curves), /induction (per mixer and T: best learning rate, accuracy, mean phase\n"
      "step). Sweep engine as kata mqar table2. Presets: induction, induction-e2 (E.2's transformer backbone),\n"
      "induction-long (T = 1024, 2048, 16,000 steps, new sets, two seeds: softmax's phase lies past E.2's 8k),\n"
      "induction-smoke. docs/kata-mqar.md.\n"
      "Example: kata induction --mixers softmax,sigma2 --lengths 128,256 --out induction.h5");
  auto st = std::make_shared<SweepState>();
  st->mixers = {"softmax", "sigma2"};
  st->lrs = {1e-3};
  st->cfg.model.vocab = 256;
  st->cfg.model.heads = 4;
  st->cfg.batch = 64;
  st->cfg.early_stop = 2;
  add_shared(sub, *st, "induction.h5");
  sub->add_option("--lengths", st->lengths, "Sequence lengths T (comma list; the paper's distances)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--steps", st->steps, "Training steps (the paper's budget: 8000)")->capture_default_str();
  sub->add_option("--eval-every-steps", st->eval_steps,
                  "Steps between evaluations (= one epoch over a fixed set of batch x this many examples)")
      ->capture_default_str();
  sub->add_option("--phase-threshold", st->phase_threshold, "Accuracy that marks the phase step")
      ->capture_default_str();
  sub->callback([sub, st] { run_induction(sub, *st); });
});

}  // namespace
}  // namespace memcap::kata_app
