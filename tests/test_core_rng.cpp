// Counter-based random streams: determinism, independence of streams, and moments within
// tolerances derived from the standard error of the mean for n = 200,000 draws.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "core/random_fill.hpp"
#include "core/rng.hpp"

using namespace memcap;

TEST_CASE("draws are pure functions of (seed, stream, index)") {
  CHECK(rng::normal(1, 2, 3) == rng::normal(1, 2, 3));
  CHECK(rng::normal(1, 2, 3) != rng::normal(1, 2, 4));
  CHECK(rng::normal(1, 2, 3) != rng::normal(1, 3, 3));
  CHECK(rng::normal(1, 2, 3) != rng::normal(2, 2, 3));
  auto a = rng::normal_matrix(4, 5, 9, rng::kKeys);
  auto b = rng::normal_matrix(4, 5, 9, rng::kKeys);
  CHECK(a == b);
  CHECK(a(2, 3) == rng::normal(9, rng::kKeys, 2 * 5 + 3));
}

TEST_CASE("uniform and normal moments") {
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    double u = rng::uniform(5, 1, static_cast<std::uint64_t>(i));
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    su += u;
    double z = rng::normal(5, 2, static_cast<std::uint64_t>(i));
    sn += z;
    sn2 += z * z;
  }
  CHECK(umin > 0.0);
  CHECK(umax < 1.0);
  // 5 standard errors: uniform sd = 0.2887, normal sd = 1, var of z^2 = 2.
  CHECK(std::abs(su / n - 0.5) < 5 * 0.2887 / std::sqrt(n));
  CHECK(std::abs(sn / n) < 5 / std::sqrt(n));
  CHECK(std::abs(sn2 / n - 1) < 5 * std::sqrt(2.0 / n));
}

TEST_CASE("sphere rows are unit and permutations are permutations") {
  auto s = rng::sphere_rows(50, 7, 3, rng::kValues);
  for (int i = 0; i < 50; ++i) CHECK(s.row(i).norm() == doctest::Approx(1.0).epsilon(1e-14));
  auto p = rng::permutation(1000, 4, rng::kMap);
  std::set<int> seen(p.data(), p.data() + p.size());
  CHECK(seen.size() == 1000);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 999);
  CHECK(rng::below(1, 1, 1, 10) < 10);
  CHECK(rng::derive_seed(0, "a") != rng::derive_seed(0, "b"));
  CHECK(rng::derive_seed(0, "a") == rng::derive_seed(0, "a"));
}
