// The feature maps causal KATA attention can run (spec kata.md §2, §5). Spec strings are parsed only by
// FeatureMap::parse; attention_map() checks that a parsed map is one attention runs and returns its
// MapParams (map_params.hpp: the one map identity the CPU forms and the CUDA kernels share).
#pragma once
#include <cstdint>

#include "kata/feature_map.hpp"
#include "kata/map_params.hpp"

namespace memcap::kata {

// map.params() when attention runs the map: linear, orthant, lorentz (L3), m<g> and sigma<g>. UserError
// (saying which maps to use) for softmax, deg<2r>, lorentz-lift and lorentz-ray, and for a map too wide for
// the kernels' int sizes. ψ(x) and the closed-form kernel are FeatureMap::apply / kernel_matrix (packed
// layout of §2.4: diagonal first, then the strict upper triangle row-major × √2 — the CUDA kernels use the
// same, kernels/kata_feature_map.cuh).
MapParams attention_map(const FeatureMap& map);

}  // namespace memcap::kata
