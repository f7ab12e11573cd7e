// Shared plumbing of the MQAR sweeps `kata mqar table2` (mqar_table2.cpp) and `kata induction`
// (induction.cpp): their common flags, preset and device handling, the plan printout and memory check,
// and the sweep-engine loop that runs one MQAR training per job (kata/mqar_jobs.hpp) on the CPU or on
// the GPUs of --devices, --jobs at once.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/app.hpp"
#include "io/table.hpp"
#include "kata/mqar_jobs.hpp"
#include "kata/mqar_train.hpp"
#include "sweep/sweep.hpp"

namespace memcap::kata_app {

// --fresh-examples of kata mqar train, table2 and induction.
inline constexpr const char* kFreshExamplesHelp =
    "Draw a new training set of each slice's size every epoch (no example seen twice) instead of one fixed set\n"
    "repeated every epoch (Zoology's protocol, the default)";

// --eval-every of kata mqar train and table2.
inline constexpr const char* kEvalEveryHelp =
    "Epochs between recorded evaluations (the last epoch always). The early-stop check still runs after every\n"
    "epoch, as a screen that stops counting a slice once --early-stop is out of reach: the same stop as\n"
    "--eval-every 1 at a fraction of its cost; only the /runs/<job>/eval curves get fewer rows";

using kata::MqarTrainConfig;
using kata::TaskSlice;

// Flags both sweeps have.
struct SweepState {
  cli::CommonOptions common;
  sweep::Options sweep;
  std::string preset;
  MqarTrainConfig cfg;  // model, optimizer and schedule of every job (slices, lr, seed set per job)
  std::vector<std::string> mixers;
  std::vector<double> lrs;
  int seeds = 1;
  std::string devices = "all";
  int jobs = 1;
  std::int64_t eval_examples = 1000;
  // table2
  std::vector<std::string> ow_mixers = {"softmax", "m2", "delta-m2"};
  std::vector<std::string> tasks = {"mqar", "overwrite"};  // which of a row's trainings the plan holds
  // Training set of the overwrite trainings: fresh (a new set every epoch) or fixed (Zoology's one set; a fixed
  // set is memorized there, docs/kata-mqar.md "The overwrite columns and memorization")
  std::string ow_examples = "fresh";
  std::string train_slices, eval_slices, ow_train_slices, ow_eval_slices;
  std::int64_t eval_max_len = 4096;
  // induction
  std::vector<std::int64_t> lengths = {128, 256, 512, 1024, 2048};
  std::int64_t steps = 8000, eval_steps = 250;
  double phase_threshold = 0.99;
};

struct JobSpec {
  std::string task;     // mqar | overwrite | induction
  MqarTrainConfig cfg;  // complete
  std::string data_from;  // the flags that size its training and evaluation data (named by the memory check)
};

struct Prepared {
  io::RunContext ctx;
  std::vector<int> ords;
  bool done = false;
};

// The model's flags (kata mqar train and both sweeps): --d-model, --layers, --backbone, --heads, --vocab, --chunk,
// --map-eps, --rope, --rope-base.
void add_model_options(CLI::App* sub, kata::MqarModelConfig& m, const std::string& vocab_help);

// --ow-examples fresh|fixed of kata mqar train and table2: the training set of the overwrite trainings (`what`
// names them in the help).
void add_ow_examples_option(CLI::App* sub, std::string& ow_examples, const std::string& what);
// Whether an overwrite training draws a new training set every epoch: --ow-examples fresh, or --fresh-examples
// (every training). UserError (exit 2) when --ow-examples fixed contradicts --fresh-examples.
bool overwrite_fresh(const std::string& ow_examples, bool fresh_examples);
// --mixers, --lrs, --seeds, --devices, --jobs, the model and optimizer flags, --checkpoint-every.
void add_shared(CLI::App* sub, SweepState& st, const std::string& default_out);
// Preset, common flags and the shared checks (nothing created yet); --device cuda needs the CUDA trainer,
// auto falls back to the CPU (and says so) when the build has none.
Prepared prepare_sweep(CLI::App* sub, SweepState& st, const char* what);
// A slice-list flag (--train-slices, --eval-slices, ...) given with an empty value: UserError "--flag is empty".
void require_slice_list_given(CLI::App* sub, const std::string& flag, const std::string& text);
// UserError naming `flag` when two slices repeat: evaluation slices (eval) by T:K (their summary columns would
// collide), training slices by T:K:N.
void require_distinct_slices(const std::vector<TaskSlice>& slices, const std::string& flag, bool eval);
// A comma-list flag parsed into numbers (--lrs, --lengths): UserError "--flag is empty" for '' and "--flag has an
// empty item" for 'a,,b' (CLI11 would read the empty text as 0).
void require_list_items(CLI::App* sub, const std::string& flag);
// The job's complete training configuration (validated).
MqarTrainConfig job_config(const SweepState& st, const std::string& mixer, double lr, std::uint64_t seed,
                           std::vector<TaskSlice> train, std::vector<TaskSlice> eval);
// Dry run: prints per task and mixer the parameters, state, steps, slices and memory. Real run: refuses
// a plan whose largest training does not fit (--jobs of them per device).
void plan_models(const SweepState& st, const Prepared& p, const std::vector<JobSpec>& specs, const char* what);
// Runs the plan on the sweep engine; row_of builds a job's summary row (status and path are added).
int run_specs(SweepState& st, const Prepared& p, const sweep::Plan& plan, const std::vector<JobSpec>& specs,
              const std::function<io::Row(const JobSpec&, const kata::MqarJobRun&)>& row_of);
// Seed of the i-th seed of a row: --seed + i.
std::uint64_t seed_of(const SweepState& st, int i);

// `kata mqar table2` under `kata mqar`.
void add_mqar_table2(CLI::App* mqar);

}  // namespace memcap::kata_app
