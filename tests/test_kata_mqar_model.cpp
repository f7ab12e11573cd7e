// MQAR language model (spec kata.md §2.10, §4.4, §5.4): Table 2 parameter counts and state sizes,
// central finite-difference checks in float64 of every layer (LayerNorm, RMSNorm with gain, embedding,
// depthwise causal conv, ℓ2 norm), every mixer core (softmax; KATA M1, M2, M4, Σ2, Σ4, orthant,
// Lorentz; the chunked delta rule to 1e-9 with T not a multiple of the chunk) and the whole model per
// mixer; forward references (recurrent KATA through explicit ψ, token-by-token delta rule, the explicit
// inverse for the Neumann product) and float32 against float64. Options of issue 12: RoPE on q, k and the
// gated variants of §2.11 (GatedKATA, convex gate, GatedDeltaKATA): cores against their token recurrences,
// core and whole-model FD, parameter counts, init, float32 against float64.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/feature_map.hpp"
#include "kata/mqar_limits.hpp"
#include "kata/mqar_mixers.hpp"
#include "kata/mqar_model.hpp"
#include "kata/mqar_task.hpp"
#include "nn/causal_conv.hpp"
#include "nn/embedding.hpp"
#include "kata/mixer_bench.hpp"
#include "nn/layernorm.hpp"
#include "nn/rmsnorm_gain.hpp"

using namespace memcap;
using namespace memcap::kata;
using mqar::Mat;
using mqar::Vec;

namespace {

constexpr double kFdStep = 1e-6;        // central-difference step
constexpr double kFdRelTol = 1e-6;      // ‖analytic − FD‖ / ‖FD‖ over the checked entries, float64 (house rule)
constexpr double kDeltaFdTol = 1e-9;    // the delta rule's chunked backward (issue 12: "verified to 1e-9")
constexpr double kExactTol = 1e-12;     // two forms of one function in float64

std::vector<double> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * rng::normal(seed, rng::kUser + 7, i);
  return v;
}

Mat<double> randm(std::int64_t r, std::int64_t c, std::uint64_t seed, double scale = 1.0) {
  Mat<double> m(r, c);
  for (std::int64_t i = 0; i < r * c; ++i) m.data()[i] = scale * rng::normal(seed, rng::kUser + 8, static_cast<std::uint64_t>(i));
  return m;
}

// Relative error ‖g − fd‖/‖fd‖ of the analytic gradient g of f at x over (up to) `max_entries` entries.
double fd_check(std::vector<double>& x, const std::vector<double>& g, const std::function<double()>& f,
                std::int64_t max_entries = 64, double step = kFdStep) {
  const auto n = static_cast<std::int64_t>(x.size());
  const std::int64_t stride = std::max<std::int64_t>(1, n / max_entries);
  double num = 0, den = 0;
  for (std::int64_t i = (n > max_entries ? 1 : 0); i < n; i += stride) {
    const double x0 = x[static_cast<std::size_t>(i)];
    x[static_cast<std::size_t>(i)] = x0 + step;
    const double fp = f();
    x[static_cast<std::size_t>(i)] = x0 - step;
    const double fm = f();
    x[static_cast<std::size_t>(i)] = x0;
    const double fd = (fp - fm) / (2 * step);
    num += (g[static_cast<std::size_t>(i)] - fd) * (g[static_cast<std::size_t>(i)] - fd);
    den += fd * fd;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

std::vector<double> flat(const Mat<double>& m) { return std::vector<double>(m.data(), m.data() + m.size()); }
Mat<double> unflat(const std::vector<double>& v, std::int64_t r, std::int64_t c) {
  return Eigen::Map<const Mat<double>>(v.data(), r, c);
}
double wsum(const Mat<double>& a, const Mat<double>& w) { return (a.array() * w.array()).sum(); }

// Recurrent normalized KATA through explicit packed features (the definition, §1.3).
Mat<double> kata_recurrent(const FeatureMap& map, const Mat<double>& q, const Mat<double>& k, const Mat<double>& v) {
  const Eigen::MatrixXd pq = map.apply(q), pk = map.apply(k);
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(pq.cols(), v.cols());
  Eigen::VectorXd Z = Eigen::VectorXd::Zero(pq.cols());
  Mat<double> o(q.rows(), v.cols());
  for (std::int64_t t = 0; t < q.rows(); ++t) {
    S += pk.row(t).transpose() * v.row(t);
    Z += pk.row(t).transpose();
    o.row(t) = (pq.row(t) * S) / pq.row(t).dot(Z);
  }
  return o;
}

const char* kKataMaps[] = {"m1:eps=1e-4", "m2:eps=1e-4", "m4:eps=1e-4", "sigma2", "sigma4", "m2", "orthant", "lorentz"};

}  // namespace

TEST_CASE("parameter counts and state sizes equal Table 2 (spec §2.9, §2.10)") {
  auto count = [](const std::string& mixer) {
    MqarModelConfig c;
    c.mixer = mixer;
    return MqarModel::build(c);
  };
  CHECK(count("softmax").param_count() == 1132928);
  for (const char* m : {"m1", "m2", "m4", "sigma2", "sigma4", "orthant", "lorentz"}) {
    CAPTURE(m);
    CHECK(count(m).param_count() == 1134016);
  }
  CHECK(count("delta-m1").param_count() == 1134272);
  CHECK(count("delta-m2").param_count() == 1134272);
  CHECK(count("softmax").heads == 1);
  CHECK(count("m2").heads == 2);
  CHECK(count("m2").d_head == 64);
  CHECK(count("softmax").state_size(4096) == 1048576);
  CHECK(count("sigma4").state_size(4096) == 17408);
  CHECK(count("sigma2").state_size(4096) == 67584);
  CHECK(count("m4").state_size(4096) == 69632);
  CHECK(count("m2").state_size(4096) == 135168);
  CHECK(count("m1").state_size(4096) == 266240);
  CHECK(count("delta-m2").state_size(4096) == 135168);
  CHECK(count("delta-m1").state_size(4096) == 266240);
  // §4.4 ε: 1e-4 for the PSD maps (M_g too), 1e-6 orthant; Σ4 keeps its 1/4 scale.
  CHECK(count("m2").map.eps() == 1e-4);
  CHECK(count("sigma4").map.scale() == 0.25);
  CHECK(count("orthant").map.eps() == 1e-6);
  MqarModelConfig bad;
  bad.mixer = "m3";
  CHECK_THROWS_AS(bad.validate(), UserError);
  bad.mixer = "m2";
  bad.heads = 3;
  CHECK_THROWS_AS(bad.validate(), UserError);
}

TEST_CASE("init of §4.4: N(0, 0.02²) weights, W_o 0.02/sqrt(2 n_layers), unit gains, zero biases") {
  MqarModelConfig c;
  c.mixer = "softmax";
  const MqarModel m = MqarModel::build(c);
  const auto p = mqar_init_params(m, 5);
  auto stats = [&](const std::string& name) {
    const auto& v = m.layout.view(name);
    double s = 0, s2 = 0;
    for (std::int64_t i = 0; i < v.numel; ++i) {
      const double x = p[static_cast<std::size_t>(v.offset + i)];
      s += x;
      s2 += x * x;
    }
    return std::pair{s / v.numel, std::sqrt(s2 / v.numel)};
  };
  CHECK(stats("embed").second == doctest::Approx(0.02).epsilon(0.01));
  CHECK(stats("l1.wo.w").second == doctest::Approx(0.01).epsilon(0.03));
  CHECK(stats("l0.proj.w").second == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stats("l1.wqkv.b").second == 0.0);
  CHECK(stats("normf.w").first == 1.0);
  CHECK(stats("l0.norm1.b").second == 0.0);
  CHECK(stats("l0.conv.w").second == doctest::Approx(1.0 / 3.0).epsilon(0.1));  // U(±1/√3): rms 1/3
  CHECK(mqar_init_params(m, 5) == p);
  CHECK(mqar_init_params(m, 6) != p);
}

TEST_CASE("layer FD checks: layernorm (and fused with the residual add), rmsnorm with gain, embedding, causal conv (float64)") {
  const std::int64_t B = 2, T = 7, C = 5, K = 3, N = B * T;
  std::vector<double> x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), W = randn(N * C, 4);
  std::vector<double> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  auto loss = [&](auto&& fwd) {
    fwd();
    double s = 0;
    for (std::int64_t i = 0; i < N * C; ++i) s += out[static_cast<std::size_t>(i)] * W[static_cast<std::size_t>(i)];
    return s;
  };
  {  // LayerNorm
    auto fwd = [&] { nn::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5); };
    loss(fwd);
    std::fill(dw.begin(), dw.end(), 0.0);
    std::fill(db.begin(), db.end(), 0.0);
    nn::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), W.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    const double ex = fd_check(x, dx, [&] { return loss(fwd); });
    const double ew = fd_check(w, dw, [&] { return loss(fwd); });
    const double eb = fd_check(b, db, [&] { return loss(fwd); });
    MESSAGE("layernorm FD rel err: dx " << ex << " dw " << ew << " db " << eb);
    CHECK(ex < kFdRelTol);
    CHECK(ew < kFdRelTol);
    CHECK(eb < kFdRelTol);
    // Known values: each output row has mean b-weighted zero and unit variance before the affine map.
    std::vector<double> one(C, 1.0), zero(C, 0.0);
    nn::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), one.data(), zero.data(), N, C, 0.0);
    double m0 = 0, v0 = 0;
    for (std::int64_t c = 0; c < C; ++c) m0 += out[static_cast<std::size_t>(c)];
    for (std::int64_t c = 0; c < C; ++c) v0 += out[static_cast<std::size_t>(c)] * out[static_cast<std::size_t>(c)];
    CHECK(std::abs(m0) < 1e-13);
    CHECK(v0 / C == doctest::Approx(1.0).epsilon(1e-13));
  }
  {  // the fused pair: loss = <W, LN(x + y)> + <A, x>, so d loss / dx = A + LN's input gradient =
     // layernorm_backward_add(add = A); the sum is written (in place over a copy of x) as residual_add would
    const std::vector<double> y = randn(N * C, 7), A = randn(N * C, 8);
    std::vector<double> sum(N * C), dxa(N * C), dwa(C, 0.0), dba(C, 0.0);
    auto fwd = [&] {
      nn::cpu::add_layernorm_forward(sum.data(), out.data(), mean.data(), rstd.data(), x.data(), y.data(), w.data(),
                                     b.data(), N, C, 1e-5);
    };
    auto loss2 = [&] {
      double s = loss(fwd);
      for (std::int64_t i = 0; i < N * C; ++i) s += A[static_cast<std::size_t>(i)] * x[static_cast<std::size_t>(i)];
      return s;
    };
    loss2();
    for (std::int64_t i = 0; i < N * C; ++i)
      CHECK(sum[static_cast<std::size_t>(i)] == x[static_cast<std::size_t>(i)] + y[static_cast<std::size_t>(i)]);
    nn::cpu::layernorm_backward_add(dxa.data(), dwa.data(), dba.data(), A.data(), W.data(), sum.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
    const double ex = fd_check(x, dxa, loss2);
    MESSAGE("add_layernorm / layernorm_backward_add FD rel err: dx " << ex);
    CHECK(ex < kFdRelTol);
    // equal to the unfused sequence bit for bit, also with dinp aliasing dout (fwd again: the FD left x's last
    // perturbation in sum, mean and rstd)
    fwd();
    std::fill(dwa.begin(), dwa.end(), 0.0);
    std::fill(dba.begin(), dba.end(), 0.0);
    nn::cpu::layernorm_backward_add(dxa.data(), dwa.data(), dba.data(), A.data(), W.data(), sum.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
    std::vector<double> u(N * C), dwu(C, 0.0), dbu(C, 0.0), alias = W;
    nn::cpu::layernorm_backward(u.data(), dwu.data(), dbu.data(), W.data(), sum.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    for (std::int64_t i = 0; i < N * C; ++i) u[static_cast<std::size_t>(i)] += A[static_cast<std::size_t>(i)];
    CHECK(u == dxa);
    CHECK(dwu == dwa);
    CHECK(dbu == dba);
    std::fill(dwa.begin(), dwa.end(), 0.0);
    std::fill(dba.begin(), dba.end(), 0.0);
    nn::cpu::layernorm_backward_add(alias.data(), dwa.data(), dba.data(), A.data(), alias.data(), sum.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
    CHECK(alias == dxa);
  }
  {  // RMSNorm with gain
    auto fwd = [&] { nn::cpu::rmsnorm_gain_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5); };
    loss(fwd);
    std::fill(dw.begin(), dw.end(), 0.0);
    nn::cpu::rmsnorm_gain_backward(dx.data(), dw.data(), W.data(), x.data(), w.data(), rstd.data(), N, C);
    const double ex = fd_check(x, dx, [&] { return loss(fwd); });
    const double ew = fd_check(w, dw, [&] { return loss(fwd); });
    MESSAGE("rmsnorm FD rel err: dx " << ex << " dw " << ew);
    CHECK(ex < kFdRelTol);
    CHECK(ew < kFdRelTol);
  }
  {  // depthwise causal conv, K = 3 and K = 4 (kernel longer than nothing: T = 7)
    for (std::int64_t Kc : {K, std::int64_t(4)}) {
      std::vector<double> cw = randn(C * Kc, 5), cb = randn(C, 6), dcw(C * Kc), dcb(C);
      auto fwd = [&] { nn::cpu::causal_conv_forward(out.data(), x.data(), cw.data(), cb.data(), B, T, C, Kc); };
      loss(fwd);
      // Causality and the PyTorch tap order: out[b,0,c] = bias + w[c,K-1] x[b,0,c].
      CHECK(out[0] == doctest::Approx(cb[0] + cw[static_cast<std::size_t>(Kc - 1)] * x[0]).epsilon(1e-14));
      std::fill(dcw.begin(), dcw.end(), 0.0);
      std::fill(dcb.begin(), dcb.end(), 0.0);
      nn::cpu::causal_conv_backward(dx.data(), dcw.data(), dcb.data(), W.data(), x.data(), cw.data(), B, T, C, Kc);
      const double ex = fd_check(x, dx, [&] { return loss(fwd); });
      const double ew = fd_check(cw, dcw, [&] { return loss(fwd); });
      const double eb = fd_check(cb, dcb, [&] { return loss(fwd); });
      MESSAGE("causal conv k=" << Kc << " FD rel err: dx " << ex << " dw " << ew << " db " << eb);
      CHECK(ex < kFdRelTol);
      CHECK(ew < kFdRelTol);
      CHECK(eb < kFdRelTol);
    }
  }
  {  // embedding (linear in the table: FD exact up to round-off)
    const std::int64_t V = 6;
    std::vector<std::int32_t> tok(N);
    for (std::int64_t n = 0; n < N; ++n) tok[static_cast<std::size_t>(n)] = static_cast<std::int32_t>((n * 5) % V);
    std::vector<double> table = randn(V * C, 7), dtable(V * C, 0.0);
    auto fwd = [&] { nn::cpu::embedding_forward(out.data(), tok.data(), table.data(), N, V, C); };
    loss(fwd);
    nn::cpu::embedding_backward(dtable.data(), tok.data(), W.data(), N, C);
    const double e = fd_check(table, dtable, [&] { return loss(fwd); });
    MESSAGE("embedding FD rel err: " << e);
    CHECK(e < kFdRelTol);
    tok[3] = static_cast<std::int32_t>(V);
    CHECK_THROWS_AS(fwd(), UserError);
  }
}

TEST_CASE("l2 normalization of rows: FD (float64)") {
  Mat<double> x = randm(9, 6, 11), W = randm(9, 6, 12), out, dx;
  Vec<double> r;
  auto f = [&] {
    mqar::l2norm_rows_forward(out, r, x, 1e-6);
    return wsum(out, W);
  };
  f();
  CHECK(out.row(2).norm() == doctest::Approx(1.0).epsilon(1e-6));
  mqar::l2norm_rows_backward(dx, W, x, r);
  std::vector<double> xv = flat(x);
  const double e = fd_check(xv, flat(dx), [&] {
    x = unflat(xv, 9, 6);
    return f();
  });
  MESSAGE("l2norm FD rel err: " << e);
  CHECK(e < kFdRelTol);
}

TEST_CASE("softmax head: FD of q, k, v (float64), T = 13") {
  const std::int64_t T = 13, d = 8;
  Mat<double> q = randm(T, d, 21), k = randm(T, d, 22), v = randm(T, d, 23), W = randm(T, d, 24), o, dq, dk, dv;
  Vec<double> lse;
  const double scale = 1.0 / std::sqrt(8.0);
  auto f = [&] {
    mqar::softmax_head_forward(o, lse, q, k, v, scale);
    return wsum(o, W);
  };
  f();
  // Row 0 attends only to itself: o_0 = v_0.
  CHECK((o.row(0) - v.row(0)).norm() < 1e-14);
  mqar::softmax_head_backward(dq, dk, dv, W, q, k, v, o, lse, scale);
  for (auto [M, G, name] : {std::tuple{&q, &dq, "q"}, std::tuple{&k, &dk, "k"}, std::tuple{&v, &dv, "v"}}) {
    std::vector<double> xv = flat(*M);
    const double e = fd_check(xv, flat(*G), [&] {
      *M = unflat(xv, T, d);
      return f();
    });
    *M = unflat(xv, T, d);
    MESSAGE("softmax head FD rel err d" << std::string(name) << ": " << e);
    CHECK(e < kFdRelTol);
  }
}

TEST_CASE("KATA heads: closed-form kernel = FeatureMap, quadratic = recurrent, FD of q, k, v per map") {
  const std::int64_t T = 13, d = 8;
  for (const char* spec : kKataMaps) {
    CAPTURE(spec);
    const FeatureMap map = FeatureMap::parse(spec, d);
    Mat<double> q = randm(T, d, 31), k = randm(T, d, 32), v = randm(T, d, 33), W = randm(T, d, 34), o, dq, dk, dv;
    Mat<double> A;
    mqar::cone_kernel(A, map, q, k);
    const Eigen::MatrixXd Aref = map.kernel_matrix(q, k);
    CHECK((A - Aref).norm() / Aref.norm() < kExactTol);
    Vec<double> den;
    auto f = [&] {
      mqar::kata_head_forward(o, den, map, q, k, v);
      return wsum(o, W);
    };
    f();
    const Mat<double> oref = kata_recurrent(map, q, k, v);
    CHECK((o - oref).norm() / oref.norm() < kExactTol);
    mqar::kata_head_backward(dq, dk, dv, W, map, q, k, v, o, den);
    double worst = 0;
    for (auto [M, G] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}}) {
      std::vector<double> xv = flat(*M);
      const double e = fd_check(xv, flat(*G), [&] {
        *M = unflat(xv, T, d);
        return f();
      });
      *M = unflat(xv, T, d);
      worst = std::max(worst, e);
    }
    MESSAGE("KATA head " << std::string(spec) << " FD rel err (max over q, k, v): " << worst);
    CHECK(worst < kFdRelTol);
  }
}

TEST_CASE("KATA heads, chunked O(T) form: = quadratic forward and backward for any chunk, FD of the two-pass backward") {
  const std::int64_t T = 13, d = 8;
  for (const char* spec : kKataMaps) {
    CAPTURE(spec);
    const FeatureMap map = FeatureMap::parse(spec, d);
    Mat<double> q = randm(T, d, 41), k = randm(T, d, 42), v = randm(T, d, 43), W = randm(T, d, 44);
    Mat<double> o, dq, dk, dv, oc, dqc, dkc, dvc;
    Vec<double> den, denc;
    mqar::kata_head_forward(o, den, map, q, k, v);
    mqar::kata_head_backward(dq, dk, dv, W, map, q, k, v, o, den);
    for (const std::int64_t C : {1, 4, 5, 13, 20}) {  // 13 = one chunk; 20 > T; 4, 5 leave a shorter last chunk
      CAPTURE(C);
      mqar::kata_head_forward_chunked(oc, denc, map, q, k, v, C);
      CHECK((oc - o).norm() / o.norm() < 1e-12);
      CHECK((denc - den).norm() / den.norm() < 1e-12);
      mqar::kata_head_backward_chunked(dqc, dkc, dvc, W, map, q, k, v, oc, denc, C);
      CHECK((dqc - dq).norm() / dq.norm() < 1e-10);
      CHECK((dkc - dk).norm() / dk.norm() < 1e-10);
      CHECK((dvc - dv).norm() / dv.norm() < 1e-10);
    }
    // FD of the chunked pair itself (chunk 4: three full chunks and a last one of 1 row)
    auto f = [&] {
      mqar::kata_head_forward_chunked(oc, denc, map, q, k, v, 4);
      return wsum(oc, W);
    };
    f();
    mqar::kata_head_backward_chunked(dqc, dkc, dvc, W, map, q, k, v, oc, denc, 4);
    double worst = 0;
    for (auto [M, G] : {std::pair{&q, &dqc}, std::pair{&k, &dkc}, std::pair{&v, &dvc}}) {
      std::vector<double> xv = flat(*M);
      const double e = fd_check(xv, flat(*G), [&] {
        *M = unflat(xv, T, d);
        return f();
      });
      *M = unflat(xv, T, d);
      worst = std::max(worst, e);
    }
    MESSAGE("chunked KATA head " << std::string(spec) << " FD rel err (max over q, k, v): " << worst);
    CHECK(worst < kFdRelTol);
  }
  // zero denominators (m2 without eps, zero query rows): o = 0 and no gradient, as in the quadratic form
  const FeatureMap m2 = FeatureMap::parse("m2:eps=0", d);
  Mat<double> q = randm(T, d, 45), k = randm(T, d, 46), v = randm(T, d, 47), W = randm(T, d, 48);
  for (std::int64_t t = 0; t < T; t += 3) q.row(t).setZero();
  Mat<double> o, dq, dk, dv, oc, dqc, dkc, dvc;
  Vec<double> den, denc;
  mqar::kata_head_forward(o, den, m2, q, k, v);
  mqar::kata_head_backward(dq, dk, dv, W, m2, q, k, v, o, den);
  mqar::kata_head_forward_chunked(oc, denc, m2, q, k, v, 4);
  mqar::kata_head_backward_chunked(dqc, dkc, dvc, W, m2, q, k, v, oc, denc, 4);
  CHECK(denc(0) == 0);
  CHECK(oc.row(0).norm() == 0);
  CHECK(dqc.row(0).norm() == 0);
  CHECK((oc - o).norm() / o.norm() < 1e-12);
  CHECK((dkc - dk).norm() / dk.norm() < 1e-10);
  CHECK((dvc - dv).norm() / dv.norm() < 1e-10);
  CHECK_THROWS_AS(mqar::kata_head_forward_chunked(oc, denc, m2, q, k, v, 0), UserError);
  // float instantiation: the same function to float precision
  using Mf = Mat<float>;
  Mf of, dqf, dkf, dvf;
  Vec<float> denf;
  const FeatureMap mp = FeatureMap::parse("m2:eps=1e-4", d);
  const Mat<double> qd = randm(T, d, 51), kd = randm(T, d, 52), vd = randm(T, d, 53), Wd = randm(T, d, 54);
  mqar::kata_head_forward_chunked<float>(of, denf, mp, qd.cast<float>(), kd.cast<float>(), vd.cast<float>(), 4);
  mqar::kata_head_backward_chunked<float>(dqf, dkf, dvf, Wd.cast<float>(), mp, qd.cast<float>(), kd.cast<float>(),
                                          vd.cast<float>(), of, denf, 4);
  mqar::kata_head_forward(o, den, mp, qd, kd, vd);
  mqar::kata_head_backward(dq, dk, dv, Wd, mp, qd, kd, vd, o, den);
  CHECK((of.cast<double>() - o).norm() / o.norm() < 1e-5);
  CHECK((dqf.cast<double>() - dq).norm() / dq.norm() < 1e-4);
}

TEST_CASE("delta rule: Neumann doubling = explicit inverse, chunked = recurrent, chunked backward FD to 1e-9") {
  // Neumann product against the LU inverse on a strictly lower N with O(1) entries.
  for (std::int64_t L : {1, 2, 3, 5, 8, 13, 64}) {
    Mat<double> N = randm(L, L, 40 + static_cast<std::uint64_t>(L), 0.3);
    N.triangularView<Eigen::Upper>().setZero();
    const Mat<double> I = Mat<double>::Identity(L, L);
    const Mat<double> inv = (I + N).inverse();
    CHECK((mqar::neumann_inverse(N) - inv).norm() / inv.norm() < 1e-14);
  }
  const std::int64_t T = 13, d = 4, dv = 3;
  const FeatureMap map = FeatureMap::parse("m2:eps=1e-4", d);
  Mat<double> qn, kn;
  Vec<double> r;
  mqar::l2norm_rows_forward(qn, r, randm(T, d, 51), 1e-6);
  mqar::l2norm_rows_forward(kn, r, randm(T, d, 52), 1e-6);
  Mat<double> pq = map.apply(qn), pk = map.apply(kn), v = randm(T, dv, 53), W = randm(T, dv, 54);
  Vec<double> beta(T);
  for (std::int64_t t = 0; t < T; ++t) beta(t) = 0.1 + 0.8 * rng::uniform(55, rng::kUser, static_cast<std::uint64_t>(t));
  const Mat<double> oref = mqar::delta_head_recurrent(pq, pk, v, beta);
  // Unit-norm ψ(k) (ℓ2-normalized M1 key, ε = 0) and β = 1: reading k_t right after writing it returns v_t (§2.11.4).
  {
    const FeatureMap m1 = FeatureMap::parse("m1", d);
    const Mat<double> ku = randm(T, d, 52).rowwise().normalized();
    Mat<double> pk1 = m1.apply(ku);
    Vec<double> one = Vec<double>::Ones(T);
    const Mat<double> o1 = mqar::delta_head_recurrent(pk1, pk1, v, one);
    CHECK((o1.row(T - 1) - v.row(T - 1)).norm() < 1e-12);
  }
  for (std::int64_t C : {1, 4, 5, 13, 16}) {
    CAPTURE(C);
    Mat<double> o;
    mqar::delta_head_forward(o, pq, pk, v, beta, C);
    CHECK((o - oref).norm() / oref.norm() < kExactTol);
  }
  for (std::int64_t C : {4, 5}) {  // 13 = 3·4 + 1 and 2·5 + 3: the last chunk is short
    CAPTURE(C);
    Mat<double> o, dpq, dpk, ddv;
    Vec<double> db;
    auto f = [&] {
      mqar::delta_head_forward(o, pq, pk, v, beta, C);
      return wsum(o, W);
    };
    f();
    mqar::delta_head_backward(dpq, dpk, ddv, db, W, pq, pk, v, beta, C);
    double worst = 0;
    for (auto [M, G] : {std::pair{&pq, &dpq}, std::pair{&pk, &dpk}, std::pair{&v, &ddv}}) {
      std::vector<double> xv = flat(*M);
      const std::int64_t c = M->cols();
      const double e = fd_check(
          xv, flat(*G),
          [&] {
            *M = unflat(xv, T, c);
            return f();
          },
          200);
      *M = unflat(xv, T, c);
      worst = std::max(worst, e);
    }
    std::vector<double> bv(beta.data(), beta.data() + T), gb(db.data(), db.data() + T);
    const double eb = fd_check(bv, gb, [&] {
      beta = Eigen::Map<const Vec<double>>(bv.data(), T);
      return f();
    });
    beta = Eigen::Map<const Vec<double>>(bv.data(), T);
    worst = std::max(worst, eb);
    MESSAGE("delta chunked backward C=" << C << " FD rel err (max over psi_q, psi_k, v, beta): " << worst);
    CHECK(worst < kDeltaFdTol);
  }
}

namespace {

struct TinyRun {
  MqarModel model;
  std::vector<double> params;
  std::vector<std::int32_t> in, lab;
  std::int64_t B = 2, T = 13;
};

TinyRun tiny(const std::string& mixer, bool rope = false, const std::string& backbone = "zoology",
             std::int64_t layers = 2) {
  MqarModelConfig c;
  c.mixer = mixer;
  c.rope = rope;
  c.backbone = backbone;
  c.n_layers = layers;
  c.vocab = 32;
  c.d_model = 16;
  c.heads = mixer == "softmax" ? 1 : 2;
  c.chunk = 4;
  TinyRun r;
  r.model = MqarModel::build(c);
  r.params = mqar_init_params(r.model, 9);
  // Larger weights than the init (and non-trivial gains / biases) so every path carries signal.
  for (std::size_t i = 0; i < r.params.size(); ++i) r.params[i] += 0.3 * rng::normal(10, rng::kUser, i);
  r.in.resize(static_cast<std::size_t>(r.B * r.T));
  r.lab.assign(r.in.size(), kIgnoreLabel);
  for (std::size_t i = 0; i < r.in.size(); ++i) r.in[i] = static_cast<std::int32_t>(rng::below(11, rng::kUser, i, 32));
  for (std::size_t i = 3; i < r.in.size(); i += 4) r.lab[i] = static_cast<std::int32_t>(rng::below(12, rng::kUser, i, 32));
  return r;
}

}  // namespace

TEST_CASE("whole model: FD of every parameter tensor per mixer (float64, T = 13, chunk 4)") {
  for (const char* mixer : {"softmax", "m1", "m2", "m4", "sigma2", "sigma4", "orthant", "lorentz", "delta-m1", "delta-m2"}) {
    CAPTURE(mixer);
    TinyRun r = tiny(mixer);
    MqarWorkspace<double> ws;
    const MqarForward f0 = mqar_forward(r.model, r.params.data(), ws, r.in.data(), r.lab.data(), r.B, r.T);
    REQUIRE(f0.labelled == 6);
    std::vector<double> g(r.params.size(), 0.0);
    mqar_backward(r.model, r.params.data(), g.data(), ws, 1.0 / static_cast<double>(f0.labelled));
    auto loss = [&] {
      MqarWorkspace<double> w2;
      const MqarForward f = mqar_forward(r.model, r.params.data(), w2, r.in.data(), r.lab.data(), r.B, r.T);
      return f.loss_sum / static_cast<double>(f.labelled);
    };
    CHECK(loss() == doctest::Approx(f0.loss_sum / 6).epsilon(1e-15));
    double worst = 0;
    std::string worst_name;
    for (const auto& v : r.model.layout.views()) {
      std::vector<double> sub(r.params.begin() + v.offset, r.params.begin() + v.offset + v.numel);
      std::vector<double> gsub(g.begin() + v.offset, g.begin() + v.offset + v.numel);
      const double e = fd_check(sub, gsub, [&] {
        std::copy(sub.begin(), sub.end(), r.params.begin() + v.offset);
        return loss();
      }, 24);
      std::copy(sub.begin(), sub.end(), r.params.begin() + v.offset);
      if (e > worst) {
        worst = e;
        worst_name = v.name;
      }
    }
    MESSAGE("model " << std::string(mixer) << " FD rel err: max " << worst << " (" << worst_name << ")");
    CHECK(worst < kFdRelTol);
  }
}

// The float32 forward / backward computes the float64 function: loss to 1e-4, gradient to 1e-4 (relative norm).
static void check_f32_against_f64(const TinyRun& r) {
  MqarWorkspace<double> wd;
  MqarWorkspace<float> wf;
  std::vector<float> pf(r.params.begin(), r.params.end());
  const MqarForward fd = mqar_forward(r.model, r.params.data(), wd, r.in.data(), r.lab.data(), r.B, r.T);
  const MqarForward ff = mqar_forward(r.model, pf.data(), wf, r.in.data(), r.lab.data(), r.B, r.T);
  CHECK(ff.loss_sum == doctest::Approx(fd.loss_sum).epsilon(1e-4));
  std::vector<double> gd(r.params.size(), 0.0);
  std::vector<float> gf(r.params.size(), 0.0f);
  mqar_backward(r.model, r.params.data(), gd.data(), wd, 1.0 / 6);
  mqar_backward(r.model, pf.data(), gf.data(), wf, 1.0 / 6);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < gd.size(); ++i) {
    num += (gf[i] - gd[i]) * (gf[i] - gd[i]);
    den += gd[i] * gd[i];
  }
  CHECK(std::sqrt(num / den) < 1e-4);
}

TEST_CASE("float32 path computes the float64 function (loss and gradient to float precision)") {
  for (const char* mixer : {"softmax", "m2", "delta-m2"}) {
    CAPTURE(mixer);
    check_f32_against_f64(tiny(mixer));
  }
}

TEST_CASE("forward refuses tokens and labels outside the vocabulary") {
  TinyRun r = tiny("m2");
  MqarWorkspace<double> ws;
  r.in[5] = 32;
  CHECK_THROWS_AS(mqar_forward(r.model, r.params.data(), ws, r.in.data(), r.lab.data(), r.B, r.T), UserError);
  r.in[5] = 3;
  r.lab[7] = 40;
  CHECK_THROWS_AS(mqar_forward(r.model, r.params.data(), ws, r.in.data(), r.lab.data(), r.B, r.T), UserError);
}

// ---------------------------------------------------------------------------------------------- RoPE, gated variants

namespace {

// Whole-model FD: worst ‖g − fd‖/‖fd‖ over every parameter tensor (24 entries each).
double model_fd(TinyRun& r, std::string& worst_name) {
  MqarWorkspace<double> ws;
  const MqarForward f0 = mqar_forward(r.model, r.params.data(), ws, r.in.data(), r.lab.data(), r.B, r.T);
  REQUIRE(f0.labelled == 6);
  std::vector<double> g(r.params.size(), 0.0);
  mqar_backward(r.model, r.params.data(), g.data(), ws, 1.0 / static_cast<double>(f0.labelled));
  auto loss = [&] {
    MqarWorkspace<double> w2;
    const MqarForward f = mqar_forward(r.model, r.params.data(), w2, r.in.data(), r.lab.data(), r.B, r.T);
    return f.loss_sum / static_cast<double>(f.labelled);
  };
  REQUIRE(std::isfinite(f0.loss_sum));
  double worst = 0;
  for (const auto& v : r.model.layout.views()) {
    std::vector<double> sub(r.params.begin() + v.offset, r.params.begin() + v.offset + v.numel);
    std::vector<double> gsub(g.begin() + v.offset, g.begin() + v.offset + v.numel);
    const double e = fd_check(sub, gsub, [&] {
      std::copy(sub.begin(), sub.end(), r.params.begin() + v.offset);
      return loss();
    }, 24);
    std::copy(sub.begin(), sub.end(), r.params.begin() + v.offset);
    if (e > worst) {
      worst = e;
      worst_name = v.name;
    }
  }
  return worst;
}

Mat<double> unit_rows(Mat<double> x) {
  for (std::int64_t t = 0; t < x.rows(); ++t) x.row(t).normalize();
  return x;
}

}  // namespace

TEST_CASE("gated variants (§2.11): parameter counts, state, init, names, no weight decay on A_log / dt_bias") {
  auto build = [](const std::string& mixer) {
    MqarModelConfig c;
    c.mixer = mixer;
    return MqarModel::build(c);
  };
  // §2.10: GatedKATA +258 (W_α ∈ R^{d×H} with bias; the paper's +260 has 2 unexplained), GatedDeltaKATA +516
  // (W_β 256 + a_proj 256 + A_log 2 + dt_bias 2); the convex gate has GatedKATA's parameters.
  CHECK(build("gated-m2").param_count() == 1134016 + 258);
  CHECK(build("convex-m2").param_count() == 1134016 + 258);
  CHECK(build("gated-sigma4").param_count() == 1134016 + 258);
  CHECK(build("gated-delta-m2").param_count() == 1134016 + 516);
  CHECK(build("gated-delta-sigma4").param_count() == 1134016 + 516);
  CHECK(build("gated-m2").kind == MixerKind::gated);
  CHECK(build("convex-sigma2").kind == MixerKind::convex);
  CHECK(build("gated-delta-m1").kind == MixerKind::gated_delta);
  CHECK(build("gated-delta-m2").map_spec == build("m2").map_spec);
  CHECK(build("gated-m2").state_size(4096) == 135168);
  CHECK(build("gated-delta-sigma4").state_size(4096) == 17408);  // §2.9: packed width 136 at H = 2
  MqarModelConfig rc;
  rc.mixer = "m2";
  rc.rope = true;
  CHECK(MqarModel::build(rc).param_count() == 1134016);  // RoPE has no parameters
  for (const char* bad : {"gated-m3", "gated-", "convex-delta-m2", "gated-delta-", "gated-softmax"}) {
    MqarModelConfig c;
    c.mixer = bad;
    CAPTURE(bad);
    CHECK_THROWS_AS(c.validate(), UserError);
  }
  rc.rope_base = 1;
  CHECK_THROWS_AS(rc.validate(), UserError);
  rc.rope_base = std::nan("");
  CHECK_THROWS_AS(rc.validate(), UserError);
  rc.rope_base = 1e4;
  rc.d_model = 18;
  rc.heads = 2;  // d_head 9: odd
  rc.mixer = "orthant";
  CHECK_THROWS_AS(rc.validate(), UserError);
  rc.d_model = 16;
  CHECK_NOTHROW(rc.validate());
  // CUDA support: the gated mixers are CPU only (exit 2 before anything runs); RoPE has a device path.
  CHECK(!rc.cpu_only());
  CHECK_NOTHROW(rc.require_cuda_support());
  MqarModelConfig g;
  g.mixer = "gated-delta-m2";
  CHECK(g.cpu_only());
  CHECK_THROWS_AS(g.require_cuda_support(), UserError);
  g.mixer = "delta-m2";
  CHECK(!g.cpu_only());
  CHECK_NOTHROW(g.require_cuda_support());
  // no weight decay exactly on A_log and dt_bias (§2.11.5)
  CHECK(MqarModel::no_weight_decay("l1.A_log"));
  CHECK(MqarModel::no_weight_decay("l3.dt_bias"));
  CHECK(!MqarModel::no_weight_decay("l1.walpha.w"));
  CHECK(!MqarModel::no_weight_decay("l1.wbeta.w"));
  // init: W_α ~ N(0, 0.02²), b_α = 0, exp(A_log) ~ U(0, 16), softplus(dt_bias) ~ U(1e-3, 1e-1)
  const MqarModel gd = build("gated-delta-m2");
  const std::vector<double> p = mqar_init_params(gd, 5);
  const auto& al = gd.layout.view("l1.A_log");
  const auto& dt = gd.layout.view("l1.dt_bias");
  for (std::int64_t j = 0; j < 2; ++j) {
    const double a = std::exp(p[static_cast<std::size_t>(al.offset + j)]);
    const double x = p[static_cast<std::size_t>(dt.offset + j)];
    const double sp = x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    CHECK(a > 0);
    CHECK(a < 16);
    CHECK(sp >= 1e-3 - 1e-15);
    CHECK(sp <= 1e-1 + 1e-15);
  }
  const auto& wa = gd.layout.view("l1.walpha.w");
  double s2 = 0;
  for (std::int64_t j = 0; j < wa.numel; ++j) s2 += p[static_cast<std::size_t>(wa.offset + j)] * p[static_cast<std::size_t>(wa.offset + j)];
  CHECK(std::sqrt(s2 / static_cast<double>(wa.numel)) == doctest::Approx(0.02).epsilon(0.1));
  const MqarModel gk = build("gated-m2");
  const std::vector<double> pk = mqar_init_params(gk, 5);
  const auto& wb = gk.layout.view("l1.walpha.b");
  for (std::int64_t j = 0; j < wb.numel; ++j) CHECK(pk[static_cast<std::size_t>(wb.offset + j)] == 0.0);
}

TEST_CASE("gated cores (§2.11.2, .3, .5): quadratic = token recurrence, FD of q, k, v, g, beta (float64)") {
  const std::int64_t T = 13, d = 8;
  for (const char* spec : {"m2:eps=1e-4", "m1:eps=1e-4", "sigma4:eps=1e-4", "orthant:eps=1e-6", "lorentz"}) {
    CAPTURE(spec);
    const FeatureMap map = FeatureMap::parse(spec, d);
    for (const bool delta : {false, true}) {
      CAPTURE(delta);
      // delta: unit q, k (the model ℓ2-normalizes them); gated: raw rows at scale 0.5
      Mat<double> q = delta ? unit_rows(randm(T, d, 41)) : randm(T, d, 41, 0.5);
      Mat<double> k = delta ? unit_rows(randm(T, d, 42)) : randm(T, d, 42, 0.5);
      Mat<double> v = randm(T, d, 43), W = randm(T, d, 44), o;
      Vec<double> g(T), beta(T);
      for (std::int64_t t = 0; t < T; ++t) {
        g(t) = -0.05 - 0.4 * std::abs(rng::normal(45, rng::kUser, static_cast<std::uint64_t>(t)));
        beta(t) = 1.0 / (1.0 + std::exp(-rng::normal(46, rng::kUser, static_cast<std::uint64_t>(t))));
      }
      auto f = [&] {
        if (delta)
          mqar::gated_delta_head_forward(o, map, q, k, v, beta, g);
        else
          mqar::gated_head_forward(o, map, q, k, v, g);
        return wsum(o, W);
      };
      f();
      const Vec<double> gamma = g.array().exp();
      const Eigen::MatrixXd pq = map.apply(q), pk = map.apply(k);
      const Mat<double> oref = mqar::gated_head_recurrent(pq, pk, v, gamma, delta ? &beta : nullptr);
      CHECK((o - oref).norm() / oref.norm() < kExactTol);
      Mat<double> dq, dk, dv;
      Vec<double> dg, db;
      if (delta)
        mqar::gated_delta_head_backward(dq, dk, dv, db, dg, W, map, q, k, v, beta, g);
      else
        mqar::gated_head_backward(dq, dk, dv, dg, W, map, q, k, v, g);
      double worst = 0;
      for (auto [M, G] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}}) {
        std::vector<double> xv = flat(*M);
        const double e = fd_check(xv, flat(*G), [&] {
          *M = unflat(xv, T, d);
          return f();
        });
        *M = unflat(xv, T, d);
        worst = std::max(worst, e);
      }
      std::vector<Vec<double>*> vecs = {&g};
      std::vector<Vec<double>*> grads = {&dg};
      if (delta) {
        vecs.push_back(&beta);
        grads.push_back(&db);
      }
      for (std::size_t j = 0; j < vecs.size(); ++j) {
        std::vector<double> xv(vecs[j]->data(), vecs[j]->data() + T);
        const std::vector<double> gv(grads[j]->data(), grads[j]->data() + T);
        const double e = fd_check(xv, gv, [&] {
          *vecs[j] = Eigen::Map<const Vec<double>>(xv.data(), T);
          return f();
        });
        *vecs[j] = Eigen::Map<const Vec<double>>(xv.data(), T);
        worst = std::max(worst, e);
      }
      MESSAGE(std::string(delta ? "gated-delta " : "gated ") << std::string(spec) << " core FD rel err: " << worst);
      CHECK(worst < kFdRelTol);
    }
  }
  // GatedDeltaKATA with γ = 1 is DeltaKATA (the chunked core) on the same features.
  const FeatureMap map = FeatureMap::parse("m2:eps=1e-4", d);
  const Mat<double> q = unit_rows(randm(T, d, 51)), k = unit_rows(randm(T, d, 52)), v = randm(T, d, 53);
  Vec<double> beta(T);
  for (std::int64_t t = 0; t < T; ++t) beta(t) = 0.2 + 0.05 * static_cast<double>(t % 7);
  Mat<double> og, od;
  mqar::gated_delta_head_forward(og, map, q, k, v, beta, Vec<double>(Vec<double>::Zero(T)));
  mqar::delta_head_forward(od, Mat<double>(map.apply(q)), Mat<double>(map.apply(k)), v, beta, 4);
  CHECK((og - od).norm() / od.norm() < kExactTol);
}

TEST_CASE("RoPE and gated mixers in the whole model: FD of every parameter tensor (float64, T = 13)") {
  struct Case {
    const char* mixer;
    bool rope;
  };
  for (const Case c : {Case{"softmax", true}, Case{"m2", true}, Case{"delta-m2", true}, Case{"gated-m2", false},
                       Case{"convex-m2", false}, Case{"gated-delta-m2", false}, Case{"gated-delta-sigma4", true},
                       Case{"convex-orthant", true}}) {
    CAPTURE(c.mixer);
    CAPTURE(c.rope);
    TinyRun r = tiny(c.mixer, c.rope);
    std::string worst_name;
    const double worst = model_fd(r, worst_name);
    MESSAGE("model " << std::string(c.mixer) << std::string(c.rope ? " +rope" : "") << " FD rel err: max " << worst << " (" << worst_name
                     << ")");
    CHECK(worst < kFdRelTol);
  }
}

TEST_CASE("RoPE changes the function, float32 = float64 for the new options") {
  for (const char* mixer : {"softmax", "m2", "gated-delta-m2"}) {
    CAPTURE(mixer);
    TinyRun a = tiny(mixer, false), b = tiny(mixer, true);
    MqarWorkspace<double> wa, wb;
    const double la = mqar_forward(a.model, a.params.data(), wa, a.in.data(), a.lab.data(), a.B, a.T).loss_sum;
    const double lb = mqar_forward(b.model, b.params.data(), wb, b.in.data(), b.lab.data(), b.B, b.T).loss_sum;
    CHECK(std::abs(la - lb) > 1e-6 * std::abs(la));  // same parameters, RoPE on: another function
  }
  for (const auto& [mixer, rope] : {std::pair{"convex-m2", true}, std::pair{"gated-delta-m2", true},
                                     std::pair{"gated-sigma4", false}}) {
    CAPTURE(mixer);
    check_f32_against_f64(tiny(mixer, rope));
  }
}

TEST_CASE("transformer backbone (E.2): layout, parameter count, init, FD of every parameter tensor, float32 = float64") {
  // Parameter count: V·D (tied embedding) + 2D (final norm) + per layer 4D (two norms) + the mixer + the MLP
  // (fc1 4D×D + 4D, fc2 D×4D + D); softmax's mixer is 3D² + 3D + D² + D, so 12D² + 13D per layer in all.
  MqarModelConfig c;
  c.backbone = "transformer";
  const MqarModel soft = MqarModel::build(c);
  const std::int64_t D = 128, V = 8192;
  CHECK(soft.param_count() == V * D + 2 * D + 2 * (12 * D * D + 13 * D));
  CHECK(soft.param_count() == 1445376);
  CHECK(soft.mixer_layers() == 2);
  CHECK(soft.state_size(4096) == 2 * 2 * D * 4096);  // a KV cache per mixer layer
  c.mixer = "m2";
  const MqarModel m2 = MqarModel::build(c);
  MqarModelConfig z = c;
  z.backbone = "zoology";
  const MqarModel m2z = MqarModel::build(z);
  // Every layer holds the KATA mixer (the Zoology model's layer 1 only) and an MLP; no BaseConv.
  const std::int64_t kata_mixer = m2z.layout.numel() - V * D - 2 * D - 2 * 4 * D - (D * 3 + D + D * D + D);
  CHECK(m2.param_count() == V * D + 2 * D + 2 * (4 * D + kata_mixer + 8 * D * D + 5 * D));
  CHECK(m2.state_size(4096) == 2 * m2z.state_size(4096));
  for (const auto& v : m2.layout.views()) {  // no BaseConv tensors (l<i>.conv.*, l<i>.proj.*)
    CHECK(v.name.find(".conv.") == std::string::npos);
    CHECK(v.name.find(".proj.") == std::string::npos);
  }
  // Init: fc1 like the input projections (std 0.02), fc2 like W_o (0.02 / sqrt(2 n_layers)), biases 0.
  const std::vector<double> p = mqar_init_params(m2, 3);
  auto stats = [&](const std::string& name) {
    const auto& v = m2.layout.view(name);
    double s2 = 0, mx = 0;
    for (std::int64_t j = 0; j < v.numel; ++j) {
      const double x = p[static_cast<std::size_t>(v.offset + j)];
      s2 += x * x;
      mx = std::max(mx, std::abs(x));
    }
    return std::pair{std::sqrt(s2 / static_cast<double>(v.numel)), mx};
  };
  CHECK(stats("l0.fc1.w").first == doctest::Approx(0.02).epsilon(0.03));
  CHECK(stats("l1.fc2.w").first == doctest::Approx(0.02 / 2.0).epsilon(0.03));
  CHECK(stats("l0.fc1.b").second == 0.0);
  CHECK(stats("l1.fc2.b").second == 0.0);
  // Bad settings: an unknown backbone; the Zoology backbone keeps its even layer count, the transformer does not.
  MqarModelConfig bad;
  bad.backbone = "mlp";
  CHECK_THROWS_AS(bad.validate(), UserError);
  bad.backbone = "zoology";
  bad.n_layers = 3;
  CHECK_THROWS_AS(bad.validate(), UserError);
  bad.backbone = "transformer";
  CHECK_NOTHROW(bad.validate());
  bad.n_layers = 0;
  CHECK_THROWS_AS(bad.validate(), UserError);

  struct Case {
    const char* mixer;
    std::int64_t layers;
  };
  for (const Case k : {Case{"softmax", 2}, Case{"m2", 2}, Case{"sigma2", 1}, Case{"delta-m2", 2}, Case{"m1", 3}}) {
    CAPTURE(k.mixer);
    CAPTURE(k.layers);
    TinyRun r = tiny(k.mixer, false, "transformer", k.layers);
    std::string worst_name;
    const double worst = model_fd(r, worst_name);
    MESSAGE("transformer backbone " << std::string(k.mixer) << " x" << k.layers << " FD rel err: max " << worst << " ("
                                    << worst_name << ")");
    CHECK(worst < kFdRelTol);
  }
  for (const char* mixer : {"softmax", "m2", "delta-m2"}) {
    CAPTURE(mixer);
    check_f32_against_f64(tiny(mixer, false, "transformer"));
  }
  // The MLP changes the function: the same embedding and mixer weights through the two backbones differ.
  TinyRun a = tiny("m2", false, "transformer");
  MqarWorkspace<double> wa;
  const double la = mqar_forward(a.model, a.params.data(), wa, a.in.data(), a.lab.data(), a.B, a.T).loss_sum;
  CHECK(std::isfinite(la));
  CHECK(wa.layers[0].fc2.size() == static_cast<std::size_t>(a.B * a.T * 16));
  double fc2_norm = 0;
  for (double x : wa.layers[1].fc2) fc2_norm += x * x;
  CHECK(fc2_norm > 1e-6);  // the MLP output enters the residual stream
}

TEST_CASE("zoology-mlp backbone: zoology's layers plus the MLP in each, FD of every parameter tensor, f32 = f64") {
  // Exactly the Zoology model's tensors plus fc1 / fc2 in every layer (8D² + 5D each).
  const std::int64_t D = 128;
  for (const char* mixer : {"softmax", "sigma2"}) {
    CAPTURE(mixer);
    MqarModelConfig c;
    c.mixer = mixer;
    const MqarModel zoo = MqarModel::build(c);
    c.backbone = "zoology-mlp";
    const MqarModel zm = MqarModel::build(c);
    CHECK(zm.has_mlp());
    CHECK_FALSE(zm.transformer());
    CHECK(zm.param_count() == zoo.param_count() + 2 * (8 * D * D + 5 * D));
    CHECK(zm.mixer_layers() == 1);
    CHECK(zm.state_size(4096) == zoo.state_size(4096));
    CHECK(zm.layout.view("l0.conv.w").numel == zoo.layout.view("l0.conv.w").numel);  // layer 0 is BaseConv
    CHECK(zm.layout.view("l0.fc1.w").numel == 4 * D * D);
    CHECK(zm.layout.view("l1.fc2.w").numel == 4 * D * D);
  }
  MqarModelConfig bad;
  bad.backbone = "zoology-mlp";
  bad.n_layers = 3;  // BaseConv and mixer alternate: an even count
  CHECK_THROWS_AS(bad.validate(), UserError);
  for (const char* mixer : {"softmax", "m2", "sigma2", "delta-m2"}) {
    CAPTURE(mixer);
    TinyRun r = tiny(mixer, false, "zoology-mlp", 2);
    std::string worst_name;
    const double worst = model_fd(r, worst_name);
    MESSAGE("zoology-mlp backbone " << std::string(mixer) << " FD rel err: max " << worst << " (" << worst_name << ")");
    CHECK(worst < kFdRelTol);
    check_f32_against_f64(tiny(mixer, false, "zoology-mlp"));
  }
  // The MLP is on the BaseConv layer too: its output reaches the residual stream there.
  TinyRun a = tiny("softmax", false, "zoology-mlp");
  MqarWorkspace<double> wa;
  CHECK(std::isfinite(mqar_forward(a.model, a.params.data(), wa, a.in.data(), a.lab.data(), a.B, a.T).loss_sum));
  double fc2_norm = 0;
  for (double x : wa.layers[0].fc2) fc2_norm += x * x;
  CHECK(fc2_norm > 1e-6);
}

TEST_CASE("GPU mixer-core variant table: auto picks the first that applies; unknown or inapplicable names refused") {
  auto model = [](const char* mixer, std::int64_t d_model, std::int64_t heads) {
    MqarModelConfig c;
    c.mixer = mixer;
    c.d_model = d_model;
    c.heads = heads;
    c.vocab = 64;
    return MqarModel::build(c);
  };
  CHECK(mqar_mixer_kernel_names() == "auto|gemm-psi|gemm|tiled|chunked-eval");
  CHECK(resolve_mixer_kernel(model("softmax", 128, 2), "auto") == "gemm");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "auto") == "gemm");
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "auto") == "gemm-psi");  // gemm_psi_pays (below)
  CHECK(resolve_mixer_kernel(model("orthant", 128, 2), "auto") == "tiled");
  CHECK(resolve_mixer_kernel(model("delta-m2", 128, 2), "auto") == "gemm");  // kernel space up to 512 tokens
  CHECK(resolve_mixer_kernel(model("delta-m2", 128, 2), "tiled") == "tiled");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "tiled") == "tiled");
  // d_head 256 (one head of d_model 256): only the gemm variant covers it.
  CHECK(resolve_mixer_kernel(model("softmax", 256, 1), "auto") == "gemm");
  CHECK_THROWS_AS(resolve_mixer_kernel(model("softmax", 256, 1), "tiled"), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("delta-m2", 256, 1), "auto"), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("orthant", 128, 2), "gemm"), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("m2", 128, 2), "wgmma"), UserError);
  // Long sequences: auto passes over gemm once one sequence's T² buffers exceed 1 GiB (softmax, one head:
  // 2·T²·4 bytes, so T = 8192 needs 512 MiB and T = 16384 needs 2 GiB), unless nothing else applies.
  CHECK(mqar_gemm_bytes_per_sequence(model("softmax", 128, 1), 8192) == 2.0 * 8192 * 8192 * 4);
  CHECK(mqar_gemm_bytes_per_sequence(model("m2", 128, 2), 100) == 4.0 * 2 * 100 * 100 * 4);
  CHECK(mqar_gemm_bytes_per_sequence(model("sigma2", 128, 2), 100) == 6.0 * 2 * 100 * 100 * 4);
  // DeltaKATA: (q,k) and (k,k) block products, A_qk, A_kk and two cotangents per head up to kDeltaGemmMaxT; none
  // beyond (the chunked core runs those lengths), so auto keeps gemm at evaluation lengths.
  CHECK(mqar_gemm_bytes_per_sequence(model("delta-m2", 128, 2), 100) == 8.0 * 2 * 100 * 100 * 4);
  CHECK(mqar_gemm_bytes_per_sequence(model("delta-m2", 128, 2), kDeltaGemmMaxT + 1) == 0.0);
  CHECK(resolve_mixer_kernel(model("delta-m2", 128, 2), "auto", 4096) == "gemm");
  CHECK(resolve_mixer_kernel(model("softmax", 128, 1), "auto", 8192) == "gemm");
  CHECK(resolve_mixer_kernel(model("softmax", 128, 1), "auto", 16384) == "tiled");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "auto", 16384) == "tiled");
  CHECK(resolve_mixer_kernel(model("softmax", 256, 1), "auto", 16384) == "gemm");  // tiled stops at d_head 128
  CHECK(resolve_mixer_kernel(model("softmax", 128, 1), "gemm", 16384) == "gemm");  // named: the user's choice
  // One job's plan: the variant per length. Σ4's block-product gemm (16 block products + P + dA per head, H = 2)
  // needs 2.4 GB at T = 4096 and 9.4 MB at the training length 256; gemm-psi (A, P, dA and the ψ rows) 0.42 GB at
  // 4096 and 6.4 GB at 16384: auto runs gemm-psi up to 4096 and tiled beyond (until the fourteenth session one
  // choice for the longest length put the whole job on one variant).
  CHECK(mqar_gemm_bytes_per_sequence(model("sigma4", 128, 2), 4096) == 18.0 * 2 * 4096 * 4096 * 4);
  const MixerKernelPlan s4 = plan_mixer_kernels(model("sigma4", 128, 2), "auto", {256, 4096, 512, 256, 16384});
  REQUIRE(s4.by_length.size() == 4);
  CHECK(s4.by_length.front().first == 256);
  CHECK(s4.at(256) == "gemm-psi");
  CHECK(s4.at(512) == "gemm-psi");
  CHECK(s4.at(4096) == "gemm-psi");
  CHECK(s4.at(16384) == "tiled");
  CHECK(s4.name == "gemm-psi+tiled");
  // M2 (2 + 2 blocks per head, H = 2): 537 MB at T = 4096 and 2.1 GB at 8192: gemm, then tiled.
  const MixerKernelPlan m2p = plan_mixer_kernels(model("m2", 128, 2), "auto", {256, 4096, 8192});
  CHECK(m2p.at(4096) == "gemm");
  CHECK(m2p.at(8192) == "tiled");
  CHECK(m2p.name == "gemm+tiled");
  // M4 (4 + 2 blocks): 805 MB at T = 4096, all gemm; named variants hold at every length.
  CHECK(plan_mixer_kernels(model("m4", 128, 2), "auto", {256, 4096}).name == "gemm");
  CHECK(plan_mixer_kernels(model("sigma4", 128, 2), "gemm", {256, 4096}).name == "gemm");
  CHECK(plan_mixer_kernels(model("sigma4", 128, 2), "tiled", {256, 4096}).name == "tiled");
  CHECK(plan_mixer_kernels(model("orthant", 128, 2), "auto", {256}).name == "tiled");
  CHECK(plan_mixer_kernels(model("m2", 128, 2), "auto", {}).name == "gemm");  // no length: training lengths
  CHECK_THROWS_AS(plan_mixer_kernels(model("orthant", 128, 2), "gemm", {256}), UserError);
  // Forward-only (evaluation) lengths: auto takes chunked-eval for KATA where chunked_eval_pays (the H200 cost
  // model: Σ4 from T ≈ 170, Σ2 / M4 from ≈ 1500, M2 from ≈ 4400, M1 from ≈ 12,000); never for a trained length
  // (it has no backward), nor for softmax or DeltaKATA (it does not apply).
  const std::vector<std::int64_t> train{64, 128, 256}, eval{512, 1024, 2048, 3072, 4096};
  const MixerKernelPlan e4 = plan_mixer_kernels(model("sigma4", 128, 2), "auto", train, eval);
  CHECK(e4.at(256) == "gemm-psi");
  CHECK(e4.at(512) == "chunked-eval");
  CHECK(e4.at(1024) == "chunked-eval");
  CHECK(e4.at(4096) == "chunked-eval");
  CHECK(e4.name == "gemm-psi+chunked-eval");
  CHECK(plan_mixer_kernels(model("softmax", 128, 2), "auto", train, eval).name == "gemm");
  CHECK(plan_mixer_kernels(model("delta-m2", 128, 2), "auto", train, eval).name == "gemm");
  CHECK(plan_mixer_kernels(model("orthant", 128, 2), "auto", train, eval).name == "tiled+chunked-eval");
  // A length both trained and evaluated counts as trained.
  CHECK(plan_mixer_kernels(model("m2", 128, 2), "auto", {2048}, {2048, 4096}).at(2048) == "gemm");
  // Named chunked-eval: every forward-only length on it, the trained ones on auto's choice.
  const MixerKernelPlan n2 = plan_mixer_kernels(model("m2", 128, 2), "chunked-eval", train, eval);
  CHECK(n2.at(256) == "gemm");
  CHECK(n2.at(512) == "chunked-eval");
  CHECK(n2.name == "gemm+chunked-eval");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "chunked-eval") == "gemm");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "chunked-eval", 100, true) == "chunked-eval");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "auto", 512, true) == "gemm");
  CHECK(resolve_mixer_kernel(model("m2", 128, 2), "auto", 4096, true) == "gemm");
  CHECK(resolve_mixer_kernel(model("m1", 128, 2), "auto", 4096, true) == "gemm");
  CHECK(resolve_mixer_kernel(model("sigma2", 128, 2), "auto", 1024, true) == "gemm");
  CHECK(resolve_mixer_kernel(model("sigma2", 128, 2), "auto", 2048, true) == "chunked-eval");
  CHECK(resolve_mixer_kernel(model("m4", 128, 2), "auto", 2048, true) == "chunked-eval");
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "auto", 256, false) == "gemm-psi");  // trained: not chunked-eval
  CHECK(plan_mixer_kernels(model("m2", 128, 2), "auto", train, eval).name == "gemm");
  CHECK_THROWS_AS(resolve_mixer_kernel(model("softmax", 128, 2), "chunked-eval", 4096, true), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("delta-m2", 128, 2), "chunked-eval"), UserError);
  // gemm-psi: KATA with the PSD maps only; auto takes it where it pays (Σ4 at d_head 64, by the H200 timings),
  // the block-product gemm for M1, M2, M4, Σ2.
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "gemm-psi") == "gemm-psi");
  CHECK(resolve_mixer_kernel(model("m2", 256, 1), "gemm-psi", 4096, true) == "gemm-psi");
  CHECK(plan_mixer_kernels(model("sigma4", 128, 2), "gemm-psi", train, eval).name == "gemm-psi");
  CHECK_THROWS_AS(resolve_mixer_kernel(model("orthant", 128, 2), "gemm-psi"), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("softmax", 128, 2), "gemm-psi"), UserError);
  CHECK_THROWS_AS(resolve_mixer_kernel(model("delta-m2", 128, 2), "gemm-psi"), UserError);
  CHECK(gemm_psi_pays(model("sigma4", 128, 2)));
  for (const char* mx : {"m1", "m2", "m4", "sigma2"}) {
    CHECK_FALSE(gemm_psi_pays(model(mx, 128, 2)));
    for (const std::int64_t T : {std::int64_t(0), std::int64_t(256), std::int64_t(4096), std::int64_t(16384)})
      CHECK(resolve_mixer_kernel(model(mx, 128, 2), "auto", T) != "gemm-psi");
  }
  CHECK_FALSE(gemm_psi_pays(model("softmax", 128, 2)));
  CHECK_FALSE(gemm_psi_pays(model("orthant", 128, 2)));
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "auto", 256) == "gemm-psi");
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "auto") == "gemm-psi");
  // the Σ4 row of Table 2: trained lengths on gemm-psi, the evaluation lengths on chunked-eval
  CHECK(plan_mixer_kernels(model("sigma4", 128, 2), "auto", train, eval).name == "gemm-psi+chunked-eval");
  // T² beyond kGemmAutoBytes: neither gemm variant, the tiled core (trained at that length)
  CHECK(resolve_mixer_kernel(model("sigma4", 128, 2), "auto", 16384) == "tiled");
  CHECK(mqar_psi_gemm_bytes_per_sequence(model("sigma4", 128, 2), 256) ==
        doctest::Approx(2.0 * (3.0 * 256 * 256 + 4.0 * 136 * 256) * 4.0));
}

TEST_CASE("kata bench --shapes table9 plan: the mixer kernel from the trainer's table, gemm only where T x T fits") {
  MixerBenchItem it;
  it.mixer = "m2";
  it.B = 8;
  it.H = 16;
  it.d = 64;
  it.T = 4096;
  const std::size_t big = std::size_t(140) << 30;  // an H200's memory
  CHECK(mixer_bench_kernel(it, big) == "gemm");
  it.T = 32768;  // one sequence's T x T blocks (16 heads, (2 + 2) blocks, fp32) are 275 GB: the tiled core runs
  CHECK(mixer_bench_kernel(it, big) == "tiled");
  it.kernel = "gemm";
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  it.kernel = "tiled";
  CHECK(mixer_bench_kernel(it, big) == "tiled");
  CHECK(mixer_bench_bytes(it, "tiled") > std::size_t(8) << 30);  // q|k|v, gradients, o, dout at B·T = 262,144
  it.kernel = "wgmma";
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  it.kernel = "auto";
  it.mixer = "orthant";  // no closed form: the gemm variant does not apply
  it.T = 1024;
  CHECK(mixer_bench_kernel(it, big) == "tiled");
  it.mixer = "delta-m2";  // not a softmax / KATA core
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  it.mixer = "softmax";
  CHECK(mixer_bench_kernel(it, big) == "gemm");
  it.mixer = "m3x";
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  // mma: the bf16 tensor-core pair (quadratic forward + kernels/kata_attention_backward.cu), KATA M_g maps at d_head
  // 32 and 64 in a CUDA build; refused (exit 2, saying why) elsewhere
  it.kernel = "mma";
  it.T = 32768;
  for (const char* mx : {"softmax", "sigma2", "orthant"}) {
    it.mixer = mx;
    CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  }
  it.mixer = "m2";
  CHECK(mixer_bench_bytes(it, "mma") == std::size_t(8) * 8 * 16 * 32768 * 64 * 2 + std::size_t(2) * 8 * 16 * 32768 * 4);
#ifdef MEMCAP_HAVE_CUDA
  CHECK(mixer_bench_kernel(it, big) == "mma");
  it.d = 128;  // d_head 128 has no tensor-core backward yet
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
  it.d = 64;
#else
  CHECK_THROWS_AS(mixer_bench_kernel(it, big), UserError);
#endif
  it.kernel = "auto";
#ifndef MEMCAP_HAVE_CUDA
  it.mixer = "m2";
  CHECK_THROWS_AS(plan_mixer_bench(it), DeviceError);
#endif
}
