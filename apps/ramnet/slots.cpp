// `ramnet slots`: experiment E6 (spec ramnet.md §3): slot utilisation of a GSU memory after writing T tokens
// — occupied fraction, effective slot count exp(H(m/Σm)) and its ratio to |A|, Gini of m, read-hit mass and
// mean pair overlap Σ r^K w^K — over generators × dp × U × K × β × γ × T, on the sweep engine.
#include <fmt/format.h>

#include <cmath>

#include "cli/app.hpp"
#include "options.hpp"
#include "core/error.hpp"
#include "memory_axes.hpp"
#include "ramnet/slots.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct SlotsState {
  cli::CommonOptions common;
  sweep::Options sweep;
  app::ModelAxes axes;
  std::vector<std::string> generators = {"torus:rho=1"};
  std::vector<std::string> gammas = {"-inf"};
  std::vector<std::int64_t> Ts = {64, 256, 1024};
  std::int64_t n = 64, trials = 5;
  double theta = 1e-3;
};

void run(CLI::App* sub, SlotsState& st) {
  app::require_cpu_only(st.common, "ramnet slots");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  std::vector<std::string> gshown;
  const auto gens = app::parse_generators(app::join_spec_pieces(st.generators), gshown);
  require(!gens.empty() && !st.gammas.empty() && !st.Ts.empty(), "--generators, --gamma and --T need at least one value");
  sweep::require_distinct(gshown, "--generators");
  const auto gammas = app::parse_gammas(st.gammas);
  {
    std::vector<std::string> shown;
    for (auto T : st.Ts) shown.push_back(std::to_string(T));
    sweep::require_distinct(shown, "--T");
  }
  const auto points = app::expand_model_axes(st.axes, app::ModelOptions{}, true);
  sweep::job_count({{"generators", static_cast<std::int64_t>(gens.size())},
                    {"model points", static_cast<std::int64_t>(points.size())},
                    {"gamma values", static_cast<std::int64_t>(gammas.size())},
                    {"T values", static_cast<std::int64_t>(st.Ts.size())}});
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  std::vector<SlotConfig> configs;
  sweep::Plan plan;
  plan.grid_axes = {"generator_id", "dp", "U", "topk", "beta_factor", "gamma_id", "T"};
  plan.grid_values = {"occupied_fraction", "effective_ratio", "gini", "read_hit_mass", "pair_overlap"};
  for (std::size_t gi = 0; gi < gens.size(); ++gi)
    for (const auto& pt : points)
      for (std::size_t yi = 0; yi < gammas.size(); ++yi)
        for (auto T : st.Ts) {
          SlotConfig c;
          c.params = pt.o.params;
          c.topk = pt.o.topk;
          c.gamma = gammas[yi];
          c.gen = gens[gi];
          c.T = T;
          c.n = st.n;
          c.trials = st.trials;
          c.theta = st.theta;
          c.seed = st.common.seed;
          validate(c);
          app::add_job(plan, st.common.seed,
                       fmt::format("gen={}/{}/gamma={}/T={}", gshown[gi], pt.key, st.gammas[yi], T),
                       {{"generator", gshown[gi]}, {"generator_id", gi}, {"beta_factor", pt.beta_factor},
                        {"gamma_id", yi}});
          configs.push_back(c);
        }
  auto print_header = app::print_once([] {
    fmt::print("{:<16} {:>3} {:>2} {:>5} {:>6} {:>6} {:>6} | {:>9} {:>10} {:>9} {:>7} {:>9} {:>10}\n", "generator", "dp",
               "U", "K", "f", "gamma", "T", "occupied", "eff_slots", "eff/|A|", "gini", "read_hit", "overlap");
  });
  const int rc = sweep::run(plan, st.sweep, prep.ctx, st.common.out, [&](const sweep::Job& j) {
    print_header();
    const SlotConfig& c = configs[static_cast<std::size_t>(j.index)];
    const SlotStats s = slot_utilisation(c);
    sweep::JobOutput jo;
    app::set_generator_columns(jo.row, j)
        .set("dp", c.params.dp)
        .set("U", c.params.U)
        .set("addresses", address_count(c.params))
        .set("topk", c.topk)
        .set("beta_factor", j.params["beta_factor"].get<double>())
        .set("beta_r", c.params.beta_r)
        .set("beta_w", c.params.beta_w)
        .set("gamma", c.gamma)
        .set("gamma_id", j.params["gamma_id"].get<std::int64_t>())
        .set("T", c.T)
        .set("queries", c.n)
        .set("trials", c.trials)
        .set("theta", c.theta)
        .set("occupied_fraction", s.occupied_fraction)
        .set("effective_slots", s.effective_slots)
        .set("effective_ratio", s.effective_ratio)
        .set("gini", s.gini)
        .set("read_hit_mass", s.read_hit_mass)
        .set("pair_overlap", s.pair_overlap)
        .set("stored_slots", s.stored_slots)
        .set("total_mass", s.total_mass);
    fmt::print("{:<16} {:>3} {:>2} {:>5} {:>6} {:>6} {:>6} | {:>9.4f} {:>10.4g} {:>9.4f} {:>7.4f} {:>9.4f} {:>10.4g}\n",
               c.gen.spec(), c.params.dp, c.params.U, c.topk, app::factor_text(j.params["beta_factor"].get<double>()),
               fmt::format("{:g}", c.gamma), c.T, s.occupied_fraction, s.effective_slots, s.effective_ratio, s.gini,
               s.read_hit_mass, s.pair_overlap);
    return jo;
  });
  if (rc != 0) throw UserError("ramnet slots failed", rc);
}

memcap::cli::Register reg("ramnet", 50, [](CLI::App& tool) {
  auto st = std::make_shared<SlotsState>();
  auto* sub = tool.add_subcommand(
      "slots",
      "Experiment E6 (spec ramnet.md §3): slot utilisation of a GSU memory after writing T tokens (keys from the\n"
      "generator, Top-K or full writes, retention bias gamma): occupied fraction (m > theta), effective slot\n"
      "count exp(H(m/sum m)) and its ratio to |A|, Gini of m over all |A| slots, read-hit mass sum_{TopK(r)} r\n"
      "1{m > theta} and mean pair overlap sum_a r^K w^K (= kappa^K/|A|) over (query, key) pairs; means over\n"
      "--trials. Tests the claim that larger dp^U lowers overlap mass and utilisation (B.4, Table 11).\n"
      "Default: torus rho = 1, dp = 4, U = 3,4,5,6, K = 32, beta = beta*, gamma = -inf, T = 64,256,1024.\n"
      "Writes /summary and /grid/{occupied_fraction,effective_ratio,gini,read_hit_mass,pair_overlap} over\n"
      "(generator_id, dp, U, topk, beta_factor, gamma_id, T).\n"
      "Example: ramnet slots --U 3,5 --T 256 --out e6.h5");
  cli::add_common(sub, st->common, "slots.h5");
  cli::add_sweep(sub, st->sweep);
  st->axes.Us = {3, 4, 5, 6};
  app::add_model_axes(sub, st->axes, "K (comma list; 0 = full writes and reads, dense memory)", "1");
  app::add_generators_option(sub, st->generators);
  app::add_gammas_option(sub, st->gammas);
  sub->add_option("--T", st->Ts, "Tokens written (comma list)")->delimiter(',')->capture_default_str();
  sub->add_option("--queries", st->n, "Queries per trial (read-hit mass, pair overlap)")->capture_default_str();
  sub->add_option("--trials", st->trials, "Independent trials")->capture_default_str();
  sub->add_option("--theta", st->theta, "Occupancy threshold on the slot mass m")->capture_default_str();
  sub->callback([sub, st]() {
    app::check_given_values(sub, st->axes);
    run(sub, *st);
  });
});

}  // namespace
