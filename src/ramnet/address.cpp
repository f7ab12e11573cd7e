#include "ramnet/address.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace memcap::ramnet {

std::int64_t address_count(int dp, int U) {
  require(dp >= 2, "--dp {} must be >= 2 (codes per factor)", dp);
  require(U >= 1, "--U {} must be >= 1 (number of factors)", U);
  const std::int64_t limit = std::int64_t(1) << 62;
  std::int64_t n = 1;
  for (int u = 0; u < U; ++u) {
    require(n <= limit / dp, "dp^U = {}^{} does not fit in a 64-bit address (needs {:.3g} slots); use fewer factors",
            dp, U, std::pow(static_cast<double>(dp), U));
    n *= dp;
  }
  return n;
}

void validate(const Params& p) {
  address_count(p.dp, p.U);
  require(std::isfinite(p.beta_r) && p.beta_r > 0, "--beta-r {} must be a finite number > 0", p.beta_r);
  require(std::isfinite(p.beta_w) && p.beta_w > 0, "--beta-w {} must be a finite number > 0", p.beta_w);
}

void require_dense(const Params& p, double bytes_per_slot, const std::string& what) {
  const double slots = std::pow(static_cast<double>(p.dp), p.U);
  require(slots <= static_cast<double>(kMaxDenseAddresses),
          "{} stores all dp^U = {}^{} = {:.0f} slots densely ({:.3g} GB); at most {} slots are allowed "
          "(use fewer factors or a smaller --dp)",
          what, p.dp, p.U, slots, slots * bytes_per_slot / 1e9, kMaxDenseAddresses);
}

std::int64_t flat_index(std::span<const int> digits, int dp) {
  std::int64_t i = 0, scale = 1;
  for (int d : digits) {
    i += d * scale;
    scale *= dp;
  }
  return i;
}

void digits_of(std::int64_t flat, int dp, int U, std::span<int> out) {
  for (int u = 0; u < U; ++u) {
    out[u] = static_cast<int>(flat % dp);
    flat /= dp;
  }
}

Codebook circular_codebook(int dp) {
  Codebook C(2, dp);
  for (int j = 0; j < dp; ++j) {
    const double a = 2.0 * std::numbers::pi * j / dp;
    C(0, j) = std::cos(a);
    C(1, j) = std::sin(a);
  }
  return C;
}

double log_Z(const Codebook& C, double x1, double x2) {
  const int dp = static_cast<int>(C.cols());
  double mx = -INFINITY;
  for (int j = 0; j < dp; ++j) mx = std::max(mx, C(0, j) * x1 + C(1, j) * x2);
  double s = 0;
  for (int j = 0; j < dp; ++j) s += std::exp(C(0, j) * x1 + C(1, j) * x2 - mx);
  return mx + std::log(s / dp);
}

void factor_log_probs(const Codebook& C, double b, double x1, double x2, double* out) {
  const int dp = static_cast<int>(C.cols());
  double mx = -INFINITY;
  for (int j = 0; j < dp; ++j) {
    out[j] = b * (C(0, j) * x1 + C(1, j) * x2);
    mx = std::max(mx, out[j]);
  }
  double s = 0;
  for (int j = 0; j < dp; ++j) s += std::exp(out[j] - mx);
  const double lse = mx + std::log(s);
  for (int j = 0; j < dp; ++j) out[j] -= lse;
}

Eigen::MatrixXd factor_table(const Codebook& C, double b, const double* x, int U) {
  const int dp = static_cast<int>(C.cols());
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> t(U, dp);
  for (int u = 0; u < U; ++u) factor_log_probs(C, b, x[2 * u], x[2 * u + 1], t.row(u).data());
  return t;
}

double address_log_prob(const Eigen::MatrixXd& table, std::int64_t flat) {
  const int U = static_cast<int>(table.rows()), dp = static_cast<int>(table.cols());
  double s = 0;
  for (int u = 0; u < U; ++u) {
    s += table(u, static_cast<int>(flat % dp));
    flat /= dp;
  }
  return s;
}

Eigen::VectorXd dense_distribution(const Eigen::MatrixXd& table) {
  const int U = static_cast<int>(table.rows()), dp = static_cast<int>(table.cols());
  const std::int64_t n = address_count(dp, U);
  Eigen::VectorXd r(n);
  // Build the tensor product factor by factor: slot i's digit u has stride dp^u.
  r(0) = 0.0;
  std::int64_t len = 1;
  for (int u = 0; u < U; ++u) {
    for (int j = dp - 1; j >= 0; --j)
      for (std::int64_t i = 0; i < len; ++i) r(j * len + i) = r(i) + table(u, j);
    len *= dp;
  }
  return r.array().exp();
}

double log_kappa_factor(const Codebook& C, double beta_r, double beta_w, const double* q2, const double* k2) {
  const double a1 = beta_r * q2[0], a2 = beta_r * q2[1], b1 = beta_w * k2[0], b2 = beta_w * k2[1];
  return log_Z(C, a1 + b1, a2 + b2) - log_Z(C, a1, a2) - log_Z(C, b1, b2);
}

double log_kappa_A(const Params& p, const Codebook& C, const double* q, const double* k) {
  double s = 0;
  for (int u = 0; u < p.U; ++u) s += log_kappa_factor(C, p.beta_r, p.beta_w, q + 2 * u, k + 2 * u);
  return s;
}

}  // namespace memcap::ramnet

namespace memcap::ramnet {
Eigen::MatrixXd log_kappa_matrix(const Params& p, const Codebook& C, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K) {
  require(Q.cols() == 2 * p.U && K.cols() == 2 * p.U, "queries and keys must have 2U = {} columns (got {} and {})",
          2 * p.U, Q.cols(), K.cols());
  const int dp = p.dp;
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(Q.rows(), K.rows());
  Eigen::MatrixXd Pq(Q.rows(), dp), Pk(K.rows(), dp);
  std::vector<double> row(dp);
  for (int u = 0; u < p.U; ++u) {
    for (Eigen::Index i = 0; i < Q.rows(); ++i) {
      factor_log_probs(C, p.beta_r, Q(i, 2 * u), Q(i, 2 * u + 1), row.data());
      for (int j = 0; j < dp; ++j) Pq(i, j) = std::exp(row[j]);
    }
    for (Eigen::Index s = 0; s < K.rows(); ++s) {
      factor_log_probs(C, p.beta_w, K(s, 2 * u), K(s, 2 * u + 1), row.data());
      for (int j = 0; j < dp; ++j) Pk(s, j) = std::exp(row[j]);
    }
    L.array() += ((Pq * Pk.transpose()).array() * dp).log();
  }
  return L;
}
}  // namespace memcap::ramnet
