// Value fields on S¹×S¹ (spec ramnet.md §3 E4, paper Fig. 4): U = 2, N stored keys on the unit torus with
// scalar values, written into a cumulative GSU memory (γ = −inf, ε = 0); the predicted value f(q) is
// evaluated on a G×G grid of query angles (θ0, θ1), q = (cos θ0, sin θ0, cos θ1, sin θ1). Panels: the
// full-attention reference softmax(q·k/τ) and, per β = f·β* (rows) and column (dp, K, readout), the memory's
// readout. Each panel also gets the token weights α(q) it induces (probe values), hence its argmax region
// (which stored key dominates f(q)); the κ-attention field at the same (dp, β) is computed beside it.
//
// Quantified checks: field MSE against the reference, the fraction of the grid whose argmax region differs
// from the reference's, the dead fraction (no read-selected slot written), a magnitude-weighted histogram
// of gradient orientations in [0, π) and its oblique fraction (weight farther than π/8 from both axes),
// and max |f − f_κ| (0 up to rounding for mass-aware + full + cumulative, §2.9).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ramnet/gsu.hpp"

namespace memcap::ramnet {

struct FieldColumn {
  std::string name;     // e.g. "dp4-full"
  int dp = 4;
  std::int64_t topk = 0;  // 0 = full
  Readout readout = Readout::standard;
};
// "dp4-full,dp4-top4,dp8-full,dp4-mass": dp<d>-full | dp<d>-top<K> with an optional "-mass" or "-standard"
// suffix; "dp<d>-mass" = full with the mass-aware readout, d in [2, 64]. UserError otherwise (a d out of range
// is reported as such, not as a syntax error).
FieldColumn parse_field_column(const std::string& name);

struct FieldConfig {
  int N = 12;                      // stored keys
  int grid = 256;                  // G: grid side
  double tau = 2.0;                // reference temperature; β* = sqrt(2/τ) = 1
  std::vector<double> beta_factors = {0.5, 1.0, 2.0};
  std::vector<FieldColumn> columns;
  int orientation_bins = 18;
  std::uint64_t seed = 0;
};
void validate(const FieldConfig& c);

struct FieldPanel {
  double beta_factor = 1, beta = 1;
  FieldColumn column;
  std::vector<double> field, kappa_field;  // G×G, row-major: [i0 * G + i1] = f(θ0_i0, θ1_i1)
  std::vector<std::int64_t> region;        // argmax_s α_s(q), −1 when dead
  std::vector<double> orientation_hist;    // magnitude-weighted, normalised to sum 1
  double mse = 0, region_diff = 0, dead_fraction = 0, oblique_fraction = 0, kappa_max_diff = 0;
};

struct FieldResult {
  std::vector<double> theta;                          // G grid angles 2π i/G (both axes)
  std::vector<double> key_angles;                     // N×2
  std::vector<double> values;                         // N
  std::vector<double> reference;                      // G×G
  std::vector<std::int64_t> reference_region;         // G×G
  std::vector<double> reference_orientation_hist;
  double reference_oblique_fraction = 0;
  std::vector<FieldPanel> panels;                     // rows (β) outer, columns inner
};
FieldResult run_field(const FieldConfig& c);

// Gradient-orientation statistics of a periodic G×G field (central differences): histogram over [0, π)
// weighted by |∇f| (sums to 1; all 0 for a constant field) and the weight farther than π/8 from both axes.
void orientation_stats(const std::vector<double>& f, int G, int bins, std::vector<double>& hist, double& oblique);

}  // namespace memcap::ramnet
