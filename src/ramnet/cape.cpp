// CAPE shift vs RoPE rotation of address distributions (spec ramnet.md §1.8, A.6, E9). See cape.hpp.
#include "ramnet/cape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace memcap::ramnet {

std::vector<double> cape_frequencies(int dp, int U) {
  require(dp >= 2 && U >= 1, "cape_frequencies: dp {} must be >= 2 and U {} >= 1", dp, U);
  std::vector<double> nu(U);
  double period = dp;
  for (int u = 0; u < U; ++u) {
    nu[u] = 2.0 * std::numbers::pi / period;
    period *= dp;
  }
  return nu;
}

std::vector<double> rope_rotate(const double* x, int dp, int U, double t) {
  require(dp >= 2 && U >= 1, "rope_rotate: dp {} must be >= 2 and U {} >= 1", dp, U);
  std::vector<double> y(2 * U);
  double period = dp;  // dp^{u+1}: block u's rotation ν_u t = 2π t/dp^{u+1} has this period in t
  for (int u = 0; u < U; ++u, period *= dp) {
    // Reduce t modulo the period first (fmod is exact): ν_u t itself loses the angle's low bits for large t
    // (t = 1e12 left TV 4e-5 at shifts where CAPE and RoPE agree exactly).
    const double a = 2.0 * std::numbers::pi * (std::fmod(t, period) / period);
    const double c = std::cos(a), s = std::sin(a);
    y[2 * u] = c * x[2 * u] - s * x[2 * u + 1];
    y[2 * u + 1] = s * x[2 * u] + c * x[2 * u + 1];
  }
  return y;
}

Eigen::VectorXd cape_shift(const Eigen::VectorXd& r, std::int64_t t) {
  const std::int64_t n = r.size();
  require(n > 0, "cape_shift: empty distribution");
  const std::int64_t s = ((t % n) + n) % n;
  Eigen::VectorXd out(n);
  for (std::int64_t i = 0; i < n; ++i) out(i) = r((i - s + n) % n);
  return out;
}

double total_variation(const Eigen::VectorXd& p, const Eigen::VectorXd& q) {
  require(p.size() == q.size(), "total_variation: sizes {} and {} differ", p.size(), q.size());
  return 0.5 * (p - q).cwiseAbs().sum();
}

double js_divergence(const Eigen::VectorXd& p, const Eigen::VectorXd& q) {
  require(p.size() == q.size(), "js_divergence: sizes {} and {} differ", p.size(), q.size());
  double s = 0;
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    const double m = 0.5 * (p(i) + q(i));
    if (p(i) > 0) s += 0.5 * p(i) * std::log(p(i) / m);
    if (q(i) > 0) s += 0.5 * q(i) * std::log(q(i) / m);
  }
  return std::max(0.0, s);
}

double total_correlation(const Eigen::VectorXd& r, int dp, int U) {
  const std::int64_t n = address_count(dp, U);
  require(r.size() == n, "total_correlation: {} entries, dp^U = {}", r.size(), n);
  Eigen::MatrixXd marg = Eigen::MatrixXd::Zero(U, dp);
  double h = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = r(i);
    if (v > 0) h -= v * std::log(v);
    std::int64_t f = i;
    for (int u = 0; u < U; ++u) {
      marg(u, static_cast<int>(f % dp)) += v;
      f /= dp;
    }
  }
  double hm = 0;
  for (int u = 0; u < U; ++u)
    for (int j = 0; j < dp; ++j)
      if (marg(u, j) > 0) hm -= marg(u, j) * std::log(marg(u, j));
  return std::max(0.0, hm - h);
}

double factor_logit(const double* x, int dp, int u, double beta, std::int64_t i) {
  std::int64_t stride = 1;
  for (int v = 0; v < u; ++v) stride *= dp;
  const double digit = static_cast<double>((i / stride) % dp);
  const double rho = std::hypot(x[2 * u], x[2 * u + 1]), arg = std::atan2(x[2 * u + 1], x[2 * u]);
  return beta * rho * std::cos(2.0 * std::numbers::pi * digit / dp - arg);
}

CapeRope compare_cape_rope(int dp, int U, double beta, const double* x, std::int64_t t) {
  require(std::isfinite(beta) && beta > 0, "beta {} must be a finite number > 0", beta);
  const std::int64_t n = address_count(dp, U);
  const Codebook C = circular_codebook(dp);
  CapeRope out;
  out.cape = cape_shift(dense_distribution(factor_table(C, beta, x, U)), t);
  const auto y = rope_rotate(x, dp, U, static_cast<double>(t));
  out.rope = dense_distribution(factor_table(C, beta, y.data(), U));
  out.tv = total_variation(out.cape, out.rope);
  out.js = js_divergence(out.cape, out.rope);
  out.tc_cape = total_correlation(out.cape, dp, U);
  out.tc_rope = total_correlation(out.rope, dp, U);
  out.logit_gap.assign(U, 0.0);
  const std::int64_t s = ((t % n) + n) % n;
  for (int u = 0; u < U; ++u)
    for (std::int64_t i = 0; i < n; ++i) {
      const double cape = factor_logit(x, dp, u, beta, (i - s + n) % n);
      const double rope = factor_logit(y.data(), dp, u, beta, i);
      out.logit_gap[u] = std::max(out.logit_gap[u], std::fabs(cape - rope));
    }
  return out;
}

}  // namespace memcap::ramnet
