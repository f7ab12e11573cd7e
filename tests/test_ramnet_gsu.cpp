// GSU memory (spec ramnet.md §1.6–1.7, §2.8–2.9, §5.6, §6 T8–T9): every T8 number, the T9 exact
// equivalence (mass-aware cumulative GSU = κ-attention), the §1.6 invariants, hard-write + cumulative
// = count/mean (= VQ attention with the mass-aware readout), accurate 1 − w, induced token weights.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ramnet/gsu.hpp"
#include "ramnet/gsu_dynamics.hpp"
#include "ramnet/topk.hpp"

using namespace memcap;
using namespace memcap::ramnet;

namespace {
AddressWeights two_slots(double w0, double w1) {
  AddressWeights a;
  a.slot = {0, 1};
  a.p = {w0, w1};
  a.one_minus_p = {1 - w0, 1 - w1};
  return a;
}

struct T8Run {
  std::vector<std::vector<double>> m, s;  // after each step
  double standard = 0, mass = 0;
};

T8Run run_t8(double gamma, double eps) {
  GsuMemory mem(2, 1, true, eps);
  const double w[3][2] = {{0.8, 0.2}, {0.3, 0.7}, {0.6, 0.4}};
  const double v[3] = {1, -1, 0.5};
  T8Run out;
  for (int t = 0; t < 3; ++t) {
    mem.write(two_slots(w[t][0], w[t][1]), &v[t], gamma);
    out.m.push_back({mem.mass(0), mem.mass(1)});
    out.s.push_back({*mem.state(0), *mem.state(1)});
  }
  AddressWeights r;
  r.slot = {0, 1};
  r.p = {0.7, 0.3};
  mem.read(r, Readout::standard, &out.standard);
  mem.read(r, Readout::mass, &out.mass);
  return out;
}

constexpr double kT = 1e-9;  // T8/T9 are printed to 10 significant digits
}  // namespace

TEST_CASE("T8: gate values and edge cases") {
  CHECK(gsu_gate(0.2, 0.8, 0.0) == doctest::Approx(0.8).epsilon(1e-15));
  CHECK(gsu_gate(0.2, 0.8, 1.0) == doctest::Approx(0.5953903248).epsilon(kT));
  for (double g : {-5.0, 0.0, 5.0, 1000.0, -HUGE_VAL}) CHECK(gsu_gate(0.0, 1.0, g) == 1.0);
  for (double g : {-5.0, 0.0, 5.0, 1000.0}) CHECK(gsu_gate(1.0, 0.0, g) == 0.0);
  CHECK(gsu_gate(1.0, 0.0, -INFINITY) == 1.0);  // cumulative averaging also for hard writes
  CHECK(gsu_gate(0.3, 0.7, -INFINITY) == 1.0);
  CHECK(gsu_gate(0.3, 0.7, 0.0) == doctest::Approx(0.7).epsilon(1e-15));  // γ = 0: g = 1 − w
  // σ(logit(1−w) − γ) agrees where it is well defined; large |γ| stays finite.
  for (double w : {1e-6, 0.1, 0.5, 0.9}) {
    for (double g : {-3.0, -0.5, 0.7, 4.0}) {
      const double ref = 1 / (1 + std::exp(-(std::log((1 - w) / w) - g)));
      CHECK(gsu_gate(w, 1 - w, g) == doctest::Approx(ref).epsilon(1e-12));
    }
  }
  CHECK(std::isfinite(gsu_gate(0.5, 0.5, 800.0)));
  CHECK(gsu_gate(0.5, 0.5, -800.0) == 1.0);
}

TEST_CASE("T8: masses, states and both readouts for gamma = -inf, 0, 1 and eps = 0.1") {
  {
    const T8Run r = run_t8(-INFINITY, 0.0);
    CHECK(r.m[0][0] == doctest::Approx(0.8));
    CHECK(r.m[0][1] == doctest::Approx(0.2));
    CHECK(r.m[1][0] == doctest::Approx(1.1));
    CHECK(r.m[1][1] == doctest::Approx(0.9));
    CHECK(r.m[2][0] == doctest::Approx(1.7));
    CHECK(r.m[2][1] == doctest::Approx(1.3));
    CHECK(r.s[0][0] == 1.0);  // first write to an empty slot sets s = v exactly (ε = 0)
    CHECK(r.s[0][1] == 1.0);
    CHECK(r.s[1][0] == doctest::Approx(0.4545454545).epsilon(kT));
    CHECK(r.s[1][1] == doctest::Approx(-0.5555555556).epsilon(kT));
    CHECK(r.s[2][0] == doctest::Approx(0.4705882353).epsilon(kT));
    CHECK(r.s[2][1] == doctest::Approx(-0.2307692308).epsilon(kT));
    CHECK(r.standard == doctest::Approx(0.2601809955).epsilon(kT));
    CHECK(r.mass == doctest::Approx(0.2974683544).epsilon(kT));
  }
  {
    const T8Run r = run_t8(0.0, 0.0);
    CHECK(r.m[1][0] == doctest::Approx(0.86).epsilon(1e-12));
    CHECK(r.m[1][1] == doctest::Approx(0.76).epsilon(1e-12));
    CHECK(r.m[2][0] == doctest::Approx(0.944).epsilon(1e-12));
    CHECK(r.m[2][1] == doctest::Approx(0.856).epsilon(1e-12));
    CHECK(r.s[2][0] == doctest::Approx(0.4279661017).epsilon(kT));
    CHECK(r.s[2][1] == doctest::Approx(-0.2149532710).epsilon(kT));
    CHECK(r.standard == doctest::Approx(0.2350902899).epsilon(kT));
    CHECK(r.mass == doctest::Approx(0.2480383609).epsilon(kT));
  }
  {
    const T8Run r = run_t8(1.0, 0.0);
    CHECK(r.m[2][0] == doctest::Approx(0.7318619333).epsilon(kT));
    CHECK(r.m[2][1] == doctest::Approx(0.6586022428).epsilon(kT));
    CHECK(r.s[2][0] == doctest::Approx(0.4286214804).epsilon(kT));
    CHECK(r.s[2][1] == doctest::Approx(-0.0595667293).epsilon(kT));
    CHECK(r.standard == doctest::Approx(0.2821650175).epsilon(kT));
    CHECK(r.mass == doctest::Approx(0.2927449831).epsilon(kT));
  }
  {
    const T8Run r = run_t8(0.0, 0.1);
    CHECK(r.s[0][0] == doctest::Approx(0.8888888889).epsilon(kT));
    CHECK(r.s[0][1] == doctest::Approx(0.6666666667).epsilon(kT));
    CHECK(r.s[2][0] == doctest::Approx(0.4143518519).epsilon(kT));
    CHECK(r.s[2][1] == doctest::Approx(-0.1920469657).epsilon(kT));
  }
}

TEST_CASE("T9: mass-aware cumulative GSU = kappa-attention exactly; standard and softmax readouts") {
  const Params p{4, 2, 1.0, 1.0};
  const auto C = circular_codebook(4);
  const double q[4] = {0.5, 0.2, -0.4, 0.3};
  const double keys[3][4] = {{0.05, 0.75, -0.55, 0.6}, {-0.15, -0.15, 1.1, 0.1}, {0, 0.45, 0.7, 0}};
  const double vals[3] = {0.3, -1.2, 2.0};
  const double kappa_want[3] = {1.2567906436, 0.7807339864, 0.9059850195};
  AddressWeightsBuilder b(4, 2);
  for (bool dense : {true, false}) {
    GsuMemory mem(16, 1, dense, 0.0);
    double num = 0, den = 0, snum = 0, sden = 0;
    for (int s = 0; s < 3; ++s) {
      std::vector<double> t(8);
      factor_rows(C, p.beta_w, keys[s], 2, t.data());
      AddressWeights w;
      b.full(t.data(), w);
      mem.write(w, &vals[s], -INFINITY);
      const double kap = std::exp(log_kappa_A(p, C, q, keys[s]));
      CHECK(kap == doctest::Approx(kappa_want[s]).epsilon(kT));
      num += kap * vals[s];
      den += kap;
      const double e = std::exp((q[0] * keys[s][0] + q[1] * keys[s][1] + q[2] * keys[s][2] + q[3] * keys[s][3]) / 2);
      snum += e * vals[s];
      sden += e;
    }
    std::vector<double> t(8);
    factor_rows(C, p.beta_r, q, 2, t.data());
    AddressWeights r;
    b.full(t.data(), r, false);
    double mass = 0, standard = 0;
    mem.read(r, Readout::mass, &mass);
    mem.read(r, Readout::standard, &standard);
    CHECK(mass == doctest::Approx(0.425385542246).epsilon(1e-11));
    CHECK(std::abs(mass - num / den) < 1e-14);  // exact up to rounding (§2.9)
    CHECK(standard == doctest::Approx(0.417131160773).epsilon(1e-11));
    CHECK(snum / sden == doctest::Approx(0.428160695859).epsilon(1e-11));
    // Induced weights of the mass-aware readout are the normalised κ weights.
    std::vector<AddressWeights> writes;
    for (int s = 0; s < 3; ++s) {
      std::vector<double> tw(8);
      factor_rows(C, p.beta_w, keys[s], 2, tw.data());
      AddressWeights w;
      b.full(tw.data(), w);
      writes.push_back(w);
    }
    const Eigen::MatrixXd a = induced_weights(16, dense, writes, {r}, Readout::mass, -INFINITY, 0.0, false);
    for (int s = 0; s < 3; ++s) CHECK(a(0, s) == doctest::Approx(kappa_want[s] / den).epsilon(1e-10));
    CHECK(a.row(0).sum() == doctest::Approx(1.0).epsilon(1e-14));
  }
}

TEST_CASE("1 - w without cancellation for near-hard writes") {
  const double delta = 1e-13;
  const double lp[6] = {std::log1p(-delta), std::log(delta), std::log1p(-delta), std::log(delta),
                        std::log1p(-delta), std::log(delta)};  // dp = 2, U = 3, digit 0 almost sure
  AddressWeightsBuilder b(2, 3);
  AddressWeights w;
  b.full(lp, w);
  const double exact = 3 * delta - 3 * delta * delta + delta * delta * delta;  // 1 − (1−δ)^3
  CHECK(w.one_minus_p[0] == doctest::Approx(exact).epsilon(1e-9));
  CHECK(std::abs((1 - w.p[0]) - exact) / exact > 1e-6);  // the naive form loses digits here
  // Top-K path gives the same complement.
  std::int64_t f = 0;
  AddressWeights wk;
  b.topk(lp, &f, lp, 1, wk);  // log_prob only feeds p; here we check one_minus_p
  CHECK(wk.one_minus_p[0] == doctest::Approx(exact).epsilon(1e-9));
}

TEST_CASE("section 1.6 invariants on random sequences: hull, m <= 1 for gamma >= 0, unrolled form, eps = 0") {
  const int dp = 4, U = 2, T = 40;
  const auto C = circular_codebook(dp);
  AddressWeightsBuilder b(dp, U);
  for (double gamma : {-HUGE_VAL, -2.0, 0.0, 0.5, 2.0}) {
    for (double eps : {0.0, 1e-3}) {
      CAPTURE(gamma);
      CAPTURE(eps);
      GsuMemory mem(16, 1, true, eps);
      std::vector<std::vector<double>> lam(T, std::vector<double>(16, 0.0));
      std::vector<double> v(T), N(16, 0.0);
      // Hull of the written values, and of s_0 = 0 when ε > 0 (the first write then moves s only part way).
      double vmin = eps > 0 ? 0.0 : INFINITY, vmax = eps > 0 ? 0.0 : -INFINITY;
      bool hull = true, mass_le_1 = true, gla = true;
      for (int t = 0; t < T; ++t) {
        double x[4];
        for (int c = 0; c < 4; ++c) x[c] = rng::normal(3, rng::kUser + 3, static_cast<std::uint64_t>(4 * t + c));
        v[t] = rng::normal(3, rng::kUser + 4, static_cast<std::uint64_t>(t));
        vmin = std::min(vmin, v[t]);
        vmax = std::max(vmax, v[t]);
        std::vector<double> tab(8);
        factor_rows(C, 1.3, x, U, tab.data());
        AddressWeights w;
        b.full(tab.data(), w);
        const GsuStep st = mem.write(w, &v[t], gamma, lam[t].data());
        CHECK(st.lambda_min >= 0);
        CHECK(st.lambda_max <= 1);
        for (int a = 0; a < 16; ++a) {
          const double s = *mem.state(a), m = mem.mass(a);
          hull = hull && s >= vmin - 1e-12 && s <= vmax + 1e-12;
          if (gamma >= 0) mass_le_1 = mass_le_1 && m <= 1 + 1e-12;
          // gated linear attention: N_t = g N_{t−1} + w v_t equals m_t s_t when ε = 0
          N[a] = gsu_gate(w.p[a], w.one_minus_p[a], gamma) * N[a] + w.p[a] * v[t];
          if (eps == 0) gla = gla && std::abs(N[a] - m * s) <= 1e-12 * (1 + std::abs(N[a]));
        }
      }
      CHECK(hull);
      CHECK(mass_le_1);
      CHECK(gla);
      // Unrolled form: s_T(a) = Σ_s λ_s Π_{r>s} (1 − λ_r) v_s (exact for any ε).
      double worst = 0;
      for (int a = 0; a < 16; ++a) {
        double s = 0;
        for (int t = 0; t < T; ++t) {
          double c = lam[t][a];
          for (int r = t + 1; r < T; ++r) c *= 1 - lam[r][a];
          s += c * v[t];
        }
        worst = std::max(worst, std::abs(s - *mem.state(a)));
      }
      CHECK(worst < 1e-12);
    }
  }
  // γ < 0 lets mass exceed 1 (the bound needs γ ≥ 0).
  GsuMemory mem(2, 1, true, 0.0);
  const double one = 1.0;
  for (int t = 0; t < 5; ++t) mem.write(two_slots(0.5, 0.5), &one, -2.0);
  CHECK(mem.mass(0) > 1.0);
  // ε = 0: the first write to an empty slot sets s = v however tiny w is.
  GsuMemory tiny(2, 1, true, 0.0);
  const double v = -3.25;
  tiny.write(two_slots(1e-300, 1.0 - 1e-300), &v, 0.0);
  CHECK(*tiny.state(0) == v);
}

TEST_CASE("hard writes + cumulative = count/mean per slot; mass-aware read = VQ attention") {
  const int dp = 4, U = 2, T = 60;
  const auto C = circular_codebook(dp);
  GsuMemory mem(16, 1, false, 0.0);  // sparse storage
  std::vector<double> count(16, 0), sum(16, 0), keys(static_cast<std::size_t>(T) * 4), v(T);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < 4; ++c) keys[t * 4 + c] = rng::normal(5, rng::kUser + 5, static_cast<std::uint64_t>(4 * t + c));
    v[t] = rng::normal(5, rng::kUser + 6, static_cast<std::uint64_t>(t));
    const std::int64_t a = hard_address(C, &keys[t * 4], U);
    AddressWeights w;
    AddressWeightsBuilder::hard(a, w);
    mem.write(w, &v[t], -INFINITY);
    count[a] += 1;
    sum[a] += v[t];
  }
  double worst = 0;
  int occupied = 0;
  for (int a = 0; a < 16; ++a) {
    CHECK(mem.mass(a) == count[a]);
    if (count[a] > 0) {
      ++occupied;
      worst = std::max(worst, std::abs(*mem.state(a) - sum[a] / count[a]));
    } else {
      CHECK(mem.state(a) == nullptr);
    }
  }
  CHECK(occupied > 4);
  CHECK(worst < 1e-13);
  // Mass-aware full read = softmax_s(β_r q·k̂_s) with k̂_s the nearest codes (§2.8).
  const double q[4] = {0.4, -0.7, 1.1, 0.2}, br = 0.9;
  std::vector<double> tab(8);
  factor_rows(C, br, q, U, tab.data());
  AddressWeights r;
  AddressWeightsBuilder(dp, U).full(tab.data(), r, false);
  double o = 0;
  mem.read(r, Readout::mass, &o);
  double num = 0, den = 0;
  for (int t = 0; t < T; ++t) {
    const std::int64_t a = hard_address(C, &keys[t * 4], U);
    const int a0 = static_cast<int>(a % 4), a1 = static_cast<int>(a / 4);
    const double e = std::exp(br * (q[0] * C(0, a0) + q[1] * C(1, a0) + q[2] * C(0, a1) + q[3] * C(1, a1)));
    num += e * v[t];
    den += e;
  }
  CHECK(o == doctest::Approx(num / den).epsilon(1e-12));
}

TEST_CASE("induced weights: o = alpha V, standard rows sum to the written read mass, empty reads counted") {
  const int dp = 4, U = 3, T = 24, K = 8;
  const auto C = circular_codebook(dp);
  AddressWeightsBuilder b(dp, U);
  TopKDecoder dec(dp, U, K);
  std::vector<AddressWeights> writes(T), reads(T);
  std::vector<double> V(T);
  for (int t = 0; t < T; ++t) {
    double x[6], y[6];
    for (int c = 0; c < 6; ++c) {
      x[c] = rng::normal(9, rng::kUser + 7, static_cast<std::uint64_t>(6 * t + c));
      y[c] = rng::normal(9, rng::kUser + 8, static_cast<std::uint64_t>(6 * t + c));
    }
    V[t] = rng::normal(9, rng::kUser + 9, static_cast<std::uint64_t>(t));
    std::vector<double> tw(12), tr(12);
    factor_rows(C, 1.0, x, U, tw.data());
    factor_rows(C, 1.0, y, U, tr.data());
    std::int64_t f[K];
    double l[K];
    dec.decode(tw.data(), f, l);
    b.topk(tw.data(), f, l, K, writes[t]);
    dec.decode(tr.data(), f, l);
    b.topk(tr.data(), f, l, K, reads[t], false);
  }
  for (Readout ro : {Readout::standard, Readout::mass}) {
    for (double gamma : {-HUGE_VAL, 0.0}) {
      std::int64_t empty = -1;
      const Eigen::MatrixXd a = induced_weights(64, false, writes, reads, ro, gamma, 0.0, true, &empty);
      GsuMemory mem(64, 1, false, 0.0);
      double worst = 0, worst_sum = 0;
      for (int t = 0; t < T; ++t) {
        mem.write(writes[t], &V[t], gamma);
        double o = 0;
        mem.read(reads[t], ro, &o);
        double ov = 0;
        for (int s = 0; s < T; ++s) ov += a(t, s) * V[s];
        worst = std::max(worst, std::abs(o - ov));
        for (int s = t + 1; s < T; ++s) CHECK(a(t, s) == 0.0);  // causal
        double written = 0;  // Σ_{a∈TopK(r), m(a)>0} r(a)
        for (std::size_t i = 0; i < reads[t].size(); ++i)
          if (mem.mass(reads[t].slot[i]) > 0) written += reads[t].p[i];
        const double expect = ro == Readout::mass ? (written > 0 ? 1.0 : 0.0) : written;
        worst_sum = std::max(worst_sum, std::abs(a.row(t).sum() - expect));
      }
      CHECK(worst < 1e-12);
      CHECK(worst_sum < 1e-12);
      CHECK(empty == mem.empty_reads());
    }
  }
}

TEST_CASE("E8 dynamics: exact limits, invariants and forgetting on generated sequences") {
  GsuDynamicsConfig c;
  c.params = {4, 3, 0.84, 0.84};
  c.tau = std::sqrt(6.0);
  c.topk = 8;
  c.gen = Generator::parse("torus:rho=1");
  c.T = 64;
  c.dv = 8;
  c.trials = 2;
  c.seed = 3;
  for (double gamma : {-HUGE_VAL, 0.0, 2.0}) {
    CAPTURE(gamma);
    c.gamma = gamma;
    const GsuDynamicsResult r = run_gsu_dynamics(c);
    CHECK(r.cumulative_kappa_max_diff < 1e-12);  // (i) §2.9
    CHECK(r.hard_count_max_diff == 0.0);         // (ii) counts are exact integers
    CHECK(r.hard_mean_max_diff < 1e-12);
    CHECK(r.hard_vq_max_diff < 1e-12);
    CHECK(r.hull_violations == 0);               // (iii)
    CHECK(r.mass_violations == 0);
    if (gamma >= 0) CHECK(r.max_mass <= 1.0);
    CHECK(r.lambda_min >= 0);
    CHECK(r.lambda_max <= 1);
    CHECK(r.unrolled_max_diff < 1e-12);
    CHECK(r.gla_max_diff < 1e-12);
    CHECK(r.recall >= 0);
    CHECK(r.js_mass >= 0);
    // Mass-aware weights sum to 1 on live reads and to 0 on dead ones (no read-selected slot written yet).
    CHECK(std::abs(r.missing_mass - r.dead_mass) < 1e-12);
    CHECK(r.dead_mass < 0.05);
    std::int64_t items = 0;
    for (auto n : r.age_count) items += n;
    CHECK(items == c.T * c.trials);
  }
  // Forgetting: with γ = 2 recent items are recalled more often than old ones; cumulative memories are
  // (nearly) age-blind.
  c.gamma = 2.0;
  const GsuDynamicsResult f = run_gsu_dynamics(c);
  CHECK(f.recall_recent > f.recall_old + 0.1);
  CHECK(age_bin(0) == 0);
  CHECK(age_bin(1) == 1);
  CHECK(age_bin(3) == 2);
  CHECK(age_bin(4) == 3);
}
