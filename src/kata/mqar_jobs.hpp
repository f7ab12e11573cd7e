// One training of the MQAR sweeps (`kata mqar table2`, `kata induction`): train_mqar with crash-safe
// checkpoints at a scratch path (a killed training resumes from its last checkpoint, bit-identically),
// divergence recorded as a status instead of ending the sweep, and the summary columns and /runs arrays
// the sweeps share. The finalizers turn the per-training rows into the paper's tables: Table 2's best
// learning rate per row (/best) and the induction phase steps (/induction).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "io/table.hpp"
#include "kata/mqar_train.hpp"

namespace memcap::kata {

struct MqarJobRun {
  MqarTrainResult res;
  bool diverged = false;      // NumericError (non-finite loss or gradient): res holds nothing useful
  std::string message;        // the divergence message
  std::int64_t resumed_step = 0;  // the checkpoint's step the training continued from (0 = fresh)
};

// Trains cfg. checkpoint != "": resumes from the file when it holds a checkpoint of this training
// (fingerprint over cfg and `device`), writes one every cfg.checkpoint_every steps and after each
// evaluation, and removes it at the end.
MqarJobRun run_mqar_training(MqarTrainConfig cfg, const std::string& checkpoint, const std::string& device);

// "acc_T<T>_K<K>" (induction: "acc_T<T>") with `prefix` in front.
std::string mqar_slice_column(const std::string& prefix, const TaskSlice& s);

// Mean accuracy over the slices, over the slices longer than every training slice (NaN when none).
double mqar_eval_avg(const std::vector<SliceResult>& r);
double mqar_ood_avg(const MqarTrainConfig& cfg, const std::vector<SliceResult>& r);

// First evaluation step whose accuracy on every evaluation slice is >= theta (-1 when none): the
// induction "phase step" (spec §4.3 [D]).
std::int64_t mqar_phase_step(const MqarTrainResult& r, std::size_t slices, double theta);

// The curves of one training into g: step, loss, accuracy, lr, grad_norm (gzip), eval_epoch,
// eval_step, eval_accuracy / eval_loss (evaluations x slices), eval_T/K/examples, train_T/K/examples.
void write_mqar_curves(h5::Group& g, const MqarTrainConfig& cfg, const MqarTrainResult& res);

// Finalizer names (sweep::register_finalizer); register_mqar_finalizers() is idempotent.
inline constexpr const char* kTable2Finalizer = "kata-mqar-table2";
inline constexpr const char* kInductionFinalizer = "kata-induction";
void register_mqar_finalizers();

// Table 2 from /summary rows (task, mixer, lr, status, params, state, acc_T*_K* / ow_acc_T*_K*,
// eval_avg): per (task, mixer) the learning rate with the best mean eval_avg over its finished seeds
// (ties: the first), and that rate's mean per-slice accuracy. One row per mixer, in order of first
// appearance: mixer, params, state, mqar_lr, mqar_seeds, acc_T*_K*, ood_avg, cap_0.99, cap_0.90,
// ow_lr, ow_seeds, ow_acc_T*_K*, ow_avg (NaN / 0 where a task has no finished training).
io::Table table2_best(const io::Table& summary);
// Text of that table (one line per mixer), as printed after a run.
std::string format_table2(const io::Table& best);

// The phase-step cell of the printed /induction table: "-" when no seed reached the threshold, the mean phase
// step when all `seeds` did, else the mean over those that did and how many: "7000 (1 of 2 seeds)".
std::string induction_phase_cell(double mean_phase, std::int64_t reached, std::int64_t seeds);

}  // namespace memcap::kata
