// GD-trained gated MLP on the CPU (spec hebbian.md §2.6, §2.7): finite-difference check of the
// whole model's gradient, init, a tiny training that stores every fact, early stop, checkpoint
// resume (bit-identical), thread-count independence, and the gd method specs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "margin/margins.hpp"
#include "mlp/constructions.hpp"
#include "mlp/gd_checkpoint.hpp"
#include "mlp/gd_init.hpp"
#include "mlp/gd_train.hpp"
#include "mlp/method.hpp"

using namespace memcap;
using namespace memcap::mlp;

namespace {

constexpr double kFdStep = 1e-6;    // central-difference step
constexpr double kFdRelTol = 1e-6;  // ||analytic − FD|| / ||FD|| over the checked entries, float64

FactSet facts(std::int64_t d, std::int64_t F, std::uint64_t seed) {
  FactSetSpec s;
  s.dim = d;
  s.facts = F;
  s.tied = true;
  s.map = "permutation";
  s.seed = seed;
  return make_factset(s);
}

double accuracy_of(const GatedMLP& mlp, const FactSet& fs) {
  return margin::margins_from_outputs(mlp.forward(fs.keys), fs.values, fs.map, margin::MarginConvention::raw_output)
      .accuracy;
}

bool same_params(const GatedMLP& a, const GatedMLP& b) {
  return a.A == b.A && a.G == b.G && a.B == b.B && a.bias_up == b.bias_up && a.bias_gate == b.bias_gate &&
         a.bias_out == b.bias_out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("memcap_test_" + std::to_string(getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("whole-model gradient matches central differences (CE/MSE, bias, every gate)") {
  const std::int64_t d = 6, F = 10, m = 12;
  const FactSet fs = facts(d, F, 3);
  for (const auto loss : {nn::Loss::ce, nn::Loss::mse})
    for (const bool bias : {false, true})
      for (const auto gate : {nn::Activation::identity, nn::Activation::relu, nn::Activation::silu}) {
        CAPTURE(nn::to_string(loss));
        CAPTURE(bias);
        CAPTURE(nn::to_string(gate));
        GdConfig cfg;
        cfg.loss = loss;
        cfg.bias = bias;
        cfg.gate = gate;
        const GdLayout l = GdLayout::make(m, d, bias);
        std::vector<double> p = gd_init_params(m, d, bias, 17);
        for (auto& x : p) x *= 3;  // larger than init, so every term of the loss matters
        std::vector<double> grad;
        gd_loss_cpu(fs, m, cfg, p, &grad);
        std::vector<std::int64_t> idx;
        const nn::ArenaLayout arena = l.arena();
        for (const auto& v : arena.views())  // first, middle and last entry of every tensor
          for (const std::int64_t k : {std::int64_t(0), v.numel / 2, v.numel - 1}) idx.push_back(v.offset + k);
        double num2 = 0, diff2 = 0;
        for (const auto i : idx) {
          const double x0 = p[static_cast<std::size_t>(i)];
          p[static_cast<std::size_t>(i)] = x0 + kFdStep;
          const double fp = gd_loss_cpu(fs, m, cfg, p, nullptr);
          p[static_cast<std::size_t>(i)] = x0 - kFdStep;
          const double fm = gd_loss_cpu(fs, m, cfg, p, nullptr);
          p[static_cast<std::size_t>(i)] = x0;
          const double fd = (fp - fm) / (2 * kFdStep);
          num2 += fd * fd;
          diff2 += (fd - grad[static_cast<std::size_t>(i)]) * (fd - grad[static_cast<std::size_t>(i)]);
        }
        CHECK(num2 > 0);
        CHECK(std::sqrt(diff2 / num2) < kFdRelTol);
      }
}

TEST_CASE("init: PyTorch nn.Linear bounds, arena layout, deterministic per (seed, position)") {
  const std::int64_t m = 20, d = 5;
  const GdLayout l = GdLayout::make(m, d, true);
  CHECK(l.total == gd_param_count(m, d, true));
  CHECK(l.total == 3 * m * d + 2 * m + d);
  CHECK(l.b_d == l.total - d);
  CHECK(GdLayout::make(m, d, false).b_u == -1);
  const auto p = gd_init_params(m, d, true, 9);
  const double bd = 1 / std::sqrt(double(d)), bm = 1 / std::sqrt(double(m));
  double maxU = 0, maxD = 0;
  for (std::int64_t i = 0; i < 2 * m * d; ++i) maxU = std::max(maxU, std::abs(p[static_cast<std::size_t>(i)]));
  for (std::int64_t i = l.D; i < l.D + m * d; ++i) maxD = std::max(maxD, std::abs(p[static_cast<std::size_t>(i)]));
  CHECK(maxU <= bd);
  CHECK(maxU > 0.8 * bd);  // 200 draws fill the interval
  CHECK(maxD <= bm);
  CHECK(maxD > 0.8 * bm);
  for (std::int64_t i = l.b_u; i < l.b_d; ++i) CHECK(std::abs(p[static_cast<std::size_t>(i)]) <= bd);
  for (std::int64_t i = l.b_d; i < l.total; ++i) CHECK(std::abs(p[static_cast<std::size_t>(i)]) <= bm);
  CHECK(gd_init_params(m, d, true, 9) == p);
  CHECK(gd_init_params(m, d, true, 10) != p);
  // Without biases the weights are the same numbers (same arena positions).
  const auto q = gd_init_params(m, d, false, 9);
  CHECK(std::vector<double>(p.begin(), p.begin() + 3 * m * d) == q);
  GdConfig cfg;
  cfg.bias = true;
  cfg.gate = nn::Activation::silu;
  const GatedMLP mlp = gd_to_mlp(p, l, cfg);
  CHECK(mlp.A(1, 2) == p[1 * d + 2]);
  CHECK(mlp.G(0, 4) == p[static_cast<std::size_t>(l.G + 4)]);
  CHECK(mlp.B(3, 7) == p[static_cast<std::size_t>(l.D + 3 * m + 7)]);
  CHECK(mlp.bias_out(2) == p[static_cast<std::size_t>(l.b_d + 2)]);
  CHECK(mlp.gate == "silu");
  CHECK(mlp.param_count == l.total);
}

TEST_CASE("tiny training stores every fact; loss decreases") {
  const FactSet fs = facts(8, 16, 1);
  GdConfig cfg;
  cfg.epochs = 300;
  cfg.lr = 1e-2;
  cfg.record_every = 50;
  const GdResult r = train_gd_cpu(fs, 32, 5, cfg);
  CHECK(r.epochs_run == 300);
  CHECK_FALSE(r.stopped_early);
  CHECK(r.path == "cpu");
  CHECK(accuracy_of(r.mlp, fs) == 1.0);
  REQUIRE(r.loss_curve.size() == 7);  // epochs 0, 50, ..., 250 and the last one, 299
  CHECK(r.curve_epoch.back() == 299);
  CHECK(r.loss_curve.back() == r.final_loss);
  for (std::size_t i = 1; i < r.loss_curve.size(); ++i) CHECK(r.loss_curve[i] < r.loss_curve[i - 1]);
  CHECK(r.final_loss < 0.1 * r.loss_curve.front());
  CHECK(r.accuracy_curve.back() == 1.0);
  CHECK(r.mlp.param_count == 3 * 32 * 8);
}

TEST_CASE("MSE training (gd:edit preset) fits the codes; curves end at the last epoch run") {
  const FactSet fs = facts(8, 16, 2);
  GdConfig cfg = parse_method("gd:edit,epochs=200,lr=1e-2").gd;
  cfg.record_every = 64;
  // m = 32 > F = 16 interpolates: the MSE reaches the default stop-loss 1e-7 before epoch 200.
  const GdResult r = train_gd_cpu(fs, 32, 1, cfg);
  CHECK(r.stopped_early);
  CHECK(r.final_loss <= 1e-7);
  CHECK(r.epochs_run < 200);
  CHECK(r.curve_epoch.back() == r.epochs_run - 1);
  CHECK(r.accuracy_curve.back() == 1.0);
  CHECK(accuracy_of(r.mlp, fs) == 1.0);
  CHECK(r.mlp.gate == "silu");
  CHECK(r.mlp.bias_out.size() == 8);
  // stop-loss=0 never stops: every recorded epoch plus the last.
  GdConfig all = parse_method("gd:edit,epochs=200,lr=1e-2,stop-loss=0").gd;
  all.record_every = 64;
  const GdResult q = train_gd_cpu(fs, 32, 1, all);
  CHECK_FALSE(q.stopped_early);
  CHECK(q.curve_epoch == std::vector<std::int64_t>{0, 64, 128, 192, 199});
  CHECK(q.final_loss < 1e-3 * q.loss_curve.front());
}

TEST_CASE("early stop: stop-loss above the first loss stops after exactly one epoch") {
  const FactSet fs = facts(8, 16, 1);
  GdConfig cfg = parse_method("gd,stop-loss=1e10,epochs=50").gd;
  const GdResult r = train_gd_cpu(fs, 32, 5, cfg);
  CHECK(r.epochs_run == 1);
  CHECK(r.stopped_early);
  CHECK(r.curve_epoch == std::vector<std::int64_t>{0});
}

TEST_CASE("divergence is a NumericError naming the epoch") {
  const FactSet fs = facts(8, 16, 1);
  GdConfig cfg = parse_method("gd,loss=mse,lr=1e150,lr-min=1e150,epochs=20").gd;
  try {
    train_gd_cpu(fs, 32, 5, cfg);
    FAIL("no error");
  } catch (const NumericError& e) {
    CHECK(std::string(e.what()).find("non-finite") != std::string::npos);
    CHECK(e.exit_code() == kExitNumeric);
  }
}

TEST_CASE("checkpoint: 50 epochs + resume 50 is bit-identical to 100 in one go") {
  const FactSet fs = facts(8, 16, 4);
  GdConfig cfg;
  cfg.epochs = 100;
  cfg.lr = 1e-2;
  cfg.bias = true;
  cfg.gate = nn::Activation::relu;
  cfg.record_every = 7;
  const GdResult whole = train_gd_cpu(fs, 24, 3, cfg);

  const std::string ck = temp_path("gd_ck.h5");
  std::filesystem::remove(ck);
  GdConfig first = cfg;
  first.checkpoint = ck;
  first.checkpoint_every_s = 0;  // every epoch
  first.on_epoch = [](std::int64_t done, double) {
    if (done == 50) throw std::runtime_error("simulated kill");
  };
  CHECK_THROWS_AS(train_gd_cpu(fs, 24, 3, first), std::runtime_error);
  REQUIRE(std::filesystem::exists(ck));

  GdConfig second = cfg;
  second.checkpoint = ck;
  second.checkpoint_every_s = 3600;  // only the final one
  const GdResult resumed = train_gd_cpu(fs, 24, 3, second);
  CHECK(resumed.resumed);
  CHECK(resumed.epochs_run == 100);
  CHECK(same_params(resumed.mlp, whole.mlp));
  CHECK(resumed.loss_curve == whole.loss_curve);
  CHECK(resumed.accuracy_curve == whole.accuracy_curve);
  CHECK(resumed.curve_epoch == whole.curve_epoch);
  CHECK(resumed.final_loss == whole.final_loss);

  // A finished checkpoint is returned as is.
  const GdResult again = train_gd_cpu(fs, 24, 3, second);
  CHECK(again.resumed);
  CHECK(same_params(again.mlp, whole.mlp));

  // Another configuration (or seed, or fact set) refuses the file.
  GdConfig other = second;
  other.lr = 2e-2;
  CHECK_THROWS_AS(train_gd_cpu(fs, 24, 3, other), UserError);
  CHECK_THROWS_AS(train_gd_cpu(fs, 24, 4, second), UserError);
  CHECK_THROWS_AS(train_gd_cpu(facts(8, 16, 5), 24, 3, second), UserError);
  std::filesystem::remove(ck);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec))
    CHECK(e.path().filename().string().find("memcap_test_" + std::to_string(getpid()) + "_gd_ck.h5.tmp") ==
          std::string::npos);
}

TEST_CASE("training is bit-identical for 1 and 2 threads") {
  // F m d = 1.3M multiply-adds per GEMM: above the layers' parallel threshold (2^20).
  const FactSet fs = facts(32, 128, 6);
  GdConfig cfg = parse_method("gd:transformer,gate=silu,epochs=10,lr=1e-2").gd;
  set_threads(1);
  const GdResult one = train_gd_cpu(fs, 320, 2, cfg);
  set_threads(2);
  const GdResult two = train_gd_cpu(fs, 320, 2, cfg);
  CHECK(same_params(one.mlp, two.mlp));
  CHECK(one.loss_curve == two.loss_curve);
}

TEST_CASE("gd method specs: defaults, presets, overrides, errors") {
  const MethodSpec g = parse_method("gd");
  CHECK(g.kind == MethodKind::gd);
  CHECK(g.name() == "gd");
  CHECK(g.gd.gate == nn::Activation::identity);
  CHECK_FALSE(g.gd.bias);
  CHECK(g.gd.loss == nn::Loss::ce);
  CHECK(g.gd.epochs == 10000);
  CHECK(g.gd.lr == 1e-3);
  CHECK(g.gd.lr_min == 1e-6);
  CHECK_FALSE(g.gd.adamw);
  CHECK(g.gd.weight_decay == 0);
  CHECK(g.gd.precision == "f32");
  CHECK(g.gd.stop_loss == 1e-7);

  const MethodSpec t = parse_method("gd:transformer");
  CHECK(t.name() == "gd");
  CHECK(t.gd.gate == nn::Activation::relu);
  CHECK(t.gd.bias);
  CHECK(t.gd.loss == nn::Loss::ce);
  CHECK(t.gd.precision == "f64");

  const MethodSpec e = parse_method("gd:edit");
  CHECK(e.gd.gate == nn::Activation::silu);
  CHECK(e.gd.bias);
  CHECK(e.gd.loss == nn::Loss::mse);
  CHECK(e.gd.precision == "f32");

  const MethodSpec o = parse_method("gd:edit,gate=relu,bias=0,epochs=5,optimizer=adamw,wd=0.01,precision=tf32");
  CHECK(o.text == "gd:edit,gate=relu,bias=0,epochs=5,optimizer=adamw,wd=0.01,precision=tf32");
  CHECK(o.gd.gate == nn::Activation::relu);
  CHECK_FALSE(o.gd.bias);
  CHECK(o.gd.loss == nn::Loss::mse);
  CHECK(o.gd.epochs == 5);
  CHECK(o.gd.adamw);
  CHECK(o.gd.weight_decay == 0.01);
  CHECK(o.gd.precision == "f32");
  CHECK(o.gd.tf32);
  CHECK(parse_method("gd:loss=mse").gd.loss == nn::Loss::mse);

  // The canonical spec parses back to the same training fields.
  const GdConfig c = parse_method(canonical_gd_spec(o.gd)).gd;
  CHECK(canonical_gd_spec(c) == canonical_gd_spec(o.gd));
  CHECK(c.lr == o.gd.lr);
  CHECK(c.tf32);
  // precision bf16 (the fused bf16 GPU kernels) parses and round-trips through the canonical spec
  const GdConfig b16 = parse_method("gd,precision=bf16").gd;
  CHECK(b16.precision == "bf16");
  CHECK_FALSE(b16.tf32);
  CHECK(parse_method(canonical_gd_spec(b16)).gd.precision == "bf16");
  // precision bf16x3 (the cuBLAS chain with split-operand bf16 logit products) likewise
  const GdConfig b3 = parse_method("gd,precision=bf16x3").gd;
  CHECK(b3.precision == "bf16x3");
  CHECK_FALSE(b3.tf32);
  CHECK(canonical_gd_spec(b3).find("precision=bf16x3") != std::string::npos);
  CHECK(parse_method(canonical_gd_spec(b3)).gd.precision == "bf16x3");

  for (const char* bad : {"gd,gate=tanh", "gd,epochs=0", "gd,epochs=2.5", "gd,lr=-1", "gd,lr=0", "gd,lr=abc",
                          "gd,bias=2", "gd,loss=l1", "gd,optimizer=sgd", "gd,precision=fp8",
                          "gd,precision=bf16x2", "gd,wd=-1",
                          "gd,foo=1", "gd,lr", "gd:bogus", "gd,lr=1e-3,lr=1e-2", "gd:edit,loss=ce,loss=mse",
                          "gd,lr=1e-7", "gd,stop-loss=nan"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_method(bad), UserError);
  }
  CHECK_THROWS_AS(parse_method("hebbian:whitened,ridge=1e-6,ridge=1e-5"), UserError);
}

TEST_CASE("build_mlp dispatches gd: width default 4d, param counts of spec §3.7") {
  const FactSet fs = facts(4, 8, 1);
  const GatedMLP a = build_mlp(parse_method("gd,epochs=3"), fs, 0, 1);
  CHECK(a.width() == 16);
  CHECK(a.param_count == 3 * 16 * 4);
  CHECK(a.method == "gd,epochs=3");
  const MethodSpec tb = parse_method("gd:transformer,epochs=3");
  const GatedMLP b = build_mlp(tb, fs, 10, 1);
  CHECK(b.param_count == 3 * 10 * 4 + 2 * 10 + 4);
  CHECK(param_count(tb, 10, 4) == 3 * 10 * 4 + 2 * 10 + 4);
  CHECK(b.gate == "relu");
  CHECK(default_width(MethodKind::gd, 64) == 256);
  // The GatedMLP forward equals the trainer's forward (same outputs the loss saw).
  GdConfig cfg = tb.gd;
  const GdLayout l = GdLayout::make(10, 4, true);
  const auto p = gd_init_params(10, 4, true, 1);
  const GatedMLP init = gd_to_mlp(p, l, cfg);
  cfg.loss = nn::Loss::mse;
  const Eigen::MatrixXd diff = init.forward(fs.keys) - fs.targets();
  CHECK(gd_loss_cpu(fs, 10, cfg, p, nullptr) == doctest::Approx(diff.squaredNorm() / double(diff.size())).epsilon(1e-13));
}

TEST_CASE("checkpoint file round trip and refusals") {
  const std::string path = temp_path("ck_io.h5");
  GdCheckpoint ck;
  ck.params = {1, 2, 3};
  ck.m = {0.1, 0.2, 0.3};
  ck.v = {0.01, 0.02, 0.03};
  ck.epoch = 7;
  ck.final_loss = 0.5;
  ck.loss_curve = {1.0, 0.5};
  ck.accuracy_curve = {0.0, 1.0};
  ck.curve_epoch = {0, 6};
  ck.fingerprint = "abc";
  write_gd_checkpoint(path, ck);
  const auto back = read_gd_checkpoint(path, "abc");
  REQUIRE(back.has_value());
  CHECK(back->params == ck.params);
  CHECK(back->v == ck.v);
  CHECK(back->epoch == 7);
  CHECK(back->curve_epoch == ck.curve_epoch);
  CHECK_THROWS_AS(read_gd_checkpoint(path, "xyz"), UserError);
  CHECK_FALSE(read_gd_checkpoint(path + ".none", "abc").has_value());
  std::filesystem::remove(path);
}
