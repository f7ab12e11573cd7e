// attention_map(): the kernel-facing view of a parsed FeatureMap for causal KATA attention.
// ε defaults come from FeatureMap::parse (one set for the whole toolkit; see feature_map.hpp and
// docs/kata-kernels.md "Feature maps"): orthant 1e-6, M_g 0, Σ_g 1e-4.
#include "kata/attention_features.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/error.hpp"

namespace memcap::kata {

AttentionMap attention_map(const FeatureMap& map) {
  AttentionMap a;
  switch (map.kind()) {
    case MapKind::Linear: a.kind = AttentionMapKind::linear; break;
    case MapKind::Orthant: a.kind = AttentionMapKind::orthant; break;
    case MapKind::Lorentz: a.kind = AttentionMapKind::lorentz; break;
    case MapKind::BlockPsd: a.kind = AttentionMapKind::psd_block; break;
    case MapKind::SumPsd: a.kind = AttentionMapKind::psd_sum; break;
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
  a.d = static_cast<int>(map.input_dim());
  a.groups = static_cast<int>(map.groups());
  a.block_width = a.is_psd() ? a.d / a.groups : a.d;
  a.n_features = static_cast<int>(map.feature_dim());
  a.eps = map.eps();
  a.scale = map.scale();
  return a;
}

}  // namespace memcap::kata
