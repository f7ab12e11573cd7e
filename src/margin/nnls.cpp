// Lawson–Hanson NNLS: grow the passive set P by the most positive dual coordinate, solve the
// unconstrained LS on P (column-pivoted QR), and step back towards feasibility when a passive
// coordinate would go non-positive.
#include "margin/nnls.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace memcap::margin {

namespace {
// Least squares on the columns in `passive`; returns the full-length vector (zeros elsewhere).
Eigen::VectorXd solve_passive(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, const std::vector<bool>& passive) {
  std::vector<Eigen::Index> cols;
  for (Eigen::Index j = 0; j < A.cols(); ++j)
    if (passive[static_cast<std::size_t>(j)]) cols.push_back(j);
  Eigen::VectorXd z = Eigen::VectorXd::Zero(A.cols());
  if (cols.empty()) return z;
  Eigen::MatrixXd Ap(A.rows(), static_cast<Eigen::Index>(cols.size()));
  for (std::size_t c = 0; c < cols.size(); ++c) Ap.col(static_cast<Eigen::Index>(c)) = A.col(cols[c]);
  const Eigen::VectorXd zp = Ap.colPivHouseholderQr().solve(b);
  for (std::size_t c = 0; c < cols.size(); ++c) z[cols[c]] = zp[static_cast<Eigen::Index>(c)];
  return z;
}
}  // namespace

NnlsResult nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double tol, int max_iter) {
  const Eigen::Index n = A.rows(), k = A.cols();
  require(n >= 1 && k >= 1, "nnls needs a non-empty matrix (got {}×{})", n, k);
  require(b.size() == n, "nnls: right-hand side has {} entries, matrix has {} rows", b.size(), n);
  require(A.allFinite() && b.allFinite(), "nnls: matrix or right-hand side contains NaN/Inf");
  if (tol <= 0) tol = 10.0 * std::numeric_limits<double>::epsilon() * A.cwiseAbs().colwise().sum().maxCoeff() *
                      static_cast<double>(std::max(n, k));
  if (max_iter <= 0) max_iter = static_cast<int>(3 * k + 10);

  NnlsResult res;
  Eigen::VectorXd x = Eigen::VectorXd::Zero(k);
  std::vector<bool> passive(static_cast<std::size_t>(k), false);
  Eigen::VectorXd w = A.transpose() * (b - A * x);
  int it = 0;
  while (true) {
    // Most positive dual coordinate among the active (zero) set.
    Eigen::Index best = -1;
    double wmax = tol;
    for (Eigen::Index j = 0; j < k; ++j)
      if (!passive[static_cast<std::size_t>(j)] && w[j] > wmax) {
        wmax = w[j];
        best = j;
      }
    if (best < 0) break;
    if (++it > max_iter) {
      res.converged = false;
      break;
    }
    passive[static_cast<std::size_t>(best)] = true;
    Eigen::VectorXd z = solve_passive(A, b, passive);
    // Inner loop: restore feasibility.
    int inner = 0;
    while (true) {
      bool feasible = true;
      for (Eigen::Index j = 0; j < k; ++j)
        if (passive[static_cast<std::size_t>(j)] && z[j] <= 0) feasible = false;
      if (feasible) break;
      if (++inner > 3 * k + 10) {
        res.converged = false;
        break;
      }
      double alpha = 1.0;
      for (Eigen::Index j = 0; j < k; ++j)
        if (passive[static_cast<std::size_t>(j)] && z[j] <= 0) alpha = std::min(alpha, x[j] / (x[j] - z[j]));
      x += alpha * (z - x);
      for (Eigen::Index j = 0; j < k; ++j)
        if (passive[static_cast<std::size_t>(j)] && x[j] <= tol * 1e-3) {
          passive[static_cast<std::size_t>(j)] = false;
          x[j] = 0;
        }
      z = solve_passive(A, b, passive);
    }
    x = z;
    for (Eigen::Index j = 0; j < k; ++j)
      if (!passive[static_cast<std::size_t>(j)]) x[j] = 0;
    w = A.transpose() * (b - A * x);
    if (!res.converged) break;
  }
  res.x = x.cwiseMax(0.0);
  res.residual_norm = (A * res.x - b).norm();
  res.iterations = it;
  return res;
}

}  // namespace memcap::margin
