// `kata capacity` (one configuration) and `kata capacity-sweep` (maps x d_head x key sources):
// the training-free write-then-read capacity protocol of spec §4.6, on the sweep engine (shards,
// resume, progress, dry run). Each job writes /summary columns and /runs/<job>/ per-K arrays.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "kata/capacity.hpp"
#include "kata/key_source.hpp"
#include "kata/value_model.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;

struct CapacityState {
  cli::CommonOptions common;
  sweep::Options sweep;
  CapacityConfig cfg;
  std::vector<std::string> maps = {"linear", "orthant", "lorentz", "m1", "m2", "m4", "sigma2", "sigma4",
                                   "softmax:tau=0.125"};
  std::vector<int> dims = {32, 64, 128};
  std::vector<std::string> key_sources = {"random"};
  bool no_search = false;
  bool quiet = false;
};

void add_protocol_options(CLI::App* sub, CapacityState& st) {
  CapacityConfig& c = st.cfg;
  sub->add_option("--values", c.values,
                  "Value model: gauss (N(0, I/d_v)), codebook[:size=N] (random unit codewords, decode over the whole "
                  "codebook; N default 1024), onehot (e_i, needs d_v >= K)")
      ->capture_default_str();
  sub->add_option("--dv", c.d_v, "Value dimension d_v (0 = d_head; onehot: the largest K)")->capture_default_str();
  sub->add_option("--readout", c.readout,
                  "auto (unnormalized for linear, normalized otherwise), normalized (psi(q)^T S / psi(q)^T Z) or "
                  "unnormalized (psi(q)^T S); softmax is always normalized")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "normalized", "unnormalized"}));
  sub->add_option("--noise", c.query_noise,
                  "Query noise sigma: q = |u| (u + sigma |u| xi)/|u + sigma |u| xi|, xi ~ N(0, I/d) (0 = q is the key)")
      ->capture_default_str()
      ->check(cli::FiniteRange(0, 1e6));
  sub->add_option("--trials", c.trials, "Independent trials per K (keys, values and noise redrawn)")
      ->capture_default_str();
  sub->add_option("--acc-threshold", c.acc_threshold, "theta of K*_acc: the largest K with accuracy >= theta")
      ->capture_default_str();
  sub->add_option("--psnr-threshold", c.psnr_threshold, "K*_psnr: the largest K with median pSNR > this")
      ->capture_default_str();
  sub->add_option("--k-min", c.k_min, "First K of the doubling grid")->capture_default_str();
  sub->add_option("--k-max", c.k_max,
                  "Largest K searched (0 = min(dictionary size, 16384)); a capacity still met at k-max is reported "
                  "as k-max with *_censored = 1")
      ->capture_default_str();
  sub->add_option("--K", c.k_list, "Extra K values to measure (comma-separated), e.g. --K 256,512")->delimiter(',');
  sub->add_flag("--no-search", st.no_search, "Measure only the --K list (no doubling/bisection search)");
  sub->add_option("--tile", c.tile_rows, "CPU query rows per tile (0 = about 4M coefficients per tile)")
      ->capture_default_str()
      ->check(cli::NonNegative);
  sub->add_option("--check-tol", c.check_tolerance,
                  "Tolerance of the state vs closed-form readout cross-check (relative); exceeding it fails the run")
      ->capture_default_str();
}

std::string fmt_num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("nan"); }

sweep::JobOutput run_one(const CapacityConfig& cfg, Device device, bool print_points) {
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](const KPoint& p) {
    if (print_points)
      fmt::print(stderr, "  K={:<7} {:<6} acc={:.4f} median_pSNR={:.4g} mean_log10_pSNR={:.4f} coh={:.4g} dev={:.2e}\n",
                 p.K, p.stage, p.acc, p.psnr_median, p.psnr_mean_log10, p.coherence, p.max_deviation);
  };
  const CapacityResult r = run_capacity(cfg, device, progress);
  const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CapacityKernel map = CapacityKernel::parse(cfg.map, cfg.dim);
  const KeySource keys = KeySource::parse(cfg.keys, cfg.dim);
  const auto& th = r.theory;

  sweep::JobOutput jo;
  io::Row& row = jo.row;
  row.set("map", cfg.map)
      .set("dim", cfg.dim)
      .set("keys", cfg.keys)
      .set("values", cfg.values)
      .set("d_v", r.d_v)
      .set("n_psi", map.feature_dim())
      .set("readout", r.readout)
      .set("noise", cfg.query_noise)
      .set("trials", cfg.trials)
      .set("acc_threshold", cfg.acc_threshold)
      .set("psnr_threshold", cfg.psnr_threshold)
      .set("k_max", r.k_max)
      .set("k_star_psnr", r.k_star_psnr)
      .set("k_star_acc", r.k_star_acc)
      .set("k_star_psnr_censored", static_cast<std::int64_t>(r.k_star_psnr_censored))
      .set("k_star_acc_censored", static_cast<std::int64_t>(r.k_star_acc_censored))
      .set("points", r.points.size())
      .set("max_deviation", r.max_deviation)
      .set("check_tolerance", cfg.check_tolerance)
      .set("compute_path", r.path)
      .set("eval_s", eval_s)
      .set("theory_welch_linear", th.welch_linear)
      .set("theory_welch_psd", th.welch_psd)
      .set("theory_welch_softmax", th.welch_softmax)
      .set("theory_random_linear", th.random_linear)
      .set("theory_random_m1", th.random_m1)
      .set("theory_random_map", th.random_map)
      .set("theory_rankin", th.rankin)
      .set("theory_greedy_cap_paper", th.greedy_cap_paper)
      .set("theory_greedy_cap_exact", th.greedy_cap_exact);

  fmt::print("{:<20} {:>5} {:<10} {:>9}{} {:>9}{} {:>10} {:>10} {:>10} {:>9.2e} {:>7.2f}s {}\n", cfg.map, cfg.dim,
             cfg.keys, r.k_star_psnr, r.k_star_psnr_censored ? "+" : " ", r.k_star_acc,
             r.k_star_acc_censored ? "+" : " ", fmt_num(th.random_map), fmt_num(th.welch_linear),
             fmt_num(th.welch_psd), r.max_deviation, eval_s, r.path);

  const CapacityConfig c = cfg;
  const std::string key_desc = keys.describe();
  jo.write_run = [r, c, key_desc, map](h5::Group& g) {
    const std::size_t n = r.points.size();
    std::vector<std::int64_t> K(n);
    std::vector<double> acc(n), med(n), mlog(n), pmin(n), coh(n), dev(n), acc_tr;
    std::vector<std::string> stage(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& p = r.points[i];
      K[i] = p.K;
      acc[i] = p.acc;
      med[i] = p.psnr_median;
      mlog[i] = p.psnr_mean_log10;
      pmin[i] = p.psnr_min;
      coh[i] = p.coherence;
      dev[i] = p.max_deviation;
      stage[i] = p.stage;
      acc_tr.insert(acc_tr.end(), p.acc_trials.begin(), p.acc_trials.end());
    }
    g.write("K", std::span<const std::int64_t>(K));
    g.write("stage", stage);
    g.write("acc", std::span<const double>(acc));
    g.write_nd("acc_trials", std::span<const double>(acc_tr),
               {static_cast<std::int64_t>(n), static_cast<std::int64_t>(c.trials)});
    g.write("psnr_median", std::span<const double>(med));
    g.write("psnr_mean_log10", std::span<const double>(mlog));
    g.write("psnr_min", std::span<const double>(pmin));
    g.write("coherence", std::span<const double>(coh));
    g.write("max_deviation", std::span<const double>(dev));
    // At most 8 attributes per object: more go to HDF5's dense storage, and H5Ocopy (used when the sweep
    // engine assembles records) crashes on variable-length strings there (HDF5 1.10). Extra text goes
    // into one JSON attribute; the theory numbers sit on a child group without strings.
    g.attr("map", c.map);
    g.attr("keys", c.keys);
    g.attr("readout", r.readout);
    g.attr("compute_path", r.path);
    g.attr("k_star_psnr", r.k_star_psnr);
    g.attr("k_star_acc", r.k_star_acc);
    const nlohmann::json info = {
        {"keys_description", key_desc},
        {"values", c.values},
        {"packing", "packed (off-diagonals x sqrt(2))"},
        {"eps", map.params().eps},
        {"tau", map.params().tau},
        {"scale", map.params().scale},
        {"precision", r.path == "cpu" ? "float64" : "float32 coefficients and state, float64 row sums"},
        {"search", "doubling from k_min, then integer bisection below the first failing grid point"},
        {"formula_source", r.theory.notes}};
    g.attr("info_json", info.dump());
    const auto& th = r.theory;
    h5::Group t = g.child("theory");
    t.attr("welch_linear", th.welch_linear);
    t.attr("welch_psd", th.welch_psd);
    t.attr("welch_softmax", th.welch_softmax);
    t.attr("random_linear", th.random_linear);
    t.attr("random_m1", th.random_m1);
    t.attr("random_map", th.random_map);
    t.attr("rankin", th.rankin);
    t.attr("greedy_cap_paper", th.greedy_cap_paper);
    t.attr("greedy_cap_exact", th.greedy_cap_exact);
  };
  return jo;
}

void print_header() {
  fmt::print("{:<20} {:>5} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {}\n", "map", "d", "keys",
             "K*_psnr", "K*_acc", "rand_pred", "welch_2p", "T*_PSD", "max_dev", "time", "path");
}

// Memory of one capacity job at its largest K (the dominant dense arrays, doubles): keys, queries and
// values (K x d, K x d_v), the state (n_psi x (d_v + 1)), one query tile of coefficients, the codebook
// (size x d_v) with one tile of decode scores, and what every trial keeps (its keys, K pSNR values and
// one accuracy per measured K).
double capacity_job_bytes(const CapacityConfig& c) {
  double K = static_cast<double>(c.k_max > 0 ? c.k_max : 16384);
  for (auto k : c.k_list) K = std::max(K, static_cast<double>(k));
  const double d = c.dim, dv = c.d_v > 0 ? c.d_v : std::max(d, c.values == "onehot" ? K : d);
  const double npsi = static_cast<double>(CapacityKernel::parse(c.map, c.dim).feature_dim());
  const double tile = std::min(K, c.tile_rows > 0 ? static_cast<double>(c.tile_rows) : std::max(1.0, 4e6 / K));
  const ValueModel vm = ValueModel::parse(c.values);
  const double book = vm.type() == ValueModelType::codebook ? static_cast<double>(vm.codebook_size()) : 0.0;
  const double points = 2 * std::log2(K + 1) + 2 + static_cast<double>(c.k_list.size());
  const double per_trial = K * d + K + points + 16;
  return 8.0 * (3 * K * d + 2 * K * dv + npsi * (dv + 1) + tile * K + book * (dv + tile) + c.trials * per_trial);
}

int run_plan(CLI::App* sub, CapacityState& st, const std::vector<CapacityConfig>& configs, bool single) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return 0;
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  sweep::require_distinct(st.cfg.k_list, "--K");
  for (const auto& c : configs) validate(c);
  for (const auto& c : configs) {  // before anything is created (sweep engine: OUT.partial)
    const CapacityKernel kernel = CapacityKernel::parse(c.map, c.dim);
    const auto& mp = kernel.params();
    // Below ~1e-6, exp(<q,k>/tau) and the theory overlays leave double range (inf/NaN mid-run).
    require(mp.kind != MapKind::Softmax || mp.tau >= 1e-6,
            "--map {}: tau = {:g} is too small (exp(<q,k>/tau) leaves double range); use tau >= 1e-6", c.map, mp.tau);
    sweep::require_memory(capacity_job_bytes(c),
                          fmt::format("the capacity job map={} dim={} keys={} (--trials {}, --values {})", c.map,
                                      c.dim, c.keys, c.trials, c.values));
  }
  sweep::Plan plan;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& c = configs[i];
    sweep::Job j;
    j.index = static_cast<std::int64_t>(i);
    j.key = fmt::format("map={}/dim={}/keys={}", c.map, c.dim, c.keys);
    j.params = {{"map", c.map}, {"dim", c.dim}, {"keys", c.keys}};
    j.seed = c.seed;
    plan.jobs.push_back(j);
  }
  // Numeric /grid axes: map_id and keys_id number the maps and key sources in the order given
  // (--maps, --keys); /grid/{k_star_psnr,k_star_acc} over (map_id, dim, keys_id) with dimension scales.
  std::vector<std::string> map_names, key_names;
  auto id_of = [](std::vector<std::string>& names, const std::string& n) {
    auto it = std::find(names.begin(), names.end(), n);
    if (it == names.end()) it = names.insert(names.end(), n);
    return static_cast<std::int64_t>(it - names.begin());
  };
  for (const auto& c : configs) {
    id_of(map_names, c.map);
    id_of(key_names, c.keys);
  }
  if (!single) {
    plan.grid_axes = {"map_id", "dim", "keys_id"};
    plan.grid_values = {"k_star_psnr", "k_star_acc"};
  }
  if (!st.sweep.dry_run) print_header();
  const Device device = prep.ctx.device.device;
  return sweep::run(plan, st.sweep, prep.ctx, st.common.out, [&](const sweep::Job& j) {
    const auto& c = configs[static_cast<std::size_t>(j.index)];
    sweep::JobOutput jo = run_one(c, device, single && !st.quiet);
    jo.row.set("map_id", id_of(map_names, c.map)).set("keys_id", id_of(key_names, c.keys));
    return jo;
  });
}

memcap::cli::Register reg("kata", 60, [](CLI::App& tool) {
  auto st = std::make_shared<CapacityState>();
  auto* sub = tool.add_subcommand(
      "capacity",
      "Training-free capacity of one feature map (spec kata.md §4.6): store K (key, value) bindings in the\n"
      "state S = sum psi(u_i) v_i^T, Z = sum psi(u_i), read every key back, and measure per K the decode\n"
      "accuracy, the median and mean-log10 pSNR (A_ii^2 / sum_{j!=i} A_ij^2) and the coherence. K*_psnr\n"
      "(largest K with median pSNR > 1) and K*_acc(theta) are found by doubling from --k-min, then integer\n"
      "bisection. Every run checks that the readout through the state equals the closed-form weighted sum\n"
      "sum_j A_ij v_j (/ sum_j A_ij) to --check-tol and fails (exit 4) otherwise.\n"
      "Writes /summary (k_star_psnr, k_star_acc, max_deviation, theory_* overlays) and /runs/<job>/ (K, acc,\n"
      "acc_trials, psnr_median, psnr_mean_log10, psnr_min, coherence, max_deviation, stage).\n"
      "Example: kata capacity --map m1 --dim 32 --keys random --out m1.h5");
  sub->add_option("--map", st->cfg.map,
                  "Feature map: linear, orthant[:eps=E], lorentz (L3), lorentz-ray, lorentz-lift, m1, m2, m4 "
                  "(M_g[:eps=E]), sigma2, sigma4 (Sigma_g[:eps=E,scale=C]), deg2, softmax:tau=T (full KV cache)")
      ->capture_default_str();
  sub->add_option("--dim", st->cfg.dim, "d_head: raw key dimension")->capture_default_str();
  sub->add_option("--keys", st->cfg.keys,
                  "Key source: random (unit sphere), gauss (N(0,I/d)), mub[:s=S] (d = 2s), devore[:s=S,r=R] (d = s^2), "
                  "greedy[:a=A,fails=F (F <= 1e7)], coord (K <= d), simplex (K <= d+1)")
      ->capture_default_str();
  add_protocol_options(sub, *st);
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() {
    st->cfg.seed = st->common.seed;
    st->cfg.search = !st->no_search;
    st->sweep.shard = "0/1";       // one job: never sharded, whatever SLURM array variables say
    st->sweep.resumable = false;   // no --resume: a dead run's OUT.partial is cleared
    const int rc = run_plan(sub, *st, {st->cfg}, true);
    if (rc != 0) throw UserError("capacity run failed", rc);
  });

  auto sw = std::make_shared<CapacityState>();
  auto* ss = tool.add_subcommand(
      "capacity-sweep",
      "kata capacity over a grid of maps x d_head x key sources (one job each, same protocol options),\n"
      "on the sweep engine: --dry-run lists the jobs, --shard i/n runs a slice (SLURM arrays), --resume\n"
      "continues an interrupted run, `kata merge` joins shard files. One /summary row per job with\n"
      "k_star_psnr, k_star_acc, the theory overlays and the path that ran; per-K arrays under /runs/<job>/.\n"
      "Key sources that do not fit a d_head (mub needs d = 2s with s a prime power, devore d = s^2) are\n"
      "skipped with a note on stderr; for dictionaries --k-max is capped at the dictionary size.\n"
      "Example: kata capacity-sweep --maps linear,m1,m2 --dims 32,64,128 --keys random,mub --out cap.h5");
  ss->add_option("--maps", sw->maps, "Feature maps (comma-separated; see kata capacity --map)")
      ->delimiter(',')
      ->capture_default_str();
  ss->add_option("--dims", sw->dims, "d_head values (comma-separated)")->delimiter(',')->capture_default_str();
  ss->add_option("--keys", sw->key_sources, "Key sources (comma-separated; see kata capacity --keys)")
      ->delimiter(',')
      ->capture_default_str();
  add_protocol_options(ss, *sw);
  cli::add_common(ss, sw->common, "capacity-sweep.h5");  // a sweep has a default output, as hebb capacity
  cli::add_sweep(ss, sw->sweep);
  ss->callback([ss, sw]() {
    sweep::require_distinct(sw->maps, "--maps");
    sweep::require_distinct(sw->key_sources, "--keys");
    {
      std::vector<std::string> dims;
      for (int d : sw->dims) dims.push_back(std::to_string(d));
      sweep::require_distinct(dims, "--dims");
    }
    sweep::job_count({{"maps", static_cast<std::int64_t>(sw->maps.size())},
                      {"dims", static_cast<std::int64_t>(sw->dims.size())},
                      {"key sources", static_cast<std::int64_t>(sw->key_sources.size())}});
    std::vector<CapacityConfig> configs;
    for (const auto& m : sw->maps)
      for (int d : sw->dims)
        for (const auto& k : sw->key_sources) {
          CapacityConfig c = sw->cfg;
          c.map = m;
          c.dim = d;
          c.keys = k;
          c.seed = sw->common.seed;
          c.search = !sw->no_search;
          CapacityKernel::parse(m, d);  // a bad map or g not dividing d is an error, not a skip
          std::int64_t pool = -1;
          try {
            pool = KeySource::parse(k, d).pool_size();
          } catch (const UserError& e) {
            fmt::print(stderr, "kata capacity-sweep: skipping keys={} at d={}: {}\n", k, d, e.what());
            continue;
          }
          if (pool > 0 && c.k_max > pool) c.k_max = pool;  // a dictionary caps its own search
          configs.push_back(c);
        }
    require(!configs.empty(), "no job left: no key source fits any of the d_head values");
    const int rc = run_plan(ss, *sw, configs, false);
    if (rc != 0) throw UserError("capacity sweep failed", rc);
  });
});

}  // namespace
