// Closed-form coefficients and packed features for the capacity protocol (spec §2.1-2.7).
// Every kernel is built from raw-key GEMMs (Q U^T or its g x g blocks) plus elementwise work,
// so a row tile of A costs O(tile * K * d) and never needs psi.
#include "kata/capacity_kernel.hpp"

#include <cmath>

#include "core/error.hpp"
#include "kata/feature_map.hpp"

namespace memcap::kata {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// Sum over blocks a of f(Q_a U_a^T), elementwise.
MatrixXd block_gram(const MatrixXd& Q, const MatrixXd& U, int a, int b, int m) {
  return Q.middleCols(a * m, m) * U.middleCols(b * m, m).transpose();
}

}  // namespace

CapacityKernel CapacityKernel::parse(const std::string& spec, int d) {
  // One parser for map spec strings: kata::FeatureMap (feature_map.hpp). This only converts.
  require(d >= 1, "d_head must be >= 1 (got {})", d);
  const FeatureMap fm = FeatureMap::parse(spec, d);
  CapacityKernel k;
  k.spec_ = spec;
  k.map_ = fm;
  MapParams& p = k.p_;
  p = fm.params();
  switch (fm.kind()) {
    case MapKind::EvenDegree:
      require(fm.degree() == 2,
              "map '{}': kata capacity supports the even-degree maps up to deg2 (deg{} has a state of "
              "C(d+{},{}) x d_v); use deg2, m1 or a softmax reference",
              spec, fm.degree(), fm.degree() - 1, fm.degree());
      p.kind = MapKind::BlockPsd;  // (q.k)^2 = M_1 at eps = 0
      p.g = 1;
      p.m = d;
      p.eps = 0.0;
      break;
    case MapKind::Softmax:
      require(p.tau > 0 && std::isfinite(p.tau), "map '{}': tau must be > 0", spec);
      break;
    default: break;
  }
  MEMCAP_ASSERT(p.g >= 1 && d % p.g == 0, "feature map parser accepted g not dividing d");
  return k;
}

std::int64_t CapacityKernel::feature_dim() const { return is_softmax() ? 0 : map_.feature_dim(); }

Eigen::MatrixXd CapacityKernel::tile(const MatrixXd& Q, const MatrixXd& U) const {
  MEMCAP_ASSERT(Q.cols() == p_.d && U.cols() == p_.d, "capacity kernel: width mismatch");
  const int g = p_.g, m = p_.m;
  const double eps = p_.eps;
  switch (p_.kind) {
    case MapKind::EvenDegree: break;  // parse() runs deg2 as M_1 (BlockPsd); higher degrees are refused there
    case MapKind::Linear: return Q * U.transpose();
    case MapKind::Orthant:
    case MapKind::Lorentz: return features(Q) * features(U).transpose();
    case MapKind::LorentzRay: {
      const VectorXd qi = Q.rowwise().norm().cwiseMax(1e-300).cwiseInverse();
      const VectorXd ui = U.rowwise().norm().cwiseMax(1e-300).cwiseInverse();
      MatrixXd A = qi.asDiagonal() * (Q * U.transpose()) * ui.asDiagonal();
      return ((A.array() + 1.0) * 0.5).matrix();
    }
    case MapKind::LorentzLift: {
      MatrixXd A = Q * U.transpose();
      A.noalias() += Q.rowwise().norm() * U.rowwise().norm().transpose();
      return A;
    }
    case MapKind::BlockPsd: {
      MatrixXd A = MatrixXd::Zero(Q.rows(), U.rows());
      for (int a = 0; a < g; ++a) {
        const MatrixXd G = block_gram(Q, U, a, a, m);
        A.array() += G.array().square();
        if (eps != 0.0) {
          const VectorXd qn = Q.middleCols(a * m, m).rowwise().squaredNorm();
          const VectorXd un = U.middleCols(a * m, m).rowwise().squaredNorm();
          A.colwise() += eps * qn;
          A.rowwise() += eps * un.transpose();
          A.array() += eps * eps * m;
        }
      }
      return A;
    }
    case MapKind::SumPsd: {
      MatrixXd A = MatrixXd::Zero(Q.rows(), U.rows());
      for (int a = 0; a < g; ++a)
        for (int b = 0; b < g; ++b) A.array() += block_gram(Q, U, a, b, m).array().square();
      A *= p_.scale * p_.scale;
      if (eps != 0.0) {
        A.colwise() += eps * p_.scale * Q.rowwise().squaredNorm();
        A.rowwise() += eps * p_.scale * U.rowwise().squaredNorm().transpose();
        A.array() += eps * eps * m;
      }
      return A;
    }
    case MapKind::Softmax: {
      const double umax = U.rows() ? U.rowwise().norm().maxCoeff() : 0.0;
      MatrixXd A = Q * U.transpose();
      const VectorXd shift = Q.rowwise().norm() * umax;
      A.colwise() -= shift;
      return (A.array() / p_.tau).exp().matrix();
    }
  }
  return {};
}

Eigen::VectorXd CapacityKernel::self(const MatrixXd& X) const {
  VectorXd out(X.rows());
  if (p_.kind == MapKind::Softmax) return X.rowwise().squaredNorm() / p_.tau;
  for (Eigen::Index i = 0; i < X.rows(); ++i) out(i) = tile(X.row(i), X.row(i))(0, 0);
  return out;
}

Eigen::MatrixXd CapacityKernel::features(const MatrixXd& X) const {
  require(!is_softmax(), "softmax has no finite feature map; its state is the KV cache");
  return map_.apply(X);
}

}  // namespace memcap::kata
