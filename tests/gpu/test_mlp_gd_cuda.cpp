// GPU GD trainer (src/mlp/gd_train_cuda.cpp) vs the CPU float64 reference train_gd_cpu, for both
// kernel variants (MEMCAP_GD_KERNEL = fused | cublas):
//   f64: parameters within kTolParamsF64 = 1e-9 relative and the loss curve within 1e-9 per point
//        (only summation order differs; 200 Adam steps amplify 1e-16 differences well below that);
//   f32: same final accuracy, loss curve within kTolCurveF32 = 1e-3 relative; tf32: within 2e-2;
//   bf16 (fused only, no biases): loss curve within kTolCurveBf16 = 5e-2, final accuracy within 1/F;
//   bf16x3 (float32 but the two logit products, from split bf16 operands with ~16 bits each; MEMCAP_GD_KERNEL =
//        cublas | onepass, the one-pass CE, auto's choice for CE at d <= 128): loss curve within kTolCurveBf16x3 =
//        5e-3 (5x f32's: the products' error is ~10x float32's, set before the first run), final accuracy within 1/F;
//   early stop at the same epoch; 4 trainings on 4 streams from 4 host threads bit-identical to the
//   same trainings run one at a time; checkpoint resume bit-identical to an uninterrupted run; a size
//   far too large refused with UserError before any allocation.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "mlp/factset.hpp"
#include "mlp/gd_train.hpp"

using namespace memcap;
using namespace memcap::mlp;

namespace {

constexpr double kTolParamsF64 = 1e-9;
constexpr double kTolCurveF64 = 1e-9;
constexpr double kTolCurveF32 = 1e-3;
constexpr double kTolCurveTf32 = 2e-2;
constexpr double kTolCurveBf16 = 5e-2;
constexpr double kTolCurveBf16x3 = 5e-3;

FactSet facts(std::int64_t F, std::int64_t d, std::uint64_t seed) {
  FactSetSpec s;
  s.dim = d;
  s.facts = F;
  s.tied = true;
  s.map = "permutation";
  s.seed = seed;
  return make_factset(s);
}

std::vector<double> flat(const GatedMLP& m) {
  std::vector<double> v;
  auto add = [&](const Eigen::MatrixXd& x) {
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      for (Eigen::Index j = 0; j < x.cols(); ++j) v.push_back(x(i, j));
  };
  add(m.A);
  add(m.G);
  add(m.B);
  add(m.bias_up);
  add(m.bias_gate);
  add(m.bias_out);
  return v;
}

double rel(const std::vector<double>& g, const std::vector<double>& c) {
  REQUIRE(g.size() == c.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    num += (g[i] - c[i]) * (g[i] - c[i]);
    den += c[i] * c[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double max_rel_curve(const std::vector<double>& g, const std::vector<double>& c) {
  REQUIRE(g.size() == c.size());
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    worst = std::max(worst, std::abs(g[i] - c[i]) / std::max(std::abs(c[i]), 1e-300));
  }
  return worst;
}

// Selects the kernel variant for the scope (the trainer reads MEMCAP_GD_KERNEL on every call).
struct KernelVariant {
  explicit KernelVariant(const char* v) { setenv("MEMCAP_GD_KERNEL", v, 1); }
  ~KernelVariant() { unsetenv("MEMCAP_GD_KERNEL"); }
};

struct Gpu {
  gpu::Stream s;
  gpu::Handles h{s};
};

struct Case {
  const char* name;
  nn::Activation gate;
  bool bias;
  nn::Loss loss;
};
const Case kCases[] = {{"bilinear CE (spec 2.6)", nn::Activation::identity, false, nn::Loss::ce},
                       {"relu + bias CE (transformer GD)", nn::Activation::relu, true, nn::Loss::ce},
                       {"silu + bias MSE (spec 2.7)", nn::Activation::silu, true, nn::Loss::mse}};

GdConfig config(const Case& c, std::int64_t epochs, const char* precision) {
  GdConfig cfg;
  cfg.gate = c.gate;
  cfg.bias = c.bias;
  cfg.loss = c.loss;
  cfg.epochs = epochs;
  cfg.precision = precision;
  return cfg;
}

// Trains cfg (precision f32, record every 7 epochs) on the CPU and at `precision` on the GPU, seed 11: the GPU run
// took `kernel`, its loss curve is within tol_curve of the CPU's and its final accuracy within 1/F.
void check_precision_vs_cpu(Gpu& g, const FactSet& fs, std::int64_t m, GdConfig cfg, const char* precision,
                            const char* kernel, double tol_curve) {
  cfg.record_every = 7;
  const GdResult cpu = train_gd_cpu(fs, m, 11, cfg);
  cfg.precision = precision;
  const GdResult gpu = train_gd_cuda(fs, m, 11, cfg, g.h);
  CHECK(gpu.path == std::string("cuda:") + precision);
  CHECK(gpu.kernel == kernel);
  REQUIRE(gpu.curve_epoch == cpu.curve_epoch);
  CHECK(max_rel_curve(gpu.loss_curve, cpu.loss_curve) <= tol_curve);
  CHECK(std::abs(gpu.accuracy_curve.back() - cpu.accuracy_curve.back()) <= 1.0 / static_cast<double>(fs.F()) + 1e-12);
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("memcap_gd_ck_" + std::to_string(getpid()) + "_" + tag + ".h5"))
      .string();
}

}  // namespace

TEST_CASE("GPU f64 training equals the CPU reference (d = 8, F = 16, m = 32, 200 epochs)") {
  Gpu g;
  const FactSet fs = facts(16, 8, 3);
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    for (const Case& c : kCases) {
      CAPTURE(variant);
      CAPTURE(c.name);
      const GdConfig cfg = config(c, 200, "f64");
      const GdResult cpu = train_gd_cpu(fs, 32, 7, cfg);
      const GdResult gpu = train_gd_cuda(fs, 32, 7, cfg, g.h);
      CHECK(gpu.path == "cuda:f64");
      CHECK(gpu.kernel == variant);
      CHECK(gpu.epochs_run == cpu.epochs_run);
      CHECK(gpu.curve_epoch == cpu.curve_epoch);
      CHECK(rel(flat(gpu.mlp), flat(cpu.mlp)) <= kTolParamsF64);
      CHECK(max_rel_curve(gpu.loss_curve, cpu.loss_curve) <= kTolCurveF64);
      CHECK(gpu.accuracy_curve == cpu.accuracy_curve);
      CHECK(gpu.stopped_early == cpu.stopped_early);
      CHECK(std::abs(gpu.final_loss - cpu.final_loss) <= kTolCurveF64 * std::abs(cpu.final_loss));
    }
  }
}

TEST_CASE("GPU f64 training equals the CPU reference with split kernels (F = 100, d = 20, m = 70)") {
  Gpu g;
  const FactSet fs = facts(100, 20, 5);
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    for (const Case& c : kCases) {
      CAPTURE(variant);
      CAPTURE(c.name);
      GdConfig cfg = config(c, 60, "f64");
      cfg.record_every = 7;
      const GdResult cpu = train_gd_cpu(fs, 70, 11, cfg);
      const GdResult gpu = train_gd_cuda(fs, 70, 11, cfg, g.h);
      CHECK(gpu.curve_epoch == cpu.curve_epoch);
      CHECK(rel(flat(gpu.mlp), flat(cpu.mlp)) <= kTolParamsF64);
      CHECK(max_rel_curve(gpu.loss_curve, cpu.loss_curve) <= kTolCurveF64);
      CHECK(gpu.accuracy_curve == cpu.accuracy_curve);
    }
  }
}

TEST_CASE("GPU f32 / tf32 training: same accuracy, loss curve close to the CPU reference") {
  Gpu g;
  const FactSet fs = facts(16, 8, 3);
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    for (const Case& c : kCases) {
      const GdResult cpu = train_gd_cpu(fs, 32, 7, config(c, 200, "f32"));
      for (const char* prec : {"f32", "tf32"}) {
        CAPTURE(variant);
        CAPTURE(c.name);
        CAPTURE(prec);
        const GdResult gpu = train_gd_cuda(fs, 32, 7, config(c, 200, prec), g.h);
        CHECK(gpu.path == std::string("cuda:") + prec);
        REQUIRE(gpu.curve_epoch == cpu.curve_epoch);
        const bool tf32 = std::string(prec) == "tf32";
        CHECK(max_rel_curve(gpu.loss_curve, cpu.loss_curve) <= (tf32 ? kTolCurveTf32 : kTolCurveF32));
        if (tf32)
          CHECK(std::abs(gpu.accuracy_curve.back() - cpu.accuracy_curve.back()) <= 1.0 / 16 + 1e-12);
        else
          CHECK(gpu.accuracy_curve.back() == cpu.accuracy_curve.back());
      }
    }
  }
  // The cfg.tf32 flag is the same as precision = tf32.
  GdConfig cfg = config(kCases[0], 20, "f32");
  cfg.tf32 = true;
  CHECK(train_gd_cuda(fs, 32, 7, cfg, g.h).path == "cuda:tf32");
  cfg.precision = "f64";
  CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, cfg, g.h), UserError);
}

TEST_CASE("GPU bf16 training (fused only, no biases): accuracy and loss curve close to the CPU reference") {
  Gpu g;
  const Case cases[] = {{"bilinear CE (spec 2.6)", nn::Activation::identity, false, nn::Loss::ce},
                        {"relu CE", nn::Activation::relu, false, nn::Loss::ce},
                        {"silu MSE", nn::Activation::silu, false, nn::Loss::mse}};
  struct Size {
    std::int64_t F, d, m;
  };
  for (const Size sz : {Size{16, 8, 32}, Size{100, 20, 70}, Size{300, 64, 200}}) {
    const FactSet fs = facts(sz.F, sz.d, 5);
    for (const Case& c : cases) {
      CAPTURE(sz.F);
      CAPTURE(c.name);
      check_precision_vs_cpu(g, fs, sz.m, config(c, 200, "f32"), "bf16", "fused", kTolCurveBf16);
    }
  }
  // Refusals: biases, the cuBLAS variant, d > 128.
  const FactSet fs = facts(16, 8, 3);
  GdConfig cfg = config(kCases[1], 20, "bf16");
  CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, cfg, g.h), UserError);
  {
    KernelVariant kv("cublas");
    CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, config(kCases[0], 20, "bf16"), g.h), UserError);
  }
  CHECK_THROWS_AS(train_gd_cuda(facts(16, 130, 3), 32, 7, config(kCases[0], 20, "bf16"), g.h), UserError);
}

TEST_CASE("GPU bf16x3 training (cuBLAS chain and one-pass CE) stays close to the CPU reference") {
  Gpu g;
  struct Size {
    std::int64_t F, d, m;
  };
  // d = 90, 100: segment widths padded to 96, 104; P = 130 and 4100: gradient planes padded to 136, 4104.
  for (const Size sz : {Size{16, 8, 32}, Size{130, 90, 70}, Size{300, 64, 200}, Size{4100, 100, 40}}) {
    const FactSet fs = facts(sz.F, sz.d, 5);
    for (const Case& c : kCases) {
      if (sz.F == 4100 && c.loss == nn::Loss::mse) continue;  // the logits only count the accuracy there
      CAPTURE(sz.F);
      CAPTURE(c.name);
      {
        KernelVariant kv("cublas");
        check_precision_vs_cpu(g, fs, sz.m, config(c, sz.F == 4100 ? 40 : 200, "f32"), "bf16x3", "cublas",
                               kTolCurveBf16x3);
      }
      if (c.loss == nn::Loss::ce) {  // the same products in the one-pass split-operand CE: auto's choice here
        KernelVariant kv("onepass");
        check_precision_vs_cpu(g, fs, sz.m, config(c, sz.F == 4100 ? 40 : 200, "f32"), "bf16x3", "onepass",
                               kTolCurveBf16x3);
      }
    }
  }
  // Refusals: the fused variant, TF32 on top; onepass with MSE, at d > 128, or at another precision.
  const FactSet fs = facts(16, 8, 3);
  {
    KernelVariant kv("fused");
    CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, config(kCases[0], 20, "bf16x3"), g.h), UserError);
  }
  {
    KernelVariant kv("onepass");
    CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, config(kCases[2], 20, "bf16x3"), g.h), UserError);
    CHECK_THROWS_AS(train_gd_cuda(facts(16, 130, 3), 32, 7, config(kCases[0], 20, "bf16x3"), g.h), UserError);
    CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, config(kCases[0], 20, "f32"), g.h), UserError);
  }
  // MEMCAP_GD_KERNEL unset (auto): onepass for CE at d <= 128, the cuBLAS chain for MSE and for d > 128.
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const GdResult r = train_gd_cuda(fs, 32, 7, config(c, 20, "bf16x3"), g.h);
    CHECK(r.kernel == std::string(c.loss == nn::Loss::ce ? "onepass" : "cublas"));
  }
  CHECK(train_gd_cuda(facts(16, 130, 3), 32, 7, config(kCases[0], 20, "bf16x3"), g.h).kernel == "cublas");
  GdConfig cfg = config(kCases[0], 20, "bf16x3");
  cfg.tf32 = true;
  CHECK_THROWS_AS(train_gd_cuda(fs, 32, 7, cfg, g.h), UserError);
}

TEST_CASE("early stop happens at the same epoch as on the CPU") {
  Gpu g;
  const FactSet fs = facts(16, 8, 3);
  const GdResult full = train_gd_cpu(fs, 32, 7, config(kCases[0], 200, "f64"));
  REQUIRE(full.loss_curve.size() == 200);
  // A threshold half way between two consecutive losses around epoch 60.
  std::size_t k = 60;
  while (k + 1 < full.loss_curve.size() && !(full.loss_curve[k - 1] > full.loss_curve[k])) ++k;
  const double mid = 0.5 * (full.loss_curve[k - 1] + full.loss_curve[k]);
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    for (const double stop : {1e9, mid}) {
      GdConfig cfg = config(kCases[0], 200, "f64");
      cfg.stop_loss = stop;
      const GdResult cpu = train_gd_cpu(fs, 32, 7, cfg);
      REQUIRE(cpu.stopped_early);
      for (const char* prec : {"f64", "f32"}) {
        CAPTURE(variant);
        CAPTURE(stop);
        CAPTURE(prec);
        cfg.precision = prec;
        const GdResult gpu = train_gd_cuda(fs, 32, 7, cfg, g.h);
        CHECK(gpu.stopped_early);
        CHECK(gpu.epochs_run == cpu.epochs_run);
        CHECK(gpu.curve_epoch == cpu.curve_epoch);
        if (std::string(prec) == "f64") CHECK(rel(flat(gpu.mlp), flat(cpu.mlp)) <= kTolParamsF64);
      }
    }
  }
}

TEST_CASE("4 trainings on 4 streams from 4 host threads equal the same trainings run one at a time") {
  const FactSet fs = facts(256, 32, 9);
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    CAPTURE(variant);
    std::vector<GdConfig> cfgs;
    for (int k = 0; k < 4; ++k) {
      GdConfig cfg = config(kCases[k % 3], 300, k == 3 ? "tf32" : "f32");
      cfgs.push_back(cfg);
    }
    std::vector<GdResult> alone(4), together(4);
    for (int k = 0; k < 4; ++k) {
      Gpu g;
      alone[k] = train_gd_cuda(fs, 128, 100 + k, cfgs[k], g.h);
    }
    std::vector<std::thread> threads;
    std::vector<std::string> errors(4);
    for (int k = 0; k < 4; ++k)
      threads.emplace_back([&, k] {
        try {
          Gpu g;
          together[k] = train_gd_cuda(fs, 128, 100 + k, cfgs[k], g.h);
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int k = 0; k < 4; ++k) {
      CAPTURE(k);
      CHECK(errors[k] == "");
      CHECK(flat(together[k].mlp) == flat(alone[k].mlp));
      CHECK(together[k].loss_curve == alone[k].loss_curve);
      CHECK(together[k].accuracy_curve == alone[k].accuracy_curve);
    }
  }
}

TEST_CASE("checkpoint resume matches an uninterrupted run") {
  Gpu g;
  const FactSet fs = facts(64, 16, 4);
  // (kernel variant, precision, case): f32 / f64 on both MLP kernels, and on the bilinear CE of spec 2.6 bf16x3
  // with its one-pass CE (the capacity presets' GD, whose probes checkpoint) and bf16 on the fused kernels.
  struct Run {
    const char* variant;
    const char* prec;
    int c;
  };
  for (const Run& run : {Run{"fused", "f32", 1}, Run{"fused", "f64", 1}, Run{"cublas", "f32", 1},
                         Run{"cublas", "f64", 1}, Run{"auto", "bf16x3", 0}, Run{"auto", "bf16", 0}}) {
    const char* variant = run.variant;
    const char* prec = run.prec;
    KernelVariant kv(variant);
    CAPTURE(variant);
    CAPTURE(prec);
    GdConfig cfg = config(kCases[run.c], 200, prec);
    const GdResult straight = train_gd_cuda(fs, 48, 21, cfg, g.h);
    const std::string path = temp_path(std::string(variant) + "_" + prec);
    std::remove(path.c_str());
    cfg.checkpoint = path;
    cfg.checkpoint_every_s = 0;  // a checkpoint at every host sync
    cfg.on_epoch = [](std::int64_t epochs_done, double) {
      if (epochs_done >= 100) throw std::runtime_error("simulated interruption");
    };
    CHECK_THROWS_AS(train_gd_cuda(fs, 48, 21, cfg, g.h), std::runtime_error);
    REQUIRE(std::filesystem::exists(path));
    cfg.on_epoch = nullptr;
    const GdResult resumed = train_gd_cuda(fs, 48, 21, cfg, g.h);
    CHECK(resumed.resumed);
    CHECK(resumed.epochs_run == straight.epochs_run);
    CHECK(flat(resumed.mlp) == flat(straight.mlp));
    CHECK(resumed.loss_curve == straight.loss_curve);
    CHECK(resumed.accuracy_curve == straight.accuracy_curve);
    CHECK(resumed.curve_epoch == straight.curve_epoch);
    // A finished checkpoint returns the same result without training again.
    const GdResult again = train_gd_cuda(fs, 48, 21, cfg, g.h);
    CHECK(flat(again.mlp) == flat(straight.mlp));
    std::remove(path.c_str());
  }
}

TEST_CASE("a training far too large for the GPU is refused with UserError before allocating") {
  Gpu g;
  const FactSet fs = facts(16, 8, 3);
  const std::int64_t m = std::int64_t(1) << 29;  // 4 arenas of 3md floats ≈ 206 GB
  GdConfig cfg;
  cfg.epochs = 10;
  CHECK(gd_cuda_bytes(16, 16, 8, m, cfg) > (std::size_t(150) << 30));
  for (const char* variant : {"fused", "cublas"}) {
    KernelVariant kv(variant);
    CAPTURE(variant);
    const gpu::MemoryInfo before = gpu::memory_info();
    try {
      (void)train_gd_cuda(fs, m, 1, cfg, g.h);
      FAIL("expected UserError");
    } catch (const DeviceError& e) {
      FAIL("expected a UserError (size check), got DeviceError: " << e.what());
    } catch (const UserError& e) {
      CHECK(std::string(e.what()).find("GPU memory") != std::string::npos);
    }
    CHECK(gpu::memory_info().free + (std::size_t(64) << 20) >= before.free);
  }
  CHECK_THROWS_AS(train_gd_cuda(fs, std::int64_t(1) << 31, 1, cfg, g.h), UserError);
}
