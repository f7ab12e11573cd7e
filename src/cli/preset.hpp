// Named presets: experiments/presets/NAME.toml files whose `name = value` lines fill the options of
// one subcommand that the command line (or --config) did not set. Shared by sweep commands.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace memcap::cli {

// Path of preset NAME: NAME itself when it contains '/' or ends in .toml (IoError if missing);
// else NAME.toml in $MEMCAP_PRESETS, next to the executable's source/install tree, $MEMCAP_SRC,
// or ./experiments/presets (UserError listing the folders tried when none has it).
std::string find_preset(const std::string& name);

// Options of `sub` not set on the command line or by --config take the preset's values. Keys of
// other subcommands' sections are ignored; an unknown key is a UserError naming the file.
void apply_preset(CLI::App* sub, const std::string& name);

}  // namespace memcap::cli
