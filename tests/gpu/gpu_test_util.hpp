// Shared helpers of the GPU-vs-CPU layer tests (test_nn_layers.cpp, test_nn_edit_layers.cpp): named
// tolerances, counter-based normal vectors, rounding to the storage type, host <-> device copies (NaN-filled
// outputs) and the relative Frobenius error.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/gpu.hpp"
#include "core/rng.hpp"

namespace memcap::gputest {

constexpr double kTolF64 = 1e-12;        // double on the GPU vs the CPU float64 reference
constexpr double kTolF32 = 1e-5;         // float, element-wise layers and GEMMs with short K
constexpr double kTolF32Reduce = 1e-4;   // float reductions (losses, bias and parameter gradients)
constexpr double kTolTf32 = 1e-2;        // TF32 tensor-core GEMMs

inline std::vector<double> randn(std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * rng::normal(seed, rng::kUser, i);
  return v;
}

// v rounded to the storage type T (so the CPU reference sees the GPU's inputs).
template <class T>
std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<T>(x));
  return v;
}

template <class T>
gpu::Tensor to_dev(const std::vector<double>& h, const gpu::Stream& s) {
  gpu::Tensor t({static_cast<std::int64_t>(h.size())}, gpu::dtype_of<T>());
  std::vector<T> c(h.begin(), h.end());
  t.upload(c.data(), s);
  s.synchronize();
  return t;
}

// A device buffer of n NaNs: an output the kernel fails to write cannot pass.
template <class T>
gpu::Tensor nan_dev(std::int64_t n, const gpu::Stream& s) {
  gpu::Tensor t({n}, gpu::dtype_of<T>());
  t.fill_nan(s);
  return t;
}

template <class T>
std::vector<double> to_host(const gpu::Tensor& t, const gpu::Stream& s) {
  std::vector<T> c(static_cast<std::size_t>(t.numel()));
  t.download(c.data(), s);
  s.synchronize();
  return std::vector<double>(c.begin(), c.end());
}

// ||g − c|| / ||c|| (absolute when c = 0); +inf when g holds a NaN/Inf.
inline double rel_err(const std::vector<double>& g, const std::vector<double>& c) {
  REQUIRE(g.size() == c.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return std::numeric_limits<double>::infinity();
    num += (g[i] - c[i]) * (g[i] - c[i]);
    den += c[i] * c[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// kTolF64 for double, else the float tolerance given.
template <class T>
double tol(double f32_tol) {
  return std::is_same_v<T, double> ? kTolF64 : f32_tol;
}

}  // namespace memcap::gputest
