// Command-line flags shared by the subcommands that build a Hebbian MLP (hebb build, hebb margin,
// hebb bench): fact-set flags, --method and --width, resolved into (FactSetSpec, MethodSpec, m).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "mlp/factset.hpp"
#include "mlp/method.hpp"

namespace memcap::mlp {

struct BuildFlags {
  FactSetSpec facts;
  std::string method = "hebbian:whitened";
  std::int64_t width = 0;
  CLI::Option* width_opt = nullptr;
  CLI::Option* dim_opt = nullptr;
  CLI::Option* facts_opt = nullptr;
};

struct ResolvedBuild {
  FactSetSpec facts;
  MethodSpec method;
  std::int64_t width = 0;  // resolved (never 0)
};

void add_build_flags(CLI::App* sub, BuildFlags& f);
// Parses the method, checks --width, applies file-mode defaults (d and F from the key file when
// --dim / --facts are not given) and the seed. Throws UserError on bad values.
ResolvedBuild resolve_build_flags(const BuildFlags& f, std::uint64_t seed);
// The width the model will have once the fact set's d is known (resolves the method default).
std::int64_t resolve_width(const ResolvedBuild& r, std::int64_t d);
// /facts of a built or trained model: the fact set plus the attributes that regenerate it
// (seed, map_kind, spike_beta, spike_target). Shared by `hebb build` and `hebb train`.
void write_model_facts(h5::Group& root, const FactSet& fs, const ResolvedBuild& r, std::uint64_t seed);

}  // namespace memcap::mlp
