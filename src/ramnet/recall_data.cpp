// Inputs of the E7 recall protocol (spec ramnet.md §3 E7): names and checks, the counter-based draws
// (keys, noisy queries, values, FAVOR+ projections), factor tables, Top-K weights, the hard-write
// prediction (T15) and the cost model used to plan a sweep before anything runs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ramnet/recall.hpp"
#include "ramnet/topk.hpp"

namespace memcap::ramnet {

namespace {
constexpr std::int64_t kMaxRecallTopK = 1024;   // the GPU merge keeps K-lists per row; see docs/ramnet.md
constexpr std::int64_t kMaxRecallN = std::int64_t(1) << 24;
}  // namespace

Mixer parse_mixer(const std::string& name) {
  if (name == "ramnet") return Mixer::ramnet;
  if (name == "softmax") return Mixer::softmax;
  if (name == "kappa") return Mixer::kappa;
  if (name == "ram-linear") return Mixer::ram_linear;
  if (name == "elu") return Mixer::elu;
  if (name == "favor") return Mixer::favor;
  throw UserError(fmt::format("unknown mixer '{}'; use ramnet, softmax, kappa, ram-linear, elu or favor", name));
}

const char* to_string(Mixer m) {
  switch (m) {
    case Mixer::ramnet: return "ramnet";
    case Mixer::softmax: return "softmax";
    case Mixer::kappa: return "kappa";
    case Mixer::ram_linear: return "ram-linear";
    case Mixer::elu: return "elu";
    case Mixer::favor: return "favor";
  }
  return "?";
}

std::vector<Mixer> all_mixers() {
  return {Mixer::ramnet, Mixer::softmax, Mixer::kappa, Mixer::ram_linear, Mixer::elu, Mixer::favor};
}

KeyModel KeyModel::parse(const std::string& spec) {
  KeyModel k;
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  std::string param;
  if (kind == "torus") {
    k.kind = Kind::torus;
    param = "rho";
  } else if (kind == "gauss") {
    k.kind = Kind::gauss;
    param = "sigma";
  } else {
    throw UserError(fmt::format("--keys '{}': use torus, torus:rho=R, gauss or gauss:sigma=S", spec));
  }
  if (colon != std::string::npos) {
    const std::string rest = spec.substr(colon + 1);
    const auto eq = rest.find('=');
    require(eq != std::string::npos && rest.substr(0, eq) == param,
            "--keys '{}': the {} key model takes one option, {}=VALUE", spec, kind, param);
    const std::string v = rest.substr(eq + 1);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    require(!v.empty() && end && *end == '\0' && std::isfinite(x) && x > 0 && x <= 1e6,
            "--keys '{}': {} must be a number in (0, 1e6]", spec, param);
    k.scale = x;
  }
  return k;
}

std::string KeyModel::spec() const {
  return kind == Kind::torus ? fmt::format("torus:rho={:g}", scale) : fmt::format("gauss:sigma={:g}", scale);
}

std::int64_t RecallModel::features() const {
  switch (mixer) {
    case Mixer::ramnet:
    case Mixer::ram_linear:
    case Mixer::favor: return address_count(params);
    case Mixer::elu: return 2 * params.U;
    case Mixer::softmax:
    case Mixer::kappa: return 0;
  }
  return 0;
}

void validate(const RecallModel& m) {
  validate(m.params);
  require(std::isfinite(m.tau) && m.tau > 0, "--tau {} must be a finite number > 0", m.tau);
  require(std::isfinite(m.eps) && m.eps >= 0, "--eps {} must be a finite number >= 0", m.eps);
  require(!std::isnan(m.gamma) && m.gamma != INFINITY, "--gamma must be a finite number or -inf");
  const std::int64_t A = address_count(m.params);
  if (m.mixer == Mixer::ramnet) {
    require(m.topk >= 0 && m.topk <= A, "--topk {} must be between 0 (full) and the address space dp^U = {}^{} = {}",
            m.topk, m.params.dp, m.params.U, A);
    require(m.topk <= kMaxRecallTopK, "--topk {} is larger than recall supports ({}); use a smaller K or 0 (full)",
            m.topk, kMaxRecallTopK);
  }
  if (m.mixer == Mixer::ramnet || m.mixer == Mixer::ram_linear || m.mixer == Mixer::favor)
    require_dense(m.params, 8.0 * 65, fmt::format("the {} memory of recall", to_string(m.mixer)));
}

std::uint64_t trial_seed(std::uint64_t base, int s) { return rng::derive_seed(base, fmt::format("ramnet-recall/seed={}", s)); }

RowMatrix favor_projection(std::int64_t D, int d, std::uint64_t seed) {
  RowMatrix omega(D, d);
  const std::int64_t blocks = (D + d - 1) / d;
#pragma omp parallel for schedule(static) if (D > 4096)
  for (std::int64_t b = 0; b < blocks; ++b) {
    RowMatrix G(d, d);
    for (int r = 0; r < d; ++r)
      for (int c = 0; c < d; ++c)
        G(r, c) = rng::normal(seed, recall_streams::kFavorDirections, static_cast<std::uint64_t>((b * d + r) * d + c));
    // Modified Gram-Schmidt on the rows (a Gaussian block has full rank with probability 1).
    for (int r = 0; r < d; ++r) {
      for (int p = 0; p < r; ++p) G.row(r) -= G.row(r).dot(G.row(p)) * G.row(p);
      const double n = G.row(r).norm();
      if (n > 0) G.row(r) /= n;
    }
    for (int r = 0; r < d; ++r) {
      const std::int64_t row = b * d + r;
      if (row >= D) break;
      double s = 0;
      for (int c = 0; c < d; ++c) {
        const double z = rng::normal(seed, recall_streams::kFavorNorms, static_cast<std::uint64_t>((b * d + r) * d + c));
        s += z * z;
      }
      omega.row(row) = std::sqrt(s) * G.row(r);
    }
  }
  return omega;
}

RecallInputs draw_recall_inputs(const RecallModel& m, const KeyModel& keys, double sigma_q, int dv, std::uint64_t seed,
                                std::int64_t N) {
  const int U = m.params.U, d = 2 * U;
  RecallInputs in;
  in.keys.resize(N, d);
  in.values.resize(N, dv);
  const double two_pi = 2.0 * std::numbers::pi;
#pragma omp parallel for schedule(static) if (N * (d + dv) > 65536)
  for (std::int64_t i = 0; i < N; ++i) {
    const auto ui = static_cast<std::uint64_t>(i);
    if (keys.kind == KeyModel::Kind::torus) {
      for (int u = 0; u < U; ++u) {
        const double th = two_pi * rng::uniform(seed, recall_streams::kKeys, ui * U + u);
        in.keys(i, 2 * u) = keys.scale * std::cos(th);
        in.keys(i, 2 * u + 1) = keys.scale * std::sin(th);
      }
    } else {
      for (int c = 0; c < d; ++c) in.keys(i, c) = keys.scale * rng::normal(seed, recall_streams::kKeys, ui * d + c);
    }
    for (int c = 0; c < dv; ++c) in.values(i, c) = rng::normal(seed, recall_streams::kValues, ui * dv + c);
  }
  in.queries = in.keys;
  if (sigma_q > 0) {
#pragma omp parallel for schedule(static) if (N * d > 65536)
    for (std::int64_t i = 0; i < N; ++i)
      for (int c = 0; c < d; ++c)
        in.queries(i, c) += sigma_q * rng::normal(seed, recall_streams::kQueryNoise, static_cast<std::uint64_t>(i) * d + c);
  }
  if (m.mixer == Mixer::favor) in.omega = favor_projection(address_count(m.params), d, seed);
  return in;
}

FactorTables factor_tables(const Params& p, double b, const RowMatrix& X) {
  MEMCAP_ASSERT(X.cols() == 2 * p.U, "factor_tables: X must have 2U columns");
  FactorTables t;
  t.n = X.rows();
  t.U = p.U;
  t.dp = p.dp;
  const std::int64_t w = static_cast<std::int64_t>(p.U) * p.dp;
  t.logp.resize(static_cast<std::size_t>(t.n * w));
  t.prob.resize(t.logp.size());
  const Codebook C = circular_codebook(p.dp);
#pragma omp parallel for schedule(static) if (t.n > 4096)
  for (std::int64_t i = 0; i < t.n; ++i) {
    double* lp = t.logp.data() + i * w;
    for (int u = 0; u < p.U; ++u) factor_log_probs(C, b, X(i, 2 * u), X(i, 2 * u + 1), lp + u * p.dp);
    for (std::int64_t k = 0; k < w; ++k) t.prob[static_cast<std::size_t>(i * w + k)] = std::exp(lp[k]);
  }
  return t;
}

double address_weight(const double* prob_row, int dp, int U, std::int64_t flat) {
  double w = prob_row[flat % dp];
  flat /= dp;
  for (int u = 1; u < U; ++u) {
    w *= prob_row[u * dp + flat % dp];
    flat /= dp;
  }
  return w;
}

SparseWeights topk_weights(const FactorTables& t, std::int64_t K) {
  SparseWeights s;
  s.n = t.n;
  s.K = K;
  s.flat.resize(static_cast<std::size_t>(t.n * K));
  s.weight.resize(s.flat.size());
  std::vector<double> lp(s.flat.size());
  topk_batch(t.dp, t.U, K, t.logp.data(), t.n, s.flat.data(), lp.data());
  const int w = t.U * t.dp;
#pragma omp parallel for schedule(static) if (t.n > 4096)
  for (std::int64_t i = 0; i < t.n; ++i)
    for (std::int64_t k = 0; k < K; ++k)
      s.weight[static_cast<std::size_t>(i * K + k)] =
          address_weight(t.prob.data() + i * w, t.dp, t.U, s.flat[static_cast<std::size_t>(i * K + k)]);
  return s;
}

// ---- protocol helpers -------------------------------------------------------------------------

std::int64_t default_n_max(const RecallModel& m) {
  const double a = std::pow(static_cast<double>(m.params.dp), m.params.U);
  return static_cast<std::int64_t>(std::clamp(4.0 * a, 64.0, 131072.0));
}

std::int64_t effective_n_max(const RecallConfig& c) {
  std::int64_t n = c.search ? (c.n_max > 0 ? c.n_max : default_n_max(c.model)) : 0;
  for (auto x : c.n_list) n = std::max(n, x);
  return n;
}

void validate(const RecallConfig& c) {
  validate(c.model);
  require(std::isfinite(c.sigma_q) && c.sigma_q >= 0 && c.sigma_q <= 1e6, "--sigma-q {} must be a number in [0, 1e6]",
          c.sigma_q);
  require(c.dv >= 1 && c.dv <= 4096, "--dv {} must be in [1, 4096]", c.dv);
  require(c.seeds >= 1 && c.seeds <= 100000, "--seeds {} must be in [1, 100000]", c.seeds);
  require(c.n_min >= 1 && c.n_min <= kMaxRecallN, "--n-min {} must be in [1, {}]", c.n_min, kMaxRecallN);
  require(c.n_max == 0 || (c.n_max >= c.n_min && c.n_max <= kMaxRecallN),
          "--n-max {} must be 0 (automatic) or in [--n-min = {}, {}]", c.n_max, c.n_min, kMaxRecallN);
  if (c.search && c.n_max == 0)
    require(default_n_max(c.model) >= c.n_min, "--n-min {} is above the automatic --n-max {}; give --n-max", c.n_min,
            default_n_max(c.model));
  for (auto n : c.n_list) require(n >= 1 && n <= kMaxRecallN, "--N {} must be in [1, {}]", n, kMaxRecallN);
  require(c.search || !c.n_list.empty(), "nothing to measure: give --N values or drop --no-search");
}

int recency_bin(std::int64_t age) {
  int b = 0;
  while (age > 0) {
    age >>= 1;
    ++b;
  }
  return b;
}

int recency_bins(std::int64_t n_max) { return recency_bin(std::max<std::int64_t>(n_max - 1, 0)) + 1; }

double hard_write_accuracy(double addresses, std::int64_t N) {
  if (N <= 0) return 1.0;
  const double n = static_cast<double>(N);
  return -addresses * std::expm1(n * std::log1p(-1.0 / addresses)) / n;
}

std::int64_t hard_write_capacity(double addresses, double delta, std::int64_t n_max) {
  if (hard_write_accuracy(addresses, 1) < 1.0 - delta) return 0;
  std::int64_t lo = 1, hi = n_max + 1;  // pass(lo), fail(hi) (hi = n_max + 1: assumed failing)
  if (hard_write_accuracy(addresses, n_max) >= 1.0 - delta) return n_max;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (hard_write_accuracy(addresses, mid) >= 1.0 - delta ? lo : hi) = mid;
  }
  return lo;
}

double trial_flops(const RecallModel& m, std::int64_t N, int dv) {
  const double n = static_cast<double>(N), d = 2.0 * m.params.U, v = dv, U = m.params.U, dp = m.params.dp;
  const double decode = 2 * n * n * v + 4 * n * v;
  const double D = m.features() > 0 ? static_cast<double>(m.features()) : 0;
  switch (m.mixer) {
    case Mixer::softmax: return decode + 2 * n * n * d + 2 * n * n * (v + 1) + 20 * n * n;
    case Mixer::kappa: return decode + 2 * n * n * U * dp + 2 * n * n * (v + 1) + 4 * n * n * U;
    case Mixer::ram_linear: return decode + 2 * n * D * U + 4 * n * D * (v + 1);
    case Mixer::elu: return decode + 4 * n * d * (v + 1);
    case Mixer::favor: return decode + 4 * n * D * d + 40 * n * D + 4 * n * D * (v + 1);
    case Mixer::ramnet:
      if (m.topk > 0) {
        const double K = static_cast<double>(m.topk);
        return decode + 2 * n * U * K * dp * std::log2(K + 1) + 4 * n * K * (v + 1) + (m.cumulative() ? 0 : 10 * n * K);
      }
      return decode + 2 * n * D * U + 4 * n * D * (v + 1) + (m.cumulative() ? 0 : 2 * n * D * (v + 12));
  }
  return decode;
}

double search_flops(const RecallConfig& c) {
  const std::int64_t n_max = effective_n_max(c);
  double f = 0;
  if (c.search) {
    for (std::int64_t N = c.n_min;; N = std::min(2 * N, n_max)) {
      f += trial_flops(c.model, N, c.dv);
      if (N >= n_max) break;
    }
    const double steps = std::ceil(std::log2(static_cast<double>(n_max) + 1));
    f += 2 * steps * trial_flops(c.model, n_max, c.dv);
  }
  for (auto N : c.n_list) f += trial_flops(c.model, N, c.dv);
  return f * c.seeds;
}

double trial_bytes(const RecallModel& m, std::int64_t N, int dv) {
  const double n = static_cast<double>(N), d = 2.0 * m.params.U, v = dv;
  const double inputs = 8 * n * (2 * d + 2 * v + 2) + 16 * n * m.params.U * m.params.dp * 2;
  const double D = static_cast<double>(m.features());
  const double state = m.features() > 0 ? 8 * D * (v + 2) + 8 * D * d : 0;
  const double topk = m.mixer == Mixer::ramnet ? 32.0 * n * static_cast<double>(m.topk) : 0;
  constexpr double kTile = 8.0 * (std::int64_t(1) << 23);  // tile buffers (recall_cpu.cpp: 8M doubles each, two)
  return inputs + state + topk + 2 * kTile + 16 * n;
}

double trial_device_bytes(const RecallModel& m, std::int64_t N, int dv) {
  const double n = static_cast<double>(N), U = m.params.U, dp = m.params.dp, v = dv;
  const double inputs = 8 * n * (4 * U + 4 * v + 8) + 48 * n * U * dp;
  const double D = static_cast<double>(m.features());
  const double state = 16 * D * (v + 2) + 8 * D * 2 * U;
  const double topk = m.mixer == Mixer::ramnet ? 64.0 * n * static_cast<double>(m.topk) : 0;
  return inputs + state + topk + 2 * 8.0 * static_cast<double>(kDeviceTileDoubles) + 64.0 * (1 << 20);
}

}  // namespace memcap::ramnet
