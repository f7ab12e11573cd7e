// The one TOML reader of the CLI (toml++): --config FILE and --preset NAME both go through it.
// A file holds `name = value` lines for one subcommand's options (top level, or a [subcommand]
// table); errors name the file, the line and the key ("grid.toml:3: unknown key 'widthz' ...").
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace memcap::cli {

// One `key = value` of the file, values rendered as the strings a command line would carry.
struct ConfigEntry {
  std::string key;
  std::vector<std::string> values;
  bool is_bool = false;        // a TOML boolean (true/false): the form flags take
  bool is_array = false;
  int line = 0;                // 1-based line of the key in the file (0 when unknown)
};

// Reads PATH (IoError, exit 3, when it is missing, a folder or unreadable; UserError, exit 2, when
// it is not valid TOML) and returns the top-level keys plus those of the [section] table. Tables
// named in `skip_sections` (other subcommands of the same tool) are skipped; any other table, a
// nested table, an array of tables, a date or a nested array is a UserError naming the file and line.
std::vector<ConfigEntry> read_toml_config(const std::string& path, const std::string& section,
                                          const std::vector<std::string>& skip_sections = {});

// The option of `sub` that entry `e` of file `path` sets, after checking that it exists, can be set
// from a file, and that the value has the right shape (a boolean for a flag, one value for a
// single-valued option). UserError "PATH:LINE: ..." otherwise.
CLI::Option* config_option(CLI::App* sub, const ConfigEntry& e, const std::string& path);

// "PATH:LINE: key 'K'" for messages.
std::string config_where(const std::string& path, const ConfigEntry& e);

// The names of `sub`'s sibling subcommands (tables a shared file may hold for them).
std::vector<std::string> sibling_names(const CLI::App* sub);

}  // namespace memcap::cli
