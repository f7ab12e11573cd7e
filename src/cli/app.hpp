// Shared CLI plumbing for hebb/kata/ramnet: subcommand registration, the common flags every
// working subcommand takes, and one main() that maps exceptions to exit codes.
//
// A subcommand file registers itself:
//   static memcap::cli::Register reg("hebb", 20, [](CLI::App& tool) { ... tool.add_subcommand(...) });
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "io/output_file.hpp"
#include "sweep/sweep.hpp"

namespace memcap::cli {

struct Register {
  // order: position of the subcommand in --help.
  Register(const char* tool, int order, std::function<void(CLI::App&)> setup);
};

// Build the tool's CLI from its registered subcommands and run it. Catches every exception:
// UserError -> its code with "tool sub: error: message"; CLI11 parse errors -> 2;
// std::filesystem errors -> 3; out of memory -> 4; others -> 1.
int run_tool(const char* tool, const char* description, int argc, char** argv);

// The flags every subcommand that runs work takes.
struct CommonOptions {
  std::uint64_t seed = 0;
  std::string out;
  std::string device = "auto";
  int threads = 0;
  std::string print_config;   // path, or "-" for stdout
  std::string config;         // consumed before parsing (see run_tool); kept for --help
  bool force = false;         // replace an existing --out (io::set_out_policy)
};

// Validator for 64-bit unsigned options (seeds): digits only, at most 2^64-1 (CLI11 alone takes
// "-1" as 2^64-1 and clamps larger numbers).
extern const CLI::Validator Uint64;

// Validator: a finite number in [lo, hi] (CLI11's Range lets NaN through).
CLI::Validator FiniteRange(double lo, double hi);

// Validator: a number >= 0 (short message; CLI::NonNegativeNumber prints DBL_MAX in full).
extern const CLI::Validator NonNegative;

// -1 with --quiet (errors only), 1 with --verbose, else 0.
int verbosity();

// Adds --quiet/-q --verbose/-v --seed --out --force --device --threads --config --print-config.
void add_common(CLI::App* sub, CommonOptions& o, const std::string& default_out = "");
// Adds --dry-run --shard --resume --progress.
void add_sweep(CLI::App* sub, sweep::Options& o);

// Call first in a callback: handles --print-config (writes the config and returns true: the
// callback should return), sets the --out/--force policy (io::set_out_policy), applies --threads,
// resolves the device, and returns the RunContext (config = every option of `sub` as JSON).
struct Prepared {
  bool done = false;          // --print-config handled: nothing else to do
  io::RunContext ctx;
};
Prepared prepare(CLI::App* sub, const CommonOptions& o);

// argv as received by run_tool (for provenance).
int saved_argc();
char** saved_argv();

// Adds the shared 'merge' subcommand (join shard files of one sweep) to a tool.
void add_merge_command(CLI::App& tool);

// Options of `sub` as a JSON object (name -> value(s) as strings/numbers), for /config.
nlohmann::json options_json(const CLI::App* sub);

}  // namespace memcap::cli
