// Pieces of the SSFR sweeps (margin/ssfr_jobs.hpp, margin/ssfr_run.hpp, nn/ssfr_train.hpp checkpoints):
// a training resumed from a checkpoint (in memory and through the checkpoint file) equals the
// uninterrupted run bit for bit, a checkpoint of another training is refused or ignored; the §4.6
// standalone gate stops before MLP_B; the τ* fit of §4.3 on a hand-made case; the attention-noise
// statistics are consistent with their definitions.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "margin/ssfr_jobs.hpp"
#include "margin/ssfr_run.hpp"
#include "mlp/ssfr_setup.hpp"

using namespace memcap;

namespace {

mlp::SsfrSetup setup(const std::string& mlp_text, std::int64_t width, double gate = 0) {
  mlp::SsfrSetupSpec spec;
  spec.task = nn::SsfrTask::make(16, 2, 2, 2);
  spec.block.dim = 8;
  spec.block.vo_trainable = true;
  spec.block.attn_residual = true;
  spec.width = width;
  spec.seed = 5;
  spec.gate = gate;
  return mlp::make_ssfr_setup(spec, mlp::parse_ssfr_mlp(mlp_text), nullptr);
}

nn::SsfrTrainConfig config() {
  nn::SsfrTrainConfig cfg;
  cfg.steps = 230;
  cfg.batch = 32;
  cfg.eval_every = 50;
  cfg.eval_batches = 2;
  cfg.lr = 5e-3;
  cfg.seed = 11;
  return cfg;
}

void require_same(const nn::SsfrTrainResult& a, const nn::SsfrTrainResult& b) {
  CHECK(a.params == b.params);
  CHECK(a.loss_curve == b.loss_curve);
  CHECK(a.batch_acc_curve == b.batch_acc_curve);
  CHECK(a.eval_step == b.eval_step);
  CHECK(a.eval_acc == b.eval_acc);
  CHECK(a.train_acc == b.train_acc);
  CHECK(a.eval_loss == b.eval_loss);
  CHECK(a.best_acc == b.best_acc);
  CHECK(a.best_train_acc == b.best_train_acc);
  CHECK(a.final_acc == b.final_acc);
  CHECK(a.final_train_acc == b.final_train_acc);
  CHECK(a.final_loss == b.final_loss);
  CHECK(a.steps_run == b.steps_run);
}

struct Killed {};

}  // namespace

TEST_CASE("SSFR checkpoint: a resumed training equals the uninterrupted one") {
  const mlp::SsfrSetup s = setup("hebbian:whitened", 32);
  const nn::SsfrTrainConfig cfg = config();
  const nn::SsfrTrainResult full = nn::train_ssfr_cpu(s.problem, cfg);
  REQUIRE(full.eval_step == std::vector<std::int64_t>{0, 50, 100, 150, 200});

  // Checkpoints come after every evaluation the training continues past: steps 1, 51, 101, 151, 201.
  std::vector<nn::SsfrCheckpoint> seen;
  nn::SsfrTrainConfig c2 = cfg;
  c2.on_checkpoint = [&](const nn::SsfrCheckpoint& ck) {
    seen.push_back(ck);
    if (ck.next_step == 101) throw Killed{};  // the process dies here
  };
  CHECK_THROWS_AS(nn::train_ssfr_cpu(s.problem, c2), Killed);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].next_step == 1);
  CHECK(seen[1].next_step == 51);
  const nn::SsfrCheckpoint& ck = seen[2];
  CHECK(ck.round == 3);
  CHECK(ck.partial.loss_curve.size() == 101);
  CHECK(ck.partial.eval_step == std::vector<std::int64_t>{0, 50, 100});

  nn::SsfrTrainConfig c3 = cfg;
  c3.resume = &ck;
  require_same(nn::train_ssfr_cpu(s.problem, c3), full);

  // Through the file: same fingerprint -> the same run; another fingerprint -> ignored.
  const std::string path = (std::filesystem::temp_directory_path() / "memcap_test_ssfr_ckpt.h5").string();
  const std::string fp = margin::ssfr_fingerprint(s.problem, s.mlp_text, s.width, cfg, Device::cpu);
  margin::write_ssfr_checkpoint(path, ck, fp);
  const auto back = margin::read_ssfr_checkpoint(path, fp);
  REQUIRE(back.has_value());
  CHECK(back->params == ck.params);
  CHECK(back->adam_v == ck.adam_v);
  CHECK(back->next_step == 101);
  nn::SsfrTrainConfig c4 = cfg;
  c4.resume = &*back;
  require_same(nn::train_ssfr_cpu(s.problem, c4), full);
  nn::SsfrTrainConfig other = cfg;
  other.lr = 1e-3;
  CHECK(!margin::read_ssfr_checkpoint(
             path, margin::ssfr_fingerprint(s.problem, s.mlp_text, s.width, other, Device::cpu))
             .has_value());
  // train_ssfr resumes from the file and removes it when the training ends.
  margin::SsfrRunner run;
  run.checkpoint = path;
  require_same(margin::train_ssfr(s.problem, cfg, fp, run), full);
  CHECK(!std::filesystem::exists(path));

  // A checkpoint that does not fit the training is refused (UserError).
  nn::SsfrCheckpoint bad = ck;
  bad.params.pop_back();
  nn::SsfrTrainConfig c5 = cfg;
  c5.resume = &bad;
  CHECK_THROWS_AS(nn::train_ssfr_cpu(s.problem, c5), UserError);
  nn::SsfrTrainConfig shorter = cfg;
  shorter.steps = 100;  // the checkpoint is past the end
  shorter.resume = &ck;
  CHECK_THROWS_AS(nn::train_ssfr_cpu(s.problem, shorter), UserError);
}

TEST_CASE("SSFR standalone gate (§4.6 a): MLP_A below the gate stops before MLP_B") {
  // Whitened at m = 4 < F = 16 cannot store every fact; at m = 32 > F it interpolates.
  const mlp::SsfrSetup small = setup("hebbian:whitened", 4, 1.0);
  CHECK(small.gate_failed);
  CHECK(small.mlp_acc_a < 1.0);
  CHECK(std::isnan(small.mlp_acc_b));
  CHECK(small.mlp_b.width() == 0);  // never built
  const mlp::SsfrSetup big = setup("hebbian:whitened", 32, 1.0);
  CHECK(!big.gate_failed);
  CHECK(big.mlp_acc_a == 1.0);
  CHECK(big.mlp_acc_b == 1.0);
  CHECK(big.width == 32);
}

TEST_CASE("tau* fit (§4.3, Fig. 7) on a hand-made case") {
  // accuracy_w = frac(gamma > 0.25) exactly; the zero-error interval is [0.1, 0.3) and ties go to the
  // smallest grid point, -1 + 2·1100/2000 = 0.1 (strictly above the margin 0.1, so it is excluded).
  const std::vector<std::vector<double>> m = {{-0.5, 0.1, 0.3, 0.6}, {0.3, 0.4, 0.6, 0.7}, {-0.9, -0.2, 0.05, 0.35}};
  const std::vector<double> acc = {0.5, 1.0, 0.25};
  CHECK(margin::fraction_above(m[0], 0.0) == doctest::Approx(0.75));
  CHECK(margin::fraction_above(m[0], 0.3) == doctest::Approx(0.25));  // strictly greater
  CHECK(margin::fit_tau_star(m, acc) == doctest::Approx(0.1).epsilon(1e-12));
  // Accuracies no threshold matches: the least-squares minimiser is still on the grid, in [-1, 1].
  const double t = margin::fit_tau_star(m, {0.9, 0.1, 0.6});
  CHECK(t >= -1.0);
  CHECK(t <= 1.0);
  CHECK_THROWS_AS(margin::fit_tau_star(m, {0.5}), UserError);
}

TEST_CASE("attention-noise statistics (§4.4) are consistent with their definitions") {
  const mlp::SsfrSetup s = setup("identity", 0);
  const std::vector<double> params = nn::ssfr_init_params(s.problem.block, 3);
  const margin::SsfrNoiseStats st = margin::ssfr_attention_noise(s.problem, params, 3, 64, 9);
  CHECK(st.eps_attn >= st.p95);
  CHECK(st.p95 >= st.mean);
  CHECK(st.mean > 0);
  CHECK(st.eps_attn <= 2.0 + 1e-12);  // unit vectors
  CHECK(st.std >= 0);
  double mx = 0;
  int seen = 0;
  for (double v : st.per_key_max)
    if (!std::isnan(v)) mx = std::max(mx, v), ++seen;
  CHECK(mx == st.eps_attn);
  CHECK(seen == 16);  // 192 draws over 16 keys reach every key (fixed seed)
  CHECK(std::cos(st.max_angle_deg * M_PI / 180.0) == doctest::Approx(1 - 0.5 * st.eps_attn * st.eps_attn));
  // Untrained attention averages the tokens: the output is far from the key, accuracy low.
  CHECK(st.accuracy < 0.5);
  CHECK(st.eps_attn > 0.5);
}
