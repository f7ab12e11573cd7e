// Preset lookup and application (see preset.hpp).
#include "cli/preset.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "cli/toml_config.hpp"
#include "core/error.hpp"

namespace memcap::cli {
namespace fs = std::filesystem;

std::string find_preset(const std::string& name) {
  if (name.empty()) throw UserError("--preset is empty; give a preset name (experiments/presets/NAME.toml) or a .toml path");
  if (name.find('/') != std::string::npos || (name.size() > 5 && name.substr(name.size() - 5) == ".toml")) {
    if (!fs::exists(name)) throw IoError(fmt::format("--preset file '{}' does not exist", name));
    if (fs::is_directory(name)) throw IoError(fmt::format("--preset file '{}' is a folder; give a .toml file", name));
    return name;
  }
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (const char* e = std::getenv("MEMCAP_PRESETS")) {  // set but not a folder: say so, not "no NAME.toml in ..."
    if (!fs::is_directory(e, ec))
      throw UserError(fmt::format("MEMCAP_PRESETS='{}' is not an existing folder (it should name the folder that "
                                  "holds NAME.toml presets, e.g. experiments/presets); fix or unset it",
                                  e));
    dirs.emplace_back(e);
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path().parent_path() / "experiments" / "presets");
    dirs.push_back(exe.parent_path().parent_path().parent_path() / "experiments" / "presets");
    dirs.push_back(exe.parent_path().parent_path() / "share" / "memcap" / "presets");
  }
  if (const char* e = std::getenv("MEMCAP_SRC")) dirs.push_back(fs::path(e) / "experiments" / "presets");
  dirs.push_back(fs::current_path() / "experiments" / "presets");
  std::string tried;
  for (const auto& d : dirs) {
    const fs::path p = d / (name + ".toml");
    if (fs::exists(p)) return p.string();
    tried += (tried.empty() ? "" : ", ") + d.string();
  }
  throw UserError(fmt::format("unknown --preset '{}': no {}.toml in {} (set MEMCAP_PRESETS=DIR, or pass a .toml path)",
                              name, name, tried));
}

void apply_preset(CLI::App* sub, const std::string& name) {
  const std::string path = find_preset(name);
  for (const ConfigEntry& e : read_toml_config(path, sub->get_name(), sibling_names(sub))) {
    if (e.key == "preset") throw UserError(fmt::format("{}: a preset cannot name another preset", config_where(path, e)));
    CLI::Option* opt = config_option(sub, e, path);
    if (opt->count() > 0) continue;  // the command line or --config set it
    try {
      if (opt->get_expected_max() == 0) {
        if (e.values[0] != "true") continue;
        opt->add_result(std::string("true"));
      } else {
        opt->add_result(e.values);
      }
      opt->run_callback();
    } catch (const CLI::Error& err) {
      throw UserError(fmt::format("{}: bad value: {}", config_where(path, e), err.what()));
    }
  }
}

}  // namespace memcap::cli
