// The feature maps causal KATA attention can run (spec kata.md §2, §5): a kernel-facing view of a
// parsed FeatureMap (kind, groups, eps, scale, widths). Spec strings are parsed only by
// FeatureMap::parse; attention_map() is the one function that turns a FeatureMap into this view.
#pragma once
#include <cstdint>

#include "kata/feature_map.hpp"

namespace memcap::kata {

// Kind codes shared with the CUDA kernels (AttentionLaunch::map_kind, kernels/kata_attention_common.cuh):
// keep these values.
enum class AttentionMapKind { linear = 0, orthant = 1, lorentz = 2, psd_block = 3, psd_sum = 4 };

// Plain description of a map for the attention forms and kernels; build it with attention_map().
// ψ(x) and the closed-form kernel are FeatureMap::apply / FeatureMap::kernel_matrix (packed layout of
// §2.4: diagonal first, then the strict upper triangle row-major × √2 — the CUDA kernels use the same).
struct AttentionMap {
  AttentionMapKind kind = AttentionMapKind::linear;
  int d = 0;            // raw head width d
  int groups = 1;       // g of M_g / Σ_g (1 otherwise)
  int block_width = 0;  // m = d / g for the PSD maps, d otherwise
  int n_features = 0;   // packed n_ψ
  double eps = 0.0;     // orthant: ReLU(x)+ε; PSD: εI (per block for M_g, once for Σ_g)
  double scale = 1.0;   // c of Σ_g (1 otherwise)

  bool is_psd() const { return kind == AttentionMapKind::psd_block || kind == AttentionMapKind::psd_sum; }
  bool nonnegative() const { return kind != AttentionMapKind::linear; }  // a cone map: kernel >= 0
};

// The attention view of `map`. Attention runs linear, orthant, lorentz (L3), m<g> and sigma<g>;
// UserError (saying which maps to use) for softmax, deg<2r>, lorentz-lift and lorentz-ray, and for a
// map too wide for the kernels' int sizes.
AttentionMap attention_map(const FeatureMap& map);

}  // namespace memcap::kata
