// Random and greedy dictionaries, make_dictionary dispatch and validation, blocked coherence against
// the full Gram matrix, feature-space coherence (PSD = raw², softmax in log space).
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/dictionary.hpp"

using namespace memcap;
using namespace memcap::kata;

namespace {
double full_coherence(const Eigen::MatrixXd& V) {
  Eigen::MatrixXd U = V;
  U.rowwise().normalize();
  Eigen::MatrixXd G = (U * U.transpose()).cwiseAbs();
  G.diagonal().setZero();
  return G.maxCoeff();
}
}  // namespace

TEST_CASE("blocked coherence equals the full Gram for every block size") {
  const Eigen::MatrixXd V = random_dictionary(301, 17, 4) * 3.0;  // non-unit rows are normalized
  const double want = full_coherence(V);
  for (std::int64_t b : {1, 7, 64, 300, 301, 4096}) {
    CAPTURE(b);
    CHECK(std::abs(coherence(V, b) - want) < 1e-14);
  }
  const auto det = coherence_detail(V, 50);
  CHECK(det.i < det.j);
  CHECK(std::abs(std::abs(V.row(det.i).normalized().dot(V.row(det.j).normalized())) - want) < 1e-14);
}

TEST_CASE("feature coherence: PSD equals raw squared, softmax normalized in log space") {
  const Eigen::MatrixXd V = random_dictionary(120, 8, 5);
  const double c = coherence(V, 32);
  CHECK(std::abs(feature_coherence(V, FeatureMap::parse("m1", 8), 32) - c * c) < 1e-14);
  CHECK(std::abs(feature_coherence(V, FeatureMap::parse("deg4", 8), 50) - std::pow(c, 4)) < 1e-13);
  // softmax on unit rows: exp((<x,y> − 1)/τ); τ = 1e-3 would overflow exp(<x,y>/τ) directly.
  Eigen::MatrixXd G = V * V.transpose();
  G.diagonal().setConstant(-2);
  const double tau = 1e-3;
  CHECK(feature_coherence(V, FeatureMap::parse("softmax:tau=0.001", 8), 40) ==
        doctest::Approx(std::exp((G.maxCoeff() - 1) / tau)).epsilon(1e-12));
  // Lorentz ray: (1 + z)/2 on unit vectors, max over z (positive, so the largest z wins)
  CHECK(feature_coherence(V, FeatureMap::parse("lorentz-ray", 8)) == doctest::Approx((1 + G.maxCoeff()) / 2));
  // orthant with eps = 0 and an all-negative row has no direction
  Eigen::MatrixXd W = V;
  W.row(3).setConstant(-1);
  CHECK_THROWS_AS(feature_coherence(W, FeatureMap::parse("orthant:eps=0", 8)), UserError);
}

TEST_CASE("random dictionary: unit rows, deterministic in the seed") {
  const Eigen::MatrixXd A = make_dictionary({.type = "random", .dim = 16, .count = 50, .seed = 3});
  const Eigen::MatrixXd B = make_dictionary({.type = "random", .dim = 16, .count = 50, .seed = 3});
  const Eigen::MatrixXd C = make_dictionary({.type = "random", .dim = 16, .count = 50, .seed = 4});
  CHECK((A - B).norm() == 0.0);
  CHECK((A - C).norm() > 1.0);
  CHECK((A.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
}

TEST_CASE("greedy line packing: certificate below a, near-maximal, clears the exact-cap bound, respects the cap") {
  const double a = 0.5;
  const Eigen::MatrixXd V = greedy_dictionary(8, a, 2000, 0, 7);
  CHECK(V.rows() > 8);
  CHECK(coherence(V) < a);
  // Near-maximal: a line packing is maximal when the double caps {x : |<x,u_i>| >= a} cover the sphere.
  // The run stopped after 2000 consecutive rejections, which happens with probability (1 - u)^2000 when a
  // fraction u is uncovered: u >= 0.005 would give e^-10. Estimate u with 20,000 fresh directions from
  // another stream (standard error <= 5e-4 at u = 0.005) and require u_hat < 0.0075 (0.005 + 5 SE).
  const Eigen::MatrixXd probe = rng::sphere_rows(20000, 8, 99, rng::kUser);
  const Eigen::ArrayXd reach = (probe * V.transpose()).cwiseAbs().rowwise().maxCoeff().array();
  const double uncovered = (reach < a).cast<double>().mean();
  CHECK(uncovered < 0.0075);
  // Thm 4 / Lemma 6 (kata spec §3.4): a maximal packing has at least 1/(2σ(C_a)) lines,
  // σ(C_a) = ½ I_{1−a²}((p−1)/2, ½). At p = 16, a = 0.6 that is 91.83 (scipy.special.betainc;
  // the paper's ½(1−a²)^{−(p−1)/2} = 14.21 and the trivial orthonormal count 16 are far below it).
  const Eigen::MatrixXd V16 = greedy_dictionary(16, 0.6, 2000, 0, 3);
  CHECK(coherence(V16) < 0.6);
  CHECK(static_cast<double>(V16.rows()) >= 91.83);
  MESSAGE("greedy p=8 a=0.5: " << V.rows() << " lines, uncovered fraction " << uncovered << " (< 0.0075); p=16 a=0.6: "
                               << V16.rows() << " lines (exact-cap bound 91.83)");
  const Eigen::MatrixXd W = greedy_dictionary(8, a, 2000, 10, 7);
  CHECK(W.rows() == 10);
  CHECK((W - V.topRows(10)).norm() == 0.0);  // same candidate stream
}

TEST_CASE("make_dictionary validation") {
  CHECK_THROWS_AS(make_dictionary({.type = "nope"}), UserError);
  CHECK_THROWS_AS(make_dictionary({.type = "random", .dim = 0, .count = 3}), UserError);
  CHECK_THROWS_AS(make_dictionary({.type = "greedy", .dim = 8, .max_coherence = 1.0}), UserError);
  CHECK_THROWS_AS(make_dictionary({.type = "mub", .field_size = 6}), UserError);
  CHECK_THROWS_AS(make_dictionary({.type = "devore", .field_size = 5, .degree = 5}), UserError);
  CHECK_THROWS_AS(validate_dict_spec({.type = "greedy", .dim = 4, .max_coherence = 0.5,
                                      .max_fail = kMaxGreedyFails + 1}), UserError);
  CHECK_NOTHROW(validate_dict_spec({.type = "greedy", .dim = 4, .max_coherence = 0.5, .max_fail = kMaxGreedyFails}));
  CHECK(make_dictionary({.type = "mub", .field_size = 5}).rows() == 30);
  CHECK(make_dictionary({.type = "devore", .field_size = 5, .degree = 1}).cols() == 25);
  CHECK(dictionary_count({.type = "mub", .field_size = 401}) == 161202);
  CHECK(dictionary_dim({.type = "mub", .field_size = 401}) == 802);
  CHECK_THROWS_AS(coherence(Eigen::MatrixXd::Zero(1, 3)), UserError);
  CHECK_THROWS_AS(coherence(Eigen::MatrixXd::Zero(3, 3)), UserError);
}
