// Finite fields GF(ℓ^k) for the MUB and DeVore constructions (spec kata.md §3.6–3.7).
// Elements are numbered 0..s-1 by their coefficient digits in base ℓ (low digit = constant term);
// the modulus is the lexicographically smallest monic irreducible polynomial of degree k.
#pragma once
#include <cstdint>
#include <vector>

namespace memcap::kata {

// If s = ℓ^k with ℓ prime and k ≥ 1, returns true and sets ell, k.
bool prime_power(std::int64_t s, std::int64_t& ell, int& k);
bool is_prime(std::int64_t n);

class GaloisField {
 public:
  // UserError when s is not a prime power (or s > 1<<20, far beyond any dictionary we can hold).
  explicit GaloisField(std::int64_t s);

  std::int64_t size() const { return s_; }
  std::int64_t characteristic() const { return ell_; }
  int degree() const { return k_; }
  // Monic modulus, coefficients low -> high (k+1 entries; for k = 1 it is x: [0, 1]).
  const std::vector<int>& modulus() const { return poly_; }
  // Base-ℓ digits of element index i (k entries, low first).
  std::vector<int> digits(std::int64_t i) const;
  std::int64_t from_digits(const std::vector<int>& d) const;

  std::int64_t add(std::int64_t a, std::int64_t b) const;
  std::int64_t sub(std::int64_t a, std::int64_t b) const;
  std::int64_t mul(std::int64_t a, std::int64_t b) const;
  // Absolute trace to F_ℓ: trace of the F_ℓ-linear map "multiply by c".
  int trace(std::int64_t c) const;
  // Quadratic-form matrix M_a[i][j] = tr(a x^i x^j), k×k row-major, entries in 0..ℓ-1.
  std::vector<int> quadratic_form(std::int64_t a) const;

 private:
  std::int64_t s_ = 0, ell_ = 0;
  int k_ = 0;
  std::vector<int> poly_;
  std::vector<std::int64_t> pow_;          // ℓ^j
  std::vector<std::int32_t> mul_table_;    // s*s when s <= kTableMax, else empty
  std::vector<int> trace_;                 // per element
  std::int64_t mul_slow(std::int64_t a, std::int64_t b) const;
  static constexpr std::int64_t kTableMax = 2048;
};

}  // namespace memcap::kata
