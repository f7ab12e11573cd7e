// GF(ℓ^k) used by the MUB/DeVore constructions (spec kata.md §3.6 steps 1–3): moduli, traces,
// quadratic-form matrices, and the field axioms checked exhaustively on small fields.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "kata/finite_field.hpp"

using namespace memcap;
using namespace memcap::kata;

TEST_CASE("prime powers") {
  std::int64_t ell = 0;
  int k = 0;
  CHECK(prime_power(401, ell, k));
  CHECK((ell == 401 && k == 1));
  CHECK(prime_power(32, ell, k));
  CHECK((ell == 2 && k == 5));
  CHECK(prime_power(27, ell, k));
  CHECK((ell == 3 && k == 3));
  for (std::int64_t s : {0, 1, 6, 10, 12, 15, 100, 400})
    CHECK_FALSE(prime_power(s, ell, k));
  CHECK_THROWS_AS(GaloisField(6), UserError);
  CHECK_THROWS_AS(GaloisField(1), UserError);
}

TEST_CASE("smallest monic irreducible moduli (spec 3.6 step 1)") {
  const std::pair<int, std::vector<int>> want[] = {{4, {1, 1, 1}},    {8, {1, 1, 0, 1}},   {9, {1, 0, 1}},
                                                   {16, {1, 1, 0, 0, 1}}, {25, {2, 0, 1}}, {27, {1, 2, 0, 1}},
                                                   {32, {1, 0, 1, 0, 0, 1}}};
  for (const auto& [s, f] : want) {
    CAPTURE(s);
    CHECK(GaloisField(s).modulus() == f);
  }
}

TEST_CASE("traces (spec 3.6 step 2)") {
  const GaloisField f9(9), f8(8);
  const int t9[] = {0, 2, 1, 0, 2, 1, 0, 2, 1};
  const int t8[] = {0, 1, 0, 1, 0, 1, 0, 1};
  for (int i = 0; i < 9; ++i) CHECK(f9.trace(i) == t9[i]);
  for (int i = 0; i < 8; ++i) CHECK(f8.trace(i) == t8[i]);
  // tr(c) = c + c^ℓ + ... + c^{ℓ^{k-1}} (as a field element it lies in F_ℓ = indices 0..ℓ-1)
  for (std::int64_t s : {4, 8, 9, 25, 27}) {
    const GaloisField F(s);
    for (std::int64_t c = 0; c < s; ++c) {
      std::int64_t sum = 0, pw = c;
      for (int j = 0; j < F.degree(); ++j) {
        sum = F.add(sum, pw);
        std::int64_t next = 1;
        for (int e = 0; e < F.characteristic(); ++e) next = F.mul(next, pw);
        pw = next;
      }
      CHECK(sum == F.trace(c));
    }
  }
}

TEST_CASE("quadratic-form matrices for s = 4 (spec 3.6 step 3)") {
  const GaloisField F(4);
  CHECK(F.quadratic_form(0) == std::vector<int>{0, 0, 0, 0});
  CHECK(F.quadratic_form(1) == std::vector<int>{0, 1, 1, 1});
  CHECK(F.quadratic_form(2) == std::vector<int>{1, 1, 1, 0});
  CHECK(F.quadratic_form(3) == std::vector<int>{1, 0, 0, 1});
}

TEST_CASE("field axioms and nonsingular M_a - M_a' on small fields") {
  for (std::int64_t s : {2, 3, 4, 5, 8, 9, 16, 25, 27}) {
    CAPTURE(s);
    const GaloisField F(s);
    for (std::int64_t a = 1; a < s; ++a) {
      int inverses = 0;
      for (std::int64_t b = 0; b < s; ++b) {
        inverses += F.mul(a, b) == 1;
        CHECK(F.sub(F.add(a, b), b) == a);
        CHECK(F.mul(a, b) == F.mul(b, a));
      }
      CHECK(inverses == 1);  // every nonzero element is invertible
    }
    // distributivity on a sample
    for (std::int64_t a = 0; a < s; a += 3)
      for (std::int64_t b = 0; b < s; ++b)
        for (std::int64_t c = 0; c < s; c += 2) CHECK(F.mul(a, F.add(b, c)) == F.add(F.mul(a, b), F.mul(a, c)));
    // M_a symmetric; M_a − M_a' nonsingular over F_ℓ for a ≠ a' (checked via: x ↦ (M_a − M_a')x injective)
    const int k = F.degree(), ell = static_cast<int>(F.characteristic());
    for (std::int64_t a = 0; a < s; ++a)
      for (std::int64_t a2 = a + 1; a2 < s; ++a2) {
        const auto M = F.quadratic_form(a), M2 = F.quadratic_form(a2);
        int kernel_size = 0;
        for (std::int64_t x = 0; x < s; ++x) {
          const auto dx = F.digits(x);
          bool zero = true;
          for (int i = 0; i < k; ++i) {
            int v = 0;
            for (int j = 0; j < k; ++j) v += (M[i * k + j] - M2[i * k + j] + ell) * dx[j];
            zero = zero && v % ell == 0;
          }
          kernel_size += zero;
        }
        CHECK(kernel_size == 1);
      }
  }
}
