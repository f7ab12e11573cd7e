// Tests of the capacity protocol building blocks (spec §4.6): closed-form coefficient tiles vs
// FeatureMap (features and kernels), the state/closed-form cross-check, tiling invariance,
// key sources and value models, and bad input.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/capacity.hpp"
#include "kata/feature_map.hpp"
#include "kata/key_source.hpp"
#include "kata/value_model.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {
const char* kMaps[] = {"linear", "orthant", "lorentz", "lorentz-ray", "lorentz-lift", "m1",        "m2",
                       "m4",     "sigma2",  "sigma4",  "deg2",        "m2:eps=1e-3", "softmax:tau=0.25"};
}

TEST_CASE("closed-form tiles equal <psi(q), psi(u)> and FeatureMap::kernel_matrix") {
  const int d = 16;
  const Eigen::MatrixXd Q = rng::normal_matrix(7, d, 11, rng::kUser);
  const Eigen::MatrixXd U = rng::normal_matrix(9, d, 12, rng::kUser);
  for (const char* spec : kMaps) {
    CAPTURE(spec);
    const CapacityKernel k = CapacityKernel::parse(spec, d);
    const FeatureMap fm = FeatureMap::parse(spec, d);
    const Eigen::MatrixXd A = k.tile(Q, U);
    if (k.is_softmax()) {
      // Rows are scaled by exp(-shift_i / tau); ratios within a row match exp(<q,u>/tau).
      const Eigen::MatrixXd ref = fm.kernel_matrix(Q, U);
      for (int i = 0; i < Q.rows(); ++i) {
        const double r0 = A(i, 0) / ref(i, 0);
        for (int j = 1; j < U.rows(); ++j) CHECK(A(i, j) / ref(i, j) == doctest::Approx(r0).epsilon(1e-12));
      }
      continue;
    }
    const Eigen::MatrixXd viaPsi = k.features(Q) * k.features(U).transpose();
    const double scale = viaPsi.cwiseAbs().maxCoeff();
    CHECK((A - viaPsi).cwiseAbs().maxCoeff() <= 1e-12 * scale);
    CHECK((A - fm.kernel_matrix(Q, U)).cwiseAbs().maxCoeff() <= 1e-12 * scale);
    CHECK(k.feature_dim() == fm.feature_dim());
    const Eigen::VectorXd self = k.self(U);
    for (int j = 0; j < U.rows(); ++j) CHECK(self(j) == doctest::Approx(fm.kernel(U.row(j), U.row(j))).epsilon(1e-12));
  }
}

TEST_CASE("state readout equals the closed-form weighted sum (fp64, every map, tiles of any size)") {
  const int d = 16;
  const auto keys = KeySource::parse("random", d);
  const Eigen::MatrixXd U = keys.draw(40, 5, 40);
  for (const char* spec : kMaps) {
    for (const char* vm : {"gauss", "codebook:size=64", "onehot"}) {
      CAPTURE(spec);
      CAPTURE(vm);
      const CapacityKernel k = CapacityKernel::parse(spec, d);
      const ValueModel values = ValueModel::parse(vm);
      const Values v = values.draw(40, 48, 6);
      for (Readout r : {Readout::normalized, Readout::unnormalized}) {
        if (k.is_softmax() && r == Readout::unnormalized) continue;
        const TrialMetrics whole = evaluate_trial_cpu(k, U, U, v, r, 0);
        const TrialMetrics tiled = evaluate_trial_cpu(k, U, U, v, r, 7);
        CHECK(whole.max_deviation < 1e-12);
        CHECK(tiled.max_deviation < 1e-12);
        CHECK(whole.correct == tiled.correct);
        CHECK(whole.coherence == doctest::Approx(tiled.coherence).epsilon(1e-12));
        for (int i = 0; i < 40; ++i) CHECK(whole.psnr(i) == doctest::Approx(tiled.psnr(i)).epsilon(1e-10));
      }
    }
  }
}

TEST_CASE("pSNR and coherence of a trial match a direct computation") {
  const int d = 8, K = 30;
  const CapacityKernel k = CapacityKernel::parse("m2", d);
  const FeatureMap fm = FeatureMap::parse("m2", d);
  const Eigen::MatrixXd U = KeySource::parse("random", d).draw(K, 3, K);
  const Values v = ValueModel::parse("gauss").draw(K, 8, 4);
  const TrialMetrics m = evaluate_trial_cpu(k, U, U, v, Readout::normalized, 5);
  const Eigen::MatrixXd A = fm.kernel_matrix(U, U);
  double coh = 0;
  for (int i = 0; i < K; ++i) {
    double dist = 0;
    for (int j = 0; j < K; ++j)
      if (j != i) {
        dist += A(i, j) * A(i, j);
        coh = std::max(coh, A(i, j) / std::sqrt(A(i, i) * A(j, j)));
      }
    CHECK(m.psnr(i) == doctest::Approx(A(i, i) * A(i, i) / dist).epsilon(1e-12));
  }
  CHECK(m.coherence == doctest::Approx(coh).epsilon(1e-12));
  // Decode by hand from the closed-form normalized readout.
  int correct = 0;
  for (int i = 0; i < K; ++i) {
    const Eigen::RowVectorXd o = (A.row(i) * v.V) / A.row(i).sum();
    Eigen::Index best;
    (o * v.V.transpose()).maxCoeff(&best);
    correct += best == i;
  }
  CHECK(m.correct == correct);
}

TEST_CASE("softmax: streaming KV-cache readout matches the closed form even at tiny tau") {
  const int d = 32, K = 100;
  const Eigen::MatrixXd U = KeySource::parse("random", d).draw(K, 9, K);
  const Values v = ValueModel::parse("gauss").draw(K, 16, 10);
  for (double tau : {1.0, 0.125, 1e-3}) {
    CAPTURE(tau);
    const CapacityKernel k = CapacityKernel::parse(fmt::format("softmax:tau={}", tau), d);
    const TrialMetrics m = evaluate_trial_cpu(k, U, U, v, Readout::normalized, 13);
    CHECK(m.max_deviation < 1e-12);
    for (int i = 0; i < K; ++i) CHECK(m.psnr(i) > 0.0);  // never NaN; +inf once distractors underflow
    CHECK(m.coherence < 1.0);
  }
}

TEST_CASE("key sources: shapes, norms, nesting, dictionaries") {
  const int d = 16;
  const Eigen::MatrixXd a = KeySource::parse("random", d).draw(50, 7, 50);
  const Eigen::MatrixXd b = KeySource::parse("random", d).draw(20, 7, 50);
  CHECK((a.topRows(20) - b).norm() == 0.0);
  for (int i = 0; i < 50; ++i) CHECK(a.row(i).norm() == doctest::Approx(1.0).epsilon(1e-14));
  const Eigen::MatrixXd s = regular_simplex(d);
  CHECK(s.rows() == d + 1);
  const Eigen::MatrixXd G = s * s.transpose();
  for (int i = 0; i <= d; ++i)
    for (int j = 0; j <= d; ++j) CHECK(G(i, j) == doctest::Approx(i == j ? 1.0 : -1.0 / d).epsilon(1e-12));
  const auto mub = KeySource::parse("mub", d);
  CHECK(mub.pool_size() == 8 * 9);
  const auto dev = KeySource::parse("devore", d);  // s = 4, r = 2: 64 vectors in R^16
  CHECK(dev.pool_size() == 64);
  CHECK(KeySource::parse("coord", d).pool_size() == d);
  const Eigen::MatrixXd m1 = mub.draw(72, 3, 72), m2 = mub.draw(30, 3, 72);
  CHECK((m1.topRows(30) - m2).norm() == 0.0);
  const auto greedy = KeySource::parse("greedy:a=0.6", d);
  const Eigen::MatrixXd g = greedy.greedy_pool(4, 40);
  CHECK(g.rows() == 40);
  const Eigen::MatrixXd Gg = (g * g.transpose()).cwiseAbs() - Eigen::MatrixXd::Identity(40, 40);
  CHECK(Gg.maxCoeff() < 0.6);
}

TEST_CASE("bad input: clear UserErrors") {
  CHECK_THROWS_AS(CapacityKernel::parse("bogus", 32), UserError);
  CHECK_THROWS_AS(CapacityKernel::parse("m3", 32), UserError);           // 3 does not divide 32
  CHECK_THROWS_AS(CapacityKernel::parse("softmax:tau=0", 32), UserError);
  CHECK_THROWS_AS(CapacityKernel::parse("softmax:tau=-1", 32), UserError);
  CHECK_THROWS_AS(CapacityKernel::parse("deg4", 32), UserError);
  CHECK_THROWS_AS(KeySource::parse("mub", 30), UserError);              // s = 15 is not a prime power
  CHECK_THROWS_AS(KeySource::parse("devore", 32), UserError);           // 32 is not s^2
  CHECK_THROWS_AS(KeySource::parse("nope", 32), UserError);
  CHECK_THROWS_AS(KeySource::parse("coord", 8).draw(9, 1, 9), UserError);  // dictionary too small
  CHECK_THROWS_AS(ValueModel::parse("onehot").check(10, 5), UserError);
  CHECK_THROWS_AS(ValueModel::parse("codebook:size=1"), UserError);
  CapacityConfig c;
  c.k_min = 0;
  CHECK_THROWS_AS(validate(c), UserError);
  c = CapacityConfig{};
  c.k_list = {-3};
  CHECK_THROWS_AS(validate(c), UserError);
  c = CapacityConfig{};
  c.keys = "coord";
  c.k_list = {64};
  CHECK_THROWS_AS(validate(c), UserError);
  c = CapacityConfig{};
  c.map = "softmax:tau=0.1";
  c.readout = "unnormalized";
  CHECK_THROWS_AS(validate(c), UserError);
}
