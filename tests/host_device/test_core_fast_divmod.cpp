// kernels/fast_divmod.cuh compiled for the host (its high multiply through unsigned __int128 there, __umul64hi on
// the GPU): every quotient and remainder equals the integer division's, for small divisors exhaustively over a
// range of dividends, for every power of two and its neighbours, and for random 63-bit dividends and divisors up
// to 2^62. The element-wise kernels use it to split flat indices; a wrong quotient there would read the wrong
// element, which the GPU tests against the CPU references would catch too, but only on the sizes they run.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <stdexcept>

#include "fast_divmod.cuh"

using memcap::cuda_detail::FastDivmod;

namespace {
// Counts dividends n whose quotient or remainder by d differ from / and %.
std::int64_t wrong(const FastDivmod& f, std::int64_t d, std::int64_t n) {
  std::int64_t q = -1, r = -1;
  f.divmod(n, q, r);
  return (q != n / d || r != n % d || f.div(n) != n / d || f.mod(n) != n % d) ? 1 : 0;
}
}  // namespace

TEST_CASE("FastDivmod: quotient and remainder equal / and % for every 63-bit dividend tried") {
  std::int64_t bad = 0, checked = 0;
  for (std::int64_t d = 1; d <= 300; ++d) {  // small divisors, every dividend below 20,000 and near 2^63
    const FastDivmod f(d);
    CHECK(f.divisor() == d);
    for (std::int64_t n = 0; n < 20000; ++n, ++checked) bad += wrong(f, d, n);
    for (std::int64_t k = 0; k < 2000; ++k, ++checked) bad += wrong(f, d, INT64_MAX - k);
  }
  std::mt19937_64 gen(2026);
  for (int b = 0; b <= 62; ++b)  // powers of two and their neighbours as divisors
    for (const std::int64_t d : {(std::int64_t(1) << b) - 1, std::int64_t(1) << b, (std::int64_t(1) << b) + 1}) {
      if (d < 1 || d > (std::int64_t(1) << 62)) continue;
      const FastDivmod f(d);
      const std::int64_t twice = d <= INT64_MAX / 2 ? 2 * d : INT64_MAX;  // 2d overflows for d = 2^62
      for (const std::int64_t n : {std::int64_t(0), d - 1, d, d + 1, twice - 1, twice, INT64_MAX, INT64_MAX - d}) {
        ++checked;
        bad += wrong(f, d, n);
      }
      for (int k = 0; k < 2000; ++k, ++checked) bad += wrong(f, d, static_cast<std::int64_t>(gen() >> 1));
    }
  for (int trial = 0; trial < 20000; ++trial) {  // random divisors of every magnitude
    const int bits = 1 + static_cast<int>(gen() % 62);
    const std::int64_t d = 1 + static_cast<std::int64_t>(gen() >> (64 - bits));
    const FastDivmod f(d);
    for (int k = 0; k < 50; ++k, ++checked) {
      const std::int64_t n = static_cast<std::int64_t>(gen() >> (1 + gen() % 63));
      bad += wrong(f, d, n);
    }
  }
  INFO(checked << " dividends checked");
  CHECK(checked > 6000000);
  CHECK(bad == 0);
}

TEST_CASE("FastDivmod: a divisor outside [1, 2^62] is refused, the default divides by 1") {
  CHECK_THROWS_AS(FastDivmod(0), std::invalid_argument);
  CHECK_THROWS_AS(FastDivmod(-5), std::invalid_argument);
  CHECK_THROWS_AS(FastDivmod((std::int64_t(1) << 62) + 1), std::invalid_argument);
  const FastDivmod one;
  CHECK(one.div(12345) == 12345);
  CHECK(one.mod(12345) == 0);
}
