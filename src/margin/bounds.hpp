// Margin bounds of hebbian spec §3.4 evaluated on measured statistics: Eq. 9, Eq. 56 / Cor. B.31,
// Theorem 4.3, the Table 2 ladder (Eq. 44/45/46/51, Thm B.30), deterministic Eq. 43 and the signal
// bound, the Welch/Frobenius upper bound, the information-theoretic lower bound, the noisy-query terms.
#pragma once
#include <Eigen/Dense>
#include <string>
#include <utility>
#include <vector>

#include "margin/stats.hpp"

namespace memcap::margin {

// Constants of the high-probability bounds. The theorems leave C, C0, … unspecified; the
// "plug-in" evaluation uses every constant = 1 (spec §3.5 (ii)); δ = 0.5 as in the release code.
struct BoundConstants {
  double c = 1.0;      // every absolute constant C, C1, C2, …
  double c0 = 1.0;     // inside L = log(C0 F²/δ)
  double delta = 0.5;
  double bits_per_param = 64.0;  // b of Thm 2.4 (float64 storage)
};

struct NoiseInputs {
  double eps = 0;         // query noise radius ε (0 = clean)
  double l_bil = 0;       // bilinear kernel Lipschitz constant (bilinear_lipschitz)
  double clean_min_margin = 0;   // γ_min at the clean keys
  double noisy_min_margin = 0;   // γ_min at the noisy queries
};

// Every bound as a named value (names are the /summary column names, prefix "bound_").
struct BoundSet {
  double log_term = 0;            // L = log(C0 F²/δ)
  double eq9 = 0;                 // 1 − C √(F log F/(m d))
  double eq56 = 0;                // 1 − C√(L/m) − C√(L/(d−1)) − C√L√(F/d³) − C√L√(F/(md))
  double cor_b31 = 0;             // 1 − C √(F log(F/δ)/(md))
  double thm43 = 0;               // ½ S_sig − P_key P_val P_align √(F log F/(md))
  double p_key = 0, p_val = 0, p_align = 0, s_sig = 0;   // Theorem 4.3 penalty statistics
  double capacity_w = 0;          // F log F (P_key P_val P_align / S_sig)²   (Cor. 4.5 with C = 1)
  double ladder_rkrv = 0;         // Thm B.30: 1 − C √(F L/(m d))
  double ladder_akrv = 0;         // Eq. 46: K_min(1−ε_v) − K_max^off − C √E_K √(L/d)
  double ladder_akrv_full = 0;    // Eq. 45: … − C √E_K √(L/(d−1)) √(1 + L/(F−2))
  double ladder_rkav = 0;         // Eq. 51: (1−ε_k) V_min − C (B_Y + √E_v √L_v) √(L/m)
  double ladder_akav = 0;         // Eq. 44 (deterministic): K_min V_min − √E_K √E_v κ
  double eq44_abs = 0;            // Eq. 44 with the two-sided κ
  double eq43 = 0;                // deterministic: K_min V_min − K_max^off V_max − √Ẽ_K √Ẽ_v κ̃
  double signal = 0;              // deterministic Thm B.21: K_min V_min − K_max^off V_max
  double crosstalk_trunc = 0;     // Thm B.16 upper bound on max(−z̃): √Ẽ_K √Ẽ_v κ̃
  double welch_ecol_lower = 0;    // Lemma B.34: (1/F)(tr(K̂)²/r − Σ K̂_ii²) ≤ E_K
  double welch_upper = 0;         // Cor. B.35 plug-in: (1+ε_diag) − C √(E_col^welch log F / d)
  double welch_upper_asym = 0;    // 1 − C √((F/r) log F / d)
  double info_bits = 0;           // Thm 2.4: F log2 P bits must be stored
  double info_min_params = 0;     // F log2 P / b parameters at b bits each
  double info_ratio = 0;          // (m d) / (F log2 P): ≥ b/… is needed; Θ(1)·log factor is optimal
  // noisy queries (§3.2); NaN when no noise inputs were given
  double noisy_clean = 0;         // explicit-constant clean part of noisy_query_margin_bound
  double noisy_degradation = 0;   // L_bil ε (1 + 2√2 √(nL/d))
  double noisy_code = 0;          // noisy_clean − noisy_degradation (release code's plotted bound)
  double eq74 = 0;                // γ_min(k) − C L_bil ε √(F L/d)
  double eq76_eps_max = 0;        // γ_min(k)/(C L_bil) √(d/(F L)): largest ε with guaranteed storage
};

// Evaluate every bound. m = feature width (use stats.rank for the exact K2 kernel), d = key dim.
BoundSet evaluate_bounds(const GeometryStats& s, double m, double d, const BoundConstants& c = {},
                         const NoiseInputs* noise = nullptr);

// (column name, value) pairs of a BoundSet, in a fixed order; names start with "bound_" or are
// the penalty statistics ("p_key", …).
std::vector<std::pair<std::string, double>> bound_columns(const BoundSet& b);

// L_bil of §3.2: B_g · max_z s (‖A1 z‖_∞ ‖A0‖_op + ‖A0 z‖_∞ ‖A1‖_op) over z ∈ keys ∪ noisy keys,
// B_g = max_t ‖g(k_t)‖₂ with g(x) = s (A0 x)⊙(A1 x); s = 1/√m for the random map (scale ≤ 0 picks
// that), 1 for the exact-K2 map. a0, a1: m×d; keys, noisy: F×d (noisy may be empty).
double bilinear_lipschitz(const Eigen::MatrixXd& a0, const Eigen::MatrixXd& a1, const Eigen::MatrixXd& keys,
                          const Eigen::MatrixXd& noisy, double scale = 0.0);

// Largest singular value of a (via the eigenvalues of the smaller Gram).
double operator_norm(const Eigen::MatrixXd& a);

}  // namespace memcap::margin
