// CPU float64 training layers (nn/layers.hpp): central finite differences for every backward on
// small random shapes, known values (uniform CE = log P, MSE, a hand-computed linear), the
// accumulate/overwrite contract, tiled GEMMs against Eigen, and thread-count independence.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/threads.hpp"
#include "nn_test_util.hpp"
#include "nn/arena.hpp"
#include "nn/layers.hpp"

using namespace memcap;
using namespace memcap::nn;
using namespace memcap::test;

namespace {

struct Shape {
  std::int64_t N, C, OC;
};
// Small shapes plus one crossing every tile boundary (16 rows, 256 columns, 128-deep k blocks).
const Shape kShapes[] = {{1, 1, 1}, {3, 5, 4}, {7, 2, 9}, {5, 33, 6}, {19, 131, 260}};

}  // namespace

TEST_CASE("linear backward matches central differences (with and without bias)") {
  std::uint64_t seed = 1;
  for (const Shape s : kShapes) {
    for (const bool with_bias : {false, true}) {
      CAPTURE(s.N);
      CAPTURE(s.C);
      CAPTURE(s.OC);
      CAPTURE(with_bias);
      auto inp = randu(s.N * s.C, seed++), W = randu(s.OC * s.C, seed++), b = randu(s.OC, seed++);
      const auto w = randu(s.N * s.OC, seed++);  // L = <w, out>, so dout = w
      std::vector<double> out(static_cast<std::size_t>(s.N * s.OC));
      auto loss = [&] {
        cpu::linear_forward(out.data(), inp.data(), W.data(), with_bias ? b.data() : nullptr, s.N, s.C, s.OC);
        return dot(out, w);
      };
      std::vector<double> dinp(inp.size(), 123.0), dW(W.size(), 0.0), db(b.size(), 0.0);
      cpu::linear_backward(dinp.data(), dW.data(), with_bias ? db.data() : nullptr, w.data(), inp.data(), W.data(),
                           s.N, s.C, s.OC);
      CHECK(fd_check(loss, inp, dinp, seed) < kFdRelTol);
      CHECK(fd_check(loss, W, dW, seed) < kFdRelTol);
      if (with_bias) CHECK(fd_check(loss, b, db, seed) < kFdRelTol);
    }
  }
}

TEST_CASE("linear forward/backward against Eigen on tiled shapes") {
  using RM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Shape s{37, 300, 270};
  const auto inp = randu(s.N * s.C, 11), W = randu(s.OC * s.C, 12), b = randu(s.OC, 13), dout = randu(s.N * s.OC, 14);
  std::vector<double> out(static_cast<std::size_t>(s.N * s.OC)), dinp(inp.size()), dW(W.size(), 0.0), db(b.size(), 0.0);
  cpu::linear_forward(out.data(), inp.data(), W.data(), b.data(), s.N, s.C, s.OC);
  cpu::linear_backward(dinp.data(), dW.data(), db.data(), dout.data(), inp.data(), W.data(), s.N, s.C, s.OC);
  const Eigen::Map<const RM> X(inp.data(), s.N, s.C), Wm(W.data(), s.OC, s.C), D(dout.data(), s.N, s.OC);
  const Eigen::Map<const Eigen::VectorXd> bv(b.data(), s.OC);
  const RM ref_out = (X * Wm.transpose()).rowwise() + bv.transpose();
  const RM ref_dinp = D * Wm, ref_dW = D.transpose() * X;
  const Eigen::VectorXd ref_db = D.colwise().sum().transpose();
  CHECK((Eigen::Map<const RM>(out.data(), s.N, s.OC) - ref_out).norm() / ref_out.norm() < kExactRelTol);
  CHECK((Eigen::Map<const RM>(dinp.data(), s.N, s.C) - ref_dinp).norm() / ref_dinp.norm() < kExactRelTol);
  CHECK((Eigen::Map<const RM>(dW.data(), s.OC, s.C) - ref_dW).norm() / ref_dW.norm() < kExactRelTol);
  CHECK((Eigen::Map<const Eigen::VectorXd>(db.data(), s.OC) - ref_db).norm() / ref_db.norm() < kExactRelTol);
}

TEST_CASE("linear: hand-computed values; backward accumulates dW/dbias and overwrites dinp") {
  // inp = [[1, 2]], W = [[1, 0], [2, -1], [0.5, 3]], b = [0.25, 0, -1]  ->  out = [1.25, 0, 5.5]
  const double inp[] = {1, 2}, W[] = {1, 0, 2, -1, 0.5, 3}, b[] = {0.25, 0, -1};
  double out[3];
  cpu::linear_forward(out, inp, W, b, 1, 2, 3);
  CHECK(out[0] == 1.25);
  CHECK(out[1] == 0.0);
  CHECK(out[2] == 5.5);
  cpu::linear_forward(out, inp, W, nullptr, 1, 2, 3);
  CHECK(out[2] == 6.5);
  // dout = [1, -1, 2]: dinp = dout·W = [1 - 2 + 1, 0 + 1 + 6] = [0, 7]; dW = doutᵀ inp; db = dout.
  const double dout[] = {1, -1, 2};
  double dinp[2] = {99, 99}, dW[6] = {10, 10, 10, 10, 10, 10}, db[3] = {1, 1, 1};
  cpu::linear_backward(dinp, dW, db, dout, inp, W, 1, 2, 3);
  CHECK(dinp[0] == 0.0);
  CHECK(dinp[1] == 7.0);
  const double want_dW[] = {11, 12, 9, 8, 12, 14};
  for (int i = 0; i < 6; ++i) CHECK(dW[i] == want_dW[i]);
  CHECK(db[0] == 2.0);
  CHECK(db[1] == 0.0);
  CHECK(db[2] == 3.0);
  cpu::linear_backward(dinp, dW, db, dout, inp, W, 1, 2, 3);  // second call adds again
  CHECK(dW[0] == 12.0);
  CHECK(db[2] == 5.0);
  CHECK(dinp[1] == 7.0);
}

TEST_CASE("activation and gated backward match central differences") {
  const std::int64_t n = 57;
  std::uint64_t seed = 100;
  for (const Activation act : {Activation::identity, Activation::relu, Activation::silu}) {
    CAPTURE(to_string(act));
    auto x = randu(n, seed++, -3, 3), a = randu(n, seed++, -2, 2), g = randu(n, seed++, -3, 3);
    for (auto* v : {&x, &g})  // ReLU: keep every input at least 1e-2 away from the kink
      for (auto& e : *v)
        if (std::abs(e) < 1e-2) e = e < 0 ? -1e-2 : 1e-2;
    const auto w = randu(n, seed++);
    std::vector<double> y(static_cast<std::size_t>(n)), dx(y.size());
    auto act_loss = [&] {
      cpu::activation_forward(y.data(), x.data(), n, act);
      return dot(y, w);
    };
    cpu::activation_backward(dx.data(), w.data(), x.data(), n, act);
    CHECK(fd_check(act_loss, x, dx, seed) < kFdRelTol);

    std::vector<double> h(y.size()), da(y.size(), 7.0), dg(y.size(), 7.0);
    auto gate_loss = [&] {
      cpu::gated_forward(h.data(), a.data(), g.data(), n, act);
      return dot(h, w);
    };
    cpu::gated_backward(da.data(), dg.data(), w.data(), a.data(), g.data(), n, act);
    CHECK(fd_check(gate_loss, a, da, seed) < kFdRelTol);
    CHECK(fd_check(gate_loss, g, dg, seed) < kFdRelTol);
  }
}

TEST_CASE("activation known values") {
  const double x[] = {-2, 0, 1.5};
  double y[3];
  cpu::activation_forward(y, x, 3, Activation::relu);
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 0.0);
  CHECK(y[2] == 1.5);
  cpu::activation_forward(y, x, 3, Activation::silu);
  CHECK(y[0] == doctest::Approx(-2.0 / (1.0 + std::exp(2.0))).epsilon(1e-15));
  CHECK(y[1] == 0.0);
  CHECK(y[2] == doctest::Approx(1.5 / (1.0 + std::exp(-1.5))).epsilon(1e-15));
  const double big[] = {-800, 800};  // no overflow in the sigmoid
  cpu::activation_forward(y, big, 2, Activation::silu);
  CHECK(std::isfinite(y[0]));
  CHECK(y[1] == 800.0);
  CHECK(parse_activation("silu") == Activation::silu);
  CHECK_THROWS_AS(parse_activation("tanh"), UserError);
  CHECK_THROWS_AS(parse_loss("l1"), UserError);
}

TEST_CASE("cross-entropy: known values, stability, argmax ties and finite differences") {
  SUBCASE("uniform logits give log P; ties resolve to the smallest index") {
    const std::int64_t N = 3, P = 5;
    std::vector<double> logits(N * P, 0.7), losses(N);
    const std::int32_t targets[] = {0, 2, 4};
    std::uint8_t correct[3];
    const double L = cpu::cross_entropy_forward(losses.data(), logits.data(), targets, N, P, correct);
    CHECK(L == doctest::Approx(std::log(5.0)).epsilon(1e-15));
    CHECK(losses[1] == doctest::Approx(std::log(5.0)).epsilon(1e-15));
    CHECK(correct[0] == 1);
    CHECK(correct[1] == 0);
    CHECK(correct[2] == 0);
  }
  SUBCASE("log-sum-exp stable for huge logits") {
    const double logits[] = {1000, 0, -1000, 1e308 / 10, 1e308 / 10 - 1e300, 0};
    const std::int32_t targets[] = {0, 1};
    double losses[2];
    const double L = cpu::cross_entropy_forward(losses, logits, targets, 2, 3, nullptr);
    CHECK(std::isfinite(L));
    CHECK(losses[0] == doctest::Approx(std::log1p(std::exp(-1000.0) + std::exp(-2000.0))).epsilon(1e-12));
    double dl[6];
    cpu::cross_entropy_backward(dl, logits, targets, 2, 3);
    for (double v : dl) CHECK(std::isfinite(v));
  }
  SUBCASE("finite differences, dloss scaling") {
    const std::int64_t N = 6, P = 9;
    auto logits = randu(N * P, 300, -4, 4);
    std::vector<std::int32_t> targets(N);
    for (std::int64_t i = 0; i < N; ++i) targets[i] = static_cast<std::int32_t>((3 * i + 1) % P);
    auto loss = [&] { return cpu::cross_entropy_forward(nullptr, logits.data(), targets.data(), N, P, nullptr); };
    std::vector<double> dl(logits.size());
    cpu::cross_entropy_backward(dl.data(), logits.data(), targets.data(), N, P);
    CHECK(fd_check(loss, logits, dl, 301) < kFdRelTol);
    std::vector<double> dl2(logits.size());
    cpu::cross_entropy_backward(dl2.data(), logits.data(), targets.data(), N, P, 0.5);
    for (std::size_t i = 0; i < dl.size(); ++i) CHECK(dl2[i] == doctest::Approx(0.5 * dl[i]).epsilon(1e-15));
  }
  SUBCASE("bad targets are refused") {
    const double logits[] = {0, 1};
    const std::int32_t bad[] = {2};
    CHECK_THROWS_AS(cpu::cross_entropy_forward(nullptr, logits, bad, 1, 2, nullptr), UserError);
  }
}

TEST_CASE("MSE: known value and finite differences") {
  const double y[] = {1, 2, 3, 4}, t[] = {0, 2, 5, 4};
  CHECK(cpu::mse_forward(y, t, 2, 2) == 5.0 / 4.0);  // (1 + 0 + 4 + 0) / 4
  double dy[4];
  cpu::mse_backward(dy, y, t, 2, 2);
  CHECK(dy[0] == 0.5);
  CHECK(dy[2] == -1.0);
  const std::int64_t N = 5, D = 7;
  auto yy = randu(N * D, 400), tt = randu(N * D, 401);
  auto loss = [&] { return cpu::mse_forward(yy.data(), tt.data(), N, D); };
  std::vector<double> g(yy.size());
  cpu::mse_backward(g.data(), yy.data(), tt.data(), N, D);
  CHECK(fd_check(loss, yy, g, 402) < kFdRelTol);
}

TEST_CASE("layer results do not depend on the thread count") {
  const Shape s{230, 90, 300};  // above every parallel threshold of layers.cpp
  const auto inp = randu(s.N * s.C, 21), W = randu(s.OC * s.C, 22), dout = randu(s.N * s.OC, 23);
  auto run = [&](int threads) {
    set_threads(threads);
    std::vector<double> out(static_cast<std::size_t>(s.N * s.OC)), dinp(inp.size()), dW(W.size(), 0.0),
        db(static_cast<std::size_t>(s.OC), 0.0);
    cpu::linear_forward(out.data(), inp.data(), W.data(), nullptr, s.N, s.C, s.OC);
    cpu::linear_backward(dinp.data(), dW.data(), db.data(), dout.data(), inp.data(), W.data(), s.N, s.C, s.OC);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(s.N));
    for (std::int64_t i = 0; i < s.N; ++i) targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % s.OC);
    const double L = cpu::cross_entropy_forward(nullptr, out.data(), targets.data(), s.N, s.OC, nullptr);
    out.insert(out.end(), dinp.begin(), dinp.end());
    out.insert(out.end(), dW.begin(), dW.end());
    out.insert(out.end(), db.begin(), db.end());
    out.push_back(L);
    return out;
  };
  const auto one = run(1), two = run(2);
  set_threads(2);
  CHECK(one == two);  // bit-identical
}

TEST_CASE("ParamArena: named views packed back to back") {
  ParamArena<double> ar;
  ar.layout.add("W", {3, 4});
  ar.layout.add("b", {3});
  ar.allocate();
  CHECK(ar.numel() == 15);
  CHECK(ar.layout.view("b").offset == 12);
  CHECK(ar.layout.view("W").shape == std::vector<std::int64_t>{3, 4});
  CHECK(ar.params.size() == 15);
  CHECK(ar.m.size() == 15);
  CHECK(ar.param("b") == ar.params.data() + 12);
  CHECK(ar.grad_or_null("missing") == nullptr);
  ar.grads[3] = 5;
  ar.zero_grads();
  CHECK(ar.grads[3] == 0.0);
  CHECK_THROWS_AS(ar.layout.add("W", {1}), UserError);
}
