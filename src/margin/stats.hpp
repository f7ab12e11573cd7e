// Geometric summary statistics of a kernel memory (hebbian spec §3.3, paper App. B.5):
// K_min^diag, K_max^off, E_K, Ẽ_K, V_min, V_max, E_v, Ẽ_v, B_Y, L_v, κ (one- and two-sided), κ̃,
// computed by streaming over tiles of keys: memory O(tile·(F+P) + F·(m+d)), never F×F×F.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <memory>

namespace memcap::margin {

// Rows of the F×F kernel Gram K̂ (queries = the stored keys), produced tile by tile.
class KernelRows {
 public:
  virtual ~KernelRows() = default;
  virtual Eigen::Index facts() const = 0;
  // out (resized to count×F) = K̂[row0 : row0+count, :].
  virtual void rows(Eigen::Index row0, Eigen::Index count, Eigen::MatrixXd& out) const = 0;
  // Upper bound on rank(K̂) used by the theory (m features; d(d+1)/2 for the exact K2 kernel).
  virtual double rank_bound() const = 0;
};

// K̂ = Φ Φᵀ from a feature matrix Φ (F×m, row t = g(k_t)). Keeps a reference: Φ must outlive it.
class FeatureKernelRows final : public KernelRows {
 public:
  explicit FeatureKernelRows(const Eigen::MatrixXd& phi);
  Eigen::Index facts() const override { return phi_.rows(); }
  void rows(Eigen::Index row0, Eigen::Index count, Eigen::MatrixXd& out) const override;
  double rank_bound() const override { return static_cast<double>(phi_.cols()); }

 private:
  const Eigen::MatrixXd& phi_;
};

// Exact quadratic kernel K̂ = (K Kᵀ)^∘2 from the keys (F×d). Keeps a reference to keys.
class ExactK2KernelRows final : public KernelRows {
 public:
  explicit ExactK2KernelRows(const Eigen::MatrixXd& keys);
  Eigen::Index facts() const override { return keys_.rows(); }
  void rows(Eigen::Index row0, Eigen::Index count, Eigen::MatrixXd& out) const override;
  double rank_bound() const override {
    const double d = static_cast<double>(keys_.cols());
    return d * (d + 1.0) / 2.0;
  }

 private:
  const Eigen::MatrixXd& keys_;
};

struct StatsOptions {
  Eigen::Index tile_rows = 256;    // keys per streamed tile (memory ~ tile·(F+P) doubles)
  Eigen::Index tile_values = 512;  // values per tile of the L_v pass
  bool compute_lv = true;          // L_v needs O(F²P) additions (no BLAS form); off = NaN
};

// Every statistic of §3.3, both conventions where paper and code differ (§7.3 item 9).
// "code" = the release's margin_theory.py (t ≠ i includes t = j; κ one-sided);
// "trunc" = the paper's t ∉ {i, j} (needed by the deterministic Eq. 43).
struct GeometryStats {
  std::int64_t facts = 0, values = 0, dim = 0;
  double rank = 0;              // rank bound of K̂ (m, or d(d+1)/2 for exact K2)
  // kernel
  double k_min_diag = 0, k_max_diag = 0, k_max_off = 0;
  double e_k = 0;               // max_i Σ_{t≠i} K̂_ti²
  double e_k_trunc = 0;         // Ẽ_K = max_{i≠j} Σ_{t∉{i,j}} K̂_ti²
  double e_k_mean = 0;          // (1/F) Σ_i Σ_{t≠i} K̂_ti²
  double trace = 0, diag_sq_sum = 0, frob2 = 0;
  // values / codes (a_ij = v_f(i) − v_j, Y_t = <a_ij, c_f(t)>)
  double v_min = 0;             // min <a_ij, c_f(i)>   (= min <v_i − v_j, v_i> for codes = v)
  double v_max = 0;             // max |<a_ij, c_j>|    (= max |<v_i − v_j, v_j>|)
  double e_v = 0;               // max Σ_{t≠i} Y_t²
  double e_v_trunc = 0;         // Ẽ_v = max Σ_{t∉{i,j}} Y_t²
  double b_y = 0;               // code: max |Σ_{t≠i} Y_t|
  double b_y_trunc = 0;         // paper: max |Σ_{t∉{i,j}} Y_t|
  double l_v = 0;               // code: max ‖Y‖₁²/‖Y‖₂² over t≠i (NaN when not computed)
  double l_v_trunc = 0;         // paper: over t∉{i,j}
  // coupling
  double kappa = 0;             // code: max max(0, −X_ij) / (√E_K(i) √E_v(i,j)), X_ij = Σ_{t≠i} K̂_ti Y_t
  double kappa_abs = 0;         // paper: |X_ij| in the numerator
  double kappa_trunc = 0;       // κ̃ (one-sided) with t∉{i,j} and per-pair Ẽ_K(i,j), Ẽ_v(i,j)
  double kappa_trunc_abs = 0;
  double crosstalk_max = 0;     // max_{i,j} max(0, −X_ij)   (cross-talk against the margin)
  double crosstalk_trunc_max = 0;  // max max(0, −z̃_ij), z̃_ij = Σ_{t∉{i,j}} K̂_ti Y_t
  double signal_min = 0;        // s̃_min = min K̂_ii<a,c_f(i)> + K̂_ji<a,c_j>
  // the kernel-memory margin itself (by-product; equals margins_from_outputs)
  double min_margin = 0;
  double accuracy = 0;          // fraction of keys with γ_i > 0
  Eigen::VectorXd per_key_margin;        // γ_i
  Eigen::VectorXi per_key_competitor;    // argmin_j γ_ij
};

// Statistics of the kernel memory ŷ_i = Σ_t K̂_ti c_f(t) scored against V_all.
// values: P×d (V_all); codes: P×d (c_j per value; pass values for codes = v);
// map: F entries in [0,P), key i stores value map[i]. Throws UserError on bad shapes.
GeometryStats geometry_stats(const KernelRows& kernel, const Eigen::MatrixXd& values,
                             const Eigen::MatrixXd& codes, const Eigen::VectorXi& map,
                             const StatsOptions& opt = {});

// Direct O(F²P) triple-loop evaluation of the definitions from a dense K̂ (tests only; small F).
GeometryStats geometry_stats_dense_reference(const Eigen::MatrixXd& kernel, const Eigen::MatrixXd& values,
                                             const Eigen::MatrixXd& codes, const Eigen::VectorXi& map);

}  // namespace memcap::margin
