// `hebb margin-sweep`: the margin sweeps of the Hebbian-MLP paper (spec hebbian.md §4.1: Fig. 2b,
// Fig. 4, exact-K2, Fig. 5a-c, Fig. 6): per job the kernel-memory γ_min, the §3.3 statistics and
// the §3.4 bounds; a finalizer aggregates over seeds and fits the §3.5 theory curve.
#include <fmt/format.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <tuple>

#include "cli/app.hpp"
#include "cli/preset.hpp"
#include "cli/toml_config.hpp"
#include "core/error.hpp"
#include "margin/fit_sweep.hpp"
#include "margin/stats_job.hpp"
#include "mlp/factset.hpp"
#include "mlp/method.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
namespace fs = std::filesystem;

struct SweepState {
  cli::CommonOptions common;
  sweep::Options sweep;
  std::string preset;
  std::string axis = "width";
  std::string method = "hebbian";
  std::int64_t dim = 64, facts = 256, width = 512;
  double beta = 0;
  std::string spike_target = "none";
  double noise = 0;
  std::vector<double> widths, facts_grid, betas, noise_grid, log_grid;  // empty: the preset's grid
  double beta_max = 5;
  int beta_points = 30;
  int seeds = 5;
  std::string fit_model = "auto";
  std::uint64_t noise_seed = 123;
  std::string lv = "on";
  std::int64_t tile = 256;
};

// The default grid of an axis is the one of its paper preset (experiments/presets are the single
// source of the paper's grids): width -> fig2b-width, facts -> fig4-facts, noise -> fig6-noise.
std::vector<double> preset_grid(CLI::App* sub, const char* preset, const char* key) {
  const std::string path = cli::find_preset(preset);
  for (const cli::ConfigEntry& e : cli::read_toml_config(path, sub->get_name(), cli::sibling_names(sub))) {
    if (e.key != key) continue;
    std::vector<double> g;
    for (const auto& v : e.values) {
      char* end = nullptr;
      g.push_back(std::strtod(v.c_str(), &end));
      if (!end || *end) throw UserError(fmt::format("{}: not a number: '{}'", cli::config_where(path, e), v));
    }
    return g;
  }
  throw UserError(fmt::format("preset '{}' has no '{}' grid; give --{} or --log-grid", path, key, key));
}

std::vector<double> grid_for(CLI::App* sub, const SweepState& st) {
  if (!st.log_grid.empty()) {
    require(st.log_grid.size() == 3 && st.log_grid[0] > 0 && st.log_grid[1] >= st.log_grid[0] && st.log_grid[2] >= 1,
            "--log-grid wants LO,HI,N with 0 < LO <= HI and N >= 1");
    const int n = static_cast<int>(sweep::to_int(st.log_grid[2], "the N of --log-grid LO,HI,N", 1, 1000000));
    return st.axis == "noise" ? sweep::logspace(st.log_grid[0], st.log_grid[1], n)
                              : sweep::logspace_unique_ints(st.log_grid[0], st.log_grid[1], n);
  }
  if (st.axis == "width") return st.widths.empty() ? preset_grid(sub, "fig2b-width", "widths") : st.widths;
  if (st.axis == "facts") return st.facts_grid.empty() ? preset_grid(sub, "fig4-facts", "facts-grid") : st.facts_grid;
  if (st.axis == "noise") return st.noise_grid.empty() ? preset_grid(sub, "fig6-noise", "noise-grid") : st.noise_grid;
  if (!st.betas.empty()) return st.betas;
  require(st.beta_max >= 1 && st.beta_points >= 2, "--beta-max must be >= 1 and --beta-points >= 2");
  std::vector<double> g = {0.0};
  for (double b : sweep::logspace(1.0, st.beta_max, st.beta_points - 1)) g.push_back(b);
  return g;
}

// Largest --dim/--facts/--width/--tile and width/facts grid value (keeps size products far from overflow).
constexpr std::int64_t kMaxSize = std::int64_t{1} << 31;

const char* grid_flag(const SweepState& st) {
  if (!st.log_grid.empty()) return "--log-grid";
  return st.axis == "width" ? "--widths" : st.axis == "facts" ? "--facts-grid" : st.axis == "noise" ? "--noise-grid" : "--betas";
}

void validate_grid(const SweepState& st, const std::vector<double>& g) {
  require(!g.empty(), "the {} grid is empty", st.axis);
  for (double v : g) {
    require(std::isfinite(v) && v >= 0, "{}: {} grid values must be finite and >= 0 (got {})", grid_flag(st), st.axis, v);
    if (st.axis == "beta")
      require(v <= mlp::kMaxSpikeBeta, "{}: beta values must be <= {:g} (got {:g}; beyond it every spiked row is +-u)",
              grid_flag(st), mlp::kMaxSpikeBeta, v);
    if (st.axis == "width" || st.axis == "facts") {
      require(v >= 2 && v == std::floor(v), "{}: {} grid values must be integers >= 2 (got {})", grid_flag(st), st.axis,
              v);
      sweep::to_int(v, fmt::format("each {} value", grid_flag(st)), 2, kMaxSize);
    }
  }
}

std::string fmt_value(const std::string& axis, double v) {
  return (axis == "width" || axis == "facts") ? fmt::format("{}", static_cast<long long>(v)) : fmt::format("{:g}", v);
}

// Grid values that print the same would make two jobs with one key: --log-grid drops them by design
// (with a note), a list given by the user is refused.
std::vector<double> distinct_grid(const SweepState& st, const std::vector<double>& g) {
  std::vector<double> out;
  std::vector<std::string> shown;
  for (double v : g) {
    const std::string t = std::isfinite(v) && std::fabs(v) < 9e18 ? fmt_value(st.axis, v) : fmt::format("{:g}", v);
    if (std::find(shown.begin(), shown.end(), t) != shown.end()) {
      require(!st.log_grid.empty(), "{} lists {} twice (values are compared as printed); give each value once",
              grid_flag(st), t);
      continue;
    }
    shown.push_back(t);
    out.push_back(v);
  }
  if (out.size() < g.size())
    fmt::print(stderr, "hebb margin-sweep: --log-grid: {} of its points print the same after rounding; sweeping {}\n",
               g.size() - out.size(), out.size());
  return out;
}

// Memory of one job at the largest grid point (the dominant dense arrays, doubles): fact tables,
// targets, queries and outputs (F x d), features (F x m, twice), kernel memory (m x d), one tile.
double margin_job_bytes(const SweepState& st, const std::vector<double>& grid, bool exact_k2) {
  double F = static_cast<double>(st.facts), m = static_cast<double>(st.width);
  const double d = static_cast<double>(st.dim);
  if (st.axis == "facts") F = *std::max_element(grid.begin(), grid.end());
  if (st.axis == "width") m = *std::max_element(grid.begin(), grid.end());
  if (exact_k2) m = d * (d + 1) / 2;
  const double tile = std::min(static_cast<double>(st.tile), F);
  return 8.0 * (8 * F * d + 3 * F * m + 2 * m * d + 2 * tile * (F + m));
}

void print_summary(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  h5::Group pts = f.open_group("points");
  const std::string axis = pts.attr_string("axis").value_or("width");
  const auto x = pts.read_doubles(axis), mean = pts.read_doubles("gamma_mean"), sd = pts.read_doubles("gamma_std");
  const auto pred = pts.read_doubles("fit_prediction");
  h5::Group best = pts.open_group("best");
  auto col = [&](const char* n) { return best.exists(n) ? best.read_doubles(n) : std::vector<double>(x.size(), NAN); };
  const auto acc = col("accuracy"), e44 = col("bound_eq44"), e43 = col("bound_eq43"), sig = col("bound_signal"),
             eq9 = col("bound_eq9"), params = col("params");
  fmt::print("{:>9} {:>9} {:>19} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n", axis, "params", "min_margin mean±std",
             "acc*", "eq9", "eq44*", "eq43*", "signal*", "fit");
  for (std::size_t p = 0; p < x.size(); ++p)
    fmt::print("{:>9} {:>9} {:>9.4f} ± {:<7.4f} {:>8.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f}\n",
               fmt_value(axis, x[p]), params[p], mean[p], sd[p], acc[p], eq9[p], e44[p], e43[p], sig[p], pred[p]);
  h5::Group fit = f.open_group("fit");
  std::string consts;
  if (auto names = fit.attr_string("constants"))
    for (std::size_t a = 0, b; a <= names->size(); a = b + 1) {
      b = names->find(',', a);
      if (b == std::string::npos) b = names->size();
      const std::string n = names->substr(a, b - a);
      consts += fmt::format(" {}={:.4g}", n, fit.attr_double(n).value_or(NAN));
    }
  if (auto why = fit.attr_string("error")) {  // too few points, say: no NaN printed as a fit
    fmt::print("(* = best seed) fit {}: not computed ({})\n", fit.attr_string("model").value_or("?"), *why);
    return;
  }
  fmt::print("(* = best seed) fit {} vs {}:{}  R2={:.4f}  MSE={:.3g}\n", fit.attr_string("model").value_or("?"),
             fit.attr_string("x_axis").value_or(axis), consts, fit.attr_double("r2").value_or(NAN),
             fit.attr_double("mse").value_or(NAN));
}

void run_sweep(CLI::App* sub, SweepState& st) {
#if defined(__GLIBC__)
  // Hundreds of short jobs allocate the same MB-sized matrices: keep them on the heap instead of
  // mmap/munmap per allocation (halves the system time of the default sweep: page faults).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  if (sub->get_option("--preset")->count() > 0) cli::apply_preset(sub, st.preset);
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(st.axis == "width" || st.axis == "facts" || st.axis == "beta" || st.axis == "noise",
          "--sweep must be width, facts, beta or noise (got '{}')", st.axis);
  require(st.seeds >= 1, "--seeds must be >= 1 (got {})", st.seeds);
  require(std::isfinite(st.beta) && st.beta >= 0 && st.beta <= mlp::kMaxSpikeBeta,
          "--beta must be in [0, {:g}] (got {:g}; beyond it every spiked row is +-u)", mlp::kMaxSpikeBeta, st.beta);

  require(st.beta == 0 || st.spike_target != "none",
          "--beta {:g} needs --spike-target keys, values or both (with none no table is spiked)", st.beta);
  require(st.dim >= 2 && st.dim <= kMaxSize, "--dim must be in [2, {}] (got {})", kMaxSize, st.dim);
  require(st.facts >= 2 && st.facts <= kMaxSize, "--facts must be in [2, {}] (got {})", kMaxSize, st.facts);
  require(st.width >= 1 && st.width <= kMaxSize, "--width must be in [1, {}] (got {})", kMaxSize, st.width);
  require(st.tile <= kMaxSize, "--tile must be <= {} (got {})", kMaxSize, st.tile);
  require(st.lv == "on" || st.lv == "off", "--lv must be on or off (got '{}')", st.lv);
  require(st.tile >= 1, "--tile must be >= 1 (got {})", st.tile);
  require(prep.ctx.device.device == Device::cpu || st.common.device == "auto",
          "hebb margin-sweep runs on the CPU only; use --device cpu or auto");
  if (st.axis == "beta" && st.spike_target == "none")
    throw UserError("--sweep beta needs --spike-target keys, values or both");
  require(st.fit_model != "noisy" || st.axis == "noise",
          "--fit-model noisy fits the noisy margin against the noise level: use it with --sweep noise (this run "
          "sweeps {})", st.axis);
  const std::string fit_model =
      st.fit_model == "auto" ? margin::fit_model_name(margin::default_fit_model(st.axis, st.spike_target))
                             : margin::fit_model_name(margin::parse_fit_model(st.fit_model));
  require(std::isfinite(st.noise) && st.noise >= 0 && st.noise <= 1e6,
          "--noise must be finite and in [0, 1e6] (got {}; keys have unit norm)", st.noise);
  const std::vector<double> grid = distinct_grid(st, grid_for(sub, st));
  validate_grid(st, grid);
  if (st.axis == "noise")
    for (double v : grid) require(v <= 1e6, "--noise-grid values must be in [0, 1e6] (got {})", v);

  margin::MarginJobSpec base;
  base.method = st.method;
  base.dim = st.dim;
  base.facts = st.facts;
  base.width = st.width;
  base.beta = st.beta;
  base.spike_target = st.spike_target;
  base.noise = st.noise;
  base.noise_seed = st.noise_seed;
  base.stats.tile_rows = st.tile;
  base.stats.compute_lv = st.lv == "on";
  // Validate the method and shapes once, before any job runs.
  {
    const auto m = mlp::parse_method(st.method);
    require(m.kind == mlp::MethodKind::sketched || m.kind == mlp::MethodKind::exact_k2,
            "--method must be hebbian or hebbian:exact-k2 (got '{}')", st.method);
    require(st.dim >= 2 && st.facts >= 2 && st.width >= 1, "--dim and --facts must be >= 2, --width >= 1");
    if (m.kind == mlp::MethodKind::exact_k2) {  // the exact kernel has one width: d(d+1)/2
      const std::int64_t k2 = st.dim * (st.dim + 1) / 2;
      if (st.axis == "width")
        throw UserError(fmt::format("--method hebbian:exact-k2 has the fixed width d(d+1)/2 = {} (d = {}): it cannot "
                                    "sweep widths; use --sweep facts, beta or noise", k2, st.dim));
      require(sub->get_option("--width")->count() == 0 || st.width == k2,
              "--method hebbian:exact-k2 has the fixed width d(d+1)/2 = {} (d = {}); drop --width {}", k2, st.dim,
              st.width);
    }
    sweep::require_memory(margin_job_bytes(st, grid, m.kind == mlp::MethodKind::exact_k2),
                          "one job of this sweep (--dim, --facts, --width or the swept grid)");
    if (!st.common.out.empty() && !st.sweep.dry_run && !st.sweep.resume)  // --resume: the engine checks (a finished OUT is a no-op)
      io::check_output_path(st.common.out);
  }
  // a grid of another axis would be ignored: refuse it (a preset's grid included)
  for (const auto& [flag, axis, given] :
       {std::tuple<const char*, const char*, bool>{"--widths", "width", !st.widths.empty()},
        {"--facts-grid", "facts", !st.facts_grid.empty()}, {"--betas", "beta", !st.betas.empty()},
        {"--noise-grid", "noise", !st.noise_grid.empty()}})
    require(st.axis == axis || !given, "{} belongs to --sweep {}, but this run sweeps {}; drop it or use --sweep {}",
            flag, axis, st.axis, axis);
  sweep::job_count({{st.axis + " values", static_cast<std::int64_t>(grid.size())}, {"seeds", st.seeds}});

  sweep::Plan plan;
  plan.grid_axes = {st.axis, "seed"};
  plan.grid_values = margin::margin_job_value_columns();
  plan.finalizer = margin::kMarginFitFinalizer;
  for (double v : grid)
    for (int s = 0; s < st.seeds; ++s) {
      sweep::Job j;
      j.index = static_cast<std::int64_t>(plan.jobs.size());
      j.seed = st.common.seed + static_cast<std::uint64_t>(s);
      j.key = fmt::format("{}={}/seed={}", st.axis, fmt_value(st.axis, v), j.seed);
      j.params = {{st.axis, v}, {"seed", j.seed}};
      plan.jobs.push_back(j);
    }
  margin::register_margin_fit_finalizer();

  const int rc = sweep::run(plan, st.sweep, prep.ctx, st.common.out, [&](const sweep::Job& j) {
    margin::MarginJobSpec spec = base;
    const double v = j.params[st.axis].get<double>();
    if (st.axis == "width") spec.width = static_cast<std::int64_t>(v);
    else if (st.axis == "facts") spec.facts = static_cast<std::int64_t>(v);
    else if (st.axis == "beta") spec.beta = v;
    else spec.noise = v;
    spec.seed = j.seed;
    margin::MarginJobResult r = margin::run_margin_job(spec);
    sweep::JobOutput out;
    out.row = std::move(r.row);
    out.row.set("sweep", st.axis).set("fit_model", fit_model);
    auto per_key = std::make_shared<margin::MarginJobResult>(std::move(r));
    out.write_run = [per_key](h5::Group& g) {
      const h5::WriteOptions z{true, 0};
      const auto& pk = per_key->per_key;
      g.write("per_key", std::span<const double>(pk.data(), static_cast<std::size_t>(pk.size())), z);
      std::vector<std::int64_t> worst(per_key->worst.data(), per_key->worst.data() + per_key->worst.size());
      g.write("worst", std::span<const std::int64_t>(worst), z);
      if (per_key->per_key_clean.size()) {
        const auto& c = per_key->per_key_clean;
        g.write("per_key_clean", std::span<const double>(c.data(), static_cast<std::size_t>(c.size())), z);
      }
    };
    return out;
  });
  if (rc != 0 || st.sweep.dry_run) {
    if (rc != 0) throw UserError("margin sweep failed", rc);
    return;
  }
  if (sweep::Shard::parse(st.sweep.shard).count == 1 && fs::exists(st.common.out)) print_summary(st.common.out);
}

// Registered at start-up so that `hebb merge` re-fits merged margin sweeps too.
const bool kFitFinalizerRegistered = (margin::register_margin_fit_finalizer(), true);

memcap::cli::Register reg("hebb", 30, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "margin-sweep",
      "Margin sweeps of the Hebbian-MLP paper (spec hebbian.md §4.1): kernel-memory margin γ_min of the\n"
      "unwhitened bilinear feature map (codes = values, identity map, independent sphere tables), the\n"
      "geometric statistics of §3.3 (streamed), every bound of §3.4, and the fitted theory curve (§3.5).\n"
      "Default (no flags): the Fig. 2b width sweep, d=64, F=256, 30 widths 64..1024, seeds 0..4 (~12 s of CPU).\n"
      "Presets (experiments/presets/NAME.toml; also usable with --config): fig2b-width, fig4-facts,\n"
      "exact-k2-facts, fig5a-keys, fig5b-values, fig5c-both, fig6-noise.\n"
      "Writes /summary (one row per job: width, facts, dim, beta, noise, seed, params=3md, min_margin,\n"
      "accuracy, statistics, bound_* columns), /grid/<column> over (swept axis, seed) with dimension scales,\n"
      "/points (per grid point: gamma_mean, gamma_std, gamma_seeds, best-seed statistics in /points/best,\n"
      "fit_prediction), /fit (attributes model, r2, mse, one per constant; /fit/<model> for every model),\n"
      "/runs/<job>/{per_key,worst[,per_key_clean]}. Prints a per-point table and the fit on stdout.\n"
      "See docs/hebb-theory.md. Example: hebb margin-sweep --preset fig4-facts --out fig4.h5");
  auto st = std::make_shared<SweepState>();
  cli::add_common(sub, st->common, "margin-sweep.h5");
  cli::add_sweep(sub, st->sweep);
  sub->add_option("--preset", st->preset,
                  "Named preset (experiments/presets/NAME.toml, or a .toml path); flags and --config override it")
      ->configurable(false);
  sub->add_option("--sweep", st->axis, "Swept axis: width (m), facts (F), beta (spike strength) or noise (query ε)")
      ->capture_default_str()
      ->check(CLI::IsMember({"width", "facts", "beta", "noise"}));
  sub->add_option("--method", st->method,
                  "hebbian (sketched K2 features, width m) or hebbian:exact-k2 (exact <x,z>^2 kernel, rank d(d+1)/2)")
      ->capture_default_str();
  sub->add_option("--dim", st->dim, "Embedding dimension d")->capture_default_str();
  sub->add_option("--facts", st->facts, "Number of facts F (when not swept)")->capture_default_str();
  sub->add_option("--width", st->width, "Feature width m (when not swept)")->capture_default_str();
  sub->add_option("--beta", st->beta, "Spike strength β >= 0 (when not swept; spec §1.3)")->capture_default_str();
  sub->add_option("--spike-target", st->spike_target, "Spiked tables: none, keys, values or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "keys", "values", "both"}));
  sub->add_option("--noise", st->noise, "Query noise ε >= 0 (when not swept; spec §3.2)")->capture_default_str();
  sub->add_option("--widths", st->widths, "Width grid for --sweep width (comma list; default the Fig. 2b 30 widths)")
      ->delimiter(',');
  sub->add_option("--facts-grid", st->facts_grid, "F grid for --sweep facts (default the Fig. 4 30 values 32..512)")
      ->delimiter(',');
  sub->add_option("--betas", st->betas, "β grid for --sweep beta (default [0] ∪ logspace(1, --beta-max, points-1))")
      ->delimiter(',');
  sub->add_option("--beta-max", st->beta_max, "Largest β of the default β grid")->capture_default_str();
  sub->add_option("--beta-points", st->beta_points, "Points of the default β grid (including β = 0)")
      ->capture_default_str();
  sub->add_option("--noise-grid", st->noise_grid, "ε grid for --sweep noise (default the Fig. 6 15 values 0.01..2)")
      ->delimiter(',');
  sub->add_option("--log-grid", st->log_grid,
                  "LO,HI,N: replace the swept grid by round(logspace(LO,HI,N)) de-duplicated (noise: not rounded)")
      ->delimiter(',');
  sub->add_option("--seeds", st->seeds, "Seeds per point: --seed .. --seed+N-1 (fact set and features share it)")
      ->capture_default_str();
  sub->add_option("--fit-model", st->fit_model, "Theory model to fit: auto, rkrv, akrv, rkav, akav or noisy")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "rkrv", "akrv", "rkav", "akav", "noisy"}));
  sub->add_option("--noise-seed", st->noise_seed, "Seed of the fixed noise directions u_i (spec: 123)")
      ->capture_default_str()
      ->check(cli::Uint64);
  sub->add_option("--lv", st->lv, "Compute L_v (O(F^2 P) additions): on or off (then NaN)")->capture_default_str();
  sub->add_option("--tile", st->tile, "Keys per streamed statistics tile (memory ~ tile*(F+P) doubles)")
      ->capture_default_str();
  sub->callback([sub, st] { run_sweep(sub, *st); });
});

}  // namespace
