// CPU training and evaluation of the MQAR language model (spec kata.md §4.4, §4.5): AdamW (β₂ = 0.95,
// weight decay on every parameter, as Zoology), global-norm gradient clipping, a cosine schedule over
// all steps, per-slice batches in a shuffled order, per-slice accuracy at the labelled positions, early
// stop when the hardest evaluation slice reaches the threshold. Deterministic for any thread count:
// a batch is split into micro-batches of a fixed token budget (never derived from the thread count),
// micro-batch u adds its gradient into buffer u mod 16 (each buffer filled in micro-batch order by one
// thread), and the buffers are summed in index order in float64; BLAS runs single-threaded (core/threads.hpp). Parameters and Adam moments are float64
// master copies; the forward/backward runs in float32 (default) or float64.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kata/mqar_model.hpp"
#include "kata/mqar_task.hpp"

namespace memcap::kata {

struct MqarCheckpoint;

struct MqarTrainConfig {
  MqarModelConfig model;
  std::vector<TaskSlice> train;   // training slices (examples = slice size; the set is fixed across epochs)
  std::vector<TaskSlice> eval;    // evaluation slices
  std::int64_t batch = 256;
  std::int64_t epochs = 32;
  double lr = 1e-3, lr_min = 0.0;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double clip = 1.0;              // global gradient-norm clip (0 = none)
  // Epochs between recorded evaluations (the last epoch always); the early-stop check runs after every epoch
  // regardless (mqar_epoch_end: a screen that stops counting once the threshold is out of reach).
  std::int64_t eval_every = 1;
  double early_stop = 0.999;      // stop once every evaluation slice reaches this accuracy (> 1 = never)
  // false: one fixed training set per slice, the same examples every epoch (Zoology's protocol, §4.1); true: a new
  // set of the slice's size every epoch (no example seen twice: nothing to memorize).
  bool fresh_examples = false;
  std::int64_t micro_tokens = 1024;  // tokens per micro-batch (>= one sequence)
  // f32 | f64 forward/backward; tf32 (GPU only): f32 storage and master weights, cuBLAS products on TF32
  // tensor cores (the dense layers, the logits and the gemm mixer's scores).
  std::string precision = "f32";
  // cpu | cuda (mqar_train_cuda.hpp: the whole step on the current GPU, fp32 master weights for f32).
  std::string device = "cpu";
  // GPU mixer-core variant: auto or a name of mqar_mixer_kernels() (mqar_model.hpp); ignored on the CPU.
  std::string mixer_kernel = "auto";
  std::uint64_t seed = 0;
  // Called after every optimizer step (step count so far, planned total, loss, batch accuracy).
  std::function<void(std::int64_t, std::int64_t, double, double)> on_step;
  // Called after every evaluation (epoch, accuracy per evaluation slice).
  std::function<void(std::int64_t, const std::vector<double>&)> on_eval;
  // Checkpoints (kata/mqar_checkpoint.hpp writes them crash-safely): when set, called with the training
  // state every `checkpoint_every` steps (0 = never mid-epoch) and after every evaluation but the last.
  std::function<void(const MqarCheckpoint&)> on_checkpoint;
  std::int64_t checkpoint_every = 0;
  // Continue from this state (a checkpoint of a run with the same configuration): the result is
  // bit-identical to the uninterrupted run.
  const MqarCheckpoint* resume = nullptr;
  void validate() const;  // UserError naming the bad field
  std::int64_t steps_per_epoch() const;
};

struct SliceResult {
  double accuracy = 0, loss = 0;  // mean over the labelled positions
  std::int64_t labelled = 0;
};

struct MqarTrainResult {
  std::string path;  // "cpu:f32" | "cpu:f64" | "cuda:f32" | "cuda:f64"
  std::string mixer_kernel;  // GPU mixer-core variants that ran ("gemm", "gemm+chunked-eval", …); "" on the CPU
  std::int64_t params = 0, steps = 0, planned_steps = 0, epochs_run = 0;
  bool stopped_early = false;
  // Per step.
  std::vector<std::int64_t> step;
  std::vector<double> loss, accuracy, lr, grad_norm;
  // Per evaluation (rows) × evaluation slice (columns), row-major.
  std::vector<std::int64_t> eval_epoch, eval_step;
  std::vector<double> eval_accuracy, eval_loss;
  std::vector<SliceResult> final_eval;  // the last evaluation
  std::vector<double> final_params;     // float64 master parameters at the end
  double train_s = 0, eval_s = 0;
};

// The training state between two steps: float64 parameters and Adam moments, the position (steps done,
// epoch, batches of that epoch's order done) and the result so far (curves, evaluation history, times).
struct MqarCheckpoint {
  std::vector<double> params, m, v;
  std::int64_t steps = 0, epoch = 0, batch_in_epoch = 0;
  MqarTrainResult partial;  // final_eval and final_params are not kept
};

// The checkpoint after step t (epoch `epoch`, `pos` batches of its order done), with epoch_s seconds of the
// current epoch added to the partial result's train_s (both trainers; the arenas are moved in).
MqarCheckpoint make_mqar_checkpoint(std::vector<double> params, std::vector<double> m, std::vector<double> v,
                                    const MqarTrainResult& res, std::int64_t t, std::int64_t epoch, std::int64_t pos,
                                    double epoch_s);

// Seeds of the slices: derive_seed(seed, "mqar/<train|eval>/<task>/T=..,K=../<index>").
std::uint64_t slice_seed(std::uint64_t seed, const char* role, const TaskSlice& s, std::size_t index);

// Runs on cfg.device (cuda: train_mqar_cuda; DeviceError when the build has no CUDA).
MqarTrainResult train_mqar(const MqarTrainConfig& cfg);

// One evaluation row of a training (both trainers): appends (epochs_done, step, accuracy and loss per
// evaluation slice) to res, sets res.final_eval, calls cfg.on_eval; true when the hardest slice reached
// cfg.early_stop (the caller stops early unless it was the last epoch).
bool record_mqar_evaluation(MqarTrainResult& res, const MqarTrainConfig& cfg, std::int64_t epochs_done,
                            std::int64_t step, std::vector<SliceResult> ev);

// What ends an epoch (both trainers, mqar_epoch_end).
enum class MqarEpochEnd {
  none,      // no evaluation (between two of --eval-every, early stop off)
  screened,  // the early-stop screen ran and some slice cannot reach cfg.early_stop: nothing recorded
  record,    // ev holds a full evaluation to record (an --eval-every epoch, the last, or a passed screen)
};

// After epoch `epoch` (0-based): on an evaluation epoch (every cfg.eval_every and the last) ev receives every
// slice's full evaluation. Between them, when early stop is on, the §4.4 check runs as a screen: slices from the
// lowest last recorded accuracy up (before any, the last listed first), each through eval(slice, max_errors),
// which may stop counting once more than max_errors predictions are wrong (mqar_error_budget: the threshold is
// then out of reach). Exact: record is returned exactly when a full evaluation would stop the training, with
// ev equal to that full evaluation; otherwise nothing is recorded, and the cost is a fraction of an evaluation.
MqarEpochEnd mqar_epoch_end(const MqarTrainConfig& cfg, const MqarTrainResult& res, std::int64_t epoch,
                            std::vector<SliceResult>& ev,
                            const std::function<SliceResult(std::size_t, std::int64_t)>& eval);

// The most wrong predictions among `labelled` positions that still reach accuracy `threshold` (the division
// of SliceResult::accuracy); -1 when even none wrong misses it.
std::int64_t mqar_error_budget(std::int64_t labelled, double threshold);

// The batches of one epoch in training order (both trainers): example order perm[slice] and the
// (slice, batch index) list `batches`, visited in `order`; batch b of slice s holds the examples
// perm[s][b·batch .. min(examples, (b+1)·batch)) drawn with seed[s]: the slice's training seed (slice_seed), the
// same every epoch, or with cfg.fresh_examples one derived from it for every epoch after the first (a new
// training set each epoch; epoch 0 is the fixed set's).
struct MqarEpochPlan {
  std::vector<std::vector<std::int64_t>> perm;
  std::vector<std::pair<std::size_t, std::int64_t>> batches;
  std::vector<std::int64_t> order;
  std::vector<std::uint64_t> seed;  // per training slice: the generator seed of this epoch's examples
};
MqarEpochPlan mqar_epoch_plan(const MqarTrainConfig& cfg, std::int64_t epoch);

// Accuracy and loss of `params` (float64 arena) on `count` examples of a slice, forward in `precision`.
SliceResult evaluate_mqar(const MqarModel& model, const std::vector<double>& params, const TaskSlice& slice,
                          std::uint64_t seed, const std::string& precision, std::int64_t micro_tokens,
                          const std::string& device = "cpu");

// Peak host memory of a training run in bytes (master arenas, per-micro-batch gradient buffers, per-thread
// activations, logits and T×T / chunk-state scratch), for sweep::require_memory before anything is written.
// Includes mqar_data_bytes.
double mqar_memory_bytes(const MqarTrainConfig& cfg, int threads);
// Host memory that grows with the example counts (both trainers): the epoch plan (8 bytes per training example,
// 24 per batch), the per-step curves (40 bytes per planned step) and the evaluation tallies (24 bytes per
// micro-batch of an evaluation slice). The examples themselves are drawn per micro-batch, never stored.
double mqar_data_bytes(const MqarTrainConfig& cfg);

// §4.5: the largest K among slices with accuracy >= theta (0 when none).
std::int64_t capacity_at(const std::vector<TaskSlice>& slices, const std::vector<SliceResult>& r, double theta);

}  // namespace memcap::kata
