// `kata mqar table2`: Table 2 of the KATA paper (spec kata.md §4.1–4.5, §6.2) on the sweep engine: one
// MQAR training per (mixer, learning rate, seed) and one overwrite training per (--ow-mixers, learning
// rate, seed); /summary per training, /best = the best learning rate per row (kata/mqar_jobs.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "core/error.hpp"
#include "kata/mqar_jobs.hpp"
#include "mqar_sweeps.hpp"

namespace memcap::kata_app {

using namespace memcap::kata;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<TaskSlice> slices_or(const std::string& text, TaskKind kind, std::int64_t vocab, std::int64_t examples,
                                 std::vector<TaskSlice> fallback) {
  if (!text.empty()) return parse_slices(text, kind, vocab, examples);
  for (auto& s : fallback) s.vocab = vocab;
  return fallback;
}

void run_table2(CLI::App* sub, SweepState& st) {
  Prepared p = prepare_sweep(sub, st, "kata mqar table2");
  if (p.done) return;
  for (const auto& t : st.tasks)
    require(t == "mqar" || t == "overwrite", "--tasks '{}': use mqar, overwrite or both (comma list)", t);
  require(!st.tasks.empty(), "--tasks is empty: use mqar, overwrite or both");
  sweep::require_distinct(st.tasks, "--tasks");
  const bool ow_fresh = overwrite_fresh(st.ow_examples, st.cfg.fresh_examples);
  auto wanted = [&](const char* t) { return std::find(st.tasks.begin(), st.tasks.end(), t) != st.tasks.end(); };
  const bool no_ow = st.ow_mixers.size() == 1 && st.ow_mixers.front() == "none";
  if (no_ow) st.ow_mixers.clear();
  // --ow-mixers is checked whether or not the overwrite task runs: names, empty items, repeats
  for (const auto& m : st.ow_mixers) {
    require(!m.empty(), "--ow-mixers has an empty item (none: no overwrite rows)");
    MqarModelConfig mc;  // the name alone (the model flags are checked with --mixers, which must hold it)
    mc.mixer = m;
    try {
      mc.validate();
    } catch (const UserError& e) {
      throw UserError(fmt::format("--ow-mixers: {}", e.what()));
    }
  }
  sweep::require_distinct(st.ow_mixers, "--ow-mixers");
  if (!wanted("overwrite")) st.ow_mixers.clear();  // --tasks mqar: the overwrite rows are not planned
  for (const auto& m : st.ow_mixers)
    require(std::find(st.mixers.begin(), st.mixers.end(), m) != st.mixers.end(),
            "--ow-mixers lists '{}', which is not in --mixers (the overwrite columns belong to a Table 2 row)", m);
  require(st.eval_max_len >= 2, "--eval-max-len {} must be >= 2", st.eval_max_len);
  for (const auto& [flag, text] : {std::pair<const char*, const std::string*>{"--train-slices", &st.train_slices},
                                   {"--eval-slices", &st.eval_slices},
                                   {"--ow-train-slices", &st.ow_train_slices},
                                   {"--ow-eval-slices", &st.ow_eval_slices}})
    require_slice_list_given(sub, flag, *text);
  const std::int64_t V = st.cfg.model.vocab;
  const auto mq_train = slices_or(st.train_slices, TaskKind::mqar, V, 20000, mqar_training_mixture(V));
  const auto mq_eval = slices_or(st.eval_slices, TaskKind::mqar, V, st.eval_examples,
                                 mqar_eval_diagonal(V, st.eval_max_len, st.eval_examples));
  require(!mq_eval.empty(), "--eval-max-len {} leaves no evaluation slice; raise it or give --eval-slices",
          st.eval_max_len);
  // The overwrite slices (their ow_acc_* columns are in every row) are checked only when an overwrite training
  // runs: --tasks mqar --vocab 64 needs no T = 8K slice (given slice lists are still parsed).
  const auto ow_train = slices_or(st.ow_train_slices, TaskKind::overwrite, V, 20000, overwrite_training_mixture(V));
  const auto ow_eval =
      slices_or(st.ow_eval_slices, TaskKind::overwrite, V, st.eval_examples, overwrite_eval(V, st.eval_examples));
  const bool ow_runs = !st.ow_mixers.empty();
  for (const std::vector<TaskSlice>* list : {&mq_train, &mq_eval, &ow_train, &ow_eval})
    if (ow_runs || (list != &ow_train && list != &ow_eval))
      for (const auto& s : *list) s.validate();
  require_distinct_slices(mq_train, "--train-slices", false);
  require_distinct_slices(mq_eval, "--eval-slices", true);
  require_distinct_slices(ow_train, "--ow-train-slices", false);
  require_distinct_slices(ow_eval, "--ow-eval-slices", true);

  std::vector<JobSpec> specs;
  sweep::Plan plan;
  plan.finalizer = kTable2Finalizer;
  auto add = [&](const std::string& task, const std::string& mixer, double lr, int si) {
    JobSpec js;
    js.task = task;
    const bool mq = task == "mqar";
    js.cfg = job_config(st, mixer, lr, seed_of(st, si), mq ? mq_train : ow_train, mq ? mq_eval : ow_eval);
    if (!mq) js.cfg.fresh_examples = ow_fresh;
    js.data_from = mq ? (st.train_slices.empty() ? "the default MQAR mixture" : "--train-slices") +
                            std::string(st.eval_slices.empty() ? ", --eval-examples" : ", --eval-slices")
                      : (st.ow_train_slices.empty() ? "the default overwrite mixture" : "--ow-train-slices") +
                            std::string(st.ow_eval_slices.empty() ? ", --eval-examples" : ", --ow-eval-slices");
    sweep::Job j;
    j.index = static_cast<std::int64_t>(plan.jobs.size());
    j.seed = js.cfg.seed;
    j.key = fmt::format("task={}/mixer={}/lr={:g}/seed={}", task, mixer, lr, j.seed);
    j.params = {{"task", task}, {"mixer", mixer}, {"lr", lr}, {"seed", j.seed}};
    plan.jobs.push_back(j);
    specs.push_back(std::move(js));
  };
  if (wanted("mqar"))
    for (const auto& m : st.mixers)
      for (double lr : st.lrs)
        for (int s = 0; s < st.seeds; ++s) add("mqar", m, lr, s);
  if (wanted("overwrite"))
    for (const auto& m : st.ow_mixers)
      for (double lr : st.lrs)
        for (int s = 0; s < st.seeds; ++s) add("overwrite", m, lr, s);
  require(!plan.jobs.empty(), "--tasks overwrite with --ow-mixers none plans no training");
  plan_models(st, p, specs, "kata mqar table2");

  // The state column of every row: the longest MQAR evaluation slice (Table 2: softmax's KV cache at T = 4096).
  std::int64_t state_T = 0;
  for (const auto& s : mq_eval) state_T = std::max(state_T, s.seq_len);
  const int rc = run_specs(st, p, plan, specs, [&](const JobSpec& js, const MqarJobRun& run) {
    const MqarModel model = MqarModel::build(js.cfg.model);
    const auto& r = run.res;
    const bool ok = !run.diverged;
    io::Row row;
    row.set("task", js.task)
        .set("mixer", js.cfg.model.mixer)
        .set("map", model.map_spec)
        .set("lr", js.cfg.lr)
        .set("d_model", js.cfg.model.d_model)
        .set("backbone", js.cfg.model.backbone)
        .set("rope", static_cast<std::int64_t>(js.cfg.model.rope))
        .set("rope_base", js.cfg.model.rope ? js.cfg.model.rope_base : kNaN)
        .set("heads", model.heads)
        .set("d_head", model.d_head)
        .set("params", model.param_count())
        .set("state", model.state_size(state_T))
        .set("state_T", state_T)
        .set("epochs_run", ok ? r.epochs_run : 0)
        .set("steps", ok ? r.steps : 0)
        .set("stopped_early", static_cast<std::int64_t>(ok && r.stopped_early))
        .set("resumed_step", run.resumed_step)
        .set("training_set", js.cfg.fresh_examples ? "fresh" : "fixed")
        .set("final_train_loss", ok && !r.loss.empty() ? r.loss.back() : kNaN);
    const bool mq = js.task == "mqar";
    for (std::size_t i = 0; i < mq_eval.size(); ++i)
      row.set(mqar_slice_column("", mq_eval[i]), ok && mq ? r.final_eval[i].accuracy : kNaN);
    for (std::size_t i = 0; i < ow_eval.size(); ++i)
      row.set(mqar_slice_column("ow_", ow_eval[i]), ok && !mq ? r.final_eval[i].accuracy : kNaN);
    row.set("eval_avg", ok ? mqar_eval_avg(r.final_eval) : kNaN)
        .set("ood_avg", ok ? mqar_ood_avg(js.cfg, r.final_eval) : kNaN)
        .set("cap_0.99", ok ? capacity_at(js.cfg.eval, r.final_eval, 0.99) : 0)
        .set("cap_0.90", ok ? capacity_at(js.cfg.eval, r.final_eval, 0.90) : 0)
        .set("train_s", ok ? r.train_s : kNaN)
        .set("eval_s", ok ? r.eval_s : kNaN);
    return row;
  });
  if (rc != 0) throw UserError("kata mqar table2 failed", rc);
}

}  // namespace

void add_mqar_table2(CLI::App* mqar) {
  register_mqar_finalizers();
  auto* sub = mqar->add_subcommand(
      "table2",
      "Table 2 of the KATA paper (spec kata.md §4.1-4.5, §6.2): per (mixer, learning rate, seed) one MQAR\n"
      "training on the Zoology mixture (T <= 256) evaluated on the diagonal K = T/4, T = 512..4096, and for\n"
      "--ow-mixers one repeated-key overwrite training (K = 4..32, T = 8K) evaluated at K = 64..384. Rows:\n"
      "/summary (task, mixer, lr, seed, params, state, acc_T<T>_K<K>, ow_acc_T<T>_K<K>, eval_avg, ood_avg,\n"
      "cap_0.99, cap_0.90, status: done | diverged, ...), /runs/<job> (curves); /best: per mixer the learning\n"
      "rate with the best mean accuracy over seeds (§4.4 'keep the best per row') and its accuracies. On the\n"
      "sweep engine: --dry-run, --shard i/n, --resume (a killed training continues from its checkpoint),\n"
      "kata merge, --jobs trainings at once, --devices. Presets: table2 (the paper), table2-smoke (seconds,\n"
      "CPU). The full table needs GPUs (hours per row on a CPU). docs/kata-mqar.md has the details.\n"
      "Example: kata mqar table2 --preset table2-smoke --out t2.h5");
  auto st = std::make_shared<SweepState>();
  st->mixers = {"softmax", "m1", "m2", "sigma2", "m4", "sigma4", "delta-m1", "delta-m2"};
  st->lrs = {1e-3, 3e-3, 1e-2};
  add_shared(sub, *st, "table2.h5");
  sub->add_option("--ow-mixers", st->ow_mixers, "Mixers that also get the overwrite columns (comma list; none = no "
                                                "overwrite trainings)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--tasks", st->tasks,
                  "Trainings to plan: mqar (a row per --mixers), overwrite (per --ow-mixers) or both; e.g.\n"
                  "--tasks overwrite --mixers m2 --ow-mixers m2 runs only M2's overwrite column")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--epochs", st->cfg.epochs, "Passes over the training set (cosine over all steps)")
      ->capture_default_str();
  sub->add_option("--eval-every", st->cfg.eval_every, kEvalEveryHelp)
      ->capture_default_str();
  sub->add_option("--train-slices", st->train_slices, "MQAR training slices T:K:N,... (default: the §4.1 mixture)");
  sub->add_option("--eval-slices", st->eval_slices, "MQAR evaluation slices T:K[:N],... (default: the §4.1 diagonal)");
  sub->add_option("--eval-max-len", st->eval_max_len, "Longest T of the default evaluation diagonal")
      ->capture_default_str();
  sub->add_option("--ow-train-slices", st->ow_train_slices,
                  "Overwrite training slices T:K:N,... (default: K = 4, 8, 16, 32 at T = 8K, 20000 each)");
  add_ow_examples_option(sub, st->ow_examples, "the overwrite trainings (--fresh-examples: every training fresh)");
  sub->add_option("--ow-eval-slices", st->ow_eval_slices,
                  "Overwrite evaluation slices T:K[:N],... (default: K = 64, 128, 256, 384 at T = 8K)");
  sub->callback([sub, st] { run_table2(sub, *st); });
}
}  // namespace memcap::kata_app
