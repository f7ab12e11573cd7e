// Symmetric-cone feature maps ψ of the KATA paper (spec kata.md §2): one parser for the spec
// strings, the explicit features (packed PSD layout with √2 off-diagonals), their closed-form
// kernels, dimensions n_ψ and state sizes. CPU reference for every kernel in kernels/kata_*.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "kata/map_params.hpp"

namespace memcap::kata {

class FeatureMap {
 public:
  // spec: "linear", "orthant" (ε = 1e-6), "orthant:eps=E", "lorentz" (KATA-Lorentz, impl F.4, L3),
  // "lorentz-lift" (L1, (x,‖x‖)), "lorentz-ray" (L2, 2^{-1/2}(x/‖x‖, 1)), "m1","m2","m4",.. (M_g,
  // options eps=E, default 0), "sigma2","sigma4",.. (Σ_g, eps default 1e-4, scale default 1/4 for
  // g = 4 else 1, option scale=C), "deg2","deg4",.. (packed u^{⊗2r}), "softmax:tau=T" (reference
  // only). UserError on unknown map, d not divisible by g, bad eps/tau/scale, d too small.
  // This is the only parser of map spec strings in the toolkit (capacity, psnr and the attention forms /
  // `kata bench` all use it), so one string means one map everywhere. ε defaults and their spec source:
  // orthant 1e-6 (§2.2, F.4); Σ_g 1e-4 (§2.6: the reported Σ2/Σ4 configurations; §4.4); M_g 0 (§7.2 U7:
  // the paper gives no ε for M_g, and §5.1's quadratic score is Σ_a (q_a·k_a)² with ε terms only on request).
  static FeatureMap parse(const std::string& spec, std::int64_t d);
  // The spec with every option resolved, e.g. "sigma4:eps=0.0001,scale=0.25" or "orthant:eps=1e-06";
  // parse(canonical_spec(), d) gives the same map. Results store it so the ε actually used is on record.
  std::string canonical_spec() const;

  const std::string& spec() const { return spec_; }
  MapKind kind() const { return kind_; }
  std::int64_t input_dim() const { return d_; }
  std::int64_t feature_dim() const { return n_psi_; }  // n_ψ (packed); 0 for softmax
  bool is_softmax() const { return kind_ == MapKind::Softmax; }
  double tau() const { return tau_; }       // softmax temperature (0 for other maps)
  double eps() const { return eps_; }       // ε of orthant / M_g / Σ_g (0 otherwise)
  double scale() const { return scale_; }   // c of Σ_g (1 otherwise)
  std::int64_t groups() const { return g_; }        // g of M_g / Σ_g (1 otherwise)
  int degree() const { return degree_; }            // kernel degree in ⟨x,y⟩: 1, 2 (PSD), 2r
  // Name of the cone ψ maps into, e.g. "R^64_+", "L^64_+", "(S^32_+)^2".
  std::string cone() const;
  // The resolved constants (kind, d, g, m, n_ψ, ε, c, τ) as one plain struct: what the CUDA kernels and the
  // capacity / attention paths read (map_params.hpp).
  MapParams params() const;

  // Rows x -> rows ψ(x) (N × n_ψ). UserError for softmax (no finite feature) or wrong width.
  Eigen::MatrixXd apply(const Eigen::MatrixXd& X) const;
  // Closed-form K(x_i, y_j) (N × M) without forming ψ. Softmax: exp(⟨x,y⟩/τ).
  Eigen::MatrixXd kernel_matrix(const Eigen::MatrixXd& X, const Eigen::MatrixXd& Y) const;
  double kernel(const Eigen::VectorXd& x, const Eigen::VectorXd& y) const;
  // K(x_i, x_i) for every row (N).
  Eigen::VectorXd kernel_diag(const Eigen::MatrixXd& X) const;
  // Vector-Jacobian product of ψ, row by row: dX(i,:) = J_ψ(X(i,:))ᵀ G(i,:) (N × d), float64. G is N × n_ψ.
  // Where ψ is not differentiable (ReLU at 0, the norm at 0) the one-sided choice is: ReLU'(0) = 0 and
  // ∂‖y‖ = 0 at y = 0. UserError for softmax (no finite ψ).
  Eigen::MatrixXd vjp(const Eigen::MatrixXd& X, const Eigen::MatrixXd& G) const;

  // §2.9 convention (Table 2): n_ψ · d_v per head, normalizer Z not counted. UserError for softmax
  // (its state is the KV cache 2·d·T, which depends on T).
  std::int64_t state_size(std::int64_t d_v) const;
  // n_ψ · (d_v + 1): S and Z together.
  std::int64_t full_state_size(std::int64_t d_v) const;

 private:
  std::string spec_;
  MapKind kind_ = MapKind::Linear;
  std::int64_t d_ = 0, n_psi_ = 0, g_ = 1;
  int degree_ = 1;
  double eps_ = 0.0, tau_ = 0.0, scale_ = 1.0;
  void check_width(const Eigen::MatrixXd& X, const char* what) const;
};

// Packed symmetric layout of §2.4: diagonal first, then the strict upper triangle row-major with
// off-diagonals × √2, so ⟨pack(A), pack(B)⟩ = ⟨A, B⟩_F.  pack(u uᵀ) for a vector u (length m).
void pack_rank_one(const double* u, std::int64_t m, double scale, double* out);
// Number of multisets of size r from n symbols: C(n + r − 1, r) (the packed width of u^{⊗r}).
std::int64_t symmetric_dim(std::int64_t n, int r);

}  // namespace memcap::kata
