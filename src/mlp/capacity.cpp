// Capacity search (see capacity.hpp): a probe cache in front of the oracle (pre-filled from a
// recorded list on resume), the §4.2 continuous bisection and the galloping + integer bisection.
#include "mlp/capacity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"

namespace memcap::mlp {

const char* to_string(SearchMode m) { return m == SearchMode::reference ? "reference" : "fast"; }

SearchMode parse_search_mode(const std::string& s) {
  if (s == "fast") return SearchMode::fast;
  if (s == "reference") return SearchMode::reference;
  throw UserError(fmt::format("--search must be fast or reference (got '{}')", s));
}

void SearchConfig::validate() const {
  require(lo >= 1, "the smallest width of the search must be >= 1 (got {})", lo);
  require(hi >= lo, "the largest width of the search ({}) must be >= the smallest ({})", hi, lo);
  require(start >= 1, "--start-width must be >= 1 (got {})", start);
  require(std::isfinite(growth) && growth > 1, "the gallop factor must be > 1 (got {})", growth);
  require(std::isfinite(threshold) && threshold > 0 && threshold <= 1,
          "--threshold must be in (0, 1] (got {})", threshold);
  require(std::isfinite(tolerance) && tolerance > 0, "the bisection tolerance must be > 0 (got {})", tolerance);
}

namespace {

// Width -> outcome, filled from the recorded probes and by the oracle; records every step.
class ProbeCache {
 public:
  ProbeCache(const SearchConfig& cfg, const ProbeOracle& oracle, const std::vector<Probe>& recorded,
             const std::function<void(const Probe&)>& on_probe, SearchResult& res)
      : cfg_(cfg), oracle_(oracle), on_probe_(on_probe), res_(res) {
    for (const Probe& p : recorded)
      if (!p.cached) recorded_.emplace(p.m, p);
  }

  bool test(std::int64_t m) {
    MEMCAP_ASSERT(m >= cfg_.lo && m <= cfg_.hi, fmt::format("probe width {} outside [{}, {}]", m, cfg_.lo, cfg_.hi));
    Probe p;
    bool fresh = false;
    if (auto it = seen_.find(m); it != seen_.end()) {
      p = it->second;
      p.cached = true;
    } else {
      if (auto r = recorded_.find(m); r != recorded_.end()) {
        p = r->second;
        ++res_.replayed;
      } else {
        const ProbeOutcome o = oracle_(m);
        p.m = m;
        p.accuracy = o.accuracy;
        p.min_margin = o.min_margin;
        p.wall_s = o.wall_s;
        p.note = o.note;
        ++res_.oracle_calls;
        fresh = true;
      }
      // Success is re-derived from the accuracy, so a replay under the same threshold is exact.
      p.success = p.accuracy >= cfg_.threshold;
      p.cached = false;
      seen_.emplace(m, p);
      ++res_.distinct;
      if (fresh && on_probe_) on_probe_(p);
    }
    res_.steps.push_back(p);
    return p.success;
  }

  const std::map<std::int64_t, Probe>& seen() const { return seen_; }

 private:
  const SearchConfig& cfg_;
  const ProbeOracle& oracle_;
  const std::function<void(const Probe&)>& on_probe_;
  SearchResult& res_;
  std::map<std::int64_t, Probe> recorded_, seen_;
};

std::int64_t search_reference(const SearchConfig& cfg, ProbeCache& cache) {
  double lo = static_cast<double>(cfg.lo), hi = static_cast<double>(cfg.hi);
  std::int64_t best = 0;
  while (hi - lo >= cfg.tolerance) {
    const double mid = 0.5 * (lo + hi);
    // std::nearbyint in the default rounding mode rounds half to even, like Python's round().
    const std::int64_t m = std::max(cfg.lo, static_cast<std::int64_t>(std::nearbyint(mid)));
    if (cache.test(std::min(m, cfg.hi))) {
      hi = mid;
      best = std::min(m, cfg.hi);
    } else {
      lo = mid;
    }
  }
  return best;
}

// The gallop's factor starts at `growth` and squares after every step, up to max(growth, 2): a gallop that
// starts near m* takes small steps (a tight bracket to bisect), one that starts far off still doubles.
std::int64_t search_fast(const SearchConfig& cfg, ProbeCache& cache) {
  std::int64_t fail = cfg.lo - 1;  // largest width known (or assumed, below lo) to fail
  std::int64_t ok = 0;             // smallest width known to succeed
  const double cap = std::max(cfg.growth, 2.0);
  double factor = cfg.growth;
  std::int64_t m = std::clamp(cfg.start, cfg.lo, cfg.hi);
  if (cache.test(m)) {
    // Started at or above m*: gallop down (m / factor, ...) until a width fails or lo succeeds.
    ok = m;
    while (ok > cfg.lo) {
      const auto next = static_cast<std::int64_t>(std::floor(static_cast<double>(ok) / factor));
      factor = std::min(factor * factor, cap);
      const std::int64_t down = std::clamp(next, cfg.lo, ok - 1);
      if (!cache.test(down)) {
        fail = down;
        break;
      }
      ok = down;
    }
  } else {
    fail = m;
    for (;;) {
      if (m >= cfg.hi) return 0;
      const double next = std::ceil(static_cast<double>(m) * factor);
      factor = std::min(factor * factor, cap);
      m = next >= static_cast<double>(cfg.hi) ? cfg.hi : std::max(m + 1, static_cast<std::int64_t>(next));
      if (cache.test(m)) {
        ok = m;
        break;
      }
      fail = m;
    }
  }
  while (ok - fail > 1) {
    const std::int64_t mid = fail + (ok - fail) / 2;
    if (cache.test(mid)) ok = mid;
    else fail = mid;
  }
  return ok;
}

}  // namespace

SearchResult capacity_search(const SearchConfig& cfg, const ProbeOracle& oracle, const std::vector<Probe>& recorded,
                             const std::function<void(const Probe&)>& on_probe) {
  cfg.validate();
  SearchResult res;
  ProbeCache cache(cfg, oracle, recorded, on_probe, res);
  const std::int64_t m = cfg.mode == SearchMode::reference ? search_reference(cfg, cache) : search_fast(cfg, cache);
  res.found = m > 0;
  res.m_star = m;
  res.accuracy_star = std::numeric_limits<double>::quiet_NaN();
  res.min_margin_star = std::numeric_limits<double>::quiet_NaN();
  if (res.found) {
    const Probe& p = cache.seen().at(m);
    res.accuracy_star = p.accuracy;
    res.min_margin_star = p.min_margin;
    res.note_star = p.note;
  }
  return res;
}

SeedQuantiles seed_quantiles(const std::vector<std::int64_t>& m_stars) {
  SeedQuantiles q;
  q.seeds = static_cast<std::int64_t>(m_stars.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v;
  for (auto m : m_stars) v.push_back(m > 0 ? static_cast<double>(m) : inf);
  std::sort(v.begin(), v.end());
  for (double x : v) q.found += std::isfinite(x) ? 1 : 0;
  if (v.empty()) {
    q.m_median = std::numeric_limits<double>::quiet_NaN();
    return q;
  }
  const std::size_t n = v.size();
  auto at = [&](std::size_t k) { return std::isfinite(v[k]) ? static_cast<std::int64_t>(v[k]) : std::int64_t{0}; };
  q.m_min = at(0);
  q.m50 = at((n + 1) / 2 - 1);  // ceil(n/2)-th smallest
  q.m100 = at(n - 1);
  const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  q.m_median = std::isfinite(med) ? med : std::numeric_limits<double>::quiet_NaN();
  return q;
}

}  // namespace memcap::mlp
