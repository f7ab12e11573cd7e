// One configuration of experiment E1 (spec ramnet.md §3 E1): sample (q, k) pairs whose larger scaled block
// norm is M in every factor, add the adversarial pairs, evaluate the exact errors and the bounds of
// Theorem 2 (eqs. 11, 16, 17, 20) for each, and reduce to maxima, ranges, sign statistics, bound/observed
// ratios and violation counts. Parallel over pairs (OpenMP, fixed chunks reduced in order), so the result
// does not depend on the thread count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ramnet/theory.hpp"

namespace memcap::ramnet {

// Philox stream of the sampled E1 pairs (documented in docs/ramnet.md).
inline constexpr std::uint64_t kStreamBoundsPairs = 1400;

struct BoundsJobSpec {
  int dp = 4, U = 1;
  double M = 0.5;              // larger scaled block norm max(β_r|q_u|, β_w|k_u|) of every factor
  double beta = 1.0;           // β_r = β_w = β (the errors depend only on β q and β k)
  std::int64_t pairs = 100000; // sampled pairs
  std::uint64_t seed = 0;
  int keep = 1000;             // sampled pairs whose errors are returned (first ones)
};

// Sampled pair #index of a spec into q, k (2U each): per factor two uniform angles, a uniform choice of
// which of (q_u, k_u) has the scaled norm M, and the other's scaled norm M·U(0,1). Counter-based
// (seed, kStreamBoundsPairs, 4U·index + 4u + j): a pair depends on (seed, U, M, β, index) only, so the same
// scaled pairs are used for every dp (common random numbers).
void sample_bounds_pair(const BoundsJobSpec& s, std::int64_t index, double* q, double* k);

// The adversarial pairs of E1, identical in every factor: aligned / anti-aligned / orthogonal blocks, with q on
// code 0 or midway between codes 0 and 1, k at scaled norm M or M/2; plus k on the neighbouring code.
struct NamedPair {
  std::string name;
  std::vector<double> q, k;
};
std::vector<NamedPair> adversarial_pairs(const BoundsJobSpec& s);

struct ErrorStats {
  double min = 0, max = 0, max_abs = 0, sum = 0;
  std::int64_t positive = 0, count = 0;
  void add(double v);
  void merge(const ErrorStats& o);
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
};

struct BoundsJobResult {
  BoundsJobSpec spec;
  double xi = 0, bound11 = 0, bound16_lo = 0, bound16_hi = 0, bound17 = 0, bound20 = 0;  // at spec.M
  ErrorStats tot, fin, cont;              // sampled pairs
  ErrorStats adv_tot, adv_fin, adv_cont;  // adversarial pairs
  // Over sampled and adversarial pairs, each against its own M (violations beyond PairErrors::roundoff):
  std::int64_t viol11 = 0, viol16 = 0, viol17 = 0, viol20 = 0;
  std::int64_t checked11 = 0, checked20 = 0;  // pairs where ξ < 1 (eqs. 11 and 20 apply)
  double frac11 = 0, frac16 = 0, frac17 = 0, frac20 = 0;  // largest observed/bound per pair (< 1: no violation)
  double max_consistency = 0;             // max |(log κ_A − target) − (e_fin + e_cont)|
  std::vector<NamedPair> adv_pairs;
  std::vector<PairErrors> adv;
  std::vector<double> sample_e_tot, sample_e_fin, sample_e_cont;  // first `keep` sampled pairs
  std::int64_t violations() const { return viol11 + viol16 + viol17 + viol20; }
};

BoundsJobResult run_bounds_job(const BoundsJobSpec& spec);

}  // namespace memcap::ramnet
