// GF(ℓ^k) arithmetic on element indices: digit-vector addition, polynomial multiplication
// modulo the smallest monic irreducible, absolute trace and the quadratic-form matrices M_a.
#include "kata/finite_field.hpp"

#include "core/error.hpp"

namespace memcap::kata {

bool is_prime(std::int64_t n) {
  if (n < 2) return false;
  for (std::int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

bool prime_power(std::int64_t s, std::int64_t& ell, int& k) {
  if (s < 2) return false;
  std::int64_t p = 2;
  while (p * p <= s && s % p != 0) ++p;
  if (s % p != 0) p = s;  // s itself is prime
  std::int64_t r = s;
  int e = 0;
  while (r % p == 0) { r /= p; ++e; }
  if (r != 1) return false;
  ell = p;
  k = e;
  return true;
}

namespace {

using Poly = std::vector<int>;  // coefficients low -> high, mod ℓ

int degree_of(const Poly& a) {
  for (int i = static_cast<int>(a.size()) - 1; i >= 0; --i)
    if (a[i] != 0) return i;
  return -1;
}

int inverse_mod(int a, int ell) {  // ℓ prime, a != 0
  for (int x = 1; x < ell; ++x)
    if ((static_cast<std::int64_t>(a) * x) % ell == 1) return x;
  MEMCAP_ASSERT(false, "no inverse mod prime");
  return 0;
}

// Remainder of a divided by monic-or-not b (deg b >= 0), over F_ℓ.
Poly poly_mod(Poly a, const Poly& b, int ell) {
  const int db = degree_of(b);
  const int inv = inverse_mod(b[db], ell);
  for (int da = degree_of(a); da >= db; da = degree_of(a)) {
    const int f = static_cast<int>((static_cast<std::int64_t>(a[da]) * inv) % ell);
    for (int i = 0; i <= db; ++i) {
      a[da - db + i] = static_cast<int>(((a[da - db + i] - static_cast<std::int64_t>(f) * b[i]) % ell + ell) % ell);
    }
  }
  return a;
}

// Monic polynomial of degree deg whose low coefficients are the base-ℓ digits of code.
Poly monic_from_code(std::int64_t code, int deg, int ell) {
  Poly p(deg + 1, 0);
  for (int i = 0; i < deg; ++i) { p[i] = static_cast<int>(code % ell); code /= ell; }
  p[deg] = 1;
  return p;
}

bool irreducible(const Poly& f, int ell) {
  const int k = degree_of(f);
  for (int d = 1; d <= k / 2; ++d) {
    std::int64_t count = 1;
    for (int i = 0; i < d; ++i) count *= ell;
    for (std::int64_t c = 0; c < count; ++c) {
      Poly r = poly_mod(f, monic_from_code(c, d, ell), ell);
      if (degree_of(r) < 0) return false;
    }
  }
  return true;
}

}  // namespace

GaloisField::GaloisField(std::int64_t s) : s_(s) {
  std::int64_t ell = 0;
  int k = 0;
  require(s <= (std::int64_t(1) << 20), "field size s = {} is too large (at most 2^20 supported)", s);
  require(prime_power(s, ell, k),
          "field size s = {} is not a prime power; MUB and DeVore dictionaries need s = ℓ^k with ℓ prime "
          "(e.g. 2, 3, 4, 5, 7, 8, 9, 11, ...)", s);
  ell_ = ell;
  k_ = k;
  pow_.assign(k_ + 1, 1);
  for (int j = 1; j <= k_; ++j) pow_[j] = pow_[j - 1] * ell_;
  if (k_ == 1) {
    poly_ = {0, 1};
  } else {
    for (std::int64_t code = 0;; ++code) {
      Poly f = monic_from_code(code, k_, static_cast<int>(ell_));
      if (irreducible(f, static_cast<int>(ell_))) { poly_ = f; break; }
    }
  }
  if (s_ <= kTableMax) {
    mul_table_.resize(static_cast<std::size_t>(s_ * s_));
    for (std::int64_t a = 0; a < s_; ++a)
      for (std::int64_t b = a; b < s_; ++b) {
        const auto v = static_cast<std::int32_t>(mul_slow(a, b));
        mul_table_[a * s_ + b] = v;
        mul_table_[b * s_ + a] = v;
      }
  }
  // tr(c) = Σ_j [x^j coefficient of c·x^j mod f].
  trace_.resize(static_cast<std::size_t>(s_));
  for (std::int64_t c = 0; c < s_; ++c) {
    int t = 0;
    for (int j = 0; j < k_; ++j) t += digits(mul(c, pow_[j]))[j];
    trace_[c] = t % static_cast<int>(ell_);
  }
}

std::vector<int> GaloisField::digits(std::int64_t i) const {
  std::vector<int> d(k_);
  for (int j = 0; j < k_; ++j) { d[j] = static_cast<int>(i % ell_); i /= ell_; }
  return d;
}

std::int64_t GaloisField::from_digits(const std::vector<int>& d) const {
  std::int64_t i = 0;
  for (int j = k_ - 1; j >= 0; --j) i = i * ell_ + d[j];
  return i;
}

std::int64_t GaloisField::add(std::int64_t a, std::int64_t b) const {
  if (k_ == 1) return (a + b) % ell_;
  std::int64_t r = 0;
  for (int j = 0; j < k_; ++j) r += ((a / pow_[j] + b / pow_[j]) % ell_) * pow_[j];
  return r;
}

std::int64_t GaloisField::sub(std::int64_t a, std::int64_t b) const {
  if (k_ == 1) return ((a - b) % ell_ + ell_) % ell_;
  std::int64_t r = 0;
  for (int j = 0; j < k_; ++j) r += (((a / pow_[j]) % ell_ - (b / pow_[j]) % ell_ + ell_) % ell_) * pow_[j];
  return r;
}

std::int64_t GaloisField::mul(std::int64_t a, std::int64_t b) const {
  if (!mul_table_.empty()) return mul_table_[a * s_ + b];
  return mul_slow(a, b);
}

std::int64_t GaloisField::mul_slow(std::int64_t a, std::int64_t b) const {
  if (k_ == 1) return (a * b) % ell_;
  const int ell = static_cast<int>(ell_);
  const auto da = digits(a), db = digits(b);
  Poly prod(2 * k_ - 1, 0);
  for (int i = 0; i < k_; ++i)
    for (int j = 0; j < k_; ++j) prod[i + j] = (prod[i + j] + da[i] * db[j]) % ell;
  Poly r = poly_mod(prod, poly_, ell);
  r.resize(k_, 0);
  return from_digits(r);
}

int GaloisField::trace(std::int64_t c) const { return trace_[c]; }

std::vector<int> GaloisField::quadratic_form(std::int64_t a) const {
  std::vector<int> m(static_cast<std::size_t>(k_ * k_));
  for (int i = 0; i < k_; ++i)
    for (int j = 0; j < k_; ++j) m[i * k_ + j] = trace(mul(a, mul(pow_[i], pow_[j])));
  return m;
}

}  // namespace memcap::kata
