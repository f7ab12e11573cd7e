// Per-job records of `ramnet recall` (see recall_job.hpp).
#include "recall_job.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

namespace memcap::ramnet::app {
namespace fs = std::filesystem;

namespace {
std::string fmt_n(std::int64_t n, bool censored) { return n < 0 ? std::string("-") : fmt::format("{}{}", n, censored ? "+" : ""); }
}  // namespace

// Scratch file of a running job: one JSON line naming the job, then one line per measured point, so a
// killed job resumes from its points (--resume). A torn last line is ignored.
nlohmann::json point_json(const RecallPoint& p) {
  return {{"N", p.N},         {"stage", p.stage}, {"acc", p.acc},   {"acc_seeds", p.acc_seeds},
          {"nmse", p.nmse},   {"dead", p.dead},   {"hits", p.recency_hits}, {"count", p.recency_count}};
}

std::vector<RecallPoint> read_scratch(const std::string& path, const std::string& key) {
  std::vector<RecallPoint> out;
  if (path.empty() || !fs::exists(path)) return out;
  std::ifstream in(path);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      break;  // torn write at the kill
    }
    if (first) {
      if (!j.is_object() || j.value("job", "") != key) return {};
      first = false;
      continue;
    }
    try {
      RecallPoint p;
      p.N = j.at("N").get<std::int64_t>();
      p.stage = j.at("stage").get<std::string>();
      p.acc = j.at("acc").get<double>();
      p.acc_seeds = j.at("acc_seeds").get<std::vector<double>>();
      p.nmse = j.at("nmse").get<double>();
      p.dead = j.at("dead").get<double>();
      p.recency_hits = j.at("hits").get<std::vector<std::int64_t>>();
      p.recency_count = j.at("count").get<std::vector<std::int64_t>>();
      out.push_back(std::move(p));
    } catch (const std::exception&) {
      break;
    }
  }
  return out;
}

void print_recall_header() {
  fmt::print("{:<11} {:>3} {:>2} {:>5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {}\n", "mixer", "dp", "U", "K", "beta",
             "state", "N*_0.1", "N*_0.5", "pred_0.1", "pred_0.5", "time", "path");
}

sweep::JobOutput recall_job_output(const RecallJobSpec& js, const RecallResult& r, double eval_s) {
  const RecallConfig& c = js.cfg;
  const RecallModel& m = c.model;
  const double A = std::pow(static_cast<double>(m.params.dp), m.params.U);
  const std::int64_t D = m.features();
  const std::int64_t big = std::int64_t(1) << 24;
  const RecallPoint& last = r.points.back();
  sweep::JobOutput jo;
  jo.row.set("mixer", to_string(m.mixer))
      .set("mixer_id", js.mixer_id)
      .set("dp", m.params.dp)
      .set("U", m.params.U)
      .set("addresses", static_cast<std::int64_t>(A))
      .set("K", m.topk)
      .set("beta_id", js.beta_id)
      .set("beta_r", m.params.beta_r)
      .set("beta_w", m.params.beta_w)
      .set("tau", m.tau)
      .set("readout", m.mass_readout ? "mass" : "standard")
      .set("gamma", m.gamma)
      .set("eps", m.eps)
      .set("keys", c.keys.spec())
      .set("sigma_q", c.sigma_q)
      .set("dv", c.dv)
      .set("features", D)
      .set("state_size", D > 0 ? D * c.dv : std::int64_t(-1))
      .set("seeds", c.seeds)
      .set("n_min", c.search ? c.n_min : std::int64_t(0))
      .set("n_max", r.n_max)
      .set("n_star_01", r.n_star[0])
      .set("n_star_05", r.n_star[1])
      .set("n_star_01_censored", static_cast<std::int64_t>(r.censored[0]))
      .set("n_star_05_censored", static_cast<std::int64_t>(r.censored[1]))
      .set("pred_n_star_01", hard_write_capacity(A, kDeltas[0], big))
      .set("pred_n_star_05", hard_write_capacity(A, kDeltas[1], big))
      .set("points", r.points.size())
      .set("n_last", last.N)
      .set("acc_last", last.acc)
      .set("nmse_last", last.nmse)
      .set("compute_path", r.path)
      .set("eval_s", eval_s);
  const std::string beta = m.params.beta_w == m.params.beta_r
                               ? fmt::format("{:.4g}", m.params.beta_r)
                               : fmt::format("{:.3g}/{:.3g}", m.params.beta_r, m.params.beta_w);
  const std::string state = D > 0 ? fmt::format("{}", D * c.dv) : std::string("cache");
  if (c.search)
    fmt::print("{:<11} {:>3} {:>2} {:>5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>7.2f}s {}\n", to_string(m.mixer),
               m.params.dp, m.params.U, m.topk, beta, state, fmt_n(r.n_star[0], r.censored[0]),
               fmt_n(r.n_star[1], r.censored[1]), hard_write_capacity(A, kDeltas[0], big),
               hard_write_capacity(A, kDeltas[1], big), eval_s, r.path);
  else
    for (const auto& p : r.points)
      fmt::print("{:<11} {:>3} {:>2} {:>5} {:>9} {:>10}  N={:<7} acc={:.4f} nmse={:.4f} dead={:.4f} pred={:.4f} {:>7.2f}s {}\n",
                 to_string(m.mixer), m.params.dp, m.params.U, m.topk, beta, state, p.N, p.acc, p.nmse, p.dead,
                 hard_write_accuracy(A, p.N), eval_s, r.path);

  const int bins = recency_bins(r.n_max);
  const std::string keys = c.keys.spec(), path = r.path, mixer = to_string(m.mixer);
  const std::int64_t n01 = r.n_star[0], n05 = r.n_star[1];
  const int seeds = c.seeds;
  const nlohmann::json info = {{"readout", m.mass_readout ? "mass" : "standard"},
                               {"gamma", std::isinf(m.gamma) ? std::string("-inf") : fmt::format("{:.17g}", m.gamma)},
                               {"eps", m.eps},
                               {"tau", m.tau},
                               {"sigma_q", c.sigma_q},
                               {"dv", c.dv},
                               {"search", c.search ? "doubling from n_min, then integer bisection per delta" : "list"},
                               {"deltas", {kDeltas[0], kDeltas[1]}},
                               {"recency", "bin 0: age 0; bin b >= 1: ages [2^(b-1), 2^b); age of item i = N-1-i"},
                               {"precision", "float64"}};
  auto pts = std::make_shared<std::vector<RecallPoint>>(r.points);
  jo.write_run = [pts, bins, seeds, keys, path, mixer, n01, n05, info, A](h5::Group& g) {
    const std::size_t n = pts->size();
    std::vector<std::int64_t> N(n);
    std::vector<std::string> stage(n);
    std::vector<double> acc(n), nmse(n), dead(n), pred(n), acc_s, hits, count, age_lo(static_cast<std::size_t>(bins));
    for (std::size_t i = 0; i < n; ++i) {
      const auto& p = (*pts)[i];
      N[i] = p.N;
      stage[i] = p.stage;
      acc[i] = p.acc;
      nmse[i] = p.nmse;
      dead[i] = p.dead;
      pred[i] = hard_write_accuracy(A, p.N);
      acc_s.insert(acc_s.end(), p.acc_seeds.begin(), p.acc_seeds.end());
      for (int b = 0; b < bins; ++b) {
        hits.push_back(static_cast<double>(p.recency_hits[static_cast<std::size_t>(b)]));
        count.push_back(static_cast<double>(p.recency_count[static_cast<std::size_t>(b)]));
      }
    }
    for (int b = 0; b < bins; ++b) age_lo[static_cast<std::size_t>(b)] = b == 0 ? 0.0 : std::ldexp(1.0, b - 1);
    const auto ni = static_cast<std::int64_t>(n);
    g.write("N", std::span<const std::int64_t>(N));
    g.write("stage", stage);
    g.write("acc", std::span<const double>(acc));
    g.write_nd("acc_seeds", std::span<const double>(acc_s), {ni, static_cast<std::int64_t>(seeds)});
    g.write("nmse", std::span<const double>(nmse));
    g.write("dead", std::span<const double>(dead));
    g.write("pred_acc", std::span<const double>(pred));
    g.write_nd("recency_hits", std::span<const double>(hits), {ni, static_cast<std::int64_t>(bins)});
    g.write_nd("recency_count", std::span<const double>(count), {ni, static_cast<std::int64_t>(bins)});
    g.write("recency_age_lo", std::span<const double>(age_lo));
    // At most 8 attributes (HDF5 1.10's H5Ocopy and dense attribute storage, see apps/kata/capacity.cpp).
    g.attr("mixer", mixer);
    g.attr("keys", keys);
    g.attr("compute_path", path);
    g.attr("n_star_01", n01);
    g.attr("n_star_05", n05);
    g.attr("info_json", info.dump());
  };
  return jo;
}

}  // namespace memcap::ramnet::app
