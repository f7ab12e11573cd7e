// Teacher softmax vs address-overlap students: divergences, per-student token weights, the trial loop
// and the E5 Top-K statistics (spec ramnet.md §2.7, §3 E2, E3, E5). See attention.hpp.
#include "ramnet/attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "sweep/sweep.hpp"
#include "ramnet/theory.hpp"
#include "ramnet/topk.hpp"

namespace memcap::ramnet {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// ---- divergences -----------------------------------------------------------------------------------

double js_divergence(const double* p, const double* q, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double m = 0.5 * (p[i] + q[i]);
    if (p[i] > 0) s += 0.5 * p[i] * std::log(p[i] / m);
    if (q[i] > 0) s += 0.5 * q[i] * std::log(q[i] / m);
  }
  return std::max(s, 0.0);
}

double smoothed_kl(const double* p, const double* q, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!(p[i] > 0)) continue;
    const double qs = (1 - kSmoothing) * q[i] + kSmoothing / static_cast<double>(n);
    s += p[i] * std::log(p[i] / qs);
  }
  return std::max(s, 0.0);
}

Eigen::MatrixXd softmax_rows(const Eigen::MatrixXd& logits) {
  Eigen::MatrixXd out(logits.rows(), logits.cols());
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    const double mx = logits.row(i).maxCoeff();
    if (!(mx > -INFINITY)) {  // all −inf (or empty): no weight anywhere
      out.row(i).setZero();
      continue;
    }
    out.row(i) = (logits.row(i).array() - mx).exp();
    out.row(i) /= out.row(i).sum();
  }
  return out;
}

// ---- configuration ---------------------------------------------------------------------------------

const std::vector<std::string>& attn_student_names() {
  static const std::vector<std::string> names = {"kappa", "kinf", "topk", "gsu-standard", "gsu-mass", "vq", "cape"};
  return names;
}

void validate(const AttnConfig& c) {
  validate(c.params);
  require(std::isfinite(c.tau) && c.tau > 0, "--tau {} must be a finite number > 0", c.tau);
  require(c.T >= 1 && c.T <= 1'000'000, "--T {} must be between 1 and 1000000", c.T);
  require(c.n >= 1 && c.n <= 1'000'000, "--queries {} must be between 1 and 1000000", c.n);
  require(c.trials >= 1 && c.trials <= 1'000'000, "--trials {} must be between 1 and 1000000", c.trials);
  require(c.dv >= 1 && c.dv <= 4096, "--dv {} must be between 1 and 4096", c.dv);
  const std::int64_t A = address_count(c.params);
  require(c.topk >= 0 && c.topk <= A, "--topk {} must be between 0 (full) and the address space dp^U = {}", c.topk, A);
  require(!std::isnan(c.gamma) && c.gamma != INFINITY, "--gamma must be a finite number or -inf");
  require(std::isfinite(c.eps) && c.eps >= 0, "--eps {} must be a finite number >= 0", c.eps);
  for (const auto& s : c.students)
    require(std::find(attn_student_names().begin(), attn_student_names().end(), s) != attn_student_names().end(),
            "student '{}' must be one of kappa, kinf, topk, gsu-standard, gsu-mass, vq, cape", s);
  const bool cape = std::find(c.students.begin(), c.students.end(), "cape") != c.students.end();
  if (c.gen.kind == Generator::Kind::rope && cape) {
    require_dense(c.params, 8.0 * static_cast<double>(c.T + c.n), "the cape student (dense CAPE shifts)");
    sweep::require_memory(static_cast<double>(A) * 8.0 * static_cast<double>(c.T + c.n) * max_threads(),
                          "the cape student (dense CAPE shifts)");
  }
  const bool gsu = std::find_if(c.students.begin(), c.students.end(),
                                [](const std::string& s) { return s.rfind("gsu", 0) == 0; }) != c.students.end();
  if (gsu && c.topk == 0) {
    require_dense(c.params, 8.0 * static_cast<double>(c.T + 1), "the GSU students with full writes (--topk 0)");
    sweep::require_memory(static_cast<double>(A) * (24.0 * static_cast<double>(c.T + c.n) + 8.0 * static_cast<double>(c.T + 1)) *
                              max_threads(),
                          "the GSU students with full writes (--topk 0)");
  }
  require(static_cast<double>(c.T) * static_cast<double>(c.n) <= 1e8,
          "--keys x --queries = {} x {} weight pairs per trial is too many (at most 1e8)", c.T, c.n);
}

const StudentStats* AttnResult::find(const std::string& name) const {
  for (const auto& s : students)
    if (s.name == name) return &s;
  return nullptr;
}

// ---- one trial -------------------------------------------------------------------------------------

namespace {

struct Acc {  // per student, summed over queries
  double js = 0, kl = 0, missing = 0, nmse_num = 0, nmse_den = 0, planted_mass = 0, planted_hit = 0;
  std::int64_t live = 0, dead = 0, queries = 0;
  bool computed = false;
};

struct TrialOut {
  std::vector<Acc> acc;  // one per student
  double t_planted_mass = 0, t_planted_hit = 0;
  double read_mass = 0, write_mass = 0, inter = 0, zero = 0;
  std::int64_t reads = 0, writes = 0, pairs = 0, gsu_empty = 0;
};

std::int64_t argmax_row(const Eigen::MatrixXd& W, Eigen::Index i) {
  Eigen::Index j = 0;
  W.row(i).maxCoeff(&j);
  return j;
}

// Scores one student's weights W (n×T, as used by its output) against the teacher A.
void score(const Eigen::MatrixXd& A, const Eigen::MatrixXd& W, const Eigen::MatrixXd& V, const Eigen::MatrixXd& oT,
           const std::vector<std::int64_t>& planted, Acc& acc) {
  acc.computed = true;
  const Eigen::Index n = A.rows(), T = A.cols();
  const Eigen::MatrixXd oS = W * V;
  acc.nmse_num += (oS - oT).squaredNorm();
  acc.nmse_den += oT.squaredNorm();
  RowMajor Ar = A, P(1, T);
  for (Eigen::Index i = 0; i < n; ++i) {
    ++acc.queries;
    const double total = W.row(i).sum();
    acc.missing += 1.0 - total;
    if (!(total > 0)) {
      ++acc.dead;
      continue;
    }
    P = W.row(i) / total;
    ++acc.live;
    acc.js += js_divergence(Ar.row(i).data(), P.data(), T);
    acc.kl += smoothed_kl(Ar.row(i).data(), P.data(), T);
    if (!planted.empty()) {
      const std::int64_t s = planted[static_cast<std::size_t>(i)];
      acc.planted_mass += P(0, s);
      acc.planted_hit += argmax_row(W, i) == s ? 1.0 : 0.0;
    }
  }
}

bool wants(const AttnConfig& c, const std::string& s) {
  return std::find(c.students.begin(), c.students.end(), s) != c.students.end();
}

TrialOut run_trial(const AttnConfig& c, const CodebookSet& cb, std::uint64_t trial, const LogKappaFn& kappa) {
  const Params& p = c.params;
  const int dp = p.dp, U = p.U;
  const AttnSample smp = generate(c.gen, dp, U, c.T, c.n, c.dv, c.seed, trial);
  const Eigen::Index n = smp.Q.rows(), T = smp.K.rows();
  TrialOut out;
  out.acc.resize(c.students.size());

  // Teacher.
  const Eigen::MatrixXd A = smp.Kt.size() > 0 ? softmax_rows((smp.Qt * smp.Kt.transpose()) / c.tau)
                                               : softmax_rows((smp.Q * smp.K.transpose()) / c.tau);
  const Eigen::MatrixXd oT = A * smp.V;
  if (!smp.planted.empty())
    for (Eigen::Index i = 0; i < n; ++i) {
      const std::int64_t s = smp.planted[static_cast<std::size_t>(i)];
      out.t_planted_mass += A(i, s);
      out.t_planted_hit += argmax_row(A, i) == s ? 1.0 : 0.0;
    }

  const RowMajor Qr = smp.Q, Kr = smp.K;
  const std::int64_t Asz = address_count(p);
  const std::ptrdiff_t tw = static_cast<std::ptrdiff_t>(U) * dp;
  // Factor tables and Top-K lists, as needed.
  const bool need_topk = c.topk > 0 && (wants(c, "topk") || wants(c, "gsu-standard") || wants(c, "gsu-mass"));
  std::vector<double> tq(static_cast<std::size_t>(n * tw)), tk(static_cast<std::size_t>(T * tw));
  for (Eigen::Index i = 0; i < n; ++i) factor_rows(cb, p.beta_r, Qr.row(i).data(), tq.data() + i * tw);
  for (Eigen::Index s = 0; s < T; ++s) factor_rows(cb, p.beta_w, Kr.row(s).data(), tk.data() + s * tw);
  const std::int64_t K = c.topk;
  std::vector<std::int64_t> fq, fk;
  std::vector<double> lq, lk;
  if (need_topk) {
    fq.resize(static_cast<std::size_t>(n * K));
    lq.resize(fq.size());
    fk.resize(static_cast<std::size_t>(T * K));
    lk.resize(fk.size());
    TopKDecoder dec(dp, U, K);
    for (Eigen::Index i = 0; i < n; ++i) dec.decode(tq.data() + i * tw, fq.data() + i * K, lq.data() + i * K);
    for (Eigen::Index s = 0; s < T; ++s) dec.decode(tk.data() + s * tw, fk.data() + s * K, lk.data() + s * K);
  }

  for (std::size_t si = 0; si < c.students.size(); ++si) {
    const std::string& name = c.students[si];
    Eigen::MatrixXd W;
    if (name == "kappa") {
      W = softmax_rows(log_kappa_matrix(p, cb, smp.Q, smp.K, kappa));  // kappa empty: the CPU
    } else if (name == "cape") {
      if (smp.Kb.size() == 0) continue;  // CAPE shifts need positions: rope generator only
      W = softmax_rows(log_kappa_cape_matrix(p, cb, smp.Qb, smp.Kb, smp.pos_q, smp.pos_k));
    } else if (name == "kinf") {
      if (cb.kind != CodebookKind::circular) continue;  // κ_∞ is the circular codebook's dp → ∞ limit
      Eigen::MatrixXd L(n, T);
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index s = 0; s < T; ++s) L(i, s) = log_kappa_inf(p, Qr.row(i).data(), Kr.row(s).data());
      W = softmax_rows(L);
    } else if (name == "topk") {
      if (K == 0) continue;
      std::vector<SortedList> rs, ws;
      for (Eigen::Index i = 0; i < n; ++i) rs.push_back(sort_by_flat(fq.data() + i * K, lq.data() + i * K, K));
      for (Eigen::Index s = 0; s < T; ++s) ws.push_back(sort_by_flat(fk.data() + s * K, lk.data() + s * K, K));
      const double logA = std::log(static_cast<double>(Asz));
      Eigen::MatrixXd L(n, T);
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index s = 0; s < T; ++s) {
          const TruncatedKappa tk2 = truncated_kappa(rs[static_cast<std::size_t>(i)], ws[static_cast<std::size_t>(s)], logA);
          L(i, s) = tk2.log_kappa;
          out.inter += static_cast<double>(tk2.intersection);
          out.zero += tk2.intersection == 0 ? 1.0 : 0.0;
          ++out.pairs;
        }
      for (Eigen::Index i = 0; i < n; ++i) {
        out.read_mass += retained_mass(lq.data() + i * K, K);
        ++out.reads;
      }
      for (Eigen::Index s = 0; s < T; ++s) {
        out.write_mass += retained_mass(lk.data() + s * K, K);
        ++out.writes;
      }
      W = softmax_rows(L);
    } else if (name == "gsu-standard" || name == "gsu-mass") {
      std::vector<AddressWeights> writes(static_cast<std::size_t>(T)), reads(static_cast<std::size_t>(n));
      AddressWeightsBuilder b(dp, U);
      for (Eigen::Index s = 0; s < T; ++s) {
        auto& w = writes[static_cast<std::size_t>(s)];
        if (K > 0) b.topk(tk.data() + s * tw, fk.data() + s * K, lk.data() + s * K, K, w);
        else b.full(tk.data() + s * tw, w);
      }
      for (Eigen::Index i = 0; i < n; ++i) {
        auto& r = reads[static_cast<std::size_t>(i)];
        if (K > 0) b.topk(tq.data() + i * tw, fq.data() + i * K, lq.data() + i * K, K, r, false);
        else b.full(tq.data() + i * tw, r, false);
      }
      std::int64_t empty = 0;
      W = induced_weights(Asz, K == 0, writes, reads, name == "gsu-mass" ? Readout::mass : Readout::standard, c.gamma,
                          c.eps, false, &empty);
      out.gsu_empty += empty;
    } else if (name == "vq") {
      // softmax_s(β_r q·k̂_s): k̂_s = per-factor nearest code of k_s (argmax c_j·k_u, ties to the lowest index).
      Eigen::MatrixXd Kh(T, 2 * U);
      for (Eigen::Index s = 0; s < T; ++s)
        for (int u = 0; u < U; ++u) {
          const Codebook& C = cb.factor[static_cast<std::size_t>(u)];
          const int j = nearest_code(C, Kr(s, 2 * u), Kr(s, 2 * u + 1));
          Kh(s, 2 * u) = C(0, j);
          Kh(s, 2 * u + 1) = C(1, j);
        }
      W = softmax_rows(p.beta_r * (smp.Q * Kh.transpose()));
    }
    score(A, W, smp.V, oT, smp.planted, out.acc[si]);
  }
  return out;
}

}  // namespace

AttnResult run_attention(const AttnConfig& c, const LogKappaFn& kappa) {
  validate(c);
  const CodebookSet cb = make_codebooks(c.codebook, c.params.dp, c.params.U, c.gen, c.seed);
  std::vector<TrialOut> trials(static_cast<std::size_t>(c.trials));
  parallel_for_rethrow(c.trials, [&](std::int64_t t) {
    trials[static_cast<std::size_t>(t)] = run_trial(c, cb, static_cast<std::uint64_t>(t), kappa);
  });

  AttnResult r;
  std::vector<Acc> tot(c.students.size());
  double tpm = 0, tph = 0;
  double rm = 0, wm = 0, in = 0, zr = 0;
  std::int64_t reads = 0, writes = 0, pairs = 0;
  for (const auto& t : trials) {  // reduction in trial order
    for (std::size_t s = 0; s < tot.size(); ++s) {
      const Acc& a = t.acc[s];
      Acc& b = tot[s];
      b.computed = b.computed || a.computed;
      b.js += a.js;
      b.kl += a.kl;
      b.missing += a.missing;
      b.nmse_num += a.nmse_num;
      b.nmse_den += a.nmse_den;
      b.planted_mass += a.planted_mass;
      b.planted_hit += a.planted_hit;
      b.live += a.live;
      b.dead += a.dead;
      b.queries += a.queries;
    }
    tpm += t.t_planted_mass;
    tph += t.t_planted_hit;
    rm += t.read_mass;
    wm += t.write_mass;
    in += t.inter;
    zr += t.zero;
    reads += t.reads;
    writes += t.writes;
    pairs += t.pairs;
    r.gsu_empty_reads += t.gsu_empty;
  }
  const double nq = static_cast<double>(c.n * c.trials);
  const bool planted = c.gen.kind == Generator::Kind::planted;
  for (std::size_t s = 0; s < tot.size(); ++s) {
    StudentStats st;
    st.name = c.students[s];
    const Acc& a = tot[s];
    if (a.computed) {
      if (a.live > 0) {
        st.js = a.js / static_cast<double>(a.live);
        st.js_bits = st.js / std::numbers::ln2;
        st.kl = a.kl / static_cast<double>(a.live);
      }
      st.nmse = a.nmse_den > 0 ? a.nmse_num / a.nmse_den : NAN;
      st.missing_mass = a.missing / static_cast<double>(a.queries);
      st.dead_rate = static_cast<double>(a.dead) / static_cast<double>(a.queries);
      if (planted) {
        st.planted_mass = a.planted_mass / static_cast<double>(a.queries);
        st.planted_hit = a.planted_hit / static_cast<double>(a.queries);
      }
    }
    r.students.push_back(st);
  }
  if (planted) {
    r.teacher_planted_mass = tpm / nq;
    r.teacher_planted_hit = tph / nq;
  }
  if (reads > 0) {
    r.read_mass = rm / static_cast<double>(reads);
    r.write_mass = wm / static_cast<double>(writes);
    r.intersection = in / static_cast<double>(pairs);
    r.zero_kernel_fraction = zr / static_cast<double>(pairs);
  }
  return r;
}

}  // namespace memcap::ramnet
