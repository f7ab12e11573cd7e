// Non-negative least squares min ‖A x − b‖₂ s.t. x ≥ 0 by the Lawson–Hanson active-set method
// (Lawson & Hanson 1974, ch. 23). Used by the theory-curve fits (fit.hpp) whose models are linear
// in their non-negative constants.
#pragma once
#include <Eigen/Dense>

namespace memcap::margin {

struct NnlsResult {
  Eigen::VectorXd x;        // solution, x ≥ 0
  double residual_norm = 0; // ‖A x − b‖₂
  int iterations = 0;       // outer (variable-adding) iterations
  bool converged = true;    // false if the iteration cap was hit
};

// A: n×k (n ≥ 1, k ≥ 1), b: n. Throws UserError on shape mismatch or non-finite input.
// tol: dual-feasibility tolerance (0 = automatic, 10·eps·‖A‖₁·max(n,k)).
NnlsResult nnls(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, double tol = 0.0, int max_iter = 0);

}  // namespace memcap::margin
