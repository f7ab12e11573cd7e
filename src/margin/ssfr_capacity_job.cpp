// One job of `hebb ssfr capacity` (margin/ssfr_jobs.hpp): a capacity search whose probe is an SSFR
// training. §4.6 fact-adaptive: over the width m at fixed F, success = best_acc (MLP_B on map B)
// >= threshold, with the standalone gate (MLP_A below `gate` fails without training). §4.7 train-99:
// over F at fixed m for the LARGEST F with best_train_acc >= threshold; the search runs on the
// reflected axis x = lo + hi − F, where success is monotone increasing as mlp::capacity_search wants.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "margin/capacity_job.hpp"
#include "margin/ssfr_jobs.hpp"
#include "mlp/constructions.hpp"

namespace memcap::margin {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

nn::SsfrTask SsfrJobBase::task() const { return nn::SsfrTask::make(facts, junk, junk, junk_vocab); }

mlp::SsfrSetup SsfrJobBase::identity_setup() const {
  mlp::SsfrSetupSpec ss;
  ss.task = task();
  ss.block = block;
  ss.block.dim = dim;
  ss.seed = seed;
  return mlp::make_ssfr_setup(ss, mlp::parse_ssfr_mlp("identity"), nullptr);
}

const char* to_string(SsfrCapacityMode m) { return m == SsfrCapacityMode::train99 ? "train99" : "fact-adaptive"; }

SsfrJobOutput run_ssfr_capacity_job(const SsfrCapacitySpec& spec, const SsfrRunner& run, const std::string& probe_log) {
  const bool t99 = spec.mode == SsfrCapacityMode::train99;
  const std::int64_t lo = spec.search.lo, hi = spec.search.hi;
  // By value: write_run below outlives this call.
  auto facts_of = [t99, lo, hi, F = spec.facts](std::int64_t x) { return t99 ? lo + hi - x : F; };
  auto width_of = [t99, W = spec.width](std::int64_t x) { return t99 ? W : x; };
  const nlohmann::json identity = {{"key", spec.key},       {"mode", to_string(spec.mode)},
                                   {"mlp", spec.mlp.text},  {"lo", lo},
                                   {"hi", hi},              {"tolerance", spec.search.tolerance},
                                   {"search", mlp::to_string(spec.search.mode)},
                                   {"threshold", spec.search.threshold}, {"gate", spec.gate},
                                   {"steps", spec.train.steps}, {"batch", spec.train.batch}, {"seed", spec.seed}};
  std::vector<mlp::Probe> log = read_probe_log(probe_log, identity);

  auto oracle = [&](std::int64_t x) {
    const auto t0 = std::chrono::steady_clock::now();
    mlp::SsfrSetupSpec ss;
    ss.task = nn::SsfrTask::make(facts_of(x), spec.junk, spec.junk, spec.junk_vocab);
    ss.block = spec.block;
    ss.block.dim = spec.dim;
    ss.width = width_of(x);
    ss.seed = spec.seed;
    ss.gate = spec.gate;
    ss.handles = run.device == Device::cuda ? run.handles : nullptr;
    const mlp::SsfrSetup setup = mlp::make_ssfr_setup(ss, spec.mlp, nullptr);
    mlp::ProbeOutcome o;
    o.min_margin = kNaN;
    if (setup.gate_failed) {  // §4.6 (a): best_acc = 0, no training
      o.accuracy = 0;
      o.note = fmt::format("gate: mlp_acc_a {:.6f}", setup.mlp_acc_a);
    } else {
      nn::SsfrTrainConfig cfg = spec.train;
      cfg.seed = spec.seed;
      SsfrRunner r = run;
      if (!run.checkpoint.empty()) r.checkpoint = fmt::format("{}-x{}", run.checkpoint, x);
      const nn::SsfrTrainResult res =
          train_ssfr(setup.problem, cfg, ssfr_fingerprint(setup.problem, setup.mlp_text, setup.width, cfg, run.device), r);
      o.accuracy = t99 ? res.best_train_acc : res.best_acc;
      o.note = fmt::format("mlp_acc_a {:.6f} mlp_acc_b {:.6f} best_acc {:.6f} best_train_acc {:.6f} final_loss {:.6g}",
                           setup.mlp_acc_a, setup.mlp_acc_b, res.best_acc, res.best_train_acc, res.final_loss);
    }
    o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cli::verbosity() > 0) std::fprintf(stderr, "hebb ssfr capacity: %s: m %lld F %lld -> %.6f (%s)\n",
                                        spec.key.c_str(), static_cast<long long>(width_of(x)),
                                        static_cast<long long>(facts_of(x)), o.accuracy, o.note.c_str());
    return o;
  };
  auto persist = [&](const mlp::Probe& p) {
    log.push_back(p);
    write_probe_log(probe_log, identity, log);
  };
  const auto search = std::make_shared<mlp::SearchResult>(mlp::capacity_search(spec.search, oracle, log, persist));
  if (search->replayed > 0)
    std::fprintf(stderr, "hebb ssfr capacity: %s: resumed the search from %lld recorded probes\n", spec.key.c_str(),
                 static_cast<long long>(search->replayed));

  const std::int64_t m_star = search->found ? width_of(search->m_star) : 0;
  const std::int64_t f_star = search->found ? facts_of(search->m_star) : 0;
  double wall = 0;
  std::int64_t trainings = 0, gated = 0;
  for (const auto& p : search->steps) {
    if (p.cached) continue;
    wall += p.wall_s;
    (p.note.rfind("gate", 0) == 0 ? gated : trainings) += 1;
  }
  SsfrJobOutput out;
  io::Row& r = out.row;
  r.set("protocol", to_string(spec.mode))
      .set("mlp", spec.mlp.text)
      .set("dim", spec.dim)
      .set("junk", spec.junk)
      .set("junk_vocab", spec.junk_vocab)
      .set("found", static_cast<std::int64_t>(search->found))
      .set("facts", t99 ? f_star : spec.facts)
      .set("width", t99 ? spec.width : m_star)
      .set("params", search->found ? static_cast<double>(mlp::param_count(spec.mlp.method, t99 ? spec.width : m_star,
                                                                          spec.dim))
                                   : kNaN)
      .set("accuracy_star", search->found ? search->accuracy_star : kNaN)
      .set("threshold", spec.search.threshold)
      .set("search_lo", lo)
      .set("search_hi", hi)
      .set("probes", search->distinct)
      .set("trainings", trainings)
      .set("gated", gated)
      .set("probe_wall_s", wall)
      .set("status", search->found ? "found" : "not-found");
  out.write_run = [search, t99, facts_of, width_of](h5::Group& g) {
    auto pg = g.child("probes");
    std::vector<std::int64_t> w, f, ok, cached;
    std::vector<double> acc, wall_s;
    std::vector<std::string> notes;
    for (const auto& p : search->steps) {
      w.push_back(width_of(p.m));
      f.push_back(facts_of(p.m));
      acc.push_back(p.accuracy);
      ok.push_back(p.success);
      cached.push_back(p.cached);
      wall_s.push_back(p.wall_s);
      notes.push_back(p.note);
    }
    pg.write("width", std::span<const std::int64_t>(w));
    pg.write("facts", std::span<const std::int64_t>(f));
    pg.write("accuracy", std::span<const double>(acc));
    pg.write("success", std::span<const std::int64_t>(ok));
    pg.write("cached", std::span<const std::int64_t>(cached));
    pg.write("wall_s", std::span<const double>(wall_s));
    pg.write("note", notes);
    pg.attr("searched", t99 ? "facts" : "width");
  };
  return out;
}

}  // namespace memcap::margin
