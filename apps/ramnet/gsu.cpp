// `ramnet gsu`: experiment E8 (spec ramnet.md §3): GSU dynamics on generated sequences — the cumulative
// limit equals κ-attention exactly, hard writes + cumulative = count/mean (= VQ attention), the §1.6
// invariants under each γ, forgetting (recall against age) and the JS of the standard and mass-aware
// induced token weights against a causal softmax teacher — over generators × dp × U × K × β × γ.
#include <fmt/format.h>

#include <cmath>

#include "cli/app.hpp"
#include "options.hpp"
#include "core/error.hpp"
#include "memory_axes.hpp"
#include "ramnet/gsu_dynamics.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct GsuState {
  cli::CommonOptions common;
  sweep::Options sweep;
  app::ModelAxes axes;
  app::ModelOptions gate;  // --readout --eps
  std::vector<std::string> generators = {"torus:rho=1"};
  std::vector<std::string> gammas = {"-inf", "-2", "0", "2"};
  std::int64_t T = 256, trials = 5;
  int dv = 16;
  double sigma_q = 0;
  bool no_checks = false;
};

void run(CLI::App* sub, GsuState& st) {
  app::require_cpu_only(st.common, "ramnet gsu");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  app::resolve(st.gate, app::kReadout | app::kGate);
  std::vector<std::string> gshown;
  const auto gens = app::parse_generators(app::join_spec_pieces(st.generators), gshown);
  require(!gens.empty() && !st.gammas.empty(), "--generators and --gamma need at least one value");
  sweep::require_distinct(gshown, "--generators");
  const auto gammas = app::parse_gammas(st.gammas);
  const auto points = app::expand_model_axes(st.axes, app::ModelOptions{}, true);
  sweep::job_count({{"generators", static_cast<std::int64_t>(gens.size())},
                    {"model points", static_cast<std::int64_t>(points.size())},
                    {"gamma values", static_cast<std::int64_t>(gammas.size())}});
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  std::vector<GsuDynamicsConfig> configs;
  sweep::Plan plan;
  plan.grid_axes = {"generator_id", "dp", "U", "topk", "beta_factor", "gamma_id"};
  plan.grid_values = {"recall", "recall_recent", "recall_old", "js_standard", "js_mass", "cumulative_kappa_max_diff"};
  for (std::size_t gi = 0; gi < gens.size(); ++gi)
    for (const auto& pt : points)
      for (std::size_t yi = 0; yi < gammas.size(); ++yi) {
        GsuDynamicsConfig c;
        c.params = pt.o.params;
        c.tau = pt.o.tau_resolved;
        c.topk = pt.o.topk;
        c.gamma = gammas[yi];
        c.eps = st.gate.eps;
        c.readout = parse_readout(st.gate.readout);
        c.gen = gens[gi];
        c.T = st.T;
        c.dv = st.dv;
        c.trials = st.trials;
        c.sigma_q = st.sigma_q;
        c.checks = !st.no_checks;
        c.seed = st.common.seed;
        validate(c);
        app::add_job(plan, st.common.seed, fmt::format("gen={}/{}/gamma={}", gshown[gi], pt.key, st.gammas[yi]),
                     {{"generator", gshown[gi]}, {"generator_id", gi}, {"beta_factor", pt.beta_factor}, {"gamma_id", yi}});
        configs.push_back(c);
      }
  auto print_header = app::print_once([] {
    fmt::print("{:<14} {:>3} {:>2} {:>4} {:>6} {:>5} | {:>9} {:>9} {:>9} | {:>5} {:>5} {:>8} {:>9} | {:>6} {:>6} {:>6} | "
               "{:>8} {:>8}\n",
               "generator", "dp", "U", "K", "f", "gamma", "cum-kappa", "hard-cnt", "hard-vq", "hull", "m>1", "max m",
               "unrolled", "recall", "recent", "old", "JS std", "JS mass");
  });
  const int rc = sweep::run(plan, st.sweep, prep.ctx, st.common.out, [&](const sweep::Job& j) {
    print_header();
    const GsuDynamicsConfig& c = configs[static_cast<std::size_t>(j.index)];
    const GsuDynamicsResult r = run_gsu_dynamics(c);
    sweep::JobOutput jo;
    app::set_generator_columns(jo.row, j)
        .set("dp", c.params.dp)
        .set("U", c.params.U)
        .set("topk", c.topk)
        .set("beta_factor", j.params["beta_factor"].get<double>())
        .set("beta_r", c.params.beta_r)
        .set("beta_w", c.params.beta_w)
        .set("tau", c.tau)
        .set("gamma", c.gamma)
        .set("gamma_id", j.params["gamma_id"].get<std::int64_t>())
        .set("eps", c.eps)
        .set("readout", readout_name(c.readout))
        .set("T", c.T)
        .set("d_v", c.dv)
        .set("trials", c.trials)
        .set("sigma_q", c.sigma_q)
        .set("cumulative_kappa_max_diff", r.cumulative_kappa_max_diff)
        .set("hard_count_max_diff", r.hard_count_max_diff)
        .set("hard_mean_max_diff", r.hard_mean_max_diff)
        .set("hard_vq_max_diff", r.hard_vq_max_diff)
        .set("hull_violations", r.hull_violations)
        .set("mass_violations", r.mass_violations)
        .set("max_mass", r.max_mass)
        .set("lambda_min", r.lambda_min)
        .set("lambda_max", r.lambda_max)
        .set("unrolled_max_diff", r.unrolled_max_diff)
        .set("gla_max_diff", r.gla_max_diff)
        .set("recall", r.recall)
        .set("recall_recent", r.recall_recent)
        .set("recall_old", r.recall_old)
        .set("js_standard", r.js_standard)
        .set("js_mass", r.js_mass)
        .set("missing_standard", r.missing_standard)
        .set("missing_mass", r.missing_mass)
        .set("dead_standard", r.dead_standard)
        .set("dead_mass", r.dead_mass)
        .set("empty_reads", r.empty_reads);
    fmt::print("{:<14} {:>3} {:>2} {:>4} {:>6} {:>5} | {:>9.2e} {:>9.2e} {:>9.2e} | {:>5} {:>5} {:>8.4g} {:>9.2e} | "
               "{:>6.3f} {:>6.3f} {:>6.3f} | {:>8.4g} {:>8.4g}\n",
               c.gen.spec(), c.params.dp, c.params.U, c.topk, app::factor_text(j.params["beta_factor"].get<double>()),
               fmt::format("{:g}", c.gamma),
               r.cumulative_kappa_max_diff, r.hard_count_max_diff, r.hard_vq_max_diff, r.hull_violations,
               r.mass_violations, r.max_mass, r.unrolled_max_diff, r.recall, r.recall_recent, r.recall_old,
               r.js_standard, r.js_mass);
    const auto res = std::make_shared<GsuDynamicsResult>(r);
    jo.write_run = [res](h5::Group& g) {
      const std::size_t n = res->age_hits.size();
      std::vector<std::int64_t> lo(n), hi(n);
      std::vector<double> acc(n);
      for (std::size_t b = 0; b < n; ++b) {
        lo[b] = b == 0 ? 0 : std::int64_t(1) << (b - 1);
        hi[b] = b == 0 ? 0 : (std::int64_t(1) << b) - 1;
        acc[b] = res->age_count[b] > 0 ? static_cast<double>(res->age_hits[b]) / static_cast<double>(res->age_count[b]) : NAN;
      }
      g.write("age_lo", std::span<const std::int64_t>(lo));
      g.write("age_hi", std::span<const std::int64_t>(hi));
      g.write("age_hits", std::span<const std::int64_t>(res->age_hits));
      g.write("age_count", std::span<const std::int64_t>(res->age_count));
      g.write("age_recall", std::span<const double>(acc));
    };
    return jo;
  });
  if (rc != 0) throw UserError("ramnet gsu failed", rc);
}

memcap::cli::Register reg("ramnet", 55, [](CLI::App& tool) {
  auto st = std::make_shared<GsuState>();
  auto* sub = tool.add_subcommand(
      "gsu",
      "Experiment E8 (spec ramnet.md §3): GSU dynamics on sequences of T tokens (keys and queries from the\n"
      "generator, values N(0, I_dv)). Per job (generator, dp, U, K, beta, gamma): (i) with gamma = -inf, eps = 0\n"
      "and full distributions the causal mass-aware readout equals kappa-attention (max |diff|); (ii) hard writes +\n"
      "cumulative give count/mean per slot and the mass-aware read equals VQ attention softmax(beta_r q.k^)\n"
      "(max |diff|); (iii) the §1.6 invariants under the job's gamma, eps, K: convex hull, m <= 1 for gamma >= 0,\n"
      "lambda in [0, 1], unrolled form, m s = gated linear attention (eps = 0); (iv) forgetting: recall of item i\n"
      "(q = k_i + N(0, sigma_q^2), --readout, argmax cosine over the T values) against its age; (v) JS of the\n"
      "causal token weights of the standard and mass-aware readouts against softmax_{s<=t}(q_t.k_s/tau).\n"
      "Default: torus rho = 1, dp = 4, U = 5, K = 32, beta = beta*, gamma = -inf,-2,0,2, T = 256, 5 trials.\n"
      "Writes /summary, /grid/{recall,recall_recent,recall_old,js_standard,js_mass,cumulative_kappa_max_diff}\n"
      "over (generator_id, dp, U, topk, beta_factor, gamma_id), /runs/<job>/{age_lo,age_hi,age_hits,age_count,\n"
      "age_recall}.\n"
      "Example: ramnet gsu --U 3 --gamma=-inf,0 --T 128 --out e8.h5");
  cli::add_common(sub, st->common, "gsu.h5");
  cli::add_sweep(sub, st->sweep);
  app::add_model_axes(sub, st->axes, "K (comma list; 0 = full writes and reads, dense memory)", "1");
  app::add_model_options(sub, st->gate, app::kReadout);
  sub->add_option("--eps", st->gate.eps, "GSU stabiliser eps in s += w/(m+eps)(v-s)")->capture_default_str();
  app::add_generators_option(sub, st->generators);
  app::add_gammas_option(sub, st->gammas);
  sub->add_option("--T", st->T, "Tokens per sequence")->capture_default_str();
  sub->add_option("--dv", st->dv, "Value dimension")->capture_default_str();
  sub->add_option("--trials", st->trials, "Independent sequences")->capture_default_str();
  sub->add_option("--sigma-q", st->sigma_q, "Read-back noise of the recall test (iv)")->capture_default_str();
  sub->add_flag("--no-checks", st->no_checks, "Skip (i) and (ii) (they need a dense dp^U memory)");
  sub->callback([sub, st]() {
    app::check_given_values(sub, st->axes);
    run(sub, *st);
  });
});

}  // namespace
