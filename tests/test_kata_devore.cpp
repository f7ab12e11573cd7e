// DeVore polynomial dictionaries (spec kata.md §3.7): counts, nonnegativity, s nonzeros per vector,
// coherence r/s exactly (GEMM and the exact root-count computation), overlap sets {0..r}.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "kata/bounds.hpp"
#include "kata/dictionary.hpp"

using namespace memcap;
using namespace memcap::kata;

TEST_CASE("DeVore table of spec 3.7: coherence r/s exactly, nonnegative entries") {
  const struct { std::int64_t s, r, T, d; } rows[] = {{3, 2, 27, 9},    {5, 2, 125, 25}, {7, 2, 343, 49},
                                                       {8, 2, 512, 64},  {9, 2, 729, 81}, {11, 3, 14641, 121}};
  for (const auto& row : rows) {
    CAPTURE(row.s);
    CAPTURE(row.r);
    const Eigen::MatrixXd V = devore_dictionary(row.s, row.r);
    REQUIRE(V.rows() == row.T);
    REQUIRE(V.cols() == row.d);
    CHECK(V.minCoeff() >= 0.0);
    for (std::int64_t i = 0; i < V.rows(); i += 97) CHECK((V.row(i).array() > 0).count() == row.s);
    CHECK((V.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
    const double mu = static_cast<double>(row.r) / row.s;
    const DevoreCoherence dc = devore_coherence(row.s, row.r);
    CHECK(std::abs(dc.value - mu) < 1e-15);
    std::vector<std::int64_t> counts;
    for (std::int64_t c = 0; c <= row.r; ++c) counts.push_back(c);
    CHECK(dc.overlap_counts == counts);
    if (row.T <= 1000) {  // full blocked GEMM (the s = 11 row is covered by the exact count)
      CHECK(std::abs(coherence(V, 100) - mu) < 1e-14);
      const auto vals = distinct_abs_inner_products(V, 1e-9);
      REQUIRE(vals.size() == static_cast<std::size_t>(row.r + 1));
      for (std::int64_t c = 0; c <= row.r; ++c) CHECK(vals[c] == doctest::Approx(double(c) / row.s));
    }
  }
  CHECK(welch_mu(64, 512) == doctest::Approx(0.1170).epsilon(1e-3));
}

TEST_CASE("DeVore r = 0: s disjoint supports, coherence 0") {
  const Eigen::MatrixXd V = devore_dictionary(5, 0);
  CHECK(V.rows() == 5);
  CHECK(coherence(V) == 0.0);
  CHECK(devore_coherence(5, 0).value == 0.0);
}

TEST_CASE("DeVore support layout: row index sum a_i s^i, coordinate x*s + P(x)") {
  // s = 5, r = 1, P(x) = a0 + a1 x with index = a0 + 5 a1: index 7 -> a0 = 2, a1 = 1 -> P(x) = 2 + x.
  const auto sup = devore_support(5, 1);
  for (std::int64_t x = 0; x < 5; ++x) CHECK(sup[7 * 5 + x] == x * 5 + (2 + x) % 5);
}

TEST_CASE("DeVore rejects bad input") {
  CHECK_THROWS_AS(devore_dictionary(6, 2), UserError);
  CHECK_THROWS_AS(devore_dictionary(5, 5), UserError);
  CHECK_THROWS_AS(devore_dictionary(5, -1), UserError);
  CHECK_THROWS_AS(devore_coherence(12, 1), UserError);
}
