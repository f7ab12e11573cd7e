// Storage-capacity search of spec hebbian.md §4.2: the smallest width m whose MLP stores every
// fact (accuracy >= threshold), given an oracle that builds and evaluates one width. Two modes:
// `reference` (the released code's continuous bisection) and `fast` (galloping, then integer
// bisection); both record every probe, never evaluate one width twice, and can be resumed from
// the probes a killed search had recorded (they are replayed without calling the oracle).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace memcap::mlp {

enum class SearchMode { fast, reference };
const char* to_string(SearchMode m);           // "fast" | "reference"
SearchMode parse_search_mode(const std::string& s);  // UserError on anything else

// What the oracle measured at one width.
struct ProbeOutcome {
  double accuracy = 0;        // argmax accuracy over all F facts, in [0, 1]
  double min_margin = 0;      // raw-output min margin (NaN when not measured)
  double wall_s = 0;          // build + evaluation time
  std::string note;           // solver / path note (free text)
};
using ProbeOracle = std::function<ProbeOutcome(std::int64_t m)>;

// One search step. Steps that re-test a width already measured (reference mode after hi-lo < 1)
// are recorded with cached = true and the stored outcome.
struct Probe {
  std::int64_t m = 0;
  double accuracy = 0;
  bool success = false;
  double min_margin = 0;
  double wall_s = 0;
  bool cached = false;        // answered from the probe cache (the width was not built again)
  std::string note;
};

struct SearchConfig {
  SearchMode mode = SearchMode::fast;
  std::int64_t lo = 1;        // smallest width considered
  std::int64_t hi = 65536;    // largest width considered (spec §4.2 default)
  std::int64_t start = 1;     // fast: first width of the gallop (clamped to [lo, hi])
  double growth = 2;          // fast: first gallop factor (> 1); squares after each step, up to max(growth, 2)
  double threshold = 1.0;     // success: accuracy >= threshold (spec 1.0; Qwen variant 0.98)
  double tolerance = 0.05;    // reference: stop when hi - lo < tolerance
  void validate() const;      // UserError with what to change
};

struct SearchResult {
  bool found = false;
  std::int64_t m_star = 0;          // 0 when not found
  double accuracy_star = 0;         // accuracy at m_star (NaN when not found)
  double min_margin_star = 0;
  std::string note_star;
  std::vector<Probe> steps;         // every search step, in order (cached re-tests included)
  std::int64_t distinct = 0;        // widths measured (steps that were not cached)
  std::int64_t oracle_calls = 0;    // widths actually built in this call (distinct - replayed)
  std::int64_t replayed = 0;        // widths answered from the `recorded` list
};

// Runs the search. `recorded`: probes of an earlier, interrupted run of the same search (any
// order; cached entries are ignored) — answered from this list instead of the oracle. on_probe:
// called after each newly measured width (not for replayed or cached ones), e.g. to persist it.
//
// reference (§4.2 as released): lo' = lo, hi' = hi; repeat mid = (lo'+hi')/2, m = max(lo,
//   round(mid)) (round half to even, as Python's round), success -> hi' = mid, failure -> lo' = mid,
//   until hi' - lo' < tolerance; m* = the last successful m; not found if none succeeded.
// fast: m = start, start·g, start·g², ... (rounded up, capped at hi) until one succeeds (not found
//   if hi fails), then integer bisection between the last failure (or lo - 1 if start succeeded)
//   and the first success. For an oracle whose success is monotone in m both modes return the same
//   m* (the smallest succeeding width in [lo, hi]). For a non-monotone oracle both return a width
//   that was measured to succeed, but not necessarily the smallest one, and the two modes may
//   differ. Either way the widths one search measures are always consistent with a threshold
//   (every failure lies below every success: both modes only probe between the last failure and
//   the first success), so a dip in the success curve is invisible to a single search.
SearchResult capacity_search(const SearchConfig& cfg, const ProbeOracle& oracle,
                             const std::vector<Probe>& recorded = {},
                             const std::function<void(const Probe&)>& on_probe = {});

// Statistics over fact-set seeds of one (method, d, F) point. m_stars: one per seed, 0 = not found.
// With success monotone in m for every seed, the fraction of seeds storing all facts at width w is
// #{s : 0 < m*_s <= w} / n, so m50 (smallest width where >= 50% of seeds succeed) is the
// ceil(n/2)-th smallest m*, and m100 the largest; 0 when that fraction is never reached.
struct SeedQuantiles {
  std::int64_t seeds = 0, found = 0;
  std::int64_t m_min = 0, m50 = 0, m100 = 0;
  double m_median = 0;              // median over seeds, not-found counted as +inf; NaN if that is inf
};
SeedQuantiles seed_quantiles(const std::vector<std::int64_t>& m_stars);

}  // namespace memcap::mlp
