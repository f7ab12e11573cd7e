// MQAR / overwrite / induction generators (spec kata.md §4.1–4.3): every invariant on many examples
// (distinct keys and values in their ranges, each key queried exactly once, labels only at the query
// positions and equal to the bound value, fillers in range), the power-law placement law (first and
// second draws against the exact sequential-draw probabilities), counter-based reproducibility, the
// §4.1 training mixture and evaluation diagonal, and slice-list parsing.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "kata/mqar_task.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {

TaskSlice slice(TaskKind kind, std::int64_t T, std::int64_t K, std::int64_t V = 8192) {
  TaskSlice s;
  s.kind = kind;
  s.seq_len = T;
  s.keys = K;
  s.vocab = V;
  s.examples = 1;
  return s;
}

// Checks every MQAR / overwrite invariant of one example; returns the query slots in key order.
std::vector<std::int64_t> check_example(const TaskSlice& s, const std::int32_t* in, const std::int32_t* lab) {
  const std::int64_t T = s.seq_len, K = s.keys, V = s.vocab;
  const bool ow = s.kind == TaskKind::overwrite;
  std::set<std::int32_t> keys, values;
  std::map<std::int32_t, std::int32_t> bound;  // key -> value it must recall
  for (std::int64_t i = 0; i < K; ++i) {
    const std::int32_t k = in[2 * i], v = in[2 * i + 1];
    CHECK(k >= 1);
    CHECK(k < V / 2);
    CHECK(v >= V / 2);
    CHECK(v < V);
    keys.insert(k);
    values.insert(v);
    bound[k] = v;
  }
  CHECK(static_cast<std::int64_t>(keys.size()) == K);    // distinct keys
  CHECK(static_cast<std::int64_t>(values.size()) == K);  // distinct values
  std::int64_t context = 2 * K;
  if (ow) {
    std::set<std::int32_t> updated;
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int32_t k = in[2 * K + 2 * j], v = in[2 * K + 2 * j + 1];
      REQUIRE(bound.count(k) == 1);  // an update rewrites one of the K keys
      CHECK(v != bound[k]);          // with a different value
      CHECK(v >= V / 2);
      CHECK(v < V);
      updated.insert(k);
      bound[k] = v;
    }
    CHECK(static_cast<std::int64_t>(updated.size()) == K);  // every key rewritten once
    context = 4 * K;
  }
  for (std::int64_t p = 0; p < context; ++p) CHECK(lab[p] == kIgnoreLabel);
  std::set<std::int32_t> queried;
  std::vector<std::int64_t> slots;
  for (std::int64_t p = context; p < T; ++p) {
    CHECK(in[p] >= 0);
    CHECK(in[p] < V);
    if (lab[p] == kIgnoreLabel) continue;
    CHECK((p - context) % 2 == 0);  // queries sit on the even slot positions
    REQUIRE(bound.count(in[p]) == 1);
    CHECK(lab[p] == bound[in[p]]);  // label at the query position = the (latest) bound value
    CHECK(queried.insert(in[p]).second);  // each key queried once
    slots.push_back((p - context) / 2);
  }
  CHECK(static_cast<std::int64_t>(queried.size()) == K);  // every key queried
  return slots;
}

double weight(std::int64_t j, double a) { return std::pow(static_cast<double>(j + 1), a - 1.0); }

}  // namespace

TEST_CASE("MQAR examples satisfy every invariant of §4.1") {
  for (auto [T, K] : std::vector<std::pair<int, int>>{{64, 4}, {128, 8}, {256, 64}, {40, 3}, {512, 128}}) {
    const TaskSlice s = slice(TaskKind::mqar, T, K);
    const TokenBatch b = generate(s, 11, 0, 200);
    REQUIRE(b.inputs.size() == static_cast<std::size_t>(200 * T));
    for (std::int64_t e = 0; e < b.count; ++e) {
      const auto slots = check_example(s, b.inputs.data() + e * T, b.labels.data() + e * T);
      if (T == 4 * K) {  // every slot used: the queries are a permutation of the keys
        std::set<std::int64_t> all(slots.begin(), slots.end());
        CHECK(static_cast<std::int64_t>(all.size()) == K);
        CHECK(*all.rbegin() == K - 1);
      }
    }
  }
}

TEST_CASE("overwrite examples: every key rewritten with a new value, label = the latest value (§4.2)") {
  for (auto [T, K] : std::vector<std::pair<int, int>>{{32, 4}, {64, 8}, {256, 32}, {30, 5}}) {
    const TaskSlice s = slice(TaskKind::overwrite, T, K);
    const TokenBatch b = generate(s, 5, 0, 200);
    for (std::int64_t e = 0; e < b.count; ++e) check_example(s, b.inputs.data() + e * T, b.labels.data() + e * T);
  }
}

TEST_CASE("induction probe: trigger twice, one label = the token after the first trigger (§4.3)") {
  TaskSlice s = slice(TaskKind::induction, 128, 1, 256);
  const TokenBatch b = generate(s, 3, 0, 500);
  std::vector<int> first_pos(128, 0);
  for (std::int64_t e = 0; e < b.count; ++e) {
    const std::int32_t* in = b.inputs.data() + e * 128;
    const std::int32_t* lab = b.labels.data() + e * 128;
    int triggers = 0, labelled = 0;
    std::int64_t first = -1;
    for (std::int64_t p = 0; p < 128; ++p) {
      CHECK(in[p] >= 0);
      CHECK(in[p] < 256);
      if (in[p] == 255) {
        ++triggers;
        if (first < 0) first = p;
      }
      if (lab[p] != kIgnoreLabel) ++labelled;
    }
    CHECK(triggers == 2);
    CHECK(in[127] == 255);
    CHECK(labelled == 1);
    REQUIRE(first >= 0);
    CHECK(first <= 125);
    CHECK(lab[127] == in[first + 1]);
    ++first_pos[static_cast<std::size_t>(first)];
  }
  // First trigger uniform on [0, T−3]: 500 draws over 126 positions, each bin well below 20.
  for (int p = 0; p < 126; ++p) CHECK(first_pos[static_cast<std::size_t>(p)] < 20);
}

TEST_CASE("query placement follows the power law (sequential weighted draws without replacement)") {
  // K = 2 at T = 64: space = 30 slots. First draw P(j) = w_j / W; second draw P(j | i) = w_j / (W − w_i).
  const double a = 0.01;
  const TaskSlice s = slice(TaskKind::mqar, 64, 2);
  const std::int64_t space = 30, n = 40000;
  double W = 0;
  for (std::int64_t j = 0; j < space; ++j) W += weight(j, a);
  const TokenBatch b = generate(s, 2024, 0, n);
  std::vector<double> first(space, 0), second_given0(space, 0);
  double n0 = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    const std::int32_t* in = b.inputs.data() + e * 64;
    const std::int32_t* lab = b.labels.data() + e * 64;
    std::int64_t s1 = -1, s2 = -1;
    for (std::int64_t p = 4; p < 64; p += 2) {
      if (lab[p] == kIgnoreLabel) continue;
      if (in[p] == in[0]) s1 = (p - 4) / 2;  // key 1 = first draw
      if (in[p] == in[2]) s2 = (p - 4) / 2;  // key 2 = second draw
    }
    REQUIRE(s1 >= 0);
    REQUIRE(s2 >= 0);
    first[static_cast<std::size_t>(s1)] += 1;
    if (s1 == 0) {
      n0 += 1;
      second_given0[static_cast<std::size_t>(s2)] += 1;
    }
  }
  // Each frequency within 5 binomial standard deviations of its exact probability.
  for (std::int64_t j = 0; j < space; ++j) {
    const double p = weight(j, a) / W;
    CHECK(std::abs(first[static_cast<std::size_t>(j)] / n - p) < 5 * std::sqrt(p * (1 - p) / n));
    if (j == 0) {
      CHECK(second_given0[0] == 0);
      continue;
    }
    const double q = weight(j, a) / (W - weight(0, a));
    CHECK(std::abs(second_given0[static_cast<std::size_t>(j)] / n0 - q) < 5 * std::sqrt(q * (1 - q) / n0) + 1e-12);
  }
  // The law favours small slots: slot 0 carries ~1/H_30 of the mass, far above uniform 1/30.
  CHECK(first[0] / n > 0.2);
}

TEST_CASE("examples are a pure function of (seed, index): any sub-range regenerates identically") {
  const TaskSlice s = slice(TaskKind::mqar, 128, 8);
  const TokenBatch all = generate(s, 77, 0, 20);
  const TokenBatch part = generate(s, 77, 7, 5);
  for (std::int64_t i = 0; i < 5 * 128; ++i) {
    CHECK(part.inputs[static_cast<std::size_t>(i)] == all.inputs[static_cast<std::size_t>(7 * 128 + i)]);
    CHECK(part.labels[static_cast<std::size_t>(i)] == all.labels[static_cast<std::size_t>(7 * 128 + i)]);
  }
  const TokenBatch other = generate(s, 78, 0, 20);
  CHECK(other.inputs != all.inputs);
}

TEST_CASE("§4.1 training mixture, evaluation diagonal and §4.2 slices") {
  const auto mix = mqar_training_mixture();
  REQUIRE(mix.size() == 5);
  const std::int64_t want[5][3] = {{64, 4, 100000}, {128, 8, 20000}, {256, 16, 20000}, {256, 32, 20000}, {256, 64, 20000}};
  for (int i = 0; i < 5; ++i) {
    CHECK(mix[static_cast<std::size_t>(i)].seq_len == want[i][0]);
    CHECK(mix[static_cast<std::size_t>(i)].keys == want[i][1]);
    CHECK(mix[static_cast<std::size_t>(i)].examples == want[i][2]);
    CHECK(mix[static_cast<std::size_t>(i)].vocab == 8192);
  }
  const auto ev = mqar_eval_diagonal();
  REQUIRE(ev.size() == 5);
  const std::int64_t Ts[5] = {512, 1024, 2048, 3072, 4096};
  for (int i = 0; i < 5; ++i) {
    CHECK(ev[static_cast<std::size_t>(i)].seq_len == Ts[i]);
    CHECK(ev[static_cast<std::size_t>(i)].keys == Ts[i] / 4);
    CHECK(ev[static_cast<std::size_t>(i)].examples == 1000);
    ev[static_cast<std::size_t>(i)].validate();
  }
  CHECK(mqar_eval_diagonal(8192, 2048).size() == 3);
  const auto ow = overwrite_eval();
  REQUIRE(ow.size() == 4);
  CHECK(ow[3].keys == 384);
  CHECK(ow[3].seq_len == 3072);
  CHECK(overwrite_training_mixture()[3].seq_len == 256);
}

TEST_CASE("slice validation and parsing refuse bad input") {
  CHECK_THROWS_AS(slice(TaskKind::mqar, 63, 4).validate(), UserError);     // odd T
  CHECK_THROWS_AS(slice(TaskKind::mqar, 60, 16).validate(), UserError);    // 4K > T
  CHECK_THROWS_AS(slice(TaskKind::mqar, 8192, 16).validate(), UserError);  // T >= V
  CHECK_THROWS_AS(slice(TaskKind::overwrite, 40, 8).validate(), UserError);  // 6K > T
  CHECK_THROWS_AS(slice(TaskKind::mqar, 64, 0).validate(), UserError);
  const auto sl = parse_slices("64:4,128:8:500", TaskKind::mqar, 8192, 1000);
  REQUIRE(sl.size() == 2);
  CHECK(sl[0].examples == 1000);
  CHECK(sl[1].examples == 500);
  CHECK(sl[1].keys == 8);
  CHECK_THROWS_AS(parse_slices("64:4,", TaskKind::mqar, 8192, 10), UserError);
  CHECK_THROWS_AS(parse_slices("64", TaskKind::mqar, 8192, 10), UserError);
  CHECK_THROWS_AS(parse_slices("64:-4", TaskKind::mqar, 8192, 10), UserError);
  CHECK_THROWS_AS(parse_slices("64:4:0", TaskKind::mqar, 8192, 10), UserError);
  CHECK_THROWS_AS(parse_slices("6x:4", TaskKind::mqar, 8192, 10), UserError);
  CHECK_THROWS_AS(parse_task("copy"), UserError);
}
