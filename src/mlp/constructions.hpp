// Hebbian-MLP constructions of spec hebbian.md §2.1-2.5: sketched-K2 ("hebbian"), exact-K2,
// kernel-whitened, data-dependent (CG fit of the factor matrices) and the NTK baseline.
// All in float64 except the data-dependent CG, which follows the released code's precision rule.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "mlp/method.hpp"

namespace memcap::mlp {

// ---- dispatch ---------------------------------------------------------------------------------
// Builds the MLP of `method` for the fact set with `width` hidden units (0 = the method's default:
// 4d, or d(d+1)/2 for exact-K2, whose width is fixed). Records method text, params, solver note.
GatedMLP build_mlp(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed);
std::int64_t default_width(MethodKind kind, std::int64_t d);
// Spec §3.7: 3md for the Hebbian family, 3md + 2m + d for NTK (zero biases counted).
std::int64_t param_count(MethodKind kind, std::int64_t m, std::int64_t d);
// As above, for a parsed spec (gd: 3md, or 3md + 2m + d with bias=1).
std::int64_t param_count(const MethodSpec& method, std::int64_t m, std::int64_t d);

// ---- readouts (ridge_readout.cpp) ---------------------------------------------------------------
// Hebbian readout W = (1/F) C_fᵀ Φ  (d x m).
Eigen::MatrixXd hebbian_readout(const Eigen::MatrixXd& phi, const Eigen::MatrixXd& targets);
struct WhitenedReadout {
  Eigen::MatrixXd W;        // d x m
  bool dual = false;        // m > F
  std::string solver;       // cholesky | ldlt-bunch-kaufman | eigen
};
// Spec §2.3: primal (m <= F) W = (C_fᵀΦ/F)(ΦᵀΦ/F + λI)^{-1}; dual (m > F) W = C_fᵀ(ΦΦᵀ + λI)^{-1}Φ.
WhitenedReadout whitened_readout(const Eigen::MatrixXd& phi, const Eigen::MatrixXd& targets, double ridge);
// Solve S X = R for symmetric S (n x n, lower triangle + diagonal used) in place of R.
// Tries Cholesky (LAPACK dpotrf); if S is not numerically positive definite, pivoted LDLᵀ
// (dsytrf), then a pseudo-inverse eigen-solve. Returns the name of the solver that ran and
// prints a one-line notice on stderr when a fallback was used. S is destroyed.
std::string solve_symmetric(Eigen::MatrixXd& S, Eigen::MatrixXd& R);
// Gram matrices through BLAS syrk: ΦᵀΦ (m x m) and ΦΦᵀ (F x F), full symmetric result.
Eigen::MatrixXd gram_columns(const Eigen::MatrixXd& phi, double alpha = 1.0);  // alpha ΦᵀΦ
Eigen::MatrixXd gram_rows(const Eigen::MatrixXd& phi, double alpha = 1.0);     // alpha ΦΦᵀ

// ---- exact-K2 (construct_hebbian.cpp) ---------------------------------------------------------
// Feature map with m = d(d+1)/2 units, unit (a,b), a <= b: A0_r = w e_a, A1_r = w e_b with
// w⁴ = 1 (a = b) or 2 (a < b), scale 1, so <g(x), g(z)> = <x,z>² exactly.
BilinearFeatureMap exact_k2_feature_map(std::int64_t d);
// Direct Gram form (X Zᵀ)^{∘2}  (rows of X by rows of Z).
Eigen::MatrixXd exact_k2_gram(const Eigen::MatrixXd& X, const Eigen::MatrixXd& Z);

// ---- single constructions ----------------------------------------------------------------------
GatedMLP build_sketched(const FactSet& fs, std::int64_t m, std::uint64_t seed);
GatedMLP build_exact_k2(const FactSet& fs);
GatedMLP build_whitened(const FactSet& fs, std::int64_t m, std::uint64_t seed, double ridge);
GatedMLP build_data_dependent(const FactSet& fs, std::int64_t m, std::uint64_t seed, const MethodSpec& opts);
GatedMLP build_ntk(const FactSet& fs, std::int64_t m, std::uint64_t seed);

// ---- data-dependent least squares (construct_data_dependent.cpp) ---------------------------------
struct CgOptions {
  double ridge = 1e-6;
  double tol = 0;               // 0 = 1e-5 (float32) / 1e-10 (float64)
  std::int64_t max_iter = 0;    // 0 = min(max(2m,128),1024)
  std::string precision = "auto";  // auto: float32 iff m*d > 8192
};
struct CgResult {
  Eigen::MatrixXd X;            // m x d, float64
  std::int64_t iterations = 0;
  double rel_residual = 0;      // ||RHS - Op(X)||_F / ||RHS||_F (CG recurrence)
  bool converged = false;
  bool curvature_abort = false; // pᵀOp(p) <= 0 stopped the iteration
  std::string precision;        // float32 | float64
};
// min_X ½||I_F - C_f W0 Ψ(X)||² + ½λ||X||²,  Ψ(X) = Π ⊙ (X Kᵀ)  (spec §2.4 FitProjection),
// by Jacobi-preconditioned CG on the normal equations. Pi: m x F, keys: F x d, targets: F x d,
// W0: d x m.
CgResult fit_projection(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& keys, const Eigen::MatrixXd& targets,
                        const Eigen::MatrixXd& W0, const CgOptions& opts);
// The normal-equation operator Op(X) and right-hand side in float64 (for tests and diagnostics).
Eigen::MatrixXd fit_projection_operator(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& keys,
                                        const Eigen::MatrixXd& targets, const Eigen::MatrixXd& W0,
                                        double ridge, const Eigen::MatrixXd& X);
Eigen::MatrixXd fit_projection_rhs(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& keys,
                                   const Eigen::MatrixXd& targets, const Eigen::MatrixXd& W0);

// In-place A ⊙= s·B, parallel over columns (OpenMP).
void hadamard_inplace(Eigen::MatrixXd& A, const Eigen::MatrixXd& B, double s = 1.0);

}  // namespace memcap::mlp
