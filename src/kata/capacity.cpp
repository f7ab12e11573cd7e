// The capacity protocol of spec §4.6: per-trial nested draws, aggregation over trials, the
// doubling + integer bisection search for K*_psnr and K*_acc, the fail-loud state/closed-form
// cross-check, and the theory overlays. Device-independent: a TrialBackend does the arithmetic.
#include "kata/capacity.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/key_source.hpp"
#if defined(MEMCAP_HAVE_CUDA)
#include "kata/capacity_cuda.hpp"
#endif

namespace memcap::kata {
namespace {

constexpr std::int64_t kDefaultKMax = 16384;

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const std::size_t n = v.size(), h = n / 2;
  std::nth_element(v.begin(), v.begin() + h, v.end());
  const double hi = v[h];
  if (n % 2) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + h);
  if (std::isinf(lo) && std::isinf(hi)) return hi;
  return 0.5 * (lo + hi);
}

// Queries: q = |u| (u + sigma |u| xi) / |u + sigma |u| xi|, xi ~ N(0, I/d) (stream kNoise).
Eigen::MatrixXd noisy_queries(const Eigen::MatrixXd& U, double sigma, std::uint64_t trial_seed) {
  const Eigen::Index K = U.rows(), d = U.cols();
  Eigen::MatrixXd xi = rng::normal_matrix(K, d, trial_seed, rng::kNoise) / std::sqrt(static_cast<double>(d));
  Eigen::MatrixXd Q(K, d);
  for (Eigen::Index i = 0; i < K; ++i) {
    const double n = U.row(i).norm();
    Eigen::RowVectorXd q = U.row(i) + sigma * n * xi.row(i);
    const double qn = q.norm();
    Q.row(i) = qn > 0 ? Eigen::RowVectorXd(q * (n / qn)) : Eigen::RowVectorXd(U.row(i));
  }
  return Q;
}

struct TrialData {
  Eigen::MatrixXd keys;  // largest K drawn so far (nested draws: prefixes are the smaller K)
  std::uint64_t seed = 0;
};

}  // namespace

Readout resolve_readout(const std::string& readout, const CapacityKernel& map) {
  if (readout == "auto") return map.kind() == MapKind::Linear ? Readout::unnormalized : Readout::normalized;
  if (readout == "normalized") return Readout::normalized;
  if (readout == "unnormalized") {
    require(!map.is_softmax(), "map '{}': the softmax reference is always normalized; drop --readout unnormalized",
            map.spec());
    return Readout::unnormalized;
  }
  throw UserError(fmt::format("unknown readout '{}'; use auto, normalized or unnormalized", readout));
}

const char* to_string(Readout r) { return r == Readout::normalized ? "normalized" : "unnormalized"; }

void validate(const CapacityConfig& c) {
  require(c.dim >= 1, "d_head must be >= 1 (got {})", c.dim);
  const CapacityKernel map = CapacityKernel::parse(c.map, c.dim);
  const KeySource keys = KeySource::parse(c.keys, c.dim);
  const ValueModel values = ValueModel::parse(c.values);
  resolve_readout(c.readout, map);
  require(c.d_v >= 0, "d_v must be >= 1 (got {})", c.d_v);
  require(c.trials >= 1, "trials must be >= 1 (got {})", c.trials);
  require(c.query_noise >= 0 && std::isfinite(c.query_noise), "query noise must be >= 0 (got {})", c.query_noise);
  require(c.acc_threshold > 0 && c.acc_threshold <= 1, "the accuracy threshold must lie in (0, 1] (got {})",
          c.acc_threshold);
  require(c.psnr_threshold > 0 && std::isfinite(c.psnr_threshold), "the pSNR threshold must be > 0 (got {})",
          c.psnr_threshold);
  require(c.k_min >= 1, "K must be >= 1: --k-min is {}", c.k_min);
  require(c.k_max >= 0, "K must be >= 1: --k-max is {}", c.k_max);
  require(c.k_max == 0 || c.k_max >= c.k_min, "--k-max ({}) must be >= --k-min ({})", c.k_max, c.k_min);
  for (auto K : c.k_list) require(K >= 1, "K must be >= 1 (got {} in the K list)", K);
  require(c.search || !c.k_list.empty(), "nothing to measure: give a K list or enable the search");
  require(c.check_tolerance > 0, "the cross-check tolerance must be > 0");
  const std::int64_t pool = keys.pool_size();
  if (pool > 0) {
    require(c.k_max <= pool, "keys '{}' ({}) hold {} vectors, fewer than --k-max = {}; lower --k-max", c.keys,
            keys.describe(), pool, c.k_max);
    for (auto K : c.k_list)
      require(K <= pool, "keys '{}' ({}) hold {} vectors, fewer than K = {}; lower K", c.keys, keys.describe(), pool,
              K);
    require(!c.search || c.k_min <= pool, "keys '{}' hold {} vectors, fewer than --k-min = {}", c.keys, pool,
            c.k_min);
  }
  if (c.d_v > 0) {
    std::int64_t kmax = c.k_max > 0 ? c.k_max : (pool > 0 ? std::min(pool, kDefaultKMax) : kDefaultKMax);
    if (!c.search) kmax = 0;
    for (auto K : c.k_list) kmax = std::max(kmax, K);
    values.check(kmax, c.d_v);
  }
}

CapacityResult run_capacity_with(const CapacityConfig& cfg, const TrialBackend& backend, const std::string& path,
                                 const std::function<void(const KPoint&)>& progress) {
  validate(cfg);
  const CapacityKernel map = CapacityKernel::parse(cfg.map, cfg.dim);
  const KeySource keys = KeySource::parse(cfg.keys, cfg.dim);
  const ValueModel values = ValueModel::parse(cfg.values);
  const Readout readout = resolve_readout(cfg.readout, map);

  std::vector<TrialData> trials(cfg.trials);
  for (int t = 0; t < cfg.trials; ++t) trials[t].seed = rng::derive_seed(cfg.seed, fmt::format("trial={}", t));

  // Effective largest K.
  std::int64_t k_max = cfg.k_max;
  const std::int64_t pool = keys.pool_size();
  if (k_max == 0) k_max = pool > 0 ? std::min(pool, kDefaultKMax) : kDefaultKMax;
  if (keys.type() == KeySourceType::greedy) {  // the packing decides how many keys exist
    std::int64_t smallest = k_max;
    for (auto& tr : trials) {
      tr.keys = keys.greedy_pool(tr.seed, k_max);
      smallest = std::min<std::int64_t>(smallest, tr.keys.rows());
    }
    std::int64_t need = cfg.search ? (cfg.k_max > 0 ? cfg.k_max : cfg.k_min) : 0;
    for (auto K : cfg.k_list) need = std::max(need, K);
    require(smallest >= need,
            "keys '{}': a greedy packing stopped at {} vectors, fewer than K = {}; raise a or lower K", cfg.keys,
            smallest, need);
    k_max = smallest;
  }
  std::int64_t k_top = cfg.search ? k_max : 0;
  for (auto K : cfg.k_list) k_top = std::max(k_top, K);
  const int d_v = cfg.d_v > 0 ? cfg.d_v
                              : (values.type() == ValueModelType::onehot ? static_cast<int>(k_top) : cfg.dim);
  values.check(k_top, d_v);

  std::map<std::int64_t, KPoint> memo;
  double max_dev = 0;
  auto evaluate = [&](std::int64_t K, const char* stage) -> const KPoint& {
    auto it = memo.find(K);
    if (it != memo.end()) return it->second;
    KPoint pt;
    pt.K = K;
    pt.stage = stage;
    std::vector<double> all_psnr;
    all_psnr.reserve(static_cast<std::size_t>(K) * cfg.trials);
    std::int64_t correct = 0;
    double coh_sum = 0, log_sum = 0, psnr_min = std::numeric_limits<double>::infinity();
    for (auto& tr : trials) {
      if (tr.keys.rows() < K) tr.keys = keys.draw(K, tr.seed, k_max);
      const Eigen::MatrixXd U = tr.keys.topRows(K);
      const Eigen::MatrixXd Q = cfg.query_noise > 0 ? noisy_queries(U, cfg.query_noise, tr.seed) : U;
      const Values vals = values.draw(K, d_v, tr.seed);
      const TrialMetrics m = backend(map, U, Q, vals, readout);
      MEMCAP_ASSERT(m.psnr.size() == K, "backend returned the wrong number of pSNR values");
      for (Eigen::Index i = 0; i < K; ++i) {
        const double v = m.psnr(i);
        require(!std::isnan(v), "map '{}': a pSNR is NaN at K = {} (degenerate coefficients)", cfg.map, K);
        all_psnr.push_back(v);
        log_sum += std::log10(v);
        psnr_min = std::min(psnr_min, v);
      }
      correct += m.correct;
      pt.acc_trials.push_back(static_cast<double>(m.correct) / static_cast<double>(K));
      coh_sum += m.coherence;
      pt.max_deviation = std::max(pt.max_deviation, m.max_deviation);
      if (!(m.max_deviation <= cfg.check_tolerance))
        throw NumericError(fmt::format(
            "cross-check failed: map '{}' at K = {} ({}): the readout through the state differs from the closed-form "
            "weighted sum by {:.3e} (relative), above the tolerance {:.1e}; the state or the kernel is wrong",
            cfg.map, K, path, m.max_deviation, cfg.check_tolerance));
    }
    pt.acc = static_cast<double>(correct) / (static_cast<double>(K) * cfg.trials);
    pt.psnr_median = median(all_psnr);
    pt.psnr_mean_log10 = log_sum / static_cast<double>(all_psnr.size());
    pt.psnr_min = psnr_min;
    pt.coherence = coh_sum / cfg.trials;
    max_dev = std::max(max_dev, pt.max_deviation);
    if (progress) progress(pt);
    return memo.emplace(K, pt).first->second;
  };

  CapacityResult res;
  res.k_max = k_max;
  res.d_v = d_v;
  res.readout = to_string(readout);
  res.path = path;
  res.k_star_psnr = res.k_star_acc = -1;  // -1: not searched (--no-search)
  auto pass_psnr = [&](const KPoint& p) { return p.psnr_median > cfg.psnr_threshold; };
  auto pass_acc = [&](const KPoint& p) { return p.acc >= cfg.acc_threshold; };
  if (cfg.search) {
    // lo: largest K known to pass (k_min - 1 is taken as passing); hi: first K that fails (0 = none).
    std::int64_t lo_p = cfg.k_min - 1, lo_a = cfg.k_min - 1, hi_p = 0, hi_a = 0;
    for (std::int64_t K = cfg.k_min;; K = std::min(2 * K, k_max)) {
      const KPoint& p = evaluate(K, "grid");
      if (!hi_p) (pass_psnr(p) ? lo_p : hi_p) = K;
      if (!hi_a) (pass_acc(p) ? lo_a : hi_a) = K;
      if ((hi_p && hi_a) || K >= k_max) break;
    }
    auto bisect = [&](std::int64_t& lo, std::int64_t hi, auto pass) {
      while (hi && hi - lo > 1) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (pass(evaluate(mid, "bisect"))) lo = mid;
        else hi = mid;
      }
    };
    bisect(lo_p, hi_p, pass_psnr);
    bisect(lo_a, hi_a, pass_acc);
    res.k_star_psnr = lo_p;
    res.k_star_acc = lo_a;
    res.k_star_psnr_censored = hi_p == 0;
    res.k_star_acc_censored = hi_a == 0;
  }
  for (auto K : cfg.k_list) evaluate(K, "list");
  for (auto& [K, p] : memo) res.points.push_back(p);
  res.max_deviation = max_dev;
  double coh_at_star = std::numeric_limits<double>::quiet_NaN();
  if (memo.count(res.k_star_psnr)) coh_at_star = memo.at(res.k_star_psnr).coherence;
  res.theory = capacity_theory(map, coh_at_star);
  return res;
}

CapacityResult run_capacity(const CapacityConfig& cfg, Device device,
                            const std::function<void(const KPoint&)>& progress) {
  if (device == Device::cpu) {
    const std::int64_t tile = cfg.tile_rows;
    return run_capacity_with(
        cfg,
        [tile](const CapacityKernel& m, const Eigen::MatrixXd& U, const Eigen::MatrixXd& Q, const Values& v,
               Readout r) { return evaluate_trial_cpu(m, U, Q, v, r, tile); },
        "cpu", progress);
  }
#if defined(MEMCAP_HAVE_CUDA)
  return run_capacity_with(
      cfg,
      [](const CapacityKernel& m, const Eigen::MatrixXd& U, const Eigen::MatrixXd& Q, const Values& v, Readout r) {
        return evaluate_trial_cuda(m, U, Q, v, r);
      },
      "cuda", progress);
#else
  throw DeviceError("this build has no CUDA support: rebuild with -DMEMCAP_ENABLE_CUDA=ON or use --device cpu");
#endif
}

}  // namespace memcap::kata
