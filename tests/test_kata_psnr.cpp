// pSNR (spec kata.md §3.9): definition, Welch-scale ladder values and thresholds, softmax law, random-key
// estimates, and Monte-Carlo anchors (random keys: seed-dependent, spec quotes ±10%, we allow 15%;
// packed MUB/DeVore keys: deterministic).
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "kata/dictionary.hpp"
#include "kata/psnr.hpp"

using namespace memcap;
using namespace memcap::kata;

TEST_CASE("definition: a*^2 / sum of distractor a_j^2") {
  Eigen::VectorXd a(4);
  a << 0.1, 1.0, 0.2, -0.2;
  CHECK(psnr_from_coefficients(a, 1) == doctest::Approx(1.0 / 0.09));
  CHECK(std::isinf(psnr_from_coefficients(Eigen::VectorXd::Unit(3, 0), 0)));
  CHECK_THROWS_AS(psnr_from_coefficients(a, 4), UserError);
}

TEST_CASE("Welch-scale thresholds: linear 2p, PSD p^2+2p-2 (spec 3.9)") {
  const std::pair<int, double> tpsd[] = {{8, 78.3667}, {16, 286.2111}, {32, 1086.1144}, {64, 4222.0597},
                                         {128, 16638.0305}};
  for (auto [p, T] : tpsd) {
    CAPTURE(p);
    CHECK(std::abs(psd_threshold(p) - T) < 5e-5);  // quoted to 4 decimals
    CHECK(std::abs(psd_threshold(p) - (p * p + 2 * p - 2)) < 4.5 / p);  // p²+2p−2 + O(1/p) (≈ 4/p)
    CHECK(psnr_psd(p, psd_threshold(p)) == doctest::Approx(1.0).epsilon(1e-9));
  }
  CHECK(linear_threshold(64) == 128);
  CHECK(psnr_linear(64, 128) == doctest::Approx(1.0));
  const Rung lin = parse_rung("linear"), psd = parse_rung("psd"), deg4 = parse_rung("deg4");
  CHECK(largest_retrievable_T(lin, 64) == 127);
  CHECK(largest_retrievable_T(psd, 64) == 4222);
  CHECK(largest_retrievable_T(deg4, 64) == 16777468);
  CHECK(largest_retrievable_T(parse_rung("softmax", 0.125), 64) == 1202668);
  CHECK(largest_retrievable_T(parse_rung("softmax", 1.0), 64) == 0);  // none with T > p
  CHECK(lin.source() == "paper");
  CHECK(deg4.source() == "derived");
  CHECK(parse_rung("lorentz").source() == "derived");
}

TEST_CASE("ladder at p = 64 (spec 3.9 table)") {
  const struct { double T, lin, lor, psd, deg4, s8, s1; } rows[] = {
      {65, 64, 0.0606, 2.62e5, 4.40e12, 1.08e5, 0.112},
      {128, 1.000, 0.0266, 127.0, 2.05e6, 1.69e4, 0.0487},
      {1024, 0.0667, 0.00311, 4.547, 2.12e4, 1251, 0.00567},
      {4096, 0.01587, 7.7e-4, 1.032, 4359, 298.2, 0.00141},
      {4222, 0.01539, 7.5e-4, 1.00001, 4221, 289.2, 0.00137},
      {65536, 9.8e-4, 4.8e-5, 0.0626, 257, 18.37, 8.8e-5}};
  for (const auto& r : rows) {
    CAPTURE(r.T);
    CHECK(psnr_linear(64, r.T) == doctest::Approx(r.lin).epsilon(0.01));
    CHECK(psnr_lorentz(64, r.T) == doctest::Approx(r.lor).epsilon(0.02));
    CHECK(psnr_psd(64, r.T) == doctest::Approx(r.psd).epsilon(0.01));
    CHECK(psnr_degree(64, r.T, 4) == doctest::Approx(r.deg4).epsilon(0.01));
    CHECK(psnr_softmax(64, r.T, 0.125) == doctest::Approx(r.s8).epsilon(0.01));
    CHECK(psnr_softmax(64, r.T, 1.0) == doctest::Approx(r.s1).epsilon(0.02));
  }
  CHECK(psnr_psd(64, 4222) > 1.0);
  CHECK(psnr_psd(64, 4223) < 1.0);
  CHECK(std::isinf(psnr_linear(64, 64)));  // T <= p: orthogonal keys
}

TEST_CASE("softmax law (15) and exact (14)") {
  CHECK(softmax_threshold_approx(64, 0.125) == doctest::Approx(1.20261e6).epsilon(1e-5));
  CHECK(std::llround(softmax_threshold_approx(64, 0.125)) == 1202605);
  CHECK(softmax_threshold_approx(64, 0.5) == doctest::Approx(34.12).epsilon(1e-3));
  CHECK(softmax_threshold_approx(64, 1.0) == doctest::Approx(6.75).epsilon(1e-3));
  CHECK(softmax_threshold_approx(16, 0.25) == doctest::Approx(404.4).epsilon(1e-3));
  CHECK(softmax_threshold_approx(128, 1 / std::sqrt(128.0)) == doctest::Approx(9.086e8).epsilon(1e-3));
  // tiny τ: the log form stays finite where exp overflows
  CHECK(std::isfinite(log_psnr_softmax(64, 1000, 1e-4)));
  CHECK(std::isinf(psnr_softmax(64, 1000, 1e-4)));
}

TEST_CASE("random-key estimates") {
  CHECK(psnr_random_linear(64, 65) == doctest::Approx(1.0));
  CHECK(psnr_random_psd(64, 1409) == doctest::Approx(64.0 * 66 / (3 * 1408)));
  CHECK(psnr_random_psd(64, 64 * 66 / 3.0 + 1) == doctest::Approx(1.0));
  CHECK(psnr_random_degree(10, 11, 4) == doctest::Approx(10.0 * 12 * 14 * 16 / (105 * 10)));
  CHECK(psnr_random_block(64, 1, 100) == doctest::Approx(psnr_random_psd(64, 100)));
  CHECK(psnr_random_orthant(11) == doctest::Approx(M_PI * M_PI / 10));
  // softmax estimate: E e^{cz} → 1 as c → 0, so pSNR → e^{2/τ}/(T−1) ... at τ large it is ~1/(T−1)
  CHECK(psnr_random_softmax(32, 101, 1e6) == doctest::Approx(0.01).epsilon(1e-5));
}

TEST_CASE("Monte-Carlo anchors, random keys, p = d = 32, 3 trials (spec 3.9; 15% tolerance)") {
  const struct { const char* map; std::int64_t T; double want; } rows[] = {
      {"linear", 64, 0.502}, {"linear", 256, 0.126}, {"m1", 128, 2.95},     {"m2", 64, 2.27},
      {"lorentz-ray", 64, 0.0617}, {"m1", 512, 0.717}, {"sigma2:eps=0", 128, 0.405}};
  for (const auto& r : rows) {
    CAPTURE(r.map);
    CAPTURE(r.T);
    const auto mc = psnr_monte_carlo(FeatureMap::parse(r.map, 32), r.T, 3, 100000, 1);
    CHECK(mc.samples == 3 * r.T);
    CHECK(mc.median == doctest::Approx(r.want).epsilon(0.15));
  }
}

TEST_CASE("packed keys at d = 64: MUB s = 32 and DeVore s = 8, r = 2 (deterministic)") {
  const Eigen::MatrixXd M = mub_dictionary(32);
  const auto psd = psnr_monte_carlo(FeatureMap::parse("m1", 64), 1056, 1, 100000, 0, M);
  CHECK(psd.median == doctest::Approx(3.88).epsilon(5e-3));
  CHECK(psd.min == doctest::Approx(1.00).epsilon(5e-3));
  const auto lin = psnr_monte_carlo(FeatureMap::parse("linear", 64), 1056, 1, 100000, 0, M);
  CHECK(lin.median == doctest::Approx(0.0625).epsilon(5e-3));
  const Eigen::MatrixXd D = devore_dictionary(8, 2);
  CHECK(psnr_monte_carlo(FeatureMap::parse("orthant:eps=0", 64), 512, 1, 100000, 0, D).median ==
        doctest::Approx(0.0714).epsilon(5e-3));
  CHECK(psnr_monte_carlo(FeatureMap::parse("m1", 64), 512, 1, 100000, 0, D).median ==
        doctest::Approx(1.26).epsilon(5e-3));
}

TEST_CASE("bad input: vacuous p, T, tau") {
  CHECK_THROWS_AS(psnr_linear(1, 10), UserError);
  CHECK_THROWS_AS(psnr_psd(64, 0), UserError);
  CHECK_THROWS_AS(psnr_softmax(64, 100, 0), UserError);
  CHECK_THROWS_AS(parse_rung("cubic"), UserError);
  CHECK_THROWS_AS(parse_rung("softmax", -1), UserError);
  CHECK_THROWS_AS(largest_retrievable_T(parse_rung("psd"), 1), UserError);
  CHECK_THROWS_AS(psnr_monte_carlo(FeatureMap::parse("m1", 8), 1, 1, 1, 0), UserError);
}

TEST_CASE("parse_rung: deg<k> takes k in 1..kMaxRungDegree") {
  CHECK(parse_rung("deg999").degree == 999);
  for (const char* s : {"deg0", "deg1000", "deg99999", "deg9999999999", "deg"}) {
    CAPTURE(s);
    CHECK_THROWS_AS(parse_rung(s), UserError);
  }
}
