// The registry of dataset units and descriptions, and the writers that attach them (see describe.hpp).
// Add a line here when a command writes a new column; tests/test_io_describe.cpp lists the names
// the commands write that have no entry yet.
#include "io/describe.hpp"

#include <fmt/format.h>
#include <hdf5_hl.h>

#include <Eigen/Core>
#include <map>
#include <numeric>

#include "core/error.hpp"
#include "core/threads.hpp"


namespace memcap::io {
namespace {

struct Entry {
  const char* name;
  const char* unit;
  const char* text;
};

// name (or "parent/name") -> unit, one line. Units follow CF: "1" dimensionless, "count", "s".
constexpr Entry kEntries[] = {
    // sweep engine and bookkeeping
    {"row", "1", "row number of /summary (dimension scale)"},
    {"job", "", "job key, e.g. width=64/seed=0"},
    {"job_index", "1", "position of the job in the full (unsharded) plan"},
    {"seed", "1", "random seed of the job"},
    {"status", "", "job status (done)"},
    {"wall_s", "s", "wall-clock time of the job"},
    {"path", "", "compute path that ran (cpu / cuda)"},
    {"compute_path", "", "compute path that ran (cpu / cuda, kernel variant)"},
    {"resumed", "1", "1 when the run continued from a checkpoint"},
    {"note", "", "free-text note"},
    {"sweep", "", "name of the swept axis"},
    {"threads", "count", "CPU threads used"},
    // hebb: models, facts, margins
    {"method", "", "construction method spec string, stored verbatim"},
    {"method_id", "1", "position of the method in --methods (numeric /grid axis)"},
    {"dim", "1", "embedding dimension d"},
    {"d", "1", "dimension d"},
    {"facts", "count", "number of stored facts F"},
    {"alpha", "1", "facts per squared dimension, F/d^2"},
    {"beta", "1", "value-code scaling exponent beta"},
    {"width", "count", "hidden width m of the MLP"},
    {"min_width", "count", "smallest hidden width searched"},
    {"max_width", "count", "largest hidden width searched"},
    {"start_width", "count", "hidden width the search started from"},
    {"growth", "1", "first gallop factor of the fast capacity search"},
    {"params", "count", "number of MLP parameters"},
    {"params50", "count", "parameters at the 50% success width m50"},
    {"params100", "count", "parameters at the 100% success width m100"},
    {"params_median", "count", "parameters at the median capacity width"},
    {"params_star", "count", "parameters at the capacity width m*"},
    {"min_margin", "1", "smallest decoding margin over all keys (> 0: every fact is recalled)"},
    {"min_margin_check", "1", "min_margin recomputed by an independent check"},
    {"min_margin_star", "1", "min_margin at the capacity width m*"},
    {"clean_min_margin", "1", "min_margin without noise on the keys"},
    {"mean_margin", "1", "mean decoding margin over keys"},
    {"accuracy", "1", "fraction of keys decoded correctly"},
    {"accuracy_below", "1", "accuracy one search step below m*"},
    {"accuracy_star", "1", "accuracy at the capacity width m*"},
    {"accuracy_curve", "1", "accuracy per evaluation epoch"},
    {"m_min", "count", "smallest width with a successful seed"},
    {"m50", "count", "width at which half of the seeds succeed"},
    {"m100", "count", "width at which every seed succeeds"},
    {"m_median", "count", "median capacity width over seeds"},
    {"m_star", "count", "capacity width m*: smallest width that stores every fact"},
    {"m_below", "count", "largest width that failed, one step below m*"},
    {"found", "1", "1 when the search found a capacity width"},
    {"seeds", "count", "number of seeds"},
    {"probes", "count", "number of widths probed by the search"},
    {"probe_wall_s", "s", "wall time spent in probes"},
    {"threshold", "1", "success threshold of the search"},
    {"note_star", "", "how m* was decided"},
    {"search", "", "search protocol"},
    {"convention", "", "margin convention"},
    {"solver", "", "linear solver used to build the model"},
    {"noise", "1", "query noise level"},
    {"spike_target", "1", "target spike of the fact statistics"},
    {"l_bil", "1", "bilinear-term norm of the fact statistics"},
    {"fact_seed", "1", "seed of the random facts"},
    {"feature_seed", "1", "seed of the random features"},
    {"fit_model", "", "name of the fitted capacity model"},
    {"build_s", "s", "time to build the model"},
    {"eval_s", "s", "time to evaluate"},
    {"total_s", "s", "total run time"},
    {"epochs_run", "count", "training epochs run"},
    {"final_loss", "1", "training loss at the end"},
    {"stopped_early", "1", "1 when training stopped on its criterion before the epoch limit"},
    {"loss", "1", "training loss per evaluation epoch"},
    {"loss_curve", "1", "training loss per evaluation epoch"},
    {"epoch", "count", "epoch of each curve point"},
    {"curve_epoch", "count", "epoch of each curve point"},
    {"per_key", "1", "decoding margin of each key"},
    {"per_key_clean", "1", "decoding margin of each key without noise"},
    {"worst", "1", "index of the competing value with the largest score, per key"},
    {"argmax", "1", "decoded value index per key"},
    {"signal", "1", "signal term of each key's score"},
    {"crosstalk", "1", "crosstalk term of each key's score"},
    {"gamma_seeds", "1", "fitted per-seed constants"},
    {"mlp/A", "1", "MLP first-layer weights (width x d)"},
    {"mlp/G", "1", "MLP gate weights (width x d)"},
    {"mlp/B", "1", "MLP output weights (d x width)"},
    {"facts/keys", "1", "fact keys, one row per fact"},
    {"facts/values", "1", "fact values, one row per fact"},
    {"facts/codes", "1", "value codes, one row per fact"},
    {"probes/m", "count", "width of each probe"},
    {"probes/accuracy", "1", "accuracy of each probe"},
    {"probes/success", "1", "1 when the probe stored every fact"},
    {"probes/min_margin", "1", "min_margin of each probe"},
    {"probes/wall_s", "s", "wall time of each probe"},
    {"probes/cached", "1", "1 when the probe result came from the cache"},
    {"steps", "count", "optimizer steps (full-batch epochs)"},
    {"train_loop_s", "s", "time in the training loop"},
    {"e_k", "1", "key statistic e_k of the fact set (docs/hebb-theory.md)"},
    {"kappa", "1", "key condition statistic kappa (docs/hebb-theory.md)"},
    {"kappa_abs", "1", "absolute-value variant of kappa"},
    {"v_min", "1", "smallest value-code norm statistic"},
    {"v_max", "1", "largest value-code norm statistic"},
    {"l_v", "1", "value-code crosstalk statistic L_V"},
    {"l_v_trunc", "1", "truncated L_V"},
    {"p_key", "1", "key statistic p_key"},
    {"k_max_off", "1", "largest off-diagonal key correlation"},
    {"adam_m", "1", "Adam first moment (checkpoint)"},
    {"adam_v", "1", "Adam second moment (checkpoint)"},
    // hebb ssfr (docs/hebb-ssfr.md)
    {"mlp", "", "inserted MLP: identity, a method spec or a model file"},
    {"junk", "count", "J_max, junk tokens before and after the key"},
    {"junk_min", "count", "J_min, fewest junk tokens on each side"},
    {"junk_vocab", "count", "V_J, distinct junk tokens"},
    {"mlp_params", "count", "parameters of the inserted MLP"},
    {"attn_params", "count", "trained attention parameters"},
    {"trainable", "", "trained attention weights (qk or qkvo)"},
    {"attn_residual", "1", "1 when the query embedding is added to the attention output"},
    {"mlp_acc_a", "1", "standalone accuracy of MLP_A on map A"},
    {"mlp_acc_b", "1", "standalone accuracy of MLP_B on map B"},
    {"eval_map", "", "map of the evaluation accuracy (B, or A when there is no MLP_B)"},
    {"best_acc", "1", "largest evaluation accuracy (MLP_B, map B) over the evaluations"},
    {"best_train_acc", "1", "largest train accuracy (MLP_A, map A) over the evaluations"},
    {"final_acc", "1", "evaluation accuracy after training"},
    {"final_train_acc", "1", "train accuracy after training"},
    {"steps_run", "count", "training steps run"},
    {"evaluations", "count", "evaluations during training"},
    {"train_s", "s", "time in the training steps"},
    {"batch_accuracy", "1", "accuracy on each step's training batch"},
    {"eval_step", "count", "step after whose update each evaluation ran"},
    {"eval_accuracy", "1", "evaluation accuracy (MLP_B, map B) per evaluation"},
    {"eval_loss", "1", "evaluation loss per evaluation"},
    {"train_accuracy", "1", "train accuracy (MLP_A, map A) per evaluation"},
    {"train_loss", "1", "train loss per evaluation"},
    {"embeddings", "1", "token embedding table, one row per vocabulary token"},
    {"map_b", "1", "evaluation fact map B"},
    {"precision", "", "arithmetic of the run (f32 or f64)"},
    // hebb ssfr capacity / noise / usability (docs/hebb-ssfr.md)
    {"protocol", "", "capacity protocol: fact-adaptive (spec 4.6) or train99 (4.7)"},
    {"search_lo", "count", "smallest width (fact-adaptive) or fact count (train99) searched"},
    {"search_hi", "count", "largest width (fact-adaptive) or fact count (train99) searched"},
    {"search_facts", "count", "fact count F of a fact-adaptive search (/grid axis)"},
    {"search_width", "count", "MLP width m of a train99 search (/grid axis)"},
    {"trainings", "count", "probes that trained the attention"},
    {"gated", "count", "probes refused by the standalone gate without training"},
    {"success", "1", "1 when the probe reached the success level"},
    {"cached", "1", "1 when the probe re-tested a width already measured"},
    {"eps_attn", "1", "attention-noise ceiling: largest ||o_Q - e_k|| over the measured sequences"},
    {"dist_mean", "1", "mean of ||o_Q - e_k||"},
    {"dist_std", "1", "standard deviation of ||o_Q - e_k||"},
    {"dist_p95", "1", "95th percentile of ||o_Q - e_k||"},
    {"max_angle_deg", "degree", "angle between o_Q and e_k at eps_attn"},
    {"noise_accuracy", "1", "accuracy on the noise-measurement sequences"},
    {"per_key_max_distance", "1", "largest ||o_Q - e_k|| per key (NaN: key not drawn)"},
    {"weights", "1", "trained attention weights (W_q, W_k, W_v, W_o flattened)"},
    {"mlp_acc", "1", "standalone accuracy of the inserted MLP on its map"},
    {"gamma_min", "1", "smallest per-key normalized-output margin of the inserted MLP"},
    {"frac_positive", "1", "fraction of keys with a positive margin"},
    {"combined_acc", "1", "accuracy of pre-trained attention + inserted MLP on SSFR"},
    {"combined_loss", "1", "mean CE of pre-trained attention + inserted MLP on SSFR"},
    {"pretrain_train_acc", "1", "best train accuracy of the attention pre-training"},
    {"pretrain_steps", "count", "steps of the attention pre-training"},
    {"job_s", "s", "time of the job"},
    {"key_margins", "1", "per-key normalized-output margins gamma_i of the inserted MLP"},
    {"mlp_acc_mean", "1", "standalone MLP accuracy, mean over seeds"},
    {"mlp_acc_std", "1", "standalone MLP accuracy, standard deviation over seeds"},
    {"combined_acc_mean", "1", "Transformer accuracy, mean over seeds"},
    {"combined_acc_std", "1", "Transformer accuracy, standard deviation over seeds"},
    {"gamma_min_mean", "1", "gamma_min, mean over seeds"},
    {"gamma_min_std", "1", "gamma_min, standard deviation over seeds"},
    {"frac_above_0", "1", "fraction of pooled per-key margins above 0"},
    {"frac_above_0.1", "1", "fraction of pooled per-key margins above 0.1"},
    {"frac_above_0.2", "1", "fraction of pooled per-key margins above 0.2"},
    {"frac_above_0.3", "1", "fraction of pooled per-key margins above 0.3"},
    {"frac_above_tau_star", "1", "fraction of pooled per-key margins above tau*"},
    // kata: feature maps, capacity, bounds, dictionaries
    {"map", "", "feature map spec string"},
    {"map_id", "1", "position of the map in --maps (numeric /grid axis)"},
    {"keys", "", "key source spec string"},
    {"keys_id", "1", "position of the key source in --keys (numeric /grid axis)"},
    {"values", "", "value source"},
    {"d_v", "1", "value dimension"},
    {"d_head", "1", "raw key dimension d_head"},
    {"n_psi", "1", "feature dimension of the map"},
    {"readout", "", "readout rule"},
    {"trials", "count", "trials per K"},
    {"acc_threshold", "1", "accuracy threshold theta of K*_acc"},
    {"psnr_threshold", "1", "pSNR threshold of K*_psnr"},
    {"k_max", "count", "largest K searched"},
    {"k_star_psnr", "count", "largest K with median pSNR above the threshold"},
    {"k_star_acc", "count", "largest K with accuracy above theta"},
    {"k_star_psnr_censored", "1", "1 when K*_psnr reached k_max (a lower bound)"},
    {"k_star_acc_censored", "1", "1 when K*_acc reached k_max (a lower bound)"},
    {"points", "count", "number of K points measured"},
    {"max_deviation", "1", "largest relative deviation of the state readout from the closed form"},
    {"check_tolerance", "1", "tolerance of the readout cross-check"},
    {"K", "count", "number of stored bindings K"},
    {"stage", "", "search stage of the point (grid / bisect)"},
    {"acc", "1", "decode accuracy per K"},
    {"acc_trials", "1", "decode accuracy per K and trial"},
    {"psnr_median", "1", "median pSNR per K"},
    {"psnr_mean_log10", "1", "mean log10 pSNR per K"},
    {"psnr_min", "1", "smallest pSNR per K"},
    {"coherence", "1", "coherence (largest |cosine| between distinct feature vectors)"},
    {"coherence_method", "", "how the coherence was computed"},
    {"coherence_s", "s", "time to compute the coherence"},
    {"psd_coherence", "1", "coherence of the PSD kernel"},
    {"theory_welch_linear", "count", "Welch-bound capacity prediction, linear map"},
    {"theory_welch_psd", "count", "Welch-bound capacity prediction, PSD kernel"},
    {"theory_welch_softmax", "count", "Welch-bound capacity prediction, softmax"},
    {"theory_random_linear", "count", "random-key capacity prediction, linear map"},
    {"theory_random_m1", "count", "random-key capacity prediction, M1 map"},
    {"theory_random_map", "count", "random-key capacity prediction for this map"},
    {"theory_rankin", "count", "Rankin-bound capacity prediction"},
    {"theory_greedy_cap_paper", "count", "greedy spherical-cap prediction (paper formula)"},
    {"theory_greedy_cap_exact", "count", "greedy spherical-cap prediction (exact)"},
    {"T", "count", "number of keys / tokens T"},
    {"D", "1", "feature dimension D"},
    {"p", "1", "probability or exponent parameter p"},
    {"a", "1", "sqrt(eps)"},
    {"eps", "1", "map parameter eps"},
    {"tau", "1", "softmax temperature tau"},
    {"mu", "1", "coherence mu"},
    {"form", "", "bound form"},
    {"value", "1", "value of the bound or quantity"},
    {"meaning", "", "what the value means"},
    {"wall", "1", "wall (bound) value"},
    {"rung", "", "pSNR ladder rung"},
    {"source", "", "source of the rung's formula"},
    {"largest_T", "count", "largest T of the rung"},
    {"threshold_formula", "", "formula of the threshold"},
    {"mc_map", "", "Monte-Carlo check: feature map"},
    {"mc_keys", "", "Monte-Carlo check: key source"},
    {"psnr_welch", "1", "pSNR at the Welch bound"},
    {"log_psnr_welch", "1", "log pSNR at the Welch bound"},
    {"psnr_random_est", "1", "estimated pSNR for random keys"},
    {"psnr_mc_median", "1", "Monte-Carlo median pSNR"},
    {"psnr_mc_q10", "1", "Monte-Carlo 10% quantile of pSNR"},
    {"psnr_mc_q90", "1", "Monte-Carlo 90% quantile of pSNR"},
    {"welch_ceiling", "count", "Welch ceiling"},
    {"welch_d", "1", "Welch dimension"},
    {"welch_mu", "1", "Welch coherence bound"},
    {"exact_cap_lb", "count", "exact cap-packing lower bound"},
    {"log10_exact_cap_lb", "1", "log10 of exact_cap_lb"},
    {"paper_lb", "count", "paper's lower bound"},
    {"log10_paper_lb", "1", "log10 of paper_lb"},
    {"paper_vacuous", "1", "1 when the paper's bound is vacuous"},
    {"mub_d", "1", "MUB dimension"},
    {"mub_s", "1", "MUB parameter s"},
    {"devore_d", "1", "DeVore dimension"},
    {"devore_r", "1", "DeVore degree r"},
    {"devore_s", "1", "DeVore parameter s"},
    {"random_d", "1", "random-code dimension"},
    {"random_d_exact", "1", "random-code dimension (exact)"},
    {"type", "", "dictionary type"},
    {"count", "count", "number of vectors"},
    {"field_size", "1", "finite-field size"},
    {"degree", "1", "polynomial degree"},
    {"vectors", "1", "dictionary vectors, one row each"},
    {"basis_id", "1", "basis of each vector"},
    {"indices", "1", "support indices"},
    {"feature_coherence/map", "", "feature map"},
    {"feature_coherence/value", "1", "coherence of the dictionary under the map"},
    // kata mqar train (docs/kata-mqar.md)
    {"mixer", "", "sequence mixer (softmax, m1, m2, ..., delta-m2; ramnet recall: memory mixer)"},
    {"task", "", "synthetic task (mqar, overwrite)"},
    {"heads", "count", "mixer heads"},
    {"layers", "count", "blocks of the language model"},
    {"vocab", "count", "vocabulary size V"},
    {"state", "count", "recurrent state size (Table 2 convention: H n_psi d_head; softmax: KV cache 2 d_model T)"},
    {"state_T", "count", "sequence length at which a softmax state (KV cache) is counted"},
    {"lr", "1", "peak learning rate (per step in /runs: the scheduled rate)"},
    {"batch", "count", "sequences per optimizer step"},
    {"epochs", "count", "planned passes over the training set"},
    {"final_train_loss", "1", "cross-entropy of the last training step"},
    {"eval_avg", "1", "mean accuracy over the evaluation slices"},
    {"ood_avg", "1", "mean accuracy over the evaluation slices longer than every training slice (NaN: none)"},
    {"cap_0.99", "count", "largest K of an evaluation slice with accuracy >= 0.99 (spec kata.md §4.5; 0: none)"},
    {"cap_0.90", "count", "largest K of an evaluation slice with accuracy >= 0.90 (spec kata.md §4.5; 0: none)"},
    {"step", "count", "optimizer step (1-based)"},
    {"grad_norm", "1", "global gradient norm before clipping"},
    {"eval_epoch", "count", "epoch after which each evaluation ran"},
    {"eval_T", "count", "sequence length T of each evaluation slice"},
    {"eval_K", "count", "keys K of each evaluation slice"},
    {"eval_examples", "count", "examples of each evaluation slice"},
    {"train_T", "count", "sequence length T of each training slice"},
    {"train_K", "count", "keys K of each training slice"},
    {"train_examples", "count", "examples of each training slice"},
    // benchmarks
    {"group", "", "benchmark group"},
    {"kernel", "", "kernel form"},
    {"variant", "", "kernel variant"},
    {"B", "count", "batch size"},
    {"H", "count", "heads"},
    {"chunk", "count", "chunk length"},
    {"dtype", "", "data type"},
    {"repeats", "count", "timed repetitions"},
    {"ms_min", "ms", "fastest repetition"},
    {"ms_median", "ms", "median repetition"},
    {"ms_max", "ms", "slowest repetition"},
    {"stage_ms", "ms", "time of the stage"},
    {"tflops", "TFLOP/s", "achieved throughput"},
    {"gbps", "GB/s", "achieved bandwidth"},
    {"tokens_per_s", "1/s", "tokens per second"},
    {"ceiling_copy_gbps", "GB/s", "measured copy ceiling"},
    {"ceiling_gemm_tflops", "TFLOP/s", "measured GEMM ceiling"},
    {"fraction_of_ceiling", "1", "throughput / ceiling"},
    {"fraction_of_copy_ceiling", "1", "bandwidth / copy ceiling"},
    {"fraction_of_gemm", "1", "throughput / GEMM throughput"},
    {"fraction_of_gemm_ceiling", "1", "throughput / GEMM ceiling"},
    {"fraction_of_gemm_cpu_time", "1", "time / GEMM CPU time"},
    {"construction_gflops", "GFLOP/s", "construction throughput"},
    {"dgemm_gflops", "GFLOP/s", "DGEMM throughput"},
    {"dgemm_gflops_per_cpu_s", "GFLOP/s", "DGEMM throughput per CPU second"},
    {"dgemm_samples", "GFLOP/s", "DGEMM throughput samples"},
    {"peak_rss_gib", "GiB", "peak resident memory"},
    {"rel_err_vs_cpu", "1", "relative error against the CPU reference"},
    {"validated_on", "", "shape the result was validated on"},
    {"flops", "FLOP", "floating-point operations of the stage"},
    {"seconds", "s", "time of the stage"},
    {"cpu_seconds", "s", "CPU time"},
    {"name", "", "stage name"},
    // ramnet theory: kernel, bounds (E1), cape (E9), adapter (E10), paper-check (E11); docs/ramnet.md
    {"dp", "1", "codes per factor dp"},
    {"U", "1", "number of factors U"},
    {"beta_r", "1", "read concentration beta_r"},
    {"beta_w", "1", "write concentration beta_w"},
    {"kappa_A", "1", "address-overlap kernel kappa_A(q, k)"},
    {"kappa_inf", "1", "continuous-codebook kernel kappa_inf(q, k)"},
    {"exp_target", "1", "exp(beta_r beta_w / 2 q.k)"},
    {"log_kappa_A", "1", "log kappa_A"},
    {"log_kappa_inf", "1", "log kappa_inf"},
    {"log_kappa_hard_write", "1", "log kappa_A in the hard-write limit beta_w -> inf"},
    {"target", "1", "beta_r beta_w / 2 q.k"},
    {"e_tot", "1", "log kappa_A - target"},
    {"e_fin", "1", "log kappa_A - log kappa_inf (finite-codebook error)"},
    {"e_cont", "1", "log kappa_inf - target (continuous error)"},
    {"M", "1", "largest scaled block norm max_u max(beta_r|q_u|, beta_w|k_u|)"},
    {"max_M", "1", "largest M over the pairs"},
    {"xi", "1", "xi = 2 e^M M^dp / dp! (bounds 11, 20 need xi < 1)"},
    {"xi_valid", "1", "1 when xi < 1"},
    {"bound11", "1", "Theorem 2 bound on |e_tot| (inf: none, xi >= 1)"},
    {"bound16_lo", "1", "eq. 16 lower bound on e_cont, -U M^4/4"},
    {"bound16_hi", "1", "eq. 16 upper bound on e_cont, U M^4/32"},
    {"bound17", "1", "eq. 17 bound on |e_cont|, U M^4/4"},
    {"bound20", "1", "eq. 20 bound on |e_fin| (inf: none, xi >= 1)"},
    {"pairs", "count", "number of (q, k) pairs"},
    {"adversarial", "count", "number of adversarial pairs"},
    {"adversarial/name", "", "adversarial pair: relation-position[-half]"},
    {"max_abs_e_tot", "1", "largest |e_tot| over the sampled pairs"},
    {"max_abs_e_fin", "1", "largest |e_fin| over the sampled pairs"},
    {"max_abs_e_cont", "1", "largest |e_cont| over the sampled pairs"},
    {"min_e_tot", "1", "smallest e_tot (sampled pairs)"},
    {"max_e_tot", "1", "largest e_tot (sampled pairs)"},
    {"min_e_fin", "1", "smallest e_fin (sampled pairs)"},
    {"max_e_fin", "1", "largest e_fin (sampled pairs)"},
    {"min_e_cont", "1", "smallest e_cont (sampled pairs)"},
    {"max_e_cont", "1", "largest e_cont (sampled pairs)"},
    {"mean_e_tot", "1", "mean e_tot (sampled pairs)"},
    {"mean_e_fin", "1", "mean e_fin (sampled pairs)"},
    {"mean_e_cont", "1", "mean e_cont (sampled pairs)"},
    {"frac_pos_e_tot", "1", "fraction of sampled pairs with e_tot > 0"},
    {"frac_pos_e_fin", "1", "fraction of sampled pairs with e_fin > 0"},
    {"frac_pos_e_cont", "1", "fraction of sampled pairs with e_cont > 0"},
    {"adv_max_abs_e_tot", "1", "largest |e_tot| over the adversarial pairs"},
    {"adv_min_e_tot", "1", "smallest e_tot over the adversarial pairs"},
    {"adv_max_e_tot", "1", "largest e_tot over the adversarial pairs"},
    {"adv_max_abs_e_fin", "1", "largest |e_fin| over the adversarial pairs"},
    {"adv_min_e_cont", "1", "smallest e_cont over the adversarial pairs"},
    {"adv_max_e_cont", "1", "largest e_cont over the adversarial pairs"},
    {"ratio11", "1", "bound11 / largest |e_tot| (all pairs)"},
    {"ratio17", "1", "bound17 / largest |e_cont| (all pairs)"},
    {"ratio20", "1", "bound20 / largest |e_fin| (all pairs)"},
    {"ratio16_lo", "1", "bound16_lo / smallest e_cont (all pairs)"},
    {"ratio16_hi", "1", "bound16_hi / largest e_cont (all pairs)"},
    {"frac11", "1", "largest |e_tot| / bound11 of a pair (< 1: no violation)"},
    {"frac16", "1", "largest e_cont / eq.-16 bound of a pair (< 1: no violation)"},
    {"frac17", "1", "largest |e_cont| / bound17 of a pair (< 1: no violation)"},
    {"frac20", "1", "largest |e_fin| / bound20 of a pair (< 1: no violation)"},
    {"viol11", "count", "pairs violating eq. 11"},
    {"viol16", "count", "pairs violating eq. 16"},
    {"viol17", "count", "pairs violating eq. 17"},
    {"viol20", "count", "pairs violating eq. 20"},
    {"violations", "count", "pairs violating any of eqs. 11, 16, 17, 20"},
    {"checked11", "count", "pairs where eq. 11 applies (xi < 1)"},
    {"checked20", "count", "pairs where eq. 20 applies (xi < 1)"},
    {"small_m_order", "1", "power of M of the leading small-M error"},
    {"small_m_lo", "1", "sharp small-M lower constant of e_tot / (U M^order)"},
    {"small_m_hi", "1", "sharp small-M upper constant of e_tot / (U M^order)"},
    {"e_tot_lo_scaled", "1", "smallest e_tot / (U M^order), all pairs"},
    {"e_tot_hi_scaled", "1", "largest e_tot / (U M^order), all pairs"},
    {"e_cont_lo_scaled", "1", "smallest e_cont / (U M^4), all pairs"},
    {"e_cont_hi_scaled", "1", "largest e_cont / (U M^4), all pairs"},
    {"max_consistency", "1", "largest |(log kappa_A - target) - (e_fin + e_cont)|"},
    {"t", "count", "CAPE shift / RoPE position t"},
    {"queries", "count", "number of queries"},
    {"cape/queries", "1", "the queries, one row of 2U numbers each"},
    {"zero_expected", "1", "1 when t is a multiple of dp^(U-1) (CAPE = RoPE)"},
    {"tv_mean", "1", "mean total variation CAPE vs RoPE"},
    {"tv_max", "1", "largest total variation CAPE vs RoPE"},
    {"js_mean", "nat", "mean Jensen-Shannon divergence CAPE vs RoPE"},
    {"js_max", "nat", "largest Jensen-Shannon divergence CAPE vs RoPE"},
    {"tc_cape_mean", "nat", "mean total correlation of the CAPE-shifted distribution"},
    {"tc_rope_max", "nat", "largest total correlation of the RoPE-rotated distribution (0)"},
    {"logit_gap0_max", "1", "largest factor-0 logit-wave gap CAPE vs RoPE (0)"},
    {"logit_gap_max", "1", "largest factor-u logit-wave gap, u >= 1"},
    {"frequencies", "rad", "CAPE/RoPE angular frequencies nu_u = 2 pi / dp^(u+1)"},
    {"teacher", "", "synthetic teacher kind (cape, nope, rope)"},
    {"d_model", "1", "hidden size d_model"},
    {"d_k", "1", "teacher head dimension d_k"},
    {"delta_max", "count", "largest relative distance |Delta|"},
    {"delta_decay", "1", "p(Delta) decay length (0: uniform)"},
    {"teacher_energy", "1", "E_p ||B^_T(Delta)||_F^2"},
    {"adapter_scale", "1", "(2U/d_k)^(1/4)"},
    {"cape_loss", "1", "eq.-30 loss of the CAPE init"},
    {"cape_rel_loss", "1", "CAPE init loss / teacher energy"},
    {"cape_relaxed_rel_loss", "1", "unconstrained frequency projection loss / teacher energy"},
    {"nope_loss", "1", "eq.-30 loss of the NoPE init"},
    {"nope_rel_loss", "1", "NoPE init loss / teacher energy"},
    {"nope_relaxed_rel_loss", "1", "position-average-only loss / teacher energy"},
    {"random_draws", "count", "random adapter draws"},
    {"random_cape_rel_loss_mean", "1", "mean relative loss, random adapters, CAPE student"},
    {"random_cape_rel_loss_min", "1", "smallest relative loss, random adapters, CAPE student"},
    {"random_nope_rel_loss_mean", "1", "mean relative loss, random adapters, NoPE student"},
    {"random_nope_rel_loss_min", "1", "smallest relative loss, random adapters, NoPE student"},
    {"random_cape_rel_loss", "1", "relative loss per random adapter draw, CAPE student"},
    {"random_nope_rel_loss", "1", "relative loss per random adapter draw, NoPE student"},
    {"cape_adapter_residual", "1", "||P W - s W~|| / (s ||W~||), CAPE"},
    {"nope_adapter_residual", "1", "||P W - s W~|| / (s ||W~||), NoPE"},
    {"PQ_cape", "1", "query adapter P_Q of the CAPE init (2U x d_k)"},
    {"PK_cape", "1", "key adapter P_K of the CAPE init (2U x d_k)"},
    {"PQ_nope", "1", "query adapter P_Q of the NoPE init (2U x d_k)"},
    {"PK_nope", "1", "key adapter P_K of the NoPE init (2U x d_k)"},
    {"sigma_cape", "1", "leading singular value of M_u per factor"},
    {"sigma_nope", "1", "kept singular values of the mean operator"},
    {"spec_row", "1", "row of the spec's numeric-claims checklist"},
    {"table", "", "paper table(s) the check uses"},
    {"check", "", "what is checked"},
    {"claimed", "1", "the paper's value (1/0 for an ordering)"},
    {"recomputed", "1", "value recomputed from the transcribed numbers"},
    {"tolerance", "1", "allowed |claimed - recomputed|"},
    {"pass", "1", "1 when the check passes"},
    {"known", "1", "1 for a disagreement the spec already lists"},
    // ramnet memory and attention: attn (E2/E3), topk (E5), slots (E6), gsu (E8), field (E4); docs/ramnet.md
    {"generator", "", "key/query generator spec (gauss, torus, planted, rope)"},
    {"generator_id", "1", "position of the generator in --generators (numeric /grid axis)"},
    {"codebook", "", "codebook variant (circular, random, orthogonal, kmeans, pq)"},
    {"codebook_id", "1", "position of the codebook in --codebooks (numeric /grid axis)"},
    {"topk", "count", "Top-K of reads and writes (0 = full distributions)"},
    {"beta_factor", "1", "beta / beta* with beta* = sqrt(2/tau)"},
    {"beta_id", "1", "position on the beta axis"},
    {"gamma", "1", "GSU retention bias gamma (-inf = cumulative averaging)"},
    {"gamma_id", "1", "position of gamma in --gamma (numeric /grid axis)"},
    {"addresses", "count", "address space size dp^U"},
    {"read_mass", "1", "mean retained read mass sum_k r^K"},
    {"write_mass", "1", "mean retained write mass sum_k w^K"},
    {"intersection", "count", "mean |TopK(r) cap TopK(w)| over query-key pairs"},
    {"zero_kernel_fraction", "1", "fraction of query-key pairs with kappa_A^K = 0"},
    {"gsu_empty_reads", "count", "GSU reads with no written read-selected slot"},
    {"js_full", "1", "JS (nats) of kappa-attention against the softmax teacher"},
    {"js_topk", "1", "JS (nats) of the Top-K kernel attention against the softmax teacher"},
    {"delta_js", "1", "js_topk - js_full"},
    {"nmse_full", "1", "head NMSE of kappa-attention"},
    {"nmse_topk", "1", "head NMSE of the Top-K kernel attention"},
    {"dead_topk", "1", "fraction of queries whose Top-K kernel weights are all 0"},
    {"median_s", "s", "median time of the timed repeats"},
    {"queries_per_s", "1/s", "decoded queries per second"},
    {"speedup_vs_dense", "1", "throughput over the dense enumerate-and-select baseline"},
    {"cpu_s", "s", "process CPU time of the median repeat (all threads)"},
    {"theta", "1", "occupancy threshold on the slot mass"},
    {"occupied_fraction", "1", "fraction of slots with mass above theta"},
    {"effective_slots", "count", "exp(entropy of m / sum m)"},
    {"effective_ratio", "1", "effective_slots / |A|"},
    {"gini", "1", "Gini coefficient of the slot masses over all |A| slots"},
    {"read_hit_mass", "1", "mean read mass on written slots, sum_{TopK(r)} r 1{m > theta}"},
    {"pair_overlap", "1", "mean sum_a r^K w^K over query-key pairs (kappa^K / |A|)"},
    {"stored_slots", "count", "slots with positive mass"},
    {"total_mass", "1", "sum of the slot masses"},
    {"sigma_q", "1", "query noise sigma_q"},
    {"cumulative_kappa_max_diff", "1", "max |mass-aware cumulative GSU readout - kappa-attention| (0 up to rounding)"},
    {"hard_count_max_diff", "1", "max |slot mass - assigned count| under hard writes"},
    {"hard_mean_max_diff", "1", "max |slot state - mean of assigned values| under hard writes"},
    {"hard_vq_max_diff", "1", "max |mass-aware hard-write readout - VQ attention|"},
    {"hull_violations", "count", "state coordinates outside the convex hull of the written values"},
    {"mass_violations", "count", "slot masses above 1 with gamma >= 0"},
    {"max_mass", "1", "largest slot mass"},
    {"lambda_min", "1", "smallest GSU step w/(m+eps)"},
    {"lambda_max", "1", "largest GSU step w/(m+eps)"},
    {"unrolled_max_diff", "1", "max |state - unrolled sum| (section 1.6)"},
    {"gla_max_diff", "1", "max relative |m s - gated linear attention state| (eps = 0)"},
    {"recall", "1", "fraction of items recalled (argmax cosine decode)"},
    {"recall_recent", "1", "recall of items with age < T/4"},
    {"recall_old", "1", "recall of items with age >= 3T/4"},
    {"js_standard", "1", "JS (nats) of the standard readout's induced causal weights"},
    {"js_mass", "1", "JS (nats) of the mass-aware readout's induced causal weights"},
    {"missing_standard", "1", "mean 1 - sum of the standard readout's token weights"},
    {"missing_mass", "1", "mean 1 - sum of the mass-aware readout's token weights"},
    {"dead_standard", "1", "fraction of reads whose standard token weights are all 0"},
    {"dead_mass", "1", "fraction of reads whose mass-aware token weights are all 0"},
    {"empty_reads", "count", "reads with no written read-selected slot"},
    {"age_lo", "count", "smallest item age of the bin"},
    {"age_hi", "count", "largest item age of the bin"},
    {"age_hits", "count", "recalled items per age bin"},
    {"age_count", "count", "items per age bin"},
    {"age_recall", "1", "recall per age bin"},
    {"column", "1", "value-field column number"},
    {"column_name", "", "value-field column (dp, K, readout)"},
    {"mse", "1", "mean squared difference from the reference field"},
    {"region_diff", "1", "fraction of the grid whose dominant key differs from the reference"},
    {"dead_fraction", "1", "fraction of the grid with no written read-selected slot"},
    {"oblique_fraction", "1", "gradient weight farther than pi/8 from both axes"},
    {"kappa_max_diff", "1", "max |field - kappa-attention field|"},
    {"theta0", "rad", "query angle of factor 0"},
    {"theta1", "rad", "query angle of factor 1"},
    {"orientation", "rad", "gradient orientation bin centre"},
    {"reference", "1", "full-attention reference field"},
    {"reference_region", "1", "dominant stored key of the reference field"},
    {"reference_orientation_hist", "1", "gradient-orientation histogram of the reference field"},
    {"field", "1", "value field of the GSU memory"},
    {"kappa_field", "1", "kappa-attention value field"},
    {"region", "1", "dominant stored key (argmax token weight; -1 dead)"},
    {"orientation_hist", "1", "magnitude-weighted gradient-orientation histogram"},
    {"key_angles", "rad", "angles of the stored keys"},
    {"planted_mass_teacher", "1", "teacher weight on the planted key"},
    {"planted_hit_teacher", "1", "teacher top-1 hit rate of the planted key"},
    {"js_kappa", "1", "JS (nats) of kappa-attention against the softmax teacher"},
    {"js_bits_kappa", "bit", "JS (bits) of kappa-attention against the softmax teacher"},
    {"kl_kappa", "1", "smoothed KL(teacher || kappa-attention)"},
    {"nmse_kappa", "1", "head NMSE of kappa-attention"},
    {"missing_kappa", "1", "mean 1 - sum of the token weights of kappa-attention"},
    {"dead_kappa", "1", "fraction of queries whose kappa-attention weights are all 0"},
    {"planted_mass_kappa", "1", "weight of kappa-attention on the planted key"},
    {"planted_hit_kappa", "1", "top-1 hit rate of the planted key, kappa-attention"},
    {"js_kappa_rel", "1", "js_kappa / its value at beta = beta*"},
    {"nmse_kappa_rel", "1", "nmse_kappa / its value at beta = beta*"},
    {"js_kinf", "1", "JS (nats) of kappa_inf attention against the softmax teacher"},
    {"js_bits_kinf", "bit", "JS (bits) of kappa_inf attention against the softmax teacher"},
    {"kl_kinf", "1", "smoothed KL(teacher || kappa_inf attention)"},
    {"nmse_kinf", "1", "head NMSE of kappa_inf attention"},
    {"missing_kinf", "1", "mean 1 - sum of the token weights of kappa_inf attention"},
    {"dead_kinf", "1", "fraction of queries whose kappa_inf attention weights are all 0"},
    {"planted_mass_kinf", "1", "weight of kappa_inf attention on the planted key"},
    {"planted_hit_kinf", "1", "top-1 hit rate of the planted key, kappa_inf attention"},
    {"js_kinf_rel", "1", "js_kinf / its value at beta = beta*"},
    {"nmse_kinf_rel", "1", "nmse_kinf / its value at beta = beta*"},
    {"js_topk", "1", "JS (nats) of Top-K kernel attention against the softmax teacher"},
    {"js_bits_topk", "bit", "JS (bits) of Top-K kernel attention against the softmax teacher"},
    {"kl_topk", "1", "smoothed KL(teacher || Top-K kernel attention)"},
    {"nmse_topk", "1", "head NMSE of Top-K kernel attention"},
    {"missing_topk", "1", "mean 1 - sum of the token weights of Top-K kernel attention"},
    {"dead_topk", "1", "fraction of queries whose Top-K kernel attention weights are all 0"},
    {"planted_mass_topk", "1", "weight of Top-K kernel attention on the planted key"},
    {"planted_hit_topk", "1", "top-1 hit rate of the planted key, Top-K kernel attention"},
    {"js_topk_rel", "1", "js_topk / its value at beta = beta*"},
    {"nmse_topk_rel", "1", "nmse_topk / its value at beta = beta*"},
    {"js_gsu_standard", "1", "JS (nats) of GSU standard-readout weights against the softmax teacher"},
    {"js_bits_gsu_standard", "bit", "JS (bits) of GSU standard-readout weights against the softmax teacher"},
    {"kl_gsu_standard", "1", "smoothed KL(teacher || GSU standard-readout weights)"},
    {"nmse_gsu_standard", "1", "head NMSE of GSU standard-readout weights"},
    {"missing_gsu_standard", "1", "mean 1 - sum of the token weights of GSU standard-readout weights"},
    {"dead_gsu_standard", "1", "fraction of queries whose GSU standard-readout weights weights are all 0"},
    {"planted_mass_gsu_standard", "1", "weight of GSU standard-readout weights on the planted key"},
    {"planted_hit_gsu_standard", "1", "top-1 hit rate of the planted key, GSU standard-readout weights"},
    {"js_gsu_standard_rel", "1", "js_gsu_standard / its value at beta = beta*"},
    {"nmse_gsu_standard_rel", "1", "nmse_gsu_standard / its value at beta = beta*"},
    {"js_gsu_mass", "1", "JS (nats) of GSU mass-aware weights against the softmax teacher"},
    {"js_bits_gsu_mass", "bit", "JS (bits) of GSU mass-aware weights against the softmax teacher"},
    {"kl_gsu_mass", "1", "smoothed KL(teacher || GSU mass-aware weights)"},
    {"nmse_gsu_mass", "1", "head NMSE of GSU mass-aware weights"},
    {"missing_gsu_mass", "1", "mean 1 - sum of the token weights of GSU mass-aware weights"},
    {"dead_gsu_mass", "1", "fraction of queries whose GSU mass-aware weights weights are all 0"},
    {"planted_mass_gsu_mass", "1", "weight of GSU mass-aware weights on the planted key"},
    {"planted_hit_gsu_mass", "1", "top-1 hit rate of the planted key, GSU mass-aware weights"},
    {"js_gsu_mass_rel", "1", "js_gsu_mass / its value at beta = beta*"},
    {"nmse_gsu_mass_rel", "1", "nmse_gsu_mass / its value at beta = beta*"},
    {"js_vq", "1", "JS (nats) of hard-write VQ attention against the softmax teacher"},
    {"js_bits_vq", "bit", "JS (bits) of hard-write VQ attention against the softmax teacher"},
    {"kl_vq", "1", "smoothed KL(teacher || hard-write VQ attention)"},
    {"nmse_vq", "1", "head NMSE of hard-write VQ attention"},
    {"missing_vq", "1", "mean 1 - sum of the token weights of hard-write VQ attention"},
    {"dead_vq", "1", "fraction of queries whose hard-write VQ attention weights are all 0"},
    {"planted_mass_vq", "1", "weight of hard-write VQ attention on the planted key"},
    {"planted_hit_vq", "1", "top-1 hit rate of the planted key, hard-write VQ attention"},
    {"js_vq_rel", "1", "js_vq / its value at beta = beta*"},
    {"nmse_vq_rel", "1", "nmse_vq / its value at beta = beta*"},
    // hebb edit (fact editing, docs/hebb-edit.md)
    {"mlp_accuracy", "1", "standalone fact-expert accuracy (argmax over the author embeddings)"},
    {"value_accuracy", "1", "argmax accuracy at the author position over the full vocabulary"},
    {"value_accuracy_pre", "1", "value accuracy of the base model before the edit"},
    {"nonfact_ce", "1", "mean CE over the non-author next-token positions (nats)"},
    {"nf_ce_before", "1", "non-fact CE before the edit (nats)"},
    {"nf_ce_after", "1", "non-fact CE after the edit (nats)"},
    {"nonfact_tokens", "count", "non-author positions in the non-fact CE"},
    {"r_nf", "1", "exp(nf_ce_after - nf_ce_before)"},
    {"efficacy", "1", "altered facts, train prompt: accuracy on the new author"},
    {"paraphrase", "1", "altered facts, held-out prompts: accuracy on the new author"},
    {"specificity", "1", "preserved facts, train prompt: accuracy on the original author"},
    {"specificity_paraphrase", "1", "preserved facts, held-out prompts: accuracy on the original author"},
    {"score", "1", "harmonic mean of efficacy, paraphrase and specificity"},
    {"efficacy_pre", "1", "efficacy before the edit"},
    {"paraphrase_pre", "1", "paraphrase accuracy before the edit"},
    {"specificity_pre", "1", "specificity before the edit"},
    {"fraction", "1", "share of the facts edited"},
    {"n_altered", "count", "facts edited, round(F p)"},
    {"templates", "count", "sentence templates per fact"},
    {"expert", "", "fact expert kind (gd-mse / data-dependent)"},
    {"expert_method", "", "fact expert method spec"},
    {"expert_hidden", "count", "hidden width h of the fact expert"},
    {"expert_params", "count", "parameters of the fact expert"},
    {"expert_final_loss", "1", "final MSE of the GD fact expert"},
    {"expert_epochs", "count", "GD epochs of the fact expert"},
    {"expert_s", "s", "time to train or build the fact expert"},
    {"best_epoch", "1", "epoch whose parameters were kept (best value accuracy)"},
    {"edit_lr", "1", "Adam learning rate of the target residuals"},
    {"edit_wd", "1", "Adam weight decay of the target residuals"},
    {"early_stop", "1", "residual loss below which a fact's optimization stops (0 = off)"},
    {"clip", "1", "residual norm clip relative to ||W_out k|| (0 = off)"},
    {"lambda", "1", "MEMIT weight of the preserved-key covariance"},
    {"tol", "1", "AlphaEdit null-space threshold on the singular values"},
    {"residual_loss", "1", "mean final CE of the target-residual optimization"},
    {"epoch_loss", "1", "mean training loss of the epoch's steps"},
    {"target_fact", "1", "fact whose author is the post-edit target"},
    {"prompt_order", "1", "templates of a fact in prompt order (first = train prompt)"},
    {"predicted_pre", "1", "argmax token at the author position before the edit"},
    {"predicted_post", "1", "argmax token at the author position after the edit"},
};

const std::map<std::string, Description>& registry() {
  static const std::map<std::string, Description> m = [] {
    std::map<std::string, Description> r;
    for (const auto& e : kEntries) r.emplace(e.name, Description{e.unit, e.text});
    return r;
  }();
  return m;
}

std::string basename_of(const std::string& path) {
  const auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

// Collects the paths of every dataset below a group.
herr_t collect_cb(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

herr_t attr_names_cb(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

Description describe(const std::string& name, const std::string& context, bool* known) {
  const auto& r = registry();
  if (known) *known = true;
  if (!context.empty())
    if (auto it = r.find(context + "/" + name); it != r.end()) return it->second;
  if (auto it = r.find(name); it != r.end()) return it->second;
  if (name.rfind("bound_", 0) == 0)  // the margin-sweep theory columns (docs/hebb-theory.md)
    return {"1", fmt::format("theoretical bound '{}' at this point (docs/hebb-theory.md)", name.substr(6))};
  if (known) *known = false;
  return {"", fmt::format("{} (no description registered; see docs/hdf5-schema.md)", name)};
}

std::vector<std::string> described_names() {
  std::vector<std::string> v;
  for (const auto& [k, d] : registry()) v.push_back(k);
  return v;
}

void annotate_datasets(h5::Group& root) {
  std::vector<std::string> paths;
  if (H5Ovisit(root.id(), H5_INDEX_NAME, H5_ITER_NATIVE, collect_cb, &paths) < 0)
    throw IoError(fmt::format("cannot list the datasets of '{}'", root.filename()));
  for (const auto& p : paths) {
    const hid_t id = H5Oopen(root.id(), p.c_str(), H5P_DEFAULT);
    if (id < 0) throw IoError(fmt::format("cannot open dataset '{}' in '{}'", p, root.filename()));
    h5::Group ds(h5::Handle(id, H5Oclose), p, root.filename());
    if (ds.has_attr("units")) continue;
    const auto slash = p.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "" : basename_of(p.substr(0, slash));
    const Description d = describe(basename_of(p), parent);
    ds.attr("units", d.unit);
    ds.attr("long_name", d.text);
  }
}

void write_row_scale(h5::Group& summary, const Table& t) {
  if (summary.exists("row") || t.names.empty()) return;
  std::vector<std::int64_t> rows(t.rows());
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  summary.write("row", std::span<const std::int64_t>(rows));
  for (const auto& n : t.names) summary.attach_scales(n, {"row"});
}

void write_library_versions(h5::Group& root) {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  root.attr("hdf5_version", fmt::format("{}.{}.{}", maj, min, rel));
  root.attr("eigen_version", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION));
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." -> "0.3.21"
  std::string cfg = blas_config() ? blas_config() : "";
  std::string ver = cfg;
  if (cfg.rfind("OpenBLAS ", 0) == 0) ver = cfg.substr(9, cfg.find(' ', 9) == std::string::npos ? std::string::npos : cfg.find(' ', 9) - 9);
  root.attr("openblas_version", ver);
#if defined(__clang__)
  root.attr("compiler", fmt::format("clang {}", __clang_version__));
#elif defined(__GNUC__)
  root.attr("compiler", fmt::format("gcc {}", __VERSION__));
#else
  root.attr("compiler", "unknown");
#endif
}

std::vector<std::pair<std::string, Cell>> read_attributes(const h5::Group& g) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(g.id(), H5_INDEX_NAME, H5_ITER_INC, &idx, attr_names_cb, &names) < 0)
    throw IoError(fmt::format("cannot list the attributes of {} in '{}'", g.path(), g.filename()));
  std::vector<std::pair<std::string, Cell>> out;
  for (const auto& n : names) {
    h5::Handle a(H5Aopen(g.id(), n.c_str(), H5P_DEFAULT), H5Aclose);
    if (!a.valid()) throw IoError(fmt::format("cannot open attribute '{}' of {} in '{}'", n, g.path(), g.filename()));
    h5::Handle space(H5Aget_space(a.get()), H5Sclose), type(H5Aget_type(a.get()), H5Tclose);
    if (!space.valid() || !type.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) continue;
    switch (H5Tget_class(type.get())) {
      case H5T_STRING: out.emplace_back(n, *g.attr_string(n)); break;
      case H5T_INTEGER: out.emplace_back(n, *g.attr_int(n)); break;
      case H5T_FLOAT: out.emplace_back(n, *g.attr_double(n)); break;
      default: break;
    }
  }
  return out;
}

void write_attributes(h5::Group& g, const std::vector<std::pair<std::string, Cell>>& attrs) {
  for (const auto& [n, c] : attrs) std::visit([&](const auto& v) { g.attr(n, v); }, c);
}

}  // namespace memcap::io
