// SSFR task and attention block (spec hebbian.md §6.1, §6.2; nn/ssfr_*.hpp, mlp/ssfr_setup.hpp):
// generator invariants (positions, target only at Q, token ranges, chi-square tests of p, s, key
// and junk draws, counter layout), central finite differences for every new layer and for the whole
// block (each trainable set × attention residual on/off × each kind of inserted MLP), the Q-only path
// against the full-sequence oracle (§8.1.10), and the training loop (evaluation cadence, running
// maxima, learning on a small problem, non-finite loss → NumericError naming the step).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/threads.hpp"
#include "mlp/ssfr_setup.hpp"
#include "nn/ssfr_data.hpp"
#include "nn/ssfr_model.hpp"
#include "nn/ssfr_train.hpp"

using namespace memcap;
using namespace memcap::nn;

namespace {

constexpr double kFdStep = 1e-6;       // central-difference step
constexpr double kFdRelTol = 1e-6;     // ||analytic − FD|| / ||FD|| in float64
constexpr double kSameMathTol = 1e-12; // two exact evaluations of one function (other order of sums)
// Chi-square critical values at p = 1e-4 (the draws are fixed by the seed, so each test is one
// deterministic outcome; a correct generator passes with probability 0.9999 per statistic).
constexpr double kChi2_4 = 23.51, kChi2_15 = 42.58, kChi2_24 = 51.18, kChi2_2 = 18.42;

std::vector<double> randu(std::int64_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = lo + (hi - lo) * rng::uniform(seed, rng::kUser + 3, static_cast<std::uint64_t>(i));
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Central differences of f over every entry of x (f reads x), against the analytic grad.
double fd_check(const std::function<double()>& f, std::vector<double>& x, const std::vector<double>& grad) {
  std::vector<double> num(x.size()), ana(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double fp = f();
    x[i] = x0 - kFdStep;
    const double fm = f();
    x[i] = x0;
    num[i] = (fp - fm) / (2 * kFdStep);
    ana[i] = grad[i];
  }
  return rel_err(ana, num);
}

double chi2(const std::vector<std::int64_t>& counts) {
  double n = 0;
  for (auto c : counts) n += static_cast<double>(c);
  const double e = n / static_cast<double>(counts.size());
  double s = 0;
  for (auto c : counts) s += (static_cast<double>(c) - e) * (static_cast<double>(c) - e) / e;
  return s;
}

std::vector<std::int32_t> iota_map(std::int64_t F) {
  std::vector<std::int32_t> m(static_cast<std::size_t>(F));
  for (std::int64_t i = 0; i < F; ++i) m[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 5 + 3) % F);
  return m;
}

// A small SSFR problem with an inserted MLP from the memcap constructions.
mlp::SsfrSetup small_setup(const std::string& mlp_text, bool vo, bool residual, std::int64_t d = 8,
                           std::int64_t F = 16, std::int64_t width = 24) {
  mlp::SsfrSetupSpec spec;
  spec.task = SsfrTask::make(F, 1, 2, 3);
  spec.block.dim = d;
  spec.block.vo_trainable = vo;
  spec.block.attn_residual = residual;
  spec.width = mlp_text == "identity" ? 0 : width;
  spec.seed = 7;
  return mlp::make_ssfr_setup(spec, mlp::parse_ssfr_mlp(mlp_text), nullptr);
}

// Runs body(setup) on small_setup(mt, vo, res) for every MLP text × trainable set (vo) × attention
// residual, the case CAPTUREd for the checks inside.
template <class Body>
void for_each_block_case(const std::vector<std::string>& mlps, Body&& body) {
  for (const auto& mt : mlps)
    for (const bool vo : {false, true})
      for (const bool res : {false, true}) {
        CAPTURE(mt);
        CAPTURE(vo);
        CAPTURE(res);
        body(small_setup(mt, vo, res));
      }
}

// Parameters with entries large enough that every gradient is well above round-off.
std::vector<double> test_params(const SsfrBlockConfig& cfg, std::uint64_t seed) {
  return randu(ssfr_layout(cfg).numel(), seed, -0.6, 0.6);
}

}  // namespace

// ---- generator ---------------------------------------------------------------------------------

TEST_CASE("SSFR task sizes: defaults and refusals") {
  const SsfrTask t = SsfrTask::make(64, 4, 4, 4);
  CHECK(t.seq_len == 11);
  CHECK(t.vocab() == 69);
  CHECK(t.query_token() == 68);
  CHECK_THROWS_AS(SsfrTask::make(64, 4, 4, 4, 10), UserError);  // J too long for T
  CHECK_THROWS_WITH_AS(SsfrTask::make(64, 9, 9, 9, 20), doctest::Contains("too long"), UserError);
  CHECK_THROWS_AS(SsfrTask::make(64, 5, 4, 4), UserError);      // J_min > J_max
  CHECK_THROWS_AS(SsfrTask::make(64, 2, 2, 0), UserError);      // no junk vocabulary
  CHECK_NOTHROW(SsfrTask::make(64, 0, 0, 0));                   // no junk at all: T = 3
  CHECK_THROWS_AS(SsfrTask::make(0, 1, 1, 1), UserError);
  CHECK_THROWS_AS(SsfrTask::make(2147483647LL, 1, 1, 1), UserError);  // vocabulary beyond int32 ids
  CHECK_THROWS_AS(SsfrTask::make(64, 600, 600, 4), UserError);  // beyond the 1024 counters of a sequence
  CHECK_THROWS_AS(SsfrTask::make(64, 4, 4, 4, 1022), UserError);
}

TEST_CASE("SSFR batches: positions, token ranges, target only at Q, padding") {
  const SsfrTask task = SsfrTask::make(16, 2, 6, 5, 20);  // T = 20 > 2·6 + 3: padding after the value
  const auto map = iota_map(16);
  SsfrBatch b;
  ssfr_batch(b, task, map.data(), 500, 3, rng::kSsfrTrain, 4);
  REQUIRE(b.B == 500);
  REQUIRE(b.T == 20);
  const std::int32_t F = 16, Q = task.query_token();
  for (std::int64_t i = 0; i < b.B; ++i) {
    const std::int32_t p = b.prefix[i], s = b.suffix[i], q = b.query_pos[i], k = b.key[i];
    REQUIRE(p >= 2);
    REQUIRE(p <= 6);
    REQUIRE(s >= 2);
    REQUIRE(s <= 6);
    REQUIRE(q == p + s + 1);
    REQUIRE(k >= 0);
    REQUIRE(k < F);
    REQUIRE(b.target[i] == map[static_cast<std::size_t>(k)]);
    const std::int32_t* tok = b.tokens.data() + i * b.T;
    for (std::int32_t t = 0; t < b.T; ++t) {
      if (t == p) {
        REQUIRE(tok[t] == k);
      } else if (t < q) {
        REQUIRE(tok[t] >= F);  // junk
        REQUIRE(tok[t] < Q);
      } else if (t == q) {
        REQUIRE(tok[t] == Q);
      } else if (t == q + 1) {
        REQUIRE(tok[t] == map[static_cast<std::size_t>(k)]);  // value token: input only
      } else {
        REQUIRE(tok[t] == kSsfrPad);
      }
    }
    // The query token appears once, at Q; fact tokens appear only at p and (as the value) at Q + 1.
    REQUIRE(std::count(tok, tok + b.T, Q) == 1);
  }
}

TEST_CASE("SSFR batches: counter layout, determinism and independence") {
  const SsfrTask task = SsfrTask::make(32, 1, 3, 4);
  const auto map = iota_map(32);
  SsfrBatch a, b, c;
  ssfr_batch(a, task, map.data(), 64, 11, rng::kSsfrTrain, 7);
  ssfr_batch(b, task, map.data(), 64, 11, rng::kSsfrTrain, 7);
  CHECK(a.tokens == b.tokens);
  ssfr_batch(c, task, map.data(), 64, 11, rng::kSsfrTrain, 8);
  CHECK(a.tokens != c.tokens);
  ssfr_batch(c, task, map.data(), 64, 11, rng::kSsfrEval, 7);
  CHECK(a.tokens != c.tokens);
  ssfr_batch(c, task, map.data(), 64, 12, rng::kSsfrTrain, 7);
  CHECK(a.tokens != c.tokens);
  // Sequence i of batch 7 is sequence 7·64 + i of the stream, whatever fills the batch.
  std::vector<std::int32_t> tok(static_cast<std::size_t>(task.seq_len));
  for (std::int64_t i : {0, 1, 33, 63}) {
    const SsfrSeqInfo s = ssfr_draw(tok.data(), map.data(), task.dims(), 11, rng::kSsfrTrain,
                                    ssfr_sequence_index(7, 64, static_cast<std::uint64_t>(i)));
    CHECK(s.key == a.key[static_cast<std::size_t>(i)]);
    CHECK(std::equal(tok.begin(), tok.end(), a.tokens.begin() + i * task.seq_len));
  }
  // The map changes only the value token and the target.
  auto map2 = map;
  std::reverse(map2.begin(), map2.end());
  ssfr_batch(c, task, map2.data(), 64, 11, rng::kSsfrTrain, 7);
  CHECK(c.key == a.key);
  CHECK(c.query_pos == a.query_pos);
  for (std::int64_t i = 0; i < 64; ++i)
    for (std::int64_t t = 0; t <= a.query_pos[static_cast<std::size_t>(i)]; ++t)
      CHECK(c.tokens[static_cast<std::size_t>(i * task.seq_len + t)] ==
            a.tokens[static_cast<std::size_t>(i * task.seq_len + t)]);
}

TEST_CASE("SSFR batches: p, s, (p, s), keys and junk tokens are uniform (chi-square, p = 1e-4)") {
  const SsfrTask task = SsfrTask::make(16, 2, 6, 3);
  const auto map = iota_map(16);
  SsfrBatch b;
  ssfr_batch(b, task, map.data(), 20000, 42, rng::kSsfrTrain, 0);
  std::vector<std::int64_t> cp(5), cs(5), cps(25), ck(16), cj(3);
  for (std::int64_t i = 0; i < b.B; ++i) {
    ++cp[static_cast<std::size_t>(b.prefix[i] - 2)];
    ++cs[static_cast<std::size_t>(b.suffix[i] - 2)];
    ++cps[static_cast<std::size_t>((b.prefix[i] - 2) * 5 + b.suffix[i] - 2)];
    ++ck[static_cast<std::size_t>(b.key[i])];
    for (std::int32_t t = 0; t < b.query_pos[i]; ++t)
      if (t != b.prefix[i]) ++cj[static_cast<std::size_t>(b.tokens[static_cast<std::size_t>(i * b.T + t)] - 16)];
  }
  CHECK(chi2(cp) < kChi2_4);
  CHECK(chi2(cs) < kChi2_4);
  CHECK(chi2(cps) < kChi2_24);  // p and s independent
  CHECK(chi2(ck) < kChi2_15);
  CHECK(chi2(cj) < kChi2_2);
  // Mean p = (2 + 6) / 2 = 4 within 5 standard errors (sd of U{2..6} = √2).
  double mean = 0;
  for (auto v : b.prefix) mean += v;
  mean /= static_cast<double>(b.B);
  CHECK(std::abs(mean - 4.0) < 5 * std::sqrt(2.0 / 20000.0));
}

// ---- layers: finite differences -----------------------------------------------------------------

TEST_CASE("rmsnorm and l2norm backward match central differences") {
  const std::int64_t N = 5, C = 7;
  auto x = randu(N * C, 1);
  x[3] = 0.0;  // a zero entry inside a row
  const auto w = randu(N * C, 2);
  std::vector<double> out(x.size()), dx(x.size()), nrm(N);
  auto f_rms = [&] {
    cpu::rmsnorm_forward(out.data(), x.data(), N, C, kSsfrNormEps);
    return dot(out, w);
  };
  cpu::rmsnorm_backward(dx.data(), w.data(), x.data(), N, C, kSsfrNormEps);
  CHECK(fd_check(f_rms, x, dx) < kFdRelTol);
  // Known values: rms of (3, 4) is √12.5, so h = (3, 4)/√12.5.
  const double r[] = {3, 4};
  double h[2];
  cpu::rmsnorm_forward(h, r, 1, 2, kSsfrNormEps);
  CHECK(h[0] == doctest::Approx(3 / std::sqrt(12.5)).epsilon(1e-15));
  CHECK(h[1] == doctest::Approx(4 / std::sqrt(12.5)).epsilon(1e-15));

  auto f_l2 = [&] {
    cpu::l2norm_forward(out.data(), nrm.data(), x.data(), N, C, kSsfrNormEps);
    return dot(out, w);
  };
  cpu::l2norm_backward(dx.data(), w.data(), x.data(), N, C, kSsfrNormEps);
  CHECK(fd_check(f_l2, x, dx) < kFdRelTol);
  cpu::l2norm_forward(h, nrm.data(), r, 1, 2, kSsfrNormEps);
  CHECK(nrm[0] == 5.0);
  CHECK(h[0] == doctest::Approx(0.6).epsilon(1e-15));
  // A zero row maps to zero and passes dout / eps-scaled gradient without NaN.
  const double z0[] = {0, 0};
  const double dz[] = {1, -1};
  double g0[2];
  cpu::l2norm_forward(h, nullptr, z0, 1, 2, kSsfrNormEps);
  CHECK(h[0] == 0.0);
  cpu::l2norm_backward(g0, dz, z0, 1, 2, kSsfrNormEps);
  CHECK(std::isfinite(g0[0]));
}

TEST_CASE("attention_query backward matches central differences (gathered, repeated rows)") {
  const std::int64_t N = 4, T = 6, C = 5, R = 7;  // R table rows; rows repeat inside a sequence
  auto q = randu(N * C, 3), K = randu(R * C, 4), V = randu(R * C, 5);
  const auto w = randu(N * C, 6);
  const std::vector<std::int32_t> rows = {0, 1, 2, 1, 6, 5,  3, 3, 3, 0, 0, 0,  6, 5, 4, 3, 2, 1,  2, 4, 2, 4, 2, 4};
  const std::vector<std::int32_t> len = {6, 3, 1, 5};
  std::vector<double> ctx(N * C), att(N * T), dq(q.size()), dK(K.size(), 0.0), dV(V.size(), 0.0), ds(N * T);
  auto f = [&] {
    cpu::attention_query_forward(ctx.data(), att.data(), q.data(), K.data(), V.data(), rows.data(), len.data(), N, T, C);
    return dot(ctx, w);
  };
  f();
  for (std::int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (std::int64_t t = 0; t < T; ++t) s += att[static_cast<std::size_t>(n * T + t)];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
    for (std::int64_t t = len[static_cast<std::size_t>(n)]; t < T; ++t) CHECK(att[static_cast<std::size_t>(n * T + t)] == 0.0);
  }
  CHECK(ctx[2 * C] == doctest::Approx(V[6 * C]).epsilon(1e-15));  // one position (row 6): ctx = V[6]
  cpu::attention_query_backward(dq.data(), dK.data(), dV.data(), ds.data(), w.data(), att.data(), q.data(), K.data(),
                                V.data(), rows.data(), len.data(), N, T, C);
  CHECK(fd_check(f, q, dq) < kFdRelTol);
  CHECK(fd_check(f, K, dK) < kFdRelTol);
  CHECK(fd_check(f, V, dV) < kFdRelTol);
  // dK, dV accumulate (+=): a second call doubles them.
  auto dK2 = dK;
  cpu::attention_query_backward(nullptr, dK2.data(), nullptr, ds.data(), w.data(), att.data(), q.data(), K.data(),
                                V.data(), rows.data(), len.data(), N, T, C);
  for (std::size_t i = 0; i < dK.size(); ++i) CHECK(dK2[i] == doctest::Approx(2 * dK[i]).epsilon(1e-14));
}

TEST_CASE("frozen MLP input VJP matches central differences (identity, bilinear, relu + biases, silu)") {
  const std::int64_t N = 3, d = 6, m = 9;
  for (int kind = 0; kind < 4; ++kind) {
    CAPTURE(kind);
    FrozenMlp mlp;
    mlp.d = d;
    mlp.m = kind == 0 ? 0 : m;
    if (kind > 0) {
      mlp.gate = kind == 1 ? Activation::identity : kind == 2 ? Activation::relu : Activation::silu;
      mlp.A = randu(m * d, 10 + kind);
      mlp.G = randu(m * d, 20 + kind);
      mlp.B = randu(d * m, 30 + kind);
      if (kind >= 2) {
        mlp.bias_up = randu(m, 40 + kind);
        mlp.bias_gate = randu(m, 50 + kind);
        mlp.bias_out = randu(d, 60 + kind);
      }
    }
    mlp.validate();
    auto u = randu(N * d, 70 + kind);
    const auto w = randu(N * d, 80 + kind);
    std::vector<double> y(N * d), a(N * m), g(N * m), h(N * m), du(N * d), da(N * m), dg(N * m), tmp(N * d);
    auto f = [&] {
      cpu::frozen_mlp_forward(y.data(), a.data(), g.data(), h.data(), u.data(), mlp, N);
      return dot(y, w);
    };
    f();
    cpu::frozen_mlp_backward(du.data(), da.data(), dg.data(), tmp.data(), w.data(), a.data(), g.data(), mlp, N);
    CHECK(fd_check(f, u, du) < kFdRelTol);
  }
}

// ---- the whole block ------------------------------------------------------------------------------

TEST_CASE("SSFR block: gradient matches central differences for every trainable set, residual and MLP kind") {
  // identity; hebbian:whitened (bilinear); ntk (relu gate); gd:transformer (relu, biases, a short GD
  // training); gd:edit (silu, biases).
  const std::vector<std::string> mlps = {"identity", "hebbian:whitened", "ntk", "gd:transformer,epochs=20",
                                         "gd:edit,epochs=20"};
  for_each_block_case(mlps, [](const mlp::SsfrSetup& s) {
    const SsfrProblem& p = s.problem;
    SsfrWorkspace ws(p, 12);
    SsfrBatch batch;
    ssfr_batch(batch, p.task, p.map_a.data(), 12, 5, rng::kSsfrTrain, 0);
    auto params = test_params(p.block, 9);
    std::vector<double> grad(params.size(), 0.0);
    const SsfrStats st = ssfr_forward(ws, params.data(), batch, p.mlp_a);
    REQUIRE(std::isfinite(st.loss));
    ssfr_backward(ws, params.data(), grad.data(), batch, p.mlp_a);
    auto f = [&] { return ssfr_forward(ws, params.data(), batch, p.mlp_a).loss; };
    CHECK(fd_check(f, params, grad) < kFdRelTol);  // measured 2e-9 .. 1.3e-7
    // Every tensor of the trainable set receives a gradient.
    for (const auto& v : ws.layout.views()) {
      double n2 = 0;
      for (std::int64_t i = 0; i < v.numel; ++i) n2 += grad[static_cast<std::size_t>(v.offset + i)] * grad[static_cast<std::size_t>(v.offset + i)];
      CHECK(n2 > 0);
    }
  });
}

TEST_CASE("SSFR block: Q-only logits equal the full-sequence oracle (spec §8.1.10)") {
  for_each_block_case({"identity", "ntk", "gd:transformer,epochs=10"}, [](const mlp::SsfrSetup& s) {
    const SsfrProblem& p = s.problem;
    SsfrWorkspace ws(p, 10);
    SsfrBatch batch;
    ssfr_batch(batch, p.task, p.map_a.data(), 10, 1, rng::kSsfrEval, 3);
    const auto params = test_params(p.block, 2);
    ssfr_forward(ws, params.data(), batch, p.mlp_a);
    const auto full = ssfr_logits_full_sequence(p, params.data(), batch, p.mlp_a);
    const std::vector<double> q_only(ws.logits.begin(), ws.logits.begin() + static_cast<std::ptrdiff_t>(full.size()));
    CHECK(rel_err(q_only, full) < kSameMathTol);
  });
}

TEST_CASE("SSFR block: results do not depend on the thread count") {
  const mlp::SsfrSetup s = small_setup("hebbian:whitened", true, true, 16, 64, 64);
  const SsfrProblem& p = s.problem;
  SsfrBatch batch;
  ssfr_batch(batch, p.task, p.map_a.data(), 700, 5, rng::kSsfrTrain, 0);  // large enough for parallel loops
  const auto params = test_params(p.block, 4);
  std::vector<std::vector<double>> grads;
  std::vector<double> losses;
  for (int threads : {1, 2}) {
    set_threads(threads);
    SsfrWorkspace ws(p, 700);
    std::vector<double> g(params.size(), 0.0);
    losses.push_back(ssfr_forward(ws, params.data(), batch, p.mlp_a).loss);
    ssfr_backward(ws, params.data(), g.data(), batch, p.mlp_a);
    grads.push_back(g);
  }
  set_threads(0);
  CHECK(losses[0] == losses[1]);
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("SSFR setup: maps, embeddings, MLP_A / MLP_B and the identity MLP") {
  const mlp::SsfrSetup s = small_setup("hebbian:whitened", false, false, 8, 16, 24);
  const SsfrProblem& p = s.problem;
  CHECK(s.has_map_b);
  CHECK(p.map_a != p.map_b);
  CHECK(s.mlp_acc_a == 1.0);  // m = 24 > F = 16: the dual whitened readout interpolates (spec §7.1.1)
  CHECK(s.mlp_acc_b == 1.0);
  CHECK(s.mlp_a.A == s.mlp_b.A);  // same method seed: the same random features
  CHECK(s.mlp_a.B != s.mlp_b.B);
  CHECK(p.embed_in == p.embed_out);  // tied
  for (std::int64_t r = 0; r < p.task.vocab(); ++r) {  // every row is a unit vector
    double n2 = 0;
    for (std::int64_t c = 0; c < 8; ++c) n2 += p.embed_in[static_cast<std::size_t>(r * 8 + c)] * p.embed_in[static_cast<std::size_t>(r * 8 + c)];
    CHECK(n2 == doctest::Approx(1.0).epsilon(1e-12));
  }
  const mlp::SsfrSetup id = small_setup("identity", true, false);
  CHECK(!id.has_map_b);
  CHECK(id.problem.mlp_a.identity());
  for (std::int64_t i = 0; i < 16; ++i) CHECK(id.problem.map_a[static_cast<std::size_t>(i)] == i);
  CHECK(mlp::parse_ssfr_mlp("gd").text == "gd:transformer");
  CHECK(mlp::parse_ssfr_mlp("gd,epochs=5").text == "gd:transformer,epochs=5");
  CHECK(mlp::parse_ssfr_mlp("gd,epochs=5").method.gd.gate == Activation::relu);
  CHECK(mlp::parse_ssfr_mlp("gd:transformer,gate=identity,bias=0").method.gd.bias == false);
  CHECK(mlp::parse_ssfr_mlp("x.h5").kind == mlp::SsfrMlpKind::file);
  CHECK_THROWS_AS(mlp::parse_ssfr_mlp("hebbian:frobnicate"), UserError);
}

// ---- training ------------------------------------------------------------------------------------

TEST_CASE("SSFR training: evaluation cadence, running maxima, curves") {
  const mlp::SsfrSetup s = small_setup("hebbian:whitened", false, false);
  SsfrTrainConfig cfg;
  cfg.steps = 250;
  cfg.batch = 32;
  cfg.eval_batches = 2;
  cfg.lr = 1e-2;
  cfg.seed = 3;
  std::int64_t calls = 0;
  cfg.on_step = [&](std::int64_t done, double) { calls = done; };
  const SsfrTrainResult r = train_ssfr_cpu(s.problem, cfg);
  CHECK(r.steps_run == 250);
  CHECK(calls == 250);
  CHECK(r.loss_curve.size() == 250);
  CHECK(r.eval_step == std::vector<std::int64_t>{0, 100, 200});  // after the updates of steps 0, 100, 200
  CHECK(r.best_acc == *std::max_element(r.eval_acc.begin(), r.eval_acc.end()));
  CHECK(r.best_train_acc == *std::max_element(r.train_acc.begin(), r.train_acc.end()));
  CHECK(r.final_loss == r.loss_curve.back());
  CHECK(!r.stopped_early);
  // The same seed gives the same run; the evaluation accuracy is a multiple of 1/(2·32).
  const SsfrTrainResult r2 = train_ssfr_cpu(s.problem, cfg);
  CHECK(r2.loss_curve == r.loss_curve);
  CHECK(r2.params == r.params);
  for (double a : r.eval_acc) CHECK(std::abs(a * 64 - std::round(a * 64)) < 1e-9);
}

TEST_CASE("SSFR training learns to attend to the key (fact-adaptive, whitened MLP)") {
  // d = 16, F = 32, J = 2: attention must pick the key out of 2·2 junk tokens and the query.
  mlp::SsfrSetupSpec spec;
  spec.task = SsfrTask::make(32, 2, 2, 2);
  spec.block.dim = 16;
  spec.width = 64;
  spec.seed = 1;
  const mlp::SsfrSetup s = mlp::make_ssfr_setup(spec, mlp::parse_ssfr_mlp("hebbian:whitened"), nullptr);
  REQUIRE(s.mlp_acc_a == 1.0);
  SsfrTrainConfig cfg;
  cfg.steps = 301;
  cfg.batch = 64;
  cfg.lr = 1e-2;
  cfg.eval_batches = 4;
  cfg.seed = 1;
  const SsfrTrainResult r = train_ssfr_cpu(s.problem, cfg);
  MESSAGE("eval acc ", r.eval_acc.front(), " -> ", r.eval_acc.back(), ", loss ", r.loss_curve.front(), " -> ",
          r.final_loss);
  CHECK(r.eval_acc.front() < 0.5);   // before training attention averages the tokens
  CHECK(r.best_acc >= 0.95);         // evaluated on map B with MLP_B: attention transfers
  CHECK(r.best_train_acc >= 0.95);
  CHECK(r.final_loss < r.loss_curve.front());
}

TEST_CASE("SSFR training: early stop, and a non-finite loss stops with the step and the last finite loss") {
  const mlp::SsfrSetup s = small_setup("identity", true, false);
  SsfrTrainConfig cfg;
  cfg.steps = 2000;
  cfg.batch = 32;
  cfg.eval_batches = 2;
  cfg.lr = 3e-2;
  cfg.early_stop = true;
  const SsfrTrainResult r = train_ssfr_cpu(s.problem, cfg);
  CHECK(r.stopped_early);
  CHECK(r.steps_run < 2000);
  CHECK((r.steps_run - 1) % 100 == 0);  // stops right after an evaluation
  CHECK(r.eval_acc.back() >= 0.99);

  cfg.early_stop = false;
  cfg.lr = 1e300;  // the first update sends the weights to ~1e300: scores overflow, the loss is NaN
  try {
    train_ssfr_cpu(s.problem, cfg);
    FAIL("expected a NumericError");
  } catch (const NumericError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("non-finite loss at step 1") != std::string::npos);
    CHECK(msg.find("last finite loss") != std::string::npos);
    CHECK(e.exit_code() == kExitNumeric);
  }
}
