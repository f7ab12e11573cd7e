// Gated MLPs trained by gradient descent (spec hebbian.md §2.6 standalone capacity baseline, §2.6
// "DISCREPANCY" transformer GD, §2.7 MSE fact-editing expert), on the CPU (float64 reference built
// from nn::cpu layers) and on the GPU (float32 or float64, nn::cuda layers, one captured CUDA graph
// per step). Model: out = D((U x + b_u) ⊙ σ(G x + b_g)) + b_d; CE over logits V_all·out (targets =
// the fact map) or MSE against C_f. Full batch, Adam/AdamW, cosine annealing stepped per epoch,
// early stop when a step's loss ≤ stop_loss. Init: PyTorch nn.Linear default, U(±1/√fan_in) for
// weights and biases, drawn from Philox streams rng::kGdInit so both paths start identically.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "nn/layers.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::mlp {

struct GdConfig {
  nn::Activation gate = nn::Activation::identity;  // §2.6 default: identity (bilinear)
  bool bias = false;                               // §2.6 default: no biases
  nn::Loss loss = nn::Loss::ce;
  std::int64_t epochs = 10000;
  double lr = 1e-3, lr_min = 1e-6;                 // cosine annealing lr → lr_min over `epochs`
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;
  bool adamw = false;
  double stop_loss = 1e-7;                         // early stop when a step's loss ≤ this
  std::string precision = "f32";                   // GPU: f32 | f64 | bf16 | bf16x3 (CPU always float64)
  bool tf32 = false;                               // GPU f32: allow TF32 tensor cores in GEMMs
  std::int64_t record_every = 1;                   // loss/accuracy curve stride (epochs)
  std::string checkpoint;                          // file for periodic checkpoints ("" = none)
  double checkpoint_every_s = 60;                  // seconds between checkpoints
  // Progress hook (not part of the checkpoint fingerprint; may be empty): called with (epochs done,
  // loss of the last epoch) after every epoch on the CPU, after every recorded epoch on the GPU.
  // An exception thrown from it aborts the training; the last checkpoint stays.
  std::function<void(std::int64_t, double)> on_epoch;
};

struct GdResult {
  GatedMLP mlp;                         // final parameters as float64 (gate, biases, param_count set)
  std::vector<double> loss_curve;       // loss at epochs 0, k, 2k, ... (before that epoch's update)
  std::vector<double> accuracy_curve;   // train argmax accuracy at the same epochs (from the forward)
  std::vector<std::int64_t> curve_epoch;
  std::int64_t epochs_run = 0;          // updates applied
  double final_loss = 0;                // loss of the last forward
  bool stopped_early = false;
  bool resumed = false;                 // started from a checkpoint
  std::string path;                     // "cpu" | "cuda:f32" | "cuda:f64" | "cuda:tf32" | "cuda:bf16"
  std::string kernel;                   // GPU kernel variant that ran: "fused" | "cublas" ("" on the CPU)
  double wall_s = 0;
  double train_loop_s = -1;             // GPU: the graph replays alone (CUDA events); -1 = not measured
};

// Parameter count of the trained model: 3md (no bias) or 3md + 2m + d (bias) (spec §3.7).
std::int64_t gd_param_count(std::int64_t m, std::int64_t d, bool bias);

// CPU float64 reference trainer. NumericError (exit 4) naming the epoch on a non-finite loss.
GdResult train_gd_cpu(const FactSet& facts, std::int64_t width, std::uint64_t seed, const GdConfig& cfg);

// Full-batch training loss of the CPU model at `params` (GdLayout order, see mlp/gd_init.hpp) and,
// when grad is non-null, its gradient (overwritten) — the function train_gd_cpu descends, exposed
// for finite-difference tests and for checking the GPU trainer's first step.
double gd_loss_cpu(const FactSet& facts, std::int64_t width, const GdConfig& cfg, const std::vector<double>& params,
                   std::vector<double>* grad);

#ifdef MEMCAP_HAVE_CUDA
// GPU trainer on the handles' stream; several trainings may run concurrently on distinct streams.
GdResult train_gd_cuda(const FactSet& facts, std::int64_t width, std::uint64_t seed, const GdConfig& cfg,
                       gpu::Handles& h);
// Bytes of device memory a GPU training needs (checked before any allocation).
std::size_t gd_cuda_bytes(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg);
#endif

}  // namespace memcap::mlp
