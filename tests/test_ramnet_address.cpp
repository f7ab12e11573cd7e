// Address space, codebook, factor tables and the factorised κ_A (spec ramnet.md §1.1–1.3, §2.1, §6 T1–T3, T14).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "ramnet/address.hpp"

using namespace memcap::ramnet;

TEST_CASE("T1: factor probabilities, dp=4, beta=1") {
  const auto C = circular_codebook(4);
  double p[4];
  factor_log_probs(C, 1.0, 0.5, 0.2, p);
  const double want1[4] = {0.383835465547, 0.284352306621, 0.141205176567, 0.190607051265};
  for (int j = 0; j < 4; ++j) CHECK(std::exp(p[j]) == doctest::Approx(want1[j]).epsilon(1e-11));
  factor_log_probs(C, 1.0, 0.3, -0.1, p);
  const double want2[4] = {0.329178829301, 0.220655168011, 0.180657171876, 0.269508830811};
  for (int j = 0; j < 4; ++j) CHECK(std::exp(p[j]) == doctest::Approx(want2[j]).epsilon(1e-11));
}

// Direct dp^U sum |A| Σ_a r(a) w(a) from dense distributions: the definition κ_A is factorised from.
static double kappa_direct(const Params& p, const double* q, const double* k) {
  const auto C = circular_codebook(p.dp);
  const auto r = dense_distribution(factor_table(C, p.beta_r, q, p.U));
  const auto w = dense_distribution(factor_table(C, p.beta_w, k, p.U));
  return static_cast<double>(r.size()) * r.dot(w);
}

TEST_CASE("T2: kappa_A cases A-I, factorised and direct") {
  struct Case { int dp, U; double br, bw; std::vector<double> q, k; double kappa; };
  const std::vector<Case> cases = {
      {4, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06389730627},
      {4, 1, 1, 1, {1, 0}, {0.6, 0.8}, 1.22036686784},
      {4, 1, .5, .5, {1, 0}, {1, 0}, 1.12356852075},
      {4, 2, 1, 1, {0.5, 0.2, -0.4, 0.3}, {0.3, -0.1, -0.2, 0.5}, 1.17546699091},
      {8, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.06211939996},
      {3, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.07779820989},
      {2, 1, 1, 1, {0.5, 0.2}, {0.3, -0.1}, 1.13462055634},
      {4, 1, .7, 1.3, {0.5, 0.2}, {0.3, -0.1}, 1.05848238480},
      {4, 1, 1, 1, {2, 1}, {1.5, -0.5}, 1.91744371971},
  };
  for (const auto& c : cases) {
    CAPTURE(c.dp);
    CAPTURE(c.kappa);
    Params p{c.dp, c.U, c.br, c.bw};
    const auto C = circular_codebook(c.dp);
    const double k = std::exp(log_kappa_A(p, C, c.q.data(), c.k.data()));
    CHECK(k == doctest::Approx(c.kappa).epsilon(1e-11));
    CHECK(kappa_direct(p, c.q.data(), c.k.data()) == doctest::Approx(c.kappa).epsilon(1e-11));
  }
  // dp = 4 closed form (§2.2) for case A.
  const double a = 2 * (std::cosh(0.8) + std::cosh(0.1)) /
                   ((std::cosh(0.5) + std::cosh(0.2)) * (std::cosh(0.3) + std::cosh(0.1)));
  CHECK(a == doctest::Approx(1.06389730627).epsilon(1e-11));
}

TEST_CASE("T3: log Z_4((0.8, 0.1))") {
  const auto C = circular_codebook(4);
  CHECK(log_Z(C, 0.8, 0.1) == doctest::Approx(0.1580455624976551).epsilon(1e-15));
  CHECK(std::exp(log_Z(C, 0.8, 0.1)) == doctest::Approx(1.17121955718032).epsilon(1e-14));
}

TEST_CASE("T14: extreme beta stays finite in the log domain") {
  const auto C = circular_codebook(4);
  Params p{4, 1, 400, 400};
  const double q[2] = {1, 0}, kneg[2] = {-1, 0};
  CHECK(log_kappa_A(p, C, q, kneg) == doctest::Approx(-797.2274112777602).epsilon(1e-14));
  CHECK(log_kappa_A(p, C, q, q) == doctest::Approx(1.3862943611198943).epsilon(1e-14));
}

TEST_CASE("flat index order: digit 0 least significant, round trip") {
  int d[3];
  for (std::int64_t i = 0; i < 64; ++i) {
    digits_of(i, 4, 3, d);
    CHECK(flat_index(d, 4) == i);
    CHECK(d[0] == i % 4);
  }
  // Dense distribution sums to one and matches address_log_prob.
  const auto C = circular_codebook(4);
  const double q[4] = {0.5, 0.2, -0.4, 0.3};
  const auto t = factor_table(C, 1.0, q, 2);
  const auto r = dense_distribution(t);
  CHECK(r.sum() == doctest::Approx(1.0).epsilon(1e-14));
  for (std::int64_t i = 0; i < 16; ++i) CHECK(std::exp(address_log_prob(t, i)) == doctest::Approx(r(i)).epsilon(1e-14));
  CHECK(r(8) == doctest::Approx(0.1346436).epsilon(1e-6));  // T13 / T12: flat 8 = (0, 2)
}

TEST_CASE("bad sizes are user errors") {
  CHECK_THROWS_AS(address_count(1, 3), memcap::UserError);
  CHECK_THROWS_AS(address_count(4, 0), memcap::UserError);
  CHECK_THROWS_AS(address_count(4, 40), memcap::UserError);
  CHECK_THROWS_AS(validate(Params{4, 2, 0.0, 1.0}), memcap::UserError);
  CHECK_THROWS_AS(validate(Params{4, 2, 1.0, NAN}), memcap::UserError);
  CHECK_THROWS_AS(require_dense(Params{4, 14, 1, 1}, 8.0, "test"), memcap::UserError);
  CHECK_NOTHROW(require_dense(Params{4, 5, 1, 1}, 8.0, "test"));
}

TEST_CASE("log_kappa_matrix equals the per-pair factorised kernel") {
  Params p{4, 3, 0.8, 1.1};
  const auto C = circular_codebook(4);
  Eigen::MatrixXd Q(5, 6), K(7, 6);
  for (int i = 0; i < Q.size(); ++i) Q.data()[i] = std::sin(0.7 * i + 0.3);
  for (int i = 0; i < K.size(); ++i) K.data()[i] = std::cos(1.3 * i - 0.2);
  const auto L = log_kappa_matrix(p, C, Q, K);
  for (int i = 0; i < 5; ++i)
    for (int s = 0; s < 7; ++s) {
      Eigen::VectorXd q = Q.row(i).transpose(), k = K.row(s).transpose();
      CHECK(L(i, s) == doctest::Approx(log_kappa_A(p, C, q.data(), k.data())).epsilon(1e-13));
    }
}
