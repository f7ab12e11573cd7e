#include "options.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "ramnet/theory.hpp"

namespace memcap::ramnet::app {

void require_cpu_only(const cli::CommonOptions& common, const char* command) {
  require(common.device != "cuda", "{} runs on the CPU only; use --device cpu or auto", command);
}

double beta_star(double tau) { return ramnet::beta_star(tau); }

namespace {
// β and τ flags: a given value must be a finite number > 0 (0 is not "default": leave the flag out).
const CLI::Validator kPositive(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || !end || *end || !std::isfinite(x) || !(x > 0))
        return fmt::format("must be a finite number > 0 (got '{}')", v);
      return {};
    },
    "FLOAT > 0");
}  // namespace

void add_model_options(CLI::App* sub, ModelOptions& o, unsigned mask, int default_U) {
  o.U = default_U;
  if (mask & kModel) {
    sub->add_option("--dp", o.dp, "Codes per factor, 2..4096 (circular codebook c_j = (cos 2πj/dp, sin 2πj/dp))")
        ->capture_default_str();
    sub->add_option("--U", o.U, "Number of factors: queries/keys live in R^{2U}, the address space has dp^U slots")
        ->capture_default_str();
    sub->add_option("--beta-r", o.beta_r, "Read concentration β_r (default: --beta, else β* = sqrt(2/τ))")
        ->check(kPositive);
    sub->add_option("--beta-w", o.beta_w, "Write concentration β_w (default: --beta, else β* = sqrt(2/τ))")
        ->check(kPositive);
    sub->add_option("--beta", o.beta, "β_r = β_w = this")->check(kPositive);
    sub->add_option("--beta-factor", o.beta_factor,
                    "β_r = β_w = f·β* (e.g. 1.58 for the paper's shifted optimum; not with --beta)")
        ->check(kPositive);
    sub->add_option("--tau", o.tau, "Teacher softmax temperature τ (logits q·k/τ); default sqrt(2U), so β* = sqrt(2/τ)")
        ->check(kPositive);
  }
  if (mask & kTopK)
    sub->add_option("--topk", o.topk, "Keep the K largest read and write probabilities, not renormalised (0 = full)")
        ->capture_default_str();
  if (mask & kReadout)
    sub->add_option("--readout", o.readout, "GSU readout: standard (Σ r s) or mass (mass-aware, Σ r m s / Σ r m)")
        ->capture_default_str();
  if (mask & kGate) {
    sub->add_option("--gamma", o.gamma, "GSU retention bias γ: a number, or -inf for cumulative averaging")
        ->capture_default_str();
    sub->add_option("--eps", o.eps, "GSU stabiliser ε in s += w/(m+ε)(v−s)")->capture_default_str();
  }
}

void resolve(ModelOptions& o, unsigned mask) {
  if (mask & kModel) {
    require(o.dp >= 2, "--dp {} must be >= 2 (codes per factor)", o.dp);
    require(o.dp <= kMaxDp, "--dp {} is out of range: it must be in [2, {}] (codes per factor; factor tables and "
            "codebooks hold dp numbers per block)", o.dp, kMaxDp);
    require(o.U >= 1, "--U {} must be >= 1 (number of factors)", o.U);
    address_count(o.dp, o.U);
    if (o.tau == 0) o.tau_resolved = std::sqrt(2.0 * o.U);
    else {
      require(std::isfinite(o.tau) && o.tau > 0, "--tau {} must be a finite number > 0", o.tau);
      o.tau_resolved = o.tau;
    }
    require(o.beta == 0 || o.beta_factor == 0, "--beta-factor {:g} with --beta {:g}: give --beta or --beta-factor, "
            "not both", o.beta_factor, o.beta);
    for (auto [v, name] : {std::pair{o.beta_r, "--beta-r"}, {o.beta_w, "--beta-w"}, {o.beta, "--beta"},
                           {o.beta_factor, "--beta-factor"}})
      require(v == 0 || (std::isfinite(v) && v > 0), "{} {} must be a finite number > 0", name, v);
    double b = beta_star(o.tau_resolved);
    require(std::isfinite(b) || o.beta > 0 || (o.beta_r > 0 && o.beta_w > 0),
            "--tau {:g} makes beta* = sqrt(2/tau) overflow; give a larger --tau (or --beta)", o.tau_resolved);
    if (o.beta_factor > 0) b *= o.beta_factor;
    require((std::isfinite(b) && b > 0) || o.beta > 0 || (o.beta_r > 0 && o.beta_w > 0),
            "--beta-factor {:g} makes beta = f beta* = {:g} x {:g} leave the finite positive numbers; give a factor "
            "nearer 1", o.beta_factor, o.beta_factor, beta_star(o.tau_resolved));
    if (o.beta > 0) b = o.beta;
    o.params.dp = o.dp;
    o.params.U = o.U;
    o.params.beta_r = o.beta_r > 0 ? o.beta_r : b;
    o.params.beta_w = o.beta_w > 0 ? o.beta_w : b;
    validate(o.params);
  }
  if (mask & kTopK) {
    require(o.topk >= 0, "--topk {} must be >= 0 (0 = no truncation)", o.topk);
    if (mask & kModel) {
      const double slots = std::pow(static_cast<double>(o.dp), o.U);
      require(static_cast<double>(o.topk) <= slots, "--topk {} is larger than the address space dp^U = {}^{} = {:.0f}",
              o.topk, o.dp, o.U, slots);
    }
  }
  if (mask & kReadout)
    require(o.readout == "standard" || o.readout == "mass", "--readout must be standard or mass (got '{}')", o.readout);
  if (mask & kGate) {
    if (o.gamma == "-inf" || o.gamma == "-infinity") o.gamma_value = -INFINITY;
    else {
      char* end = nullptr;
      const double g = std::strtod(o.gamma.c_str(), &end);
      require(!o.gamma.empty() && end && *end == '\0' && std::isfinite(g),
              "--gamma '{}' must be a finite number or -inf", o.gamma);
      o.gamma_value = g;
    }
    require(std::isfinite(o.eps) && o.eps >= 0, "--eps {} must be a finite number >= 0", o.eps);
  }
}

}  // namespace memcap::ramnet::app
