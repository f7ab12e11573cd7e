// Inputs of the attention experiments (spec ramnet.md §3 "Common inputs", E3 codebook ablation): key/query
// generators, codebook variants through the generic-codebook kernel, per-factor tables and log κ matrices
// (also through a backend such as the GPU, and between CAPE-shifted dense distributions).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "ramnet/adapter.hpp"
#include "ramnet/attention.hpp"

namespace memcap::ramnet {

namespace {
constexpr double kTwoPi = 2.0 * std::numbers::pi;

std::uint64_t idx(std::uint64_t trial, std::uint64_t i) { return (trial << 32) + i; }
using RowMajorMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// "name:k=v,k=v" -> name and (key, value) pairs (values must be finite numbers).
std::pair<std::string, std::vector<std::pair<std::string, double>>> split_spec(const std::string& spec,
                                                                                const std::string& what) {
  const auto colon = spec.find(':');
  std::pair<std::string, std::vector<std::pair<std::string, double>>> out;
  out.first = spec.substr(0, colon);
  if (colon == std::string::npos) return out;
  for (const std::string& item : split_list(spec.substr(colon + 1), ',', what + " '" + spec + "'")) {
    const auto eq = item.find('=');
    require(eq != std::string::npos && eq > 0, "{} '{}': options are key=value (got '{}')", what, spec, item);
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(val.c_str(), &end);
    require(!val.empty() && end && *end == '\0' && std::isfinite(v), "{} '{}': {} = '{}' is not a finite number",
            what, spec, key, val);
    out.second.emplace_back(key, v);
  }
  return out;
}
}  // namespace

// ---- generators ---------------------------------------------------------------------------------

Generator Generator::parse(const std::string& spec) {
  const auto [name, opts] = split_spec(spec, "generator");
  Generator g;
  if (name == "gauss") g.kind = Kind::gauss;
  else if (name == "torus") g.kind = Kind::torus;
  else if (name == "planted") g.kind = Kind::planted;
  else if (name == "rope") g.kind = Kind::rope;
  else if (name == "teacher") g.kind = Kind::teacher;
  else
    throw UserError(fmt::format("generator '{}' must be gauss[:sigma=S], torus[:rho=R], planted[:sigma_q=S,sigma=S], "
                                "rope[:sigma=S] or teacher[:dk=D,dmodel=M,sigma=S]",
                                spec));
  for (const auto& [k, v] : opts) {
    const bool teacher = g.kind == Kind::teacher;
    const bool ok = (k == "sigma" && g.kind != Kind::torus) || (k == "rho" && g.kind == Kind::torus) ||
                    (k == "sigma_q" && g.kind == Kind::planted) || ((k == "dk" || k == "dmodel") && teacher);
    require(ok, "generator '{}': unknown option '{}' for {}", spec, k, name);
    if (k == "dk" || k == "dmodel") {
      const int hi = k == "dk" ? 1024 : 512;
      require(v == std::floor(v) && v >= 1 && v <= hi, "generator '{}': {} must be an integer in 1..{}", spec, k, hi);
      (k == "dk" ? g.dk : g.dmodel) = static_cast<int>(v);
      continue;
    }
    // Scales beyond kMaxGeneratorScale overflow the logits q.k and the Gram matrices into inf/NaN (rho = 1e308
    // gave NaN JS and NMSE reported as a finished job).
    if (k == "sigma_q")
      require(v >= 0 && v <= kMaxGeneratorScale, "generator '{}': sigma_q must be >= 0 (and <= {:g})", spec,
              kMaxGeneratorScale);
    else
      require(v > 0 && v <= kMaxGeneratorScale, "generator '{}': {} = {:g} must be > 0 and <= {:g}", spec, k, v,
              kMaxGeneratorScale);
    (k == "sigma" ? g.sigma : k == "rho" ? g.rho : g.sigma_q) = v;
  }
  if (g.kind == Kind::teacher)
    require(g.dk <= g.dmodel, "generator '{}': dk = {} must be <= dmodel = {}", spec, g.dk, g.dmodel);
  return g;
}

std::string Generator::spec() const {
  switch (kind) {
    case Kind::gauss: return fmt::format("gauss:sigma={:g}", sigma);
    case Kind::torus: return fmt::format("torus:rho={:g}", rho);
    case Kind::planted: return fmt::format("planted:sigma_q={:g},sigma={:g}", sigma_q, sigma);
    case Kind::rope: return fmt::format("rope:sigma={:g}", sigma);
    case Kind::teacher: return fmt::format("teacher:dk={},dmodel={},sigma={:g}", dk, dmodel, sigma);
  }
  return "";
}

namespace {
// Row i of a T×2U matrix from the generator's base law (gauss / torus) on one stream.
void draw_rows(const Generator& g, Eigen::MatrixXd& X, int U, std::uint64_t seed, std::uint64_t stream,
               std::uint64_t trial) {
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (int u = 0; u < U; ++u) {
      if (g.kind == Generator::Kind::torus) {
        const double th = kTwoPi * rng::uniform(seed, stream, idx(trial, static_cast<std::uint64_t>(i * U + u)));
        X(i, 2 * u) = g.rho * std::cos(th);
        X(i, 2 * u + 1) = g.rho * std::sin(th);
      } else {
        for (int c = 0; c < 2; ++c)
          X(i, 2 * u + c) = g.sigma * rng::normal(seed, stream, idx(trial, static_cast<std::uint64_t>(i * 2 * U + 2 * u + c)));
      }
    }
}

void rotate_rows(Eigen::MatrixXd& X, int dp, int U, const std::vector<double>& position) {
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (int u = 0; u < U; ++u) {
      const double nu = kTwoPi / std::pow(static_cast<double>(dp), u + 1);
      const double a = nu * position[static_cast<std::size_t>(i)], c = std::cos(a), s = std::sin(a);
      const double x = X(i, 2 * u), y = X(i, 2 * u + 1);
      X(i, 2 * u) = c * x - s * y;
      X(i, 2 * u + 1) = s * x + c * y;
    }
}
}  // namespace

namespace {
// Teacher generator: W_Q, W_K from model_seed (fixed across trials and across the calibration sample),
// hidden states from (seed, trial); the students' 2U-dim vectors through the NoPE init of §1.9.
void teacher_sample(const Generator& g, int U, std::int64_t T, std::int64_t n, std::uint64_t seed,
                    std::uint64_t model_seed, std::uint64_t trial, AttnSample& s) {
  const int dk = g.dk, dm = g.dmodel;
  AdapterTeacher t;
  t.WQ.resize(dk, dm);
  t.WK.resize(dk, dm);
  const double ws = 1.0 / std::sqrt(static_cast<double>(dm));
  for (int i = 0; i < dk; ++i)
    for (int j = 0; j < dm; ++j) {
      const auto e = static_cast<std::uint64_t>(i * dm + j);
      t.WQ(i, j) = ws * rng::normal(model_seed, attn_streams::kTeacherWeights, 2 * e);
      t.WK(i, j) = ws * rng::normal(model_seed, attn_streams::kTeacherWeights, 2 * e + 1);
    }
  t.SigmaQ = t.SigmaK = g.sigma * g.sigma * Eigen::MatrixXd::Identity(dm, dm);
  t.deltas = {0.0};
  t.prob = {1.0};
  t.kind = "attn-teacher";
  const AdapterResult a = nope_adapter(t, U);
  Eigen::MatrixXd Hk(T, dm), Hq(n, dm);
  // Key i's entry j at counter 2(i·d_model + j), query i's at 2(i·d_model + j) + 1.
  auto hidden = [&](Eigen::Index i, int j, std::uint64_t which) {
    const auto e = static_cast<std::uint64_t>(2 * (i * dm + j)) + which;
    return g.sigma * rng::normal(seed, attn_streams::kTeacherHidden, idx(trial, e));
  };
  for (Eigen::Index i = 0; i < T; ++i)
    for (int j = 0; j < dm; ++j) Hk(i, j) = hidden(i, j, 0);
  for (Eigen::Index i = 0; i < n; ++i)
    for (int j = 0; j < dm; ++j) Hq(i, j) = hidden(i, j, 1);
  s.Kt = Hk * t.WK.transpose();
  s.Qt = Hq * t.WQ.transpose();
  s.K = Hk * a.WKt.transpose();
  s.Q = Hq * a.WQt.transpose();
}

AttnSample generate_sample(const Generator& g, int dp, int U, std::int64_t T, std::int64_t n, int dv,
                           std::uint64_t seed, std::uint64_t model_seed, std::uint64_t trial) {
  AttnSample s;
  s.K.resize(T, 2 * U);
  s.Q.resize(n, 2 * U);
  s.V.resize(T, dv);
  if (g.kind == Generator::Kind::teacher) {
    teacher_sample(g, U, T, n, seed, model_seed, trial, s);
  } else {
    draw_rows(g, s.K, U, seed, attn_streams::kKeys, trial);
  }
  if (g.kind == Generator::Kind::teacher) {
    // keys and queries come from the teacher's hidden states above
  } else if (g.kind == Generator::Kind::planted) {
    s.planted.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const auto st = static_cast<std::int64_t>(
          rng::below(seed, attn_streams::kPlanted, idx(trial, static_cast<std::uint64_t>(i)), static_cast<std::uint64_t>(T)));
      s.planted[static_cast<std::size_t>(i)] = st;
      for (int c = 0; c < 2 * U; ++c)
        s.Q(i, c) = s.K(st, c) + g.sigma_q * rng::normal(seed, attn_streams::kQueries,
                                                          idx(trial, static_cast<std::uint64_t>(i * 2 * U + c)));
    }
  } else {
    draw_rows(g, s.Q, U, seed, attn_streams::kQueries, trial);
  }
  if (g.kind == Generator::Kind::rope) {
    std::vector<double> pk(static_cast<std::size_t>(T)), pq(static_cast<std::size_t>(n), static_cast<double>(T));
    for (std::int64_t i = 0; i < T; ++i) pk[static_cast<std::size_t>(i)] = static_cast<double>(i);
    s.Kb = s.K;
    s.Qb = s.Q;
    s.pos_k.resize(static_cast<std::size_t>(T));
    for (std::int64_t i = 0; i < T; ++i) s.pos_k[static_cast<std::size_t>(i)] = i;
    s.pos_q.assign(static_cast<std::size_t>(n), T);
    rotate_rows(s.K, dp, U, pk);
    rotate_rows(s.Q, dp, U, pq);
  }
  for (Eigen::Index i = 0; i < T; ++i)
    for (int c = 0; c < dv; ++c)
      s.V(i, c) = rng::normal(seed, attn_streams::kValues, idx(trial, static_cast<std::uint64_t>(i * dv + c)));
  return s;
}
}  // namespace

AttnSample generate(const Generator& g, int dp, int U, std::int64_t T, std::int64_t n, int dv, std::uint64_t seed,
                    std::uint64_t trial) {
  return generate_sample(g, dp, U, T, n, dv, seed, seed, trial);
}

// ---- codebooks ------------------------------------------------------------------------------------

CodebookKind parse_codebook(const std::string& name) {
  if (name == "circular") return CodebookKind::circular;
  if (name == "random") return CodebookKind::random;
  if (name == "orthogonal") return CodebookKind::orthogonal;
  if (name == "kmeans") return CodebookKind::kmeans;
  if (name == "pq") return CodebookKind::pq;
  throw UserError(fmt::format("codebook '{}' must be circular, random, orthogonal, kmeans or pq", name));
}

const char* codebook_name(CodebookKind k) {
  switch (k) {
    case CodebookKind::circular: return "circular";
    case CodebookKind::random: return "random";
    case CodebookKind::orthogonal: return "orthogonal";
    case CodebookKind::kmeans: return "kmeans";
    case CodebookKind::pq: return "pq";
  }
  return "";
}

namespace {
void rescale_rms(Codebook& C) {
  const double rms = std::sqrt(C.squaredNorm() / static_cast<double>(C.cols()));
  if (rms > 0) C /= rms;
}

// Lloyd's k-means on the columns of X (2×N): k-means++ seeding from `stream`, 50 iterations, empty
// clusters re-seeded at the point farthest from its centroid.
Codebook kmeans(const Eigen::Matrix<double, 2, Eigen::Dynamic>& X, int k, std::uint64_t seed, std::uint64_t stream) {
  const Eigen::Index N = X.cols();
  Codebook C(2, k);
  std::uint64_t draw = 0;
  C.col(0) = X.col(static_cast<Eigen::Index>(rng::below(seed, stream, draw++, static_cast<std::uint64_t>(N))));
  Eigen::VectorXd d2(N);
  for (int j = 1; j < k; ++j) {
    for (Eigen::Index i = 0; i < N; ++i) {
      double best = INFINITY;
      for (int l = 0; l < j; ++l) best = std::min(best, (X.col(i) - C.col(l)).squaredNorm());
      d2(i) = best;
    }
    const double total = d2.sum();
    double u = rng::uniform(seed, stream, draw++) * total, acc = 0;
    Eigen::Index pick = N - 1;
    for (Eigen::Index i = 0; i < N; ++i) {
      acc += d2(i);
      if (acc >= u) {
        pick = i;
        break;
      }
    }
    C.col(j) = X.col(pick);
  }
  std::vector<int> assign(static_cast<std::size_t>(N), -1);
  for (int it = 0; it < 50; ++it) {
    Codebook sum = Codebook::Zero(2, k);
    std::vector<int> count(static_cast<std::size_t>(k), 0);
    bool changed = false;
    for (Eigen::Index i = 0; i < N; ++i) {
      int best = 0;
      double bd = INFINITY;
      for (int l = 0; l < k; ++l) {
        const double d = (X.col(i) - C.col(l)).squaredNorm();
        if (d < bd) {
          bd = d;
          best = l;
        }
      }
      changed = changed || assign[static_cast<std::size_t>(i)] != best;
      assign[static_cast<std::size_t>(i)] = best;
      sum.col(best) += X.col(i);
      ++count[static_cast<std::size_t>(best)];
    }
    for (int l = 0; l < k; ++l) {
      if (count[static_cast<std::size_t>(l)] > 0) {
        C.col(l) = sum.col(l) / count[static_cast<std::size_t>(l)];
      } else {  // empty cluster: the point farthest from its centroid
        Eigen::Index far = 0;
        double fd = -1;
        for (Eigen::Index i = 0; i < N; ++i) {
          const double d = (X.col(i) - C.col(assign[static_cast<std::size_t>(i)])).squaredNorm();
          if (d > fd) {
            fd = d;
            far = i;
          }
        }
        C.col(l) = X.col(far);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return C;
}
}  // namespace

CodebookSet make_codebooks(CodebookKind kind, int dp, int U, const Generator& calibration, std::uint64_t seed) {
  require(dp >= 2 && U >= 1, "codebooks need dp >= 2 and U >= 1");
  CodebookSet cb;
  cb.kind = kind;
  Codebook shared(2, dp);
  switch (kind) {
    case CodebookKind::circular: shared = circular_codebook(dp); break;
    case CodebookKind::random:
      for (int j = 0; j < dp; ++j)
        for (int r = 0; r < 2; ++r)
          shared(r, j) = rng::normal(seed, attn_streams::kCodebook, static_cast<std::uint64_t>(2 * j + r));
      rescale_rms(shared);
      break;
    case CodebookKind::orthogonal:
      for (int b = 0; 2 * b < dp; ++b) {
        Eigen::Matrix2d G;
        for (int e = 0; e < 4; ++e) G.data()[e] = rng::normal(seed, attn_streams::kCodebook, static_cast<std::uint64_t>(8 * b + e));
        const Eigen::Matrix2d Qm = Eigen::HouseholderQR<Eigen::Matrix2d>(G).householderQ();
        for (int c = 0; c < 2 && 2 * b + c < dp; ++c) {
          const double n1 = rng::normal(seed, attn_streams::kCodebook, static_cast<std::uint64_t>(8 * b + 4 + 2 * c));
          const double n2 = rng::normal(seed, attn_streams::kCodebook, static_cast<std::uint64_t>(8 * b + 5 + 2 * c));
          shared.col(2 * b + c) = Qm.col(c) * std::hypot(n1, n2);
        }
      }
      rescale_rms(shared);
      break;
    case CodebookKind::kmeans:
    case CodebookKind::pq: {
      // Calibration: 4096 keys and 4096 queries of the generator on its own stream (trial index 2^31).
      const AttnSample cal = [&] {
        Generator g = calibration;
        AttnSample s = generate_sample(g, dp, U, 4096, 4096, 1, seed ^ 0x5EEDCA1Bull, seed, std::uint64_t(1) << 31);
        return s;
      }();
      auto blocks = [&](int u_first, int u_last) {
        Eigen::Matrix<double, 2, Eigen::Dynamic> X(2, (cal.K.rows() + cal.Q.rows()) * (u_last - u_first));
        Eigen::Index c = 0;
        for (const Eigen::MatrixXd* M : {&cal.K, &cal.Q})
          for (Eigen::Index i = 0; i < M->rows(); ++i)
            for (int u = u_first; u < u_last; ++u) X.col(c++) = Eigen::Vector2d((*M)(i, 2 * u), (*M)(i, 2 * u + 1));
        return X;
      };
      if (kind == CodebookKind::kmeans) {
        shared = kmeans(blocks(0, U), dp, seed, attn_streams::kCalibration);
        rescale_rms(shared);
      } else {
        for (int u = 0; u < U; ++u) {
          Codebook C = kmeans(blocks(u, u + 1), dp, seed, attn_streams::kCalibration + 0);
          rescale_rms(C);
          cb.factor.push_back(C);
        }
        return cb;
      }
      break;
    }
  }
  cb.factor.assign(static_cast<std::size_t>(U), shared);
  return cb;
}

void factor_rows(const CodebookSet& cb, double b, const double* x, double* out) {
  const int U = static_cast<int>(cb.factor.size());
  for (int u = 0; u < U; ++u) {
    const Codebook& C = cb.factor[static_cast<std::size_t>(u)];
    factor_log_probs(C, b, x[2 * u], x[2 * u + 1], out + static_cast<std::ptrdiff_t>(u) * C.cols());
  }
}

Eigen::MatrixXd log_kappa_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K) {
  if (cb.shared()) return log_kappa_matrix(p, cb.factor[0], Q, K);
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(Q.rows(), K.rows());
  const Params one{p.dp, 1, p.beta_r, p.beta_w};
  for (int u = 0; u < p.U; ++u)
    L += log_kappa_matrix(one, cb.factor[static_cast<std::size_t>(u)], Q.middleCols(2 * u, 2), K.middleCols(2 * u, 2));
  return L;
}

Eigen::MatrixXd log_kappa_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K, const LogKappaFn& fn) {
  if (!fn) return log_kappa_matrix(p, cb, Q, K);
  if (cb.shared()) return fn(p, cb.factor[0], Q, K);
  Eigen::MatrixXd L = Eigen::MatrixXd::Zero(Q.rows(), K.rows());
  const Params one{p.dp, 1, p.beta_r, p.beta_w};
  for (int u = 0; u < p.U; ++u) {
    const Eigen::MatrixXd Qu = Q.middleCols(2 * u, 2), Ku = K.middleCols(2 * u, 2);
    L += fn(one, cb.factor[static_cast<std::size_t>(u)], Qu, Ku);
  }
  return L;
}

namespace {
// Dense address distribution (|A| entries, digit 0 least significant) of x under per-factor codebooks.
Eigen::VectorXd dense_of(const CodebookSet& cb, int dp, int U, double b, const double* x) {
  Eigen::MatrixXd table(U, dp);
  std::vector<double> row(static_cast<std::size_t>(U) * dp);
  factor_rows(cb, b, x, row.data());
  for (int u = 0; u < U; ++u)
    for (int j = 0; j < dp; ++j) table(u, j) = row[static_cast<std::size_t>(u * dp + j)];
  return dense_distribution(table);
}
}  // namespace

Eigen::MatrixXd log_kappa_cape_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Qb,
                                      const Eigen::MatrixXd& Kb, const std::vector<std::int64_t>& pos_q,
                                      const std::vector<std::int64_t>& pos_k) {
  require(Qb.cols() == 2 * p.U && Kb.cols() == 2 * p.U && static_cast<Eigen::Index>(pos_q.size()) == Qb.rows() &&
              static_cast<Eigen::Index>(pos_k.size()) == Kb.rows(),
          "log_kappa_cape_matrix: shapes {}x{}, {}x{} with {} and {} positions do not fit 2U = {}", Qb.rows(),
          Qb.cols(), Kb.rows(), Kb.cols(), pos_q.size(), pos_k.size(), 2 * p.U);
  require_dense(p, 8.0 * static_cast<double>(Qb.rows() + Kb.rows()), "CAPE shifts");
  const std::int64_t A = address_count(p);
  const RowMajorMatrix Qr = Qb, Kr = Kb;
  // Rows hold the shifted distributions: r'(i) = r((i − t) mod |A|).
  auto shifted = [&](const RowMajorMatrix& X, double b, const std::vector<std::int64_t>& pos) {
    Eigen::MatrixXd D(A, X.rows());
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const Eigen::VectorXd r = dense_of(cb, p.dp, p.U, b, X.row(i).data());
      const std::int64_t t = ((pos[static_cast<std::size_t>(i)] % A) + A) % A;
      for (std::int64_t a = 0; a < A; ++a) D((a + t) % A, i) = r(a);
    }
    return D;
  };
  const Eigen::MatrixXd R = shifted(Qr, p.beta_r, pos_q), W = shifted(Kr, p.beta_w, pos_k);
  const Eigen::MatrixXd G = R.transpose() * W;  // n × N overlaps Σ_i r'(i) w'(i)
  return (G.array() * static_cast<double>(A)).log().matrix();
}

}  // namespace memcap::ramnet
