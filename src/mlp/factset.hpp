// Fact sets of the Hebbian-MLP experiments (spec hebbian.md §1.1-1.4): key/value tables, the
// fact map f and the codes. Generated on the sphere (tied or untied, optional rank-1 spike) or
// loaded from HDF5 ("LLM mode": raw rows, identity map). Float64 throughout.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "io/h5.hpp"

namespace memcap::mlp {

// Largest spike strength β (§1.3): beyond it every spiked row is ±u to double precision, and from ~1e154 the
// row norms overflow (the rows became zeros: a degenerate table reported as a result).
inline constexpr double kMaxSpikeBeta = 1e15;

struct FactSetSpec {
  std::int64_t dim = 64;       // d; 0 with keys_file = take it from the file
  std::int64_t facts = 256;    // F; 0 with keys_file = every row of the file
  std::int64_t values = 0;     // P (rows of the value table); 0 => P = F
  bool tied = false;           // one table used as keys and values (P = F)
  std::string map = "identity";        // identity | permutation
  double spike_beta = 0;               // §1.3, 0 <= beta <= kMaxSpikeBeta
  std::string spike_target = "none";   // none | keys | values | both
  std::string keys_file, values_file;  // "FILE[:dataset]" (datasets default keys|x, values|y)
  std::uint64_t seed = 0;
};

struct FactSet {
  Eigen::MatrixXd keys;    // F x d
  Eigen::MatrixXd values;  // P x d
  Eigen::MatrixXd codes;   // P x d (default = values)
  Eigen::VectorXi map;     // F entries, rows of values
  bool tied = false;
  std::string source = "sphere";  // sphere | file (recorded in results)

  std::int64_t F() const { return keys.rows(); }
  std::int64_t P() const { return values.rows(); }
  std::int64_t d() const { return keys.cols(); }
  // C_f: row i = codes.row(map[i]) (F x d).
  Eigen::MatrixXd targets() const;
  // Throws UserError unless shapes agree, map is injective into [0,P) and all entries finite.
  void validate() const;
};

// Validates the spec, then generates (sphere tables) or loads (keys_file/values_file).
FactSet make_factset(const FactSetSpec& spec);

// Rows e <- (e + beta (e.u) u) / ||e + beta (e.u) u|| in place (§1.3); beta = 0 leaves rows as is.
void spike_transform(Eigen::MatrixXd& rows, const Eigen::VectorXd& u, double beta);
// The fixed unit spike direction u in R^d: N(0,I) from spike_seed = 42 (stream rng::kSpike), normalized.
Eigen::VectorXd spike_direction(std::int64_t d);
inline constexpr std::uint64_t kSpikeSeed = 42;

// Validate a table read from a file or built in memory: 2-D, finite, no zero row (UserError naming
// the row). `what` names it in messages ("keys file data/x.h5:keys").
void check_table(const Eigen::MatrixXd& t, const std::string& what);

// HDF5: datasets keys (F x d), values (P x d), map (F, int64), codes (only when != values);
// attributes F, P, d, tied, source.
void write_factset(h5::Group& g, const FactSet& fs);
FactSet read_factset(const h5::Group& g);

// Load one table from "FILE[:dataset]"; without ":dataset" try each name of `defaults` in turn.
// IoError: file missing or not HDF5. UserError: dataset missing, not 2-D, NaN/Inf, zero row.
Eigen::MatrixXd load_table(const std::string& file_spec, const std::vector<std::string>& defaults,
                           const std::string& role);

}  // namespace memcap::mlp
