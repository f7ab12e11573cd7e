// Shared helpers of the CPU layer tests (test_nn_layers.cpp, test_nn_edit_layers.cpp): counter-based
// uniform vectors, norms, and the central finite-difference check of a float64 gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.hpp"

namespace memcap::test {

inline constexpr double kFdStep = 1e-6;            // central-difference step
inline constexpr double kFdRelTol = 1e-6;          // ||analytic − FD|| / ||FD||, float64
inline constexpr double kExactRelTol = 1e-13;      // round-off level agreement (same math, other order)
inline constexpr std::int64_t kMaxFdEntries = 48;  // FD-checked entries per tensor (all when fewer)

inline std::vector<double> randu(std::int64_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = lo + (hi - lo) * rng::uniform(seed, rng::kUser, static_cast<std::uint64_t>(i));
  return v;
}

inline double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return norm(d) / std::max(norm(b), 1e-300);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f on up to kMaxFdEntries entries of x (f reads x; entries drawn with `seed`)
// against the analytic gradient `grad`: the relative error ||analytic − FD|| / ||FD||.
inline double fd_check(const std::function<double()>& f, std::vector<double>& x, const std::vector<double>& grad,
                       std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::int64_t> idx;
  if (n <= kMaxFdEntries) {
    for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (std::int64_t k = 0; k < kMaxFdEntries; ++k)
      idx.push_back(static_cast<std::int64_t>(
          rng::below(seed, rng::kUser + 7, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n))));
  }
  std::vector<double> num, ana;
  for (const auto i : idx) {
    auto& xi = x[static_cast<std::size_t>(i)];
    const double x0 = xi;
    xi = x0 + kFdStep;
    const double fp = f();
    xi = x0 - kFdStep;
    const double fm = f();
    xi = x0;
    num.push_back((fp - fm) / (2 * kFdStep));
    ana.push_back(grad[static_cast<std::size_t>(i)]);
  }
  return rel_err(ana, num);
}

}  // namespace memcap::test
