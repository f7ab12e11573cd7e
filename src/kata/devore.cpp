// DeVore polynomial dictionary (spec kata.md §3.7): for every P of degree <= r over GF(s), the unit
// vector with 1/√s at coordinates (x, P(x)); coherence = max #roots of a nonzero P−Q, over s.
#include <omp.h>

#include <cmath>
#include <set>

#include "core/error.hpp"
#include "kata/dictionary.hpp"
#include "kata/finite_field.hpp"

namespace memcap::kata {

namespace {

void check_devore(std::int64_t s, std::int64_t r) {
  std::int64_t ell = 0;
  int k = 0;
  require(prime_power(s, ell, k),
          "DeVore field size s = {} is not a prime power; use s = ℓ^k with ℓ prime (2, 3, 4, 5, 7, 8, 9, ...)", s);
  require(r >= 0 && r < s, "DeVore degree r = {} must satisfy 0 <= r < s = {} (r >= s makes P−Q vanish on all of GF(s))",
          r, s);
  double T = 1;
  for (std::int64_t i = 0; i <= r; ++i) T *= static_cast<double>(s);
  require(T <= 5.0e7, "DeVore code with s = {}, r = {} has s^(r+1) = {:.3g} vectors (> 5e7); lower r or s", s, r, T);
}

std::int64_t power(std::int64_t s, std::int64_t e) {
  std::int64_t t = 1;
  for (std::int64_t i = 0; i < e; ++i) t *= s;
  return t;
}

// P(x) for the polynomial whose coefficients are the base-s digits of idx (a_0 lowest).
std::int64_t eval_poly(const GaloisField& F, std::int64_t idx, std::int64_t r, std::int64_t s, std::int64_t x,
                       const std::vector<std::int64_t>& pw) {
  std::int64_t v = 0;
  for (std::int64_t i = r; i >= 0; --i) v = F.add(F.mul(v, x), (idx / pw[i]) % s);
  return v;
}

}  // namespace

std::vector<std::int64_t> devore_support(std::int64_t s, std::int64_t r) {
  check_devore(s, r);
  const GaloisField F(s);
  const std::int64_t T = power(s, r + 1);
  std::vector<std::int64_t> pw(r + 1, 1);
  for (std::int64_t i = 1; i <= r; ++i) pw[i] = pw[i - 1] * s;
  std::vector<std::int64_t> sup(static_cast<std::size_t>(T * s));
#pragma omp parallel for schedule(static)
  for (std::int64_t idx = 0; idx < T; ++idx)
    for (std::int64_t x = 0; x < s; ++x) sup[idx * s + x] = x * s + eval_poly(F, idx, r, s, x, pw);
  return sup;
}

Eigen::MatrixXd devore_dictionary(std::int64_t s, std::int64_t r) {
  check_devore(s, r);
  const std::int64_t T = power(s, r + 1);
  const double entries = static_cast<double>(T) * static_cast<double>(s) * static_cast<double>(s);
  require(entries <= 1.6e9,
          "dense DeVore dictionary (s = {}, r = {}) has {:.3g} entries (> 1.6e9); use its support (indices) instead",
          s, r, entries);
  const auto sup = devore_support(s, r);
  Eigen::MatrixXd V = Eigen::MatrixXd::Zero(T, s * s);
  const double v = 1.0 / std::sqrt(static_cast<double>(s));
  for (std::int64_t idx = 0; idx < T; ++idx)
    for (std::int64_t x = 0; x < s; ++x) V(idx, sup[idx * s + x]) = v;
  return V;
}

DevoreCoherence devore_coherence(std::int64_t s, std::int64_t r) {
  check_devore(s, r);
  const GaloisField F(s);
  const std::int64_t T = power(s, r + 1);
  std::vector<std::int64_t> pw(r + 1, 1);
  for (std::int64_t i = 1; i <= r; ++i) pw[i] = pw[i - 1] * s;
  // ⟨v_P, v_Q⟩ = #{x : (P−Q)(x) = 0}/s and P−Q runs over every nonzero polynomial of degree <= r.
  std::vector<char> seen(static_cast<std::size_t>(s + 1), 0);
#pragma omp parallel
  {
    std::vector<char> local(static_cast<std::size_t>(s + 1), 0);
#pragma omp for schedule(static)
    for (std::int64_t idx = 1; idx < T; ++idx) {
      std::int64_t roots = 0;
      for (std::int64_t x = 0; x < s; ++x) roots += eval_poly(F, idx, r, s, x, pw) == 0;
      local[roots] = 1;
    }
#pragma omp critical
    for (std::int64_t c = 0; c <= s; ++c) seen[c] |= local[c];
  }
  DevoreCoherence out;
  for (std::int64_t c = 0; c <= s; ++c)
    if (seen[c]) out.overlap_counts.push_back(c);
  out.value = out.overlap_counts.empty() ? 0.0 : static_cast<double>(out.overlap_counts.back()) / s;
  return out;
}

}  // namespace memcap::kata
