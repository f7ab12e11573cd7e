// Sweep axes shared by the memory/attention commands (attn, topk, slots, gsu): --dp, --U, --beta,
// --beta-factor and --topk as comma lists (one job per combination, like `ramnet recall`), --beta-r/--beta-w
// and --tau single, expanded into resolved model options (options.hpp) with a job key each.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "io/table.hpp"
#include "options.hpp"
#include "ramnet/attention.hpp"
#include "sweep/sweep.hpp"

namespace memcap::ramnet::app {

struct ModelAxes {
  std::vector<int> dps = {4}, Us = {5};
  std::vector<double> betas, beta_factors;  // at most one of them; neither: beta*
  double beta_r = 0, beta_w = 0, tau = 0;
  std::vector<std::int64_t> topks = {32};
};

// β = f·β* on a log grid, f = 10^{k/10} for k = −3..5 (0.501 … 3.16; includes 1.259 ≈ 1.26 and 1.585 ≈ 1.58).
std::vector<double> default_beta_factor_grid();

// Adds --dp --U --beta --beta-factor --beta-r --beta-w --tau (and --topk when topk_help is not empty).
void add_model_axes(CLI::App* sub, ModelAxes& a, const std::string& topk_help, const std::string& beta_factor_default);

// 0 means "not given" for the single-valued --beta-r, --beta-w and --tau; an explicit 0 (or any value <= 0 in
// the --beta / --beta-factor lists) is refused here, naming the flag.
void check_given_values(const CLI::App* sub, const ModelAxes& a);

struct ModelPoint {
  ModelOptions o;             // resolved (params, tau_resolved, topk)
  double beta_factor = 1;     // sqrt(β_r β_w)/β*
  std::int64_t beta_id = 0;   // position on the β axis
  std::string key;            // "dp=4/U=5/K=32/f=1.259"
};
// The unresolved options at one point of the axes: gate's other flags, dp, U, the bi-th --beta or --beta-factor
// value (0 when the axis is empty: β*), --beta-r/--beta-w/--tau as given, Top-K topk.
ModelOptions point_options(const ModelAxes& a, const ModelOptions& gate, int dp, int U, std::size_t bi, std::int64_t topk);
// dp × U × β × K, checked (distinct values, job counts, K ≤ dp^U); gate/readout flags are copied from `gate`.
std::vector<ModelPoint> expand_model_axes(const ModelAxes& a, const ModelOptions& gate, bool use_topk);

// --generators style lists: CLI11 splits "planted:sigma_q=0.1,sigma=1" at the comma; a piece with '=' but
// no ':' continues the previous spec.
std::vector<std::string> join_spec_pieces(const std::vector<std::string>& pieces);

// Generators from joined specs (join_spec_pieces); shown gets each one's canonical spec (job keys, /summary).
std::vector<Generator> parse_generators(const std::vector<std::string>& specs, std::vector<std::string>& shown);

// "-inf" or a finite number (UserError naming the flag otherwise).
double parse_gamma(const std::string& text, const std::string& flag);
// A --gamma list, each parsed by parse_gamma; the values must be distinct as numbers (-0 == 0, 0.0 == 0).
std::vector<double> parse_gammas(const std::vector<std::string>& texts);

// --generators (comma list, spec pieces) and --gamma (comma list of numbers or -inf) of the memory commands.
void add_generators_option(CLI::App* sub, std::vector<std::string>& generators,
                           const std::string& help = "Key/query generators (comma list; see ramnet attn)");
void add_gammas_option(CLI::App* sub, std::vector<std::string>& gammas);

// Appends a job at the next plan index, with the run's seed.
void add_job(sweep::Plan& plan, std::uint64_t seed, std::string key, nlohmann::json params);

// The first /summary columns of a memory job: generator and generator_id from the job's params.
io::Row& set_generator_columns(io::Row& row, const sweep::Job& j);

// A table header printed with the first finished job, so nothing reaches stdout when the plan is refused:
// the returned callable runs print the first time only.
template <class F>
auto print_once(F print) {
  return [print, done = false]() mutable {
    if (done) return;
    done = true;
    print();
  };
}

// Student name as a column suffix: "gsu-standard" -> "gsu_standard".
std::string column_suffix(const std::string& student);
// The per-student /summary columns of an attention comparison: js_S, js_bits_S, kl_S, nmse_S, missing_S,
// dead_S (and planted_mass_S, planted_hit_S for the planted generator), S = column_suffix(name).
void set_student_columns(io::Row& row, const AttnResult& r, bool planted);

// Number formatting for tables: 4 significant digits, "-" for NaN.
std::string num(double v);
// A β factor f = β/β* for the tables: 3 decimals, in exponent form from 1e6 on (a huge --beta stays one column).
std::string factor_text(double f);

}  // namespace memcap::ramnet::app
