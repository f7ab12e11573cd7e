// pSNR ladder (Welch-scale, §3.9 and C.7–C.8), random-key estimates and Monte-Carlo medians.
// Softmax is handled in log space throughout: exp(2(1−μ⋆)/τ) overflows double for τ ≲ 2.8e-3.
// The Monte Carlo runs query blocks in parallel with fixed boundaries (thread-count independent).
#include "kata/psnr.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numbers>
#include <vector>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::kata {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_pT(std::int64_t p, double T, const char* what) {
  require(p >= 2, "{}: p = {} makes the Welch-scale formulas vacuous (ε⋆ = 1 for every T); use p >= 2", what, p);
  require(std::isfinite(T) && T >= 1, "{}: number of keys T = {} must be >= 1", what, T);
}
void check_tau(double tau, const char* what) {
  require(std::isfinite(tau) && tau > 0, "{}: temperature τ = {} must be a positive finite number", what, tau);
}
double safe_exp(double l) { return l > 709.0 ? kInf : std::exp(l); }
}  // namespace

double psnr_from_coefficients(const Eigen::VectorXd& a, std::int64_t star) {
  require(star >= 0 && star < a.size(), "pSNR: matched index {} is outside 0..{}", star, a.size() - 1);
  require(a.allFinite(), "pSNR: the attention coefficients contain NaN or Inf");
  const double num = a(star) * a(star);
  const double den = a.squaredNorm() - num;
  if (den <= 0) return kInf;
  return num / den;
}

double welch_eps_star(std::int64_t p, double T) {
  check_pT(p, T, "Welch floor ε⋆");
  if (T <= static_cast<double>(p)) return 0.0;
  return (T - static_cast<double>(p)) / (static_cast<double>(p) * (T - 1.0));
}

double psnr_degree(std::int64_t p, double T, int k) {
  require(k >= 1, "pSNR degree k = {} must be >= 1", k);
  const double e = welch_eps_star(p, T);
  if (T <= 1 || e == 0) return kInf;
  return safe_exp(-std::log(T - 1.0) - k * std::log(e));
}
double psnr_linear(std::int64_t p, double T) { return psnr_degree(p, T, 1); }
double psnr_psd(std::int64_t p, double T) { return psnr_degree(p, T, 2); }

double psnr_lorentz(std::int64_t p, double T) {
  const double mu = std::sqrt(welch_eps_star(p, T));
  if (T <= 1) return kInf;
  return 4.0 / ((T - 1.0) * (1.0 + mu) * (1.0 + mu));
}

double log_psnr_softmax(std::int64_t p, double T, double tau) {
  check_tau(tau, "softmax pSNR");
  const double mu = std::sqrt(welch_eps_star(p, T));
  if (T <= 1) return kInf;
  return 2.0 * (1.0 - mu) / tau - std::log(T - 1.0);
}
double psnr_softmax(std::int64_t p, double T, double tau) { return safe_exp(log_psnr_softmax(p, T, tau)); }

double psd_threshold(std::int64_t p) {
  check_pT(p, 1, "PSD threshold");
  const double a = static_cast<double>(p) * p + 2.0 * p;
  return 0.5 * (a + std::sqrt(a * a - 8.0 * static_cast<double>(p) * p));
}
double linear_threshold(std::int64_t p) {
  check_pT(p, 1, "linear threshold");
  return 2.0 * static_cast<double>(p);
}
double softmax_threshold_approx(std::int64_t p, double tau) {
  check_pT(p, 1, "softmax threshold");
  check_tau(tau, "softmax threshold");
  return 1.0 + safe_exp(2.0 * (1.0 - 1.0 / std::sqrt(static_cast<double>(p))) / tau);
}

std::string Rung::source() const { return (name == "linear" || name == "psd" || name == "softmax") ? "paper" : "derived"; }
std::string Rung::label() const {
  if (name == "softmax") return fmt::format("softmax(tau={:g})", tau);
  return name;
}

Rung parse_rung(const std::string& name, double tau) {
  Rung r;
  r.name = name;
  if (name == "linear") r.degree = 1;
  else if (name == "psd") r.degree = 2;
  else if (name == "lorentz") r.degree = 1;
  else if (name == "softmax") {
    check_tau(tau, "softmax rung");
    r.tau = tau;
  } else if (name.rfind("deg", 0) == 0 && name.size() > 3 &&
             std::all_of(name.begin() + 3, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    require(name.size() < 7 && std::stoi(name.substr(3)) >= 1 && std::stoi(name.substr(3)) <= kMaxRungDegree,
            "pSNR rung '{}': the degree k of deg<k> must be an integer in 1..{}", name, kMaxRungDegree);
    r.degree = std::stoi(name.substr(3));
  } else {
    throw UserError(fmt::format("unknown pSNR rung '{}'; use linear, lorentz, psd, deg<k>, softmax", name));
  }
  return r;
}

double rung_log_psnr(const Rung& r, std::int64_t p, double T) {
  if (r.name == "softmax") return log_psnr_softmax(p, T, r.tau);
  if (r.name == "lorentz") return std::log(psnr_lorentz(p, T));
  const double e = welch_eps_star(p, T);
  if (T <= 1 || e == 0) return kInf;
  return -std::log(T - 1.0) - r.degree * std::log(e);
}

double rung_psnr(const Rung& r, std::int64_t p, double T) { return safe_exp(rung_log_psnr(r, p, T)); }

std::int64_t largest_retrievable_T(const Rung& r, std::int64_t p) {
  check_pT(p, 1, "largest retrievable T");
  auto ok = [&](double T) { return rung_log_psnr(r, p, T) > 0.0; };
  double lo = static_cast<double>(p), hi = lo + 1;
  if (!ok(hi)) return 0;
  constexpr double kCap = 1e18;
  while (ok(hi)) {
    lo = hi;
    hi = std::min(kCap, 2 * hi);
    if (hi == kCap) {
      if (ok(hi)) return static_cast<std::int64_t>(kCap);
      break;
    }
  }
  // ok(lo), !ok(hi)
  auto ilo = static_cast<std::int64_t>(lo), ihi = static_cast<std::int64_t>(hi);
  while (ihi - ilo > 1) {
    const std::int64_t mid = ilo + (ihi - ilo) / 2;
    if (ok(static_cast<double>(mid))) ilo = mid;
    else ihi = mid;
  }
  return ilo;
}

// ---- random keys ----
namespace {
// E z^{2j} for z = <u,v>, u, v uniform on S^{p−1}: (2j−1)!! / Π_{i<j} (p + 2i).
double log_sphere_even_moment(std::int64_t p, int j) {
  double l = 0;
  for (int i = 0; i < j; ++i) l += std::log(2.0 * i + 1.0) - std::log(static_cast<double>(p) + 2.0 * i);
  return l;
}
}  // namespace

double psnr_random_degree(std::int64_t p, double T, int k) {
  check_pT(p, T, "random-key pSNR");
  require(k >= 1, "random-key pSNR: degree {} must be >= 1", k);
  if (T <= 1) return kInf;
  return safe_exp(-std::log(T - 1.0) - log_sphere_even_moment(p, k));
}
double psnr_random_linear(std::int64_t p, double T) { return psnr_random_degree(p, T, 1); }
double psnr_random_psd(std::int64_t p, double T) { return psnr_random_degree(p, T, 2); }

double psnr_random_block(std::int64_t d, std::int64_t g, double T) {
  require(g >= 1 && d % g == 0, "random-key M_g estimate: g = {} must divide d = {}", g, d);
  const double m = static_cast<double>(d / g), gg = static_cast<double>(g);
  check_pT(d, T, "random-key M_g estimate");
  if (T <= 1) return kInf;
  if (g == 1) return psnr_random_psd(d, T);
  return gg * m * m * m / ((T - 1.0) * (3.0 * (m + 2.0) + (gg - 1.0) * m));
}

double psnr_random_sum(std::int64_t d, std::int64_t g, double T) {
  require(g >= 1 && d % g == 0, "random-key Σ_g estimate: g = {} must divide d = {}", g, d);
  const double m = static_cast<double>(d / g), gg = static_cast<double>(g);
  check_pT(d, T, "random-key Σ_g estimate");
  if (T <= 1) return kInf;
  return m * m * m / ((T - 1.0) * (3.0 * (m + 2.0) + (gg * gg - 1.0) * m));
}

double psnr_random_orthant(double T) {
  require(std::isfinite(T) && T >= 1, "random-key orthant estimate: T = {} must be >= 1", T);
  return T <= 1 ? kInf : std::numbers::pi * std::numbers::pi / (T - 1.0);
}
double psnr_random_lorentz(double T) {
  require(std::isfinite(T) && T >= 1, "random-key Lorentz estimate: T = {} must be >= 1", T);
  return T <= 1 ? kInf : 4.0 / (T - 1.0);
}

double psnr_random_softmax(std::int64_t p, double T, double tau) {
  check_pT(p, T, "random-key softmax estimate");
  check_tau(tau, "random-key softmax estimate");
  if (T <= 1) return kInf;
  // E e^{cz} = Σ_n c^{2n} E z^{2n}/(2n)!, term ratio c²/(2n(p+2n−2)); log-sum-exp.
  const double c = 2.0 / tau;
  double log_t = 0, log_max = 0;
  std::vector<double> logs{0.0};
  for (int n = 1; n < 1000000; ++n) {
    log_t += 2 * std::log(c) - std::log(2.0 * n) - std::log(static_cast<double>(p) + 2.0 * n - 2.0);
    logs.push_back(log_t);
    log_max = std::max(log_max, log_t);
    if (log_t < log_max - 40 && n > 2) break;
  }
  double s = 0;
  for (double l : logs) s += std::exp(l - log_max);
  const double log_E = log_max + std::log(s);
  return safe_exp(c - std::log(T - 1.0) - log_E);
}

double psnr_random_for_map(const FeatureMap& map, double T) {
  const std::int64_t d = map.input_dim();
  switch (map.kind()) {
    case MapKind::Linear: return psnr_random_linear(d, T);
    case MapKind::Orthant: return psnr_random_orthant(T);
    case MapKind::LorentzRay:
    case MapKind::LorentzLift: return psnr_random_lorentz(T);
    case MapKind::BlockPsd: return psnr_random_block(d, map.groups(), T);
    case MapKind::SumPsd: return psnr_random_sum(d, map.groups(), T);
    case MapKind::EvenDegree: return psnr_random_degree(d, T, map.degree());
    case MapKind::Softmax: return psnr_random_softmax(d, T, map.tau());
    case MapKind::Lorentz: break;
  }
  throw UserError(fmt::format("no random-key pSNR estimate for map '{}'", map.spec()));
}

PsnrMc psnr_monte_carlo(const FeatureMap& map, std::int64_t T, std::int64_t trials, std::int64_t max_queries,
                        std::uint64_t seed, const Eigen::MatrixXd& pool) {
  const std::int64_t d = map.input_dim();
  require(T >= 2, "pSNR Monte Carlo: T = {} keys must be >= 2", T);
  require(trials >= 1 && max_queries >= 1, "pSNR Monte Carlo: trials and queries must be >= 1");
  if (pool.size() > 0) {
    require(pool.cols() == d, "pSNR Monte Carlo: key pool has dimension {} but the map expects d = {}", pool.cols(), d);
    require(pool.rows() >= T, "pSNR Monte Carlo: key pool has {} vectors, fewer than T = {}", pool.rows(), T);
  }
  std::vector<double> vals;
  const std::int64_t nq = std::min(T, max_queries);
  for (std::int64_t t = 0; t < trials; ++t) {
    Eigen::MatrixXd K;
    if (pool.size() == 0) {
      K = rng::sphere_rows(T, d, seed, rng::kKeys, static_cast<std::uint64_t>(t) * T * d);
    } else {
      const Eigen::VectorXi perm = rng::permutation(pool.rows(), rng::derive_seed(seed, fmt::format("trial{}", t)),
                                                    rng::kKeys);
      K.resize(T, d);
      for (std::int64_t i = 0; i < T; ++i) K.row(i) = pool.row(perm(i));
    }
    // Query rows in fixed blocks of kMcRows, in parallel; each block fills its own slots, so the samples
    // (and their sorted quantiles) do not depend on the thread count.
    constexpr std::int64_t kMcRows = 16;
    const std::int64_t nblocks = (nq + kMcRows - 1) / kMcRows;
    const std::size_t first = vals.size();
    vals.resize(first + static_cast<std::size_t>(nq));
    std::vector<std::exception_ptr> err(static_cast<std::size_t>(nblocks));
#pragma omp parallel for schedule(dynamic) if (nblocks > 1)
    for (std::int64_t b = 0; b < nblocks; ++b) {
      try {
        const std::int64_t q0 = b * kMcRows, nb = std::min(kMcRows, nq - q0);
        const Eigen::MatrixXd Q = K.middleRows(q0, nb);
        if (map.is_softmax()) {
          const Eigen::MatrixXd G = Q * K.transpose();
          for (std::int64_t r = 0; r < nb; ++r) {
            const std::int64_t i = q0 + r;
            double s = 0;
            for (std::int64_t j = 0; j < T; ++j)
              if (j != i) s += std::exp(2.0 * (G(r, j) - G(r, i)) / map.tau());
            vals[first + static_cast<std::size_t>(i)] = s > 0 ? 1.0 / s : kInf;
          }
        } else {
          const Eigen::MatrixXd A = map.kernel_matrix(Q, K);
          for (std::int64_t r = 0; r < nb; ++r)
            vals[first + static_cast<std::size_t>(q0 + r)] = psnr_from_coefficients(A.row(r).transpose(), q0 + r);
        }
      } catch (...) {
        err[static_cast<std::size_t>(b)] = std::current_exception();
      }
    }
    for (const auto& e : err)
      if (e) std::rethrow_exception(e);
  }
  std::sort(vals.begin(), vals.end());
  auto quant = [&](double q) {
    const double pos = q * static_cast<double>(vals.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(lo + 1, vals.size() - 1);
    if (std::isinf(vals[hi]) || std::isinf(vals[lo])) return vals[hi];
    return vals[lo] + (pos - static_cast<double>(lo)) * (vals[hi] - vals[lo]);
  };
  PsnrMc r;
  r.samples = static_cast<std::int64_t>(vals.size());
  r.median = quant(0.5);
  r.q10 = quant(0.1);
  r.q90 = quant(0.9);
  r.min = vals.front();
  return r;
}

}  // namespace memcap::kata
