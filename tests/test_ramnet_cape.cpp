// CAPE shift vs RoPE rotation (spec ramnet.md §1.8, paper A.6, E9, §6 T13): the flat distribution of case D,
// TV at t = 1..5 and the zeros at t = 4, 8, 16, frequencies ν_u = 2π/dp^{u+1}, factor-0 waves coinciding,
// RoPE keeping product form while CAPE does not, and the divergences' basic properties.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>

#include "core/error.hpp"
#include "ramnet/cape.hpp"

using namespace memcap::ramnet;
using doctest::Approx;

namespace {
const double kQ[4] = {0.5, 0.2, -0.4, 0.3};  // q of T2 case D
}

TEST_CASE("T13: unshifted flat distribution of case D (digit 0 least significant)") {
  const double want[16] = {0.06049927, 0.04481896, 0.02225644, 0.03004305, 0.12183057, 0.0902543,
                           0.04481896, 0.06049927, 0.1346436,  0.09974643, 0.04953261, 0.06686203,
                           0.06686203, 0.04953261, 0.02459717, 0.0332027};
  const auto r = dense_distribution(factor_table(circular_codebook(4), 1.0, kQ, 2));
  REQUIRE(r.size() == 16);
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(r(i) == Approx(want[i]).epsilon(1e-6));
  }
  // CAPE at t = 0 is the identity, and so is RoPE.
  const CapeRope c0 = compare_cape_rope(4, 2, 1.0, kQ, 0);
  CHECK(c0.tv < 1e-15);
  CHECK((c0.cape - r).cwiseAbs().maxCoeff() < 1e-16);
}

TEST_CASE("T13: TV between CAPE and RoPE, zeros at multiples of dp^{U-1}") {
  const std::int64_t ts[] = {1, 2, 3, 4, 5, 8, 16};
  const double want[] = {0.084795, 0.118327, 0.096042, 0, 0.084795, 0, 0};
  for (int i = 0; i < 7; ++i) {
    CAPTURE(ts[i]);
    const CapeRope c = compare_cape_rope(4, 2, 1.0, kQ, ts[i]);
    CHECK(c.tv == Approx(want[i]).epsilon(1e-5).scale(1e-6));
    CHECK(c.logit_gap[0] < 1e-12);  // factor-0 waves always coincide
    CHECK(c.tc_rope < 1e-12);       // RoPE-rotated: still a product distribution
    if (want[i] == 0) {
      CHECK(c.tv < 1e-12);
      CHECK(c.js < 1e-15);
      CHECK(c.tc_cape < 1e-12);
      CHECK(c.logit_gap[1] < 1e-12);
    } else {
      CHECK(c.js > 0);
      CHECK(c.js <= std::log(2.0));
      CHECK(c.logit_gap[1] > 1e-3);
    }
  }
  // t = 1: the shift borrows from digit 0 into digit 1, so the CAPE distribution is not a product.
  CHECK(compare_cape_rope(4, 2, 1.0, kQ, 1).tc_cape > 1e-4);
}

TEST_CASE("zeros at t = multiples of dp^{U-1} for other (dp, U)") {
  const double x[6] = {0.9, -0.3, 0.2, 1.1, -0.7, -0.4};
  for (int dp : {2, 3, 5})
    for (int U : {1, 2, 3}) {
      CAPTURE(dp);
      CAPTURE(U);
      const std::int64_t period = static_cast<std::int64_t>(std::pow(dp, U - 1));
      for (std::int64_t m = 1; m <= 3; ++m) CHECK(compare_cape_rope(dp, U, 1.3, x, m * period).tv < 1e-12);
      if (U > 1) CHECK(compare_cape_rope(dp, U, 1.3, x, 1).tv > 1e-6);
    }
}

TEST_CASE("CAPE frequencies and the RoPE rotation") {
  const auto nu = cape_frequencies(4, 5);
  REQUIRE(nu.size() == 5);
  for (int u = 0; u < 5; ++u) CHECK(nu[u] == Approx(2 * std::numbers::pi / std::pow(4.0, u + 1)).epsilon(1e-15));
  CHECK(nu[0] == Approx(std::numbers::pi / 2));
  CHECK(nu[4] == Approx(0.006135923151542565).epsilon(1e-14));
  // Rotating by t = dp^{u+1} turns block u a full circle.
  const auto y = rope_rotate(kQ, 4, 2, 16);
  CHECK(y[2] == Approx(kQ[2]).epsilon(1e-14));
  CHECK(y[3] == Approx(kQ[3]).epsilon(1e-14));
  // Norms are kept.
  const auto z = rope_rotate(kQ, 4, 2, 3.7);
  CHECK(std::hypot(z[0], z[1]) == Approx(std::hypot(kQ[0], kQ[1])));
}

TEST_CASE("huge shifts: t is reduced modulo each block's period, so CAPE = RoPE stays exact at t = 0 mod dp^(U-1)") {
  // t = 4^20 (a multiple of dp^{U-1} = 4) and 1e12 (= 0 mod 4): the angle ν_u t used to lose its low bits.
  for (const std::int64_t t : {std::int64_t(1) << 40, std::int64_t(1000000000000)}) {
    CAPTURE(t);
    const CapeRope r = compare_cape_rope(4, 2, 1.0, kQ, t);
    CHECK(r.tv < 1e-15);
    CHECK(r.logit_gap[0] < 1e-14);
    const auto y = rope_rotate(kQ, 4, 2, static_cast<double>(t));
    const auto z = rope_rotate(kQ, 4, 2, static_cast<double>(t % 16));
    for (int j = 0; j < 4; ++j) CHECK(y[j] == z[j]);
  }
}

TEST_CASE("cape_shift, TV, JS and total correlation basics") {
  Eigen::VectorXd r(4);
  r << 0.1, 0.2, 0.3, 0.4;
  const Eigen::VectorXd s = cape_shift(r, 1);
  CHECK(s(0) == 0.4);
  CHECK(s(1) == 0.1);
  CHECK((cape_shift(r, -3) - s).norm() == 0);
  CHECK((cape_shift(r, 9) - s).norm() == 0);
  Eigen::VectorXd a(2), b(2);
  a << 1, 0;
  b << 0, 1;
  CHECK(js_divergence(a, b) == Approx(std::log(2.0)));
  CHECK(total_variation(a, b) == 1.0);
  CHECK(js_divergence(r, r) == 0.0);
  // A product distribution has total correlation 0; the shifted one of case D does not.
  const auto d = dense_distribution(factor_table(circular_codebook(4), 1.0, kQ, 2));
  CHECK(total_correlation(d, 4, 2) < 1e-14);
  CHECK_THROWS_AS(total_correlation(r, 4, 2), memcap::UserError);
}
