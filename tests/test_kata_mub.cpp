// Realified MUB dictionaries (spec kata.md §3.6): orthonormal bases, unbiasedness 1/s, realified
// coherence exactly 1/√s, the distinct-value sets (iv), the s = 3 and s = 4 worked vectors, and the
// symmetry-based coherence agreeing with the blocked GEMM coherence.
#include <doctest/doctest.h>

#include <cmath>
#include <complex>

#include "core/error.hpp"
#include "kata/dictionary.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {
// Complex view of a realified row.
std::vector<std::complex<double>> cplx(const Eigen::MatrixXd& V, std::int64_t r, std::int64_t s) {
  std::vector<std::complex<double>> z(s);
  for (std::int64_t x = 0; x < s; ++x) z[x] = {V(r, x), V(r, s + x)};
  return z;
}
}  // namespace

TEST_CASE("MUB for every s in the acceptance list: orthonormal, unbiased, coherence 1/sqrt(s)") {
  for (std::int64_t s : {2, 3, 4, 5, 7, 8, 9, 11, 13, 16, 25, 27, 32}) {
    CAPTURE(s);
    const Eigen::MatrixXd V = mub_dictionary(s);
    REQUIRE(V.rows() == s * (s + 1));
    REQUIRE(V.cols() == 2 * s);
    CHECK((V.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
    // complex Gram by blocks of bases: G = conj(A) B^T via real parts.
    const Eigen::MatrixXd Re = V.leftCols(s), Im = V.rightCols(s);
    const Eigen::MatrixXd GR = Re * Re.transpose() + Im * Im.transpose();  // Re<u,v>
    const Eigen::MatrixXd GI = Re * Im.transpose() - Im * Re.transpose();  // Im<u,v>
    const auto ids = mub_basis_ids(s);
    double orth = 0, unb = 0, coh = 0;
    for (std::int64_t i = 0; i < V.rows(); ++i)
      for (std::int64_t j = i + 1; j < V.rows(); ++j) {
        const double m2 = GR(i, j) * GR(i, j) + GI(i, j) * GI(i, j);
        if (ids[i] == ids[j]) orth = std::max(orth, m2);
        else unb = std::max(unb, std::abs(m2 - 1.0 / s));
        coh = std::max(coh, std::abs(GR(i, j)));
      }
    CHECK(orth < 1e-28);                        // (i): |<>|² off-diagonal within a basis
    CHECK(unb < 1e-12);                         // (ii): |<>|² = 1/s across bases (acceptance: 1e-12)
    CHECK(std::abs(coh - 1 / std::sqrt(double(s))) < 1e-14);  // (iii)
    // blocked GEMM coherence and the symmetry computation agree with the full Gram
    CHECK(std::abs(coherence(V, 7) - coh) < 1e-14);
    const MubCoherence mc = mub_coherence(s);
    CHECK(std::abs(mc.realified - coh) < 1e-13);
    CHECK(mc.max_orthogonality_error < 1e-13);
    CHECK(mc.max_unbiased_error < 1e-12);
    CHECK(std::abs(mc.realified_vs_standard - 1 / std::sqrt(double(s))) < 1e-15);
    // PSD coherence of the realified set (M1 feature space) = 1/s
    CHECK(std::abs(feature_coherence(V, FeatureMap::parse("m1", 2 * s), 64) - 1.0 / s) < 1e-13);
  }
}

TEST_CASE("distinct realified |<>| values (spec 3.6 (iv))") {
  const std::pair<std::int64_t, std::vector<double>> want[] = {
      {3, {0, 0.288675, 0.5, 0.577350}},
      {4, {0, 0.5}},
      {5, {0, 0.1382, 0.3618, 0.44721}},
      {8, {0, 0.25, 0.35355}},
      {9, {0, 0.16667, 0.33333}},
  };
  for (const auto& [s, vals] : want) {
    CAPTURE(s);
    const auto got = distinct_abs_inner_products(mub_dictionary(s), 1e-9);
    REQUIRE(got.size() == vals.size());
    for (std::size_t i = 0; i < vals.size(); ++i) CHECK(got[i] == doctest::Approx(vals[i]).epsilon(2e-4));
  }
}

TEST_CASE("s = 3 phase exponents and worked vectors") {
  // u_{k,m}[j] = ω^{k j² + m j}: row s + k·s + m.
  const int want[3][3][3] = {{{0, 0, 0}, {0, 1, 2}, {0, 2, 1}},
                             {{0, 1, 1}, {0, 2, 0}, {0, 0, 2}},
                             {{0, 2, 2}, {0, 0, 1}, {0, 1, 0}}};
  const Eigen::MatrixXd V = mub_dictionary(3);
  for (int k = 0; k < 3; ++k)
    for (int m = 0; m < 3; ++m) {
      const auto z = cplx(V, 3 + 3 * k + m, 3);
      for (int j = 0; j < 3; ++j) {
        const std::complex<double> w = std::polar(1 / std::sqrt(3.0), 2 * M_PI * want[k][m][j] / 3);
        CHECK(std::abs(z[j] - w) < 1e-15);
      }
    }
  const double r00[] = {0.57735, 0.57735, 0.57735, 0, 0, 0};
  const double r11[] = {0.57735, -0.28868, 0.57735, 0, -0.5, 0};
  for (int i = 0; i < 6; ++i) {
    CHECK(V(3, i) == doctest::Approx(r00[i]).epsilon(1e-4));
    CHECK(V(3 + 3 + 1, i) == doctest::Approx(r11[i]).epsilon(1e-4));
  }
  CHECK(V.row(3).dot(V.row(7)) == doctest::Approx(0.5).epsilon(1e-14));
}

TEST_CASE("s = 4 first vector of each basis (times 2), i^{x^T M_a x mod 4}") {
  using C = std::complex<double>;
  const C I(0, 1);
  const std::vector<std::vector<C>> want = {{1, 1, 1, 1}, {1, 1, I, -I}, {1, I, 1, -I}, {1, I, I, -1.0}};
  const Eigen::MatrixXd V = mub_dictionary(4);
  for (int a = 0; a < 4; ++a) {
    const auto z = cplx(V, 4 + 4 * a, 4);
    for (int x = 0; x < 4; ++x) CHECK(std::abs(2.0 * z[x] - want[a][x]) < 1e-15);
  }
}

TEST_CASE("MUB rejects non prime powers") {
  for (std::int64_t s : {1, 6, 10, 12}) CHECK_THROWS_AS(mub_dictionary(s), UserError);
  CHECK_THROWS_AS(mub_coherence(6), UserError);
}
