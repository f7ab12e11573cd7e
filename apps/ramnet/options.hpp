// The model flags every ramnet subcommand shares (spec ramnet.md §8): --dp --U --beta-r --beta-w
// (or --beta for both, or --beta-factor f for f·β*), --tau, --topk, --readout, --gamma, --eps.
// A subcommand adds the ones that apply (a mask), then resolve() turns them into checked values.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/app.hpp"
#include "ramnet/address.hpp"

namespace memcap::ramnet::app {

enum Flag : unsigned {
  kModel = 1u << 0,    // --dp --U --beta-r --beta-w --beta --beta-factor --tau
  kTopK = 1u << 1,     // --topk
  kReadout = 1u << 2,  // --readout
  kGate = 1u << 3,     // --gamma --eps
  kAll = kModel | kTopK | kReadout | kGate,
};

// Largest --dp of every ramnet command (as `ramnet bounds --dps` and `ramnet adapter --dp`): tables and codebooks
// hold dp numbers per block, so a larger dp only buys absurd memory and O(dp) work per pair.
inline constexpr int kMaxDp = 4096;

struct ModelOptions {
  int dp = 4;
  int U = 5;
  double beta_r = 0, beta_w = 0;  // 0 = not given
  double beta = 0;                // both, 0 = not given
  double beta_factor = 0;         // β = f·β*, 0 = not given
  double tau = 0;                 // 0 = sqrt(2U) (migration convention, §2.6)
  std::int64_t topk = 0;          // 0 = full distributions (no truncation)
  std::string readout = "mass";   // standard | mass
  std::string gamma = "-inf";     // retention bias γ: a number or -inf (cumulative averaging, §2.9)
  double eps = 0.0;               // GSU stabiliser ε (§1.6); 0 = exact equivalences of §2.9

  // Filled by resolve():
  Params params;                  // dp, U, β_r, β_w
  double tau_resolved = 0;
  double gamma_value = 0;         // -INFINITY for cumulative
};

// Adds the flags of `mask` to `sub` (default U may differ per subcommand).
void add_model_options(CLI::App* sub, ModelOptions& o, unsigned mask, int default_U = 5);
// Checks every value (UserError, exit 2, naming the flag) and fills params / tau_resolved /
// gamma_value. β precedence: --beta-r/--beta-w > --beta or --beta-factor·β* (not both) > β* = sqrt(2/τ).
// --dp must be in [2, kMaxDp].
// --topk larger than dp^U is an error. Applies only the checks of `mask`.
void resolve(ModelOptions& o, unsigned mask);

// Commands with only a CPU path: `--device cuda` is a usage error (exit 2) on every host, checked before
// the device is resolved (so a GPU-less CI host and a GPU host answer the same).
void require_cpu_only(const cli::CommonOptions& common, const char* command);

// β* = sqrt(2/τ) (§2.6).
double beta_star(double tau);

}  // namespace memcap::ramnet::app
