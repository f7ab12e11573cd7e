// Counter-based random streams: Random123's published philox4x32-10 known answers (through our
// (seed, stream, index) -> (key, counter) layout), uniform/below/normal derived from those words by
// independent formulas, determinism, independence of streams, and moments within tolerances derived
// from the standard error of the mean for n = 200,000 draws.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>

#include "core/random_fill.hpp"
#include "core/rng.hpp"

using namespace memcap;

namespace {
// Random123 kat_vectors, "philox4x32 10": counter words, key words, expected output words.
struct PhiloxKat {
  std::array<std::uint32_t, 4> ctr;
  std::array<std::uint32_t, 2> key;
  std::array<std::uint32_t, 4> out;
};
constexpr PhiloxKat kPhiloxKat[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u}, {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};
std::uint64_t join(std::uint32_t lo, std::uint32_t hi) { return (std::uint64_t(hi) << 32) | lo; }
}  // namespace

TEST_CASE("philox4x32-10 matches Random123's known-answer vectors through (seed, stream, index)") {
  for (const PhiloxKat& v : kPhiloxKat) {
    // Our layout (rng.hpp): counter = (index lo, index hi, stream lo, stream hi), key = (seed lo, seed hi).
    const std::uint64_t index = join(v.ctr[0], v.ctr[1]), stream = join(v.ctr[2], v.ctr[3]);
    const std::uint64_t seed = join(v.key[0], v.key[1]);
    CAPTURE(seed);
    const auto r = rng::philox_block(seed, stream, index);
    for (int w = 0; w < 4; ++w) CHECK(r[w] == v.out[w]);
    // uniform: the top 53 bits of the 64-bit word (out0:out1), centred in its cell of width 2^-53.
    const std::uint64_t x = join(v.out[1], v.out[0]);
    CHECK(rng::uniform(seed, stream, index) == (static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0);
    // below(n) = floor(x n / 2^64): for n = 2^k it is the top k bits of x.
    for (int k : {1, 7, 20, 63}) CHECK(rng::below(seed, stream, index, std::uint64_t(1) << k) == x >> (64 - k));
    CHECK(rng::below(seed, stream, index, 1) == 0);
    // normal: Box-Muller of the two 53-bit uniforms (out0:out1) and (out2:out3), in long double.
    const long double u1 = (static_cast<long double>(x >> 11) + 0.5L) / 9007199254740992.0L;
    const long double u2 = (static_cast<long double>(join(v.out[3], v.out[2]) >> 11) + 0.5L) / 9007199254740992.0L;
    const long double z = std::sqrt(-2.0L * std::log(u1)) * std::cos(2.0L * 3.14159265358979323846264338L * u2);
    CHECK(std::abs(rng::normal(seed, stream, index) - static_cast<double>(z)) <= 1e-14 * (1.0 + std::abs(double(z))));
  }
  // The Stream64 wrapper draws index start, start+1, ... of the same function.
  rng::Stream64 s(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a87ull);
  s.uniform();
  CHECK(s.normal() == rng::normal(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull));
}

TEST_CASE("draws are pure functions of (seed, stream, index)") {
  CHECK(rng::normal(1, 2, 3) == rng::normal(1, 2, 3));
  CHECK(rng::normal(1, 2, 3) != rng::normal(1, 2, 4));
  CHECK(rng::normal(1, 2, 3) != rng::normal(1, 3, 3));
  CHECK(rng::normal(1, 2, 3) != rng::normal(2, 2, 3));
  auto a = rng::normal_matrix(4, 5, 9, rng::kKeys);
  auto b = rng::normal_matrix(4, 5, 9, rng::kKeys);
  CHECK(a == b);
  CHECK(a(2, 3) == rng::normal(9, rng::kKeys, 2 * 5 + 3));
}

TEST_CASE("uniform and normal moments") {
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    double u = rng::uniform(5, 1, static_cast<std::uint64_t>(i));
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    su += u;
    double z = rng::normal(5, 2, static_cast<std::uint64_t>(i));
    sn += z;
    sn2 += z * z;
  }
  CHECK(umin > 0.0);
  CHECK(umax < 1.0);
  // 5 standard errors: uniform sd = 0.2887, normal sd = 1, var of z^2 = 2.
  CHECK(std::abs(su / n - 0.5) < 5 * 0.2887 / std::sqrt(n));
  CHECK(std::abs(sn / n) < 5 / std::sqrt(n));
  CHECK(std::abs(sn2 / n - 1) < 5 * std::sqrt(2.0 / n));
}

TEST_CASE("sphere rows are unit and permutations are permutations") {
  auto s = rng::sphere_rows(50, 7, 3, rng::kValues);
  for (int i = 0; i < 50; ++i) CHECK(s.row(i).norm() == doctest::Approx(1.0).epsilon(1e-14));
  auto p = rng::permutation(1000, 4, rng::kMap);
  std::set<int> seen(p.data(), p.data() + p.size());
  CHECK(seen.size() == 1000);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 999);
  CHECK(rng::below(1, 1, 1, 10) < 10);
  CHECK(rng::derive_seed(0, "a") != rng::derive_seed(0, "b"));
  CHECK(rng::derive_seed(0, "a") == rng::derive_seed(0, "a"));
}
