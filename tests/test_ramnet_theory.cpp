// RAM-Net kernel theory (spec ramnet.md §2.3–2.8, §5.1–5.4, §6 T2 κ_∞ and bound columns, T4–T7, T10): Bessel
// functions against the spec's mpmath values and Boost.Math, η and its series, κ_∞ (also at extreme β), the
// error decomposition, ξ and its thresholds, the bounds, β*, the hard-write limit, sharp small-M constants,
// and one E1 job (no violations, thread-count invariance).
#include <doctest/doctest.h>
#include <omp.h>

#include <boost/math/special_functions/bessel.hpp>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "ramnet/bessel.hpp"
#include "ramnet/bounds_job.hpp"
#include "ramnet/theory.hpp"

using namespace memcap::ramnet;
using doctest::Approx;

TEST_CASE("T4: log I_0 at the spec's points, i0e(1000)") {
  const double x[] = {0.1, 1, 2, 5, 10, 50, 100, 700, 1000};
  const double want[] = {0.00249843923387624, 0.235914358507179, 0.823993541482956, 3.30468177582253,
                         7.9429720831187,     47.1275755018718,  96.7797326899426,  695.805699998443,
                         995.627308889869};
  for (int i = 0; i < 9; ++i) {
    CAPTURE(x[i]);
    CHECK(bessel::log_i0(x[i]) == Approx(want[i]).epsilon(1e-13));
  }
  CHECK(bessel::i0e(1000) == Approx(0.0126172404558913).epsilon(1e-13));
  // Both sides of the series / asymptotic switch at 20 (mpmath, 40 digits).
  CHECK(bessel::log_i0(19.9) == Approx(17.49214981862135060).epsilon(1e-15));
  CHECK(bessel::log_i0(20.0) == Approx(17.58961042824427429).epsilon(1e-15));
  CHECK(bessel::log_i0(20.1) == Approx(17.68708387678898112).epsilon(1e-15));
  CHECK(bessel::log_i0(25.0) == Approx(22.47672800499924376).epsilon(1e-15));
}

TEST_CASE("i0e and log I_0 agree with Boost.Math cyl_bessel_i on [0, 700]") {
  double worst = 0;
  for (double x = 0; x <= 700; x += x < 30 ? 0.173 : 3.71) {
    const double ref = boost::math::cyl_bessel_i(0, x);
    worst = std::max(worst, std::fabs(bessel::i0e(x) * std::exp(x) / ref - 1));
    if (x > 0) CHECK(bessel::log_i0(x) == Approx(std::log(ref)).epsilon(1e-14));
  }
  MESSAGE("largest relative deviation of i0e from Boost: " << worst);
  CHECK(worst < 5e-15);
  CHECK(bessel::i0e(-3.5) == bessel::i0e(3.5));  // even
  CHECK(bessel::i0e(0) == 1.0);
  CHECK(std::isfinite(bessel::log_i0(1e6)));
}

TEST_CASE("T5: eta values, bounds 0 <= eta <= rho^4/64, series/direct agree at the switch") {
  CHECK(bessel::eta(0.01) == Approx(1.562482639114e-10).epsilon(1e-12));
  CHECK(bessel::eta(0.1) == Approx(1.560766123757e-6).epsilon(1e-12));
  CHECK(bessel::eta(0.5) == Approx(9.502808145187e-4).epsilon(1e-12));
  CHECK(bessel::eta(1.0) == Approx(1.408564149282e-2).epsilon(1e-12));
  CHECK(bessel::eta(1e-3) == Approx(1.5624998242e-14).epsilon(1e-10));
  CHECK(bessel::eta(0) == 0.0);
  for (double r = 1e-4; r < 200; r *= 1.37) {
    CAPTURE(r);
    const double e = bessel::eta(r);
    CHECK(e >= 0);
    CHECK(e <= std::pow(r, 4) / 64 * (1 + 1e-12));
  }
  // Just below / above the series switch: the direct form (exact Boost value) agrees to ~1e-14.
  for (double r : {0.5999999, 0.6}) {
    const double direct = 0.25 * r * r - std::log(boost::math::cyl_bessel_i(0, r));
    CHECK(bessel::eta(r) == Approx(direct).epsilon(2e-13));
  }
}

TEST_CASE("T3 via Fourier-Bessel: Z_4 = I_0 + 2 I_4 cos 4θ + ...") {
  const double rho = std::hypot(0.8, 0.1);
  CHECK(std::exp(bessel::log_i0(rho)) == Approx(1.16922197585582).epsilon(1e-14));
  CHECK(std::exp(bessel::log_i0(rho) + log_Z_over_I0(4, 0.8, 0.1)) == Approx(1.17121955718032).epsilon(1e-14));
  // The series form agrees with the direct log Z − log I_0 where both are accurate.
  const Codebook C = circular_codebook(6);
  for (double x1 : {-3.0, -0.7, 0.4, 2.2})
    for (double x2 : {-1.9, 0.3, 2.6}) {
      const double direct = log_Z(C, x1, x2) - bessel::log_i0(std::hypot(x1, x2));
      CHECK(log_Z_over_I0(6, x1, x2) == Approx(direct).epsilon(1e-9).scale(1e-12));
    }
}

namespace {
struct T2Case {
  const char* id;
  int dp, U;
  double br, bw;
  std::vector<double> q, k;
  double kappa_inf, target_exp, M, bound11;
};
const std::vector<T2Case> kT2 = {
    {"A", 4, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06211938116, 1.06715902438, 0.538516, 0.0574884},
    {"B", 4, 1, 1, 1, {1, 0}, {0.6, 0.8}, 1.23209713814, 1.34985880758, 1, 1.12859},
    {"C", 4, 1, .5, .5, {1, 0}, {1, 0}, 1.11942473080, 1.13314845307, 0.5, 0.0416094},
    {"D", 4, 2, 1, 1, {0.5, 0.2, -0.4, 0.3}, {0.3, -0.1, -0.2, 0.5}, 1.17751255576, 1.19721736312, 0.538516, 0.114977},
    {"E", 8, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06211938116, 1.06715902438, 0.538516, 0.0210268},
    {"F", 3, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06211938116, 1.06715902438, 0.538516, 0.314822},
    {"G", 2, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06211938116, 1.06715902438, 0.538516, 2.98411},
    {"H", 4, 1, .7, 1.3, {0.5, 0.2}, {0.3, -0.1}, 1.05704584230, 1.06093436896, 0.411096, 0.0179499},
    {"I", 4, 1, 1, 1, {2, 1}, {1.5, -0.5}, 1.62822598484, 3.49034295746, 2.23607, INFINITY},
};
}  // namespace

TEST_CASE("T2: kappa_inf, exp target, M and the eq.-11 bound, cases A-I") {
  for (const auto& c : kT2) {
    CAPTURE(c.id);
    const Params p{c.dp, c.U, c.br, c.bw};
    const Codebook C = circular_codebook(c.dp);
    CHECK(std::exp(log_kappa_inf(p, c.q.data(), c.k.data())) == Approx(c.kappa_inf).epsilon(1e-11));
    const PairErrors e = pair_errors(p, C, c.q.data(), c.k.data());
    CHECK(std::exp(e.log_kappa_inf) == Approx(c.kappa_inf).epsilon(1e-11));
    CHECK(std::exp(e.target) == Approx(c.target_exp).epsilon(1e-11));
    CHECK(e.M == Approx(c.M).epsilon(2e-6));
    if (std::isinf(c.bound11)) {
      CHECK(std::isinf(e.bound11));
      CHECK(e.xi == Approx(19.5).epsilon(2e-3));
    } else {
      CHECK(e.bound11 == Approx(c.bound11).epsilon(1e-5));
      // The bound holds.
      CHECK(std::fabs(e.e_tot) <= e.bound11);
    }
    // Decomposition: e_tot = e_fin + e_cont = log κ_A − target (direct), to rounding.
    CHECK(std::fabs(e.e_tot - e.e_tot_direct) < 1e-14);
    CHECK(std::fabs(e.e_cont - (e.log_kappa_inf - e.target)) < 1e-14);
    CHECK(std::fabs(e.e_fin - (e.log_kappa_A - e.log_kappa_inf)) < 1e-14);
  }
}

TEST_CASE("T2 case A: xi, log kA - target, log kinf - target inside the eq.-16 interval") {
  const Params p{4, 1, 1, 1};
  const double q[2] = {0.5, 0.2}, k[2] = {0.3, -0.1};
  const PairErrors e = pair_errors(p, circular_codebook(4), q, k);
  CHECK(e.xi == Approx(1.200852e-2).epsilon(1e-6));
  CHECK(xi(4, e.M) == Approx(1.200852e-2).epsilon(1e-6));
  CHECK(e.e_tot == Approx(-3.0611e-3).epsilon(2e-5));
  CHECK(e.e_cont == Approx(-4.7337e-3).epsilon(2e-5));
  CHECK(e.bound16_lo == Approx(-0.021025).epsilon(2e-5));
  CHECK(e.bound16_hi == Approx(0.002628).epsilon(2e-4));
  CHECK(e.e_cont >= e.bound16_lo);
  CHECK(e.e_cont <= e.bound16_hi);
  CHECK(std::fabs(e.e_fin) <= e.bound20);
  CHECK(e.bound17 == Approx(e.M * e.M * e.M * e.M / 4));
}

TEST_CASE("kappa_inf in the stable form at extreme beta (mpmath references)") {
  const Params p{4, 1, 400, 400};
  const double q[2] = {1, 0}, kneg[2] = {-1, 0};
  CHECK(log_kappa_inf(p, q, kneg) == Approx(-792.1712841697751535).epsilon(1e-14));
  CHECK(log_kappa_inf(p, q, q) == Approx(3.5676277809698652787).epsilon(1e-13));
  CHECK(log_kappa_inf_factor(30, 5, -12, 20) == Approx(-20.450038384181052507).epsilon(1e-13));
  CHECK(log_kappa_inf_factor(0, 0, 3, 4) == 0.0);
}

TEST_CASE("T6: xi < 1 thresholds and where the U=1 bound drops below 1 nat") {
  const int dps[] = {3, 4, 6, 8, 16};
  const double thr[] = {1.0249, 1.3335, 1.9327, 2.5194, 4.8187};
  const double reach[] = {0.706, 0.979, 1.339, 1.411, 1.414};
  for (int i = 0; i < 5; ++i) {
    CAPTURE(dps[i]);
    CHECK(xi_threshold(dps[i]) == Approx(thr[i]).epsilon(5e-5));
    CHECK(xi(dps[i], xi_threshold(dps[i])) == Approx(1.0).epsilon(1e-9));
    CHECK(bound11_reach(dps[i], 1, 1.0) == Approx(reach[i]).epsilon(5e-4));
  }
  CHECK(std::isinf(bound_eq11(4, 1, 1.34)));
  CHECK(std::isinf(bound_eq20(4, 3, 1.34)));
  CHECK(bound_eq11(4, 3, 0.5) == Approx(3 * bound_eq11(4, 1, 0.5)));
}

TEST_CASE("T7: beta* values") {
  CHECK(beta_star_head(32) == Approx(0.594604).epsilon(1e-6));
  CHECK(beta_star_head(64) == Approx(0.5).epsilon(1e-12));
  CHECK(beta_star_head(80) == Approx(0.472871).epsilon(1e-6));
  CHECK(beta_star_head(128) == Approx(0.420448).epsilon(1e-6));
  CHECK(beta_star_migration(4) == Approx(0.840896).epsilon(1e-6));
  CHECK(beta_star_migration(5) == Approx(0.795271).epsilon(1e-6));
  CHECK(1.58 * beta_star_migration(5) == Approx(1.256528).epsilon(1e-6));
  CHECK(beta_star_migration(6) == Approx(0.759836).epsilon(1e-6));
  CHECK(beta_star(2.0) == Approx(1.0));
  CHECK_THROWS_AS(beta_star(0.0), memcap::UserError);
}

TEST_CASE("T10: hard-write limit and nearest-code assignment") {
  const Codebook C = circular_codebook(4);
  const double q[2] = {0.5, 0.2}, k[2] = {0.3, -0.1};
  CHECK(nearest_code(C, k[0], k[1]) == 0);
  const Params p{4, 1, 1.0, 1.0};
  CHECK(std::exp(log_kappa_hard_write(p, C, q, k)) == Approx(1.535341862188227).epsilon(1e-14));
  const double bw[] = {5, 20, 50, 200};
  const double want[] = {1.2864607758, 1.5213078364, 1.5353067727, 1.5353418622};
  for (int i = 0; i < 4; ++i) {
    const Params pw{4, 1, 1.0, bw[i]};
    CHECK(std::exp(log_kappa_A(pw, C, q, k)) == Approx(want[i]).epsilon(1e-10));
  }
  // Ties (a key exactly between two codes) go to the lower index; clear cases to the nearest code.
  CHECK(nearest_code(C, 1, 1) == 0);
  CHECK(nearest_code(C, -1, 1) == 1);
  CHECK(nearest_code(C, -1, -1) == 2);
  CHECK(nearest_code(C, 1, -1) == 0);
  CHECK(nearest_code(C, 0, 0) == 0);
  CHECK(nearest_code(C, -0.1, -3) == 3);
  const Codebook C3 = circular_codebook(3);
  CHECK(nearest_code(C3, -1, 0) == 1);  // between codes 1 (120°) and 2 (240°)
  CHECK(nearest_code(C3, std::cos(5.0), std::sin(5.0)) == 2);
}

TEST_CASE("sharp small-M constants: adversarial pairs reach them, sampled pairs stay inside") {
  auto ratio = [](int dp, int U, double M, const char* name, int order) {
    BoundsJobSpec s;
    s.dp = dp;
    s.U = U;
    s.M = M;
    for (const auto& np : adversarial_pairs(s))
      if (np.name == name) {
        const Params p{dp, U, 1.0, 1.0};
        const PairErrors e = pair_errors(p, circular_codebook(dp), np.q.data(), np.k.data());
        return e.e_tot / (U * std::pow(M, order));
      }
    FAIL("no adversarial pair " << name);
    return 0.0;
  };
  const double M = 0.01;
  CHECK(ratio(8, 2, M, "aligned-code", 4) == Approx(-7.0 / 32).epsilon(1e-3));
  CHECK(ratio(8, 2, M, "anti-code", 4) == Approx(1.0 / 32).epsilon(1e-3));
  CHECK(ratio(4, 1, M, "aligned-mid", 4) == Approx(-7.0 / 24).epsilon(1e-3));
  CHECK(ratio(4, 1, M, "anti-mid", 4) == Approx(1.0 / 24).epsilon(1e-3));
  CHECK(ratio(3, 1, M, "aligned-code", 3) == Approx(0.25).epsilon(1e-2));
  CHECK(ratio(3, 1, M, "aligned-mid", 3) == Approx(-0.25).epsilon(1e-2));
  CHECK(ratio(2, 1, M, "aligned-code", 2) == Approx(0.5).epsilon(1e-2));
  CHECK(ratio(2, 1, M, "aligned-mid", 2) == Approx(-0.5).epsilon(1e-2));
  CHECK(small_m_constants(8).lo == kContSharpLower);
  CHECK(small_m_constants(4).hi == Approx(1.0 / 24));
  CHECK(small_m_constants(3).order == 3);
  // Sampled pairs at small M never leave [lo, hi]·U M^order (up to the next order).
  for (int dp : {2, 3, 4, 6}) {
    BoundsJobSpec s;
    s.dp = dp, s.U = 2, s.M = 0.02, s.pairs = 4000;
    const auto r = run_bounds_job(s);
    const auto c = small_m_constants(dp);
    const double scale = s.U * std::pow(s.M, c.order);
    CAPTURE(dp);
    // Next order: |e_cont| <= U M^4/4 (eq. 17) adds at most M^(4-order)/4 to the scaled range.
    const double slack = 0.01 * std::fabs(c.lo) + (c.order < 4 ? std::pow(s.M, 4 - c.order) / 4 : 0.0);
    CHECK(r.tot.min / scale >= c.lo - slack);
    CHECK(r.tot.max / scale <= c.hi + slack);
  }
}

TEST_CASE("Theorem 1 constant") {
  CHECK(theorem1_constant(4, 1, 1e-4) == Approx(0.5).epsilon(1e-4));
  CHECK(theorem1_constant(8, 1, 1e-4) == Approx(0.25).epsilon(1e-4));
  CHECK(theorem1_constant(8, 1, 1.0) > theorem1_constant(8, 1, 0.5));
  CHECK(std::isinf(theorem1_constant(4, 1, 1.5)));
  CHECK_THROWS_AS(theorem1_constant(3, 1, 0.1), memcap::UserError);
  // The constant really bounds |κ_A e^{-target} − 1| / (U M⁴) for pairs with M <= M0.
  const double M0 = 0.6, Cst = theorem1_constant(4, 2, M0);
  BoundsJobSpec s;
  s.dp = 4, s.U = 2, s.M = M0, s.pairs = 2000;
  for (std::int64_t i = 0; i < s.pairs; ++i) {
    double q[4], k[4];
    sample_bounds_pair(s, i, q, k);
    const Params p{4, 2, 1, 1};
    const PairErrors e = pair_errors(p, circular_codebook(4), q, k);
    REQUIRE(std::fabs(std::expm1(e.e_tot)) <= Cst * 2 * std::pow(e.M, 4));
  }
}

TEST_CASE("E1 job: no violations, sane ratios, independent of the thread count") {
  BoundsJobSpec s;
  s.dp = 4, s.U = 2, s.M = 0.75, s.pairs = 20000, s.seed = 7, s.keep = 50;
  omp_set_num_threads(1);
  const BoundsJobResult a = run_bounds_job(s);
  omp_set_num_threads(2);
  const BoundsJobResult b = run_bounds_job(s);
  CHECK(a.violations() == 0);
  CHECK(a.checked11 == s.pairs + static_cast<std::int64_t>(a.adv.size()));
  CHECK(a.frac11 < 1);
  CHECK(a.frac16 < 1);
  CHECK(a.frac20 < 1);
  CHECK(a.max_consistency < 1e-13);
  CHECK(a.tot.count == s.pairs);
  CHECK(a.tot.max_abs <= a.bound11);
  CHECK(a.tot.sum == b.tot.sum);  // bitwise, whatever the thread count
  CHECK(a.cont.min == b.cont.min);
  CHECK(a.fin.positive == b.fin.positive);
  CHECK(a.sample_e_tot == b.sample_e_tot);
  // β is irrelevant: the same scaled pairs at β = 0.5 give the same errors to rounding.
  s.beta = 0.5;
  const BoundsJobResult c = run_bounds_job(s);
  CHECK(c.tot.max_abs == Approx(a.tot.max_abs).epsilon(1e-12));
  // Large M: the bounds stop applying (ξ >= 1) and are counted as such, not as violations.
  BoundsJobSpec big = s;
  big.beta = 1, big.M = 1.5, big.pairs = 1000;
  const BoundsJobResult d = run_bounds_job(big);
  CHECK(d.checked11 == 0);
  CHECK(d.violations() == 0);
  CHECK(std::isinf(d.bound11));
}
