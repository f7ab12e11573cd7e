// attention_map(): which parsed FeatureMaps causal KATA attention runs, as their MapParams.
// ε defaults come from FeatureMap::parse (one set for the whole toolkit; see feature_map.hpp and
// docs/kata-kernels.md "Feature maps"): orthant 1e-6, M_g 0, Σ_g 1e-4.
#include "kata/attention_features.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/error.hpp"

namespace memcap::kata {

MapParams attention_map(const FeatureMap& map) {
  switch (map.kind()) {
    case MapKind::Linear:
    case MapKind::Orthant:
    case MapKind::Lorentz:
    case MapKind::BlockPsd:
    case MapKind::SumPsd: break;
    case MapKind::LorentzLift:
    case MapKind::LorentzRay:
    case MapKind::EvenDegree:
    case MapKind::Softmax:
      throw UserError(fmt::format(
          "feature map '{}' is not available for causal attention (it is a capacity/theory map); use linear, "
          "orthant[:eps=E], lorentz, m<g>[:eps=E] or sigma<g>[:eps=E,scale=C]",
          map.spec()));
  }
  require(map.input_dim() >= 1, "feature map '{}' has no input width; build it with FeatureMap::parse(spec, d)",
          map.spec());
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  require(map.input_dim() <= kMax && map.feature_dim() <= kMax,
          "feature map '{}': d = {} (n_psi = {}) is too large for the attention kernels", map.spec(), map.input_dim(),
          map.feature_dim());
  return map.params();
}

}  // namespace memcap::kata
