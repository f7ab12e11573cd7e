// Low-rank adapter initialisation of the paper's A.7 (spec ramnet.md §1.9, experiment E10) on synthetic
// teachers: the CAPE construction (frequency projection onto φ(Δ) = (cos ν_uΔ, sin ν_uΔ)_u, then the leading
// singular triple of M_u = X*_{2u} + i X*_{2u+1} per factor) and the NoPE construction (rank-2U truncated
// SVD of the mean weighted operator), the adapters P = W~ W^+ (times (2U/d_k)^{1/4}), and the loss of eq. 30.
//
// Shapes (column-vector convention of the paper): W_Q, W_K are d_k × d_model; W~_Q, W~_K are 2U × d_model;
// P_Q, P_K are 2U × d_k; Σ_Q, Σ_K are d_model × d_model (symmetric positive definite).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace memcap::ramnet {

struct AdapterTeacher {
  Eigen::MatrixXd WQ, WK;            // d_k × d_model
  std::vector<double> freqs;         // teacher RoPE angular frequency per 2-D plane (d_k/2); empty = NoPE
  Eigen::MatrixXd SigmaQ, SigmaK;    // second moments of the query / key hidden states
  std::vector<double> deltas, prob;  // relative positions Δ = key − query position and p(Δ) (sums to 1)
  std::string kind;                  // how it was made (make_teacher)
  void validate() const;             // UserError on inconsistent shapes, non-finite entries, bad p
};

// Block-diagonal rotation [[cos f_m Δ, −sin f_m Δ], [sin f_m Δ, cos f_m Δ]] per plane (identity for none).
Eigen::MatrixXd block_rotation(const std::vector<double>& freqs, double delta, int dim);

// The paper's adapter scale (2U/d_k)^{1/4}: then (2U/d_k)^{1/2}/sqrt(2U) = 1/sqrt(d_k) (teacher scaling kept).
double adapter_scale(int U, int d_k);

struct AdapterResult {
  std::string mode;                  // "cape" or "nope"
  Eigen::MatrixXd WQt, WKt;          // W~_Q, W~_K (2U × d_model)
  Eigen::MatrixXd PQ, PK;            // adapters including adapter_scale (2U × d_k)
  std::vector<double> sigma;         // cape: σ_u (leading singular value of M_u); nope: S_r
  double loss = 0;                   // eq. 30 with the constructed W~
  double teacher_energy = 0;         // E_p ||B^_T(Δ)||_F² (the loss of W~ = 0)
  double relaxed_loss = 0;           // cape: the unconstrained frequency projection (eq. 31); nope: mean-only
  double adapter_residual = 0;       // max(||P_Q W_Q − s W~_Q||, ||P_K W_K − s W~_K||) / (s ||W~||), s = scale
};

// CAPE construction at the target frequencies ν_u = 2π/dp^{u+1} (eqs. 31–33).
AdapterResult cape_adapter(const AdapterTeacher& t, int dp, int U);
// NoPE construction (eq. 34), r = min(2U, d_k), zero rows when r < 2U.
AdapterResult nope_adapter(const AdapterTeacher& t, int U);

// Eq. 30: E_p || Σ_Q^{1/2} (B_T(Δ) − B_S(Δ)) Σ_K^{1/2} ||_F² for student projections W~_Q, W~_K (2U × d_model)
// with student rotations at `student_freqs` (U entries; empty = NoPE, R_S = I). If `scale_opt`, the student
// operator is first multiplied by the least-squares scalar c* (reported in *c when given).
double adapter_loss(const AdapterTeacher& t, const Eigen::MatrixXd& WQt, const Eigen::MatrixXd& WKt,
                    const std::vector<double>& student_freqs, bool scale_opt = false, double* c = nullptr);

// Synthetic teachers (E10), drawn from (seed, stream) with Philox (streams kStreamAdapter* in docs/ramnet.md):
//   "cape": d_k = 2U planes at the CAPE frequencies ν_u — realisable, the CAPE init reproduces B_T exactly;
//   "nope": no rotation and W_K = E F with E a rank-2U projector — realisable by the NoPE init (d_k >= 2U);
//   "rope": standard RoPE, plane m at base^{−2m/d_k} — not realisable in general.
// W entries N(0, 1/d_model); Σ = L Lᵀ/d_model + 0.1 I (L Gaussian); Δ ∈ {−delta_max..0} with
// p(Δ) ∝ exp(Δ/decay) (decay = 0: uniform).
AdapterTeacher make_teacher(const std::string& kind, int d_model, int d_k, int dp, int U, double rope_base,
                            int delta_max, double decay, std::uint64_t seed);

// Philox stream ids of the adapter experiment (documented in docs/ramnet.md).
inline constexpr std::uint64_t kStreamAdapterTeacher = 1410;  // W_Q, W_K, L_Q, L_K, projector
inline constexpr std::uint64_t kStreamAdapterRandom = 1411;   // random adapters (baseline)

}  // namespace memcap::ramnet
