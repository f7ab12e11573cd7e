// The 'merge' subcommand shared by every tool that has sweeps (hebb merge, kata merge). Inputs are
// checked first (readable HDF5, well-formed /config JSON, not the output itself), so a bad or
// corrupt shard is a file error (exit 3) that names it.
#include <sys/stat.h>

#include <cstdio>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/h5.hpp"

namespace memcap::cli {
namespace {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa{}, sb{};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_merge_input(const std::string& in, const std::string& out) {
  h5::require_readable_file(in, "merge input");
  if (!h5::is_hdf5(in)) throw IoError(fmt::format("merge input '{}' is not an HDF5 file", in));
  if (same_file(in, out))
    throw IoError(fmt::format("--out '{}' is also an input ('{}'); write the merged file elsewhere", out, in));
  const h5::File f = h5::File::open_read(in);
  if (!f.exists("config")) return;  // sweep::merge says what is missing
  const auto text = f.open_group("config").attr_string("json");
  if (!text) return;
  bool object = false;
  try {
    object = nlohmann::json::parse(*text).is_object();
  } catch (const nlohmann::json::exception&) {
  }
  if (!object)
    throw IoError(fmt::format("merge input '{}': /config attribute 'json' is not a JSON object (corrupt file?)", in));
}

}  // namespace

void add_merge_command(CLI::App& tool) {
  struct MergeOptions {
    std::vector<std::string> inputs;
    std::string out;
    bool allow_partial = false;
    bool force = false;
  };
  auto opt = std::make_shared<MergeOptions>();
  auto* sub = tool.add_subcommand("merge", "Join the shard files of one sweep into one HDF5 file");
  sub->description(
      "Join the per-shard files written by '--shard i/n' runs (e.g. a SLURM array) into one file.\n"
      "Refuses inputs made with different configurations, jobs present twice, and (unless\n"
      "--allow-partial) an incomplete set of shards. Rebuilds /grid and re-runs the sweep's fits.");
  sub->add_option("inputs", opt->inputs, "Shard files, e.g. res.shard0of4.h5 ... res.shard3of4.h5")
      ->required();  // checked in the callback: a missing or unreadable input is a file error (exit 3)
  sub->add_option("--out,-o", opt->out, "Merged result file")->required();
  sub->add_flag("--allow-partial", opt->allow_partial, "Merge even when some jobs of the sweep are missing");
  sub->add_flag("--force", opt->force, "Replace --out if it exists (never a device or one of the inputs)");
  const std::string tool_name = tool.get_name();
  sub->callback([opt, tool_name] {
    io::set_out_policy(opt->out, opt->force);
    for (const auto& in : opt->inputs) check_merge_input(in, opt->out);
    auto ctx = io::make_context(tool_name, "merge", saved_argc(), saved_argv());
    sweep::merge(opt->inputs, opt->out, ctx, opt->allow_partial);
    std::printf("merged %zu files into %s\n", opt->inputs.size(), opt->out.c_str());
  });
}

}  // namespace memcap::cli
