// Theory overlays for the capacity protocol, from the formulas of psnr.hpp and bounds.hpp.
#include "kata/capacity_theory.hpp"

#include <cmath>
#include <limits>

#include "kata/bounds.hpp"
#include "kata/feature_map.hpp"
#include "kata/psnr.hpp"

namespace memcap::kata {

CapacityTheory capacity_theory(const CapacityKernel& map, double coh) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto& p = map.params();
  const std::int64_t d = p.d;
  CapacityTheory t;
  t.welch_linear = linear_threshold(d);
  t.welch_psd = d >= 2 ? psd_threshold(d) : nan;
  t.welch_softmax = nan;
  if (map.is_softmax() && d >= 2) {
    const auto T = largest_retrievable_T(parse_rung("softmax", p.tau), d);
    t.welch_softmax = static_cast<double>(T);
  }
  t.random_linear = static_cast<double>(d) + 1.0;
  t.random_m1 = static_cast<double>(d) * (d + 2) / 3.0 + 1.0;
  // Every random-key estimate has the form c/(T-1): the threshold is 1 + c (evaluate at T = 2).
  t.random_map = nan;
  try {
    const FeatureMap fm = FeatureMap::parse(map.spec(), d);
    t.random_map = 1.0 + psnr_random_for_map(fm, 2.0);
  } catch (const std::exception&) {
    t.random_map = nan;  // no estimate for this map
  }
  const bool lorentz = map.kind() == MapKind::Lorentz || map.kind() == MapKind::LorentzRay ||
                       map.kind() == MapKind::LorentzLift;
  t.rankin = nan;
  if (lorentz && std::isfinite(coh) && coh >= 0 && coh <= 0.5) {
    // L3 stays in R^d (ambient d); L1/L2 lift raw d to ambient d+1.
    const auto conv = map.kind() == MapKind::Lorentz ? LorentzConvention::Ambient : LorentzConvention::Raw;
    if (d >= (conv == LorentzConvention::Ambient ? 3 : 2)) t.rankin = rankin_wall(d, coh, conv);
  }
  t.greedy_cap_paper = t.greedy_cap_exact = nan;
  const bool psd_full = map.kind() == MapKind::BlockPsd && p.g == 1;
  if (psd_full && std::isfinite(coh) && coh >= 0 && coh < 1 && d >= 2) {
    t.greedy_cap_paper = psd_cap_lb_paper(d, coh);
    t.greedy_cap_exact = psd_cap_lb_exact(d, coh);
  }
  t.notes =
      "paper: welch_linear=2p, welch_psd=T*_PSD, welch_softmax=(14), rankin (Thm 9), greedy_cap_paper (Thm 4); "
      "derived: random_linear=p+1, random_m1=p(p+2)/3+1, random_map, greedy_cap_exact (exact cap measure)";
  return t;
}

}  // namespace memcap::kata
