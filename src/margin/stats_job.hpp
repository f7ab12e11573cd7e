// One margin-sweep job (hebbian spec §4.1): draw the fact set and feature map from one seed,
// measure the kernel-memory margin (clean, or at noisy queries), stream the §3.3 statistics and
// evaluate every §3.4 bound. Produces one /summary row and the per-key arrays of /runs/<job>.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "io/table.hpp"
#include "margin/stats.hpp"

namespace memcap::margin {

struct MarginJobSpec {
  std::string method = "hebbian";   // "hebbian" (sketched K2, width m) | "hebbian:exact-k2"
  std::int64_t dim = 64, facts = 256, width = 512;
  double beta = 0;                  // spike strength (§1.3)
  std::string spike_target = "none";  // none | keys | values | both
  double noise = 0;                 // query noise ε (§3.2); 0 = clean keys
  std::uint64_t seed = 0;           // fact set and feature map share it (§4)
  std::uint64_t noise_seed = 123;
  StatsOptions stats;
};

struct MarginJobResult {
  io::Row row;                    // width, facts, dim, beta, noise, params, min_margin, accuracy, stats, bounds
  Eigen::VectorXd per_key;        // γ_i at the (possibly noisy) queries
  Eigen::VectorXi worst;          // worst competitor per key
  Eigen::VectorXd per_key_clean;  // γ_i at the clean keys (noise > 0 only)
  GeometryStats stats;
};

// Names of the numeric summary columns a job writes besides the grid axes (for /grid arrays).
std::vector<std::string> margin_job_value_columns();

MarginJobResult run_margin_job(const MarginJobSpec& spec);

}  // namespace memcap::margin
