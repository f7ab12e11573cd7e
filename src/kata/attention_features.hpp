// Feature maps psi used by causal KATA attention (spec kata.md §2.1-2.7): linear, orthant,
// Lorentz (L3 implementation map), KATA-M_g (block PSD) and KATA-Sigma_g (summed blocks),
// in the packed symmetric layout (diagonal first, then upper triangle scaled by sqrt 2).
#pragma once
#include <string>

namespace memcap::kata {

enum class AttentionMapKind { linear, orthant, lorentz, psd_block, psd_sum };

struct AttentionMap {
  AttentionMapKind kind = AttentionMapKind::psd_block;
  int groups = 2;       // g for M_g / Sigma_g (block width m = d / g)
  double eps = 0.0;     // epsilon: orthant ReLU(x)+eps; PSD: eps*I added to each PSD factor
  double scale = 1.0;   // Sigma_g only: c in psi = c * sum_a u_a u_a^T (default 1/4 when g = 4)

  // "linear" | "orthant[:eps=E]" | "lorentz" | "m<g>[:eps=E]" | "sigma<g>[:eps=E,scale=C]".
  // Defaults: orthant eps = 1e-6 (paper F.4); PSD maps eps = 0 (the gate-free kernels of §5.1).
  static AttentionMap parse(const std::string& spec);
  std::string to_string() const;  // canonical spec string, parse(to_string()) == *this

  bool is_psd() const { return kind == AttentionMapKind::psd_block || kind == AttentionMapKind::psd_sum; }
  bool nonnegative() const { return kind != AttentionMapKind::linear; }  // kernel >= 0 (cone map)
  int block_width(int d) const;       // m = d / g (PSD maps), d otherwise
  int n_features(int d) const;        // packed n_psi
  void validate(int d) const;         // UserError unless the map is defined for raw width d

  // psi(x) for one raw vector x (length d) into out (length n_features(d)).
  void features(const double* x, int d, double* out) const;
  // <psi(q), psi(k)> in closed form (spec 2.7), without forming psi.
  double kernel(const double* q, const double* k, int d) const;
};

// Packed index -> (i, j) pair of the m x m symmetric factor: l < m is the diagonal (l, l),
// then the strict upper triangle row by row.
void packed_pair(int m, int l, int* i, int* j);

}  // namespace memcap::kata
