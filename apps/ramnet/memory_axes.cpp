// Shared sweep axes of the memory/attention commands. See memory_axes.hpp.
#include "memory_axes.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <utility>

#include "core/error.hpp"
#include "sweep/sweep.hpp"

namespace memcap::ramnet::app {

std::vector<double> default_beta_factor_grid() {
  std::vector<double> f;
  for (int k = -3; k <= 5; ++k) f.push_back(std::pow(10.0, k / 10.0));
  return f;
}

void add_model_axes(CLI::App* sub, ModelAxes& a, const std::string& topk_help, const std::string& beta_factor_default) {
  sub->add_option("--dp", a.dps, "Codes per factor, 2..4096 (comma list)")->delimiter(',')->capture_default_str();
  sub->add_option("--U", a.Us, "Number of factors (comma list); queries/keys live in R^{2U}, |A| = dp^U")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--beta", a.betas, "beta_r = beta_w (comma list: one job each)")->delimiter(',');
  sub->add_option("--beta-factor", a.beta_factors,
                  "beta = f beta*, beta* = sqrt(2/tau) (comma list, instead of --beta; default: " + beta_factor_default + ")")
      ->delimiter(',');
  sub->add_option("--beta-r", a.beta_r, "Read concentration (overrides --beta / --beta-factor for reads)");
  sub->add_option("--beta-w", a.beta_w, "Write concentration (overrides --beta / --beta-factor for writes)");
  sub->add_option("--tau", a.tau, "Teacher softmax temperature (logits q.k/tau; default sqrt(2U), so beta* = sqrt(2/tau))");
  if (!topk_help.empty()) sub->add_option("--topk", a.topks, topk_help)->delimiter(',')->capture_default_str();
}

void check_given_values(const CLI::App* sub, const ModelAxes& a) {
  for (auto [name, v] : {std::pair<const char*, double>{"--beta-r", a.beta_r}, {"--beta-w", a.beta_w}, {"--tau", a.tau}})
    require(sub->count(name) == 0 || (std::isfinite(v) && v > 0), "{} {} must be a finite number > 0", name, v);
  for (double b : a.betas) require(std::isfinite(b) && b > 0, "--beta {} must be a finite number > 0", b);
  for (double f : a.beta_factors) require(std::isfinite(f) && f > 0, "--beta-factor {} must be a finite number > 0", f);
}

ModelOptions point_options(const ModelAxes& a, const ModelOptions& gate, int dp, int U, std::size_t bi, std::int64_t topk) {
  ModelOptions o = gate;
  o.dp = dp;
  o.U = U;
  o.beta_r = a.beta_r;
  o.beta_w = a.beta_w;
  o.beta = a.betas.empty() ? 0 : a.betas[bi];
  o.beta_factor = a.beta_factors.empty() ? 0 : a.beta_factors[bi];
  o.tau = a.tau;
  o.topk = topk;
  return o;
}

std::vector<ModelPoint> expand_model_axes(const ModelAxes& a, const ModelOptions& gate, bool use_topk) {
  require(!a.dps.empty() && !a.Us.empty(), "--dp and --U need at least one value");
  require(!use_topk || !a.topks.empty(), "--topk needs at least one value");
  sweep::require_distinct(a.dps, "--dp");
  sweep::require_distinct(a.Us, "--U");
  sweep::require_distinct(a.betas, "--beta");
  sweep::require_distinct(a.beta_factors, "--beta-factor");
  if (use_topk) sweep::require_distinct(a.topks, "--topk");
  require(a.betas.empty() || a.beta_factors.empty(), "give the beta axis as --beta or as --beta-factor, not both");
  const std::size_t nb = std::max<std::size_t>(1, std::max(a.betas.size(), a.beta_factors.size()));
  const std::size_t nk = use_topk ? a.topks.size() : 1;
  sweep::job_count({{"dp values", static_cast<std::int64_t>(a.dps.size())},
                    {"U values", static_cast<std::int64_t>(a.Us.size())},
                    {"beta values", static_cast<std::int64_t>(nb)},
                    {"K values", static_cast<std::int64_t>(nk)}});
  std::vector<ModelPoint> out;
  for (int dp : a.dps)
    for (int U : a.Us)
      for (std::size_t bi = 0; bi < nb; ++bi)
        for (std::size_t ki = 0; ki < nk; ++ki) {
          ModelPoint pt;
          ModelOptions& o = pt.o;
          o = point_options(a, gate, dp, U, bi, use_topk ? a.topks[ki] : 0);
          resolve(o, kModel | kTopK);
          // sqrt(β_r) sqrt(β_w): the product of two large β overflows (β ≥ 1e155)
          pt.beta_factor = std::sqrt(o.params.beta_r) * std::sqrt(o.params.beta_w) / beta_star(o.tau_resolved);
          pt.beta_id = static_cast<std::int64_t>(bi);
          pt.key = fmt::format("dp={}/U={}", dp, U);
          if (use_topk) pt.key += fmt::format("/K={}", o.topk);
          pt.key += fmt::format("/f={:.6g}", pt.beta_factor);
          if (o.params.beta_r != o.params.beta_w)
            pt.key += fmt::format("/beta_r={:.6g}/beta_w={:.6g}", o.params.beta_r, o.params.beta_w);
          out.push_back(std::move(pt));
        }
  return out;
}

std::vector<std::string> join_spec_pieces(const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) {
    if (p.empty()) continue;
    if (!out.empty() && p.find('=') != std::string::npos && p.find(':') == std::string::npos)
      out.back() += "," + p;
    else
      out.push_back(p);
  }
  return out;
}

double parse_gamma(const std::string& text, const std::string& flag) {
  if (text == "-inf" || text == "-infinity") return -INFINITY;
  char* end = nullptr;
  const double g = std::strtod(text.c_str(), &end);
  require(!text.empty() && end && *end == '\0' && std::isfinite(g), "{} '{}' must be a finite number or -inf", flag,
          text);
  return g;
}

std::vector<Generator> parse_generators(const std::vector<std::string>& specs, std::vector<std::string>& shown) {
  std::vector<Generator> out;
  for (const auto& g : specs) {
    out.push_back(Generator::parse(g));
    shown.push_back(out.back().spec());
  }
  return out;
}

std::vector<double> parse_gammas(const std::vector<std::string>& texts) {
  std::vector<double> out;
  for (const auto& g : texts) out.push_back(parse_gamma(g, "--gamma"));
  sweep::require_distinct(out, "--gamma");  // as numbers: "0", "0.0" and "-0" are one value
  return out;
}

void add_generators_option(CLI::App* sub, std::vector<std::string>& generators, const std::string& help) {
  sub->add_option("--generators", generators, help)->delimiter(',')->capture_default_str();
}

void add_gammas_option(CLI::App* sub, std::vector<std::string>& gammas) {
  sub->add_option("--gamma", gammas, "Retention bias gamma (comma list; numbers or -inf)")
      ->delimiter(',')
      ->capture_default_str();
}

void add_job(sweep::Plan& plan, std::uint64_t seed, std::string key, nlohmann::json params) {
  sweep::Job j;
  j.index = static_cast<std::int64_t>(plan.jobs.size());
  j.seed = seed;
  j.key = std::move(key);
  j.params = std::move(params);
  plan.jobs.push_back(std::move(j));
}

io::Row& set_generator_columns(io::Row& row, const sweep::Job& j) {
  return row.set("generator", j.params["generator"].get<std::string>())
      .set("generator_id", j.params["generator_id"].get<std::int64_t>());
}

std::string column_suffix(const std::string& student) {
  std::string s = student;
  for (auto& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

void set_student_columns(io::Row& row, const AttnResult& r, bool planted) {
  for (const auto& s : r.students) {
    const std::string x = column_suffix(s.name);
    row.set("js_" + x, s.js)
        .set("js_bits_" + x, s.js_bits)
        .set("kl_" + x, s.kl)
        .set("nmse_" + x, s.nmse)
        .set("missing_" + x, s.missing_mass)
        .set("dead_" + x, s.dead_rate);
    if (planted) row.set("planted_mass_" + x, s.planted_mass).set("planted_hit_" + x, s.planted_hit);
  }
  if (planted) row.set("planted_mass_teacher", r.teacher_planted_mass).set("planted_hit_teacher", r.teacher_planted_hit);
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : std::string("-"); }
std::string factor_text(double f) { return std::abs(f) < 1e6 ? fmt::format("{:.3f}", f) : fmt::format("{:.3e}", f); }

}  // namespace memcap::ramnet::app
