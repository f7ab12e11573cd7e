// The 'merge' subcommand shared by every tool that has sweeps (hebb merge, kata merge).
#include <cstdio>

#include "cli/app.hpp"

namespace memcap::cli {

void add_merge_command(CLI::App& tool) {
  struct MergeOptions {
    std::vector<std::string> inputs;
    std::string out;
    bool allow_partial = false;
  };
  auto opt = std::make_shared<MergeOptions>();
  auto* sub = tool.add_subcommand("merge", "Join the shard files of one sweep into one HDF5 file");
  sub->description(
      "Join the per-shard files written by '--shard i/n' runs (e.g. a SLURM array) into one file.\n"
      "Refuses inputs made with different configurations, jobs present twice, and (unless\n"
      "--allow-partial) an incomplete set of shards. Rebuilds /grid and re-runs the sweep's fits.");
  sub->add_option("inputs", opt->inputs, "Shard files, e.g. res.shard0of4.h5 ... res.shard3of4.h5")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--out,-o", opt->out, "Merged result file")->required();
  sub->add_flag("--allow-partial", opt->allow_partial, "Merge even when some jobs of the sweep are missing");
  const std::string tool_name = tool.get_name();
  sub->callback([opt, tool_name] {
    auto ctx = io::make_context(tool_name, "merge", saved_argc(), saved_argv());
    sweep::merge(opt->inputs, opt->out, ctx, opt->allow_partial);
    std::printf("merged %zu files into %s\n", opt->inputs.size(), opt->out.c_str());
  });
}

}  // namespace memcap::cli
