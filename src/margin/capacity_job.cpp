// One `hebb capacity` job and the per-point aggregation over seeds (see capacity_job.hpp).
#include "margin/capacity_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "margin/capacity_probe.hpp"
#include "mlp/factset.hpp"
#include "sweep/sweep.hpp"

namespace memcap::margin {

namespace {
namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json search_identity(const CapacityJobSpec& s) {
  return {{"job", s.key},
          {"method", s.method.text},
          {"mode", mlp::to_string(s.search.mode)},
          {"lo", s.search.lo},
          {"hi", s.search.hi},
          {"start", s.search.start},
          {"growth", s.search.growth},
          {"threshold", s.search.threshold},
          {"fact_seed", s.fact_seed},
          {"feature_seed", s.feature_seed}};
}

double json_number(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : kNaN;
}

// Smallest entry >= the ceil(q n)-th order statistic of v (+inf = missing); NaN when missing.
double order_stat(std::vector<double> v, std::size_t k) {
  std::sort(v.begin(), v.end());
  return k < v.size() && std::isfinite(v[k]) ? v[k] : kNaN;
}

}  // namespace

mlp::FactSetSpec capacity_factset_spec(const CapacityJobSpec& spec) {
  mlp::FactSetSpec f;
  f.dim = spec.dim;
  f.facts = spec.facts;
  f.tied = true;
  f.map = "permutation";
  f.spike_beta = spec.beta;
  f.spike_target = spec.beta > 0 ? "both" : "none";
  f.seed = spec.fact_seed;
  return f;
}

std::vector<mlp::Probe> read_probe_log(const std::string& path, const CapacityJobSpec& spec) {
  return read_probe_log(path, search_identity(spec));
}

void write_probe_log(const std::string& path, const CapacityJobSpec& spec, const std::vector<mlp::Probe>& probes) {
  write_probe_log(path, search_identity(spec), probes);
}

std::vector<mlp::Probe> read_probe_log(const std::string& path, const nlohmann::json& identity) {
  std::vector<mlp::Probe> out;
  if (path.empty() || !fs::exists(path)) return out;
  nlohmann::json j;
  try {
    std::ifstream in(path);
    in >> j;
  } catch (const std::exception&) {
    std::fprintf(stderr, "hebb capacity: ignoring unreadable probe log %s (the search restarts)\n", path.c_str());
    return out;
  }
  if (!j.is_object() || j.value("search", nlohmann::json()) != identity || !j["probes"].is_array()) {
    std::fprintf(stderr, "hebb capacity: probe log %s is for another search; ignoring it\n", path.c_str());
    return out;
  }
  for (const auto& e : j["probes"]) {
    mlp::Probe p;
    p.m = e.value("m", std::int64_t{0});
    p.accuracy = json_number(e, "accuracy");
    p.min_margin = json_number(e, "min_margin");
    p.wall_s = json_number(e, "wall_s");
    p.note = e.value("note", std::string());
    if (p.m >= 1 && std::isfinite(p.accuracy)) out.push_back(p);
  }
  return out;
}

void write_probe_log(const std::string& path, const nlohmann::json& identity, const std::vector<mlp::Probe>& probes) {
  if (path.empty()) return;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& p : probes)
    arr.push_back({{"m", p.m}, {"accuracy", p.accuracy}, {"min_margin", p.min_margin}, {"wall_s", p.wall_s},
                   {"note", p.note}});
  const nlohmann::json j = {{"search", identity}, {"probes", arr}};
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw IoError(fmt::format("cannot write the probe log '{}'", tmp));
    out << j.dump() << '\n';
    if (!out.flush()) throw IoError(fmt::format("cannot write the probe log '{}'", tmp));
  }
  fs::rename(tmp, path);
}

std::string gd_checkpoint_file(const std::string& probe_log, std::int64_t m, Device device) {
  return fmt::format("{}-gd-m{}-{}", probe_log, m, device == Device::cpu ? "cpu" : "cuda");
}

CapacityJobResult run_capacity_job(const CapacityJobSpec& spec, Device device, gpu::Handles* handles,
                                   const std::string& probe_log, const std::string& path,
                                   double gd_checkpoint_every_s) {
  const mlp::FactSet facts = mlp::make_factset(capacity_factset_spec(spec));
  std::vector<mlp::Probe> log = read_probe_log(probe_log, spec);
  const bool ck_on = !probe_log.empty() && is_gd_method(spec.method);
  auto oracle = [&](std::int64_t m) {
    const ProbeCheckpoint ck{ck_on ? gd_checkpoint_file(probe_log, m, device) : std::string(), gd_checkpoint_every_s};
    return probe_width(spec.method, facts, m, spec.feature_seed, device, handles, ck);
  };
  auto persist = [&](const mlp::Probe& p) {
    log.push_back(p);
    write_probe_log(probe_log, spec, log);
    if (ck_on) {  // recorded: its training's checkpoint is no longer needed
      std::error_code ec;
      fs::remove(gd_checkpoint_file(probe_log, p.m, device), ec);
    }
  };
  CapacityJobResult res;
  res.search = mlp::capacity_search(spec.search, oracle, log, persist);
  const mlp::SearchResult& s = res.search;
  if (s.replayed > 0)
    std::fprintf(stderr, "hebb capacity: %s: resumed the search from %lld recorded probes\n", spec.key.c_str(),
                 static_cast<long long>(s.replayed));

  // Largest measured width below m* that failed (m* - 1 in fast mode unless m* = lo).
  std::int64_t below = 0;
  double acc_below = kNaN;
  for (const auto& p : s.steps)
    if (!p.cached && !p.success && p.m > below && (!s.found || p.m < s.m_star)) {
      below = p.m;
      acc_below = p.accuracy;
    }
  double probe_wall = 0;
  for (const auto& p : s.steps)
    if (!p.cached) probe_wall += p.wall_s;

  const double d = static_cast<double>(spec.dim);
  io::Row& r = res.row;
  r.set("method", spec.method.text)
      .set("method_id", spec.method_id)
      .set("dim", spec.dim)
      .set("facts", spec.facts)
      .set("alpha", static_cast<double>(spec.facts) / (d * d))
      .set("beta", spec.beta)
      .set("fact_seed", static_cast<std::int64_t>(spec.fact_seed))
      .set("feature_seed", static_cast<std::int64_t>(spec.feature_seed))
      .set("search", mlp::to_string(spec.search.mode))
      .set("threshold", spec.search.threshold)
      .set("min_width", spec.search.lo)
      .set("max_width", spec.search.hi)
      .set("start_width", spec.search.start)
      .set("growth", spec.search.growth)
      .set("m_star", s.found ? static_cast<double>(s.m_star) : kNaN)
      .set("params_star",
           s.found ? static_cast<double>(capacity_param_count(spec.method, s.m_star, spec.dim)) : kNaN)
      .set("found", static_cast<std::int64_t>(s.found))
      .set("status", s.found ? "found" : "not-found")
      .set("accuracy_star", s.accuracy_star)
      .set("min_margin_star", s.min_margin_star)
      .set("m_below", below)
      .set("accuracy_below", acc_below)
      .set("probes", s.distinct)
      .set("steps", static_cast<std::int64_t>(s.steps.size()))
      .set("probe_wall_s", probe_wall)
      .set("note_star", s.note_star)
      .set("path", path);
  return res;
}

void write_probes(h5::Group& run, const mlp::SearchResult& r) {
  h5::Group g = run.child("probes");
  std::vector<std::int64_t> m, success, cached;
  std::vector<double> acc, margin, wall;
  for (const auto& p : r.steps) {
    m.push_back(p.m);
    success.push_back(p.success);
    cached.push_back(p.cached);
    acc.push_back(p.accuracy);
    margin.push_back(p.min_margin);
    wall.push_back(p.wall_s);
  }
  g.write("m", std::span<const std::int64_t>(m));
  g.write("accuracy", std::span<const double>(acc));
  g.write("success", std::span<const std::int64_t>(success));
  g.write("min_margin", std::span<const double>(margin));
  g.write("wall_s", std::span<const double>(wall));
  g.write("cached", std::span<const std::int64_t>(cached));
  g.attr("oracle_calls", r.oracle_calls);
  g.attr("replayed", r.replayed);
}

io::Table capacity_points(const io::Table& summary) {
  io::Table pts;
  if (summary.rows() == 0) return pts;
  const auto method = summary.strings("method");
  const auto method_id = summary.numbers("method_id"), dim = summary.numbers("dim"), facts = summary.numbers("facts"),
             beta = summary.numbers("beta"), m_star = summary.numbers("m_star"),
             params = summary.numbers("params_star");
  // Points in first-appearance order.
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::tuple<std::string, double, double, double>, std::size_t> index;
  for (std::size_t r = 0; r < summary.rows(); ++r) {
    auto k = std::make_tuple(method[r], dim[r], facts[r], beta[r]);
    auto [it, fresh] = index.emplace(k, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(r);
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& g : groups) {
    std::vector<std::int64_t> ms;
    std::vector<double> ps;
    for (auto r : g) {
      const bool ok = std::isfinite(m_star[r]);
      ms.push_back(ok ? static_cast<std::int64_t>(m_star[r]) : 0);
      ps.push_back(ok ? params[r] : inf);
    }
    const mlp::SeedQuantiles q = mlp::seed_quantiles(ms);
    const std::size_t n = ps.size();
    std::vector<double> sorted = ps;
    std::sort(sorted.begin(), sorted.end());
    const double pmed = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const std::size_t r0 = g.front();
    io::Row row;
    row.set("method", method[r0])
        .set("method_id", static_cast<std::int64_t>(method_id[r0]))
        .set("dim", static_cast<std::int64_t>(dim[r0]))
        .set("facts", static_cast<std::int64_t>(facts[r0]))
        .set("alpha", facts[r0] / (dim[r0] * dim[r0]))
        .set("beta", beta[r0])
        .set("seeds", q.seeds)
        .set("found", q.found)
        .set("m_min", q.m_min)
        .set("m50", q.m50)
        .set("m100", q.m100)
        .set("m_median", q.m_median)
        .set("params50", order_stat(ps, (n + 1) / 2 - 1))
        .set("params100", order_stat(ps, n - 1))
        .set("params_median", std::isfinite(pmed) ? pmed : kNaN);
    pts.append(row);
  }
  return pts;
}

void register_capacity_finalizer() {
  sweep::register_finalizer(kCapacityFinalizer, [](io::OutputFile& out, const io::Table& summary,
                                                   const nlohmann::json&) {
    const io::Table pts = capacity_points(summary);
    if (pts.rows() == 0) return;
    h5::Group g = out.root().child("points");
    pts.write(g);
    g.attr("definition",
           "one row per (method, dim, facts, beta); m50/m100: smallest width at which >= 50% / 100% of the "
           "fact-set seeds store every fact (0 = never); params50/params100/params_median the same in "
           "parameters W (NaN = never)");
  });
}

void print_capacity_points(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  if (!f.exists("points")) return;
  const io::Table t = io::Table::read(f.open_group("points"));
  const auto method = t.strings("method");
  const auto dim = t.numbers("dim"), facts = t.numbers("facts"), alpha = t.numbers("alpha"), seeds = t.numbers("seeds"),
             found = t.numbers("found"), m50 = t.numbers("m50"), m100 = t.numbers("m100"), med = t.numbers("m_median"),
             p50 = t.numbers("params50"), p100 = t.numbers("params100");
  auto w = [](double v) { return v > 0 ? fmt::format("{:.0f}", v) : std::string("-"); };
  fmt::print("{:<24} {:>5} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9} {:>11} {:>11}\n", "method", "d", "F", "alpha", "found",
             "m50", "m100", "m_median", "W50", "W100");
  for (std::size_t i = 0; i < t.rows(); ++i)
    fmt::print("{:<24} {:>5.0f} {:>7.0f} {:>8.5g} {:>3.0f}/{:<3.0f} {:>8} {:>8} {:>9} {:>11} {:>11}\n", method[i],
               dim[i], facts[i], alpha[i], found[i], seeds[i], w(m50[i]), w(m100[i]),
               std::isfinite(med[i]) ? fmt::format("{:g}", med[i]) : std::string("-"),
               std::isfinite(p50[i]) ? fmt::format("{:.0f}", p50[i]) : std::string("-"),
               std::isfinite(p100[i]) ? fmt::format("{:.0f}", p100[i]) : std::string("-"));
}

}  // namespace memcap::margin
