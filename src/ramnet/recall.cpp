// The E7 protocol (spec ramnet.md §3 E7), independent of the device: per N, every seed's first N items
// are drawn, evaluated by a backend (CPU reference or CUDA), pooled (accuracy, NMSE, dead outputs,
// recency bins); N*_0.1 and N*_0.5 come from one doubling pass and one bisection per threshold, with
// every N measured once (memo; a resumed job passes its recorded points in as `known`).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "ramnet/recall.hpp"

namespace memcap::ramnet {

SearchOutcome capacity_search(std::int64_t n_min, std::int64_t n_max, const std::vector<double>& thresholds,
                              const std::function<double(std::int64_t N, const char* stage)>& accuracy) {
  MEMCAP_ASSERT(n_min >= 1 && n_max >= n_min, "capacity_search: need 1 <= n_min <= n_max");
  const std::size_t T = thresholds.size();
  // lo: largest N known to pass (n_min − 1 counts as passing); hi: first N that failed (0 = none yet).
  std::vector<std::int64_t> lo(T, n_min - 1), hi(T, 0);
  for (std::int64_t N = n_min;; N = std::min(2 * N, n_max)) {
    const double acc = accuracy(N, "grid");
    bool all_failed = true;
    for (std::size_t t = 0; t < T; ++t) {
      if (!hi[t]) (acc >= thresholds[t] ? lo[t] : hi[t]) = N;
      all_failed = all_failed && hi[t] != 0;
    }
    if (all_failed || N >= n_max) break;
  }
  SearchOutcome out;
  out.n_star.resize(T);
  out.censored.resize(T);
  for (std::size_t t = 0; t < T; ++t) {
    if (!hi[t]) {
      out.n_star[t] = lo[t];
      out.censored[t] = true;
      continue;
    }
    while (hi[t] - lo[t] > 1) {
      const std::int64_t mid = lo[t] + (hi[t] - lo[t]) / 2;
      (accuracy(mid, "bisect") >= thresholds[t] ? lo[t] : hi[t]) = mid;
    }
    out.n_star[t] = lo[t];
    out.censored[t] = false;
  }
  return out;
}

RecallResult run_recall(const RecallConfig& c, const RecallBackend& backend, const std::string& path,
                        const std::vector<RecallPoint>& known, const std::function<void(const RecallPoint&)>& on_point) {
  validate(c);
  const std::int64_t n_max = effective_n_max(c);
  const int bins = recency_bins(n_max);
  std::map<std::int64_t, RecallPoint> memo;
  for (const auto& p : known) {
    require(static_cast<int>(p.acc_seeds.size()) == c.seeds && static_cast<int>(p.recency_hits.size()) == bins,
            "a recorded recall point (N = {}) does not match this configuration; start the job again without --resume",
            p.N);
    memo.emplace(p.N, p);
  }

  auto evaluate = [&](std::int64_t N, const char* stage) -> const RecallPoint& {
    auto it = memo.find(N);
    if (it != memo.end()) return it->second;
    RecallPoint pt;
    pt.N = N;
    pt.stage = stage;
    pt.recency_hits.assign(static_cast<std::size_t>(bins), 0);
    pt.recency_count.assign(static_cast<std::size_t>(bins), 0);
    std::int64_t correct = 0, dead = 0;
    double nmse = 0;
    for (int s = 0; s < c.seeds; ++s) {
      const RecallInputs in = draw_recall_inputs(c.model, c.keys, c.sigma_q, c.dv, trial_seed(c.seed, s), N);
      const TrialOutcome o = backend(c.model, in);
      MEMCAP_ASSERT(o.N == N && static_cast<std::int64_t>(o.hit.size()) == N, "recall backend returned the wrong size");
      require(std::isfinite(o.nmse_sum), "recall: the NMSE of {} at N = {} is not finite", to_string(c.model.mixer), N);
      correct += o.correct;
      dead += o.dead;
      nmse += o.nmse_sum;
      pt.acc_seeds.push_back(static_cast<double>(o.correct) / static_cast<double>(N));
      for (std::int64_t i = 0; i < N; ++i) {
        const int b = recency_bin(N - 1 - i);
        ++pt.recency_count[static_cast<std::size_t>(b)];
        pt.recency_hits[static_cast<std::size_t>(b)] += o.hit[static_cast<std::size_t>(i)];
      }
    }
    const double total = static_cast<double>(N) * c.seeds;
    pt.acc = static_cast<double>(correct) / total;
    pt.nmse = nmse / total;
    pt.dead = static_cast<double>(dead) / total;
    if (on_point) on_point(pt);
    return memo.emplace(N, std::move(pt)).first->second;
  };

  RecallResult r;
  r.n_max = n_max;
  r.path = path;
  if (c.search) {
    std::vector<double> thr;
    for (double d : kDeltas) thr.push_back(1.0 - d);
    const SearchOutcome s = capacity_search(c.n_min, n_max, thr,
                                            [&](std::int64_t N, const char* stage) { return evaluate(N, stage).acc; });
    for (int t = 0; t < 2; ++t) {
      r.n_star[t] = s.n_star[static_cast<std::size_t>(t)];
      r.censored[t] = s.censored[static_cast<std::size_t>(t)];
    }
  }
  for (auto N : c.n_list) evaluate(N, "list");
  for (auto& [N, p] : memo) r.points.push_back(p);
  return r;
}

}  // namespace memcap::ramnet
