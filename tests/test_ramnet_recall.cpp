// E7 recall protocol (src/ramnet/recall*.cpp): the T15 hard-write prediction, the §6 T9 readouts, the
// exact equivalence "dense RAM features as linear attention = mass-aware cumulative GSU = κ-attention"
// (§2.9) against two GSU references — the memory slice's GsuMemory (ramnet/gsu.hpp) and a recursion
// written here from §1.6 on dense distributions — the GSU paths with finite γ, ε > 0 and Top-K against
// both, the capacity search on deterministic cases,
// the hard-write prediction as a statistical check, and seed / thread / prefix invariance of the draws.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.hpp"
#include "ramnet/gsu.hpp"
#include "ramnet/recall.hpp"
#include "ramnet_test_util.hpp"
#include "ramnet/topk.hpp"

using namespace memcap;
using namespace memcap::ramnet;
using memcap::ramnet::test::recall_model;

namespace {

// ---- an independent GSU on dense distributions (spec §1.6, §1.7), for small |A| ----------------
Eigen::VectorXd dense_of(const Params& p, double b, const RowMatrix& X, Eigen::Index i) {
  const Codebook C = circular_codebook(p.dp);
  std::vector<double> x(X.cols());
  for (Eigen::Index c = 0; c < X.cols(); ++c) x[c] = X(i, c);
  return dense_distribution(factor_table(C, b, x.data(), p.U));
}

// Keep the K largest entries (ties: smaller index), zero the rest, no renormalisation (§1.5).
Eigen::VectorXd truncate(const Eigen::VectorXd& w, std::int64_t K) {
  if (K <= 0) return w;
  std::vector<Eigen::Index> idx(w.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](Eigen::Index a, Eigen::Index b) { return w(a) > w(b); });
  Eigen::VectorXd t = Eigen::VectorXd::Zero(w.size());
  for (std::int64_t k = 0; k < K; ++k) t(idx[k]) = w(idx[k]);
  return t;
}

RowMatrix reference_outputs(const RecallModel& m, const RecallInputs& in) {
  const Eigen::Index N = in.keys.rows(), dv = in.values.cols();
  const std::int64_t D = address_count(m.params);
  Eigen::VectorXd mass = Eigen::VectorXd::Zero(D);
  RowMatrix s = RowMatrix::Zero(D, dv);
  for (Eigen::Index t = 0; t < N; ++t) {
    const Eigen::VectorXd w = truncate(dense_of(m.params, m.params.beta_w, in.keys, t), m.topk);
    for (std::int64_t a = 0; a < D; ++a) {
      if (w(a) == 0) continue;
      const double g = m.gamma == -INFINITY ? 1.0 : (1 - w(a)) / ((1 - w(a)) + w(a) * std::exp(m.gamma));
      mass(a) = g * mass(a) + w(a);
      const double lam = w(a) / (mass(a) + m.eps);
      s.row(a) += lam * (in.values.row(t) - s.row(a));
    }
  }
  RowMatrix O(N, dv);
  for (Eigen::Index i = 0; i < N; ++i) {
    const Eigen::VectorXd r = truncate(dense_of(m.params, m.params.beta_r, in.queries, i), m.topk);
    if (m.mass_readout) {
      const Eigen::VectorXd rm = r.cwiseProduct(mass);
      const double den = rm.sum() + m.eps;
      O.row(i) = den > 0 ? Eigen::RowVectorXd((rm.transpose() * s) / den) : Eigen::RowVectorXd::Zero(dv);
    } else {
      O.row(i) = r.transpose() * s;
    }
  }
  return O;
}

// The same memory through the memory slice's GsuMemory (gsu.hpp): factor tables, Top-K lists from its
// TopKDecoder, AddressWeights with accurate complements, one write per key, then every read.
RowMatrix gsu_memory_outputs(const RecallModel& m, const RecallInputs& in) {
  const int U = m.params.U, dp = m.params.dp, dv = static_cast<int>(in.values.cols());
  const Eigen::Index N = in.keys.rows();
  const std::int64_t D = address_count(m.params);
  const Codebook C = circular_codebook(dp);
  AddressWeightsBuilder b(dp, U);
  GsuMemory mem(D, dv, true, m.eps);
  std::vector<double> table(static_cast<std::size_t>(U * dp)), x(static_cast<std::size_t>(2 * U)), lp;
  std::vector<std::int64_t> flat;
  auto weights = [&](const RowMatrix& X, Eigen::Index i, double beta, AddressWeights& out) {
    for (int c = 0; c < 2 * U; ++c) x[c] = X(i, c);
    factor_rows(C, beta, x.data(), U, table.data());
    if (m.topk > 0) {
      flat.resize(static_cast<std::size_t>(m.topk));
      lp.resize(static_cast<std::size_t>(m.topk));
      TopKDecoder(dp, U, m.topk).decode(table.data(), flat.data(), lp.data());
      b.topk(table.data(), flat.data(), lp.data(), m.topk, out);
    } else {
      b.full(table.data(), out);
    }
  };
  AddressWeights ws;
  for (Eigen::Index t = 0; t < N; ++t) {
    weights(in.keys, t, m.params.beta_w, ws);
    const Eigen::RowVectorXd v = in.values.row(t);
    mem.write(ws, v.data(), m.gamma);
  }
  RowMatrix O(N, dv);
  Eigen::RowVectorXd o(dv);
  for (Eigen::Index i = 0; i < N; ++i) {
    weights(in.queries, i, m.params.beta_r, ws);
    mem.peek(ws, m.mass_readout ? Readout::mass : Readout::standard, o.data());
    O.row(i) = o;
  }
  return O;
}

double rel_diff(const RowMatrix& a, const RowMatrix& b) { return (a - b).norm() / b.norm(); }

RecallInputs random_inputs(const RecallModel& m, std::int64_t N, int dv, std::uint64_t seed, double sigma_q = 0.3) {
  return draw_recall_inputs(m, KeyModel::parse("gauss:sigma=0.9"), sigma_q, dv, seed, N);
}

// §6 T9: dp=4, U=2, β=1; three keys, scalar values; every query row is q.
RecallInputs t9_inputs() {
  RecallInputs in;
  in.keys.resize(3, 4);
  in.keys << 0.05, 0.75, -0.55, 0.6, -0.15, -0.15, 1.1, 0.1, 0, 0.45, 0.7, 0;
  in.queries.resize(3, 4);
  for (int i = 0; i < 3; ++i) in.queries.row(i) << 0.5, 0.2, -0.4, 0.3;
  in.values.resize(3, 1);
  in.values << 0.3, -1.2, 2.0;
  return in;
}

}  // namespace

TEST_CASE("T15: the hard-write prediction |A|(1 - (1 - 1/|A|)^N)/N and its capacities") {
  CHECK(hard_write_accuracy(1024, 64) == doctest::Approx(0.9698).epsilon(6e-5));
  CHECK(hard_write_accuracy(1024, 128) == doctest::Approx(0.9405).epsilon(6e-5));
  CHECK(hard_write_accuracy(1024, 205) == doctest::Approx(0.9067).epsilon(6e-5));
  CHECK(hard_write_accuracy(1024, 256) == doctest::Approx(0.8852).epsilon(6e-5));
  CHECK(hard_write_accuracy(1024, 1) == doctest::Approx(1.0).epsilon(1e-15));
  // Largest N with prediction >= 1 - δ (python: 220 and 1632 for |A| = 1024; 7031 and 52220 for 8^5).
  CHECK(hard_write_capacity(1024, 0.1, 1 << 20) == 220);
  CHECK(hard_write_capacity(1024, 0.5, 1 << 20) == 1632);
  CHECK(hard_write_capacity(32768, 0.1, 1 << 20) == 7031);
  CHECK(hard_write_capacity(32768, 0.5, 1 << 20) == 52220);
  CHECK(hard_write_capacity(64, 0.1, 1 << 20) == 14);
  CHECK(hard_write_capacity(1024, 0.1, 100) == 100);  // capped
}

TEST_CASE("T9: RAM-Net readouts, kappa-attention, ram-linear and softmax on the spec's 3-key example") {
  const RecallInputs in = t9_inputs();
  RecallModel m = recall_model(Mixer::ramnet, 4, 2, 1, 1);
  CHECK(recall_outputs_cpu(m, in)(0, 0) == doctest::Approx(0.425385542246).epsilon(1e-11));
  m.mass_readout = false;
  CHECK(recall_outputs_cpu(m, in)(0, 0) == doctest::Approx(0.417131160773).epsilon(1e-11));
  CHECK(recall_outputs_cpu(recall_model(Mixer::kappa, 4, 2, 1, 1), in)(0, 0) == doctest::Approx(0.425385542246).epsilon(1e-11));
  CHECK(recall_outputs_cpu(recall_model(Mixer::ram_linear, 4, 2, 1, 1), in)(0, 0) ==
        doctest::Approx(0.425385542246).epsilon(1e-11));
  RecallModel sm = recall_model(Mixer::softmax, 4, 2, 1, 1);
  CHECK(sm.tau == 2.0);
  CHECK(recall_outputs_cpu(sm, in)(0, 0) == doctest::Approx(0.428160695859).epsilon(1e-11));
}

TEST_CASE("ram-linear = mass-aware cumulative GSU (gsu.hpp GsuMemory) = kappa-attention to 1e-12 (spec 2.9)") {
  for (auto [dp, U, br, bw] : {std::tuple{3, 2, 0.7, 1.3}, {4, 3, 1.0, 1.0}, {5, 1, 2.0, 0.5}}) {
    CAPTURE(dp);
    CAPTURE(U);
    const RecallModel lin = recall_model(Mixer::ram_linear, dp, U, br, bw);
    const RecallInputs in = random_inputs(lin, 40, 5, 11);
    RecallModel gsu = recall_model(Mixer::ramnet, dp, U, br, bw);
    const RowMatrix ref = gsu_memory_outputs(gsu, in);
    CHECK(rel_diff(reference_outputs(gsu, in), ref) < 1e-12);  // the two references agree
    CHECK(rel_diff(recall_outputs_cpu(lin, in), ref) < 1e-12);
    CHECK(rel_diff(recall_outputs_cpu(gsu, in), ref) < 1e-12);
    CHECK(rel_diff(recall_outputs_cpu(recall_model(Mixer::kappa, dp, U, br, bw), in), ref) < 1e-12);
    // The general recursion with γ = −inf, ε = 0 gives the same state as the running mean.
    const GsuState a = gsu_write_cpu(gsu, in, false), b = gsu_write_cpu(gsu, in, true);
    CHECK((a.mass - b.mass).norm() <= 1e-12 * a.mass.norm());
    CHECK(rel_diff(b.state, a.state) < 1e-12);
  }
}

TEST_CASE("GSU paths (finite gamma, eps > 0, Top-K, both readouts) equal GsuMemory and the step-by-step recursion") {
  test::for_each_gsu_variant(recall_model(Mixer::ramnet, 3, 2, 1.7, 1.2), {0, 1, 5},
                             {double(-INFINITY), -1.0, 0.0, 0.8, 3.0}, [](const RecallModel& m) {
                               const RecallInputs in = random_inputs(m, 30, 4, 5);
                               const RowMatrix out = recall_outputs_cpu(m, in);
                               CHECK(rel_diff(out, reference_outputs(m, in)) < 1e-12);
                               CHECK(rel_diff(out, gsu_memory_outputs(m, in)) < 1e-12);
                             });
}

TEST_CASE("Top-K weights: exact K-best lists of the product distribution, product weights") {
  const Params p{4, 3, 1.3, 1.3};
  RecallModel m = recall_model(Mixer::ramnet, 4, 3, 1.3, 1.3);
  const RecallInputs in = random_inputs(m, 20, 2, 9);
  const FactorTables t = factor_tables(p, p.beta_w, in.keys);
  const SparseWeights s = topk_weights(t, 7);
  for (Eigen::Index i = 0; i < 20; ++i) {
    const Eigen::VectorXd d = dense_of(p, p.beta_w, in.keys, i);
    std::vector<Eigen::Index> idx(d.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](Eigen::Index a, Eigen::Index b) { return d(a) > d(b); });
    for (int k = 0; k < 7; ++k) {
      CHECK(s.flat[i * 7 + k] == idx[k]);
      CHECK(s.weight[i * 7 + k] == doctest::Approx(d(idx[k])).epsilon(1e-14));
    }
  }
}

TEST_CASE("decode: argmax cosine over the stored values, dead outputs, scale-invariant NMSE") {
  RowMatrix V(3, 2), O(3, 2);
  V << 1, 0, 0, 2, 1, 1;
  O << 5, 0.1, 0, 0, -1, -1;  // row 0: nearest v_0; row 1: dead; row 2: anti-aligned with v_2 -> cos max at v_0/v_1
  const Decoded d = decode_cpu(O, V);
  CHECK(d.argmax[0] == 0);
  CHECK(d.argmax[1] == -1);
  CHECK(d.argmax[2] == 0);  // cos(-(1,1), (1,0)) = cos(-(1,1), (0,2)) = -0.707: tie -> smaller index
  CHECK(d.nmse[0] == doctest::Approx(1 - 25.0 / 25.01).epsilon(1e-12));
  CHECK(d.nmse[1] == 1.0);
  CHECK(d.nmse[2] == doctest::Approx(0.0).epsilon(1e-12));  // scale-invariant: c = -1 fits exactly
  const TrialOutcome o = score(d);
  CHECK(o.correct == 1);
  CHECK(o.dead == 1);
  CHECK(o.hit == std::vector<std::uint8_t>{1, 0, 0});
}

TEST_CASE("elu+1 linear attention and FAVOR+ projections") {
  RecallModel m = recall_model(Mixer::elu, 2, 1, 1, 1);
  RecallInputs in;
  in.keys.resize(2, 2);
  in.keys << 1, -1, 0.5, 2;
  in.queries.resize(2, 2);
  in.queries << 1, 0, -2, 0.5;
  in.values.resize(2, 1);
  in.values << 1, -3;
  // phi(k1) = (2, e^-1), phi(k2) = (1.5, 3); phi(q1) = (2, 1): a1 = 4 + e^-1, a2 = 6.
  const double a1 = 4 + std::exp(-1.0), a2 = 6;
  CHECK(recall_outputs_cpu(m, in)(0, 0) == doctest::Approx((a1 - 3 * a2) / (a1 + a2)).epsilon(1e-14));
  // FAVOR+: rows orthogonal within each block of d = 2U, marginally Gaussian norms (mean |w|^2 = d).
  const RowMatrix W = favor_projection(4000, 6, 77);
  double sq = 0;
  for (int b = 0; b < 4000 / 6; ++b)
    for (int r = 0; r < 6; ++r) {
      sq += W.row(b * 6 + r).squaredNorm();
      for (int s = 0; s < r; ++s)
        CHECK(std::abs(W.row(b * 6 + r).dot(W.row(b * 6 + s))) < 1e-12 * W.row(b * 6 + r).norm() * W.row(b * 6 + s).norm());
    }
  CHECK(sq / (4000 / 6 * 6) == doctest::Approx(6.0).epsilon(0.05));  // chi^2_6 mean 6, sd of the mean ~0.07
  // With many features FAVOR+ approaches softmax attention at the same tau (U = 1, small logits).
  RecallModel f = recall_model(Mixer::favor, 64, 2, 1, 1);  // D = 4096 features
  f.tau = 4.0;
  RecallModel s = f;
  s.mixer = Mixer::softmax;
  const RecallInputs fin = draw_recall_inputs(f, KeyModel::parse("torus"), 0.0, 3, 5, 8);
  CHECK(rel_diff(recall_outputs_cpu(f, fin), recall_outputs_cpu(s, fin)) < 0.05);
}

TEST_CASE("capacity search: doubling + bisection on a step function") {
  auto acc = [](std::int64_t N) { return N <= 37 ? 1.0 : N <= 90 ? 0.7 : 0.3; };
  std::vector<std::int64_t> seen;
  const SearchOutcome s = capacity_search(1, 1000, {0.9, 0.5}, [&](std::int64_t N, const char*) {
    seen.push_back(N);
    return acc(N);
  });
  CHECK(s.n_star == std::vector<std::int64_t>{37, 90});
  CHECK(s.censored == std::vector<bool>{false, false});
  // Grid 1..128 (128 fails both), then bisections in (32, 64) and (64, 128).
  CHECK(std::vector<std::int64_t>(seen.begin(), seen.begin() + 8) == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128});
  const SearchOutcome c = capacity_search(4, 50, {0.9, 0.5}, [&](std::int64_t N, const char*) { return acc(N); });
  CHECK(c.n_star == std::vector<std::int64_t>{37, 50});
  CHECK(c.censored == std::vector<bool>{false, true});
  const SearchOutcome z = capacity_search(40, 50, {0.9}, [&](std::int64_t N, const char*) { return acc(N); });
  CHECK(z.n_star[0] == 39);  // fails at n_min: n_min - 1
}

TEST_CASE("capacity search on a tiny real case agrees with a scan over every N") {
  RecallConfig c;
  c.model = recall_model(Mixer::ramnet, 2, 2, 30, 30);  // |A| = 4, near-hard writes
  c.keys = KeyModel::parse("torus");
  c.dv = 8;
  c.seeds = 3;
  c.seed = 4;
  c.n_max = 24;
  const RecallResult r = run_recall(c, evaluate_trial_cpu, "cpu");
  RecallConfig scan = c;
  scan.search = false;
  for (std::int64_t N = 1; N <= 24; ++N) scan.n_list.push_back(N);
  const RecallResult all = run_recall(scan, evaluate_trial_cpu, "cpu");
  REQUIRE(all.points.size() == 24);
  for (int t = 0; t < 2; ++t) {
    const double thr = 1 - kDeltas[t];
    const std::int64_t n = r.n_star[t];
    CAPTURE(t);
    CAPTURE(n);
    REQUIRE(n >= 1);
    CHECK(all.points[n - 1].acc >= thr);
    if (!r.censored[t]) CHECK(all.points[n].acc < thr);
  }
  for (const auto& p : r.points) CHECK(p.acc == all.points[p.N - 1].acc);  // same draws at the same N
  CHECK(r.n_star[0] <= r.n_star[1]);
}

TEST_CASE("hard-write limit: RAM-Net recall matches |A|(1 - (1 - 1/|A|)^N)/N (statistical)") {
  // dp = 4, U = 3 (|A| = 64), beta = 200 (hard reads and writes), N = 32: prediction 0.7917.
  // 120 seeds: the per-seed accuracy has sd ~0.07, so the mean has sd ~0.0065; tolerance 0.03 (4.6 sd).
  for (std::int64_t K : {0, 1}) {
    RecallConfig c;
    c.model = recall_model(Mixer::ramnet, 4, 3, 200, 200);
    c.model.topk = K;
    c.dv = 64;
    c.seeds = 120;
    c.search = false;
    c.n_list = {32};
    const RecallResult r = run_recall(c, evaluate_trial_cpu, "cpu");
    CHECK(r.points[0].acc == doctest::Approx(hard_write_accuracy(64, 32)).epsilon(0.03 / 0.79));
  }
}

TEST_CASE("draws: nested in N, shared by mixers, thread-count invariant results") {
  RecallModel m = recall_model(Mixer::ramnet, 4, 2, 2, 2);
  const KeyModel k = KeyModel::parse("torus:rho=1.5");
  const RecallInputs a = draw_recall_inputs(m, k, 0.1, 16, 99, 50), b = draw_recall_inputs(m, k, 0.1, 16, 99, 20);
  CHECK(a.keys.topRows(20) == b.keys);
  CHECK(a.queries.topRows(20) == b.queries);
  CHECK(a.values.topRows(20) == b.values);
  CHECK(std::abs(a.keys.row(7).segment(2, 2).norm() - 1.5) < 1e-14);  // torus blocks have norm rho
  RecallModel s = m;
  s.mixer = Mixer::softmax;
  CHECK(draw_recall_inputs(s, k, 0.1, 16, 99, 20).keys == b.keys);
  CHECK(trial_seed(0, 1) != trial_seed(0, 2));
  // Every mixer: identical outcomes with 1 and 2 OpenMP threads (N large enough to go parallel).
  for (Mixer mx : all_mixers()) {
    CAPTURE(to_string(mx));
    RecallModel mm = recall_model(mx, 4, 3, 1.5, 1.5);
    mm.topk = mx == Mixer::ramnet ? 8 : 0;
    const RecallInputs in = draw_recall_inputs(mm, k, 0.05, 64, 3, 700);
    omp_set_num_threads(1);
    const TrialOutcome one = evaluate_trial_cpu(mm, in);
    omp_set_num_threads(2);
    const TrialOutcome two = evaluate_trial_cpu(mm, in);
    CHECK(one.hit == two.hit);
    CHECK(one.nmse_sum == two.nmse_sum);
    CHECK(one.correct > 0);
  }
}
