// Preset lookup and application (see preset.hpp).
#include "cli/preset.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.hpp"

namespace memcap::cli {
namespace fs = std::filesystem;

std::string find_preset(const std::string& name) {
  if (name.find('/') != std::string::npos || (name.size() > 5 && name.substr(name.size() - 5) == ".toml")) {
    if (!fs::exists(name)) throw IoError(fmt::format("--preset file '{}' does not exist", name));
    return name;
  }
  std::vector<fs::path> dirs;
  if (const char* e = std::getenv("MEMCAP_PRESETS")) dirs.emplace_back(e);
  std::error_code ec;
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
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    throw IoError(fmt::format("cannot read preset '{}': {}", path, e.what()));
  }
  for (auto& it : items) {
    if (it.name == "++" || it.name == "--" || it.name == "preset") continue;
    if (!it.parents.empty() && !(it.parents.size() == 1 && it.parents[0] == sub->get_name())) continue;
    CLI::Option* opt = nullptr;
    try {
      opt = sub->get_option("--" + it.name);
    } catch (const CLI::Error&) {
      throw UserError(fmt::format("preset '{}': unknown option '{}'", path, it.name));
    }
    if (opt->count() > 0) continue;
    std::vector<std::string> vals;
    for (auto& v : it.inputs)
      if (!v.empty()) vals.push_back(v);
    if (vals.empty()) continue;
    try {
      opt->add_result(vals);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw UserError(fmt::format("preset '{}': bad value for '{}': {}", path, it.name, e.what()));
    }
  }
}

}  // namespace memcap::cli
