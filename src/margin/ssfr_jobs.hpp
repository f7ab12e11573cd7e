// The jobs of the SSFR sweeps (spec hebbian.md §4.3, §4.4, §4.6, §4.7): one capacity search
// (fact-adaptive over the width m, or train-99 over the fact count F), one attention-noise
// measurement, one usability point (pre-trained attention + inserted MLP at one width). Each returns
// its summary row and writes its heavy arrays to /runs/<job>; trainings resume from checkpoints
// beside the job's scratch file (sweep::JobContext::scratch).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "margin/ssfr_run.hpp"
#include "mlp/capacity.hpp"

namespace memcap::margin {

// What every SSFR job shares.
struct SsfrJobBase {
  std::string key;                 // sweep job key
  mlp::SsfrMlpChoice mlp;          // inserted MLP (capacity, usability: a method)
  std::int64_t dim = 128, facts = 2048;
  std::int64_t junk = 9, junk_vocab = 9;  // J_min = J_max = J (paper runs); V_J
  nn::SsfrBlockConfig block;       // dim is set from `dim`
  std::uint64_t seed = 42;         // fact set, maps, junk rows, method seed, batches, init
  nn::SsfrTrainConfig train;       // seed is set from `seed`
  nn::SsfrTask task() const;       // the task of (facts, junk, junk_vocab); UserError when impossible
  // Fact set (identity map), embeddings and the identity MLP: attention-only pre-training (§6.3).
  mlp::SsfrSetup identity_setup() const;
};

struct SsfrJobOutput {
  io::Row row;
  std::function<void(h5::Group&)> write_run;
};

// ---- capacity (§4.6 fact-adaptive: smallest width m with best_acc >= threshold at fixed F;
//      §4.7 train-99: largest F with best_train_acc >= threshold at fixed width m) ----
enum class SsfrCapacityMode { fact_adaptive, train99 };
const char* to_string(SsfrCapacityMode m);  // "fact-adaptive" | "train99"

struct SsfrCapacitySpec : SsfrJobBase {
  SsfrCapacityMode mode = SsfrCapacityMode::fact_adaptive;
  std::int64_t width = 0;          // train99: the fixed width m
  mlp::SearchConfig search;        // over m (fact-adaptive) or F (train99); threshold = success level
  double gate = 1.0;               // standalone accuracy MLP_A must reach before training (0 = no gate)
};
// probe_log / checkpoint: files beside the job's scratch ("" = none).
SsfrJobOutput run_ssfr_capacity_job(const SsfrCapacitySpec& spec, const SsfrRunner& run, const std::string& probe_log);

// ---- attention noise (§4.4): attention-only pre-training (identity map, identity MLP), then
//      ||o_Q − e_k|| over `noise_batches` fresh batches of `noise_batch` sequences ----
struct SsfrNoiseSpec : SsfrJobBase {
  std::int64_t noise_batches = 64, noise_batch = 512;
  std::uint64_t noise_seed_offset = 123456;  // measurement batches: seed + offset (spec §4.4)
};
// Statistics of the distances ||o − e_k|| (o: the unit output at Q, e_k: the key's unit embedding).
struct SsfrNoiseStats {
  double eps_attn = 0, mean = 0, std = 0, p95 = 0, max_angle_deg = 0, accuracy = 0;
  std::vector<double> per_key_max;  // F entries, NaN for keys never drawn
};
SsfrNoiseStats ssfr_attention_noise(const nn::SsfrProblem& p, const std::vector<double>& params, std::int64_t batches,
                                    std::int64_t batch, std::uint64_t seed);
SsfrJobOutput run_ssfr_noise_job(const SsfrNoiseSpec& spec, const SsfrRunner& run);

// ---- usability (§4.3, Fig. 2a / Fig. 7): attention pre-trained with the identity MLP (shared by
//      every width of a seed, kept in `pretrain_file`), then an MLP of width m built on a fresh map B,
//      inserted and evaluated on SSFR(B) ----
struct SsfrUsabilitySpec : SsfrJobBase {
  std::int64_t width = 0;
};
SsfrJobOutput run_ssfr_usability_job(const SsfrUsabilitySpec& spec, const SsfrRunner& run,
                                     const std::string& pretrain_file);

// τ* of §4.3: argmin over τ ∈ linspace(−1, 1, 2001) of mean_w (frac(γ_i > τ) − acc_w)², margins
// pooled per width; ties go to the smallest τ.
double fit_tau_star(const std::vector<std::vector<double>>& margins_per_width, const std::vector<double>& accuracy);
double fraction_above(const std::vector<double>& margins, double tau);

// Finalizer: /usability (one row per width: mlp_params, mean/std over seeds of mlp_acc, combined_acc,
// gamma_min; frac_above at τ = 0, 0.1, 0.2, 0.3 and τ*) with attribute tau_star.
inline constexpr const char* kSsfrUsabilityFinalizer = "hebb-ssfr-usability";
void register_ssfr_finalizers();  // idempotent

}  // namespace memcap::margin
