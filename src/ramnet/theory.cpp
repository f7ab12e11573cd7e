// κ_∞, the exact error decomposition, the bounds of Theorem 2 (eqs. 11, 16, 17, 20), ξ, β*, the hard-write
// limit and the small-M constants (spec ramnet.md §2.3–2.8, §5.1–5.4). See theory.hpp.
#include "ramnet/theory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "ramnet/bessel.hpp"

namespace memcap::ramnet {

namespace {
constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kInf = std::numeric_limits<double>::infinity();

// log(Z_dp/I_0) and the magnitude of the numbers it was computed from (for the rounding budget).
struct ZRatio {
  double value = 0, scale = 0;
};

// log n! for n < 8192 (lgamma is a tenth of an E1 run otherwise).
double log_factorial(int n) {
  static const std::vector<double> table = [] {
    std::vector<double> t(8192, 0.0);
    for (int i = 1; i < 8192; ++i) t[i] = t[i - 1] + std::log(static_cast<double>(i));
    return t;
  }();
  return n < 8192 ? table[n] : std::lgamma(n + 1.0);
}

// rho = |x|, li0 = log I_0(rho) and lz = log Z_dp(x), all already computed by the caller.
ZRatio z_over_i0(int dp, double x1, double x2, double rho, double li0, double lz) {
  if (rho == 0) return {};
  if (rho <= 30) {
    // Z_dp/I_0 − 1 = 2 Σ_{l≥1} (I_{l dp}/I_0) cos(l dp θ): only harmonics divisible by dp survive (§2.2).
    const double th = std::atan2(x2, x1);
    double S = 0, lead = 0;
    for (int l = 1; l < 100000; ++l) {
      const double lr = bessel::log_in(l * dp, rho, log_factorial(l * dp)) - li0;
      if (l == 1) lead = lr;
      if (lr < -745) break;
      S += 2.0 * std::exp(lr) * std::cos(static_cast<double>(l) * dp * th);
      if (lr < lead - 41.5) break;  // this harmonic is < 1e-18 of the first
    }
    if (std::fabs(S) <= 0.5) {
      const double v = std::log1p(S);
      return {v, std::fabs(v)};
    }
  }
  return {lz - li0, std::fabs(lz) + std::fabs(li0)};
}

ZRatio z_over_i0(const Codebook& C, double x1, double x2) {
  const double rho = std::hypot(x1, x2);
  return z_over_i0(static_cast<int>(C.cols()), x1, x2, rho, bessel::log_i0(rho), log_Z(C, x1, x2));
}

// Everything pair_errors needs about one argument x of the kernel factor, each Bessel value computed once.
struct Arg {
  double rho, li0, lz, eta, t;
  ZRatio z;
};
Arg arg_terms(const Codebook& C, double x1, double x2) {
  Arg a;
  a.rho = std::hypot(x1, x2);
  a.t = 0.25 * a.rho * a.rho;
  a.li0 = bessel::log_i0(a.rho);
  a.lz = log_Z(C, x1, x2);
  a.eta = a.rho < bessel::kEtaSeriesMax ? bessel::eta(a.rho) : a.t - a.li0;
  a.z = z_over_i0(static_cast<int>(C.cols()), x1, x2, a.rho, a.li0, a.lz);
  return a;
}
}  // namespace

double log_Z_over_I0(int dp, double x1, double x2) {
  require(dp >= 2, "dp {} must be >= 2", dp);
  return z_over_i0(circular_codebook(dp), x1, x2).value;
}

double log_kappa_inf_factor(double a1, double a2, double b1, double b2) {
  const double ra = std::hypot(a1, a2), rb = std::hypot(b1, b2);
  if (ra == 0 || rb == 0) return 0.0;  // I_0(|b|) / (I_0(0) I_0(|b|)) = 1
  const double s1 = a1 + b1, s2 = a2 + b2, rs = std::hypot(s1, s2);
  if (std::max({ra, rb, rs}) <= bessel::kSeriesMax)
    return bessel::log_i0(rs) - bessel::log_i0(ra) - bessel::log_i0(rb);
  // Stable form (§5.1): |a+b| − |a| − |b| = −4|a||b| sin²(θ/2) / (|a+b| + |a| + |b|).
  const double theta = std::atan2(std::fabs(a1 * b2 - a2 * b1), a1 * b1 + a2 * b2);
  const double sh = std::sin(0.5 * theta);
  const double bracket = -4.0 * ra * rb * sh * sh / (rs + ra + rb);
  return bracket + bessel::log_i0e(rs) - bessel::log_i0e(ra) - bessel::log_i0e(rb);
}

double log_kappa_inf(const Params& p, const double* q, const double* k) {
  double s = 0;
  for (int u = 0; u < p.U; ++u)
    s += log_kappa_inf_factor(p.beta_r * q[2 * u], p.beta_r * q[2 * u + 1], p.beta_w * k[2 * u],
                              p.beta_w * k[2 * u + 1]);
  return s;
}

double pair_M(const Params& p, const double* q, const double* k) {
  double M = 0;
  for (int u = 0; u < p.U; ++u) {
    M = std::max(M, p.beta_r * std::hypot(q[2 * u], q[2 * u + 1]));
    M = std::max(M, p.beta_w * std::hypot(k[2 * u], k[2 * u + 1]));
  }
  return M;
}

double xi(int dp, double M) {
  require(dp >= 2, "dp {} must be >= 2", dp);
  require(std::isfinite(M) && M >= 0, "M {} must be a finite number >= 0", M);
  if (M == 0) return 0.0;
  const double lx = std::log(2.0) + M + dp * std::log(M) - std::lgamma(dp + 1.0);
  return lx > 700 ? kInf : std::exp(lx);
}

double xi_threshold(int dp) {
  require(dp >= 2, "dp {} must be >= 2", dp);
  // log ξ = log 2 + M + dp log M − log dp! increases in M; at M = dp it is > 0 (log dp! < dp log dp).
  double lo = 0, hi = dp + 1.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (xi(dp, mid) < 1.0) lo = mid;
    else hi = mid;
  }
  return lo;
}

double bound_eq16_lower(int U, double M) { return -U * std::pow(M, 4) / 4.0; }
double bound_eq16_upper(int U, double M) { return U * std::pow(M, 4) / 32.0; }
double bound_eq17(int U, double M) { return U * std::pow(M, 4) / 4.0; }

double bound_eq20(int dp, int U, double M) {
  const double x = xi(dp, M);
  if (!(x < 1.0)) return kInf;
  return 3.0 * U * x / (1.0 - x);
}

double bound_eq11(int dp, int U, double M) {
  const double f = bound_eq20(dp, U, M);
  return std::isinf(f) ? kInf : bound_eq17(U, M) + f;
}

double bound11_reach(int dp, int U, double level) {
  require(std::isfinite(level) && level > 0, "bound level {} must be a finite number > 0", level);
  double lo = 0, hi = xi_threshold(dp);
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (bound_eq11(dp, U, mid) <= level) lo = mid;
    else hi = mid;
  }
  return lo;
}

double theorem1_constant(int dp, int U, double M0) {
  require(dp >= 4, "Theorem 1 needs dp >= 4 (got dp = {}): for dp = 2, 3 the error is O(M^dp), not O(M^4)", dp);
  require(U >= 1, "U {} must be >= 1", U);
  require(std::isfinite(M0) && M0 > 0, "M0 {} must be a finite number > 0", M0);
  const double B = bound_eq11(dp, U, M0);
  if (std::isinf(B)) return kInf;
  return std::expm1(B) / (U * std::pow(M0, 4));
}

SmallMConstants small_m_constants(int dp) {
  require(dp >= 2, "dp {} must be >= 2", dp);
  if (dp == 2) return {2, -0.5, 0.5};        // e_fin ≈ Re(ab)/2
  if (dp == 3) return {3, -0.25, 0.25};      // e_fin ≈ Re(ab(a+b))/8
  if (dp == 4) return {4, -7.0 / 24.0, 1.0 / 24.0};
  return {4, kContSharpLower, kContSharpUpper};
}

double beta_star(double tau) {
  require(std::isfinite(tau) && tau > 0, "tau {} must be a finite number > 0", tau);
  return std::sqrt(2.0 / tau);
}
double beta_star_head(double d_head) {
  require(std::isfinite(d_head) && d_head > 0, "d_head {} must be > 0", d_head);
  return beta_star(std::sqrt(d_head));
}
double beta_star_migration(int U) {
  require(U >= 1, "U {} must be >= 1", U);
  return beta_star(std::sqrt(2.0 * U));
}

int nearest_code(const Codebook& C, double x1, double x2) {
  const int dp = static_cast<int>(C.cols());
  double best = -kInf;
  for (int j = 0; j < dp; ++j) best = std::max(best, C(0, j) * x1 + C(1, j) * x2);
  const double tol = 8 * kEps * (std::fabs(x1) + std::fabs(x2));
  for (int j = 0; j < dp; ++j)
    if (C(0, j) * x1 + C(1, j) * x2 >= best - tol) return j;
  return 0;  // unreachable: the maximiser itself qualifies
}

double log_kappa_hard_write(const Params& p, const Codebook& C, const double* q, const double* k) {
  double s = 0;
  for (int u = 0; u < p.U; ++u) {
    const int j = nearest_code(C, k[2 * u], k[2 * u + 1]);
    const double a1 = p.beta_r * q[2 * u], a2 = p.beta_r * q[2 * u + 1];
    s += C(0, j) * a1 + C(1, j) * a2 - log_Z(C, a1, a2);
  }
  return s;
}

PairErrors pair_errors(const Params& p, const Codebook& C, const double* q, const double* k) {
  require(C.cols() == p.dp, "pair_errors: the codebook has {} codes, dp = {}", C.cols(), p.dp);
  PairErrors e;
  double scale = 0;
  for (int u = 0; u < p.U; ++u) {
    const double a1 = p.beta_r * q[2 * u], a2 = p.beta_r * q[2 * u + 1];
    const double b1 = p.beta_w * k[2 * u], b2 = p.beta_w * k[2 * u + 1];
    const double s1 = a1 + b1, s2 = a2 + b2;
    const Arg A = arg_terms(C, a1, a2), B = arg_terms(C, b1, b2), S = arg_terms(C, s1, s2);
    e.log_kappa_A += S.lz - A.lz - B.lz;
    e.log_kappa_inf += std::max({A.rho, B.rho, S.rho}) <= bessel::kSeriesMax && A.rho > 0 && B.rho > 0
                           ? S.li0 - A.li0 - B.li0
                           : log_kappa_inf_factor(a1, a2, b1, b2);
    e.target += 0.5 * (a1 * b1 + a2 * b2);
    e.e_cont += A.eta + B.eta - S.eta;
    e.e_fin += S.z.value - A.z.value - B.z.value;
    scale += A.eta + B.eta + S.eta + A.t + B.t + S.t + A.z.scale + B.z.scale + S.z.scale;
  }
  e.e_tot = e.e_fin + e.e_cont;
  e.e_tot_direct = e.log_kappa_A - e.target;
  e.roundoff = 64 * kEps * scale;
  e.M = pair_M(p, q, k);
  e.xi = xi(p.dp, e.M);
  e.bound11 = bound_eq11(p.dp, p.U, e.M);
  e.bound16_lo = bound_eq16_lower(p.U, e.M);
  e.bound16_hi = bound_eq16_upper(p.U, e.M);
  e.bound17 = bound_eq17(p.U, e.M);
  e.bound20 = bound_eq20(p.dp, p.U, e.M);
  return e;
}

}  // namespace memcap::ramnet
