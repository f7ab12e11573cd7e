// GPU causal KATA attention against the float64 CPU reference (label gpu). Inputs are rounded to the
// GPU dtype first, so the error measured is the kernels' own; output buffers are NaN-poisoned, so an
// unwritten output cannot pass (relative_error returns inf on NaN).
// Tolerances (relative, ||gpu - cpu|| / ||cpu||): fp32 1e-5 (spec 7.1.9: fp32 summation-order level);
// bf16 1e-2 (bf16 P / psi / state operands and bf16 output, each rounded at 2^-9 relative).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/attention.hpp"
#include "kata/attention_cuda.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {

constexpr double kTolF32 = 1e-5, kTolBf16 = 1e-2;

struct Case {
  AttentionForm form;
  std::string map;
  GpuDType dtype;
  AttentionShape shape;
  std::int64_t chunk;
  bool normalized = true;  // false: o = numerator only; true: default_options' choice (unnormalized for linear)
};

std::vector<double> normals(std::size_t n, std::uint64_t seed, std::uint64_t stream) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = rng::normal(seed, stream, i);
  return x;
}

// Runs one case; returns the relative error against the CPU reference and the GPU output.
double check_case(const Case& c, std::uint64_t seed, std::vector<double>* gpu_out = nullptr, std::string* variant = nullptr) {
  const auto& s = c.shape;
  const auto q = round_to_dtype(c.dtype, normals(s.qk_size(), seed, rng::kQueries));
  const auto k = round_to_dtype(c.dtype, normals(s.qk_size(), seed, rng::kKeys));
  const auto v = round_to_dtype(c.dtype, normals(s.v_size(), seed, rng::kValues));
  AttentionOptions o = default_options(FeatureMap::parse(c.map, s.d), c.chunk);
  if (!c.normalized) o.normalized = false;
  const auto ref = attention_chunked(s, o, q.data(), k.data(), v.data());
  const auto gpu = attention_cuda(c.form, s, o, c.dtype, q.data(), k.data(), v.data());
  const double err = relative_error(gpu.out, ref);
  std::printf("%-9s %-16s %-4s %s B=%lld H=%lld T=%-5lld d=%-3lld dv=%-3lld C=%-3lld %-20s relerr %.3e\n",
              to_string(c.form), c.map.c_str(), to_string(c.dtype), o.normalized ? "norm  " : "unnorm", (long long)s.B, (long long)s.H, (long long)s.T,
              (long long)s.d, (long long)s.dv, (long long)c.chunk, gpu.variant.c_str(), err);
  if (gpu_out) *gpu_out = gpu.out;
  if (variant) *variant = gpu.variant;
  return err;
}

double tol(GpuDType t) { return t == GpuDType::bf16 ? kTolBf16 : kTolF32; }

}  // namespace

TEST_CASE("quadratic form: tensor-core bf16 (d = dv = 64) agrees with the CPU reference") {
  for (const char* map : {"m1", "m2", "m4", "m2:eps=1e-4", "sigma2", "sigma4:eps=1e-4"})
    for (std::int64_t T : {37, 300, 1000}) {  // 1000: 16 key tiles, the K/V ring wraps four times
      Case c{AttentionForm::quadratic, map, GpuDType::bf16, {2, 3, T, 64, 64}, 64};
      std::string variant;
      CAPTURE(map);
      CAPTURE(T);
      CHECK(check_case(c, 1000 + T, nullptr, &variant) < kTolBf16);
      CHECK(variant.rfind("quadratic/mma-bf16/", 0) == 0);  // + row-tiling variant, e.g. mt2
    }
}

TEST_CASE("chunked form: tensor-core bf16 for every map, C in {64, 128}, ragged last chunk") {
  for (const char* map : {"m1", "m2", "m4", "m2:eps=1e-4", "sigma2", "sigma4:eps=1e-4", "linear", "orthant", "lorentz"})
    for (std::int64_t C : {64, 128}) {
      Case c{AttentionForm::chunked, map, GpuDType::bf16, {2, 2, 333, 64, 64}, C};
      std::string variant;
      CAPTURE(map);
      CAPTURE(C);
      CHECK(check_case(c, 2000 + C, nullptr, &variant) < kTolBf16);
      CHECK(variant == "chunked/mma-bf16");
    }
}

TEST_CASE("tree form: tensor-core bf16 for the linear, orthant and Lorentz maps (many chunks)") {
  for (const char* map : {"linear", "orthant", "lorentz"})
    for (std::int64_t C : {64, 128}) {
      Case c{AttentionForm::tree, map, GpuDType::bf16, {1, 3, 1100, 64, 64}, C};
      std::string variant;
      CAPTURE(map);
      CHECK(check_case(c, 3000 + C, nullptr, &variant) < kTolBf16);
      CHECK(variant == "tree/mma-bf16");
    }
}

TEST_CASE("fp32 inputs (SIMT path): all three forms on random shapes") {
  for (std::uint64_t trial = 0; trial < 8; ++trial) {
    const auto r = [&](std::uint64_t i, std::uint64_t n) { return rng::below(77, trial, i, n); };
    const char* maps[] = {"m2", "sigma2:eps=1e-4", "m4", "m1", "linear", "orthant", "lorentz", "sigma4"};
    const std::string map = maps[trial];
    // Block count g of M_g / Σ_g from the map name (options such as ":eps=1e-4" stripped), checked against
    // the parser. d = max(g, 2)·block with block = 4..16: d = 8..32 for g <= 2 and the linear family, and
    // 16..64 for g = 4, so every M_4 / Σ_4 block has at least 4 dimensions.
    const std::string name = map.substr(0, map.find(':'));
    const bool blocked = name[0] == 'm' || name.rfind("sigma", 0) == 0;
    const int g = blocked ? name.back() - '0' : 1;
    const std::int64_t block = 4 * (1 + r(0, 4));
    const std::int64_t d = std::max(g, 2) * block, dv = 1 + r(1, 40);
    REQUIRE(FeatureMap::parse(map, d).groups() == g);
    const AttentionShape s{1 + std::int64_t(r(2, 2)), 1 + std::int64_t(r(3, 3)), 1 + std::int64_t(r(4, 260)), d, dv};
    const std::int64_t C = 1 + r(5, 64);
    const bool linear_family = map == "linear" || map == "orthant" || map == "lorentz";
    for (AttentionForm f : {AttentionForm::quadratic, AttentionForm::chunked, AttentionForm::tree}) {
      if (f == AttentionForm::tree && !linear_family) continue;
      CAPTURE(map);
      CAPTURE(s.T);
      CHECK(check_case({f, map, GpuDType::f32, s, C}, 4000 + trial) < kTolF32);
    }
  }
}

TEST_CASE("bf16 with d != 64 runs the SIMT path and stays within the bf16 tolerance") {
  for (AttentionForm f : {AttentionForm::quadratic, AttentionForm::chunked})
    CHECK(check_case({f, "sigma2", GpuDType::bf16, {1, 2, 150, 32, 16}, 32}, 5000) < kTolBf16);
  CHECK(check_case({AttentionForm::tree, "orthant", GpuDType::bf16, {1, 2, 150, 32, 16}, 32}, 5001) < kTolBf16);
}

TEST_CASE("unnormalized readout (o = numerator) on every kernel path") {
  const AttentionShape s{2, 2, 300, 64, 64};
  struct Path { AttentionForm form; const char* map; GpuDType dtype; std::int64_t chunk; };
  const Path paths[] = {
      {AttentionForm::quadratic, "m2", GpuDType::bf16, 64},      // Hopper warp-specialised (sm_90a) or mt2
      {AttentionForm::quadratic, "sigma2", GpuDType::bf16, 64},  // mma.sync
      {AttentionForm::quadratic, "m2", GpuDType::f32, 64},       // SIMT
      {AttentionForm::chunked, "m2", GpuDType::bf16, 64},
      {AttentionForm::chunked, "orthant", GpuDType::f32, 32},
      {AttentionForm::tree, "orthant", GpuDType::bf16, 128},
  };
  for (const Path& p : paths) {
    CAPTURE(p.map);
    CHECK(check_case({p.form, p.map, p.dtype, s, p.chunk, false}, 7000) < tol(p.dtype));
  }
}

TEST_CASE("the GPU forms agree with each other (bf16, M2 and orthant)") {
  const AttentionShape s{1, 2, 517, 64, 64};
  std::vector<double> quad, chunk, tree, chunk2;
  check_case({AttentionForm::quadratic, "m2", GpuDType::bf16, s, 64}, 6000, &quad);
  check_case({AttentionForm::chunked, "m2", GpuDType::bf16, s, 64}, 6000, &chunk);
  CHECK(relative_error(chunk, quad) < kTolBf16);
  check_case({AttentionForm::tree, "orthant", GpuDType::bf16, s, 128}, 6001, &tree);
  check_case({AttentionForm::chunked, "orthant", GpuDType::bf16, s, 128}, 6001, &chunk2);
  CHECK(relative_error(tree, chunk2) < kTolBf16);
  std::printf("GPU form agreement: chunked vs quadratic (m2) %.3e, tree vs chunked (orthant) %.3e\n",
              relative_error(chunk, quad), relative_error(tree, chunk2));
}

TEST_CASE("bad launches are UserErrors, not crashes") {
  const AttentionShape s{1, 1, 16, 64, 64};
  const auto x = normals(s.qk_size(), 1, 1);
  CHECK_THROWS_AS(attention_cuda(AttentionForm::tree, s, default_options(FeatureMap::parse("m2", s.d), 64), GpuDType::bf16,
                                 x.data(), x.data(), x.data()),
                  UserError);
  CHECK_THROWS_AS(attention_cuda(AttentionForm::chunked, s, default_options(FeatureMap::parse("m2", s.d), 100),
                                 GpuDType::f32, x.data(), x.data(), x.data()),
                  UserError);
  // d_head above the kernels' 1024 limit is refused before any launch.
  const AttentionShape wide{1, 1, 4, 1032, 8};
  const auto w = normals(wide.qk_size(), 2, 1);
  CHECK_THROWS_AS(attention_cuda(AttentionForm::quadratic, wide, default_options(FeatureMap::parse("linear", wide.d), 64),
                                 GpuDType::f32, w.data(), w.data(), w.data()),
                  UserError);
}
