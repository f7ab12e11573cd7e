// Realified mutually unbiased bases for every prime power s = ℓ^k (spec kata.md §3.6):
// odd ℓ: v_{a,b}[x] = ω_ℓ^{xᵀM_a x + b·x}/√s; ℓ = 2: i^{xᵀM_a x mod 4}(−1)^{b·x}/√s. Plus the exact
// coherence of the set computed from the construction's translation symmetry.
#include <omp.h>

#include <cmath>
#include <complex>

#include "core/error.hpp"
#include "kata/dictionary.hpp"
#include "kata/finite_field.hpp"

namespace memcap::kata {

namespace {

constexpr double kTwoPi = 6.283185307179586476925;

struct MubPhases {
  std::int64_t s = 0, ell = 0;
  int k = 0;
  int L = 0;      // phases are multiples of 2π/L: L = ℓ (odd) or 4 (ℓ = 2)
  int c = 0;      // b·x enters as c·(b·x): 1 (odd) or 2 (ℓ = 2)
  std::vector<int> Q;    // s × s: exponent of v_{a,0}[x], row a
  std::vector<int> dot;  // s × s: (b·x) mod ℓ
};

MubPhases make_phases(std::int64_t s) {
  GaloisField F(s);
  MubPhases P;
  P.s = s;
  P.ell = F.characteristic();
  P.k = F.degree();
  P.L = P.ell == 2 ? 4 : static_cast<int>(P.ell);
  P.c = P.ell == 2 ? 2 : 1;
  const int k = P.k, ell = static_cast<int>(P.ell);
  std::vector<std::vector<int>> dig(s);
  for (std::int64_t x = 0; x < s; ++x) dig[x] = F.digits(x);
  P.Q.resize(static_cast<std::size_t>(s * s));
  for (std::int64_t a = 0; a < s; ++a) {
    const auto M = F.quadratic_form(a);
    for (std::int64_t x = 0; x < s; ++x) {
      std::int64_t q = 0;  // over the integers
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j) q += static_cast<std::int64_t>(dig[x][i]) * M[i * k + j] * dig[x][j];
      P.Q[a * s + x] = static_cast<int>(q % P.L);
    }
  }
  P.dot.resize(static_cast<std::size_t>(s * s));
  for (std::int64_t b = 0; b < s; ++b)
    for (std::int64_t x = 0; x < s; ++x) {
      int t = 0;
      for (int i = 0; i < k; ++i) t += dig[b][i] * dig[x][i];
      P.dot[b * s + x] = t % ell;
    }
  return P;
}

}  // namespace

std::vector<int> mub_phase_exponents(std::int64_t s) { return make_phases(s).Q; }

std::vector<std::int64_t> mub_basis_ids(std::int64_t s) {
  std::vector<std::int64_t> id(static_cast<std::size_t>(s * (s + 1)));
  for (std::int64_t r = 0; r < s * (s + 1); ++r) id[r] = r < s ? 0 : (r - s) / s + 1;
  return id;
}

Eigen::MatrixXd mub_dictionary(std::int64_t s) {
  require(s >= 2, "MUB field size s = {} must be a prime power >= 2", s);
  const double entries = static_cast<double>(s) * (s + 1) * 2.0 * s;
  require(entries <= 1.6e9, "MUB dictionary for s = {} has {:.3g} entries (> 1.6e9, 12.8 GB); choose a smaller s",
          s, entries);
  const MubPhases P = make_phases(s);
  const double inv = 1.0 / std::sqrt(static_cast<double>(s));
  std::vector<double> cs(P.L), sn(P.L);
  for (int e = 0; e < P.L; ++e) {
    cs[e] = std::cos(kTwoPi * e / P.L) * inv;
    sn[e] = std::sin(kTwoPi * e / P.L) * inv;
  }
  // Exact values at the quarter turns (ℓ = 2 and the e = 0 phase) so the entries are exactly ±1/√s or 0.
  if (P.L == 4) { cs = {inv, 0.0, -inv, 0.0}; sn = {0.0, inv, 0.0, -inv}; }
  const std::int64_t T = s * (s + 1);
  Eigen::MatrixXd V(T, 2 * s);
  // Column-major: fill column by column (coordinate x), rows contiguous.
#pragma omp parallel for schedule(static)
  for (std::int64_t x = 0; x < s; ++x) {
    double* re = V.col(x).data();
    double* im = V.col(s + x).data();
    for (std::int64_t r = 0; r < s; ++r) { re[r] = r == x ? 1.0 : 0.0; im[r] = 0.0; }
    for (std::int64_t a = 0; a < s; ++a) {
      const int q = P.Q[a * s + x];
      for (std::int64_t b = 0; b < s; ++b) {
        const int e = (q + P.c * P.dot[b * s + x]) % P.L;
        re[s + a * s + b] = cs[e];
        im[s + a * s + b] = sn[e];
      }
    }
  }
  return V;
}

MubCoherence mub_coherence(std::int64_t s) {
  require(s >= 2, "MUB field size s = {} must be a prime power >= 2", s);
  const MubPhases P = make_phases(s);
  const int ell = static_cast<int>(P.ell), k = P.k, L = P.L;
  const double inv_s = 1.0 / static_cast<double>(s), inv_sqrt = 1.0 / std::sqrt(static_cast<double>(s));
  std::vector<std::complex<double>> phase(L), root(ell);
  for (int e = 0; e < L; ++e) phase[e] = std::polar(1.0, kTwoPi * e / L);
  for (int e = 0; e < ell; ++e) root[e] = std::polar(1.0, kTwoPi * e / ell);
  if (L == 4) phase = {{1, 0}, {0, 1}, {-1, 0}, {0, -1}};
  if (ell == 2) root = {{1, 0}, {-1, 0}};

  MubCoherence out;
  // (1) standard basis against v_{a,b}: |Re v_{a,b}[x]| = |cos(2π e/L)|/√s over all entries.
  double vs_std = 0;
#pragma omp parallel for reduction(max : vs_std) schedule(static)
  for (std::int64_t a = 0; a < s; ++a)
    for (std::int64_t b = 0; b < s; ++b)
      for (std::int64_t x = 0; x < s; ++x) {
        const int e = (P.Q[a * s + x] + P.c * P.dot[b * s + x]) % L;
        vs_std = std::max(vs_std, std::abs(phase[e].real()) * inv_sqrt);
      }
  out.realified_vs_standard = vs_std;

  // (2) basis a against basis a': c(Δb) = (1/s) Σ_x e^{2πi(Q_{a'}(x)−Q_a(x))/L} χ_{Δb}(x), a DFT over F_ℓ^k.
  // Odd ℓ: Q_{a'} − Q_a ≡ Q_{a'−a} (mod ℓ), so the pairs (0, Δa) cover every class.
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  if (ell == 2) {
    for (std::int64_t a = 0; a < s; ++a)
      for (std::int64_t a2 = a; a2 < s; ++a2) pairs.emplace_back(a, a2);
  } else {
    for (std::int64_t da = 0; da < s; ++da) pairs.emplace_back(0, da);
  }
  std::vector<std::int64_t> stride(k + 1, 1);
  for (int j = 1; j <= k; ++j) stride[j] = stride[j - 1] * ell;
  double best = 0, orth = 0, unb = 0;
#pragma omp parallel reduction(max : best, orth, unb)
  {
    std::vector<std::complex<double>> w(s), tmp(ell), res(ell);
#pragma omp for schedule(dynamic, 1)
    for (std::size_t pi = 0; pi < pairs.size(); ++pi) {
      const auto [a, a2] = pairs[pi];
      for (std::int64_t x = 0; x < s; ++x) {
        const int e = ((P.Q[a2 * s + x] - P.Q[a * s + x]) % L + L) % L;
        w[x] = phase[e] * inv_s;
      }
      // Separable DFT: along each digit axis j, F[y_j] = Σ_{x_j} w[x_j] ω_ℓ^{x_j y_j}.
      for (int j = 0; j < k; ++j) {
        const std::int64_t st = stride[j];
        for (std::int64_t base = 0; base < s; ++base) {
          if ((base / st) % ell != 0) continue;
          for (int t = 0; t < ell; ++t) tmp[t] = w[base + t * st];
          for (int y = 0; y < ell; ++y) {
            std::complex<double> acc = 0;
            for (int t = 0; t < ell; ++t) acc += tmp[t] * root[(static_cast<std::int64_t>(t) * y) % ell];
            res[y] = acc;
          }
          for (int y = 0; y < ell; ++y) w[base + y * st] = res[y];
        }
      }
      for (std::int64_t db = 0; db < s; ++db) {
        if (a == a2) {
          if (db == 0) continue;  // the vector against itself
          orth = std::max(orth, std::abs(w[db]));
        } else {
          unb = std::max(unb, std::abs(std::norm(w[db]) - inv_s));
        }
        best = std::max(best, std::abs(w[db].real()));
      }
    }
  }
  out.max_orthogonality_error = orth;
  out.max_unbiased_error = unb;
  out.realified = std::max(best, vs_std);
  return out;
}

}  // namespace memcap::kata
