// GPU vs CPU for the capacity trial (kernels/kata_capacity.cu vs src/kata/capacity_cpu.cpp): every
// map, value model, readout, query noise and tiling; outputs poisoned with NaN before the call.
// Tolerances (float32 coefficients vs the float64 reference): pSNR relative 2e-4 (a ratio of sums of
// squared coefficients, each with relative error ~1e-6 x sqrt(d)), coherence 1e-4, cross-check 1e-5.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/capacity.hpp"
#include "kata/capacity_cuda.hpp"
#include "kata/key_source.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {
const char* kMaps[] = {"linear", "orthant", "lorentz", "lorentz-ray", "lorentz-lift", "m1", "m2", "m4",
                       "sigma2", "sigma4", "deg2", "softmax:tau=0.125", "softmax:tau=1"};

void compare(const TrialMetrics& g, const TrialMetrics& c, std::int64_t K) {
  REQUIRE(g.psnr.size() == K);
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < K; ++i) {
    REQUIRE_FALSE(std::isnan(g.psnr(i)));
    if (std::isinf(c.psnr(i))) {
      CHECK(g.psnr(i) > 1e6);
      continue;
    }
    num += (g.psnr(i) - c.psnr(i)) * (g.psnr(i) - c.psnr(i)) / (c.psnr(i) * c.psnr(i));
    den += 1;
  }
  CHECK(std::sqrt(num / std::max(den, 1.0)) < 2e-4);
  CHECK(g.coherence == doctest::Approx(c.coherence).epsilon(1e-4));
  CHECK(g.max_deviation < 1e-5);
  CHECK(std::abs(g.correct - c.correct) <= std::max<std::int64_t>(1, K / 100));  // near-ties may flip
}
}  // namespace

TEST_CASE("CUDA capacity trial equals the CPU reference (all maps, tiles, values, noise)") {
  for (int d : {16, 32}) {
    const std::int64_t K = 300;
    const Eigen::MatrixXd U = KeySource::parse("random", d).draw(K, 17, K);
    Eigen::MatrixXd Qn = U + 0.05 * rng::normal_matrix(K, d, 18, rng::kNoise) / std::sqrt(double(d));
    for (Eigen::Index i = 0; i < K; ++i) Qn.row(i).normalize();
    for (const char* spec : kMaps) {
      for (const char* vm : {"gauss", "codebook:size=128"}) {
        CAPTURE(d);
        CAPTURE(spec);
        CAPTURE(vm);
        const CapacityKernel k = CapacityKernel::parse(spec, d);
        const Values v = ValueModel::parse(vm).draw(K, 24, 3);
        const Readout r = resolve_readout("auto", k);
        compare(evaluate_trial_cuda(k, U, U, v, r, 0), evaluate_trial_cpu(k, U, U, v, r, 0), K);
        compare(evaluate_trial_cuda(k, U, U, v, r, 37), evaluate_trial_cpu(k, U, U, v, r, 0), K);
        compare(evaluate_trial_cuda(k, U, Qn, v, r, 64), evaluate_trial_cpu(k, U, Qn, v, r, 0), K);
        if (!k.is_softmax() && r == Readout::normalized)
          compare(evaluate_trial_cuda(k, U, U, v, Readout::unnormalized, 0),
                  evaluate_trial_cpu(k, U, U, v, Readout::unnormalized, 0), K);
      }
    }
  }
}

TEST_CASE("CUDA capacity search gives the CPU capacities (M1 and linear, random keys, p = 32)") {
  for (const char* spec : {"m1", "linear", "m2"}) {
    CAPTURE(spec);
    CapacityConfig c;
    c.map = spec;
    c.dim = 32;
    c.trials = 2;
    c.seed = 3;
    c.k_max = 1024;
    const CapacityResult g = run_capacity(c, Device::cuda), h = run_capacity(c, Device::cpu);
    CHECK(g.k_star_psnr == h.k_star_psnr);
    CHECK(g.path == "cuda");
    CHECK(g.max_deviation < 1e-5);
  }
}

TEST_CASE("K = 131072 bindings at d_head = 128 fit on the GPU (M1, random keys)") {
  const std::int64_t K = 131072;
  const int d = 128;
  const Eigen::MatrixXd U = KeySource::parse("random", d).draw(K, 5, K);
  const Values v = ValueModel::parse("gauss").draw(K, d, 6);
  const CapacityKernel k = CapacityKernel::parse("m1", d);
  const TrialMetrics m = evaluate_trial_cuda(k, U, U, v, Readout::normalized, 0);
  std::vector<double> p(m.psnr.data(), m.psnr.data() + K);
  for (double x : p) REQUIRE(std::isfinite(x));
  std::nth_element(p.begin(), p.begin() + K / 2, p.end());
  // Random-key estimate p(p+2)/(3(K-1)) = 0.0423; the median of the ratio sits ~10% below the mean.
  CHECK(p[K / 2] == doctest::Approx(128.0 * 130.0 / (3.0 * (K - 1))).epsilon(0.2));
  CHECK(m.max_deviation < 1e-5);
  MESSAGE("K=131072 d=128 M1: median pSNR " << p[K / 2] << ", max deviation " << m.max_deviation
                                            << ", correct " << m.correct);
}
