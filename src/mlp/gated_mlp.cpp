// Forward pass of the gated MLP and the bilinear feature map. Both products go through BLAS
// (Eigen with EIGEN_USE_BLAS); forward() works in row blocks so the hidden layer never exceeds
// kForwardBlock x m doubles.
#include "mlp/gated_mlp.hpp"

#include <sys/mman.h>

#include <cmath>
#include <cstdint>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::mlp {

namespace {
constexpr Eigen::Index kForwardBlock = 4096;
constexpr Eigen::Index kFeatureBlock = 256;
// Logistic sigmoid without overflow (SiLU gate x·sigmoid(x), as nn::Activation::silu).
double silu_sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}
}

void GatedMLP::validate() const {
  require(A.rows() >= 1 && A.cols() >= 1, "MLP has an empty first layer ({} x {})", A.rows(), A.cols());
  require(G.rows() == A.rows() && G.cols() == A.cols(), "MLP gate is {}x{}, expected {}x{}", G.rows(), G.cols(),
          A.rows(), A.cols());
  require(B.cols() == A.rows(), "MLP readout has {} columns for m = {} hidden units", B.cols(), A.rows());
  require(gate == "identity" || gate == "relu" || gate == "silu", "unknown MLP gate '{}': identity, relu or silu",
          gate);
  require(bias_up.size() == 0 || bias_up.size() == A.rows(), "bias_up has {} entries, m = {}", bias_up.size(),
          A.rows());
  require(bias_gate.size() == 0 || bias_gate.size() == A.rows(), "bias_gate has {} entries, m = {}",
          bias_gate.size(), A.rows());
  require(bias_out.size() == 0 || bias_out.size() == B.rows(), "bias_out has {} entries, d_c = {}",
          bias_out.size(), B.rows());
  require(A.allFinite() && G.allFinite() && B.allFinite(), "MLP weights contain NaN or Inf");
}

void advise_huge_pages(Eigen::MatrixXd& m) {
  constexpr std::uintptr_t kHuge = std::uintptr_t(1) << 21;
  const auto begin = reinterpret_cast<std::uintptr_t>(m.data());
  const std::uintptr_t end = begin + static_cast<std::uintptr_t>(m.size()) * sizeof(double);
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  if (end > first + kHuge) madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);  // advisory only
}

Eigen::MatrixXd GatedMLP::hidden(const Eigen::MatrixXd& X) const {
  require(X.cols() == A.cols(), "MLP input has {} columns, the MLP expects d = {}", X.cols(), A.cols());
  Eigen::MatrixXd up(X.rows(), A.rows()), gt(X.rows(), A.rows());
  up.noalias() = X * A.transpose();
  gt.noalias() = X * G.transpose();
  if (bias_up.size()) up.rowwise() += bias_up.transpose();
  if (bias_gate.size()) gt.rowwise() += bias_gate.transpose();
  if (gate == "relu") gt = gt.cwiseMax(0.0);
  if (gate == "silu") gt = gt.unaryExpr([](double x) { return x * silu_sigmoid(x); });
  up.array() *= gt.array();
  return up;
}

Eigen::MatrixXd GatedMLP::forward(const Eigen::MatrixXd& X) const {
  require(X.cols() == A.cols(), "MLP input has {} columns, the MLP expects d = {}", X.cols(), A.cols());
  Eigen::MatrixXd Y(X.rows(), B.rows());
  for (Eigen::Index r0 = 0; r0 < X.rows(); r0 += kForwardBlock) {
    const Eigen::Index n = std::min(kForwardBlock, X.rows() - r0);
    const Eigen::MatrixXd h = hidden(X.middleRows(r0, n));
    Y.middleRows(r0, n).noalias() = h * B.transpose();
  }
  if (bias_out.size()) Y.rowwise() += bias_out.transpose();
  return Y;
}

Eigen::MatrixXd BilinearFeatureMap::apply(const Eigen::MatrixXd& X) const {
  require(X.cols() == A0.cols(), "feature map input has {} columns, expected d = {}", X.cols(), A0.cols());
  // Row blocks of kFeatureBlock keys: both products of a block stay cache-sized and Φ is written
  // once (no full-size temporary; a full F x m GEMM output would be written and re-read).
  Eigen::MatrixXd phi(X.rows(), A0.rows());
  advise_huge_pages(phi);
  Eigen::MatrixXd t0, t1;
  for (Eigen::Index r0 = 0; r0 < X.rows(); r0 += kFeatureBlock) {
    const Eigen::Index n = std::min(kFeatureBlock, X.rows() - r0);
    t0.resize(n, A0.rows());
    t1.resize(n, A1.rows());
    t0.noalias() = X.middleRows(r0, n) * A0.transpose();
    t1.noalias() = X.middleRows(r0, n) * A1.transpose();
    phi.middleRows(r0, n) = scale * t0.cwiseProduct(t1);
  }
  return phi;
}

BilinearFeatureMap BilinearFeatureMap::random(std::int64_t m, std::int64_t d, std::uint64_t seed, bool scaled) {
  require(m >= 1 && d >= 1, "feature map needs m >= 1 and d >= 1 (got m = {}, d = {})", m, d);
  BilinearFeatureMap f;
  f.A0 = rng::normal_matrix(m, d, seed, rng::kFeatureA0);
  f.A1 = rng::normal_matrix(m, d, seed, rng::kFeatureA1);
  f.scale = scaled ? 1.0 / std::sqrt(static_cast<double>(m)) : 1.0;
  return f;
}

GatedMLP BilinearFeatureMap::as_mlp(const Eigen::MatrixXd& W) const {
  require(W.cols() == A0.rows(), "readout has {} columns for m = {} features", W.cols(), A0.rows());
  GatedMLP mlp;
  const double r = std::sqrt(scale);
  mlp.A = r * A0;
  mlp.G = r * A1;
  mlp.B = W;
  mlp.gate = "identity";
  mlp.param_count = 3 * A0.rows() * A0.cols();
  return mlp;
}

}  // namespace memcap::mlp
