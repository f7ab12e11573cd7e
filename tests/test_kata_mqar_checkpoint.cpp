// MQAR training checkpoints (kata/mqar_checkpoint.hpp, MqarTrainConfig::on_checkpoint / resume): the
// file round trip is exact, a file of another training (fingerprint) or of another kind is ignored, a
// torn file (inconsistent lengths) is refused, and a training resumed from any checkpoint — mid-epoch
// or after an evaluation, read back from its file — ends bit-identically to the uninterrupted run.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/h5.hpp"
#include "kata/mqar_checkpoint.hpp"
#include "kata/mqar_jobs.hpp"
#include "kata/mqar_train.hpp"
#include "mlp/gd_checkpoint.hpp"

using namespace memcap;
using namespace memcap::kata;
namespace fs = std::filesystem;

namespace {

MqarTrainConfig tiny(const std::string& mixer) {
  MqarTrainConfig c;
  c.model.mixer = mixer;
  c.model.vocab = 64;
  c.model.d_model = 16;
  c.model.heads = 2;
  c.model.chunk = 8;
  TaskSlice s;
  s.seq_len = 16;
  s.keys = 2;
  s.vocab = 64;
  s.examples = 80;  // 3 batches of 32 (the last one short)
  c.train = {s};
  s.seq_len = 24;
  s.keys = 4;
  s.examples = 24;
  c.eval = {s};
  c.batch = 32;
  c.epochs = 3;
  c.lr = 3e-3;
  c.micro_tokens = 64;
  c.seed = 5;
  c.early_stop = 2;
  return c;
}

std::string temp_path(const char* name) {
  return (fs::temp_directory_path() / (std::string("memcap_mqar_ck_") + std::to_string(::getpid()) + name)).string();
}

}  // namespace

TEST_CASE("checkpoint file round trip, fingerprints and torn files") {
  const MqarTrainConfig c = tiny("m2");
  MqarCheckpoint ck;
  for (int i = 0; i < 50; ++i) {
    ck.params.push_back(0.1 * i - 1.0 / 3.0);
    ck.m.push_back(1e-3 * i);
    ck.v.push_back(1e-7 * i * i);
  }
  ck.steps = 4;
  ck.epoch = 1;
  ck.batch_in_epoch = 1;
  auto& r = ck.partial;
  r.epochs_run = 1;
  r.step = {1, 2, 3, 4};
  r.loss = {4.1, 4.0, 3.9, 3.7};
  r.accuracy = {0, 0.25, 0.5, 0.5};
  r.lr = {3e-3, 2.9e-3, 2.5e-3, 2e-3};
  r.grad_norm = {1.5, 1.25, 1.0, 0.75};
  r.eval_epoch = {1};
  r.eval_step = {3};
  r.eval_accuracy = {0.125};
  r.eval_loss = {3.5};
  r.train_s = 1.5;
  r.eval_s = 0.25;
  const std::string path = temp_path("a.h5");
  const std::string fp = mqar_fingerprint(c, "cpu");
  write_mqar_checkpoint(path, ck, fp);
  const auto back = read_mqar_checkpoint(path, fp);
  REQUIRE(back.has_value());
  CHECK(back->params == ck.params);
  CHECK(back->m == ck.m);
  CHECK(back->v == ck.v);
  CHECK(back->steps == 4);
  CHECK(back->epoch == 1);
  CHECK(back->batch_in_epoch == 1);
  CHECK(back->partial.epochs_run == 1);
  CHECK(back->partial.step == r.step);
  CHECK(back->partial.loss == r.loss);
  CHECK(back->partial.accuracy == r.accuracy);
  CHECK(back->partial.lr == r.lr);
  CHECK(back->partial.grad_norm == r.grad_norm);
  CHECK(back->partial.eval_epoch == r.eval_epoch);
  CHECK(back->partial.eval_step == r.eval_step);
  CHECK(back->partial.eval_accuracy == r.eval_accuracy);
  CHECK(back->partial.eval_loss == r.eval_loss);
  CHECK(back->partial.train_s == 1.5);
  CHECK(back->partial.eval_s == 0.25);

  // Another training (lr, device or seed) or no file: nothing to resume.
  MqarTrainConfig other = c;
  other.lr = 1e-2;
  CHECK_FALSE(read_mqar_checkpoint(path, mqar_fingerprint(other, "cpu")).has_value());
  CHECK_FALSE(read_mqar_checkpoint(path, mqar_fingerprint(c, "cuda")).has_value());
  CHECK(mqar_fingerprint(c, "cpu") != mqar_fingerprint(other, "cpu"));
  MqarTrainConfig hooks = c;  // the checkpoint period and the hooks are not part of the training
  hooks.checkpoint_every = 7;
  hooks.on_step = [](std::int64_t, std::int64_t, double, double) {};
  CHECK(mqar_fingerprint(hooks, "cpu") == fp);
  CHECK_FALSE(read_mqar_checkpoint(temp_path("missing.h5"), fp).has_value());

  // A file whose arrays disagree in length is an IoError, not a silent restart.
  const std::string torn = temp_path("torn.h5");
  mlp::write_checkpoint_file(torn, "test", "memcap-mqar-checkpoint-1", fp, [&](h5::File& f) {
    const std::vector<double> a = {1, 2, 3}, b = {1, 2};
    const std::vector<std::int64_t> pos = {0, 0, 0, 0};
    const std::vector<double> times = {0, 0};
    const std::vector<std::int64_t> none;
    const std::vector<double> dnone;
    f.write("params", std::span<const double>(a));
    f.write("adam_m", std::span<const double>(b));
    f.write("adam_v", std::span<const double>(a));
    f.write("position", std::span<const std::int64_t>(pos));
    f.write("times", std::span<const double>(times));
    for (const char* n : {"step", "eval_epoch", "eval_step"}) f.write(n, std::span<const std::int64_t>(none));
    for (const char* n : {"loss", "accuracy", "lr", "grad_norm", "eval_accuracy", "eval_loss"})
      f.write(n, std::span<const double>(dnone));
  });
  CHECK_THROWS_AS(read_mqar_checkpoint(torn, fp), IoError);
  fs::remove(path);
  fs::remove(torn);
}

TEST_CASE("a training resumed from a checkpoint file ends bit-identically") {
  for (const char* mixer : {"m2", "delta-m2"}) {
    CAPTURE(mixer);
    MqarTrainConfig c = tiny(mixer);
    c.eval_every = 2;  // evaluations after epochs 2 and 3: checkpoints mid-epoch, at an epoch end, after one
    c.checkpoint_every = 2;
    std::vector<MqarCheckpoint> cks;
    c.on_checkpoint = [&cks](const MqarCheckpoint& k) { cks.push_back(k); };
    const MqarTrainResult full = train_mqar(c);
    REQUIRE(full.steps == 9);  // 3 epochs x 3 batches
    // Every 2 steps (2, 4, 6, 8) and after the evaluation at epoch 2 (not after the last one).
    REQUIRE(cks.size() == 5);
    CHECK(cks[0].steps == 2);
    CHECK(cks[0].epoch == 0);
    CHECK(cks[0].batch_in_epoch == 2);
    CHECK(cks[1].steps == 4);
    CHECK(cks[1].epoch == 1);
    CHECK(cks[1].batch_in_epoch == 1);
    CHECK(cks[2].steps == 6);  // the last batch of epoch 2, before its evaluation
    CHECK(cks[2].batch_in_epoch == 3);
    CHECK(cks[3].steps == 6);  // after the evaluation
    CHECK(cks[3].epoch == 2);
    CHECK(cks[3].batch_in_epoch == 0);
    CHECK(cks[3].partial.eval_step == std::vector<std::int64_t>{6});
    const std::string path = temp_path("resume.h5");
    const std::string fp = mqar_fingerprint(c, "cpu");
    for (const auto& k : cks) {
      CAPTURE(k.steps);
      CAPTURE(k.batch_in_epoch);
      write_mqar_checkpoint(path, k, fp);
      const auto back = read_mqar_checkpoint(path, fp);
      REQUIRE(back.has_value());
      MqarTrainConfig rc = tiny(mixer);
      rc.eval_every = 2;
      rc.resume = &*back;
      const MqarTrainResult res = train_mqar(rc);
      CHECK(res.steps == full.steps);
      CHECK(res.epochs_run == full.epochs_run);
      CHECK(res.final_params == full.final_params);
      CHECK(res.loss == full.loss);
      CHECK(res.accuracy == full.accuracy);
      CHECK(res.lr == full.lr);
      CHECK(res.grad_norm == full.grad_norm);
      CHECK(res.step == full.step);
      CHECK(res.eval_step == full.eval_step);
      CHECK(res.eval_accuracy == full.eval_accuracy);
      CHECK(res.eval_loss == full.eval_loss);
      REQUIRE(res.final_eval.size() == 1);
      CHECK(res.final_eval[0].accuracy == full.final_eval[0].accuracy);
      CHECK(res.final_eval[0].loss == full.final_eval[0].loss);
    }
    fs::remove(path);
  }
}

TEST_CASE("run_mqar_training resumes from the checkpoint file and removes it") {
  MqarTrainConfig c = tiny("softmax");
  c.checkpoint_every = 3;
  const std::string path = temp_path("job.h5");
  // A checkpoint left by a killed run (step 3), then the job: it continues from there.
  std::vector<MqarCheckpoint> cks;
  MqarTrainConfig first = c;
  first.on_checkpoint = [&cks](const MqarCheckpoint& k) { cks.push_back(k); };
  const MqarTrainResult full = train_mqar(first);
  REQUIRE(!cks.empty());
  write_mqar_checkpoint(path, cks.front(), mqar_fingerprint(c, "cpu"));
  const MqarJobRun run = run_mqar_training(c, path, "cpu");
  CHECK_FALSE(run.diverged);
  CHECK(run.resumed_step == 3);
  CHECK(run.res.loss == full.loss);
  CHECK(run.res.final_params == full.final_params);
  CHECK_FALSE(fs::exists(path));
  // A checkpoint of another device is not resumed from.
  write_mqar_checkpoint(path, cks.front(), mqar_fingerprint(c, "cuda"));
  CHECK(run_mqar_training(c, path, "cpu").resumed_step == 0);
}

TEST_CASE("phase step and averages") {
  MqarTrainResult r;
  r.eval_step = {10, 20, 30};
  r.eval_accuracy = {0.2, 0.995, 0.999};
  CHECK(mqar_phase_step(r, 1, 0.99) == 20);
  CHECK(mqar_phase_step(r, 1, 0.9991) == -1);
  CHECK(mqar_eval_avg({{0.5, 0, 1}, {1.0, 0, 1}}) == 0.75);
  MqarTrainConfig c = tiny("m2");
  c.eval.push_back(c.train.front());  // T = 16: not longer than the training slices
  CHECK(mqar_ood_avg(c, {{0.5, 0, 1}, {1.0, 0, 1}}) == 0.5);
  // the printed /induction cell names a row where only some seeds reached the phase
  CHECK(induction_phase_cell(-1, 0, 2) == "-");
  CHECK(induction_phase_cell(6875, 2, 2) == "6875");
  CHECK(induction_phase_cell(7000, 1, 2) == "7000 (1 of 2 seeds)");
  CHECK(induction_phase_cell(250, 1, 1) == "250");
}
