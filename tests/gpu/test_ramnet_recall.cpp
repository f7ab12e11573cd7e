// GPU vs CPU for the E7 recall path (src/ramnet/recall_cuda.cpp + kernels/ramnet_recall.cu against
// src/ramnet/recall_cpu.cpp) and for log_kappa_matrix_cuda (kernels/ramnet_kappa.cu against
// log_kappa_matrix). Float64 on both sides; device outputs are poisoned with NaN before every call.
// Tolerances: log κ matrix 1e-12 relative (Frobenius; only the dp-term GEMM sums and the device log
// differ, ~1e-16 each); mixer outputs kOutputTol = 1e-11 relative (GEMM sums over up to 9000 terms
// reassociated: ~N·2^-53 ≈ 1e-12, with margin); recall accuracy per (N, seed) identical.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "core/gpu.hpp"
#include "core/random_fill.hpp"
#include "ramnet/kappa_cuda.hpp"
#include "ramnet/recall.hpp"
#include "../ramnet_test_util.hpp"
#include "ramnet/recall_cuda.hpp"

using namespace memcap;
using namespace memcap::ramnet;
using memcap::ramnet::test::recall_model;

namespace {

constexpr double kLogKappaTol = 1e-12;
constexpr double kOutputTol = 1e-11;

struct Gpu {
  gpu::Stream stream;
  gpu::Handles handles{stream};
};
Gpu& device() {
  static Gpu* g = new Gpu;
  return *g;
}

bool all_finite(const RowMatrix& M) { return M.allFinite(); }

double g_max_err = 0;  // largest output error seen (printed for docs/perf.md)
int g_compared = 0;

RowMatrix download(const gpu::Tensor& t) {
  RowMatrix M(t.dim(0), t.dim(1));
  t.download(M.data());
  return M;
}

void compare_outputs(const RecallModel& m, const RecallInputs& in) {
  Gpu& g = device();
  gpu::Tensor O({in.keys.rows(), in.values.cols()}, gpu::DType::f64);
  O.fill_nan(g.stream);
  recall_outputs_cuda(m, in, g.handles, O);
  const RowMatrix og = download(O), oc = recall_outputs_cpu(m, in);
  REQUIRE(all_finite(og));
  const double scale = std::max(oc.norm(), 1e-300);
  const double err = (og - oc).norm() / scale;
  CHECK(err < kOutputTol);
  if (!(err < kOutputTol)) std::printf("  rel error %.3e\n", err);
  g_max_err = std::max(g_max_err, err);
  ++g_compared;
  const Decoded dg = decode_cuda(O, in.values, g.handles), dc = decode_cpu(oc, in.values);
  CHECK(dg.argmax == dc.argmax);
  for (std::size_t i = 0; i < dc.nmse.size(); ++i) CHECK(std::abs(dg.nmse[i] - dc.nmse[i]) < 1e-10);
}

}  // namespace

TEST_CASE("log_kappa_matrix_cuda equals log_kappa_matrix (float64, 1e-12 relative)") {
  Gpu& g = device();
  struct Case {
    int dp, U;
    double br, bw;
    std::int64_t n, N;
  };
  for (const Case c : {Case{4, 1, 1.0, 1.0, 300, 517}, Case{3, 3, 0.7, 1.3, 257, 129}, Case{8, 5, 2.0, 2.0, 64, 1000},
                       Case{4, 2, 0.795, 0.795, 5000, 8192}}) {
    CAPTURE(c.dp);
    CAPTURE(c.U);
    CAPTURE(c.N);
    const Params p{c.dp, c.U, c.br, c.bw};
    const Codebook C = circular_codebook(c.dp);
    const Eigen::MatrixXd Q = rng::normal_matrix(c.n, 2 * c.U, 5, 1) * 0.8, K = rng::normal_matrix(c.N, 2 * c.U, 6, 1) * 0.8;
    const Eigen::MatrixXd ref = log_kappa_matrix(p, C, Q, K), got = log_kappa_matrix_cuda(p, C, Q, K, g.handles);
    REQUIRE(got.allFinite());
    const double err = (got - ref).norm() / ref.norm();
    std::printf("log_kappa_matrix_cuda dp=%d U=%d n=%lld N=%lld: rel error %.3e\n", c.dp, c.U,
                static_cast<long long>(c.n), static_cast<long long>(c.N), err);
    CHECK(err < kLogKappaTol);
  }
  // Device form into a poisoned buffer: rows [40, 90) of a 3 x 2 case.
  const Params p{5, 2, 1.1, 0.9};
  const Codebook C = circular_codebook(5);
  const Eigen::MatrixXd Q = rng::normal_matrix(100, 4, 7, 1), K = rng::normal_matrix(70, 4, 8, 1);
  const Eigen::MatrixXd ref = log_kappa_matrix(p, C, Q, K);
  RowMatrix Qr = Q, Kr = K;
  const FactorTables tq = factor_tables(p, p.beta_r, Qr), tk = factor_tables(p, p.beta_w, Kr);
  gpu::Tensor dq({100, 10}, gpu::DType::f64), dk({70, 10}, gpu::DType::f64), G({50, 70}, gpu::DType::f64),
      L({50, 70}, gpu::DType::f64);
  dq.upload(tq.prob.data());
  dk.upload(tk.prob.data());
  L.fill_nan(g.stream);
  G.fill_nan(g.stream);
  log_kappa_rows_device(2, 5, 40, 50, 70, dq.data<double>(), dk.data<double>(), G.data<double>(), L.data<double>(),
                        g.handles);
  g.stream.synchronize();
  const RowMatrix l = download(L);
  REQUIRE(l.allFinite());
  CHECK((l - ref.middleRows(40, 50)).norm() / ref.middleRows(40, 50).norm() < kLogKappaTol);
}

TEST_CASE("recall outputs and decoding: CUDA equals the CPU reference for every mixer and GSU path") {
  const KeyModel torus = KeyModel::parse("torus:rho=1.2"), gauss = KeyModel::parse("gauss:sigma=0.8");
  for (std::int64_t N : {1, 37, 300}) {
    for (Mixer mx : all_mixers()) {
      CAPTURE(N);
      CAPTURE(to_string(mx));
      const RecallModel m = recall_model(mx, 4, 3, 1.7);
      compare_outputs(m, draw_recall_inputs(m, torus, 0.1, 16, 21, N));
      const RecallModel m8 = recall_model(mx, 8, 2, 3.0);
      compare_outputs(m8, draw_recall_inputs(m8, gauss, 0.05, 24, 22, N));
    }
    // RAM-Net paths: Top-K, finite gamma, eps, both readouts.
    test::for_each_gsu_variant(recall_model(Mixer::ramnet, 3, 3, 2.2), {0, 1, 7}, {double(-INFINITY), -1.5, 0.0, 2.5},
                               [&](const RecallModel& m) { compare_outputs(m, draw_recall_inputs(m, gauss, 0.2, 8, 23, N)); });
  }
  // Near-hard writes (w close to 1: the accurate 1 − w branch) and tiles (N·D and N² above 2^25).
  RecallModel hard = recall_model(Mixer::ramnet, 4, 2, 40.0);
  hard.gamma = 0.5;
  compare_outputs(hard, draw_recall_inputs(hard, torus, 0.0, 8, 24, 200));
  hard.topk = 3;
  compare_outputs(hard, draw_recall_inputs(hard, torus, 0.0, 8, 24, 200));
  const RecallModel big = recall_model(Mixer::ram_linear, 8, 4, 1.5);
  compare_outputs(big, draw_recall_inputs(big, torus, 0.05, 16, 25, 9000));
  const RecallModel sm = recall_model(Mixer::softmax, 4, 3, 2.0);
  compare_outputs(sm, draw_recall_inputs(sm, torus, 0.05, 16, 26, 6000));
  const RecallModel kp = recall_model(Mixer::kappa, 4, 3, 2.0);
  compare_outputs(kp, draw_recall_inputs(kp, torus, 0.05, 16, 27, 6000));
  RecallModel dense = recall_model(Mixer::ramnet, 8, 4, 2.0);  // D = 4096: two slot tiles of the recursion at N = 9000
  dense.gamma = 1.0;
  compare_outputs(dense, draw_recall_inputs(dense, torus, 0.05, 8, 28, 9000));
  std::printf("recall outputs: largest relative error GPU vs CPU %.3e over %d comparisons (argmax identical)\n",
              g_max_err, g_compared);
}

TEST_CASE("recall accuracy per (N, seed) and the capacities are the CPU's (small grids, every mixer)") {
  for (Mixer mx : all_mixers()) {
    for (std::int64_t K : {0, 4}) {
      if (K > 0 && mx != Mixer::ramnet) continue;
      CAPTURE(to_string(mx));
      CAPTURE(K);
      RecallConfig c;
      c.model = recall_model(mx, 4, 3, 4.0);
      c.model.topk = K;
      c.keys = KeyModel::parse("torus");
      c.sigma_q = 0.05;
      c.dv = 32;
      c.seeds = 4;
      c.seed = 9;
      c.n_max = 256;
      gpu::Handles& h = device().handles;
      const RecallResult rg = run_recall(c, [&h](const RecallModel& m, const RecallInputs& in) {
        return evaluate_trial_cuda(m, in, h);
      }, "cuda");
      const RecallResult rc = run_recall(c, evaluate_trial_cpu, "cpu");
      REQUIRE(rg.points.size() == rc.points.size());
      for (std::size_t i = 0; i < rc.points.size(); ++i) {
        CHECK(rg.points[i].N == rc.points[i].N);
        CHECK(rg.points[i].acc_seeds == rc.points[i].acc_seeds);
        CHECK(rg.points[i].recency_hits == rc.points[i].recency_hits);
        CHECK(std::abs(rg.points[i].nmse - rc.points[i].nmse) < 1e-10);
      }
      CHECK(rg.n_star[0] == rc.n_star[0]);
      CHECK(rg.n_star[1] == rc.n_star[1]);
      std::printf("recall %-10s K=%lld: N*_0.1 = %lld, N*_0.5 = %lld on both (%zu points)\n", to_string(mx),
                  static_cast<long long>(K), static_cast<long long>(rc.n_star[0]), static_cast<long long>(rc.n_star[1]),
                  rc.points.size());
    }
  }
}
