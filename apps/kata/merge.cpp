// kata merge: join shard files of one sweep (shared implementation in src/cli/merge_command.cpp).
#include "cli/app.hpp"

namespace {
memcap::cli::Register reg("kata", 90, [](CLI::App& tool) { memcap::cli::add_merge_command(tool); });
}  // namespace
