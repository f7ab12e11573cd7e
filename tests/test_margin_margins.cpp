// Margins (spec hebbian.md §3.1/§3.2): a hand-checked example, tiled == untiled, tied tables
// keep a key's own vector as a competitor, kernel-memory outputs, noisy queries and the exact
// signal + cross-talk decomposition (§8.1.7).
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "margin/margins.hpp"
#include "mlp/gated_mlp.hpp"

using namespace memcap;
using namespace memcap::margin;

TEST_CASE("hand-checked margins, worst competitor and argmax") {
  Eigen::MatrixXd V(3, 2), Y(2, 2);
  V << 1, 0, 0, 1, -1, 0;
  Y << 0.2, 0.9,   // scores 0.2, 0.9, -0.2 ; f = 0 -> γ = 0.2 - 0.9 = -0.7, j* = 1, argmax 1
      2.0, 0.5;    // scores 2.0, 0.5, -2.0 ; f = 0 -> γ = 1.5, j* = 1, argmax 0
  Eigen::VectorXi map(2);
  map << 0, 0;
  const MarginResult r = margins_from_outputs(Y, V, map, MarginConvention::raw_output);
  CHECK(r.per_key[0] == doctest::Approx(-0.7));
  CHECK(r.per_key[1] == doctest::Approx(1.5));
  CHECK(r.worst[0] == 1);
  CHECK(r.worst[1] == 1);
  CHECK(r.argmax[0] == 1);
  CHECK(r.argmax[1] == 0);
  CHECK(r.min_margin == doctest::Approx(-0.7));
  CHECK(r.accuracy == 0.5);
  // normalized: row 2 has norm sqrt(4.25)
  const MarginResult n = margins_from_outputs(Y, V, map, MarginConvention::normalized_output);
  CHECK(n.per_key[1] == doctest::Approx(1.5 / std::sqrt(4.25)));
  CHECK(n.accuracy == 0.5);
}

TEST_CASE("tiled scores equal untiled scores for every tile size") {
  const Eigen::MatrixXd V = rng::sphere_rows(37, 9, 1, rng::kValues);
  const Eigen::MatrixXd Y = rng::normal_matrix(29, 9, 2, rng::kUser);
  const Eigen::VectorXi map = rng::permutation(37, 3, rng::kMap).head(29);
  for (auto conv : {MarginConvention::raw_output, MarginConvention::normalized_output}) {
    const MarginResult ref = margins_from_outputs(Y, V, map, conv, 29);
    for (std::int64_t tile : {1, 4, 7, 28, 0}) {
      const MarginResult t = margins_from_outputs(Y, V, map, conv, tile);
      CHECK((t.per_key - ref.per_key).cwiseAbs().maxCoeff() < 1e-14);
      CHECK(t.worst == ref.worst);
      CHECK(t.argmax == ref.argmax);
      CHECK(t.accuracy == ref.accuracy);
    }
    // brute force γ_i
    for (Eigen::Index i = 0; i < 29; ++i) {
      Eigen::RowVectorXd y = Y.row(i);
      if (conv == MarginConvention::normalized_output) y /= y.norm();
      double best = -1e300;
      for (Eigen::Index j = 0; j < 37; ++j)
        if (j != map[i]) best = std::max(best, y.dot(V.row(j)));
      CHECK(ref.per_key[i] == doctest::Approx(y.dot(V.row(map[i])) - best).epsilon(1e-12));
    }
  }
}

TEST_CASE("tied table: a key's own vector stays a competitor (spec §7.1.11)") {
  const Eigen::MatrixXd E = rng::sphere_rows(10, 16, 4, rng::kKeys);
  Eigen::VectorXi map(10);
  for (int i = 0; i < 10; ++i) map[i] = (i + 1) % 10;
  // Output = the key itself: the own row wins, so every fact is wrong.
  const MarginResult r = margins_from_outputs(E, E, map, MarginConvention::normalized_output);
  CHECK(r.accuracy == 0.0);
  for (int i = 0; i < 10; ++i) {
    CHECK(r.argmax[i] == i);
    CHECK(r.worst[i] == i);
    CHECK(r.per_key[i] < 0);
  }
}

TEST_CASE("kernel-memory outputs and signal + cross-talk = margin exactly (§8.1.7, clean and noisy)") {
  const std::int64_t F = 24, d = 10, m = 40;
  const Eigen::MatrixXd K = rng::sphere_rows(F, d, 1, rng::kKeys), V = rng::sphere_rows(F, d, 1, rng::kValues);
  Eigen::VectorXi map(F);
  for (int i = 0; i < F; ++i) map[i] = i;
  const auto fmap = mlp::BilinearFeatureMap::random(m, d, 5, true);
  for (double eps : {0.0, 0.3}) {
    const Eigen::MatrixXd Q = noisy_queries(K, eps);
    const Eigen::MatrixXd phiK = fmap.apply(K), phiQ = fmap.apply(Q);
    const Eigen::MatrixXd Y = kernel_memory_outputs(phiK, phiQ, V);  // codes = values
    const Eigen::MatrixXd khat = phiK * phiQ.transpose();              // K̂_ti = <g(k_t), g(q_i)>
    CHECK((Y - khat.transpose() * V).norm() < 1e-12 * Y.norm());
    const MarginResult r = margins_from_outputs(Y, V, map, MarginConvention::kernel_memory, 5);
    const SignalCrosstalk sc = signal_crosstalk(phiK, phiQ, Y, V, V, map, r.worst);
    for (Eigen::Index i = 0; i < F; ++i) {
      // Independent double sum of Eq. 25 at j*(i).
      const Eigen::RowVectorXd a = V.row(map[i]) - V.row(r.worst[i]);
      const double signal = khat(i, i) * a.dot(V.row(map[i]));
      double cross = 0;
      for (Eigen::Index t = 0; t < F; ++t)
        if (t != i) cross += khat(t, i) * a.dot(V.row(map[t]));
      CHECK(signal + cross == doctest::Approx(r.per_key[i]).epsilon(1e-10));
      CHECK(sc.signal[i] == doctest::Approx(signal).epsilon(1e-10));
      CHECK(sc.crosstalk[i] == doctest::Approx(cross).epsilon(1e-9).scale(1.0));
    }
  }
}

TEST_CASE("noisy queries: ||k̃ - k|| = eps, one fixed direction per key across eps") {
  const Eigen::MatrixXd K = rng::sphere_rows(12, 8, 9, rng::kKeys);
  CHECK(noisy_queries(K, 0.0) == K);
  const Eigen::MatrixXd a = noisy_queries(K, 0.1) - K, b = noisy_queries(K, 0.4) - K;
  CHECK((a.rowwise().norm().array() - 0.1).abs().maxCoeff() < 1e-14);
  CHECK((4.0 * a - b).norm() < 1e-13);
  CHECK((noisy_queries(K, 0.1, 124) - K - a).norm() > 1e-3);  // another noise seed, another draw
  CHECK_THROWS_AS(noisy_queries(K, -1.0), UserError);
}

TEST_CASE("convention names") {
  CHECK(parse_convention("kernel") == MarginConvention::kernel_memory);
  CHECK(parse_convention("normalized") == MarginConvention::normalized_output);
  CHECK(parse_convention("raw") == MarginConvention::raw_output);
  CHECK(std::string(to_string(MarginConvention::kernel_memory)) == "kernel");
  CHECK_THROWS_AS(parse_convention("cosine"), UserError);
}
