// HDF5 layout of a built model: /facts (fact set, see factset.hpp) and /mlp with datasets A, G, B
// (+ bias_up, bias_gate, bias_out when present) and attributes method, params, gate, solver,
// width, dim, seed. Written by `hebb build`, read by `hebb margin --in`.
#pragma once
#include <cstdint>

#include "io/h5.hpp"
#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"

namespace memcap::mlp {

void write_mlp(h5::Group& g, const GatedMLP& mlp, std::uint64_t seed);
GatedMLP read_mlp(const h5::Group& g);

}  // namespace memcap::mlp
