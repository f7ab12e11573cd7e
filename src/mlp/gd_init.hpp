// Parameter arena of the GD-trained gated MLP (spec hebbian.md §2.6): U [m,d], G [m,d], D [d,m]
// and, with biases, b_u [m], b_g [m], b_d [d], packed in that order. PyTorch nn.Linear default
// init drawn from Philox stream rng::kGdInit at each element's arena position, so the CPU and GPU
// trainers (which upload this same host vector) start from identical parameters.
#pragma once
#include <cstdint>
#include <vector>

#include "mlp/gated_mlp.hpp"
#include "nn/arena.hpp"

namespace memcap::mlp {

struct GdConfig;

struct GdLayout {
  std::int64_t m = 0, d = 0;
  bool bias = false;
  // Offsets into the parameter arena; the bias offsets are -1 without biases.
  std::int64_t U = 0, G = 0, D = 0, b_u = -1, b_g = -1, b_d = -1;
  std::int64_t total = 0;  // arena length = gd_param_count(m, d, bias)

  static GdLayout make(std::int64_t m, std::int64_t d, bool bias);
  // The same layout as named views "U", "G", "D", "b_u", "b_g", "b_d" (for nn::ParamArena).
  nn::ArenaLayout arena() const;
};

// Init of the whole arena: every weight and bias ~ U(−1/√fan_in, +1/√fan_in), fan_in = d for U, G,
// b_u, b_g and m for D, b_d; element at arena position i uses rng::uniform(seed, kGdInit, i).
std::vector<double> gd_init_params(std::int64_t m, std::int64_t d, bool bias, std::uint64_t seed);

// The trained arena as a GatedMLP (A = U, G = G, B = D, biases when present), gate and param_count
// set from cfg, method = canonical_gd_spec(cfg).
GatedMLP gd_to_mlp(const std::vector<double>& params, const GdLayout& layout, const GdConfig& cfg);

// Checks of a GdConfig shared by the CPU and GPU trainers (UserError naming the bad field).
void validate_gd_config(const GdConfig& c);

}  // namespace memcap::mlp
