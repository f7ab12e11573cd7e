// Shared check of the MQAR trainers (test_kata_mqar_train.cpp on the CPU, gpu/test_kata_mqar_model.cpp on
// the GPU): the early-stop screen between recorded evaluations (kata::mqar_epoch_end) takes the same stop
// as evaluating after every epoch, and a screen that never passes leaves the training unchanged.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "kata/mqar_train.hpp"

namespace memcap::test {

// c: a tiny deterministic training of at least 5 epochs (any device). A run with early stop off and
// evaluations after every epoch gives the worst slice per epoch; the threshold is a new best after an epoch
// e ≥ 2 (the latest before the last) that --eval-every 3 does not evaluate, so only the screen can stop there.
inline void check_early_stop_screen(kata::MqarTrainConfig c) {
  using kata::MqarTrainResult;
  REQUIRE(c.epochs >= 5);
  c.eval_every = 1;
  c.early_stop = 2;  // never
  const MqarTrainResult all = kata::train_mqar(c);
  const std::size_t ns = c.eval.size();
  REQUIRE(all.eval_accuracy.size() == ns * static_cast<std::size_t>(c.epochs));
  std::vector<double> worst;
  for (std::size_t e = 0; e < static_cast<std::size_t>(c.epochs); ++e)
    worst.push_back(*std::min_element(all.eval_accuracy.begin() + static_cast<std::ptrdiff_t>(e * ns),
                                      all.eval_accuracy.begin() + static_cast<std::ptrdiff_t>((e + 1) * ns)));
  std::int64_t stop = 0;  // 1-based epoch
  double best = -1;
  for (std::size_t e = 0; e + 1 < worst.size(); ++e) {  // the latest such epoch: recorded rows before it
    if (worst[e] > best && e >= 1 && (e + 1) % 3 != 0) stop = static_cast<std::int64_t>(e + 1);
    best = std::max(best, worst[e]);
  }
  std::ostringstream seen;
  for (const double w : worst) seen << ' ' << w;
  MESSAGE("worst slice accuracy per epoch:" << seen.str() << "; stop after epoch " << stop);
  REQUIRE(stop >= 2);
  c.early_stop = worst[static_cast<std::size_t>(stop - 1)];
  const MqarTrainResult every = kata::train_mqar(c);
  c.eval_every = 3;
  const MqarTrainResult screened = kata::train_mqar(c);
  CHECK(every.stopped_early);
  CHECK(every.epochs_run == stop);
  CHECK(screened.stopped_early);
  CHECK(screened.epochs_run == stop);
  CHECK(screened.steps == every.steps);
  CHECK(screened.final_params == every.final_params);
  std::vector<std::int64_t> rows;
  for (std::int64_t e = 3; e < stop; e += 3) rows.push_back(e);
  rows.push_back(stop);
  CHECK(screened.eval_epoch == rows);  // the recorded ones and the stop
  REQUIRE(screened.final_eval.size() == ns);
  for (std::size_t i = 0; i < ns; ++i) {
    CHECK(screened.final_eval[i].accuracy == every.final_eval[i].accuracy);
    CHECK(screened.final_eval[i].labelled == every.final_eval[i].labelled);
    CHECK(screened.final_eval[i].loss == every.final_eval[i].loss);
  }
  // A threshold above every epoch's worst slice: the screen runs after each epoch and never passes.
  const double top = *std::max_element(worst.begin(), worst.end());
  if (top < 1) {
    c.early_stop = std::min(1.0, top + 1e-9);
    const MqarTrainResult never = kata::train_mqar(c);
    CHECK(!never.stopped_early);
    CHECK(never.epochs_run == c.epochs);
    CHECK(never.final_params == all.final_params);
    CHECK(never.loss == all.loss);
    CHECK(never.eval_epoch.back() == c.epochs);
    CHECK(never.final_eval.back().accuracy == all.final_eval.back().accuracy);
  }
}

}  // namespace memcap::test
