// Layers of the fact-editing block (nn/edit_layers.hpp, nn/tied_ce.hpp): central finite differences in
// float64 for every backward, known values (GELU at ±1, RoPE base 10 for d = 256, rotation identities,
// uniform CE = log V), the tiled CE against the dense CE of nn/layers.hpp across vocabulary tiles, the
// ignore label, and the float instantiations against the float64 reference.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn_test_util.hpp"
#include "nn/edit_layers.hpp"
#include "nn/layers.hpp"
#include "nn/tied_ce.hpp"

using namespace memcap;
using namespace memcap::nn;
using namespace memcap::test;

namespace {

constexpr double kFloatRelTol = 1e-5;       // float instantiation vs float64 (inputs rounded to float)

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

}  // namespace

TEST_CASE("gelu: exact-erf values and finite differences") {
  const std::vector<double> x = {-1.0, 0.0, 1.0, 3.0};
  std::vector<double> y(4);
  cpu::gelu_forward(y.data(), x.data(), 4);
  CHECK(y[0] == doctest::Approx(-0.15865525393145707).epsilon(1e-14));
  CHECK(y[1] == 0.0);
  CHECK(y[2] == doctest::Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(y[3] == doctest::Approx(3 * 0.9986501019683699).epsilon(1e-14));  // 3·Φ(3)
  std::vector<double> dx(4), ones(4, 1.0);
  cpu::gelu_backward(dx.data(), ones.data(), x.data(), 4);
  CHECK(dx[1] == doctest::Approx(0.5).epsilon(1e-15));  // Φ(0)
  CHECK(dx[2] == doctest::Approx(0.8413447460685429 + 0.24197072451914337).epsilon(1e-14));  // Φ(1) + φ(1)

  const std::int64_t n = 300;
  auto xs = randu(n, 11, -4, 4);
  const auto w = randu(n, 12);
  std::vector<double> ys(n), gx(n);
  auto f = [&] {
    cpu::gelu_forward(ys.data(), xs.data(), n);
    return dot(ys, w);
  };
  cpu::gelu_backward(gx.data(), w.data(), xs.data(), n);
  CHECK(fd_check(f, xs, gx, 13) < kFdRelTol);

  const auto xf = to_float(xs);
  std::vector<float> yf(n), wf = to_float(w), gf(n);
  cpu::gelu_forward(yf.data(), xf.data(), n);
  cpu::gelu_backward(gf.data(), wf.data(), xf.data(), n);
  std::vector<double> yr(n), gr(n);
  const auto xr = rounded(xs), wr = rounded(w);
  cpu::gelu_forward(yr.data(), xr.data(), n);
  cpu::gelu_backward(gr.data(), wr.data(), xr.data(), n);
  CHECK(rel_err(to_double(yf), yr) < kFloatRelTol);
  CHECK(rel_err(to_double(gf), gr) < kFloatRelTol);
}

TEST_CASE("rope: base of 6.4, rotation identities and finite differences") {
  CHECK(rope_base_for(256) == doctest::Approx(10.0).epsilon(1e-14));
  CHECK(rope_base_for(1024) == doctest::Approx(10000.0).epsilon(1e-14));

  const std::int64_t B = 2, Tn = 5, H = 3, dh = 8;
  const double base = 10.0;
  const std::int64_t n = B * Tn * H * dh;
  auto x = randu(n, 21);
  std::vector<double> y(n), back(n);
  cpu::rope_forward(y.data(), x.data(), B, Tn, H, dh, base);
  // position 0 is untouched; each (j, j+dh/2) pair keeps its norm; backward inverts forward
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t j = 0; j < dh; ++j) {
        const auto i = static_cast<std::size_t>(((b * Tn) * H + h) * dh + j);
        CHECK(y[i] == x[i]);
      }
  for (std::int64_t r = 0; r < B * Tn * H; ++r)
    for (std::int64_t j = 0; j < dh / 2; ++j) {
      const auto a = static_cast<std::size_t>(r * dh + j), c = a + static_cast<std::size_t>(dh / 2);
      CHECK(std::hypot(y[a], y[c]) == doctest::Approx(std::hypot(x[a], x[c])).epsilon(1e-14));
    }
  cpu::rope_backward(back.data(), y.data(), B, Tn, H, dh, base);
  CHECK(rel_err(back, x) < kExactRelTol);
  // hand value: t = 1, j = 1, dh = 8: θ = 10^(−1/4); x = e_1 -> y_1 = cos θ, y_5 = sin θ
  {
    std::vector<double> e(2 * dh, 0.0), o(2 * dh);
    e[dh + 1] = 1.0;
    cpu::rope_forward(o.data(), e.data(), 1, 2, 1, dh, base);
    const double th = std::pow(10.0, -0.25);
    CHECK(o[dh + 1] == doctest::Approx(std::cos(th)).epsilon(1e-15));
    CHECK(o[dh + 5] == doctest::Approx(std::sin(th)).epsilon(1e-15));
  }
  // relative position: <rope(q)_t, rope(k)_s> depends on t − s only (same q, k placed at every position)
  {
    const auto q = randu(dh, 22), k = randu(dh, 23);
    std::vector<double> Q(Tn * dh), K(Tn * dh), RQ(Tn * dh), RK(Tn * dh);
    for (std::int64_t t = 0; t < Tn; ++t)
      for (std::int64_t j = 0; j < dh; ++j) {
        Q[static_cast<std::size_t>(t * dh + j)] = q[static_cast<std::size_t>(j)];
        K[static_cast<std::size_t>(t * dh + j)] = k[static_cast<std::size_t>(j)];
      }
    cpu::rope_forward(RQ.data(), Q.data(), 1, Tn, 1, dh, base);
    cpu::rope_forward(RK.data(), K.data(), 1, Tn, 1, dh, base);
    auto ip = [&](std::int64_t t, std::int64_t s) {
      double v = 0;
      for (std::int64_t j = 0; j < dh; ++j) v += RQ[static_cast<std::size_t>(t * dh + j)] * RK[static_cast<std::size_t>(s * dh + j)];
      return v;
    };
    CHECK(ip(3, 1) == doctest::Approx(ip(2, 0)).epsilon(1e-13));
    CHECK(ip(4, 2) == doctest::Approx(ip(2, 0)).epsilon(1e-13));
  }
  // finite differences of Σ w ⊙ rope(x)
  const auto w = randu(n, 24);
  std::vector<double> gx(n);
  cpu::rope_backward(gx.data(), w.data(), B, Tn, H, dh, base);
  auto f = [&] {
    cpu::rope_forward(y.data(), x.data(), B, Tn, H, dh, base);
    return dot(y, w);
  };
  CHECK(fd_check(f, x, gx, 25) < kFdRelTol);
  // in place gives the same result
  std::vector<double> inplace = x;
  cpu::rope_forward(inplace.data(), inplace.data(), B, Tn, H, dh, base);
  cpu::rope_forward(y.data(), x.data(), B, Tn, H, dh, base);
  CHECK(inplace == y);

  CHECK_THROWS_AS(cpu::rope_forward(y.data(), x.data(), 1, 1, 1, 7, base), UserError);
  CHECK_THROWS_AS(cpu::rope_forward(y.data(), x.data(), 1, 1, 1, 8, 0.0), UserError);
}

TEST_CASE("lowrank path: finite differences, accumulation, and U·V product") {
  const std::int64_t N = 7, C = 12, R = 3;
  auto inp = randu(N * C, 31), U = randu(C * R, 32), V = randu(R * C, 33);
  const auto w = randu(N * C, 34);
  std::vector<double> out(N * C), mid(N * R);
  cpu::lowrank_forward(out.data(), mid.data(), inp.data(), U.data(), V.data(), N, C, R);
  // out = inp (U V) computed directly
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (std::int64_t a = 0; a < C; ++a)
        for (std::int64_t r = 0; r < R; ++r)
          s += inp[static_cast<std::size_t>(n * C + a)] * U[static_cast<std::size_t>(a * R + r)] *
               V[static_cast<std::size_t>(r * C + c)];
      CHECK(out[static_cast<std::size_t>(n * C + c)] == doctest::Approx(s).epsilon(1e-13));
    }
  std::vector<double> dinp(N * C), dU(C * R, 0.0), dV(R * C, 0.0), dmid(N * R);
  cpu::lowrank_backward(dinp.data(), dU.data(), dV.data(), dmid.data(), w.data(), inp.data(), mid.data(), U.data(),
                        V.data(), N, C, R);
  auto f = [&] {
    cpu::lowrank_forward(out.data(), mid.data(), inp.data(), U.data(), V.data(), N, C, R);
    return dot(out, w);
  };
  CHECK(fd_check(f, inp, dinp, 35) < kFdRelTol);
  CHECK(fd_check(f, U, dU, 36) < kFdRelTol);
  CHECK(fd_check(f, V, dV, 37) < kFdRelTol);
  // parameter gradients accumulate: a second call doubles them
  cpu::lowrank_forward(out.data(), mid.data(), inp.data(), U.data(), V.data(), N, C, R);
  std::vector<double> dU2 = dU, dV2 = dV;
  cpu::lowrank_backward(dinp.data(), dU2.data(), dV2.data(), dmid.data(), w.data(), inp.data(), mid.data(), U.data(),
                        V.data(), N, C, R);
  for (std::size_t i = 0; i < dU.size(); ++i) CHECK(dU2[i] == doctest::Approx(2 * dU[i]).epsilon(1e-14));
  for (std::size_t i = 0; i < dV.size(); ++i) CHECK(dV2[i] == doctest::Approx(2 * dV[i]).epsilon(1e-14));
}

TEST_CASE("router mix: alpha = 1/2 at z = 0, limits, and finite differences") {
  const std::int64_t N = 6, C = 10;
  auto z = randu(N, 41, -3, 3), f = randu(N * C, 42), l = randu(N * C, 43);
  const auto w = randu(N * C, 44);
  z[0] = 0.0;
  z[1] = 60.0;    // α → 1: out = f
  z[2] = -60.0;   // α → 0: out = l
  std::vector<double> out(N * C), alpha(N);
  cpu::router_mix_forward(out.data(), alpha.data(), z.data(), f.data(), l.data(), N, C);
  CHECK(alpha[0] == 0.5);
  for (std::int64_t c = 0; c < C; ++c) {
    CHECK(out[static_cast<std::size_t>(c)] == doctest::Approx(0.5 * (f[static_cast<std::size_t>(c)] + l[static_cast<std::size_t>(c)])));
    CHECK(out[static_cast<std::size_t>(C + c)] == doctest::Approx(f[static_cast<std::size_t>(C + c)]).epsilon(1e-14));
    CHECK(out[static_cast<std::size_t>(2 * C + c)] == doctest::Approx(l[static_cast<std::size_t>(2 * C + c)]).epsilon(1e-14));
  }
  z[1] = 1.5;
  z[2] = -0.7;
  std::vector<double> dz(N), df(N * C), dl(N * C);
  cpu::router_mix_forward(out.data(), alpha.data(), z.data(), f.data(), l.data(), N, C);
  cpu::router_mix_backward(dz.data(), df.data(), dl.data(), w.data(), alpha.data(), f.data(), l.data(), N, C);
  auto fn = [&] {
    cpu::router_mix_forward(out.data(), alpha.data(), z.data(), f.data(), l.data(), N, C);
    return dot(out, w);
  };
  CHECK(fd_check(fn, z, dz, 45) < kFdRelTol);
  CHECK(fd_check(fn, f, df, 46) < kFdRelTol);
  CHECK(fd_check(fn, l, dl, 47) < kFdRelTol);
}

TEST_CASE("router head composed from linear + gelu + linear + router mix: finite differences") {
  // α = sigmoid(w2ᵀ GELU(W1 a + b1) + b2), FFN = α f + (1 − α) l (spec 6.4), through the existing linear layer.
  const std::int64_t N = 4, C = 9;
  auto a = randu(N * C, 51), W1 = randu(C * C, 52, -0.5, 0.5), b1 = randu(C, 53), w2 = randu(C, 54), b2 = randu(1, 55);
  auto f = randu(N * C, 56), l = randu(N * C, 57);
  const auto w = randu(N * C, 58);
  std::vector<double> pre(N * C), hid(N * C), z(N), alpha(N), out(N * C);
  auto fwd = [&] {
    cpu::linear_forward(pre.data(), a.data(), W1.data(), b1.data(), N, C, C);
    cpu::gelu_forward(hid.data(), pre.data(), N * C);
    cpu::linear_forward(z.data(), hid.data(), w2.data(), b2.data(), N, C, 1);
    cpu::router_mix_forward(out.data(), alpha.data(), z.data(), f.data(), l.data(), N, C);
    return dot(out, w);
  };
  fwd();
  std::vector<double> dz(N), df(N * C), dl(N * C), dhid(N * C), dpre(N * C), da(N * C);
  std::vector<double> dW1(C * C, 0.0), db1(C, 0.0), dw2(C, 0.0), db2(1, 0.0);
  cpu::router_mix_backward(dz.data(), df.data(), dl.data(), w.data(), alpha.data(), f.data(), l.data(), N, C);
  cpu::linear_backward(dhid.data(), dw2.data(), db2.data(), dz.data(), hid.data(), w2.data(), N, C, 1);
  cpu::gelu_backward(dpre.data(), dhid.data(), pre.data(), N * C);
  cpu::linear_backward(da.data(), dW1.data(), db1.data(), dpre.data(), a.data(), W1.data(), N, C, C);
  CHECK(fd_check(fwd, a, da, 59) < kFdRelTol);
  CHECK(fd_check(fwd, W1, dW1, 60) < kFdRelTol);
  CHECK(fd_check(fwd, b1, db1, 61) < kFdRelTol);
  CHECK(fd_check(fwd, w2, dw2, 62) < kFdRelTol);
  CHECK(fd_check(fwd, b2, db2, 63) < kFdRelTol);
  CHECK(fd_check(fwd, f, df, 64) < kFdRelTol);
  CHECK(fd_check(fwd, l, dl, 65) < kFdRelTol);
}

namespace {
// Dense reference: logits = X Eᵀ, then nn::cpu::cross_entropy_forward over the non-ignored rows.
void dense_ce(std::vector<double>& losses, std::vector<std::uint8_t>& correct, const std::vector<double>& X,
              const std::vector<double>& E, const std::vector<std::int32_t>& t, std::int64_t N, std::int64_t V,
              std::int64_t C) {
  std::vector<double> logits(static_cast<std::size_t>(N * V));
  cpu::linear_forward(logits.data(), X.data(), E.data(), nullptr, N, C, V);
  std::vector<std::int32_t> t0(t);
  for (auto& v : t0) v = v < 0 ? 0 : v;
  losses.assign(static_cast<std::size_t>(N), 0.0);
  correct.assign(static_cast<std::size_t>(N), 0);
  cpu::cross_entropy_forward(losses.data(), logits.data(), t0.data(), N, V, correct.data());
}
}  // namespace

TEST_CASE("tied logits CE: matches the dense CE across vocabulary tiles, ignore label, finite differences") {
  const std::int64_t N = 6, C = 5;
  for (const std::int64_t V : {std::int64_t{1}, std::int64_t{37}, std::int64_t{2500}}) {  // 2500 spans three 1024-tiles
    CAPTURE(V);
    const auto X = randu(N * C, 71 + V, -2, 2), E = randu(V * C, 72 + V);
    std::vector<std::int32_t> t(N);
    for (std::int64_t n = 0; n < N; ++n)
      t[static_cast<std::size_t>(n)] =
          static_cast<std::int32_t>(rng::below(73, rng::kUser, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(V)));
    t[2] = kIgnoreLabel;
    if (V > 1024) t[4] = 2047;  // a target in the second tile
    std::vector<double> losses(N), lse(N);
    std::vector<std::int32_t> arg(N);
    std::int64_t valid = -1;
    const double mean = cpu::tied_logits_ce_forward(losses.data(), lse.data(), arg.data(), X.data(), E.data(), t.data(),
                                                    N, V, C, &valid);
    CHECK(valid == N - 1);
    std::vector<double> ref;
    std::vector<std::uint8_t> corr;
    dense_ce(ref, corr, X, E, t, N, V, C);
    double sum = 0;
    for (std::int64_t n = 0; n < N; ++n) {
      const auto i = static_cast<std::size_t>(n);
      if (t[i] == kIgnoreLabel) {
        CHECK(losses[i] == 0.0);
        continue;
      }
      CHECK(losses[i] == doctest::Approx(ref[i]).epsilon(1e-12));
      CHECK((arg[i] == t[i]) == (corr[i] == 1));
      sum += ref[i];
    }
    CHECK(mean == doctest::Approx(sum / static_cast<double>(N - 1)).epsilon(1e-12));

    // finite differences of the mean loss in X and E (scale = 1 / n_valid); the ignored row gets dX = 0
    auto Xv = X, Ev = E;
    std::vector<double> dX(N * C, 7.0), dE(V * C, 0.0);
    cpu::tied_logits_ce_backward(dX.data(), dE.data(), Xv.data(), Ev.data(), t.data(), lse.data(), N, V, C,
                                 1.0 / static_cast<double>(valid));
    for (std::int64_t c = 0; c < C; ++c) CHECK(dX[static_cast<std::size_t>(2 * C + c)] == 0.0);
    std::vector<double> l2(N), s2(N);
    auto f = [&] { return cpu::tied_logits_ce_forward(l2.data(), s2.data(), nullptr, Xv.data(), Ev.data(), t.data(), N, V, C, nullptr); };
    CHECK(fd_check(f, Xv, dX, 74) < kFdRelTol);
    CHECK(fd_check(f, Ev, dE, 75) < kFdRelTol);
  }
}

TEST_CASE("tied logits CE: uniform logits give log V, argmax ties pick the smallest index, bad targets") {
  const std::int64_t N = 3, V = 3000, C = 4;
  std::vector<double> X(N * C, 0.0), E = randu(V * C, 81), losses(N), lse(N);
  std::vector<std::int32_t> t = {0, 1234, 2999}, arg(N);
  const double mean = cpu::tied_logits_ce_forward(losses.data(), lse.data(), arg.data(), X.data(), E.data(), t.data(),
                                                  N, V, C, nullptr);
  CHECK(mean == doctest::Approx(std::log(3000.0)).epsilon(1e-13));
  for (auto a : arg) CHECK(a == 0);
  // all rows ignored: mean 0, no rows counted, gradients 0
  std::vector<std::int32_t> none(N, kIgnoreLabel);
  std::int64_t valid = -1;
  CHECK(cpu::tied_logits_ce_forward(losses.data(), lse.data(), arg.data(), X.data(), E.data(), none.data(), N, V, C,
                                    &valid) == 0.0);
  CHECK(valid == 0);
  std::vector<std::int32_t> bad = {0, 3000, 1};
  CHECK_THROWS_AS(cpu::tied_logits_ce_forward(losses.data(), lse.data(), arg.data(), X.data(), E.data(), bad.data(), N,
                                              V, C, nullptr),
                  UserError);
  bad[1] = -1;
  CHECK_THROWS_AS(cpu::tied_logits_ce_forward(losses.data(), lse.data(), arg.data(), X.data(), E.data(), bad.data(), N,
                                              V, C, nullptr),
                  UserError);
}

TEST_CASE("float instantiations match the float64 reference") {
  const std::int64_t N = 5, C = 16, R = 4, V = 1500;
  const auto inp = rounded(randu(N * C, 91)), U = rounded(randu(C * R, 92)), Vm = rounded(randu(R * C, 93));
  const auto dout = rounded(randu(N * C, 94));
  std::vector<double> out(N * C), mid(N * R), dinp(N * C), dU(C * R, 0.0), dV(R * C, 0.0), dmid(N * R);
  cpu::lowrank_forward(out.data(), mid.data(), inp.data(), U.data(), Vm.data(), N, C, R);
  cpu::lowrank_backward(dinp.data(), dU.data(), dV.data(), dmid.data(), dout.data(), inp.data(), mid.data(), U.data(),
                        Vm.data(), N, C, R);
  auto inpf = to_float(inp), Uf = to_float(U), Vf = to_float(Vm), doutf = to_float(dout);
  std::vector<float> outf(N * C), midf(N * R), dinpf(N * C), dUf(C * R, 0.f), dVf(R * C, 0.f), dmidf(N * R);
  cpu::lowrank_forward(outf.data(), midf.data(), inpf.data(), Uf.data(), Vf.data(), N, C, R);
  cpu::lowrank_backward(dinpf.data(), dUf.data(), dVf.data(), dmidf.data(), doutf.data(), inpf.data(), midf.data(),
                        Uf.data(), Vf.data(), N, C, R);
  CHECK(rel_err(to_double(outf), out) < kFloatRelTol);
  CHECK(rel_err(to_double(dinpf), dinp) < kFloatRelTol);
  CHECK(rel_err(to_double(dUf), dU) < kFloatRelTol);
  CHECK(rel_err(to_double(dVf), dV) < kFloatRelTol);

  const auto E = rounded(randu(V * C, 95, -0.1, 0.1));
  std::vector<std::int32_t> t = {3, kIgnoreLabel, 1499, 700, 0};
  std::vector<double> losses(N), lse(N), dX(N * C), dE(V * C, 0.0);
  cpu::tied_logits_ce_forward(losses.data(), lse.data(), nullptr, inp.data(), E.data(), t.data(), N, V, C, nullptr);
  cpu::tied_logits_ce_backward(dX.data(), dE.data(), inp.data(), E.data(), t.data(), lse.data(), N, V, C, 0.25);
  auto Ef = to_float(E);
  std::vector<float> lossesf(N), lsef(N), dXf(N * C), dEf(V * C, 0.f);
  cpu::tied_logits_ce_forward(lossesf.data(), lsef.data(), nullptr, inpf.data(), Ef.data(), t.data(), N, V, C, nullptr);
  cpu::tied_logits_ce_backward(dXf.data(), dEf.data(), inpf.data(), Ef.data(), t.data(), lsef.data(), N, V, C, 0.25);
  CHECK(rel_err(to_double(lossesf), losses) < kFloatRelTol);
  CHECK(rel_err(to_double(dXf), dX) < kFloatRelTol);
  CHECK(rel_err(to_double(dEf), dE) < kFloatRelTol);
}
