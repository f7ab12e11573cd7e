// Adam / AdamW (PyTorch semantics, bias-corrected) against hand-computed values, and the cosine
// learning-rate schedule of spec hebbian.md §2.6 at its endpoints and midpoint.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "nn/layers.hpp"

using namespace memcap;
using namespace memcap::nn;

namespace {
// The reference values below were worked out by hand with 50-digit decimal arithmetic from
// PyTorch's update rule; float64 round-off over two steps stays far below this.
constexpr double kOptimRelTol = 1e-13;
constexpr double kLr = 0.1, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
}  // namespace

TEST_CASE("Adam: first step is lr * g / (|g| + eps), second step as PyTorch") {
  std::vector<double> p = {1.0, -2.0, 0.0}, m(3, 0.0), v(3, 0.0);
  const std::vector<double> g1 = {0.5, -1.0, 0.002}, g2 = {0.25, 0.0, -0.001};
  cpu::adam_update(p.data(), g1.data(), m.data(), v.data(), 3, kLr, kB1, kB2, kEps, 0.0, 1, false);
  for (int i = 0; i < 3; ++i) CHECK(p[i] == doctest::Approx(std::vector<double>{1.0, -2.0, 0.0}[i] -
                                                            kLr * g1[i] / (std::abs(g1[i]) + kEps))
                                               .epsilon(kOptimRelTol));
  CHECK(p[0] == doctest::Approx(0.90000000199999996000).epsilon(kOptimRelTol));
  CHECK(p[1] == doctest::Approx(-1.9000000009999999900).epsilon(kOptimRelTol));
  CHECK(p[2] == doctest::Approx(-0.099999500002499987500).epsilon(kOptimRelTol));
  CHECK(m[0] == doctest::Approx(0.05).epsilon(kOptimRelTol));
  CHECK(v[1] == doctest::Approx(0.001).epsilon(kOptimRelTol));
  cpu::adam_update(p.data(), g2.data(), m.data(), v.data(), 3, kLr, kB1, kB2, kEps, 0.0, 2, false);
  CHECK(p[0] == doctest::Approx(0.80678204047746166896).epsilon(kOptimRelTol));
  CHECK(p[1] == doctest::Approx(-1.8329941765341882078).epsilon(kOptimRelTol));
  CHECK(p[2] == doctest::Approx(-0.12663303549798650599).epsilon(kOptimRelTol));
}

TEST_CASE("Adam weight decay is L2 in the gradient; AdamW decays the weights (decoupled)") {
  const std::vector<double> g1 = {0.5}, g2 = {0.25};
  SUBCASE("Adam, wd = 0.01: g <- g + wd p") {
    std::vector<double> p = {1.0}, m = {0.0}, v = {0.0};
    cpu::adam_update(p.data(), g1.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0.01, 1, false);
    CHECK(p[0] == doctest::Approx(0.90000000196078427528).epsilon(kOptimRelTol));
    cpu::adam_update(p.data(), g2.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0.01, 2, false);
    CHECK(p[0] == doctest::Approx(0.80655504104993121367).epsilon(kOptimRelTol));
  }
  SUBCASE("AdamW, wd = 0.01: p <- p (1 - lr wd) before the Adam step") {
    std::vector<double> p = {1.0}, m = {0.0}, v = {0.0};
    cpu::adam_update(p.data(), g1.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0.01, 1, true);
    CHECK(p[0] == doctest::Approx(0.999 - kLr * 0.5 / (0.5 + kEps)).epsilon(kOptimRelTol));
    CHECK(p[0] == doctest::Approx(0.89900000199999996000).epsilon(kOptimRelTol));
    cpu::adam_update(p.data(), g2.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0.01, 2, true);
    CHECK(p[0] == doctest::Approx(0.80488304047546166900).epsilon(kOptimRelTol));
  }
  SUBCASE("AdamW with wd = 0 equals Adam") {
    std::vector<double> p = {1.0}, m = {0.0}, v = {0.0}, q = {1.0}, mq = {0.0}, vq = {0.0};
    cpu::adam_update(p.data(), g1.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0.0, 1, true);
    cpu::adam_update(q.data(), g1.data(), mq.data(), vq.data(), 1, kLr, kB1, kB2, kEps, 0.0, 1, false);
    CHECK(p[0] == q[0]);
  }
  std::vector<double> p = {1.0}, m = {0.0}, v = {0.0};
  CHECK_THROWS_AS(cpu::adam_update(p.data(), g1.data(), m.data(), v.data(), 1, kLr, kB1, kB2, kEps, 0, 0, false),
                  UserError);
}

TEST_CASE("cosine_lr: lr at t = 0, lr_min at t = T, midpoint at T/2") {
  const double lr = 1e-3, lr_min = 1e-6;
  const std::int64_t T = 10000;
  CHECK(cosine_lr(lr, lr_min, 0, T) == doctest::Approx(lr).epsilon(1e-15));
  CHECK(cosine_lr(lr, lr_min, T, T) == lr_min);
  CHECK(cosine_lr(lr, lr_min, T / 2, T) == doctest::Approx(0.5 * (lr + lr_min)).epsilon(1e-15));
  CHECK(cosine_lr(lr, lr_min, T / 4, T) == doctest::Approx(lr_min + 0.5 * (lr - lr_min) * (1 + std::sqrt(0.5))).epsilon(1e-14));
  // Monotone non-increasing over the schedule.
  double prev = cosine_lr(lr, lr_min, 0, 100);
  for (std::int64_t t = 1; t <= 100; ++t) {
    const double cur = cosine_lr(lr, lr_min, t, 100);
    CHECK(cur <= prev);
    prev = cur;
  }
  CHECK_THROWS_AS(cosine_lr(lr, lr_min, 5, 0), UserError);
  CHECK_THROWS_AS(cosine_lr(lr, lr_min, 11, 10), UserError);
}
