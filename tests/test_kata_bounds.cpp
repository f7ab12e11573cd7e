// Worked values of spec kata.md §3.2–3.5 and Table 1 (§3.8): Welch W1–W4, Gerzon, Rankin wall in both
// conventions, PSD cap bounds (paper and exact incomplete-beta form), random-code estimate.
#include <doctest/doctest.h>

#include <boost/math/special_functions/beta.hpp>
#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/bounds.hpp"
#include "kata/dictionary.hpp"

using namespace memcap;
using namespace memcap::kata;

TEST_CASE("Welch worked values (spec 3.2)") {
  CHECK(welch_mu_sq(128, 130) == doctest::Approx(1.211240e-4).epsilon(1e-6));
  CHECK(welch_mu(128, 130) == doctest::Approx(0.011006).epsilon(1e-4));
  CHECK(std::abs(welch_mu(128, 130) - 0.011006) < 5e-7);  // quoted to 6 decimals
  CHECK(welch_max_keys_unsquared(128, 0.01) == doctest::Approx(129.6467).epsilon(1e-6));
  CHECK(std::floor(welch_max_keys_unsquared(128, 0.01)) == 129);
  CHECK(welch_min_dim(1e5, 0.05) == doctest::Approx(398.41).epsilon(1e-4));
  CHECK(welch_min_dim_ceil(1e5, 0.05) == 399);
  CHECK(welch_min_dim(1e5, 0.20) == doctest::Approx(24.994).epsilon(1e-4));
  CHECK(welch_min_dim_ceil(1e5, 0.20) == 25);
  CHECK(welch_mu(6, 12) == doctest::Approx(0.301511).epsilon(1e-6));
  CHECK(welch_mu(64, 64) == 0.0);  // T <= D: orthonormal vectors attain 0
  // the MUB reference table's Welch column
  const std::pair<int, double> mubw[] = {{2, 0.316228}, {3, 0.301511}, {4, 0.280976}, {5, 0.262613},
                                         {8, 0.222027}, {16, 0.166359}, {32, 0.121210}};
  for (auto [s, w] : mubw) CHECK(welch_mu(2 * s, s * (s + 1)) == doctest::Approx(w).epsilon(1e-5));
  // W3 (squared) and the singularities: "no bound" is +inf, never NaN
  CHECK(welch_max_keys_squared(128, 1e-4) == doctest::Approx(128 * (1 - 1e-4) / (1 - 128e-4)));
  CHECK(std::isinf(welch_max_keys_squared(128, 1.0 / 128)));
  CHECK(std::isinf(welch_max_keys_unsquared(128, 1 / std::sqrt(128.0) + 1e-12)));
  // W2 and W4 are inverse to each other: at T = W2(D, ε), W4 gives back D
  CHECK(welch_min_dim(welch_max_keys_unsquared(50, 0.1), 0.1) == doctest::Approx(50.0).epsilon(1e-12));
  // the bound holds for an actual code: random 300 vectors in R^20
  const Eigen::MatrixXd V = rng::sphere_rows(300, 20, 1, rng::kDictionary);
  CHECK(coherence(V) >= welch_mu(20, 300));
  CHECK(gerzon_real(6) == 21);
  CHECK(gerzon_complex(6) == 36);
}

TEST_CASE("Welch bad input") {
  CHECK_THROWS_AS(welch_mu_sq(0, 10), UserError);
  CHECK_THROWS_AS(welch_mu_sq(10, 0), UserError);
  CHECK_THROWS_AS(welch_mu_sq(10, -5), UserError);
  CHECK_THROWS_AS(welch_max_keys_unsquared(10, -0.1), UserError);
  CHECK_THROWS_AS(welch_max_keys_squared(10, NAN), UserError);
  CHECK_THROWS_AS(welch_min_dim(0, 0.1), UserError);
  CHECK_THROWS_AS(welch_min_dim(100, 1.5), UserError);
}

TEST_CASE("Rankin wall values (spec 3.3), both conventions") {
  const std::pair<double, double> vals[] = {{0, 2}, {0.10, 2.25}, {0.25, 3}, {0.40, 6}, {0.45, 11}, {0.49, 51}};
  for (auto [eps, w] : vals) {
    CAPTURE(eps);
    CHECK(rankin_wall(128, eps, LorentzConvention::Ambient) == doctest::Approx(w).epsilon(1e-12));
    CHECK(rankin_wall(128, eps, LorentzConvention::Raw) == doctest::Approx(w).epsilon(1e-12));
  }
  CHECK(rankin_wall_keys(128, 0.45, LorentzConvention::Ambient) == 11);
  CHECK(rankin_wall_keys(128, 0.10, LorentzConvention::Ambient) == 2);
  // dimension caps: ambient d (spatial d−1) vs raw d+1
  CHECK(rankin_wall(4, 0.49, LorentzConvention::Ambient) == 4);
  CHECK(rankin_wall(4, 0.49, LorentzConvention::Raw) == 5);
  // boundary ε = 1/2: cross-polytope 2·(spatial dim); d_head = 128 raw gives 256 keys
  CHECK(rankin_wall(128, 0.5, LorentzConvention::Raw) == 256);
  CHECK(rankin_wall(128, 0.5, LorentzConvention::Ambient) == 254);
  // the regular simplex in R^{d−1} meets the strict bound: d keys with interference (1 − 1/(d−1))/2 < 1/2
  const int d = 5;
  const double eps_simplex = (1 - 1.0 / (d - 1)) / 2;
  CHECK(rankin_wall(d, eps_simplex, LorentzConvention::Ambient) == doctest::Approx(d));
  CHECK_THROWS_AS(rankin_wall(2, 0.1, LorentzConvention::Ambient), UserError);
  CHECK_THROWS_AS(rankin_wall(8, 0.6, LorentzConvention::Ambient), UserError);
  CHECK_THROWS_AS(rankin_wall(8, -0.1, LorentzConvention::Raw), UserError);
  CHECK_THROWS_AS(parse_lorentz_convention("spatial"), UserError);
}

TEST_CASE("PSD cap bounds table (spec 3.4)") {
  const struct { int p; double eps, paper, exact; } rows[] = {
      {16, 0.25, 4.33, 24.4},    {32, 0.25, 43.2, 328.2},       {64, 0.10, 13.8, 97.3},
      {64, 0.25, 4311, 44890},   {64, 0.50, 1.519e9, 2.177e10}, {128, 0.10, 402.3, 3826}};
  for (const auto& r : rows) {
    CAPTURE(r.p);
    CAPTURE(r.eps);
    CHECK(psd_cap_lb_paper(r.p, r.eps) == doctest::Approx(r.paper).epsilon(2e-3));
    CHECK(psd_cap_lb_exact(r.p, r.eps) == doctest::Approx(r.exact).epsilon(2e-3));
    CHECK(psd_cap_lb_exact(r.p, r.eps) >= psd_cap_lb_paper(r.p, r.eps));  // Lemma 6: exact cap is sharper
  }
  CHECK(psd_cap_lb_paper(64, 1.0 / 64) == doctest::Approx(0.82).epsilon(5e-3));  // vacuous (< 1)
  // cap fraction: ½ I_{1−a²}((p−1)/2, ½) <= (1−a²)^{(p−1)/2}; p = 3 is exact: (1−a)/2
  CHECK(cap_fraction(3, 0.3) == doctest::Approx(0.35).epsilon(1e-14));
  CHECK(cap_fraction(40, 0.4) <= std::pow(1 - 0.16, 19.5));
  // the log-space series agrees with boost where both work, and carries on where ibeta underflows
  const double l = log_cap_fraction(20000, 0.5);
  CHECK(std::isfinite(l));
  CHECK(l < -2800);
  CHECK(l <= 0.5 * 19999 * std::log(0.75) + 1e-9);
  CHECK(std::isinf(psd_cap_lb_paper(20000, 0.5)));
  CHECK(std::isfinite(log_psd_cap_lb_paper(20000, 0.5)));
  // Welch ceiling below 1/p, lifted Welch
  CHECK(psd_welch_ceiling(64, 0.01) == doctest::Approx(64 * 0.99 / 0.36));
  CHECK(std::isinf(psd_welch_ceiling(64, 1.0 / 64)));
  CHECK(psd_lifted_welch_mu_sq(4, 20) == doctest::Approx(welch_mu_sq(10, 20)));
  // bad input
  CHECK_THROWS_AS(psd_cap_lb_paper(1, 0.25), UserError);
  CHECK_THROWS_AS(psd_cap_lb_exact(64, 1.0), UserError);
  CHECK_THROWS_AS(psd_cap_lb_exact(64, -0.1), UserError);
}

TEST_CASE("random-code estimate and Table 1 (spec 3.5, 3.8)") {
  CHECK(random_code_dim(1e5, 0.05) == doctest::Approx(18420.7).epsilon(1e-5));
  CHECK(random_code_dim(1e5, 0.20) == doctest::Approx(1151.3).epsilon(1e-4));
  const auto t = table1();
  REQUIRE(t.size() == 2);
  CHECK(t[0].welch_d == 399);
  CHECK(t[1].welch_d == 25);
  CHECK(t[0].random_d == 18421);
  CHECK(t[1].random_d == 1151);
  CHECK((t[0].mub_s == 401 && t[0].mub_d == 802));
  CHECK((t[1].mub_s == 317 && t[1].mub_d == 634));
  CHECK((t[0].devore_s == 47 && t[0].devore_r == 2 && t[0].devore_d == 2209));
  CHECK((t[1].devore_s == 19 && t[1].devore_r == 3 && t[1].devore_d == 361));
  CHECK_THROWS_AS(table1_entry(1e5, 0.0), UserError);
  CHECK_THROWS_AS(table1_entry(1, 0.1), UserError);
}
