// CPU reference of causal KATA attention: the maps it takes from FeatureMap::parse (attention_map: kind
// codes, eps defaults, refusals), features against closed-form kernels (spec §2.4-2.7), and the recurrent, quadratic, chunked and tree forms against each other to 1e-12 (spec §5.2, 7.1.9).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/attention.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {

std::vector<double> normals(std::size_t n, std::uint64_t seed, std::uint64_t stream) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = rng::normal(seed, stream, i);
  return x;
}

struct Inputs {
  std::vector<double> q, k, v;
};
Inputs make_inputs(const AttentionShape& s, std::uint64_t seed) {
  return {normals(s.qk_size(), seed, rng::kQueries), normals(s.qk_size(), seed, rng::kKeys),
          normals(s.v_size(), seed, rng::kValues)};
}

const char* kMaps[] = {"m1", "m2", "m4", "m2:eps=1e-4", "sigma2", "sigma4:eps=1e-4", "sigma1",
                       "linear", "orthant", "lorentz"};

}  // namespace

// The attention forms get their maps from FeatureMap::parse (the one parser) through attention_map().
MapParams amap(const std::string& spec, std::int64_t d) { return attention_map(FeatureMap::parse(spec, d)); }

TEST_CASE("packed PSD features: worked example of spec 2.4 (dot = (u.v)^2 = 20.25)") {
  const FeatureMap m = FeatureMap::parse("m1", 3);
  Eigen::MatrixXd uw(2, 3);
  uw << 1, 2, 3, 0.5, -1, 2;
  const Eigen::MatrixXd p = m.apply(uw);
  REQUIRE(p.cols() == 6);
  const double expect_u[6] = {1, 4, 9, 2.828427124746190, 4.242640687119285, 8.485281374238570};
  for (int i = 0; i < 6; ++i) CHECK(p(0, i) == doctest::Approx(expect_u[i]).epsilon(1e-14));
  CHECK(p.row(0).dot(p.row(1)) == doctest::Approx(20.25).epsilon(1e-14));
  CHECK(m.kernel(uw.row(0).transpose(), uw.row(1).transpose()) == doctest::Approx(20.25).epsilon(1e-14));
  CHECK(amap("m1", 64).n_features == 2080);
  CHECK(amap("m2", 64).n_features == 1056);
  CHECK(amap("m4", 64).n_features == 544);
  CHECK(amap("sigma2", 64).n_features == 528);
  CHECK(amap("sigma4", 64).n_features == 136);
  CHECK(amap("sigma4", 64).scale == 0.25);
  CHECK(amap("m4", 64).m == 16);
  CHECK(amap("lorentz", 64).n_features == 64);
}

TEST_CASE("attention_map: one map kind for CPU and kernels, eps defaults of spec 2 (one parser for the toolkit)") {
  // One map identity (MapKind, map_params.hpp) from the parser to the CUDA kernels.
  CHECK(amap("linear", 8).kind == MapKind::Linear);
  CHECK(amap("orthant", 8).kind == MapKind::Orthant);
  CHECK(amap("lorentz", 8).kind == MapKind::Lorentz);
  CHECK(amap("m2", 8).kind == MapKind::BlockPsd);
  CHECK(amap("sigma2", 8).kind == MapKind::SumPsd);
  CHECK(amap("m2", 8).is_psd());
  CHECK(amap("lorentz", 8).is_linear_family());
  CHECK_FALSE(amap("sigma4", 8).is_linear_family());
  // eps defaults: orthant 1e-6 (§2.2), M_g 0 (§5.1 / U7), Sigma_g 1e-4 (§2.6, F.4)
  CHECK(amap("orthant", 8).eps == 1e-6);
  CHECK(amap("m2", 8).eps == 0.0);
  CHECK(amap("sigma2", 8).eps == 1e-4);
  CHECK(amap("sigma4", 8).eps == 1e-4);
  CHECK(amap("sigma4:eps=0", 8).eps == 0.0);
  CHECK(amap("sigma2", 8).scale == 1.0);
  CHECK(amap("sigma4:scale=0.5", 8).scale == 0.5);
  CHECK(amap("m2", 8).g == 2);
  CHECK(amap("orthant", 8).g == 1);
  CHECK(amap("linear", 8).nonnegative() == false);
  CHECK(amap("lorentz", 8).nonnegative());
  // capacity-only maps are refused with a message naming the attention maps
  for (const char* spec : {"softmax:tau=0.125", "deg2", "deg4", "lorentz-lift", "lorentz-ray"}) {
    CAPTURE(spec);
    CHECK_THROWS_WITH_AS(attention_map(FeatureMap::parse(spec, 8)),
                         doctest::Contains("not available for causal attention"), UserError);
    CHECK_THROWS_AS(default_options(FeatureMap::parse(spec, 8)), UserError);
  }
}

TEST_CASE("Lorentz L3 map: example of spec 2.3 (kernel 0.984)") {
  const FeatureMap m = FeatureMap::parse("lorentz", 3);
  Eigen::MatrixXd xy(2, 3);
  xy << 0.6, 0, 0.8, 0, 1, 0;
  const Eigen::MatrixXd p = m.apply(xy);
  CHECK(p(0, 0) == doctest::Approx(0.6));
  CHECK(p(0, 1) == 0.0);
  CHECK(p(0, 2) == doctest::Approx(0.984).epsilon(1e-14));
  CHECK(p(1, 2) == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(m.kernel(xy.row(0).transpose(), xy.row(1).transpose()) == doctest::Approx(0.984).epsilon(1e-14));
}

TEST_CASE("features agree with the closed-form kernels (spec 2.7: g in {1,2,4}, eps in {0,1e-4,0.3})") {
  const int d = 16;
  const auto x = normals(2 * d * 5, 7, rng::kUser);
  for (const char* base : {"m1", "m2", "m4", "sigma1", "sigma2", "sigma4", "orthant", "linear", "lorentz"})
    for (const char* eps : {"", ":eps=0", ":eps=1e-4", ":eps=0.3"}) {
      const std::string spec = std::string(base) + eps;
      if (std::string(eps).size() && (spec.rfind("linear", 0) == 0 || spec.rfind("lorentz", 0) == 0)) continue;
      const FeatureMap m = FeatureMap::parse(spec, d);
      CAPTURE(spec);
      const std::string canon = m.canonical_spec();  // resolved options round-trip through the parser
      CHECK(FeatureMap::parse(canon, d).canonical_spec() == canon);
      CHECK(FeatureMap::parse(canon, d).eps() == m.eps());
      CHECK(FeatureMap::parse(canon, d).scale() == m.scale());
      const Eigen::MatrixXd X = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          x.data(), 10, d);
      const Eigen::MatrixXd P = m.apply(X);
      CHECK(P.cols() == amap(spec, d).n_features);
      for (int r = 0; r < 5; ++r) {
        const double dot = P.row(2 * r).dot(P.row(2 * r + 1));
        const double kern = m.kernel(X.row(2 * r).transpose(), X.row(2 * r + 1).transpose());
        CHECK(std::abs(dot - kern) <= 1e-13 * std::max(1.0, std::abs(kern)));
        if (amap(spec, d).nonnegative()) CHECK(kern >= 0.0);
      }
    }
}

TEST_CASE("Sigma_1 equals M_1 at equal eps (spec 2.6)") {
  const int d = 8;
  const auto x = normals(2 * d, 3, rng::kUser);
  const Eigen::Map<const Eigen::VectorXd> q(x.data(), d), k(x.data() + d, d);
  for (const char* eps : {"0", "1e-4", "0.3"}) {
    CAPTURE(eps);
    CHECK(FeatureMap::parse(std::string("sigma1:eps=") + eps, d).kernel(q, k) ==
          doctest::Approx(FeatureMap::parse(std::string("m1:eps=") + eps, d).kernel(q, k)).epsilon(1e-15));
  }
}

TEST_CASE("recurrent = quadratic = chunked = tree to 1e-12 (T=37, C=8, every map)") {
  const AttentionShape s{2, 2, 37, 8, 5};
  const auto in = make_inputs(s, 11);
  for (const char* spec : kMaps) {
    CAPTURE(spec);
    const AttentionOptions o = default_options(FeatureMap::parse(spec, s.d), 8);
    const auto rec = attention_recurrent(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto quad = attention_quadratic(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto chunk = attention_chunked(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto tree = attention_tree(s, o, in.q.data(), in.k.data(), in.v.data());
    CHECK(relative_error(quad, rec) < 1e-12);
    CHECK(relative_error(chunk, rec) < 1e-12);
    CHECK(relative_error(tree, rec) < 1e-12);
    if (o.normalized) {  // also unnormalized readout for cone maps
      AttentionOptions u = o;
      u.normalized = false;
      CHECK(relative_error(attention_chunked(s, u, in.q.data(), in.k.data(), in.v.data()),
                           attention_recurrent(s, u, in.q.data(), in.k.data(), in.v.data())) < 1e-12);
    }
  }
}

TEST_CASE("forms agree on random shapes (seeded; T, C, d, g drawn at random)") {
  for (std::uint64_t trial = 0; trial < 6; ++trial) {
    const auto r = [&](std::uint64_t i, std::uint64_t n) { return rng::below(99, trial, i, n); };
    const int g = 1 << r(0, 3);
    const AttentionShape s{1 + std::int64_t(r(1, 2)), 1 + std::int64_t(r(2, 2)), 1 + std::int64_t(r(3, 70)),
                           std::int64_t(g * (1 + r(4, 4))), 1 + std::int64_t(r(5, 9))};
    const std::int64_t C = 1 + r(6, 20);
    const std::string spec = (r(7, 2) ? "m" : "sigma") + std::to_string(g) + ":eps=1e-4";
    CAPTURE(spec);
    CAPTURE(s.T);
    CAPTURE(C);
    const AttentionOptions o = default_options(FeatureMap::parse(spec, s.d), C);
    const auto in = make_inputs(s, 100 + trial);
    const auto rec = attention_recurrent(s, o, in.q.data(), in.k.data(), in.v.data());
    CHECK(relative_error(attention_quadratic(s, o, in.q.data(), in.k.data(), in.v.data()), rec) < 1e-12);
    CHECK(relative_error(attention_chunked(s, o, in.q.data(), in.k.data(), in.v.data()), rec) < 1e-12);
    CHECK(relative_error(attention_tree(s, o, in.q.data(), in.k.data(), in.v.data()), rec) < 1e-12);
  }
}

TEST_CASE("Proposition 1: the normalized readout is a convex gate (spec 1.5, M2 eps=1e-4, T=37)") {
  const AttentionShape s{1, 1, 37, 8, 4};
  const auto in = make_inputs(s, 5);
  const AttentionOptions o = default_options(FeatureMap::parse("m2:eps=1e-4", s.d), 8);
  const auto out = attention_recurrent(s, o, in.q.data(), in.k.data(), in.v.data());
  double worst = 0;
  for (int t = 0; t < s.T; ++t) {
    const Eigen::Map<const Eigen::VectorXd> q(in.q.data() + t * s.d, s.d);
    const auto key = [&](int i) { return Eigen::Map<const Eigen::VectorXd>(in.k.data() + i * s.d, s.d); };
    double dprev = 0;
    std::vector<double> nprev(s.dv, 0.0);
    for (int i = 0; i < t; ++i) {
      const double a = o.map.kernel(q, key(i));
      dprev += a;
      for (int c = 0; c < s.dv; ++c) nprev[c] += a * in.v[i * s.dv + c];
    }
    const double ct = o.map.kernel(q, key(t));
    const double alpha = dprev / (dprev + ct), beta = ct / (dprev + ct);
    CHECK(alpha >= 0.0);
    CHECK(beta >= 0.0);
    for (int c = 0; c < s.dv; ++c) {
      const double zbar = t == 0 ? 0.0 : nprev[c] / dprev;
      worst = std::max(worst, std::abs(out[t * s.dv + c] - (alpha * zbar + beta * in.v[t * s.dv + c])));
    }
  }
  CHECK(worst < 1e-13);
}

TEST_CASE("causality: changing tokens after t leaves outputs up to t unchanged") {
  const AttentionShape s{1, 1, 20, 8, 3};
  auto in = make_inputs(s, 9);
  const AttentionOptions o = default_options(FeatureMap::parse("sigma2", s.d), 4);
  const auto before = attention_chunked(s, o, in.q.data(), in.k.data(), in.v.data());
  for (std::int64_t i = 10 * s.d; i < s.qk_size(); ++i) in.k[i] += 1.0;
  for (std::int64_t i = 10 * s.dv; i < s.v_size(); ++i) in.v[i] -= 2.0;
  const auto after = attention_chunked(s, o, in.q.data(), in.k.data(), in.v.data());
  for (std::int64_t i = 0; i < 10 * s.dv; ++i) CHECK(after[i] == before[i]);
  CHECK(after[10 * s.dv] != before[10 * s.dv]);
}

TEST_CASE("bad input is a UserError with a message") {
  const AttentionShape s{1, 1, 4, 6, 2};
  const auto in = make_inputs(s, 1);
  CHECK_THROWS_WITH_AS(FeatureMap::parse("m4", s.d), doctest::Contains("not divisible"), UserError);  // d = 6
  // options built for another head width
  CHECK_THROWS_WITH_AS(attention_quadratic(s, default_options(FeatureMap::parse("m4", 8)), in.q.data(), in.k.data(),
                                           in.v.data()),
                       doctest::Contains("was built for d = 8"), UserError);
  AttentionOptions unparsed;  // default-constructed map (d = 0): refused, not run
  CHECK_THROWS_AS(attention_chunked(s, unparsed, in.q.data(), in.k.data(), in.v.data()), UserError);
  AttentionOptions lin = default_options(FeatureMap::parse("linear", s.d));
  lin.normalized = true;
  CHECK_THROWS_AS(attention_recurrent(s, lin, in.q.data(), in.k.data(), in.v.data()), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("softmax", s.d), UserError);
  CHECK_THROWS_AS(default_options(FeatureMap::parse("softmax:tau=0.5", s.d)), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("m2:eps=-1", s.d), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("m2:scale=2", s.d), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("lorentz:eps=1", s.d), UserError);
  CHECK_THROWS_AS(FeatureMap::parse("sigma", s.d), UserError);
  auto bad = in.q;
  bad[3] = NAN;
  CHECK_THROWS_AS(attention_recurrent(s, default_options(FeatureMap::parse("m2", s.d)), bad.data(), in.k.data(),
                                      in.v.data()),
                  NumericError);
}
