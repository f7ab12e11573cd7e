// `hebb ssfr capacity | noise | usability` (apps/hebb/ssfr_sweeps.cpp), added under `hebb ssfr`.
#pragma once
#include <CLI/CLI.hpp>

namespace memcap::hebb_app {
void add_ssfr_sweeps(CLI::App* ssfr);
}
