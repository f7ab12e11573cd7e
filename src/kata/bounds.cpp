// Welch, Gerzon, Rankin, PSD cap bounds, random-code estimate and Table 1 (spec kata.md §3.2–3.8).
// Cap measures use boost::math::ibeta; when that underflows, a log-space hypergeometric series.
#include "kata/bounds.hpp"

#include <boost/math/special_functions/beta.hpp>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "kata/finite_field.hpp"

namespace memcap::kata {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_D(std::int64_t D, const char* what) {
  require(D >= 1, "{}: dimension D = {} must be >= 1", what, D);
}
void check_T(double T, const char* what) {
  require(std::isfinite(T) && T >= 1, "{}: number of keys T = {} must be >= 1", what, T);
}
void check_unit_interval(double v, const char* name, const char* what) {
  require(std::isfinite(v) && v >= 0 && v <= 1, "{}: {} = {} must lie in [0, 1]", what, name, v);
}
void check_p(std::int64_t p, const char* what) {
  require(p >= 2, "{}: p = {} makes the bound vacuous; the PSD cone S^p_+ needs p >= 2", what, p);
}
void check_psd_eps(double eps, const char* what) {
  require(std::isfinite(eps) && eps >= 0 && eps < 1,
          "{}: PSD interference ε = {} must lie in [0, 1) (it is the squared raw correlation)", what, eps);
}
}  // namespace

double welch_mu_sq(std::int64_t D, std::int64_t T) {
  check_D(D, "Welch bound");
  check_T(static_cast<double>(T), "Welch bound");
  if (T <= D) return 0.0;
  return static_cast<double>(T - D) / (static_cast<double>(D) * static_cast<double>(T - 1));
}

double welch_mu(std::int64_t D, std::int64_t T) { return std::sqrt(welch_mu_sq(D, T)); }

double welch_max_keys_unsquared(std::int64_t D, double eps) {
  check_D(D, "Welch W2");
  check_unit_interval(eps, "ε", "Welch W2");
  const double d = static_cast<double>(D);
  if (eps * eps * d >= 1.0) return kInf;
  return d * (1.0 - eps * eps) / (1.0 - d * eps * eps);
}

double welch_max_keys_squared(std::int64_t D, double eps) {
  check_D(D, "Welch W3");
  check_unit_interval(eps, "ε", "Welch W3");
  const double d = static_cast<double>(D);
  if (eps * d >= 1.0) return kInf;
  return d * (1.0 - eps) / (1.0 - d * eps);
}

double welch_min_dim(double T, double mu) {
  check_T(T, "Welch W4");
  check_unit_interval(mu, "μ", "Welch W4");
  return T / (1.0 + mu * mu * (T - 1.0));
}

std::int64_t welch_min_dim_ceil(double T, double mu) {
  const double v = welch_min_dim(T, mu);
  require(v <= 9.0e18, "Welch W4: the minimum dimension {:g} (T = {:g}, μ = {}) is too large for a 64-bit integer",
          v, T, mu);
  const double r = std::round(v);
  // An exact integer (up to rounding noise) stays; otherwise round up.
  return static_cast<std::int64_t>(std::abs(v - r) <= 1e-9 * std::max(1.0, v) ? r : std::ceil(v));
}

std::int64_t gerzon_real(std::int64_t D) {
  check_D(D, "Gerzon bound");
  require(D <= 3037000499, "Gerzon bound: dimension D = {} is too large (max 3037000499)", D);
  return D * (D + 1) / 2;
}
std::int64_t gerzon_complex(std::int64_t D) {
  check_D(D, "Gerzon bound");
  require(D <= 3037000499, "Gerzon bound: dimension D = {} is too large (max 3037000499)", D);
  return D * D;
}

LorentzConvention parse_lorentz_convention(const std::string& s) {
  if (s == "ambient") return LorentzConvention::Ambient;
  if (s == "raw") return LorentzConvention::Raw;
  throw UserError("unknown Lorentz convention '" + s +
                  "'; use ambient (cone L^d_+, spatial d-1, Thm 9) or raw (raw keys in R^d, ambient d+1, D.1)");
}

double rankin_wall(std::int64_t d, double eps, LorentzConvention conv) {
  const bool ambient = conv == LorentzConvention::Ambient;
  if (ambient)
    require(d >= 3, "Rankin wall: the Lorentz cone L^d_+ needs d >= 3 (got d = {})", d);
  else
    require(d >= 2, "Rankin wall (raw keys in R^d, ambient d+1): needs d >= 2 (got d = {})", d);
  require(std::isfinite(eps) && eps >= 0 && eps <= 0.5,
          "Rankin wall: ε = {} is outside [0, 1/2]; the theorem bounds Lorentz packings only for ε <= 1/2 "
          "(above it the spatial parts may have positive inner products)", eps);
  const double spatial = static_cast<double>(ambient ? d - 1 : d);
  if (eps == 0.5) return 2.0 * spatial;
  return std::min(spatial + 1.0, 1.0 + 1.0 / (1.0 - 2.0 * eps));
}

std::int64_t rankin_wall_keys(std::int64_t d, double eps, LorentzConvention conv) {
  return static_cast<std::int64_t>(std::floor(rankin_wall(d, eps, conv) + 1e-12));
}

double log_psd_cap_lb_paper(std::int64_t p, double eps) {
  check_p(p, "PSD paper bound");
  check_psd_eps(eps, "PSD paper bound");
  return -std::log(2.0) - 0.5 * static_cast<double>(p - 1) * std::log1p(-eps);
}

double psd_cap_lb_paper(std::int64_t p, double eps) {
  const double l = log_psd_cap_lb_paper(p, eps);
  return l > 709.0 ? kInf : std::exp(l);
}

double log_cap_fraction(std::int64_t p, double a) {
  check_p(p, "spherical cap");
  check_unit_interval(a, "a", "spherical cap");
  if (a == 0) return std::log(0.5);
  if (a == 1) return -kInf;
  const double A = 0.5 * static_cast<double>(p - 1), B = 0.5, x = 1.0 - a * a;
  const double I = boost::math::ibeta(A, B, x);
  if (I > 1e-280) return std::log(0.5 * I);
  // log-space series: I_x(A,B) = x^A (1−x)^B / (A·Beta(A,B)) · Σ_n Π_{j<n} (A+B+j)/(A+1+j) · x.
  double sum = 0, term = 1;
  for (long n = 0; n < 100000000L; ++n) {
    sum += term;
    term *= (A + B + n) / (A + 1 + n) * x;
    if (term < 1e-17 * sum) break;
  }
  const double log_beta = std::lgamma(A) + std::lgamma(B) - std::lgamma(A + B);
  return std::log(0.5) + A * std::log(x) + B * std::log1p(-x) - std::log(A) - log_beta + std::log(sum);
}

double cap_fraction(std::int64_t p, double a) { return std::exp(log_cap_fraction(p, a)); }

double log_psd_cap_lb_exact(std::int64_t p, double eps) {
  check_p(p, "PSD exact-cap bound");
  check_psd_eps(eps, "PSD exact-cap bound");
  return -std::log(2.0) - log_cap_fraction(p, std::sqrt(eps));
}

double psd_cap_lb_exact(std::int64_t p, double eps) {
  const double l = log_psd_cap_lb_exact(p, eps);
  return l > 709.0 ? kInf : std::exp(l);
}

double psd_welch_ceiling(std::int64_t p, double eps) {
  check_p(p, "PSD Welch ceiling");
  check_psd_eps(eps, "PSD Welch ceiling");
  return welch_max_keys_squared(p, eps);
}

double psd_lifted_welch_mu_sq(std::int64_t p, std::int64_t T) {
  check_p(p, "lifted Welch bound");
  return welch_mu_sq(p * (p + 1) / 2, T);
}

double random_code_dim(double T, double mu) {
  require(std::isfinite(T) && T >= 2, "random-code estimate: T = {} must be >= 2", T);
  require(std::isfinite(mu) && mu > 0 && mu <= 1, "random-code estimate: μ = {} must lie in (0, 1]", mu);
  return 4.0 * std::log(T) / (mu * mu);
}

bool is_prime_power(std::int64_t s) {
  std::int64_t ell = 0;
  int k = 0;
  return prime_power(s, ell, k);
}

Table1Entry table1_entry(double T, double mu) {
  require(std::isfinite(T) && T >= 2, "Table 1: T = {} must be >= 2", T);
  require(std::isfinite(mu) && mu > 0 && mu < 1, "Table 1: μ = {} must lie in (0, 1)", mu);
  constexpr double kTol = 1e-12;
  Table1Entry e;
  e.mu = mu;
  e.welch_d = welch_min_dim_ceil(T, mu);
  e.random_d_exact = random_code_dim(T, mu);
  require(e.random_d_exact <= 9.0e18, "Table 1: the random-code dimension {:g} (T = {:g}, μ = {}) is too large",
          e.random_d_exact, T, mu);
  e.random_d = std::llround(e.random_d_exact);
  for (std::int64_t s = 2;; ++s) {
    if (!is_prime_power(s)) continue;
    const double sd = static_cast<double>(s);
    if (1.0 / std::sqrt(sd) <= mu * (1 + kTol) && sd * (sd + 1) >= T) {
      e.mub_s = s;
      e.mub_d = 2 * s;
      break;
    }
  }
  // DeVore: s ascending minimizes d = s²; the smallest r that reaches T gives the lowest coherence.
  for (std::int64_t s = 2;; ++s) {
    if (!is_prime_power(s)) continue;
    const double sd = static_cast<double>(s);
    bool found = false;
    double count = sd;  // s^{r+1} at r = 0
    for (std::int64_t r = 0; r < s && static_cast<double>(r) <= mu * sd * (1 + kTol); ++r, count *= sd) {
      if (count >= T) {
        e.devore_s = s;
        e.devore_r = r;
        e.devore_d = s * s;
        found = true;
        break;
      }
    }
    if (found) break;
  }
  return e;
}

std::vector<Table1Entry> table1(double T, const std::vector<double>& mus) {
  std::vector<Table1Entry> out;
  for (double mu : mus) out.push_back(table1_entry(T, mu));
  return out;
}

}  // namespace memcap::kata
