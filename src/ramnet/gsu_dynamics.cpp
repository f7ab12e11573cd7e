// GSU dynamics (spec ramnet.md §3 E8). See gsu_dynamics.hpp.
#include "ramnet/gsu_dynamics.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "sweep/sweep.hpp"
#include "core/rng.hpp"
#include "ramnet/theory.hpp"
#include "ramnet/topk.hpp"

namespace memcap::ramnet {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int age_bin(std::int64_t age) {
  int b = 0;
  while (age > 0) {
    age >>= 1;
    ++b;
  }
  return b;
}

void validate(const GsuDynamicsConfig& c) {
  validate(c.params);
  require(std::isfinite(c.tau) && c.tau > 0, "--tau {} must be a finite number > 0", c.tau);
  const std::int64_t A = address_count(c.params);
  require(c.topk >= 0 && c.topk <= A, "--topk {} must be between 0 (full) and the address space dp^U = {}", c.topk, A);
  require(!std::isnan(c.gamma) && c.gamma != INFINITY, "--gamma must be a finite number or -inf");
  require(std::isfinite(c.eps) && c.eps >= 0, "--eps {} must be a finite number >= 0", c.eps);
  require(c.T >= 2 && c.T <= 100'000, "--T {} must be between 2 and 100000", c.T);
  require(c.dv >= 1 && c.dv <= 4096, "--dv {} must be between 1 and 4096", c.dv);
  require(c.trials >= 1 && c.trials <= 100'000, "--trials {} must be between 1 and 1e5", c.trials);
  require(std::isfinite(c.sigma_q) && c.sigma_q >= 0, "--sigma-q {} must be a finite number >= 0", c.sigma_q);
  if (c.topk == 0) {  // the main memory and the probe memory of the induced weights are dense
    require_dense(c.params, 8.0 * static_cast<double>(std::max<std::int64_t>(c.T, c.dv) + 1),
                  "the GSU memory with full writes (--topk 0)");
    // Per trial in flight: T write and T read sets of |A| entries, the memory, the probe memory.
    sweep::require_memory(static_cast<double>(address_count(c.params)) *
                              (40.0 * static_cast<double>(c.T) + 8.0 * static_cast<double>(c.dv + c.T + 2)) * max_threads(),
                          "the GSU dynamics with full writes (--topk 0)");
  }
}

namespace {

struct Trial {
  GsuDynamicsResult r;
  double js_s = 0, js_m = 0, miss_s = 0, miss_m = 0;
  std::int64_t live_s = 0, live_m = 0, dead_s = 0, dead_m = 0, reads = 0, hits = 0, recent = 0, recent_n = 0, old = 0,
               old_n = 0, items = 0;
};

Eigen::RowVectorXd causal_softmax_row(const Eigen::MatrixXd& logits, Eigen::Index t) {
  Eigen::RowVectorXd a = Eigen::RowVectorXd::Zero(logits.cols());
  const double mx = logits.row(t).head(t + 1).maxCoeff();
  double z = 0;
  for (Eigen::Index s = 0; s <= t; ++s) z += (a(s) = std::exp(logits(t, s) - mx));
  a /= z;
  return a;
}

Trial run_trial(const GsuDynamicsConfig& c, const CodebookSet& cb, std::uint64_t trial) {
  const Params& p = c.params;
  const int dp = p.dp, U = p.U, dv = c.dv;
  const std::int64_t A = address_count(p), K = c.topk, T = c.T;
  const std::ptrdiff_t tw = static_cast<std::ptrdiff_t>(U) * dp;
  const AttnSample smp = generate(c.gen, dp, U, T, T, dv, c.seed, trial);
  const RowMajor Kr = smp.K, Qr = smp.Q, Vr = smp.V;
  Trial out;
  GsuDynamicsResult& r = out.r;

  std::vector<double> tk(static_cast<std::size_t>(T * tw)), tq(tk.size());
  for (std::int64_t s = 0; s < T; ++s) factor_rows(cb, p.beta_w, Kr.row(s).data(), tk.data() + s * tw);
  for (std::int64_t s = 0; s < T; ++s) factor_rows(cb, p.beta_r, Qr.row(s).data(), tq.data() + s * tw);
  AddressWeightsBuilder b(dp, U);
  std::vector<AddressWeights> ws(static_cast<std::size_t>(T)), rs(static_cast<std::size_t>(T));
  std::vector<std::int64_t> f(static_cast<std::size_t>(std::max<std::int64_t>(K, 1)));
  std::vector<double> l(f.size());
  std::vector<TopKDecoder> dec;
  if (K > 0) dec.emplace_back(dp, U, K);
  auto weights = [&](const double* table, AddressWeights& out_w, bool complement) {
    if (K > 0) {
      dec[0].decode(table, f.data(), l.data());
      b.topk(table, f.data(), l.data(), K, out_w, complement);
    } else {
      b.full(table, out_w, complement);
    }
  };
  for (std::int64_t s = 0; s < T; ++s) {
    weights(tk.data() + s * tw, ws[static_cast<std::size_t>(s)], true);
    weights(tq.data() + s * tw, rs[static_cast<std::size_t>(s)], false);
  }

  // (iii) invariants under the configuration's own γ, ε, K.
  GsuMemory mem(A, dv, K == 0, c.eps);
  std::vector<double> vmin(static_cast<std::size_t>(dv), c.eps > 0 ? 0.0 : INFINITY),
      vmax(static_cast<std::size_t>(dv), c.eps > 0 ? 0.0 : -INFINITY);
  std::vector<std::vector<double>> lam(static_cast<std::size_t>(T));
  std::unordered_map<std::int64_t, std::vector<double>> N;  // gated linear attention state (ε = 0 check)
  for (std::int64_t t = 0; t < T; ++t) {
    const AddressWeights& w = ws[static_cast<std::size_t>(t)];
    const double* v = Vr.row(t).data();
    for (int j = 0; j < dv; ++j) {
      vmin[static_cast<std::size_t>(j)] = std::min(vmin[static_cast<std::size_t>(j)], v[j]);
      vmax[static_cast<std::size_t>(j)] = std::max(vmax[static_cast<std::size_t>(j)], v[j]);
    }
    lam[static_cast<std::size_t>(t)].resize(w.size());
    const GsuStep st = mem.write(w, v, c.gamma, lam[static_cast<std::size_t>(t)].data());
    if (st.lambda_min <= st.lambda_max) {
      r.lambda_min = std::min(r.lambda_min, st.lambda_min);
      r.lambda_max = std::max(r.lambda_max, st.lambda_max);
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!(w.p[i] > 0)) continue;
      const std::int64_t a = w.slot[i];
      const double m = mem.mass(a);
      r.max_mass = std::max(r.max_mass, m);
      if (c.gamma >= 0 && m > 1 + 1e-12) ++r.mass_violations;
      const double* s = mem.state(a);
      for (int j = 0; j < dv; ++j) {
        const double tol = 1e-12 * (1 + std::abs(vmin[static_cast<std::size_t>(j)]) + std::abs(vmax[static_cast<std::size_t>(j)]));
        if (s[j] < vmin[static_cast<std::size_t>(j)] - tol || s[j] > vmax[static_cast<std::size_t>(j)] + tol) ++r.hull_violations;
      }
      if (c.eps == 0) {
        auto& n = N[a];
        n.resize(static_cast<std::size_t>(dv), 0.0);
        const double g = gsu_gate(w.p[i], w.one_minus_p[i], c.gamma);
        for (int j = 0; j < dv; ++j) n[static_cast<std::size_t>(j)] = g * n[static_cast<std::size_t>(j)] + w.p[i] * v[j];
      }
    }
  }
  {  // unrolled form, backwards over steps: s_T(a) = Σ_t λ_t(a) Π_{r>t} (1 − λ_r(a)) v_t
    std::unordered_map<std::int64_t, std::pair<double, std::vector<double>>> acc;
    for (std::int64_t t = T - 1; t >= 0; --t) {
      const AddressWeights& w = ws[static_cast<std::size_t>(t)];
      for (std::size_t i = 0; i < w.size(); ++i) {
        const double la = lam[static_cast<std::size_t>(t)][i];
        if (!(w.p[i] > 0)) continue;
        auto [it, fresh] = acc.try_emplace(w.slot[i], 1.0, std::vector<double>(static_cast<std::size_t>(dv), 0.0));
        auto& [prod, sum] = it->second;
        for (int j = 0; j < dv; ++j) sum[static_cast<std::size_t>(j)] += la * prod * Vr(t, j);
        prod *= 1 - la;
      }
    }
    for (const auto& [a, ps] : acc) {
      const double* s = mem.state(a);
      for (int j = 0; j < dv; ++j)
        r.unrolled_max_diff = std::max(r.unrolled_max_diff, std::abs(ps.second[static_cast<std::size_t>(j)] - s[j]));
    }
    if (c.eps == 0) {
      r.gla_max_diff = 0;
      for (const auto& [a, n] : N) {
        const double m = mem.mass(a);
        const double* s = mem.state(a);
        for (int j = 0; j < dv; ++j)
          r.gla_max_diff = std::max(r.gla_max_diff, std::abs(n[static_cast<std::size_t>(j)] - m * s[j]) / (1 + std::abs(n[static_cast<std::size_t>(j)])));
      }
    }
  }

  // (iv) recall against age.
  {
    const int bins = age_bin(T - 1) + 1;
    r.age_hits.assign(static_cast<std::size_t>(bins), 0);
    r.age_count.assign(static_cast<std::size_t>(bins), 0);
    std::vector<double> x(static_cast<std::size_t>(2 * U)), table(static_cast<std::size_t>(tw)), o(static_cast<std::size_t>(dv));
    Eigen::VectorXd vnorm = smp.V.rowwise().norm();
    AddressWeights rr;
    for (std::int64_t i = 0; i < T; ++i) {
      for (int cc = 0; cc < 2 * U; ++cc)
        x[static_cast<std::size_t>(cc)] =
            Kr(i, cc) + c.sigma_q * rng::normal(c.seed, attn_streams::kSequenceQueries,
                                                (trial << 32) + static_cast<std::uint64_t>(i * 2 * U + cc));
      factor_rows(cb, p.beta_r, x.data(), table.data());
      weights(table.data(), rr, false);
      mem.read(rr, c.readout, o.data());
      const Eigen::Map<const Eigen::VectorXd> ov(o.data(), dv);
      const double on = ov.norm();
      std::int64_t best = -1;
      if (on > 0 && std::isfinite(on)) {
        const Eigen::VectorXd cosv = (smp.V * ov).cwiseQuotient(vnorm) / on;
        Eigen::Index j = 0;
        cosv.maxCoeff(&j);
        best = j;
      }
      const std::int64_t age = T - 1 - i;
      const bool hit = best == i;
      const auto bin = static_cast<std::size_t>(age_bin(age));
      r.age_hits[bin] += hit;
      ++r.age_count[bin];
      out.hits += hit;
      ++out.items;
      if (4 * age < T) out.recent += hit, ++out.recent_n;
      if (4 * age >= 3 * T) out.old += hit, ++out.old_n;
    }
  }

  // (v) induced causal token weights of both readouts against the causal softmax teacher.
  {
    const Eigen::MatrixXd logits = (smp.Q * smp.K.transpose()) / c.tau;
    std::int64_t e1 = 0, e2 = 0;
    const Eigen::MatrixXd as = induced_weights(A, K == 0, ws, rs, Readout::standard, c.gamma, c.eps, true, &e1);
    const Eigen::MatrixXd am = induced_weights(A, K == 0, ws, rs, Readout::mass, c.gamma, c.eps, true, &e2);
    r.empty_reads = e1 + e2;
    for (Eigen::Index t = 0; t < T; ++t) {
      const Eigen::RowVectorXd teacher = causal_softmax_row(logits, t);
      ++out.reads;
      for (int which = 0; which < 2; ++which) {
        const Eigen::RowVectorXd w = (which == 0 ? as : am).row(t);
        const double total = w.sum();
        (which == 0 ? out.miss_s : out.miss_m) += 1 - total;
        if (!(total > 0)) {
          ++(which == 0 ? out.dead_s : out.dead_m);
          continue;
        }
        const Eigen::RowVectorXd pw = w / total;
        (which == 0 ? out.js_s : out.js_m) += js_divergence(teacher.data(), pw.data(), t + 1);
        ++(which == 0 ? out.live_s : out.live_m);
      }
    }
  }

  // (i), (ii): the cumulative limit of this configuration (full, γ = −inf, ε = 0; hard writes).
  const bool dense_ok = static_cast<double>(A) * (dv + 1) <= static_cast<double>(kMaxDenseAddresses);
  if (c.checks && dense_ok) {
    GsuMemory full(A, dv, true, 0.0);
    const Eigen::MatrixXd L = log_kappa_matrix(p, cb, smp.Q, smp.K);
    AddressWeights w, rd;
    std::vector<double> o(static_cast<std::size_t>(dv));
    r.cumulative_kappa_max_diff = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      b.full(tk.data() + t * tw, w);
      full.write(w, Vr.row(t).data(), -INFINITY);
      b.full(tq.data() + t * tw, rd, false);
      full.read(rd, Readout::mass, o.data());
      const Eigen::RowVectorXd a = causal_softmax_row(L, t);  // normalised κ weights over s ≤ t
      const Eigen::RowVectorXd ok = a * smp.V;
      for (int j = 0; j < dv; ++j)
        r.cumulative_kappa_max_diff = std::max(r.cumulative_kappa_max_diff, std::abs(o[static_cast<std::size_t>(j)] - ok(j)));
    }
    // Hard writes: the nearest code of each block.
    GsuMemory hard(A, dv, false, 0.0);
    std::unordered_map<std::int64_t, std::pair<double, std::vector<double>>> cm;
    Eigen::MatrixXd Kh(T, 2 * U);
    for (std::int64_t s = 0; s < T; ++s) {
      std::int64_t a = 0, stride = 1;
      for (int u = 0; u < U; ++u) {
        const Codebook& C = cb.factor[static_cast<std::size_t>(u)];
        const int j = nearest_code(C, Kr(s, 2 * u), Kr(s, 2 * u + 1));
        a += j * stride;
        stride *= dp;
        Kh(s, 2 * u) = C(0, j);
        Kh(s, 2 * u + 1) = C(1, j);
      }
      AddressWeightsBuilder::hard(a, w);
      hard.write(w, Vr.row(s).data(), -INFINITY);
      auto [it, fresh] = cm.try_emplace(a, 0.0, std::vector<double>(static_cast<std::size_t>(dv), 0.0));
      it->second.first += 1;
      for (int j = 0; j < dv; ++j) it->second.second[static_cast<std::size_t>(j)] += Vr(s, j);
    }
    r.hard_count_max_diff = r.hard_mean_max_diff = 0;
    for (const auto& [a, cs] : cm) {
      r.hard_count_max_diff = std::max(r.hard_count_max_diff, std::abs(hard.mass(a) - cs.first));
      const double* s = hard.state(a);
      for (int j = 0; j < dv; ++j)
        r.hard_mean_max_diff = std::max(r.hard_mean_max_diff, std::abs(s[j] - cs.second[static_cast<std::size_t>(j)] / cs.first));
    }
    const Eigen::MatrixXd vq = softmax_rows(p.beta_r * (smp.Q * Kh.transpose())) * smp.V;
    r.hard_vq_max_diff = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      b.full(tq.data() + t * tw, rd, false);
      hard.read(rd, Readout::mass, o.data());
      for (int j = 0; j < dv; ++j) r.hard_vq_max_diff = std::max(r.hard_vq_max_diff, std::abs(o[static_cast<std::size_t>(j)] - vq(t, j)));
    }
  }
  return out;
}

double nan_max(double a, double b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return std::max(a, b);
}

}  // namespace

GsuDynamicsResult run_gsu_dynamics(const GsuDynamicsConfig& c) {
  validate(c);
  const CodebookSet cb = make_codebooks(CodebookKind::circular, c.params.dp, c.params.U, c.gen, c.seed);
  std::vector<Trial> trials(static_cast<std::size_t>(c.trials));
  parallel_for_rethrow(c.trials, [&](std::int64_t t) {
    trials[static_cast<std::size_t>(t)] = run_trial(c, cb, static_cast<std::uint64_t>(t));
  });
  GsuDynamicsResult r;
  Trial sum;
  for (const auto& t : trials) {  // trial order
    const auto& x = t.r;
    r.cumulative_kappa_max_diff = nan_max(r.cumulative_kappa_max_diff, x.cumulative_kappa_max_diff);
    r.hard_count_max_diff = nan_max(r.hard_count_max_diff, x.hard_count_max_diff);
    r.hard_mean_max_diff = nan_max(r.hard_mean_max_diff, x.hard_mean_max_diff);
    r.hard_vq_max_diff = nan_max(r.hard_vq_max_diff, x.hard_vq_max_diff);
    r.hull_violations += x.hull_violations;
    r.mass_violations += x.mass_violations;
    r.max_mass = std::max(r.max_mass, x.max_mass);
    r.lambda_min = std::min(r.lambda_min, x.lambda_min);
    r.lambda_max = std::max(r.lambda_max, x.lambda_max);
    r.unrolled_max_diff = std::max(r.unrolled_max_diff, x.unrolled_max_diff);
    r.gla_max_diff = nan_max(r.gla_max_diff, x.gla_max_diff);
    if (r.age_hits.size() < x.age_hits.size()) {
      r.age_hits.resize(x.age_hits.size(), 0);
      r.age_count.resize(x.age_count.size(), 0);
    }
    for (std::size_t b = 0; b < x.age_hits.size(); ++b) {
      r.age_hits[b] += x.age_hits[b];
      r.age_count[b] += x.age_count[b];
    }
    r.empty_reads += x.empty_reads;
    sum.js_s += t.js_s, sum.js_m += t.js_m, sum.miss_s += t.miss_s, sum.miss_m += t.miss_m;
    sum.live_s += t.live_s, sum.live_m += t.live_m, sum.dead_s += t.dead_s, sum.dead_m += t.dead_m;
    sum.reads += t.reads, sum.hits += t.hits, sum.items += t.items;
    sum.recent += t.recent, sum.recent_n += t.recent_n, sum.old += t.old, sum.old_n += t.old_n;
  }
  auto ratio = [](double a, std::int64_t b) { return b > 0 ? a / static_cast<double>(b) : NAN; };
  r.recall = ratio(static_cast<double>(sum.hits), sum.items);
  r.recall_recent = ratio(static_cast<double>(sum.recent), sum.recent_n);
  r.recall_old = ratio(static_cast<double>(sum.old), sum.old_n);
  r.js_standard = ratio(sum.js_s, sum.live_s);
  r.js_mass = ratio(sum.js_m, sum.live_m);
  r.missing_standard = ratio(sum.miss_s, sum.reads);
  r.missing_mass = ratio(sum.miss_m, sum.reads);
  r.dead_standard = ratio(static_cast<double>(sum.dead_s), sum.reads);
  r.dead_mass = ratio(static_cast<double>(sum.dead_m), sum.reads);
  return r;
}

}  // namespace memcap::ramnet
