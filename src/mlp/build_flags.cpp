// Shared build flags (see build_flags.hpp). The --help texts state defaults, units and meaning.
#include "mlp/build_flags.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "mlp/constructions.hpp"

namespace memcap::mlp {

void add_build_flags(CLI::App* sub, BuildFlags& f) {
  sub->add_option("--method,-M", f.method, fmt::format("Construction spec, stored verbatim: {}", method_help()))
      ->capture_default_str();
  f.width_opt = sub->add_option("--width,-m", f.width,
                                "Hidden units m (default: 4d; hebbian:exact-k2 always uses d(d+1)/2)");
  f.dim_opt = sub->add_option("--dim,-d", f.facts.dim,
                              "Embedding dimension d (default 64; with --keys FILE: taken from the file)");
  f.facts_opt = sub->add_option("--facts,-F", f.facts.facts,
                                "Number of facts F (default 256; with --keys FILE: every row, or F rows sampled "
                                "without replacement with --seed)");
  sub->add_option("--values", f.facts.values,
                  "Rows P of the generated value table (0 = P = F); facts map injectively into it")
      ->capture_default_str();
  sub->add_flag("--tied", f.facts.tied,
                "One table for keys and values (MLP-capacity setting; use with --map permutation)");
  sub->add_option("--map", f.facts.map, "Fact map f: identity or permutation (random, from --seed)")
      ->capture_default_str();
  sub->add_option("--spike-beta", f.facts.spike_beta,
                  "Rank-1 spike strength beta >= 0 of spec §1.3 (0 = isotropic); direction fixed by spike_seed 42")
      ->capture_default_str();
  sub->add_option("--spike-target", f.facts.spike_target, "Which tables get the spike: none, keys, values, both")
      ->capture_default_str();
  sub->add_option("--keys", f.facts.keys_file,
                  "Load keys from HDF5 FILE[:dataset] (default dataset 'keys', else 'x'); rows used raw (not "
                  "normalized), e.g. captured LLM MLP inputs");
  sub->add_option("--values-file", f.facts.values_file,
                  "Load values from HDF5 FILE[:dataset] (default 'values', else 'y'), rows paired with --keys");
}

ResolvedBuild resolve_build_flags(const BuildFlags& f, std::uint64_t seed) {
  ResolvedBuild r;
  r.method = parse_method(f.method);
  r.facts = f.facts;
  r.facts.seed = seed;
  if (!r.facts.keys_file.empty()) {  // left out: taken from the file (0); given: a count, so >= 1
    if (!f.dim_opt || f.dim_opt->count() == 0)
      r.facts.dim = 0;
    else
      require(r.facts.dim >= 1, "--dim must be >= 1 (got {}); leave it out to take d from the key file",
              r.facts.dim);
    if (!f.facts_opt || f.facts_opt->count() == 0)
      r.facts.facts = 0;
    else
      require(r.facts.facts >= 1, "--facts must be >= 1 (got {}); leave it out to use every row of the key file",
              r.facts.facts);
  }
  // Sizes far beyond any memory are usage errors (not an out-of-memory exit 4 after a long wait).
  require(r.facts.dim <= (1 << 20), "--dim {} is too large (at most 1048576)", r.facts.dim);
  require(r.facts.facts <= (std::int64_t{1} << 31), "--facts {} is too large (at most 2^31)", r.facts.facts);
  require(f.width <= (std::int64_t{1} << 31), "--width {} is too large (at most 2^31)", f.width);
  if (f.width_opt && f.width_opt->count() > 0) {
    require(f.width >= 1, "--width must be >= 1 hidden unit (got {})", f.width);
    r.width = f.width;
  } else {
    r.width = 0;
  }
  if (r.method.kind == MethodKind::exact_k2 && r.width > 0 && r.facts.dim > 0)
    require(r.width == r.facts.dim * (r.facts.dim + 1) / 2,
            "hebbian:exact-k2 has a fixed width d(d+1)/2 = {}; leave --width out (got {})",
            r.facts.dim * (r.facts.dim + 1) / 2, r.width);
  return r;
}

std::int64_t resolve_width(const ResolvedBuild& r, std::int64_t d) {
  return r.width > 0 ? r.width : default_width(r.method.kind, d);
}

void write_model_facts(h5::Group& root, const FactSet& fs, const ResolvedBuild& r, std::uint64_t seed) {
  auto g = root.child("facts");
  write_factset(g, fs);
  g.attr("seed", static_cast<std::int64_t>(seed));
  g.attr("map_kind", r.facts.map);
  g.attr("spike_beta", r.facts.spike_beta);
  g.attr("spike_target", r.facts.spike_target);
}

}  // namespace memcap::mlp
