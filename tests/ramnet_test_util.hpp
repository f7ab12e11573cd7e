// Helpers shared by the ramnet doctest files (tests/test_ramnet_*.cpp and tests/gpu/test_ramnet_*.cpp).
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

#include "ramnet/recall.hpp"

namespace memcap::ramnet::test {

// Mixer mx at (dp, U, beta_r, beta_w) with the softmax temperature tau = 2/(beta_r beta_w), where kappa-attention
// matches softmax to first order (spec ramnet.md §2.6).
inline RecallModel recall_model(Mixer mx, int dp, int U, double beta_r, double beta_w) {
  RecallModel m;
  m.mixer = mx;
  m.params = {dp, U, beta_r, beta_w};
  m.tau = 2.0 / (beta_r * beta_w);
  return m;
}

// beta_r = beta_w = beta.
inline RecallModel recall_model(Mixer mx, int dp, int U, double beta) { return recall_model(mx, dp, U, beta, beta); }

// check(m) for every GSU variant of base: Top-K in Ks, gamma in gammas, eps in {0, 1e-3}, both readouts (each
// CAPTUREd, so a failing check names its variant).
template <class Check>
void for_each_gsu_variant(const RecallModel& base, std::initializer_list<std::int64_t> Ks,
                          std::initializer_list<double> gammas, Check&& check) {
  for (std::int64_t K : Ks)
    for (double gamma : gammas)
      for (double eps : {0.0, 1e-3})
        for (bool mass : {true, false}) {
          CAPTURE(K);
          CAPTURE(gamma);
          CAPTURE(eps);
          CAPTURE(mass);
          RecallModel m = base;
          m.topk = K;
          m.gamma = gamma;
          m.eps = eps;
          m.mass_readout = mass;
          check(m);
        }
}

}  // namespace memcap::ramnet::test
