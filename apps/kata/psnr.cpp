// `kata psnr`: the pSNR ladder of spec kata.md §3.9 for given p, d_head, τ and key source: per rung
// (linear, Lorentz, PSD, degree k, softmax at each τ) the Welch-scale value, the random-key estimate and
// a Monte-Carlo median over keys from the source, on a grid of T; plus each rung's largest retrievable T.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "io/output_file.hpp"
#include "kata/dictionary.hpp"
#include "kata/psnr.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;

// Largest Monte-Carlo key dimension (--d-head, or --p when --d-head is 0).
constexpr std::int64_t kMaxDim = 100000;

struct PsnrState {
  cli::CommonOptions common;
  std::int64_t p = 64, d_head = 0;
  std::vector<double> taus = {0.125, 1.0};
  std::vector<std::string> rungs = {"linear", "lorentz", "psd", "deg4", "softmax"};
  std::vector<double> Ts;
  double t_min = 16, t_max = 65536;
  int per_octave = 1;
  std::string keys = "random";
  std::int64_t field_size = 0, degree = 2;
  double greedy_a = 0.5;
  std::int64_t trials = 3, queries = 256;
  bool no_mc = false;
};

std::string fnum(double v) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return "inf";
  return fmt::format("{:.4g}", v);
}

// Feature map whose kernel realizes the rung on unit keys (Monte Carlo); "" when none.
std::string mc_map_for(const Rung& r) {
  if (r.name == "linear") return "linear";
  if (r.name == "lorentz") return "lorentz-ray";
  if (r.name == "psd") return "m1";
  if (r.name == "softmax") return fmt::format("softmax:tau={:.17g}", r.tau);
  if (r.degree == 1) return "linear";
  if (r.degree % 2 == 0 && r.degree <= 16) return fmt::format("deg{}", r.degree);  // deg<k> maps stop at 16
  return "";
}

void run(CLI::App* sub, PsnrState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(prep.ctx.device.device == Device::cpu || st.common.device != "cuda",
          "kata psnr has only a CPU path; use --device cpu or auto");
  if (!st.common.out.empty()) io::check_output_path(st.common.out);
  require(st.trials >= 1 && st.queries >= 1, "--trials and --queries must be >= 1");
  require(st.d_head >= 0, "--d-head = {} must be >= 0 (0 = use --p)", st.d_head);
  require(st.d_head <= kMaxDim, "--d-head = {} is too large (at most {})", st.d_head, kMaxDim);
  sweep::require_distinct(st.taus, "--tau");
  sweep::require_distinct(st.rungs, "--rungs");
  sweep::require_distinct(st.Ts, "--T");
  // key source and dimensions
  Eigen::MatrixXd pool;
  std::int64_t d = st.d_head > 0 ? st.d_head : st.p;
  if (st.keys == "mub" || st.keys == "devore" || st.keys == "greedy") {
    DictSpec sp;
    sp.type = st.keys;
    sp.field_size = st.field_size;
    sp.degree = st.degree;
    sp.dim = d;
    sp.max_coherence = st.greedy_a;
    sp.seed = st.common.seed;
    validate_dict_spec(sp);
    const std::int64_t dd = dictionary_dim(sp);
    require(st.d_head == 0 || st.d_head == dd, "--keys {} lives in R^{}; --d-head {} does not match", st.keys, dd,
            st.d_head);
    d = dd;
    if (sub->count("--p") == 0) st.p = d;
    pool = make_dictionary(sp);
    fmt::print(stderr, "kata psnr: key pool {} ({} vectors in R^{})\n", st.keys, pool.rows(), pool.cols());
  } else {
    require(st.keys == "random", "--keys must be random, mub, devore or greedy (got '{}')", st.keys);
  }
  require(st.p >= 2, "--p = {} makes the Welch-scale ladder vacuous (eps* = 1 for every T); use p >= 2", st.p);
  require(d >= 2, "--d-head = {} must be >= 2", d);
  require(st.no_mc || d <= kMaxDim, "--p = {} is too large as the Monte-Carlo key dimension (at most {}); set "
          "--d-head or use --no-mc", d, kMaxDim);
  // rungs
  for (double t : st.taus) {
    require(std::isfinite(t) && t > 0, "--tau {} is not a positive finite softmax temperature", t);
    // as kata capacity: below ~1e-6 exp(2(1-mu)/tau) leaves double range (inf rows)
    require(t >= 1e-6, "--tau {:g} is too small (exp(2(1-mu)/tau) leaves double range); use tau >= 1e-6", t);
  }
  std::vector<Rung> rungs;
  for (const auto& name : st.rungs) {
    if (name == "softmax") {
      require(!st.taus.empty(), "the softmax rung needs at least one --tau");
      for (double t : st.taus) rungs.push_back(parse_rung(name, t));
    } else {
      try {
        rungs.push_back(parse_rung(name));
      } catch (const UserError& e) {
        throw UserError(fmt::format("--rungs: {}", e.what()));
      }
    }
  }
  // Each rung's Monte-Carlo kernel, parsed before anything is printed (a bad one is a usage error).
  std::vector<std::optional<FeatureMap>> fmaps;
  for (const auto& r : rungs) {
    const std::string mspec = mc_map_for(r);
    fmaps.emplace_back();
    try {
      if (!mspec.empty()) fmaps.back() = FeatureMap::parse(mspec, d);
    } catch (const UserError& e) {
      throw UserError(fmt::format("--rungs {} (Monte-Carlo kernel at d = {}): {}", r.label(), d, e.what()));
    }
  }
  // T grid
  std::vector<double> Ts = st.Ts;
  if (Ts.empty()) {
    require(std::isfinite(st.t_min) && std::isfinite(st.t_max) && st.t_min >= 2 && st.t_max >= st.t_min,
            "--T-min/--T-max must satisfy 2 <= T-min <= T-max (got {}, {})", st.t_min, st.t_max);
    require(st.per_octave >= 1 && st.per_octave <= 64, "--per-octave must be in 1..64");
    for (int i = 0;; ++i) {
      const double T = std::round(st.t_min * std::pow(2.0, static_cast<double>(i) / st.per_octave));
      if (T > st.t_max * (1 + 1e-12)) break;
      if (Ts.empty() || T != Ts.back()) Ts.push_back(T);
    }
  }
  for (double T : Ts)
    require(std::isfinite(T) && T >= 2 && T == std::floor(T), "--T: T = {} must be an integer number of keys >= 2", T);

  // Monte-Carlo memory at the largest T it runs: the T x d keys, one 16-row block of coefficients per
  // thread (T each), the key pool and the nq x trials samples.
  if (!st.no_mc) {
    double T_mc = 0;
    for (double T : Ts)
      if (pool.size() == 0 || T <= static_cast<double>(pool.rows())) T_mc = std::max(T_mc, T);
    if (T_mc > 0) {
      const double dd = static_cast<double>(d), nq = std::min(T_mc, static_cast<double>(st.queries));
      const double threads = std::max(1, max_threads());  // --threads, or the OpenMP default
      const double bytes = 8.0 * (T_mc * dd + 16 * threads * (T_mc + dd) + static_cast<double>(pool.size()) +
                                  nq * static_cast<double>(st.trials));
      sweep::require_memory(bytes, fmt::format("the pSNR Monte Carlo at --T {:g} (d = {}, --trials {}, --queries {}; "
                                               "--no-mc skips it)", T_mc, d, st.trials, st.queries));
    }
  }

  // thresholds
  fmt::print("pSNR ladder at p = {} (Welch-scale: all T-1 distractors at squared correlation eps* = (T-p)/(p(T-1)))\n",
             st.p);
  fmt::print("{:<20} {:>8} {:>16} {:>16}\n", "rung", "source", "largest T (>1)", "threshold formula");
  io::Table thr;
  for (const auto& r : rungs) {
    const std::int64_t big = largest_retrievable_T(r, st.p);
    double formula = std::nan("");
    if (r.name == "linear") formula = linear_threshold(st.p);
    else if (r.name == "psd") formula = psd_threshold(st.p);
    else if (r.name == "softmax") formula = softmax_threshold_approx(st.p, r.tau);
    fmt::print("{:<20} {:>8} {:>16} {:>16}\n", r.label(), r.source(), big > 0 ? std::to_string(big) : "none (T>p)",
               fnum(formula));
    io::Row row;
    row.set("rung", r.label()).set("source", r.source()).set("largest_T", big).set("threshold_formula", formula);
    thr.append(row);
  }
  // ladder
  fmt::print("\n{:<20} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12}   (MC: {} keys, {} trials, <= {} queries)\n", "rung",
             "T", "welch", "random_est", "mc_median", "mc_q10", "mc_q90", st.keys, st.trials, st.queries);
  io::Table table;
  for (std::size_t ri = 0; ri < rungs.size(); ++ri) {
    const Rung& r = rungs[ri];
    const std::string mspec = mc_map_for(r);
    const std::optional<FeatureMap>& fmap = fmaps[ri];
    for (double T : Ts) {
      const double welch = rung_psnr(r, st.p, T);
      double est = std::nan("");
      if (fmap) est = psnr_random_for_map(*fmap, T);
      PsnrMc mc;
      mc.median = mc.q10 = mc.q90 = std::nan("");
      const bool can_mc = !st.no_mc && fmap && (pool.size() == 0 || T <= static_cast<double>(pool.rows()));
      if (can_mc)
        mc = psnr_monte_carlo(*fmap, static_cast<std::int64_t>(T), st.trials, st.queries, st.common.seed, pool);
      fmt::print("{:<20} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12}\n", r.label(), T, fnum(welch), fnum(est),
                 fnum(mc.median), fnum(mc.q10), fnum(mc.q90));
      io::Row row;
      row.set("rung", r.label())
          .set("source", r.source())
          .set("T", T)
          .set("p", st.p)
          .set("tau", r.tau)
          .set("psnr_welch", welch)
          .set("log_psnr_welch", rung_log_psnr(r, st.p, T))
          .set("psnr_random_est", est)
          .set("mc_map", mspec)
          .set("mc_keys", st.keys)
          .set("psnr_mc_median", mc.median)
          .set("psnr_mc_q10", mc.q10)
          .set("psnr_mc_q90", mc.q90);
      table.append(row);
    }
  }
  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  out.write_summary(table);
  h5::Group t = out.root().child("thresholds");
  thr.write(t);
  out.root().attr("formula_source",
                  "paper: linear, psd, softmax (Eq. 10-16, C.7-C.8); derived: lorentz, deg<k>, random-key estimates "
                  "(spec kata.md 3.9 [D]); NaN = not computed");
  out.root().attr("d_head", d);
  out.commit();
  fmt::print(stderr, "kata psnr: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("kata", 30, [](CLI::App& tool) {
  auto st = std::make_shared<PsnrState>();
  auto* sub = tool.add_subcommand(
      "psnr",
      "pSNR ladder across cones (spec kata.md §3.9): pSNR = a*^2 / sum_{j!=*} a_j^2 for the matched key *.\n"
      "For each rung (linear, lorentz, psd, deg<k>, softmax at each --tau) and each T: the Welch-scale value\n"
      "(every distractor at the Welch floor, harmful sign: linear p/(T-p), psd p^2(T-1)/(T-p)^2, softmax\n"
      "exp(2(1-mu*)/tau)/(T-1)), the random-key estimate, and a Monte-Carlo median over T keys from --keys\n"
      "(queries = stored keys) with the rung's kernel (linear, lorentz-ray, m1, deg<k>, softmax). Also the\n"
      "largest T with pSNR > 1 per rung (linear 2p-1, psd ~ p^2+2p-2, softmax by bisection on Eq. 14).\n"
      "Writes /summary (rung, source, T, psnr_welch, log_psnr_welch, psnr_random_est, psnr_mc_median/q10/q90)\n"
      "and /thresholds (rung, largest_T, threshold_formula). Sources: paper or derived (our extensions).\n"
      "Example: kata psnr --p 64 --tau 0.125,1 --keys random --out ladder.h5");
  sub->add_option("--p", st->p, "side p of the packing (Welch-scale ladder), p >= 2")->capture_default_str();
  sub->add_option("--d-head", st->d_head,
                  "key dimension for the Monte Carlo, 0..1e5 (0 = p; mub/devore: set by the dictionary)")
      ->capture_default_str();
  sub->add_option("--tau", st->taus, "softmax temperatures >= 1e-6 (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--rungs", st->rungs,
                  "rungs: linear, lorentz, psd, deg<k> (k in 1..999), softmax (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--T", st->Ts, "numbers of keys (comma-separated); default: doubling grid --T-min..--T-max")
      ->delimiter(',');
  sub->add_option("--T-min", st->t_min, "first T of the default grid")->capture_default_str();
  sub->add_option("--T-max", st->t_max, "last T of the default grid")->capture_default_str();
  sub->add_option("--per-octave", st->per_octave, "grid points per doubling of T")->capture_default_str();
  sub->add_option("--keys", st->keys, "Monte-Carlo key source: random (uniform on the sphere), mub, devore, greedy")
      ->capture_default_str();
  sub->add_option("--field-size,-s", st->field_size, "mub/devore: field size s (keys in R^{2s} / R^{s^2})")
      ->capture_default_str();
  sub->add_option("--degree,-r", st->degree, "devore: degree r")->capture_default_str();
  sub->add_option("--greedy-a", st->greedy_a, "greedy: acceptance threshold a")->capture_default_str();
  sub->add_option("--trials", st->trials, "Monte-Carlo trials per T (fresh keys each)")->capture_default_str();
  sub->add_option("--queries", st->queries, "queries per trial (the first stored keys)")->capture_default_str();
  sub->add_flag("--no-mc", st->no_mc, "analytic values only");
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
