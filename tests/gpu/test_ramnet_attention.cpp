// GPU vs CPU for `ramnet attn --device cuda` (E2/E3): run_attention with the kappa student's log-kernel
// matrix from log_kappa_matrix_cuda (attention_cuda.hpp) against the all-CPU run, at a large T. Float64 on
// both sides; only the dp-term GEMM sums and the device log differ (~1e-16 relative per log κ), so JS, KL and
// NMSE agree to kStatTol = 1e-12 relative. Shared (circular, random) and per-factor (pq) codebooks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "core/gpu.hpp"
#include "ramnet/attention.hpp"
#include "ramnet/attention_cuda.hpp"

using namespace memcap;
using namespace memcap::ramnet;

namespace {

constexpr double kStatTol = 1e-12;

struct Gpu {
  gpu::Stream stream;
  gpu::Handles handles{stream};
};
Gpu& device() {
  static Gpu* g = new Gpu;
  return *g;
}

double rel(double got, double ref) { return std::abs(got - ref) / std::max(std::abs(ref), 1e-300); }

}  // namespace

TEST_CASE("run_attention: kappa student on the GPU equals the CPU (T = 4096, n = 256; JS, KL, NMSE 1e-12 relative)") {
  Gpu& g = device();
  const LogKappaFn fn = cuda_log_kappa(g.handles, 0);
  for (const char* cbname : {"circular", "random", "pq"}) {
    for (const char* gen : {"gauss:sigma=1", "rope:sigma=0.8"}) {
      CAPTURE(cbname);
      CAPTURE(gen);
      AttnConfig c;
      c.params = Params{4, 5, 0.795, 0.795};
      c.tau = std::sqrt(10.0);
      c.topk = 0;
      c.gen = Generator::parse(gen);
      c.codebook = parse_codebook(cbname);
      c.T = 4096;
      c.n = 256;
      c.trials = 2;
      c.seed = 11;
      c.students = {"kappa"};
      const AttnResult cpu = run_attention(c), gpu = run_attention(c, fn);
      const StudentStats &a = *cpu.find("kappa"), &b = *gpu.find("kappa");
      REQUIRE(std::isfinite(b.js));
      REQUIRE(std::isfinite(b.nmse));
      std::printf("attn kappa %s %s: JS %.6e (rel diff %.2e), NMSE %.6e (rel diff %.2e)\n", cbname, gen, a.js,
                  rel(b.js, a.js), a.nmse, rel(b.nmse, a.nmse));
      CHECK(rel(b.js, a.js) < kStatTol);
      CHECK(rel(b.kl, a.kl) < kStatTol);
      CHECK(rel(b.nmse, a.nmse) < kStatTol);
      CHECK(b.dead_rate == a.dead_rate);
    }
  }
}

TEST_CASE("log_kappa_matrix through the GPU backend equals the CPU for per-factor codebooks (1e-12 relative)") {
  Gpu& g = device();
  const LogKappaFn fn = cuda_log_kappa(g.handles, 0);
  const Params p{4, 3, 0.9, 1.2};
  const Generator gen = Generator::parse("gauss:sigma=1");
  const CodebookSet cb = make_codebooks(CodebookKind::pq, p.dp, p.U, gen, 3);
  const AttnSample smp = generate(gen, p.dp, p.U, 3000, 300, 1, 3, 0);
  const Eigen::MatrixXd ref = log_kappa_matrix(p, cb, smp.Q, smp.K), got = log_kappa_matrix(p, cb, smp.Q, smp.K, fn);
  REQUIRE(got.allFinite());
  CHECK((got - ref).norm() / ref.norm() < kStatTol);
}
