// Capacity search (spec hebbian.md §4.2): fast and reference modes agree on synthetic monotone
// oracles for many thresholds, probe counts, the probe cache, resume from a partial probe list,
// the documented behaviour on a non-monotone oracle, seed quantiles, and a real CPU search
// (hebbian:whitened, d = 16, F = 32) whose m* is checked by re-probing m* - 1 and m*.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "core/error.hpp"
#include "margin/capacity_job.hpp"
#include "margin/capacity_probe.hpp"
#include "mlp/capacity.hpp"
#include "mlp/factset.hpp"

using namespace memcap;
using mlp::Probe;
using mlp::ProbeOutcome;
using mlp::SearchConfig;
using mlp::SearchMode;

namespace {

// Monotone oracle: accuracy = min(1, m / t); success at threshold θ iff m >= ceil(θ t).
struct RampOracle {
  double t;
  std::map<std::int64_t, int> calls;
  ProbeOutcome operator()(std::int64_t m) {
    ++calls[m];
    return {std::min(1.0, static_cast<double>(m) / t), static_cast<double>(m) - t, 0.0, ""};
  }
};

// Success iff m >= t (accuracy 1 or 0.5).
mlp::ProbeOracle step(std::int64_t t, int* calls = nullptr) {
  return [t, calls](std::int64_t m) {
    if (calls) ++*calls;
    return ProbeOutcome{m >= t ? 1.0 : 0.5, 0.0, 0.0, ""};
  };
}

SearchConfig cfg(SearchMode mode, std::int64_t start = 1) {
  SearchConfig c;
  c.mode = mode;
  c.start = start;
  return c;
}

}  // namespace

TEST_CASE("fast and reference agree on monotone step oracles over [1, 65536]") {
  for (std::int64_t t : {1, 2, 3, 5, 7, 64, 65, 100, 127, 1000, 4097, 32768, 32769, 65535, 65536}) {
    const auto ref = mlp::capacity_search(cfg(SearchMode::reference), step(t));
    REQUIRE(ref.found);
    CHECK(ref.m_star == t);
    for (std::int64_t start : {1, 3, 64, 1000, 65536})
      for (double growth : {1.25, 2.0, 3.0}) {
        SearchConfig c = cfg(SearchMode::fast, start);
        c.growth = growth;
        const auto fast = mlp::capacity_search(c, step(t));
        REQUIRE(fast.found);
        CHECK_MESSAGE(fast.m_star == t, "t=" << t << " start=" << start << " growth=" << growth);
      }
  }
  // Never successful: not found, m* = 0, accuracy NaN; fast stops after probing hi.
  const auto none_ref = mlp::capacity_search(cfg(SearchMode::reference), step(70000));
  const auto none_fast = mlp::capacity_search(cfg(SearchMode::fast), step(70000));
  CHECK(!none_ref.found);
  CHECK(!none_fast.found);
  CHECK(none_fast.m_star == 0);
  CHECK(std::isnan(none_fast.accuracy_star));
  CHECK(none_fast.steps.back().m == 65536);
}

TEST_CASE("fast and reference agree for accuracy thresholds (1.0, 0.98, Qwen variant, ...)") {
  for (double t : {10.0, 37.5, 300.0, 5000.0})
    for (double thr : {1.0, 0.999, 0.98, 0.9, 0.5, 0.123}) {
      SearchConfig a = cfg(SearchMode::reference), b = cfg(SearchMode::fast, 8);
      a.threshold = b.threshold = thr;
      RampOracle oa{t, {}}, ob{t, {}};
      const auto ra = mlp::capacity_search(a, std::ref(oa));
      const auto rb = mlp::capacity_search(b, std::ref(ob));
      const auto want = static_cast<std::int64_t>(std::ceil(thr * t - 1e-12));
      CHECK_MESSAGE(ra.m_star == want, "t=" << t << " thr=" << thr);
      CHECK_MESSAGE(rb.m_star == want, "t=" << t << " thr=" << thr);
      CHECK(ra.accuracy_star >= thr);
      // The probe cache: no width is ever built twice.
      for (auto& [m, n] : oa.calls) CHECK(n == 1);
      for (auto& [m, n] : ob.calls) CHECK(n == 1);
    }
}

TEST_CASE("probe counts: reference takes 21 steps on [1, 65536]; fast gallops then bisects") {
  int calls = 0;
  const auto ref = mlp::capacity_search(cfg(SearchMode::reference), step(1000, &calls));
  CHECK(ref.steps.size() == 21);  // 65535 / 2^21 < 0.05 <= 65535 / 2^20
  CHECK(ref.distinct == calls);
  CHECK(ref.oracle_calls == calls);
  std::int64_t cached = 0;
  for (auto& p : ref.steps) cached += p.cached;
  CHECK(cached == static_cast<std::int64_t>(ref.steps.size()) - ref.distinct);
  CHECK(cached > 0);  // after hi - lo < 1 it re-tests the same integer (answered from the cache)

  calls = 0;
  const auto fast = mlp::capacity_search(cfg(SearchMode::fast), step(1000, &calls));
  // Gallop 1, 2, 4, ..., 1024 (11 probes), then bisection of (512, 1024]: 9 probes.
  CHECK(fast.distinct == 20);
  CHECK(calls == 20);
  CHECK(fast.steps.size() == 20);
  CHECK(fast.steps[10].m == 1024);
  CHECK(fast.steps[10].success);

  // A gallop that starts above m* goes down (4096, 2048, 1024 succeed, 512 fails), then bisects (512, 1024].
  const auto high = mlp::capacity_search(cfg(SearchMode::fast, 4096), step(1000));
  CHECK(high.m_star == 1000);
  REQUIRE(high.steps.size() == 4 + 9);
  CHECK(high.steps[0].m == 4096);
  CHECK(high.steps[2].m == 1024);
  CHECK(high.steps[3].m == 512);
  CHECK(!high.steps[3].success);
  // ... and stops at lo when lo itself succeeds (lo - 1 counts as a failure).
  const auto low = mlp::capacity_search(cfg(SearchMode::fast, 5), step(1));
  CHECK(low.m_star == 1);
  CHECK(low.steps.size() == 3);  // 5, 2, 1

  // The cap: the gallop's last probe is hi itself.
  SearchConfig capped = cfg(SearchMode::fast, 3);
  capped.hi = 100;
  const auto c = mlp::capacity_search(capped, step(99));
  CHECK(c.m_star == 99);
  bool probed_hi = false;
  for (auto& p : c.steps) probed_hi = probed_hi || p.m == 100;
  CHECK(probed_hi);
}

TEST_CASE("fast: a small first factor squares after each step up to 2; a start near m* saves failing probes") {
  // Up from 10 with factor 1.25: 10, ceil(12.5) = 13, then x1.5625 -> 21, then doubling.
  SearchConfig up = cfg(SearchMode::fast, 10);
  up.growth = 1.25;
  const auto r = mlp::capacity_search(up, step(1000));
  CHECK(r.m_star == 1000);
  const std::vector<std::int64_t> gallop = {10, 13, 21, 42, 84, 168, 336, 672, 1344};
  REQUIRE(r.steps.size() > gallop.size());
  for (std::size_t i = 0; i < gallop.size(); ++i) CHECK_MESSAGE(r.steps[i].m == gallop[i], "step " << i);
  CHECK(r.steps[gallop.size() - 1].success);
  // Down from 1200 with factor 1.25: 960 fails at once, leaving (960, 1200] to bisect.
  SearchConfig down = cfg(SearchMode::fast, 1200);
  down.growth = 1.25;
  const auto d = mlp::capacity_search(down, step(1000));
  CHECK(d.m_star == 1000);
  REQUIRE(d.steps.size() >= 2);
  CHECK(d.steps[1].m == 960);
  CHECK(!d.steps[1].success);
  // The gd default (start 1.5 F/d, factor 1.25) against the earlier one (F/(4d), doubling) over m* = 1.1 .. 2 F/d
  // at F/d = 64: never more failing widths (each trains every epoch), and fewer in all.
  int total_new = 0, total_old = 0;
  for (std::int64_t t = 70; t <= 128; t += 2) {
    auto failures = [&](std::int64_t start, double growth) {
      SearchConfig c = cfg(SearchMode::fast, start);
      c.growth = growth;
      const auto res = mlp::capacity_search(c, step(t));
      REQUIRE(res.m_star == t);
      int n = 0;
      for (auto& p : res.steps) n += !p.success && !p.cached;
      return n;
    };
    const int now = failures(96, 1.25), before = failures(16, 2.0);
    CHECK_MESSAGE(now <= before, "m*=" << t);
    total_new += now;
    total_old += before;
  }
  MESSAGE("failing widths over m* = 70, 72, ..., 128: " << total_new << " (start 96, x1.25) vs " << total_old
                                                          << " (start 16, x2)");
  CHECK(total_new < total_old);
}

TEST_CASE("default search start: the fig2c fit for plain gd, 1.5 F/d for other gd, 1 for closed forms") {
  const auto closed = margin::default_search_start(mlp::parse_method("hebbian:whitened"), 128, 16384, 0);
  CHECK(closed.start == 1);
  CHECK(closed.growth == 2);
  // 0.6645 * 16384^1.1133 / 128 = 255.2; 1.5 * 16384 / 128 = 192.
  for (const char* plain : {"gd", "gd,precision=bf16x3", "gd,precision=f64"}) {
    const auto s = margin::default_search_start(mlp::parse_method(plain), 128, 16384, 0);
    CHECK_MESSAGE(s.start == 255, plain);
    CHECK_MESSAGE(s.growth == margin::kGdFitGrowth, plain);
  }
  for (const char* other : {"gd,loss=mse", "gd,gate=relu", "gd,epochs=400", "gd,precision=tf32", "gd:transformer"}) {
    const auto s = margin::default_search_start(mlp::parse_method(other), 128, 16384, 0);
    CHECK_MESSAGE(s.start == 192, other);
    CHECK_MESSAGE(s.growth == 1.25, other);
  }
  // fig11's spike (beta = 1.5) keeps the fit (its d = 64 GD m* lie within 4.4 % of it); a stronger one does not.
  CHECK(margin::default_search_start(mlp::parse_method("gd"), 128, 16384, 1.5).start == 255);
  const auto spiked = margin::default_search_start(mlp::parse_method("gd"), 128, 16384, 2.0);
  CHECK(spiked.start == 192);
  CHECK(spiked.growth == 1.25);
  CHECK(margin::default_search_start(mlp::parse_method("gd"), 64, 8, 0).start == 1);
  // Replaying the GD m* of fig2c's seed-42 path (H100, bf16x3, equal to f32 where f32 ran; docs/perf.md, thirty-ninth
  // session) through a monotone oracle: the fit's start finds the same m* with fewer probes than 1.5 F/d with 1.25,
  // and its first step of 1.5 % (the fit's error) with fewer than the step of 5 % used before (60 against 75).
  struct Point { std::int64_t d, F, m_star; };
  const Point pts[] = {{64, 128, 4},    {64, 256, 6},     {64, 512, 11},    {64, 1024, 23},   {64, 2048, 50},
                       {64, 3072, 80},  {64, 4096, 112},  {90, 253, 5},     {90, 506, 9},     {90, 1012, 16},
                       {90, 2025, 35},  {90, 4050, 76},   {90, 6075, 121},  {90, 8100, 168},  {128, 512, 7},
                       {128, 1024, 12}, {128, 2048, 25},  {128, 4096, 54},  {128, 8192, 117}, {128, 12288, 184},
                       {128, 16384, 257}};
  int fit_probes = 0, old_probes = 0, coarse_probes = 0;
  for (const auto& p : pts) {
    const auto s = margin::default_search_start(mlp::parse_method("gd"), p.d, p.F, 0);
    SearchConfig c = cfg(SearchMode::fast, s.start);
    c.growth = s.growth;
    const auto fit = mlp::capacity_search(c, step(p.m_star));
    c.growth = 1.05;
    const auto coarse = mlp::capacity_search(c, step(p.m_star));
    CHECK(coarse.m_star == p.m_star);
    coarse_probes += static_cast<int>(coarse.distinct);
    c.start = std::llround(1.5 * static_cast<double>(p.F) / static_cast<double>(p.d));
    c.growth = 1.25;
    const auto old = mlp::capacity_search(c, step(p.m_star));
    CHECK(fit.m_star == p.m_star);
    CHECK(old.m_star == p.m_star);
    fit_probes += static_cast<int>(fit.distinct);
    old_probes += static_cast<int>(old.distinct);
  }
  MESSAGE("fig2c seed-42 m*: " << fit_probes << " probes with the fit's start vs " << old_probes << " with 1.5 F/d, "
                                << coarse_probes << " with the fit's start and a first step of 5 %");
  CHECK(fit_probes < old_probes);
  CHECK(fit_probes < coarse_probes);
}

TEST_CASE("a killed search resumes from its recorded probes with the identical result") {
  for (SearchMode mode : {SearchMode::fast, SearchMode::reference}) {
    const auto full = mlp::capacity_search(cfg(mode), step(777));
    for (int killed_after : {1, 5, 9}) {
      // First run: the oracle dies after `killed_after` widths; on_probe saved them as they finished.
      std::vector<Probe> saved;
      int calls = 0;
      auto dying = [&](std::int64_t m) {
        if (calls == killed_after) throw std::runtime_error("killed");
        ++calls;
        return step(777)(m);
      };
      CHECK_THROWS(mlp::capacity_search(cfg(mode), dying, {}, [&](const Probe& p) { saved.push_back(p); }));
      CHECK(static_cast<int>(saved.size()) == killed_after);
      // Resume: the saved probes are replayed, only the rest is measured.
      int resumed_calls = 0;
      std::vector<Probe> fresh;
      const auto res = mlp::capacity_search(cfg(mode), step(777, &resumed_calls), saved,
                                            [&](const Probe& p) { fresh.push_back(p); });
      CHECK(res.m_star == full.m_star);
      CHECK(res.replayed == killed_after);
      CHECK(resumed_calls == full.distinct - killed_after);
      CHECK(res.oracle_calls == resumed_calls);
      CHECK(static_cast<int>(fresh.size()) == resumed_calls);
      REQUIRE(res.steps.size() == full.steps.size());
      for (std::size_t i = 0; i < res.steps.size(); ++i) {
        CHECK(res.steps[i].m == full.steps[i].m);
        CHECK(res.steps[i].success == full.steps[i].success);
        CHECK(res.steps[i].cached == full.steps[i].cached);
      }
    }
  }
}

TEST_CASE("non-monotone oracle: both modes return a width measured to succeed, possibly different ones") {
  // Succeeds for m >= 100 except on [200, 300].
  auto bumpy = [](std::int64_t m) { return ProbeOutcome{(m >= 100 && !(m >= 200 && m <= 300)) ? 1.0 : 0.0, 0, 0, ""}; };
  const auto fast = mlp::capacity_search(cfg(SearchMode::fast), bumpy);
  const auto ref = mlp::capacity_search(cfg(SearchMode::reference), bumpy);
  // fast: gallop ... 64 fails, 128 succeeds, bisection of (64, 128] -> 100 (never sees the dip).
  CHECK(fast.m_star == 100);
  // reference: halves down from 32768 to 256, which fails, and converges on the top of the dip.
  CHECK(ref.m_star == 301);
  for (const auto* r : {&fast, &ref}) {
    bool ok = false;
    for (auto& p : r->steps) ok = ok || (p.m == r->m_star && p.success);
    CHECK(ok);
    // The measured widths are consistent with a threshold: every failure below every success.
    std::int64_t max_fail = 0, min_ok = 1 << 30;
    for (auto& p : r->steps) {
      if (p.success) min_ok = std::min(min_ok, p.m);
      else max_fail = std::max(max_fail, p.m);
    }
    CHECK(max_fail < min_ok);
  }
}

TEST_CASE("search configuration is validated") {
  SearchConfig c;
  c.threshold = 0;
  CHECK_THROWS_AS(c.validate(), UserError);
  c = SearchConfig{};
  c.hi = 0;
  CHECK_THROWS_AS(c.validate(), UserError);
  c = SearchConfig{};
  c.growth = 1;
  CHECK_THROWS_AS(c.validate(), UserError);
  CHECK_THROWS_AS(mlp::parse_search_mode("bisect"), UserError);
  CHECK(mlp::parse_search_mode("reference") == SearchMode::reference);
}

TEST_CASE("seed quantiles: m50 / m100 from per-seed m*") {
  auto q = mlp::seed_quantiles({20, 10, 0});
  CHECK(q.seeds == 3);
  CHECK(q.found == 2);
  CHECK(q.m_min == 10);
  CHECK(q.m50 == 20);   // 2 of 3 seeds succeed from width 20 on
  CHECK(q.m100 == 0);   // one seed never succeeds
  CHECK(q.m_median == 20);
  q = mlp::seed_quantiles({5, 3, 9, 7});
  CHECK(q.m50 == 5);
  CHECK(q.m100 == 9);
  CHECK(q.m_median == 6);
  q = mlp::seed_quantiles({0, 0, 4});
  CHECK(q.m50 == 0);
  CHECK(std::isnan(q.m_median));
}

TEST_CASE("real CPU search: hebbian:whitened, d = 16, F = 32 (m* - 1 fails, m* succeeds)") {
  margin::CapacityJobSpec spec;
  spec.key = "test";
  spec.method = mlp::parse_method("hebbian:whitened");
  spec.dim = 16;
  spec.facts = 32;
  spec.fact_seed = 42;
  spec.feature_seed = 0;
  const mlp::FactSet fs = mlp::make_factset(margin::capacity_factset_spec(spec));
  CHECK(fs.tied);
  auto oracle = [&](std::int64_t m) {
    return margin::probe_width(spec.method, fs, m, spec.feature_seed, Device::cpu, nullptr);
  };
  const auto fast = mlp::capacity_search(cfg(SearchMode::fast), oracle);
  REQUIRE(fast.found);
  REQUIRE(fast.m_star > 1);
  CHECK(oracle(fast.m_star).accuracy == 1.0);
  CHECK(oracle(fast.m_star - 1).accuracy < 1.0);
  const auto ref = mlp::capacity_search(cfg(SearchMode::reference), oracle);
  CHECK(ref.m_star == fast.m_star);  // success is monotone here (nested random features)
  CHECK(margin::capacity_param_count(spec.method, fast.m_star, 16) == 3 * fast.m_star * 16);

  // The job runner: a probe log replays every probe of a finished search without building.
  const std::string log =
      (std::filesystem::temp_directory_path() / ("memcap_cap_probes_" + std::to_string(getpid()) + ".json")).string();
  spec.search = cfg(SearchMode::fast);
  const auto first = margin::run_capacity_job(spec, Device::cpu, nullptr, log, "cpu");
  CHECK(first.search.m_star == fast.m_star);
  CHECK(first.search.oracle_calls == first.search.distinct);
  const auto again = margin::run_capacity_job(spec, Device::cpu, nullptr, log, "cpu");
  CHECK(again.search.m_star == fast.m_star);
  CHECK(again.search.oracle_calls == 0);
  CHECK(again.search.replayed == first.search.distinct);
  // A partial log (the first 3 probes) measures only the rest.
  auto probes = margin::read_probe_log(log, spec);
  REQUIRE(probes.size() == static_cast<std::size_t>(first.search.distinct));
  probes.resize(3);
  margin::write_probe_log(log, spec, probes);
  const auto partial = margin::run_capacity_job(spec, Device::cpu, nullptr, log, "cpu");
  CHECK(partial.search.m_star == fast.m_star);
  CHECK(partial.search.oracle_calls == first.search.distinct - 3);
  // A log written for another search is ignored.
  margin::CapacityJobSpec other = spec;
  other.search.threshold = 0.9;
  CHECK(margin::read_probe_log(log, other).empty());
  std::filesystem::remove(log);
}
