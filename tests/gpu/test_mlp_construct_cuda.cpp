// GPU closed-form constructions and evaluation (mlp/construct_cuda.hpp) against the CPU path
// (mlp::build_mlp, GatedMLP::forward, margin::margins_from_outputs), every method, tied/untied,
// identity/permutation maps, automatic tiles and a tile of 7 (divides none of the F, m used), device arena
// poisoned with NaN. Named tolerances (relative Frobenius error ||gpu - cpu|| / ||cpu||):
//  - kExact: A, G (and NTK W_gate, P) are drawn on the host exactly as the CPU draws them: 0.
//  - kF64Direct = 1e-10 (sketched, exact-K2, NTK readouts): one GEMM / sum over F keys; measured on the
//    CPU, a 1e-15 relative perturbation of the keys moves B by <= 5e-15 for these fact sets.
//  - kWhitened = 1e-8: a Cholesky solve amplifies rounding by cond(Σ̂ + λI); the fact sets below have
//    cond <= 1.5e2 (d = 16: rank(Φ) <= d(d+1)/2 = 136 is above m (primal) and F (dual)), measured
//    sensitivity 5e-15; 1e-8 leaves room for cond up to ~1e6.
//  - kDataDepF64 = 1e-7: float64 CG run to rel. residual 1e-10 (converged case; measured 9e-11).
//  - kDataDepF32 = 1e-3: float32 CG to rel. residual 1e-5; the GPU's float32 rounding differs from the
//    CPU's (other GEMM order, float64-accumulated dots), so X agrees to ~tol·cond; measured by
//    perturbing Π by float32 rounding (6e-8) on the CPU: B moves 6e-6 (m=24) and 1.5e-5 (m=288).
//    Accuracy is compared exactly (no per-key margin within 2e-3 of zero relative to the largest).
//  - A CG stopped by its iteration cap (dual data-dependent fits) is chaotic: on the CPU alone a 1e-15
//    perturbation of the keys moves B by 2e-2, so weights are not compared there; accuracy is, and the
//    min margin within 1e-4 (the dual readout interpolates; measured 5e-9).
//  - kEval = 1e-9: min margin of the same model evaluated on GPU vs CPU (GEMM rounding only).
//  - probe_width_cuda vs evaluate_mlp_cuda(build_mlp_cuda): the same device code on the same weights,
//    expected bitwise equal; checked to 1e-12 relative.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "margin/margins.hpp"
#include "mlp/construct_cuda.hpp"
#include "mlp/constructions.hpp"
#include "mlp/factset.hpp"
#include "mlp/gd_train.hpp"
#include "mlp/method.hpp"
#include "mlp_cg.cuh"

using namespace memcap;
using namespace memcap::mlp;

namespace {

constexpr double kExact = 0.0;
constexpr double kF64Direct = 1e-10;
constexpr double kWhitened = 1e-8;
constexpr double kDataDepF64 = 1e-7;
constexpr double kDataDepF32 = 1e-3;
constexpr double kEval = 1e-9;
constexpr double kSameCode = 1e-12;
constexpr double kCappedMargin = 1e-4;
constexpr double kNoCompare = -1;  // weights not compared (CG at its cap)
constexpr std::int64_t kOddTile = 7;

FactSet make_facts(std::int64_t d, std::int64_t F, bool tied, const char* map, std::uint64_t seed,
                   std::int64_t P = 0) {
  FactSetSpec s;
  s.dim = d;
  s.facts = F;
  s.values = P;
  s.tied = tied;
  s.map = map;
  s.seed = seed;
  return make_factset(s);
}

double rel(const Eigen::MatrixXd& got, const Eigen::MatrixXd& want) {
  if (!got.allFinite()) return std::numeric_limits<double>::infinity();
  const double n = want.norm();
  return n == 0 ? got.norm() : (got - want).norm() / n;
}

double rel_scalar(double got, double want) {
  if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
  return std::abs(got - want) / std::max(std::abs(want), 1e-300);
}

std::int64_t ulp_distance(double a, double b) {
  if (a == b) return 0;
  if (std::signbit(a) != std::signbit(b) || !std::isfinite(a) || !std::isfinite(b))
    return std::numeric_limits<std::int64_t>::max();
  std::int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  return ia > ib ? ia - ib : ib - ia;
}

margin::MarginResult cpu_eval(const GatedMLP& mlp, const FactSet& fs) {
  return margin::margins_from_outputs(mlp.forward(fs.keys), fs.values, fs.map, margin::MarginConvention::raw_output);
}

struct Case {
  const char* spec;
  std::int64_t d, F, m;
  bool tied;
  const char* map;
  std::uint64_t seed;
  double tol_first;   // A, G
  double tol_B;       // B
  double tol_margin;  // probe min margin vs the CPU's
};

// The solver note up to the first number-dependent part ("cg float32: A1 " / "primal cholesky"), without the
// GPU's operator variant ("cg float32 (fused op): A1 "; the CPU has one form).
std::string note_head(const std::string& note) {
  const auto p = note.find(": A1 ");
  std::string h = p == std::string::npos ? note : note.substr(0, p);
  const auto v = h.find(" (");
  if (v != std::string::npos && h.size() >= 4 && h.compare(h.size() - 4, 4, " op)") == 0) h.erase(v);
  return h;
}
std::string note_tail(const std::string& note) {
  const auto p = note.find("; readout ");
  return p == std::string::npos ? std::string() : note.substr(p);
}

}  // namespace

TEST_CASE("device Philox normals vs the host draw: ulp distance (documents the device_draw option)") {
  gpu::Stream s;
  gpu::Handles h(s);
  const std::int64_t rows = 1024, cols = 1024;
  const Eigen::MatrixXd dev = normal_matrix_cuda(rows, cols, 5, rng::kFeatureA0, h);
  const Eigen::MatrixXd host = rng::normal_matrix(rows, cols, 5, rng::kFeatureA0);
  std::int64_t max_ulp = 0, differ = 0;
  for (Eigen::Index j = 0; j < cols; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) {
      const std::int64_t u = ulp_distance(dev(i, j), host(i, j));
      max_ulp = std::max(max_ulp, u);
      differ += u != 0;
    }
  MESSAGE("device vs host Box-Muller over " << rows * cols << " normals: " << differ << " differ, max " << max_ulp
                                            << " ulp (the default host draw + upload is exact)");
  CHECK(max_ulp <= 16);
}

TEST_CASE("build_mlp_cuda / probe_width_cuda / evaluate_mlp_cuda equal the CPU path, every method") {
  const Case cases[] = {
      {"hebbian", 16, 50, 40, false, "identity", 1, kExact, kF64Direct, kEval},
      {"hebbian", 16, 60, 72, true, "permutation", 2, kExact, kF64Direct, kEval},
      {"hebbian:exact-k2", 8, 50, 0, true, "permutation", 9, kExact, kF64Direct, kEval},
      {"ntk", 16, 60, 100, true, "permutation", 7, kF64Direct, kExact, kEval},
      {"ntk", 16, 50, 40, false, "identity", 8, kF64Direct, kExact, kEval},
      {"hebbian:whitened", 16, 200, 60, true, "permutation", 3, kExact, kWhitened, kWhitened},   // primal
      {"hebbian:whitened", 16, 60, 180, false, "identity", 4, kExact, kWhitened, kWhitened},     // dual
      {"hebbian:whitened,ridge=1e-4", 16, 200, 60, false, "permutation", 5, kExact, kWhitened, kWhitened},
      {"hebbian:data-dependent", 16, 100, 24, true, "permutation", 10, kDataDepF64, kDataDepF64, 1e-6},
      {"hebbian:data-dependent,cg-precision=float32", 16, 100, 24, true, "permutation", 12, kDataDepF32,
       kDataDepF32, kDataDepF32},
      {"hebbian:data-dependent", 32, 600, 288, true, "permutation", 15, kDataDepF32, kDataDepF32,
       kDataDepF32},  // auto rule: m·d = 9216 > 8192 -> float32
      {"hebbian:data-dependent", 16, 40, 60, false, "identity", 11, kNoCompare, kNoCompare, kCappedMargin},
  };
  gpu::Stream s;
  gpu::Handles h(s);
  for (const Case& c : cases) {
    const FactSet fs = make_facts(c.d, c.F, c.tied, c.map, c.seed);
    const MethodSpec method = parse_method(c.spec);
    const std::uint64_t seed = c.seed + 100;
    const GatedMLP cpu = build_mlp(method, fs, c.m, seed);
    const margin::MarginResult cm = cpu_eval(cpu, fs);
    for (std::int64_t tile : {std::int64_t(0), kOddTile}) {
      CAPTURE(c.spec);
      CAPTURE(c.F);
      CAPTURE(c.m);
      CAPTURE(tile);
      CudaTuning tu;
      tu.tile = tile;
      tu.poison = true;
      const GatedMLP gpu = build_mlp_cuda(method, fs, c.m, seed, h, tu);
      REQUIRE(gpu.width() == cpu.width());
      CHECK(gpu.gate == cpu.gate);
      CHECK(gpu.method == cpu.method);
      CHECK(gpu.param_count == cpu.param_count);
      CHECK(gpu.bias_up.size() == cpu.bias_up.size());
      CHECK(gpu.bias_out.size() == cpu.bias_out.size());
      if (cpu.bias_up.size()) CHECK(gpu.bias_up == cpu.bias_up);
      CHECK(note_head(gpu.solver_note) == note_head(cpu.solver_note));
      CHECK(note_tail(gpu.solver_note) == note_tail(cpu.solver_note));
      REQUIRE(gpu.A.allFinite());
      REQUIRE(gpu.G.allFinite());
      REQUIRE(gpu.B.allFinite());
      if (c.tol_first >= 0) {
        CHECK(rel(gpu.A, cpu.A) <= c.tol_first);
        CHECK(rel(gpu.G, cpu.G) <= c.tol_first);
      }
      if (c.tol_B >= 0) CHECK(rel(gpu.B, cpu.B) <= c.tol_B);

      const CudaProbe probe = probe_width_cuda(method, fs, c.m, seed, h, tu);
      CHECK(probe.accuracy == cm.accuracy);
      CHECK(rel_scalar(probe.min_margin, cm.min_margin) <= c.tol_margin);
      CHECK(probe.solver_note.substr(0, 5) == gpu.solver_note.substr(0, 5));

      const CudaProbe ev = evaluate_mlp_cuda(gpu, fs, h, tu);
      CHECK(ev.accuracy == probe.accuracy);
      CHECK(rel_scalar(ev.min_margin, probe.min_margin) <= kSameCode);

      const CudaProbe evc = evaluate_mlp_cuda(cpu, fs, h, tu);
      CHECK(evc.accuracy == cm.accuracy);
      CHECK(rel_scalar(evc.min_margin, cm.min_margin) <= kEval);
    }
  }
}

TEST_CASE("margins_mlp_cuda: per-key margins, argmax and worst competitor as margins_from_outputs") {
  gpu::Stream s;
  gpu::Handles h(s);
  const std::int64_t d = 12, F = 45, P = 70;
  const FactSet fs = make_facts(d, F, false, "permutation", 21, P);
  // Models with non-zero biases and a ReLU / SiLU gate (GD-trained models look like this), an NTK, a
  // whitened Hebbian.
  GatedMLP b;
  b.A = rng::normal_matrix(33, d, 4, rng::kUser);
  b.G = rng::normal_matrix(33, d, 4, rng::kUser + 1);
  b.B = rng::normal_matrix(d, 33, 4, rng::kUser + 2);
  b.bias_up = rng::normal_matrix(33, 1, 4, rng::kUser + 3);
  b.bias_gate = rng::normal_matrix(33, 1, 4, rng::kUser + 4);
  b.bias_out = rng::normal_matrix(d, 1, 4, rng::kUser + 5);
  b.gate = "relu";
  const GatedMLP biased = b;
  b.gate = "silu";  // the fact-editing GD expert's gate (spec §2.7)
  const GatedMLP silu = b;
  const GatedMLP ntk = build_mlp(parse_method("ntk"), fs, 64, 3);
  const GatedMLP wh = build_mlp(parse_method("hebbian:whitened"), fs, 30, 3);
  const Eigen::MatrixXd noisy = margin::noisy_queries(fs.keys, 0.1);
  for (const GatedMLP* mlp : std::initializer_list<const GatedMLP*>{&biased, &silu, &ntk, &wh})
    for (bool normalize : {false, true})
      for (const Eigen::MatrixXd* q : std::initializer_list<const Eigen::MatrixXd*>{&fs.keys, &noisy})
        for (std::int64_t tile : {std::int64_t(0), kOddTile}) {
          CAPTURE(mlp->width());
          CAPTURE(normalize);
          CAPTURE(tile);
          const auto conv = normalize ? margin::MarginConvention::normalized_output
                                      : margin::MarginConvention::raw_output;
          const margin::MarginResult c = margin::margins_from_outputs(mlp->forward(*q), fs.values, fs.map, conv);
          CudaTuning tu;
          tu.tile = tile;
          tu.poison = true;
          const CudaMargins g = margins_mlp_cuda(*mlp, fs, *q, normalize, h, tu);
          REQUIRE(g.per_key.allFinite());
          const double scale = c.per_key.cwiseAbs().maxCoeff();
          CHECK((g.per_key - c.per_key).cwiseAbs().maxCoeff() <= kEval * scale);
          CHECK(g.argmax == c.argmax);
          CHECK(g.worst == c.worst);
          CHECK(g.accuracy == c.accuracy);
          CHECK(rel_scalar(g.min_margin, c.min_margin) <= kEval);
        }
}

TEST_CASE("solve_symmetric_cuda: Cholesky, then pivoted LDLᵀ, then the eigen pseudo-inverse, as the CPU") {
  gpu::Stream s;
  gpu::Handles h(s);
  const std::int64_t n = 24;
  const Eigen::MatrixXd R = rng::normal_matrix(n, 3, 8, rng::kUser);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(rng::normal_matrix(n, n, 9, rng::kUser));
  const Eigen::MatrixXd V = qr.householderQ();
  auto from_eigenvalues = [&](const Eigen::VectorXd& ev) {
    Eigen::MatrixXd S = V * ev.asDiagonal() * V.transpose();
    return Eigen::MatrixXd((S + S.transpose()) / 2);
  };
  Eigen::VectorXd pos(n), mixed(n);
  for (std::int64_t i = 0; i < n; ++i) {
    pos[i] = 1.0 + static_cast<double>(i);
    mixed[i] = (i % 3 == 0 ? -1.0 : 1.0) * (1.0 + static_cast<double>(i));  // cond 24, indefinite
  }
  Eigen::MatrixXd singular = Eigen::MatrixXd::Zero(4, 4);  // exactly zero pivot: both factorizations fail
  singular(0, 0) = 2;
  singular(2, 2) = 1;
  singular(3, 3) = 3;
  struct Sys {
    Eigen::MatrixXd S, R;
    const char* solver;
  };
  const Sys systems[] = {{from_eigenvalues(pos), R, "cholesky"},
                         {from_eigenvalues(mixed), R, "ldlt-bunch-kaufman"},
                         {singular, rng::normal_matrix(4, 2, 3, rng::kUser), "eigen"}};
  for (const Sys& sys : systems) {
    CAPTURE(sys.solver);
    Eigen::MatrixXd Sc = sys.S, Rc = sys.R, Sg = sys.S, Rg = sys.R;
    const std::string cpu = solve_symmetric(Sc, Rc);
    const std::string gpu = solve_symmetric_cuda(Sg, Rg, h);
    CHECK(cpu == sys.solver);
    CHECK(gpu == cpu);
    CHECK(rel(Rg, Rc) <= 1e-10);
  }
}

TEST_CASE("device_draw: the device Philox kernel builds the same model up to a few ulp") {
  gpu::Stream s;
  gpu::Handles h(s);
  const FactSet fs = make_facts(16, 60, true, "permutation", 31);
  CudaTuning tu;
  tu.device_draw = true;
  tu.poison = true;
  for (const char* spec : {"hebbian", "hebbian:whitened", "ntk"}) {
    CAPTURE(spec);
    const MethodSpec method = parse_method(spec);
    const GatedMLP cpu = build_mlp(method, fs, 48, 5);
    const GatedMLP gpu = build_mlp_cuda(method, fs, 48, 5, h, tu);
    CHECK(rel(gpu.A, cpu.A) <= 1e-13);
    CHECK(rel(gpu.G, cpu.G) <= 1e-13);
    CHECK(rel(gpu.B, cpu.B) <= 1e-8);
    CHECK(probe_width_cuda(method, fs, 48, 5, h, tu).accuracy == cpu_eval(cpu, fs).accuracy);
  }
}

TEST_CASE("concurrent probes from two host threads (own Stream/Handles) equal the sequential ones") {
  const FactSet fs = make_facts(16, 120, true, "permutation", 41);
  const MethodSpec wh = parse_method("hebbian:whitened"), dd = parse_method("hebbian:data-dependent");
  CudaProbe seq_w, seq_d, par_w, par_d;
  {
    gpu::Stream s;
    gpu::Handles h(s);
    seq_w = probe_width_cuda(wh, fs, 90, 1, h);
    seq_d = probe_width_cuda(dd, fs, 20, 1, h);
  }
  std::string err1, err2;
  std::thread t1([&] {
    try {
      gpu::Stream s;
      gpu::Handles h(s);
      for (int i = 0; i < 3; ++i) par_w = probe_width_cuda(wh, fs, 90, 1, h);
    } catch (const std::exception& e) {
      err1 = e.what();
    }
  });
  std::thread t2([&] {
    try {
      gpu::Stream s;
      gpu::Handles h(s);
      for (int i = 0; i < 3; ++i) par_d = probe_width_cuda(dd, fs, 20, 1, h);
    } catch (const std::exception& e) {
      err2 = e.what();
    }
  });
  t1.join();
  t2.join();
  CHECK(err1.empty());
  CHECK(err2.empty());
  // Expected bitwise (fixed-order reductions; each Handles has its own cuBLAS workspace).
  CHECK(par_w.accuracy == seq_w.accuracy);
  CHECK(rel_scalar(par_w.min_margin, seq_w.min_margin) <= kSameCode);
  CHECK(par_d.accuracy == seq_d.accuracy);
  CHECK(rel_scalar(par_d.min_margin, seq_d.min_margin) <= kSameCode);
  CHECK(note_head(par_d.solver_note) == note_head(seq_d.solver_note));
  CHECK(note_tail(par_d.solver_note) == note_tail(seq_d.solver_note));
}

TEST_CASE("build_mlp_cuda with gd trains through train_gd_cuda (what hebb ssfr --mlp gd uses on the GPU)") {
  const FactSet fs = make_facts(16, 32, true, "permutation", 17);
  MethodSpec gd = parse_method("gd:transformer");
  gd.gd.epochs = 400;
  gpu::Stream s;
  gpu::Handles h(s);
  const GatedMLP built = build_mlp_cuda(gd, fs, 64, 9, h);
  const GdResult direct = train_gd_cuda(fs, 64, 9, gd.gd, h);
  CHECK(built.method == gd.text);
  CHECK(built.width() == 64);
  CHECK(built.param_count == direct.mlp.param_count);
  // The same device code on the same data: expected bitwise equal (fixed-order reductions).
  CHECK(rel(built.A, direct.mlp.A) <= kSameCode);
  CHECK(rel(built.G, direct.mlp.G) <= kSameCode);
  CHECK(rel(built.B, direct.mlp.B) <= kSameCode);
  CHECK(cpu_eval(built, fs).accuracy == cpu_eval(direct.mlp, fs).accuracy);
}

TEST_CASE("an impossible size is a UserError (exit 2) before any allocation; bad requests are rejected") {
  gpu::Stream s;
  gpu::Handles h(s);
  const std::int64_t F = 300000;  // dual Gram F² = 720 GB
  const FactSet big = make_facts(4, F, true, "permutation", 1);
  const MethodSpec wh = parse_method("hebbian:whitened");
  CHECK(closed_form_cuda_bytes(wh, F, F, 4, F + 1) > std::size_t(F) * std::size_t(F) * 8);
  const gpu::MemoryInfo before = gpu::memory_info();
  try {
    probe_width_cuda(wh, big, F + 1, 0, h);
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    CHECK(e.exit_code() == kExitUsage);
    CHECK(std::string(e.what()).find("the GPU probe") != std::string::npos);
  }
  const gpu::MemoryInfo after = gpu::memory_info();
  CHECK(after.free + (std::size_t(64) << 20) >= before.free);

  const FactSet fs = make_facts(8, 30, true, "permutation", 2);
  CHECK_THROWS_AS(build_mlp_cuda(parse_method("hebbian:exact-k2"), fs, 10, 0, h), UserError);
  CHECK_THROWS_AS(probe_width_cuda(parse_method("hebbian"), fs, -1, 0, h), UserError);
  const FactSet one = make_facts(8, 1, false, "identity", 2);
  CHECK_THROWS_AS(probe_width_cuda(parse_method("hebbian"), one, 16, 0, h), UserError);  // P = 1: no competitor
}

TEST_CASE("paper scale fits one H200: whitened dual F = 16384, m = 65536, d = 128 (spec §7.2)") {
  gpu::Stream s;
  gpu::Handles h(s);
  const std::int64_t F = 16384, d = 128, m = 65536;
  const MethodSpec wh = parse_method("hebbian:whitened");
  const std::size_t bytes = closed_form_cuda_bytes(wh, F, F, d, m);
  MESSAGE("closed_form_cuda_bytes(whitened, F 16384, m 65536, d 128) = " << bytes / double(1 << 30) << " GiB");
  CHECK(bytes < (std::size_t(16) << 30));
  const FactSet fs = make_facts(d, F, true, "permutation", 42);
  const auto t0 = std::chrono::steady_clock::now();
  const CudaProbe p = probe_width_cuda(wh, fs, m, 0, h);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("probe: accuracy " << p.accuracy << ", min margin " << p.min_margin << ", solver '" << p.solver_note
                             << "', " << secs << " s");
  CHECK(p.accuracy >= 0.0);
  CHECK(p.accuracy <= 1.0);
  CHECK(p.solver_note.rfind("dual ", 0) == 0);
  CHECK(std::isfinite(p.min_margin));
}

// The fused float32 CG operator (kernels/mlp_cg_fused.cu) against the operator evaluated in float64 on the
// host from the same float inputs. Tolerance kFusedOp = 2e-5 relative Frobenius: float32 accumulation over
// d (first product) then m or F (second), ~sqrt(k)·6e-8 per entry; shapes cover d <= 64 and 64 < d <= 128,
// m and F not multiples of the 64-tile, single-row / single-key edges and the split partial sums. The same
// tolerance holds the 3xTF32 tensor-core form: its products drop the small·small term (~2⁻²² relative) and the
// tensor cores' float32 accumulation rounds more coarsely; on the H200 its worst error is 4.0e-6 (m = 2047,
// d = 64, F = 4096), against 4.4e-7 for the SIMT form.
TEST_CASE("fused CG operator: both kernels against the float64 host operator") {
  constexpr double kFusedOp = 2e-5;
  struct Shape {
    std::int64_t m, d, F;
  };
  const Shape shapes[] = {{1, 1, 1},     {37, 5, 70},    {200, 64, 300},  {130, 90, 129}, {64, 128, 64},
                          {333, 128, 1000}, {65, 16, 2000}, {2047, 64, 4096}};
  gpu::Stream s;
  rng::Stream64 rng(2026, 0);
  for (const Shape& z : shapes) {
    CAPTURE(z.m);
    CAPTURE(z.d);
    CAPTURE(z.F);
    REQUIRE(cuda::cg_fused_supported(z.m, z.d, z.F));
    auto rnd = [&](std::int64_t r, std::int64_t c) {
      Eigen::MatrixXf M(r, c);
      for (std::int64_t k = 0; k < M.size(); ++k) M.data()[k] = static_cast<float>(2.0 * rng.uniform() - 1.0);
      return M;
    };
    const Eigen::MatrixXf P = rnd(z.m, z.d), Pi = rnd(z.m, z.F), K = rnd(z.F, z.d), W0t = rnd(z.d, z.m),
                          t2T = rnd(z.F, z.d);
    const float ridge = 0.37f;
    auto dev = [&](const Eigen::MatrixXf& M) {
      gpu::Tensor t({std::max<std::int64_t>(M.size(), 1)}, gpu::DType::f32);
      t.upload(M.data(), s);
      return t;
    };
    gpu::Tensor dP = dev(P), dPi = dev(Pi), dK = dev(K), dW = dev(W0t), dT2 = dev(t2T);
    gpu::Tensor dKT({z.F * z.d}, gpu::DType::f32), dt1({z.d * z.F}, gpu::DType::f32),
        dout({z.m * z.d}, gpu::DType::f32), dws({cuda::cg_fused_workspace_floats(z.m, z.d, z.F)}, gpu::DType::f32);
    dt1.fill_nan(s);
    dout.fill_nan(s);
    dws.fill_nan(s);
    cuda::cg_fused_transpose_keys(s.get(), z.F, z.d, dK.data<float>(), dKT.data<float>());
    cuda::cg_fused_first(s.get(), z.m, z.d, z.F, dP.data<float>(), dPi.data<float>(), dK.data<float>(),
                         dW.data<float>(), dws.data<float>(), dt1.data<float>());
    cuda::cg_fused_second(s.get(), z.m, z.d, z.F, dP.data<float>(), dPi.data<float>(), dKT.data<float>(),
                          dW.data<float>(), dT2.data<float>(), ridge, dws.data<float>(), dout.data<float>());
    Eigen::MatrixXf t1(z.d, z.F), out(z.m, z.d);
    dt1.download(t1.data(), s);
    dout.download(out.data(), s);
    s.synchronize();

    const Eigen::MatrixXd Pd = P.cast<double>(), Pid = Pi.cast<double>(), Kd = K.cast<double>(),
                          Wd = W0t.cast<double>(), T2d = t2T.cast<double>();
    const Eigen::MatrixXd t1_ref = Wd * Pid.cwiseProduct(Pd * Kd.transpose());
    const Eigen::MatrixXd out_ref =
        Pid.cwiseProduct(Wd.transpose() * T2d.transpose()) * Kd + static_cast<double>(ridge) * Pd;
    CHECK(rel(t1.cast<double>(), t1_ref) <= kFusedOp);
    CHECK(rel(out.cast<double>(), out_ref) <= kFusedOp);
    // The prefetching kernels do the same arithmetic in the same order: bitwise equal.
    auto run_kind = [&](cuda::CgFusedKind kind, Eigen::MatrixXf& t1k, Eigen::MatrixXf& outk) {
      dt1.fill_nan(s);
      dout.fill_nan(s);
      dws.fill_nan(s);
      cuda::cg_fused_first(s.get(), z.m, z.d, z.F, dP.data<float>(), dPi.data<float>(), dK.data<float>(),
                           dW.data<float>(), dws.data<float>(), dt1.data<float>(), kind);
      cuda::cg_fused_second(s.get(), z.m, z.d, z.F, dP.data<float>(), dPi.data<float>(), dKT.data<float>(),
                            dW.data<float>(), dT2.data<float>(), ridge, dws.data<float>(), dout.data<float>(), kind);
      t1k.resize(z.d, z.F);
      outk.resize(z.m, z.d);
      dt1.download(t1k.data(), s);
      dout.download(outk.data(), s);
      s.synchronize();
    };
    Eigen::MatrixXf t1p, outp, t1c, outc;
    run_kind(cuda::CgFusedKind::prefetch, t1p, outp);
    CHECK(std::memcmp(t1p.data(), t1.data(), sizeof(float) * t1.size()) == 0);
    CHECK(std::memcmp(outp.data(), out.data(), sizeof(float) * out.size()) == 0);
    // The 3xTF32 tensor-core kernels: a different rounding, the same float32-level tolerance.
    run_kind(cuda::CgFusedKind::tf32x3, t1c, outc);
    CHECK(rel(t1c.cast<double>(), t1_ref) <= kFusedOp);
    CHECK(rel(outc.cast<double>(), out_ref) <= kFusedOp);
    MESSAGE("fused CG op tf32x3 m=" << z.m << " d=" << z.d << " F=" << z.F << ": rel err first "
                                    << rel(t1c.cast<double>(), t1_ref) << ", second "
                                    << rel(outc.cast<double>(), out_ref));
    MESSAGE("fused CG op m=" << z.m << " d=" << z.d << " F=" << z.F << ": rel err first "
                             << rel(t1.cast<double>(), t1_ref) << ", second " << rel(out.cast<double>(), out_ref));
  }
}

// The data-dependent build forced onto the fused operator (MEMCAP_CG_KERNEL=fused) against the same build
// forced onto the cuBLAS form (MEMCAP_CG_KERNEL=cublas), and the default of the variant table: same accuracy, weights within kDataDepF32 (both float32 CGs to rel. residual 1e-5).
TEST_CASE("data-dependent float32: fused and cuBLAS operator forms agree") {
  gpu::Stream s;
  gpu::Handles h(s);
  struct C {
    std::int64_t d, F, m;
  };
  for (const C c : {C{32, 600, 288}, C{64, 1024, 300}, C{90, 500, 300}}) {  // none takes the m x m form
    CAPTURE(c.d);
    CAPTURE(c.m);
    const FactSet fs = make_facts(c.d, c.F, true, "permutation", 77);
    const MethodSpec method = parse_method("hebbian:data-dependent");
    const GatedMLP dflt = build_mlp_cuda(method, fs, c.m, 5, h);  // the table: fused-tf32x3 at d <= 64, else cuBLAS
    CHECK(dflt.solver_note.find(c.d <= 64 ? "(fused-tf32x3 op)" : "(cublas op)") != std::string::npos);
    ::setenv("MEMCAP_CG_KERNEL", "fused", 1);
    const GatedMLP fused = build_mlp_cuda(method, fs, c.m, 5, h);
    ::setenv("MEMCAP_CG_KERNEL", "fused-prefetch", 1);
    const GatedMLP pref = build_mlp_cuda(method, fs, c.m, 5, h);
    ::setenv("MEMCAP_CG_KERNEL", "fused-tf32x3", 1);
    const GatedMLP tc = build_mlp_cuda(method, fs, c.m, 5, h);
    const double tc_acc = probe_width_cuda(method, fs, c.m, 5, h).accuracy;
    ::setenv("MEMCAP_CG_KERNEL", "cublas", 1);
    const GatedMLP blas = build_mlp_cuda(method, fs, c.m, 5, h);
    ::unsetenv("MEMCAP_CG_KERNEL");
    CHECK(tc.solver_note.find("(fused-tf32x3 op)") != std::string::npos);
    CHECK(rel(tc.A, blas.A) <= kDataDepF32);
    CHECK(rel(tc.G, blas.G) <= kDataDepF32);
    CHECK(rel(tc.B, blas.B) <= kDataDepF32);
    CHECK(tc_acc == evaluate_mlp_cuda(blas, fs, h).accuracy);
    CHECK(pref.solver_note.find("(fused-prefetch op)") != std::string::npos);
    CHECK(pref.B == fused.B);  // same arithmetic as the fused form: bitwise
    CHECK(fused.solver_note.find("(fused op)") != std::string::npos);
    CHECK(blas.solver_note.find("(cublas op)") != std::string::npos);
    CHECK(rel(fused.A, blas.A) <= kDataDepF32);
    CHECK(rel(fused.G, blas.G) <= kDataDepF32);
    CHECK(rel(fused.B, blas.B) <= kDataDepF32);
    CHECK(probe_width_cuda(method, fs, c.m, 5, h).accuracy == evaluate_mlp_cuda(blas, fs, h).accuracy);
  }
  // A misspelt variant is refused (exit 2), not silently replaced by the table's choice.
  const FactSet fs = make_facts(32, 600, true, "permutation", 77);
  ::setenv("MEMCAP_CG_KERNEL", "fuzed", 1);
  CHECK_THROWS_AS(build_mlp_cuda(parse_method("hebbian:data-dependent"), fs, 288, 5, h), UserError);
  ::unsetenv("MEMCAP_CG_KERNEL");
}
