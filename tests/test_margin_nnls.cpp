// Lawson–Hanson NNLS against exhaustive enumeration of active sets (exact for small k: the NNLS
// optimum is the best feasible unconstrained LS over some subset of columns) and the KKT conditions.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "margin/nnls.hpp"

using namespace memcap;
using namespace memcap::margin;

namespace {
double brute_force_nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b) {
  const int k = static_cast<int>(A.cols());
  double best = b.squaredNorm();  // x = 0
  for (int mask = 1; mask < (1 << k); ++mask) {
    std::vector<int> cols;
    for (int j = 0; j < k; ++j)
      if (mask & (1 << j)) cols.push_back(j);
    Eigen::MatrixXd Ap(A.rows(), static_cast<Eigen::Index>(cols.size()));
    for (std::size_t c = 0; c < cols.size(); ++c) Ap.col(static_cast<Eigen::Index>(c)) = A.col(cols[c]);
    const Eigen::VectorXd z = Ap.colPivHouseholderQr().solve(b);
    if ((z.array() >= 0).all()) best = std::min(best, (Ap * z - b).squaredNorm());
  }
  return best;
}
}  // namespace

TEST_CASE("nnls matches exhaustive active-set enumeration and satisfies KKT") {
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const int n = 6 + static_cast<int>(seed % 7), k = 1 + static_cast<int>(seed % 5);
    const Eigen::MatrixXd A = rng::normal_matrix(n, k, seed, rng::kUser);
    const Eigen::VectorXd b = rng::normal_matrix(n, 1, seed, rng::kUser + 1).col(0);
    const NnlsResult r = nnls(A, b);
    CAPTURE(seed);
    CHECK(r.converged);
    CHECK((r.x.array() >= 0).all());
    // Optimal objective (tolerance: QR round-off on O(1) data).
    CHECK(r.residual_norm * r.residual_norm == doctest::Approx(brute_force_nnls(A, b)).epsilon(1e-9));
    // KKT: gradient w = Aᵀ(b − Ax) ≤ 0 on the zero set, = 0 on the positive set.
    const Eigen::VectorXd w = A.transpose() * (b - A * r.x);
    for (int j = 0; j < k; ++j) {
      if (r.x[j] > 0) CHECK(std::abs(w[j]) < 1e-9);
      else CHECK(w[j] < 1e-9);
    }
  }
}

TEST_CASE("nnls known values") {
  // Unconstrained solution already non-negative: plain least squares.
  Eigen::MatrixXd A(3, 2);
  A << 1, 0, 0, 1, 1, 1;
  Eigen::VectorXd b(3);
  b << 1, 2, 3;
  NnlsResult r = nnls(A, b);
  CHECK(r.x[0] == doctest::Approx(1.0));
  CHECK(r.x[1] == doctest::Approx(2.0));
  CHECK(r.residual_norm == doctest::Approx(0.0).epsilon(1e-12));
  // Negative target on an identity design clips to zero.
  Eigen::MatrixXd I = Eigen::MatrixXd::Identity(2, 2);
  Eigen::VectorXd c(2);
  c << -1, 3;
  r = nnls(I, c);
  CHECK(r.x[0] == 0.0);
  CHECK(r.x[1] == doctest::Approx(3.0));
  CHECK(r.residual_norm == doctest::Approx(1.0));
}

TEST_CASE("nnls rejects bad input") {
  Eigen::MatrixXd A = Eigen::MatrixXd::Ones(3, 2);
  CHECK_THROWS_AS(nnls(A, Eigen::VectorXd::Ones(2)), UserError);
  A(0, 0) = std::nan("");
  CHECK_THROWS_AS(nnls(A, Eigen::VectorXd::Ones(3)), UserError);
}
