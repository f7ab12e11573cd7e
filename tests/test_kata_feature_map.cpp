// Feature maps of spec kata.md §2: <ψ(x),ψ(y)> equals the closed-form kernel for every map on random
// inputs (tolerance 1e-12 relative: double rounding of sums of ~n_ψ products), worked values, widths.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/feature_map.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {
constexpr double kRelTol = 1e-12;  // explicit features vs closed form, double precision
double rel_err(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) { return (a - b).norm() / std::max(1e-300, b.norm()); }
}  // namespace

TEST_CASE("every map: <psi(x),psi(y)> equals the closed-form kernel on random inputs") {
  const std::vector<std::string> specs = {"linear",     "orthant",        "orthant:eps=0",   "orthant:eps=0.3",
                                          "lorentz",    "lorentz-lift",   "lorentz-ray",     "m1",
                                          "m2",         "m4",             "m2:eps=1e-4",     "m4:eps=0.3",
                                          "sigma1",     "sigma2",         "sigma4",          "sigma2:eps=0",
                                          "sigma4:eps=0.3", "sigma4:eps=0,scale=1", "deg2", "deg4", "deg6"};
  for (std::int64_t d : {8, 12}) {
    const Eigen::MatrixXd X = rng::normal_matrix(7, d, 11, rng::kUser, 0);
    const Eigen::MatrixXd Y = rng::normal_matrix(5, d, 11, rng::kUser, 1000);
    for (const auto& s : specs) {
      if ((s.rfind("m4", 0) == 0 || s.rfind("sigma4", 0) == 0) && d % 4 != 0) continue;
      CAPTURE(s);
      CAPTURE(d);
      const auto f = FeatureMap::parse(s, d);
      const Eigen::MatrixXd PX = f.apply(X), PY = f.apply(Y);
      CHECK(PX.cols() == f.feature_dim());
      CHECK(rel_err(PX * PY.transpose(), f.kernel_matrix(X, Y)) < kRelTol);
      // error scale of a dot product: ‖ψ(x)‖‖ψ(y)‖ (the sum may cancel far below it)
      CHECK(std::abs(f.kernel(X.row(0).transpose(), Y.row(1).transpose()) - PX.row(0).dot(PY.row(1))) <
            kRelTol * PX.row(0).norm() * PY.row(1).norm());
      const Eigen::VectorXd diag = f.kernel_diag(X);
      CHECK((diag - PX.rowwise().squaredNorm()).norm() < kRelTol * diag.norm());
    }
  }
}

TEST_CASE("cone maps give nonnegative kernels (A1)") {
  const Eigen::MatrixXd X = rng::normal_matrix(20, 8, 3, rng::kUser);
  for (const char* s : {"orthant", "lorentz", "lorentz-lift", "lorentz-ray", "m1", "m2", "sigma2", "deg4"}) {
    CAPTURE(s);
    CHECK(FeatureMap::parse(s, 8).kernel_matrix(X, X).minCoeff() >= -1e-12);
  }
}

TEST_CASE("packed PSD worked example (spec 2.4)") {
  const auto f = FeatureMap::parse("m1", 3);
  Eigen::MatrixXd u(2, 3);
  u << 1, 2, 3, 0.5, -1, 2;
  const Eigen::MatrixXd P = f.apply(u);
  const double pu[] = {1, 4, 9, 2.828427, 4.242641, 8.485281};
  const double pv[] = {0.25, 1, 4, -0.707107, 1.414214, -2.828427};
  for (int i = 0; i < 6; ++i) {
    CHECK(P(0, i) == doctest::Approx(pu[i]).epsilon(1e-6));
    CHECK(P(1, i) == doctest::Approx(pv[i]).epsilon(1e-6));
  }
  CHECK(P.row(0).dot(P.row(1)) == doctest::Approx(20.25).epsilon(1e-14));
}

TEST_CASE("KATA-Lorentz (L3) worked example (spec 2.3)") {
  const auto f = FeatureMap::parse("lorentz", 3);
  Eigen::MatrixXd x(2, 3);
  x << 0.6, 0, 0.8, 0, 1, 0;
  const Eigen::MatrixXd P = f.apply(x);
  CHECK(P(0, 0) == doctest::Approx(0.6));
  CHECK(P(0, 2) == doctest::Approx(0.984).epsilon(1e-12));
  CHECK(P(1, 1) == doctest::Approx(1.0));
  CHECK(P(1, 2) == doctest::Approx(1.0));
  CHECK(f.kernel(x.row(0).transpose(), x.row(1).transpose()) == doctest::Approx(0.984).epsilon(1e-12));
}

TEST_CASE("Lorentz ray on unit vectors: kernel (1+z)/2 and unit norm") {
  const Eigen::MatrixXd X = rng::sphere_rows(6, 5, 9, rng::kUser);
  const auto f = FeatureMap::parse("lorentz-ray", 5);
  const Eigen::MatrixXd K = f.kernel_matrix(X, X);
  const Eigen::MatrixXd G = X * X.transpose();
  CHECK((K - ((G.array() + 1) * 0.5).matrix()).norm() < 1e-13);
  CHECK((f.apply(X).rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
  const auto lift = FeatureMap::parse("lorentz-lift", 5);
  CHECK((lift.apply(X).rowwise().squaredNorm().array() - 2).abs().maxCoeff() < 1e-13);  // ‖ψ^L(x)‖² = 2
}

TEST_CASE("Sigma_1 = M_1 and Sigma_g is not ((sum q_a).(sum k_b))^2") {
  const Eigen::MatrixXd X = rng::normal_matrix(4, 8, 5, rng::kUser);
  const auto s1 = FeatureMap::parse("sigma1:eps=0", 8), m1 = FeatureMap::parse("m1", 8);
  CHECK((s1.apply(X) - m1.apply(X)).norm() < 1e-14);
  const auto s2 = FeatureMap::parse("sigma2:eps=0", 8);
  const Eigen::VectorXd q = X.row(0), k = X.row(1);
  double direct = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) direct += std::pow(q.segment(4 * a, 4).dot(k.segment(4 * b, 4)), 2);
  CHECK(s2.kernel(q, k) == doctest::Approx(direct).epsilon(1e-13));
}

TEST_CASE("widths and Table-2 state sizes (spec 2.9)") {
  CHECK(FeatureMap::parse("m1", 64).feature_dim() == 2080);
  CHECK(FeatureMap::parse("deg2", 64).feature_dim() == 2080);
  CHECK(FeatureMap::parse("deg4", 8).feature_dim() == 330);  // C(11,4)
  CHECK(FeatureMap::parse("orthant", 64).feature_dim() == 64);
  CHECK(FeatureMap::parse("lorentz", 64).feature_dim() == 64);
  CHECK(FeatureMap::parse("lorentz-ray", 64).feature_dim() == 65);
  const std::pair<const char*, std::int64_t> rows[] = {
      {"sigma4", 17408}, {"sigma2", 67584}, {"m4", 69632}, {"m2", 135168}, {"m1", 266240}};
  for (auto [s, want] : rows) {
    CAPTURE(s);
    CHECK(2 * FeatureMap::parse(s, 64).state_size(64) == want);  // H = 2 heads, d_head = d_v = 64
  }
  CHECK(FeatureMap::parse("sigma2", 128).feature_dim() == 2080);  // F.2 bytes: 4(2080·128 + 384) = 1,066,496
  CHECK(4 * (FeatureMap::parse("sigma2", 128).state_size(128) + 384) == 1066496);
  CHECK(4 * (FeatureMap::parse("sigma4", 128).state_size(128) + 384) == 271872);
  CHECK(FeatureMap::parse("m1", 4).full_state_size(3) == 10 * 4);
}

TEST_CASE("softmax reference: no features, kernel exp(<x,y>/tau)") {
  const auto f = FeatureMap::parse("softmax:tau=0.125", 4);
  CHECK(f.is_softmax());
  CHECK(f.feature_dim() == 0);
  CHECK(f.tau() == 0.125);
  Eigen::VectorXd x(4), y(4);
  x << 0.5, 0.5, 0.5, 0.5;
  y << 1, 0, 0, 0;
  CHECK(f.kernel(x, y) == doctest::Approx(std::exp(4.0)));
  CHECK_THROWS_AS(f.apply(x.transpose()), UserError);
  CHECK_THROWS_AS(f.state_size(4), UserError);
}

TEST_CASE("parse rejects bad specs with UserError") {
  for (const char* s : {"relu", "m3", "sigma5", "orthant:eps=-1", "orthant:eps=nan", "m2:eps=abc", "softmax",
                        "softmax:tau=0", "softmax:tau=-1", "deg3", "deg0", "m0", "linear:eps=1", "sigma4:scale=0",
                        "orthant:eps", "m1:eps=0.1,eps=0.2", "sigma2:scale=1,scale=1"}) {
    CAPTURE(s);
    CHECK_THROWS_AS(FeatureMap::parse(s, 8), UserError);
  }
  CHECK_THROWS_AS(FeatureMap::parse("m2", 7), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("lorentz", 1), UserError);
  const auto f = FeatureMap::parse("m2", 8);
  CHECK_THROWS_AS(f.apply(Eigen::MatrixXd::Zero(2, 6)), UserError);
}

TEST_CASE("default eps: orthant 1e-6 (F.4), sigma 1e-4 (F.4), M_g 0; sigma4 scale 1/4") {
  CHECK(FeatureMap::parse("orthant", 4).eps() == 1e-6);
  CHECK(FeatureMap::parse("sigma2", 4).eps() == 1e-4);
  CHECK(FeatureMap::parse("m2", 4).eps() == 0);
  CHECK(FeatureMap::parse("sigma4", 8).scale() == 0.25);
  CHECK(FeatureMap::parse("sigma2", 8).scale() == 1.0);
}

TEST_CASE("thm 8 series: e^z = sum z^{2r}(1+z)/(2r+1)! + sum 2r z^{2r}/(2r+1)!") {
  for (double z : {-1.0, -0.5, 0.0, 0.3, 1.0}) {
    double s = 0, fact = 1;  // (2r+1)!
    for (int r = 0; r < 30; ++r) {
      if (r > 0) fact *= (2.0 * r) * (2.0 * r + 1);
      s += std::pow(z, 2 * r) * (1 + z) / fact + 2.0 * r * std::pow(z, 2 * r) / fact;
    }
    CHECK(std::abs(s - std::exp(z)) < 1e-12);
  }
}

TEST_CASE("canonical_spec: every option resolved, and it parses back to the same map") {
  CHECK(FeatureMap::parse("linear", 8).canonical_spec() == "linear");
  CHECK(FeatureMap::parse("orthant", 8).canonical_spec() == "orthant:eps=1e-06");
  CHECK(FeatureMap::parse("m2", 8).canonical_spec() == "m2:eps=0");
  CHECK(FeatureMap::parse("sigma4", 8).canonical_spec() == "sigma4:eps=0.0001,scale=0.25");
  CHECK(FeatureMap::parse("sigma2:scale=0.5,eps=0.3", 8).canonical_spec() == "sigma2:eps=0.3,scale=0.5");
  CHECK(FeatureMap::parse("deg4", 8).canonical_spec() == "deg4");
  CHECK(FeatureMap::parse("softmax:tau=0.125", 8).canonical_spec() == "softmax:tau=0.125");
  const Eigen::MatrixXd X = rng::normal_matrix(3, 8, 13, rng::kUser);
  for (const char* s : {"linear", "orthant", "orthant:eps=0.3", "lorentz", "lorentz-lift", "lorentz-ray", "m1", "m4:eps=0.3",
                        "sigma2", "sigma4", "sigma4:eps=0,scale=1", "deg2", "softmax:tau=0.5"}) {
    CAPTURE(s);
    const auto f = FeatureMap::parse(s, 8);
    const auto g = FeatureMap::parse(f.canonical_spec(), 8);
    CHECK(g.kind() == f.kind());
    CHECK(g.canonical_spec() == f.canonical_spec());
    CHECK(g.eps() == f.eps());
    CHECK(g.scale() == f.scale());
    CHECK(g.tau() == f.tau());
    CHECK(g.kernel_matrix(X, X) == f.kernel_matrix(X, X));  // bit-identical: same options, same code
  }
}

TEST_CASE("vjp of psi equals central finite differences of apply for every map (float64)") {
  // <G, (psi(x + h e_j) - psi(x - h e_j)) / 2h> against vjp(x, G)_j; h = 1e-6, relative error < 1e-6 (the
  // truncation error is O(h^2) times the third derivatives, the rounding error ~1e-16 / h).
  const std::vector<std::string> specs = {"linear", "orthant", "orthant:eps=0.3", "lorentz", "lorentz-lift",
                                          "lorentz-ray", "m1", "m2:eps=1e-4", "m4", "sigma2", "sigma4:eps=0.3",
                                          "deg2", "deg4"};
  const std::int64_t d = 8;
  const Eigen::MatrixXd X = rng::normal_matrix(4, d, 12, rng::kUser, 0);
  for (const auto& s : specs) {
    CAPTURE(s);
    const auto f = FeatureMap::parse(s, d);
    const Eigen::MatrixXd G = rng::normal_matrix(4, f.feature_dim(), 12, rng::kUser, 500);
    const Eigen::MatrixXd J = f.vjp(X, G);
    REQUIRE(J.rows() == 4);
    REQUIRE(J.cols() == d);
    double worst = 0;
    const double h = 1e-6;
    for (Eigen::Index i = 0; i < X.rows(); ++i)
      for (std::int64_t j = 0; j < d; ++j) {
        Eigen::MatrixXd xp = X.row(i), xm = X.row(i);
        xp(0, j) += h;
        xm(0, j) -= h;
        const double fd = (G.row(i).dot(f.apply(xp).row(0)) - G.row(i).dot(f.apply(xm).row(0))) / (2 * h);
        worst = std::max(worst, std::abs(fd - J(i, j)) / std::max(1.0, std::abs(J(i, j))));
      }
    CHECK(worst < 1e-6);
  }
  CHECK_THROWS_AS(FeatureMap::parse("softmax:tau=0.5", d).vjp(X, Eigen::MatrixXd(4, 1)), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("m2", d).vjp(X, Eigen::MatrixXd(4, 3)), UserError);
}

TEST_CASE("params(): the one map identity the kernels read") {
  const MapParams m = FeatureMap::parse("sigma4:eps=0.5,scale=2", 16).params();
  CHECK(m.kind == MapKind::SumPsd);
  CHECK(m.d == 16);
  CHECK(m.g == 4);
  CHECK(m.m == 4);
  CHECK(m.n_features == 10);
  CHECK(m.eps == 0.5);
  CHECK(m.scale == 2.0);
  CHECK(m.is_psd());
  CHECK_FALSE(m.is_linear_family());
  const MapParams o = FeatureMap::parse("orthant", 8).params();
  CHECK(o.kind == MapKind::Orthant);
  CHECK(o.m == 8);
  CHECK(o.n_features == 8);
  CHECK(o.eps == 1e-6);
  CHECK(o.is_linear_family());
  CHECK(o.nonnegative());
  CHECK_FALSE(FeatureMap::parse("linear", 8).params().nonnegative());
}
