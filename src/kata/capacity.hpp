// Training-free write-then-read capacity of a fixed feature map (spec §4.6, `kata capacity`):
// one trial stores K (key, value) bindings in the state S = sum psi(u_i) v_i^T, Z = sum psi(u_i),
// reads every key back, and measures pSNR_i = A_ii^2 / sum_{j!=i} A_ij^2, decode accuracy and
// coherence; the search finds K*_psnr and K*_acc(theta) by doubling then integer bisection.
// The K x K coefficient matrix is never held: rows are processed in tiles (memory O(tile * K)).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "kata/capacity_kernel.hpp"
#include "kata/capacity_theory.hpp"
#include "kata/value_model.hpp"

namespace memcap::kata {

enum class Readout { normalized, unnormalized };
// "auto" -> unnormalized for the signed linear map (its denominator can vanish), normalized
// otherwise; softmax is always normalized (UserError if "unnormalized" is asked for).
Readout resolve_readout(const std::string& readout, const CapacityKernel& map);
const char* to_string(Readout r);

// What one trial measures (per query i = 0..K-1).
struct TrialMetrics {
  Eigen::VectorXd psnr;           // A_ii^2 / sum_{j!=i} A_ij^2 (+inf when K = 1)
  std::int64_t correct = 0;       // queries whose decoded value is their own
  double coherence = 0;           // max_{i!=j} |A_ij| / sqrt(A_ii A_jj) over the keys
  double max_deviation = 0;       // state readout vs closed-form weighted sum (relative, see docs)
};

// One trial on the CPU (float64): U keys (K x d), Q queries (K x d; Q = U without noise),
// values (V and the decode rows). tile_rows = 0 picks a tile of about 4M coefficients.
TrialMetrics evaluate_trial_cpu(const CapacityKernel& map, const Eigen::MatrixXd& U, const Eigen::MatrixXd& Q,
                                const Values& values, Readout readout, std::int64_t tile_rows = 0);

struct CapacityConfig {
  std::string map = "m1";
  int dim = 32;                    // d_head
  int d_v = 0;                     // 0: = dim (onehot: the largest K)
  std::string keys = "random";
  std::string values = "gauss";
  std::string readout = "auto";
  double query_noise = 0.0;        // q = normalize(u + sigma xi), xi ~ N(0, I/d)
  int trials = 3;
  double acc_threshold = 0.9;
  double psnr_threshold = 1.0;
  std::int64_t k_min = 2;          // first K of the doubling grid
  std::int64_t k_max = 0;          // 0: min(dictionary size, 16384)
  std::vector<std::int64_t> k_list;  // extra K evaluated (and the only ones when search = false)
  bool search = true;
  std::uint64_t seed = 0;
  std::int64_t tile_rows = 0;
  double check_tolerance = 1e-5;   // state vs closed-form readout (relative); violated -> NumericError
};

// Checks the whole configuration up front (UserError with what to change).
void validate(const CapacityConfig& cfg);

struct KPoint {
  std::int64_t K = 0;
  std::string stage;               // "grid" (doubling), "bisect" or "list"
  double acc = 0;                  // over all queries of all trials
  std::vector<double> acc_trials;
  double psnr_median = 0, psnr_mean_log10 = 0, psnr_min = 0;
  double coherence = 0;            // mean over trials
  double max_deviation = 0;        // max over trials
};

struct CapacityResult {
  std::vector<KPoint> points;      // sorted by K
  std::int64_t k_star_psnr = 0, k_star_acc = 0;
  bool k_star_psnr_censored = false, k_star_acc_censored = false;  // criterion still held at k_max
  std::int64_t k_max = 0;          // the effective largest K
  int d_v = 0;
  std::string readout, path;       // path: "cpu" or "cuda"
  double max_deviation = 0;
  CapacityTheory theory;
};

using TrialBackend = std::function<TrialMetrics(const CapacityKernel&, const Eigen::MatrixXd& U,
                                                const Eigen::MatrixXd& Q, const Values&, Readout)>;

// Runs the protocol on `device` (cpu, or cuda when built with it: DeviceError otherwise).
// progress (optional) is called after each K with the point just measured.
CapacityResult run_capacity(const CapacityConfig& cfg, Device device,
                            const std::function<void(const KPoint&)>& progress = {});
// Same with an explicit backend (tests).
CapacityResult run_capacity_with(const CapacityConfig& cfg, const TrialBackend& backend, const std::string& path,
                                 const std::function<void(const KPoint&)>& progress = {});

}  // namespace memcap::kata
