// Sketched-K2, exact-K2, whitened and NTK constructions (spec §2.1, §2.2, §2.3, §2.5) and the
// build_mlp dispatcher. Each returns a GatedMLP whose forward pass is the construction's memory.
#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "mlp/constructions.hpp"
#include "mlp/gd_train.hpp"

namespace memcap::mlp {

namespace {
constexpr Eigen::Index kNtkBlock = 2048;  // rows of keys per block of the NTK up-projection
}

std::int64_t default_width(MethodKind kind, std::int64_t d) {
  return kind == MethodKind::exact_k2 ? d * (d + 1) / 2 : 4 * d;  // gd: 4d as well
}

std::int64_t param_count(MethodKind kind, std::int64_t m, std::int64_t d) {
  return kind == MethodKind::ntk ? 3 * m * d + 2 * m + d : 3 * m * d;  // gd: 3md without biases
}

std::int64_t param_count(const MethodSpec& method, std::int64_t m, std::int64_t d) {
  return method.kind == MethodKind::gd ? gd_param_count(m, d, method.gd.bias) : param_count(method.kind, m, d);
}

BilinearFeatureMap exact_k2_feature_map(std::int64_t d) {
  require(d >= 1, "exact-K2 needs d >= 1 (got {})", d);
  const std::int64_t m = d * (d + 1) / 2;
  BilinearFeatureMap f;
  f.A0 = Eigen::MatrixXd::Zero(m, d);
  f.A1 = Eigen::MatrixXd::Zero(m, d);
  f.scale = 1.0;
  const double w_off = std::pow(2.0, 0.25);  // (w²)² = 2: feature √2 x_a x_b for a < b
  std::int64_t r = 0;
  for (std::int64_t a = 0; a < d; ++a)
    for (std::int64_t b = a; b < d; ++b, ++r) {
      const double w = a == b ? 1.0 : w_off;
      f.A0(r, a) = w;
      f.A1(r, b) = w;
    }
  return f;
}

Eigen::MatrixXd exact_k2_gram(const Eigen::MatrixXd& X, const Eigen::MatrixXd& Z) {
  require(X.cols() == Z.cols(), "exact-K2 Gram: {} vs {} columns", X.cols(), Z.cols());
  Eigen::MatrixXd g(X.rows(), Z.rows());
  g.noalias() = X * Z.transpose();
  g = g.array().square().matrix();
  return g;
}

GatedMLP build_sketched(const FactSet& fs, std::int64_t m, std::uint64_t seed) {
  const auto fmap = BilinearFeatureMap::random(m, fs.d(), seed, true);
  const Eigen::MatrixXd phi = fmap.apply(fs.keys);
  return fmap.as_mlp(hebbian_readout(phi, fs.targets()));
}

GatedMLP build_exact_k2(const FactSet& fs) {
  const auto fmap = exact_k2_feature_map(fs.d());
  const Eigen::MatrixXd phi = fmap.apply(fs.keys);
  return fmap.as_mlp(hebbian_readout(phi, fs.targets()));
}

GatedMLP build_whitened(const FactSet& fs, std::int64_t m, std::uint64_t seed, double ridge) {
  const auto fmap = BilinearFeatureMap::random(m, fs.d(), seed, true);
  const Eigen::MatrixXd phi = fmap.apply(fs.keys);
  auto ro = whitened_readout(phi, fs.targets(), ridge);
  GatedMLP mlp = fmap.as_mlp(ro.W);
  mlp.solver_note = fmt::format("{} {}", ro.dual ? "dual" : "primal", ro.solver);
  return mlp;
}

GatedMLP build_ntk(const FactSet& fs, std::int64_t m, std::uint64_t seed) {
  const std::int64_t d = fs.d();
  require(m >= 1, "NTK width must be >= 1 (got {})", m);
  GatedMLP mlp;
  mlp.G = rng::normal_matrix(m, d, seed, rng::kNtkGate);        // W_gate, unscaled
  mlp.B = rng::normal_matrix(d, m, seed, rng::kNtkProj);        // P, unit columns
  for (Eigen::Index j = 0; j < mlp.B.cols(); ++j) mlp.B.col(j) /= std::max(mlp.B.col(j).norm(), 1e-30);
  // W_up = (1/m) (H ⊙ (C_f P))ᵀ K,  H = He1(K W_gateᵀ) = K W_gateᵀ, accumulated over key blocks.
  const Eigen::MatrixXd C = fs.targets();
  mlp.A = Eigen::MatrixXd::Zero(m, d);
  Eigen::MatrixXd H, CP;
  for (Eigen::Index r0 = 0; r0 < fs.F(); r0 += kNtkBlock) {
    const Eigen::Index n = std::min(kNtkBlock, fs.F() - r0);
    H.resize(n, m);
    CP.resize(n, m);
    H.noalias() = fs.keys.middleRows(r0, n) * mlp.G.transpose();
    CP.noalias() = C.middleRows(r0, n) * mlp.B;
    hadamard_inplace(H, CP);
    mlp.A.noalias() += (1.0 / static_cast<double>(m)) * H.transpose() * fs.keys.middleRows(r0, n);
  }
  mlp.gate = "relu";
  mlp.bias_up = Eigen::VectorXd::Zero(m);
  mlp.bias_gate = Eigen::VectorXd::Zero(m);
  mlp.bias_out = Eigen::VectorXd::Zero(d);
  mlp.param_count = param_count(MethodKind::ntk, m, d);
  return mlp;
}

GatedMLP build_mlp(const MethodSpec& method, const FactSet& fs, std::int64_t width, std::uint64_t seed) {
  fs.validate();
  const std::int64_t d = fs.d();
  require(width >= 0, "--width must be >= 1 (got {})", width);
  const std::int64_t k2 = d * (d + 1) / 2;
  if (method.kind == MethodKind::exact_k2)
    require(width == 0 || width == k2,
            "hebbian:exact-k2 has a fixed width d(d+1)/2 = {} for d = {}; leave --width out (got {})", k2, d,
            width);
  const std::int64_t m = width == 0 ? default_width(method.kind, d) : width;
  GatedMLP mlp;
  switch (method.kind) {
    case MethodKind::sketched: mlp = build_sketched(fs, m, seed); break;
    case MethodKind::exact_k2: mlp = build_exact_k2(fs); break;
    case MethodKind::whitened: mlp = build_whitened(fs, m, seed, method.ridge); break;
    case MethodKind::data_dependent: mlp = build_data_dependent(fs, m, seed, method); break;
    case MethodKind::ntk: mlp = build_ntk(fs, m, seed); break;
    case MethodKind::gd: mlp = train_gd_cpu(fs, m, seed, method.gd).mlp; break;
  }
  mlp.method = method.text;
  mlp.param_count = param_count(method, mlp.width(), d);
  if (!mlp.A.allFinite() || !mlp.G.allFinite() || !mlp.B.allFinite())
    throw NumericError(fmt::format("{} construction produced NaN/Inf weights (F = {}, d = {}, m = {})",
                                   method.text, fs.F(), d, m));
  return mlp;
}

}  // namespace memcap::mlp
