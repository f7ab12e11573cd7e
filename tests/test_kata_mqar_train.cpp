// MQAR CPU trainer (spec kata.md §4.4, §4.5): bit-identical results for 1 and 2 threads (fixed
// micro-batches and gradient slots), the cosine schedule and clipping recorded per step, early stop,
// float64 vs float32 paths computing the same training, evaluation of a trained model reproducing the
// trainer's final evaluation, and cap_θ of §4.5; RoPE and the gated mixers (no decay on A_log / dt_bias).
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "kata/mqar_checkpoint.hpp"
#include "kata/mqar_train.hpp"
#include "nn/layers.hpp"
#include "mqar_test_util.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {

MqarTrainConfig tiny_config(const std::string& mixer) {
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
  s.examples = 96;
  c.train = {s};
  s.examples = 40;
  c.eval = {s};
  c.batch = 32;
  c.epochs = 3;
  c.lr = 3e-3;
  c.micro_tokens = 64;  // 4 sequences: 8 micro-batches per step, more than the threads
  c.seed = 17;
  return c;
}

}  // namespace

TEST_CASE("training is bit-identical for 1 and 2 threads") {
  for (const char* mixer : {"softmax", "sigma2", "delta-m2"}) {
    CAPTURE(mixer);
    const MqarTrainConfig c = tiny_config(mixer);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const MqarTrainResult a = train_mqar(c);
    omp_set_num_threads(2);
    const MqarTrainResult b = train_mqar(c);
    omp_set_num_threads(saved);
    CHECK(a.steps == 9);  // 3 epochs × ceil(96 / 32)
    CHECK(a.final_params == b.final_params);
    CHECK(a.loss == b.loss);
    CHECK(a.final_eval[0].accuracy == b.final_eval[0].accuracy);
  }
}

TEST_CASE("schedule, clipping and curves: lr follows the cosine over all steps, loss decreases") {
  MqarTrainConfig c = tiny_config("m2");
  c.epochs = 6;
  c.lr = 1e-2;
  c.lr_min = 1e-4;
  c.clip = 0.05;  // small enough to clip every step
  c.eval_every = 2;
  const MqarTrainResult r = train_mqar(c);
  REQUIRE(r.steps == 18);
  REQUIRE(r.lr.size() == 18);
  for (std::int64_t t = 0; t < 18; ++t) CHECK(r.lr[static_cast<std::size_t>(t)] == nn::cosine_lr(1e-2, 1e-4, t, 18));
  CHECK(r.eval_epoch == std::vector<std::int64_t>{2, 4, 6});
  CHECK(r.eval_step == std::vector<std::int64_t>{6, 12, 18});
  CHECK(r.eval_accuracy.size() == 3);
  for (double g : r.grad_norm) CHECK((std::isfinite(g) && g > 0));  // recorded before clipping
  CHECK(r.loss.back() < r.loss.front());
  CHECK(r.path == "cpu:f32");
  c.clip = 0;  // no clipping: another trajectory
  CHECK(train_mqar(c).final_params != r.final_params);
}

TEST_CASE("early stop after the first evaluation that meets the threshold") {
  MqarTrainConfig c = tiny_config("softmax");
  c.early_stop = 0.0;  // any accuracy meets it
  const MqarTrainResult r = train_mqar(c);
  CHECK(r.stopped_early);
  CHECK(r.epochs_run == 1);
  CHECK(r.steps == 3);
  c.early_stop = 2.0;  // never
  CHECK(!train_mqar(c).stopped_early);
}

TEST_CASE("early-stop screen between recorded evaluations: the same stop as evaluating every epoch") {
  MqarTrainConfig c = tiny_config("softmax");
  c.train[0].examples = 640;  // 20 steps per epoch: the accuracy climbs over the 10 epochs
  c.epochs = 10;
  c.lr = 3e-2;
  TaskSlice longer = c.eval[0];
  longer.seq_len = 32;
  longer.keys = 4;
  longer.examples = 24;
  c.eval.push_back(longer);  // two slices: the screen's order and budgets per slice
  memcap::test::check_early_stop_screen(c);
}

TEST_CASE("mqar_epoch_end: recorded epochs, the screen's order, budgets and first failure") {
  MqarTrainConfig c = tiny_config("softmax");
  c.epochs = 10;
  c.eval_every = 4;
  c.early_stop = 0.999;
  TaskSlice a = c.eval[0];  // 40 examples × 2 keys = 80 positions
  TaskSlice b = a;
  b.seq_len = 32;
  b.keys = 4;
  b.examples = 500;  // 2000 positions: budget 2
  c.eval = {a, b, a};
  std::vector<std::pair<std::size_t, std::int64_t>> calls;
  auto eval_with = [&](std::vector<double> acc) {
    return [&calls, acc, &c](std::size_t i, std::int64_t max_errors) {
      calls.emplace_back(i, max_errors);
      SliceResult r;
      r.labelled = c.eval[i].examples * c.eval[i].queries();
      r.accuracy = acc[i];
      return r;
    };
  };
  MqarTrainResult res;
  std::vector<SliceResult> ev;
  // An --eval-every epoch and the last: every slice, no budget.
  CHECK(mqar_epoch_end(c, res, 3, ev, eval_with({0.5, 0.5, 0.5})) == MqarEpochEnd::record);
  CHECK(calls == std::vector<std::pair<std::size_t, std::int64_t>>{{0, -1}, {1, -1}, {2, -1}});
  CHECK(ev.size() == 3);
  calls.clear();
  CHECK(mqar_epoch_end(c, res, 9, ev, eval_with({0.5, 0.5, 0.5})) == MqarEpochEnd::record);
  CHECK(calls.size() == 3);
  // Before any recorded evaluation the last slice first; the first failure ends the screen.
  calls.clear();
  CHECK(mqar_epoch_end(c, res, 0, ev, eval_with({1.0, 1.0, 0.5})) == MqarEpochEnd::screened);
  CHECK(calls == std::vector<std::pair<std::size_t, std::int64_t>>{{2, 0}});
  // After one: lowest last accuracy first (slice 1, then 0, then 2); all pass: a full evaluation to record.
  res.eval_accuracy = {0.2, 0.1, 0.3, 0.9, 0.4, 0.95};
  calls.clear();
  CHECK(mqar_epoch_end(c, res, 4, ev, eval_with({1.0, 0.9995, 1.0})) == MqarEpochEnd::record);
  CHECK(calls == std::vector<std::pair<std::size_t, std::int64_t>>{{1, 2}, {0, 0}, {2, 0}});
  REQUIRE(ev.size() == 3);
  CHECK(ev[1].accuracy == 0.9995);
  // A slice cut short by its budget (fewer positions than planned) fails, whatever its accuracy so far.
  calls.clear();
  auto cut = [&](std::size_t i, std::int64_t max_errors) {
    calls.emplace_back(i, max_errors);
    SliceResult r;
    r.labelled = 10;
    r.accuracy = 1.0;
    return r;
  };
  CHECK(mqar_epoch_end(c, res, 4, ev, cut) == MqarEpochEnd::screened);
  CHECK(calls.size() == 1);
  // Early stop off (> 1) or no evaluation slice: nothing between the recorded epochs.
  c.early_stop = 2;
  calls.clear();
  CHECK(mqar_epoch_end(c, res, 4, ev, eval_with({1, 1, 1})) == MqarEpochEnd::none);
  CHECK(calls.empty());
}

TEST_CASE("fresh examples: epoch 0 is the fixed set, every later epoch a new one; fingerprints differ") {
  MqarTrainConfig c = tiny_config("softmax");
  const MqarTrainResult fixed = train_mqar(c);
  for (std::int64_t e = 0; e < c.epochs; ++e) CHECK(mqar_epoch_plan(c, e).seed == mqar_epoch_plan(c, 0).seed);
  c.fresh_examples = true;
  CHECK(mqar_epoch_plan(c, 0).seed == mqar_epoch_plan(MqarTrainConfig(tiny_config("softmax")), 0).seed);
  CHECK(mqar_epoch_plan(c, 1).seed != mqar_epoch_plan(c, 0).seed);
  CHECK(mqar_epoch_plan(c, 2).seed != mqar_epoch_plan(c, 1).seed);
  CHECK(mqar_epoch_plan(c, 1).perm == mqar_epoch_plan(tiny_config("softmax"), 1).perm);  // same order, new examples
  const MqarTrainResult fresh = train_mqar(c);
  const std::size_t spe = static_cast<std::size_t>(c.steps_per_epoch());
  REQUIRE(fresh.loss.size() == fixed.loss.size());
  // The first epoch's steps are the fixed run's; the second epoch's batches differ (so do the losses).
  CHECK(std::vector<double>(fresh.loss.begin(), fresh.loss.begin() + static_cast<std::ptrdiff_t>(spe)) ==
        std::vector<double>(fixed.loss.begin(), fixed.loss.begin() + static_cast<std::ptrdiff_t>(spe)));
  CHECK(fresh.loss[spe] != fixed.loss[spe]);
  CHECK(fresh.final_params != fixed.final_params);
  // Deterministic, and a checkpoint of one mode is not resumed by the other.
  CHECK(train_mqar(c).final_params == fresh.final_params);
  CHECK(mqar_fingerprint(c, "cpu") != mqar_fingerprint(tiny_config("softmax"), "cpu"));
}

TEST_CASE("mqar_error_budget: the most wrong predictions that still reach the threshold") {
  CHECK(mqar_error_budget(1000, 0.999) == 1);
  CHECK(mqar_error_budget(1024000, 0.999) == 1024);
  CHECK(mqar_error_budget(999, 0.999) == 0);  // 998/999 < 0.999
  CHECK(mqar_error_budget(10, 1.0) == 0);
  CHECK(mqar_error_budget(10, 0.0) == 10);
  CHECK(mqar_error_budget(10, 1.5) == -1);
  CHECK(mqar_error_budget(0, 0.5) == -1);  // no position: accuracy 0
  for (std::int64_t n : {1, 7, 80, 1000, 4096}) {
    for (double th : {0.5, 0.9, 0.99, 0.999, 0.123}) {
      const std::int64_t e = mqar_error_budget(n, th);
      CHECK(static_cast<double>(n - e) / static_cast<double>(n) >= th);
      if (e < n) CHECK(static_cast<double>(n - e - 1) / static_cast<double>(n) < th);
    }
  }
}

TEST_CASE("float64 and float32 paths train the same model to float precision") {
  MqarTrainConfig c = tiny_config("m2");
  c.epochs = 1;
  const MqarTrainResult f32 = train_mqar(c);
  c.precision = "f64";
  const MqarTrainResult f64 = train_mqar(c);
  CHECK(f64.path == "cpu:f64");
  REQUIRE(f32.loss.size() == f64.loss.size());
  for (std::size_t i = 0; i < f32.loss.size(); ++i) CHECK(f32.loss[i] == doctest::Approx(f64.loss[i]).epsilon(1e-4));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < f64.final_params.size(); ++i) {
    num += (f32.final_params[i] - f64.final_params[i]) * (f32.final_params[i] - f64.final_params[i]);
    den += f64.final_params[i] * f64.final_params[i];
  }
  CHECK(std::sqrt(num / den) < 1e-4);
}

TEST_CASE("evaluate_mqar reproduces the trainer's final evaluation") {
  const MqarTrainConfig c = tiny_config("sigma2");
  const MqarTrainResult r = train_mqar(c);
  const MqarModel m = MqarModel::build(c.model);
  const SliceResult e = evaluate_mqar(m, r.final_params, c.eval[0], slice_seed(c.seed, "eval", c.eval[0], 0), "f32", 64);
  CHECK(e.labelled == 80);
  CHECK(e.accuracy == r.final_eval[0].accuracy);
  CHECK(e.loss == doctest::Approx(r.final_eval[0].loss).epsilon(1e-12));
}

TEST_CASE("cap_theta of §4.5 over the evaluation diagonal") {
  const auto slices = mqar_eval_diagonal();
  std::vector<SliceResult> r(5);
  const double acc[5] = {1.0, 0.995, 0.95, 0.5, 0.2};
  for (int i = 0; i < 5; ++i) r[static_cast<std::size_t>(i)].accuracy = acc[i];
  CHECK(capacity_at(slices, r, 0.99) == 256);
  CHECK(capacity_at(slices, r, 0.90) == 512);
  CHECK(capacity_at(slices, r, 0.999) == 128);
  r[0].accuracy = 0.1;
  r[1].accuracy = 0.1;
  r[2].accuracy = 0.1;
  CHECK(capacity_at(slices, r, 0.9) == 0);
}

TEST_CASE("bad training configurations are refused") {
  MqarTrainConfig c = tiny_config("m2");
  c.lr = 0;
  CHECK_THROWS_AS(train_mqar(c), UserError);
  c = tiny_config("m2");
  c.train[0].vocab = 128;  // slice and model disagree
  CHECK_THROWS_AS(train_mqar(c), UserError);
  c = tiny_config("m2");
  c.precision = "bf16";
  CHECK_THROWS_AS(train_mqar(c), UserError);
  c = tiny_config("m2");
  c.train.clear();
  CHECK_THROWS_AS(train_mqar(c), UserError);
  c = tiny_config("m2");
  c.device = "tpu";
  CHECK_THROWS_AS(train_mqar(c), UserError);
}

TEST_CASE("epoch plan (shared by the CPU and GPU trainers): every example once, batches shuffled per epoch") {
  MqarTrainConfig c = tiny_config("m2");
  TaskSlice s2 = c.train[0];
  s2.examples = 50;  // 2 batches of 32 and 18
  c.train.push_back(s2);
  const MqarEpochPlan a = mqar_epoch_plan(c, 0), b = mqar_epoch_plan(c, 1);
  REQUIRE(a.batches.size() == 5);  // 3 + 2
  CHECK(a.batches.size() == static_cast<std::size_t>(c.steps_per_epoch()));
  REQUIRE(a.order.size() == 5);
  std::vector<std::int64_t> seen(5, 0);
  for (std::int64_t i : a.order) ++seen[static_cast<std::size_t>(i)];
  CHECK(seen == std::vector<std::int64_t>(5, 1));
  for (std::size_t s = 0; s < 2; ++s) {
    std::vector<std::int64_t> p = a.perm[s];
    CHECK(static_cast<std::int64_t>(p.size()) == c.train[s].examples);
    std::sort(p.begin(), p.end());
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == static_cast<std::int64_t>(i));
  }
  CHECK(a.perm[0] != b.perm[0]);  // a new order each epoch
  const MqarEpochPlan a2 = mqar_epoch_plan(c, 0);
  CHECK(a2.order == a.order);  // a pure function of (seed, epoch)
  CHECK(a2.perm == a.perm);
}

TEST_CASE("RoPE and gated mixers (issue 12 options): CPU training, no decay on A_log / dt_bias, gated on CUDA refused") {
  // --device cuda with a gated mixer: UserError from validate (no GPU needed to say so). RoPE alone has a device
  // path since the fourteenth session: validate accepts it for cuda.
  {
    MqarTrainConfig c = tiny_config("m2");
    c.model.rope = true;
    c.device = "cuda";
    CHECK_NOTHROW(c.validate());
  }
  for (const auto& [mixer, rope] : {std::pair{"gated-m2", true}, std::pair{"gated-m2", false},
                                     std::pair{"convex-m2", false}, std::pair{"gated-delta-m2", false}}) {
    CAPTURE(mixer);
    MqarTrainConfig c = tiny_config(mixer);
    c.model.rope = rope;
    c.device = "cuda";
    CHECK_THROWS_AS(c.validate(), UserError);
    c.device = "cpu";
    CHECK_NOTHROW(c.validate());
  }
  // One step of GatedDeltaKATA + RoPE, with and without weight decay: A_log and dt_bias end identical
  // (no decay, §2.11.5), every other weight differs; the loss is finite.
  MqarTrainConfig c = tiny_config("gated-delta-m2");
  c.model.rope = true;
  c.epochs = 1;
  c.batch = 96;  // one step: the gradients of both runs are the same, only the decay differs
  c.eval.clear();
  c.weight_decay = 0.1;
  const MqarTrainResult a = train_mqar(c);
  c.weight_decay = 0;
  const MqarTrainResult b = train_mqar(c);
  REQUIRE(a.steps == 1);
  for (double l : a.loss) CHECK(std::isfinite(l));
  const MqarModel model = MqarModel::build(c.model);
  int nodecay = 0, decayed = 0;
  for (const auto& v : model.layout.views()) {
    bool same = true;
    for (std::int64_t j = 0; j < v.numel; ++j)
      same = same && a.final_params[static_cast<std::size_t>(v.offset + j)] == b.final_params[static_cast<std::size_t>(v.offset + j)];
    CAPTURE(v.name);
    if (MqarModel::no_weight_decay(v.name)) {
      CHECK(same);
      ++nodecay;
    } else if (v.name.find("norm") == std::string::npos && v.name.find(".b") == std::string::npos) {
      CHECK(!same);
      ++decayed;
    }
  }
  CHECK(nodecay == 2);
  CHECK(decayed > 10);
  // The gated mixers learn on the tiny task like the others (loss decreases over 3 epochs).
  for (const char* mixer : {"gated-m2", "convex-m2"}) {
    CAPTURE(mixer);
    MqarTrainConfig g = tiny_config(mixer);
    g.model.rope = true;
    g.eval.clear();
    const MqarTrainResult r = train_mqar(g);
    REQUIRE(r.loss.size() == 9);
    CHECK(r.loss.back() < r.loss.front());
  }
}

TEST_CASE("memory estimate counts the data plan: 8 bytes per training example, the curves, the eval tallies") {
  MqarTrainConfig c;
  c.model.d_model = 16;
  c.model.vocab = 64;
  c.batch = 256;
  c.epochs = 1;
  TaskSlice s;
  s.seq_len = 16;
  s.keys = 4;
  s.vocab = 64;
  s.examples = 99999999999;  // kata mqar train --train-slices 16:4:99999999999 used to die out of memory
  c.train = {s};
  s.examples = 16;
  c.eval = {s};
  const double batches = std::ceil(99999999999.0 / 256);
  CHECK(mqar_data_bytes(c) == doctest::Approx(8 * 99999999999.0 + 24 * batches + 40 * batches + 24));
  CHECK(mqar_memory_bytes(c, 2) > mqar_data_bytes(c));
  CHECK(mqar_memory_bytes(c, 2) > 7e11);
}
