// The §6.4 fact-editing block on the CPU (edit/edit_model.hpp): parameter counts, a whole-model central
// finite-difference check of every trainable tensor in float64 on a tiny configuration (with right
// padding and ignored labels), causality, and that gradients accumulate.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "edit/edit_model.hpp"
#include "nn/tied_ce.hpp"

using namespace memcap;
using namespace memcap::edit;

namespace {

constexpr double kFdStep = 1e-6;    // central-difference step
constexpr double kFdRelTol = 1e-6;  // ||analytic − FD|| / ||FD|| per tensor, float64
constexpr std::int64_t kFdEntries = 12;  // entries checked per tensor (all when fewer)

EditModelConfig tiny() {
  EditModelConfig c;
  c.d = 8;
  c.vocab = 13;
  c.qk_hidden = 6;
  c.rank = 2;
  c.fact_hidden = 5;
  return c;
}

// Two sequences of T = 5: the second right-padded after 3 tokens; some labels ignored.
const std::vector<std::int32_t> kTokens = {3, 7, 1, 12, 5, /**/ 0, 9, 4, nn::kIgnoreLabel, nn::kIgnoreLabel};
const std::vector<std::int32_t> kTargets = {7, 1, nn::kIgnoreLabel, 5, 2, /**/ 9, 4, 11, nn::kIgnoreLabel,
                                            nn::kIgnoreLabel};

}  // namespace

TEST_CASE("edit model: parameter counts") {
  const EditModelConfig def;
  CHECK(edit_trainable_count(def) == 334849);
  CHECK(edit_trainable_layout(def).numel() == 334849);
  const std::int64_t d = 256, h = 512;
  CHECK(edit_frozen_layout(def).numel() == 32815 * d + 2 * h * d + 2 * h + d * h + d);
  const auto c = tiny();
  CHECK(edit_trainable_layout(c).numel() == edit_trainable_count(c));
  EditModelConfig bad = c;
  bad.d = 7;
  CHECK_THROWS_AS(edit_trainable_layout(bad), UserError);
}

TEST_CASE("edit model: whole-model finite differences of the mean loss, every trainable tensor") {
  EditModel m(tiny());
  m.init(5);
  // move every trainable off its init (biases 0, gains 1) so each term of the backward is exercised
  auto& p = m.trainable().params;
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += 0.3 * rng::normal(6, rng::kUser, i);
  EditActs acts;
  const std::int64_t B = 2, T = 5;
  const double loss = m.forward(acts, kTokens.data(), kTargets.data(), B, T);
  CHECK(acts.n_valid == 7);
  CHECK(std::isfinite(loss));
  CHECK(loss > 0);
  m.trainable().zero_grads();
  m.backward(acts, kTargets.data());
  const auto grads = m.trainable().grads;

  EditActs probe;
  auto f = [&] { return m.forward(probe, kTokens.data(), kTargets.data(), B, T); };
  for (const auto& v : m.trainable().layout.views()) {
    CAPTURE(v.name);
    std::vector<double> num, ana;
    for (std::int64_t k = 0; k < std::min(v.numel, kFdEntries); ++k) {
      const std::int64_t j = v.numel <= kFdEntries
                                 ? k
                                 : static_cast<std::int64_t>(rng::below(7, rng::kUser, static_cast<std::uint64_t>(k),
                                                                        static_cast<std::uint64_t>(v.numel)));
      const auto i = static_cast<std::size_t>(v.offset + j);
      const double x0 = p[i];
      p[i] = x0 + kFdStep;
      const double fp = f();
      p[i] = x0 - kFdStep;
      const double fm = f();
      p[i] = x0;
      num.push_back((fp - fm) / (2 * kFdStep));
      ana.push_back(grads[i]);
    }
    double e = 0, n = 0;
    for (std::size_t i = 0; i < num.size(); ++i) {
      e += (num[i] - ana[i]) * (num[i] - ana[i]);
      n += num[i] * num[i];
    }
    CHECK(n > 0);  // every tensor influences the loss
    CHECK(std::sqrt(e / n) < kFdRelTol);
  }
  // gradients accumulate: a second backward doubles them
  m.forward(acts, kTokens.data(), kTargets.data(), B, T);
  m.backward(acts, kTargets.data());
  for (std::size_t i = 0; i < grads.size(); ++i) CHECK(m.trainable().grads[i] == doctest::Approx(2 * grads[i]));
}

TEST_CASE("edit model: causal (a later token leaves earlier rows unchanged) and refuses bad tokens") {
  EditModel m(tiny());
  m.init(8);
  EditActs a1, a2;
  m.forward(a1, kTokens.data(), kTargets.data(), 2, 5);
  auto tokens = kTokens;
  tokens[3] = 2;  // sequence 0, position 3
  m.forward(a2, tokens.data(), kTargets.data(), 2, 5);
  for (std::int64_t n = 0; n < 3; ++n) CHECK(a2.lse[static_cast<std::size_t>(n)] == a1.lse[static_cast<std::size_t>(n)]);
  CHECK(a2.lse[3] != a1.lse[3]);
  for (std::int64_t n = 5; n < 10; ++n) CHECK(a2.lse[static_cast<std::size_t>(n)] == a1.lse[static_cast<std::size_t>(n)]);
  tokens[0] = 13;
  CHECK_THROWS_AS(m.forward(a2, tokens.data(), kTargets.data(), 2, 5), UserError);
}
