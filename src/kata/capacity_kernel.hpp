// Closed-form attention coefficients for `kata capacity` (spec §2, §4.6): for every map of §2 the
// coefficient A_ij = <psi(q_i), psi(u_j)> from raw vectors with GEMMs (no psi), the packed psi
// itself (for the state path S = Psi(U)^T V); the CUDA path reads the same MapParams.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "kata/feature_map.hpp"
#include "kata/map_params.hpp"

namespace memcap::kata {

class CapacityKernel {
 public:
  // Parse a map spec string with the one parser, FeatureMap::parse (linear, orthant[:eps=E], lorentz,
  // lorentz-ray, lorentz-lift, m<g>[:eps=E], sigma<g>[:eps=E,scale=C], deg2, softmax:tau=T).
  // UserError on unknown names, bad options, g not dividing d, tau <= 0, deg4 and higher.
  static CapacityKernel parse(const std::string& spec, int d);

  const std::string& spec() const { return spec_; }
  // The map's MapParams (map_params.hpp), with deg2 run as M_1 at eps = 0 (the same kernel (q.k)^2).
  const MapParams& params() const { return p_; }
  MapKind kind() const { return p_.kind; }
  bool is_softmax() const { return p_.kind == MapKind::Softmax; }
  bool nonnegative() const { return p_.kind != MapKind::Linear; }
  // Width of psi (packed); 0 for softmax (its state is the KV cache).
  std::int64_t feature_dim() const;

  // A(i,j) = k(Q_i, U_j) (rows are vectors), from raw-key GEMMs (the same closed forms the CUDA
  // path evaluates per tile). For softmax the row i is scaled by exp(-shift_i/tau)
  // with shift_i = |Q_i| * max_j |U_j| (so no entry overflows); every per-row ratio is unchanged.
  Eigen::MatrixXd tile(const Eigen::MatrixXd& Q, const Eigen::MatrixXd& U) const;
  // self(X)(i) = k(X_i, X_i) (softmax: in log space, i.e. |X_i|^2 / tau).
  Eigen::VectorXd self(const Eigen::MatrixXd& X) const;
  // Packed psi, rows -> rows (FeatureMap::apply; not for softmax).
  Eigen::MatrixXd features(const Eigen::MatrixXd& X) const;

 private:
  std::string spec_;
  MapParams p_;
  FeatureMap map_ = FeatureMap::parse("linear", 1);
};

}  // namespace memcap::kata
