// `ramnet merge`: join the shard files of one ramnet sweep (ramnet bounds --shard i/n) into one file.
#include "cli/app.hpp"

namespace {
memcap::cli::Register reg("ramnet", 99, [](CLI::App& tool) { memcap::cli::add_merge_command(tool); });
}  // namespace
