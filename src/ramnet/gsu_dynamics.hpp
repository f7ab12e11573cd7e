// GSU dynamics (spec ramnet.md §3 E8) on key/value sequences of a generator:
//  (i)   cumulative limit = κ-attention: with γ = −inf, ε = 0 and full distributions the causal mass-aware
//        readout equals Σ_{s≤t} κ_A(q_t,k_s) v_s / Σ_{s≤t} κ_A(q_t,k_s) (max |difference|, §2.9);
//  (ii)  hard writes + cumulative = count / mean per slot, and the mass-aware full read = VQ attention
//        softmax_s(β_r q·k̂_s) (§2.8);
//  (iii) the §1.6 invariants under the configuration's own γ, ε, K: state in the convex hull of the
//        written values (and of s_0 = 0 when ε > 0), m ≤ 1 when γ ≥ 0, λ ∈ [0, 1], the unrolled form
//        s_T = Σ_t λ_t Π_{r>t}(1 − λ_r) v_t, and m s = N for the gated linear-attention recursion when ε = 0;
//  (iv)  forgetting: recall of item i (read with q_i = k_i + N(0, σ_q²) after all T writes, decoded by
//        argmax cosine over the T stored values) against its age T − 1 − i;
//  (v)   standard vs mass-aware readout: JS of the causal token weights α_{t,·} they induce (§1.7) against
//        the causal softmax teacher softmax_{s≤t}(q_t·k_s/τ) (Table 8 analogue).
#pragma once
#include <cstdint>
#include <vector>

#include "ramnet/attention.hpp"
#include "ramnet/gsu.hpp"

namespace memcap::ramnet {

struct GsuDynamicsConfig {
  Params params;
  double tau = 1.0;
  std::int64_t topk = 32;      // 0 = full (dense memory)
  double gamma = -INFINITY;
  double eps = 0.0;
  Readout readout = Readout::mass;  // (iv)
  Generator gen;
  std::int64_t T = 256;        // tokens per sequence
  int dv = 16;
  std::int64_t trials = 5;
  double sigma_q = 0.0;        // (iv) read-back noise
  bool checks = true;          // run (i) and (ii) (full dense memories: need |A| small)
  std::uint64_t seed = 0;
};
void validate(const GsuDynamicsConfig& c);

struct GsuDynamicsResult {
  // (i), (ii): NaN when not run.
  double cumulative_kappa_max_diff = NAN;
  double hard_count_max_diff = NAN, hard_mean_max_diff = NAN, hard_vq_max_diff = NAN;
  // (iii)
  std::int64_t hull_violations = 0, mass_violations = 0;
  double max_mass = 0, lambda_min = 1, lambda_max = 0, unrolled_max_diff = 0, gla_max_diff = NAN;
  // (iv): bin 0 = age 0, bin b ≥ 1 = ages [2^(b−1), 2^b)
  std::vector<std::int64_t> age_hits, age_count;
  double recall = 0, recall_recent = 0, recall_old = 0;  // all items; age < T/4; age ≥ 3T/4
  // (v)
  double js_standard = NAN, js_mass = NAN, missing_standard = NAN, missing_mass = NAN;
  double dead_standard = NAN, dead_mass = NAN;
  std::int64_t empty_reads = 0;
};
GsuDynamicsResult run_gsu_dynamics(const GsuDynamicsConfig& c);

int age_bin(std::int64_t age);  // 0 → 0, [2^(b−1), 2^b) → b

}  // namespace memcap::ramnet
