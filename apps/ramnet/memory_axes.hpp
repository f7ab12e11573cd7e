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
// dp × U × β × K, checked (distinct values, job counts, K ≤ dp^U); gate/readout flags are copied from `gate`.
std::vector<ModelPoint> expand_model_axes(const ModelAxes& a, const ModelOptions& gate, bool use_topk);

// --generators style lists: CLI11 splits "planted:sigma_q=0.1,sigma=1" at the comma; a piece with '=' but
// no ':' continues the previous spec.
std::vector<std::string> join_spec_pieces(const std::vector<std::string>& pieces);

// "-inf" or a finite number (UserError naming the flag otherwise).
double parse_gamma(const std::string& text, const std::string& flag);

// Student name as a column suffix: "gsu-standard" -> "gsu_standard".
std::string column_suffix(const std::string& student);
// The per-student /summary columns of an attention comparison: js_S, js_bits_S, kl_S, nmse_S, missing_S,
// dead_S (and planted_mass_S, planted_hit_S for the planted generator), S = column_suffix(name).
void set_student_columns(io::Row& row, const AttnResult& r, bool planted);

// Number formatting for tables: 4 significant digits, "-" for NaN.
std::string num(double v);

}  // namespace memcap::ramnet::app
