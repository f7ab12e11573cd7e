// Slot utilisation of a GSU memory (spec ramnet.md §3 E6): after writing T tokens — occupied fraction
// (m > θ), effective slot count exp(H(m/Σm)) and its ratio to |A|, Gini of m over all |A| slots, read-hit
// mass Σ_{a∈TopK(r)} r(a) 1{m(a) > θ} and mean pair overlap Σ_a r^K(a) w^K(a) = κ_A^K/|A| over (query, key)
// pairs. Masses do not depend on values or ε (m ← g m + w), so only masses are simulated.
#pragma once
#include <cstdint>
#include <vector>

#include "ramnet/address.hpp"
#include "ramnet/attention.hpp"

namespace memcap::ramnet {

struct SlotConfig {
  Params params;
  std::int64_t topk = 32;     // 0 = full distributions (dense: require_dense)
  double gamma = -INFINITY;   // retention bias
  Generator gen;              // keys (written) and queries (read)
  std::int64_t T = 256;       // tokens written per trial
  std::int64_t n = 64;        // queries per trial
  std::int64_t trials = 5;
  double theta = 1e-3;        // occupancy threshold on m
  std::uint64_t seed = 0;
};
void validate(const SlotConfig& c);

struct SlotStats {  // means over trials
  double occupied_fraction = 0, effective_slots = 0, effective_ratio = 0, gini = 0;
  double read_hit_mass = 0, pair_overlap = 0, stored_slots = 0, total_mass = 0;
};
SlotStats slot_utilisation(const SlotConfig& c);

// Gini coefficient of n values of which `zeros` are 0 and the rest are `positive` (any order):
// Σ_i Σ_j |x_i − x_j| / (2 n Σ x); 0 when all are equal (or all 0).
double gini(std::vector<double> positive, std::int64_t zeros);

}  // namespace memcap::ramnet
