// GPU layers of the fact-editing block (kernels/nn_edit_layers.cuh) vs the CPU float64 reference
// (src/nn/edit_layers.cpp, src/nn/tied_ce.cpp), float and double, outputs NaN-poisoned before each
// call, inputs rounded to the storage type on the host first. Tolerances on ||gpu − cpu|| / ||cpu||
// (a NaN or Inf never passes):
//   kTolF64 = 1e-12        float64: summation order only
//   kTolF32 = 1e-5         float32 element-wise layers (erf/exp/sincos in float, ≤ a few ulps) and GEMMs with K ≤ 256
//   kTolF32Reduce = 1e-4   float32 CE: losses lse − z_t (a difference of O(10) numbers, lse over 32,815 exps),
//                          dX (a sum over V = 32,815 columns) and dE (a sum over the rows)
//   kTolTf32 = 1e-2        TF32 tensor-core logits (10-bit mantissa, unit roundoff 4.9e-4, K = 256)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "gpu_test_util.hpp"
#include "core/rng.hpp"
#include "nn/edit_layers.hpp"
#include "nn/tied_ce.hpp"
#include "nn_edit_layers.cuh"

using namespace memcap;
namespace cu = memcap::nn::cuda;
using namespace memcap::gputest;

namespace {

gpu::Tensor to_dev_i32(const std::vector<std::int32_t>& h, const gpu::Stream& s) {
  gpu::Tensor t({static_cast<std::int64_t>(h.size())}, gpu::DType::i32);
  t.upload(h.data(), s);
  s.synchronize();
  return t;
}

template <class T>
std::vector<T> raw_host(const gpu::Tensor& t, const gpu::Stream& s) {
  std::vector<T> c(static_cast<std::size_t>(t.numel()));
  t.download(c.data(), s);
  s.synchronize();
  return c;
}

struct Env {
  gpu::Stream s;
  gpu::Handles h{s};
};

}  // namespace

TEST_CASE_TEMPLATE("gelu forward / backward match the CPU reference", T, float, double) {
  Env e;
  for (const std::int64_t n : {1, 33, 4099, 300000}) {
    CAPTURE(n);
    const auto x = rounded<T>(randn(n, 1, 3.0)), dy = rounded<T>(randn(n, 2));
    std::vector<double> y_c(static_cast<std::size_t>(n)), dx_c(y_c.size());
    nn::cpu::gelu_forward(y_c.data(), x.data(), n);
    nn::cpu::gelu_backward(dx_c.data(), dy.data(), x.data(), n);
    gpu::Tensor dx_ = to_dev<T>(x, e.s), ddy = to_dev<T>(dy, e.s), y = nan_dev<T>(n, e.s), dx = nan_dev<T>(n, e.s);
    cu::gelu_forward<T>(y.data<T>(), dx_.data<T>(), n, e.s.get());
    cu::gelu_backward<T>(dx.data<T>(), ddy.data<T>(), dx_.data<T>(), n, e.s.get());
    CHECK(rel_err(to_host<T>(y, e.s), y_c) <= tol<T>(kTolF32));
    CHECK(rel_err(to_host<T>(dx, e.s), dx_c) <= tol<T>(kTolF32));
    // in place
    cu::gelu_forward<T>(dx_.data<T>(), dx_.data<T>(), n, e.s.get());
    CHECK(rel_err(to_host<T>(dx_, e.s), y_c) <= tol<T>(kTolF32));
  }
}

TEST_CASE_TEMPLATE("rope forward / backward match the CPU reference", T, float, double) {
  Env e;
  struct Shape {
    std::int64_t B, Tn, H, dh;
  };
  for (const Shape sh : {Shape{1, 1, 1, 2}, Shape{3, 11, 1, 256}, Shape{2, 37, 3, 6}, Shape{32, 11, 1, 256}}) {
    CAPTURE(sh.B);
    CAPTURE(sh.Tn);
    CAPTURE(sh.H);
    CAPTURE(sh.dh);
    const double base = nn::rope_base_for(sh.dh);
    const std::int64_t n = sh.B * sh.Tn * sh.H * sh.dh;
    const auto x = rounded<T>(randn(n, 3)), dy = rounded<T>(randn(n, 4));
    std::vector<double> y_c(static_cast<std::size_t>(n)), dx_c(y_c.size());
    nn::cpu::rope_forward(y_c.data(), x.data(), sh.B, sh.Tn, sh.H, sh.dh, base);
    nn::cpu::rope_backward(dx_c.data(), dy.data(), sh.B, sh.Tn, sh.H, sh.dh, base);
    gpu::Tensor dx_ = to_dev<T>(x, e.s), ddy = to_dev<T>(dy, e.s), y = nan_dev<T>(n, e.s), dx = nan_dev<T>(n, e.s);
    cu::rope_forward<T>(y.data<T>(), dx_.data<T>(), sh.B, sh.Tn, sh.H, sh.dh, base, e.s.get());
    cu::rope_backward<T>(dx.data<T>(), ddy.data<T>(), sh.B, sh.Tn, sh.H, sh.dh, base, e.s.get());
    CHECK(rel_err(to_host<T>(y, e.s), y_c) <= tol<T>(kTolF32));
    CHECK(rel_err(to_host<T>(dx, e.s), dx_c) <= tol<T>(kTolF32));
    cu::rope_forward<T>(ddy.data<T>(), ddy.data<T>(), sh.B, sh.Tn, sh.H, sh.dh, base, e.s.get());  // in place
    cu::rope_backward<T>(ddy.data<T>(), ddy.data<T>(), sh.B, sh.Tn, sh.H, sh.dh, base, e.s.get());
    CHECK(rel_err(to_host<T>(ddy, e.s), dy) <= tol<T>(kTolF32));
  }
}

TEST_CASE_TEMPLATE("lowrank path matches the CPU reference", T, float, double) {
  Env e;
  for (const std::int64_t N : {1, 37, 352}) {
    const std::int64_t C = 256, R = 8;
    CAPTURE(N);
    const auto inp = rounded<T>(randn(N * C, 5)), U = rounded<T>(randn(C * R, 6)), V = rounded<T>(randn(R * C, 7));
    const auto dout = rounded<T>(randn(N * C, 8)), dU0 = rounded<T>(randn(C * R, 9)), dV0 = rounded<T>(randn(R * C, 10));
    std::vector<double> out_c(static_cast<std::size_t>(N * C)), mid_c(static_cast<std::size_t>(N * R)), dinp_c(out_c.size()),
        dmid_c(mid_c.size()), dU_c = dU0, dV_c = dV0;
    nn::cpu::lowrank_forward(out_c.data(), mid_c.data(), inp.data(), U.data(), V.data(), N, C, R);
    nn::cpu::lowrank_backward(dinp_c.data(), dU_c.data(), dV_c.data(), dmid_c.data(), dout.data(), inp.data(),
                              mid_c.data(), U.data(), V.data(), N, C, R);
    gpu::Tensor d_inp = to_dev<T>(inp, e.s), d_U = to_dev<T>(U, e.s), d_V = to_dev<T>(V, e.s),
                d_dout = to_dev<T>(dout, e.s), d_dU = to_dev<T>(dU0, e.s), d_dV = to_dev<T>(dV0, e.s);
    gpu::Tensor out = nan_dev<T>(N * C, e.s), mid = nan_dev<T>(N * R, e.s), dinp = nan_dev<T>(N * C, e.s),
                dmid = nan_dev<T>(N * R, e.s);
    cu::lowrank_forward<T>(out.data<T>(), mid.data<T>(), d_inp.data<T>(), d_U.data<T>(), d_V.data<T>(), N, C, R,
                           e.h.blas(), e.s.get());
    cu::lowrank_backward<T>(dinp.data<T>(), d_dU.data<T>(), d_dV.data<T>(), dmid.data<T>(), d_dout.data<T>(),
                            d_inp.data<T>(), mid.data<T>(), d_U.data<T>(), d_V.data<T>(), N, C, R, e.h.blas(),
                            e.s.get());
    CHECK(rel_err(to_host<T>(out, e.s), out_c) <= tol<T>(kTolF32));
    CHECK(rel_err(to_host<T>(mid, e.s), mid_c) <= tol<T>(kTolF32));
    CHECK(rel_err(to_host<T>(dinp, e.s), dinp_c) <= tol<T>(kTolF32));
    CHECK(rel_err(to_host<T>(d_dU, e.s), dU_c) <= tol<T>(kTolF32Reduce));
    CHECK(rel_err(to_host<T>(d_dV, e.s), dV_c) <= tol<T>(kTolF32Reduce));
  }
}

TEST_CASE_TEMPLATE("router mix matches the CPU reference", T, float, double) {
  Env e;
  for (const std::int64_t N : {1, 45, 352}) {
    for (const std::int64_t C : {1, 31, 256}) {
      CAPTURE(N);
      CAPTURE(C);
      const auto z = rounded<T>(randn(N, 11, 3.0)), f = rounded<T>(randn(N * C, 12)), l = rounded<T>(randn(N * C, 13));
      const auto dout = rounded<T>(randn(N * C, 14));
      std::vector<double> out_c(static_cast<std::size_t>(N * C)), a_c(static_cast<std::size_t>(N)), dz_c(a_c.size()),
          df_c(out_c.size()), dl_c(out_c.size());
      nn::cpu::router_mix_forward(out_c.data(), a_c.data(), z.data(), f.data(), l.data(), N, C);
      // the backward reads alpha as stored in T (as the GPU does)
      const auto a_t = rounded<T>(a_c);
      nn::cpu::router_mix_backward(dz_c.data(), df_c.data(), dl_c.data(), dout.data(), a_t.data(), f.data(), l.data(), N,
                                   C);
      gpu::Tensor d_z = to_dev<T>(z, e.s), d_f = to_dev<T>(f, e.s), d_l = to_dev<T>(l, e.s), d_dout = to_dev<T>(dout, e.s);
      gpu::Tensor out = nan_dev<T>(N * C, e.s), alpha = nan_dev<T>(N, e.s), dz = nan_dev<T>(N, e.s),
                  df = nan_dev<T>(N * C, e.s), dl = nan_dev<T>(N * C, e.s);
      cu::router_mix_forward<T>(out.data<T>(), alpha.data<T>(), d_z.data<T>(), d_f.data<T>(), d_l.data<T>(), N, C,
                                e.s.get());
      cu::router_mix_backward<T>(dz.data<T>(), df.data<T>(), dl.data<T>(), d_dout.data<T>(), alpha.data<T>(),
                                 d_f.data<T>(), d_l.data<T>(), N, C, e.s.get());
      CHECK(rel_err(to_host<T>(out, e.s), out_c) <= tol<T>(kTolF32));
      CHECK(rel_err(to_host<T>(alpha, e.s), a_c) <= tol<T>(kTolF32));
      CHECK(rel_err(to_host<T>(df, e.s), df_c) <= tol<T>(kTolF32));
      CHECK(rel_err(to_host<T>(dl, e.s), dl_c) <= tol<T>(kTolF32));
      CHECK(rel_err(to_host<T>(dz, e.s), dz_c) <= tol<T>(kTolF32Reduce));
    }
  }
}

namespace {

// One GPU-vs-CPU comparison of the tied CE at (N, V, C) with the given tile; tf32 turns the handle's
// TF32 mode on (float only).
template <class T>
void check_tied_ce(Env& e, std::int64_t N, std::int64_t V, std::int64_t C, std::int64_t tile_rows, std::int64_t tile_cols,
                   bool tf32) {
  CAPTURE(N);
  CAPTURE(V);
  CAPTURE(tile_rows);
  CAPTURE(tile_cols);
  CAPTURE(tf32);
  // §6.4 scales: rows of E ~ U(−1/16, 1/16)-like (here N(0, 1/16²·(1/3))), X = RMSNorm output with gain ≈ 1.
  const auto X = rounded<T>(randn(N * C, 21, 1.0)), E = rounded<T>(randn(V * C, 22, 0.036));
  const auto dE0 = rounded<T>(randn(V * C, 23, 1e-6));  // the size of the contributions (≈ 1e-6 .. 1e-2)
  std::vector<std::int32_t> t(static_cast<std::size_t>(N));
  std::int64_t valid = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const bool ignore = n % 5 == 2;
    t[static_cast<std::size_t>(n)] = ignore ? nn::kIgnoreLabel
                                            : static_cast<std::int32_t>(rng::below(24, rng::kUser, static_cast<std::uint64_t>(n),
                                                                                   static_cast<std::uint64_t>(V)));
    valid += ignore ? 0 : 1;
  }
  std::vector<double> loss_c(static_cast<std::size_t>(N)), lse_c(loss_c.size()), dX_c(static_cast<std::size_t>(N * C)),
      dE_c = dE0;
  std::vector<std::int32_t> arg_c(static_cast<std::size_t>(N));
  std::int64_t valid_c = 0;
  const double mean_c = nn::cpu::tied_logits_ce_forward(loss_c.data(), lse_c.data(), arg_c.data(), X.data(), E.data(),
                                                        t.data(), N, V, C, &valid_c);
  REQUIRE(valid_c == valid);
  const double scale = valid > 0 ? 1.0 / static_cast<double>(valid) : 0.0;
  nn::cpu::tied_logits_ce_backward(dX_c.data(), dE_c.data(), X.data(), E.data(), t.data(), lse_c.data(), N, V, C, scale);

  if (tf32) MEMCAP_CUBLAS_CHECK(cublasSetMathMode(e.h.blas(), CUBLAS_TF32_TENSOR_OP_MATH));
  gpu::Tensor d_X = to_dev<T>(X, e.s), d_E = to_dev<T>(E, e.s), d_dE = to_dev<T>(dE0, e.s), d_t = to_dev_i32(t, e.s);
  gpu::Tensor loss = nan_dev<T>(N, e.s), lse = nan_dev<T>(N, e.s), dX = nan_dev<T>(N * C, e.s);
  gpu::Tensor arg({N}, gpu::DType::i32), mean({1}, gpu::DType::f64), nvalid({1}, gpu::DType::i64);
  gpu::Tensor tile = nan_dev<T>(tile_rows * tile_cols, e.s), row_sum({N}, gpu::DType::f64);
  arg.fill_zero(e.s);
  mean.fill_nan(e.s);
  row_sum.fill_nan(e.s);
  const cu::TiedCeWorkspace<T> ws{tile.data<T>(), tile_rows, tile_cols, row_sum.data<double>()};
  cu::tied_logits_ce_forward<T>(loss.data<T>(), lse.data<T>(), arg.data<std::int32_t>(), d_X.data<T>(), d_E.data<T>(),
                                d_t.data<std::int32_t>(), N, V, C, mean.data<double>(), nvalid.data<std::int64_t>(), ws,
                                e.h.blas(), e.s.get());
  cu::tied_logits_ce_backward<T>(dX.data<T>(), d_dE.data<T>(), d_X.data<T>(), d_E.data<T>(), d_t.data<std::int32_t>(),
                                 lse.data<T>(), N, V, C, scale, ws, e.h.blas(), e.s.get());
  const double tol_main = tf32 ? kTolTf32 : tol<T>(kTolF32Reduce);
  CHECK(rel_err(to_host<T>(loss, e.s), loss_c) <= tol_main);
  CHECK(rel_err(to_host<T>(lse, e.s), lse_c) <= tol_main);
  CHECK(rel_err(to_host<T>(dX, e.s), dX_c) <= tol_main);
  // dE: compare the contributions (dE − dE0), so the accumulated start value cannot hide them
  auto dE_g = to_host<T>(d_dE, e.s);
  for (std::size_t i = 0; i < dE_g.size(); ++i) {
    dE_g[i] -= dE0[i];
    dE_c[i] -= dE0[i];
  }
  CHECK(rel_err(dE_g, dE_c) <= tol_main);
  const auto mean_g = raw_host<double>(mean, e.s);
  const auto nvalid_g = raw_host<std::int64_t>(nvalid, e.s);
  CHECK(nvalid_g[0] == valid);
  CHECK(std::abs(mean_g[0] - mean_c) <= tol_main * std::abs(mean_c));
  // the mean-loss form reads n_valid from the device (as written by the forward)
  gpu::Tensor dX2 = nan_dev<T>(N * C, e.s);
  cu::tied_logits_ce_backward_mean<T>(dX2.data<T>(), nullptr, d_X.data<T>(), d_E.data<T>(), d_t.data<std::int32_t>(),
                                      lse.data<T>(), N, V, C, 1.0, nvalid.data<std::int64_t>(), ws, e.h.blas(), e.s.get());
  CHECK(rel_err(to_host<T>(dX2, e.s), dX_c) <= tol_main);
  // argmax: exact in float64; in float the GPU's pick must be a maximum up to the logit round-off
  const auto arg_g = raw_host<std::int32_t>(arg, e.s);
  for (std::int64_t n = 0; n < N; ++n) {
    const auto i = static_cast<std::size_t>(n);
    if (std::is_same_v<T, double>) {
      CHECK(arg_g[i] == arg_c[i]);
    } else {
      REQUIRE(arg_g[i] >= 0);
      REQUIRE(arg_g[i] < V);
      double zg = 0, zc = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        zg += X[static_cast<std::size_t>(n * C + c)] * E[static_cast<std::size_t>(arg_g[i] * C + c)];
        zc += X[static_cast<std::size_t>(n * C + c)] * E[static_cast<std::size_t>(arg_c[i] * C + c)];
      }
      CHECK(zc - zg <= (tf32 ? 1e-2 : 1e-5));
    }
  }
  // bit-identical on a second run
  if (!tf32) {
    const auto loss1 = raw_host<T>(loss, e.s), dX1 = raw_host<T>(dX, e.s);
    cu::tied_logits_ce_forward<T>(loss.data<T>(), lse.data<T>(), arg.data<std::int32_t>(), d_X.data<T>(), d_E.data<T>(),
                                  d_t.data<std::int32_t>(), N, V, C, mean.data<double>(), nvalid.data<std::int64_t>(), ws,
                                  e.h.blas(), e.s.get());
    cu::tied_logits_ce_backward<T>(dX.data<T>(), nullptr, d_X.data<T>(), d_E.data<T>(), d_t.data<std::int32_t>(),
                                   lse.data<T>(), N, V, C, scale, ws, e.h.blas(), e.s.get());
    CHECK(raw_host<T>(loss, e.s) == loss1);
    CHECK(raw_host<T>(dX, e.s) == dX1);
  }
  if (tf32) MEMCAP_CUBLAS_CHECK(cublasSetMathMode(e.h.blas(), CUBLAS_DEFAULT_MATH));
}

}  // namespace

TEST_CASE_TEMPLATE("tied logits CE matches the CPU reference (V = 32,815, d = 256)", T, float, double) {
  Env e;
  const std::int64_t V = 32815, C = 256;
  std::int64_t tr = 0, tc = 0;
  cu::tied_ce_tile_shape(67, V, &tr, &tc);
  check_tied_ce<T>(e, 67, V, C, tr, tc, false);   // default tiles: 5 vocabulary tiles, the last partial
  check_tied_ce<T>(e, 67, V, C, 16, 5000, false);  // 5 row blocks (last partial) x 7 vocabulary tiles
  check_tied_ce<T>(e, 1, 37, 5, 1, 1, false);      // one column per tile
  check_tied_ce<T>(e, 3, 1, 8, 2, 4, false);       // V = 1: loss 0
  if (std::is_same_v<T, float>) check_tied_ce<T>(e, 67, V, C, tr, tc, true);
}

TEST_CASE("tied logits CE refuses a missing workspace and bad shapes") {
  Env e;
  gpu::Tensor X = nan_dev<float>(8, e.s), E = nan_dev<float>(8, e.s), loss = nan_dev<float>(2, e.s),
              lse = nan_dev<float>(2, e.s), tile = nan_dev<float>(4, e.s), rs({2}, gpu::DType::f64);
  gpu::Tensor t({2}, gpu::DType::i32);
  const cu::TiedCeWorkspace<float> none{};
  CHECK_THROWS_AS(cu::tied_logits_ce_forward<float>(loss.data<float>(), lse.data<float>(), nullptr, X.data<float>(),
                                                    E.data<float>(), t.data<std::int32_t>(), 2, 2, 4, nullptr, nullptr,
                                                    none, e.h.blas(), e.s.get()),
                  UserError);
  const cu::TiedCeWorkspace<float> ws{tile.data<float>(), 2, 2, rs.data<double>()};
  CHECK_THROWS_AS(cu::tied_logits_ce_forward<float>(loss.data<float>(), lse.data<float>(), nullptr, X.data<float>(),
                                                    E.data<float>(), t.data<std::int32_t>(), 2, 0, 4, nullptr, nullptr, ws,
                                                    e.h.blas(), e.s.get()),
                  UserError);
}
