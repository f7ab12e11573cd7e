// CPU reference of causal KATA attention: feature maps against closed-form kernels (spec §2.4-2.7),
// and the recurrent, quadratic, chunked and tree forms against each other to 1e-12 (spec §5.2, 7.1.9).
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

TEST_CASE("packed PSD features: worked example of spec 2.4 (dot = (u.v)^2 = 20.25)") {
  const AttentionMap m = AttentionMap::parse("m1");
  const double u[3] = {1, 2, 3}, w[3] = {0.5, -1, 2};
  std::vector<double> pu(6), pw(6);
  m.features(u, 3, pu.data());
  m.features(w, 3, pw.data());
  const double expect_u[6] = {1, 4, 9, 2.828427124746190, 4.242640687119285, 8.485281374238570};
  for (int i = 0; i < 6; ++i) CHECK(pu[i] == doctest::Approx(expect_u[i]).epsilon(1e-14));
  double dot = 0;
  for (int i = 0; i < 6; ++i) dot += pu[i] * pw[i];
  CHECK(dot == doctest::Approx(20.25).epsilon(1e-14));
  CHECK(m.kernel(u, w, 3) == doctest::Approx(20.25).epsilon(1e-14));
  CHECK(m.n_features(64) == 2080);
  CHECK(AttentionMap::parse("m2").n_features(64) == 1056);
  CHECK(AttentionMap::parse("m4").n_features(64) == 544);
  CHECK(AttentionMap::parse("sigma2").n_features(64) == 528);
  CHECK(AttentionMap::parse("sigma4").n_features(64) == 136);
  CHECK(AttentionMap::parse("sigma4").scale == 0.25);
}

TEST_CASE("Lorentz L3 map: example of spec 2.3 (kernel 0.984)") {
  const AttentionMap m = AttentionMap::parse("lorentz");
  const double x[3] = {0.6, 0, 0.8}, y[3] = {0, 1, 0};
  double px[3], py[3];
  m.features(x, 3, px);
  m.features(y, 3, py);
  CHECK(px[0] == doctest::Approx(0.6));
  CHECK(px[1] == 0.0);
  CHECK(px[2] == doctest::Approx(0.984).epsilon(1e-14));
  CHECK(py[2] == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(m.kernel(x, y, 3) == doctest::Approx(0.984).epsilon(1e-14));
}

TEST_CASE("features agree with the closed-form kernels (spec 2.7: g in {1,2,4}, eps in {0,1e-4,0.3})") {
  const int d = 16;
  const auto x = normals(2 * d * 5, 7, rng::kUser);
  for (const char* base : {"m1", "m2", "m4", "sigma1", "sigma2", "sigma4", "orthant", "linear", "lorentz"})
    for (const char* eps : {"", ":eps=0", ":eps=1e-4", ":eps=0.3"}) {
      const std::string spec = std::string(base) + eps;
      if (std::string(eps).size() && (spec.rfind("linear", 0) == 0 || spec.rfind("lorentz", 0) == 0)) continue;
      const AttentionMap m = AttentionMap::parse(spec);
      CAPTURE(spec);
      CHECK(AttentionMap::parse(m.to_string()).to_string() == m.to_string());
      const int n = m.n_features(d);
      std::vector<double> fq(n), fk(n);
      for (int r = 0; r < 5; ++r) {
        const double* q = x.data() + r * 2 * d;
        const double* k = q + d;
        m.features(q, d, fq.data());
        m.features(k, d, fk.data());
        double dot = 0;
        for (int i = 0; i < n; ++i) dot += fq[i] * fk[i];
        const double kern = m.kernel(q, k, d);
        CHECK(std::abs(dot - kern) <= 1e-13 * std::max(1.0, std::abs(kern)));
        if (m.nonnegative()) CHECK(kern >= 0.0);
      }
    }
}

TEST_CASE("Sigma_1 equals M_1 (spec 2.6)") {
  const int d = 8;
  const auto x = normals(2 * d, 3, rng::kUser);
  CHECK(AttentionMap::parse("sigma1").kernel(x.data(), x.data() + d, d) ==
        doctest::Approx(AttentionMap::parse("m1").kernel(x.data(), x.data() + d, d)).epsilon(1e-15));
}

TEST_CASE("recurrent = quadratic = chunked = tree to 1e-12 (T=37, C=8, every map)") {
  const AttentionShape s{2, 2, 37, 8, 5};
  const auto in = make_inputs(s, 11);
  for (const char* spec : kMaps) {
    CAPTURE(spec);
    const AttentionOptions o = default_options(AttentionMap::parse(spec), 8);
    const auto rec = attention_recurrent(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto quad = attention_quadratic(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto chunk = attention_chunked(s, o, in.q.data(), in.k.data(), in.v.data());
    const auto tree = attention_tree(s, o, in.q.data(), in.k.data(), in.v.data());
    CHECK(relative_error(quad, rec) < 1e-12);
    CHECK(relative_error(chunk, rec) < 1e-12);
    CHECK(relative_error(tree, rec) < 1e-12);
    if (o.map.nonnegative()) {  // also unnormalized readout for cone maps
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
    const AttentionOptions o = default_options(AttentionMap::parse(spec), C);
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
  const AttentionOptions o = default_options(AttentionMap::parse("m2:eps=1e-4"), 8);
  const auto out = attention_recurrent(s, o, in.q.data(), in.k.data(), in.v.data());
  double worst = 0;
  for (int t = 0; t < s.T; ++t) {
    const double* q = in.q.data() + t * s.d;
    double dprev = 0;
    std::vector<double> nprev(s.dv, 0.0);
    for (int i = 0; i < t; ++i) {
      const double a = o.map.kernel(q, in.k.data() + i * s.d, s.d);
      dprev += a;
      for (int c = 0; c < s.dv; ++c) nprev[c] += a * in.v[i * s.dv + c];
    }
    const double ct = o.map.kernel(q, in.k.data() + t * s.d, s.d);
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
  const AttentionOptions o = default_options(AttentionMap::parse("sigma2"), 4);
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
  CHECK_THROWS_AS(attention_quadratic(s, default_options(AttentionMap::parse("m4")), in.q.data(), in.k.data(),
                                      in.v.data()),
                  UserError);
  AttentionOptions lin = default_options(AttentionMap::parse("linear"));
  lin.normalized = true;
  CHECK_THROWS_AS(attention_recurrent(s, lin, in.q.data(), in.k.data(), in.v.data()), UserError);
  CHECK_THROWS_AS(AttentionMap::parse("softmax"), UserError);
  CHECK_THROWS_AS(AttentionMap::parse("m2:eps=-1"), UserError);
  CHECK_THROWS_AS(AttentionMap::parse("m2:scale=2"), UserError);
  auto bad = in.q;
  bad[3] = NAN;
  CHECK_THROWS_AS(attention_recurrent(s, default_options(AttentionMap::parse("m2")), bad.data(), in.k.data(),
                                      in.v.data()),
                  NumericError);
}
