// Theory overlays stored beside the measured capacities of `kata capacity` (spec §4.6): the
// Welch-ideal thresholds (2p, T*_PSD, T_Soft(p,tau)), random-key predictions, the Lorentz Rankin
// wall and greedy-cap lower bounds at the measured coherence. Formulas live in psnr.hpp/bounds.hpp.
#pragma once
#include <string>

#include "kata/capacity_kernel.hpp"

namespace memcap::kata {

// NaN marks "does not apply to this map". p = d_head throughout.
struct CapacityTheory {
  double welch_linear = 0;      // 2p (paper): Welch-ideal keys, linear readout
  double welch_psd = 0;         // T*_PSD (paper, Thm optimalsnr)
  double welch_softmax = 0;     // largest T with pSNR_Soft > 1, exact (14) by bisection (softmax only)
  double random_linear = 0;     // p + 1 (derived, random keys)
  double random_m1 = 0;         // p(p+2)/3 + 1 (derived, random keys)
  double random_map = 0;        // 1 + c for this map's random-key estimate pSNR = c/(T-1) (derived)
  double rankin = 0;            // Lorentz maps: min{n_psi, 1 + 1/(1-2 eps)} at the measured coherence
  double greedy_cap_paper = 0;  // PSD maps: 1/2 (1-eps)^{-(p-1)/2} at the measured coherence
  double greedy_cap_exact = 0;  // PSD maps: 1/(2 sigma(C_a)), a = sqrt(eps)
  std::string notes;            // which formulas are "paper" and which "derived"
};

// measured_coherence: the feature-space coherence measured at K*_psnr (NaN: skip the bounds that
// depend on it).
CapacityTheory capacity_theory(const CapacityKernel& map, double measured_coherence);

}  // namespace memcap::kata
