// Training of the SSFR attention block around a frozen inserted MLP (spec hebbian.md §6.2): AdamW
// at a constant learning rate (weight decay on every ≥2-D tensor, i.e. all of W_q, W_k, W_v, W_o),
// one fresh batch per step (stream rng::kSsfrTrain, batch id = step), and the evaluation cadence of
// §6.2: after the update of every step whose 0-based index is a multiple of eval_every, train
// accuracy (MLP_A, map A) and evaluation accuracy (MLP_B, map B) over eval_batches fresh batches
// each (stream rng::kSsfrEval); best_acc and best_train_acc are running maxima. CPU float64.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/ssfr_model.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::nn {

struct SsfrCheckpoint;

struct SsfrTrainConfig {
  std::int64_t steps = 4000;
  std::int64_t batch = 1280;
  double lr = 2e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::int64_t eval_every = 100;
  std::int64_t eval_batches = 0;  // 0: 10·max(1, floor(F/1280)) (spec §6.2)
  bool early_stop = false;        // stop once both accuracies of an evaluation are >= early_stop_acc
  double early_stop_acc = 0.99;
  std::uint64_t seed = 0;         // batches and (through ssfr_init_params) the initial weights
  std::string precision = "f32";  // GPU: f32 (the released code's precision) | f64; the CPU is float64
  // Called after every step with (steps done, that step's loss); may throw to abort.
  std::function<void(std::int64_t, double)> on_step;
  // Checkpoints: after every evaluation that the training continues past, on_checkpoint (when set)
  // receives the full state; a training started with `resume` continues from such a state exactly
  // as the uninterrupted run would (same batches, same evaluation rounds, same result).
  std::function<void(const SsfrCheckpoint&)> on_checkpoint;
  const SsfrCheckpoint* resume = nullptr;
  // UserError naming the flag for a bad value.
  void validate() const;
  std::int64_t resolved_eval_batches(std::int64_t facts) const;
};

struct SsfrEval {
  double accuracy = 0;  // argmax over the full vocabulary == f(key), over every evaluated sequence
  double loss = 0;      // mean CE
};

struct SsfrTrainResult {
  std::vector<double> params;              // final weights (ssfr_layout order)
  std::vector<double> loss_curve;          // every step: loss of its forward (before its update)
  std::vector<double> batch_acc_curve;     // every step: accuracy of its training batch
  std::vector<std::int64_t> eval_step;     // 0-based steps after whose update an evaluation ran
  std::vector<double> eval_acc, eval_loss, train_acc, train_loss;  // at eval_step
  double best_acc = 0, best_train_acc = 0; // running maxima over the evaluations
  double final_acc = 0, final_train_acc = 0;  // evaluation after training (not in the maxima)
  double final_loss = 0;                   // loss of the last step's forward
  std::int64_t steps_run = 0;
  bool stopped_early = false;
  std::string path = "cpu";
  double wall_s = 0, train_loop_s = 0, eval_s = 0;
};

// State of a training after `next_step` steps and `round` evaluations: the weights, the AdamW
// moments (ssfr_layout order, float64; the GPU's float32 values convert exactly) and the result so
// far (curves, evaluations, maxima; params empty; wall_s, train_loop_s, eval_s spent so far).
struct SsfrCheckpoint {
  std::vector<double> params, adam_m, adam_v;
  std::int64_t next_step = 0, round = 0;
  SsfrTrainResult partial;
  // UserError unless the sizes fit `cfg` and a layout of n_params (a checkpoint of another run).
  void check(const SsfrTrainConfig& cfg, std::int64_t n_params) const;
  // The state after `next_step` steps of a result so far (its params are not copied).
  static SsfrCheckpoint of(std::vector<double> params, std::vector<double> adam_m, std::vector<double> adam_v,
                           std::int64_t next_step, std::int64_t round, const SsfrTrainResult& r, double eval_s,
                           double wall_s);
};

// Accuracy and loss of `params` with `mlp` on `batches` batches of `batch_size` sequences of stream
// rng::kSsfrEval, batch ids first_batch, first_batch + 1, ...
SsfrEval ssfr_evaluate_cpu(SsfrWorkspace& ws, const double* params, const std::vector<std::int32_t>& map,
                           const FrozenMlp& mlp, std::int64_t batch_size, std::int64_t batches, std::uint64_t seed,
                           std::uint64_t first_batch);

// Evaluation round r (r = 0 .. number of evaluations; the post-training one last) uses batch ids
// [(2r + which)·n, (2r + which + 1)·n) of rng::kSsfrEval, which = 0 for map A, 1 for map B.
std::uint64_t ssfr_eval_first_batch(std::int64_t round, int which, std::int64_t eval_batches);

// Appends one evaluation round after step `step` (tr: MLP_A on map A, ev: MLP_B on map B) and updates
// the maxima; true (and stopped_early set) when cfg's early stop is reached. Shared by both trainers.
bool ssfr_record_eval(SsfrTrainResult& r, std::int64_t step, const SsfrEval& tr, const SsfrEval& ev,
                      const SsfrTrainConfig& cfg);

// The training loop. NumericError (exit 4) on a non-finite loss, naming the step and the last finite
// loss.
SsfrTrainResult train_ssfr_cpu(const SsfrProblem& p, const SsfrTrainConfig& cfg);

#ifdef MEMCAP_HAVE_CUDA
// The same training on the GPU (src/nn/ssfr_train_cuda.cpp) on the handles' stream, in
// cfg.precision: the same batches, initial weights, evaluation rounds and NaN stop. path
// "cuda:f32" | "cuda:f64". UserError before any allocation when the device memory does not fit.
SsfrTrainResult train_ssfr_cuda(const SsfrProblem& p, const SsfrTrainConfig& cfg, gpu::Handles& h);
// Device bytes of train_ssfr_cuda for a task, model dimension d and MLP width m (checked before
// any allocation; callers can check it before building the MLPs).
std::size_t ssfr_cuda_bytes(const SsfrTask& task, std::int64_t d, std::int64_t m, const SsfrTrainConfig& cfg);
// Test hook: mean CE of `params` on training batch `step` (batch sequences of stream kSsfrTrain
// of `seed`) with MLP_A, its gradient (ssfr_layout order) and, when asked, the logits at Q (B×|V|).
double ssfr_loss_grad_cuda(const SsfrProblem& p, const std::vector<double>& params, std::uint64_t seed,
                           std::int64_t step, std::int64_t batch, const std::string& precision,
                           std::vector<double>* grad, std::vector<double>* logits, gpu::Handles& h);
#endif

}  // namespace memcap::nn
