// §3.4 bounds: hand-computed values of the closed forms, the exact product identity of
// Theorem 4.3, the Welch bound for any Φ, operator norms and the L_bil constant.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "margin/bounds.hpp"

using namespace memcap;
using namespace memcap::margin;

namespace {
GeometryStats fake_stats() {
  GeometryStats s;
  s.facts = 256;
  s.values = 256;
  s.dim = 64;
  s.k_min_diag = 0.7;
  s.k_max_diag = 1.4;
  s.k_max_off = 0.3;
  s.e_k = 4.0;
  s.e_k_trunc = 3.9;
  s.v_min = 0.5;
  s.v_max = 1.2;
  s.e_v = 9.0;
  s.e_v_trunc = 8.5;
  s.b_y = 2.0;
  s.l_v = 100.0;
  s.kappa = 0.2;
  s.kappa_abs = 0.25;
  s.kappa_trunc = 0.21;
  s.trace = 256.0;
  s.diag_sq_sum = 300.0;
  return s;
}
}  // namespace

TEST_CASE("closed forms with C = 1, delta = 0.5 (hand-computed)") {
  const GeometryStats s = fake_stats();
  const double m = 512, d = 64, F = 256;
  const BoundSet b = evaluate_bounds(s, m, d);
  const double L = std::log(F * F / 0.5);
  CHECK(b.log_term == doctest::Approx(L));
  CHECK(b.eq9 == doctest::Approx(1.0 - std::sqrt(F * std::log(F) / (m * d))));
  CHECK(b.ladder_rkrv == doctest::Approx(1.0 - std::sqrt(F * L / (m * d))));
  CHECK(b.ladder_akav == doctest::Approx(0.7 * 0.5 - 2.0 * 3.0 * 0.2));
  CHECK(b.eq44_abs == doctest::Approx(0.35 - 6.0 * 0.25));
  CHECK(b.signal == doctest::Approx(0.35 - 0.3 * 1.2));
  CHECK(b.eq43 == doctest::Approx(0.35 - 0.36 - std::sqrt(3.9 * 8.5) * 0.21));
  CHECK(b.ladder_akrv == doctest::Approx(0.7 * (1 - std::sqrt(L / 63.0)) - 0.3 - 2.0 * std::sqrt(L / 64.0)));
  CHECK(b.ladder_rkav == doctest::Approx((1 - std::sqrt(L / m)) * 0.5 - (2.0 + 3.0 * 10.0) * std::sqrt(L / m)));
  CHECK(b.welch_ecol_lower == doctest::Approx((256.0 * 256.0 / 256.0 - 300.0) / 256.0));  // r = min(m, F) = 256
  CHECK(b.info_bits == doctest::Approx(256.0 * 8.0));
  CHECK(b.info_min_params == doctest::Approx(256.0 * 8.0 / 64.0));
  CHECK(std::isnan(b.noisy_code));
  // Theorem 4.3 product identity: P_key P_val P_align √(F log F/(md)) = √E_K √E_v κ (exact).
  CHECK(b.p_key * b.p_val * b.p_align * std::sqrt(F * std::log(F) / (m * d)) == doctest::Approx(2.0 * 3.0 * 0.2));
  CHECK(b.thm43 == doctest::Approx(0.5 * b.s_sig - 1.2));
  CHECK(b.s_sig == doctest::Approx(0.35 / (1 - std::sqrt(std::log(F) / d))));
}

TEST_CASE("noisy-query terms (release code's explicit constants)") {
  const GeometryStats s = fake_stats();
  NoiseInputs n{0.1, 7.0, 0.3, 0.1};
  const BoundSet b = evaluate_bounds(s, 512, 64, {}, &n);
  const double F = 256, Lc = std::log(4 * F * F / 0.5), L = std::log(F * F / 0.5);
  CHECK(b.noisy_degradation == doctest::Approx(7.0 * 0.1 * (1 + 2 * std::sqrt(2.0) * std::sqrt(F * Lc / 64))));
  CHECK(b.noisy_code == doctest::Approx(b.noisy_clean - b.noisy_degradation));
  CHECK(b.eq74 == doctest::Approx(0.3 - 7.0 * 0.1 * std::sqrt(F * L / 64)));
  // Degradation is linear in ε.
  NoiseInputs n2 = n;
  n2.eps = 0.2;
  CHECK(evaluate_bounds(s, 512, 64, {}, &n2).noisy_degradation == doctest::Approx(2 * b.noisy_degradation));
}

TEST_CASE("operator norm and L_bil") {
  Eigen::MatrixXd a(2, 2);
  a << 3, 0, 0, 4;
  CHECK(operator_norm(a) == doctest::Approx(4.0));
  const Eigen::MatrixXd g = rng::normal_matrix(20, 7, 1, rng::kUser);
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(g);
  CHECK(operator_norm(g) == doctest::Approx(svd.singularValues()(0)).epsilon(1e-10));
  // m = 1, d = 2, A0 = [1 0], A1 = [0 1], key e1+e2 over √2: g(k) = ½, ‖A‖_op = 1, ‖A z‖_∞ = 1/√2.
  Eigen::MatrixXd a0(1, 2), a1(1, 2), k(1, 2);
  a0 << 1, 0;
  a1 << 0, 1;
  k << 1 / std::sqrt(2.0), 1 / std::sqrt(2.0);
  CHECK(bilinear_lipschitz(a0, a1, k, Eigen::MatrixXd()) == doctest::Approx(0.5 * 2 / std::sqrt(2.0)));
  CHECK_THROWS_AS(bilinear_lipschitz(a0, Eigen::MatrixXd::Ones(2, 2), k, Eigen::MatrixXd()), UserError);
}

TEST_CASE("Welch: ||Phi Phi^T||_F^2 >= tr^2/m for any Phi (Lemma B.34)") {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const int F = 30, m = 5 + 3 * static_cast<int>(seed);
    const Eigen::MatrixXd phi = rng::normal_matrix(F, m, seed, rng::kUser);
    const Eigen::MatrixXd K = phi * phi.transpose();
    CHECK(K.squaredNorm() >= K.trace() * K.trace() / m * (1 - 1e-12));
  }
}

TEST_CASE("bounds validate") {
  CHECK_THROWS_AS(evaluate_bounds(fake_stats(), 0, 64), UserError);
  CHECK_THROWS_AS(evaluate_bounds(fake_stats(), 64, 1), UserError);
}
