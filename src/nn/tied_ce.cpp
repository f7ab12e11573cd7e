// Tied-embedding logits + cross-entropy, tiled over the vocabulary (nn/tied_ce.hpp). Each row's logits
// are formed kTile columns at a time (dot products in double), merged into an online log-sum-exp; the
// backward recomputes them. Memory: O(kTile) per call, never N×V.
#include "nn/tied_ce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace memcap::nn::cpu {

namespace {

constexpr std::int64_t kTile = 1024;

void check_targets(const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t C) {
  require(N >= 0 && V >= 1 && C >= 1, "tied_logits_ce: bad shape N = {}, V = {}, C = {}", N, V, C);
  for (std::int64_t n = 0; n < N; ++n)
    require(targets[n] == kIgnoreLabel || (targets[n] >= 0 && targets[n] < V),
            "tied_logits_ce: target {} of row {} is outside [0, {}) and is not the ignore label {}", targets[n], n, V,
            kIgnoreLabel);
}

// z[j − j0] = X[n]·E[j] for j in [j0, j1).
template <class T>
void row_tile(double* z, const T* x, const T* E, std::int64_t j0, std::int64_t j1, std::int64_t C) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const T* e = E + j * C;
    double s = 0;
    for (std::int64_t c = 0; c < C; ++c) s += static_cast<double>(x[c]) * e[c];
    z[j - j0] = s;
  }
}

}  // namespace

template <class T>
double tied_logits_ce_forward(T* losses, T* lse, std::int32_t* argmax, const T* X, const T* E,
                              const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t C,
                              std::int64_t* n_valid) {
  check_targets(targets, N, V, C);
  std::vector<double> z(static_cast<std::size_t>(std::min(V, kTile)));
  double total = 0;
  std::int64_t valid = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = X + n * C;
    double m = -std::numeric_limits<double>::infinity(), s = 0, zt = 0;
    std::int64_t arg = 0;
    for (std::int64_t j0 = 0; j0 < V; j0 += kTile) {
      const std::int64_t j1 = std::min(V, j0 + kTile);
      row_tile(z.data(), x, E, j0, j1, C);
      double tm = z[0];
      std::int64_t ta = j0;
      for (std::int64_t j = j0 + 1; j < j1; ++j)
        if (z[j - j0] > tm) {
          tm = z[j - j0];
          ta = j;
        }
      if (tm > m) {
        s *= std::exp(m - tm);
        m = tm;
        arg = ta;
      }
      for (std::int64_t j = j0; j < j1; ++j) s += std::exp(z[j - j0] - m);
      if (targets[n] >= j0 && targets[n] < j1) zt = z[targets[n] - j0];
    }
    const double l = m + std::log(s);
    lse[n] = static_cast<T>(l);
    if (argmax) argmax[n] = static_cast<std::int32_t>(arg);
    if (targets[n] == kIgnoreLabel) {
      losses[n] = T(0);
    } else {
      losses[n] = static_cast<T>(l - zt);
      total += l - zt;
      ++valid;
    }
  }
  if (n_valid) *n_valid = valid;
  return valid > 0 ? total / static_cast<double>(valid) : 0.0;
}

template <class T>
void tied_logits_ce_backward(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                             std::int64_t N, std::int64_t V, std::int64_t C, double scale) {
  check_targets(targets, N, V, C);
  std::vector<double> z(static_cast<std::size_t>(std::min(V, kTile)));
  std::vector<double> dx(static_cast<std::size_t>(C));
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = X + n * C;
    std::fill(dx.begin(), dx.end(), 0.0);
    if (targets[n] != kIgnoreLabel) {
      const double l = lse[n];
      for (std::int64_t j0 = 0; j0 < V; j0 += kTile) {
        const std::int64_t j1 = std::min(V, j0 + kTile);
        row_tile(z.data(), x, E, j0, j1, C);
        for (std::int64_t j = j0; j < j1; ++j) {
          const double g = (std::exp(z[j - j0] - l) - (j == targets[n] ? 1.0 : 0.0)) * scale;
          const T* e = E + j * C;
          for (std::int64_t c = 0; c < C; ++c) dx[static_cast<std::size_t>(c)] += g * e[c];
          if (dE) {
            T* de = dE + j * C;
            for (std::int64_t c = 0; c < C; ++c) de[c] += static_cast<T>(g * x[c]);
          }
        }
      }
    }
    if (dX)
      for (std::int64_t c = 0; c < C; ++c) dX[n * C + c] = static_cast<T>(dx[static_cast<std::size_t>(c)]);
  }
}

template double tied_logits_ce_forward<double>(double*, double*, std::int32_t*, const double*, const double*,
                                               const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,
                                               std::int64_t*);
template double tied_logits_ce_forward<float>(float*, float*, std::int32_t*, const float*, const float*,
                                              const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,
                                              std::int64_t*);
template void tied_logits_ce_backward<double>(double*, double*, const double*, const double*, const std::int32_t*,
                                              const double*, std::int64_t, std::int64_t, std::int64_t, double);
template void tied_logits_ce_backward<float>(float*, float*, const float*, const float*, const std::int32_t*,
                                             const float*, std::int64_t, std::int64_t, std::int64_t, double);

}  // namespace cpu
