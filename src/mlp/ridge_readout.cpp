// Readouts of the Hebbian constructions: the plain Hebbian readout (1/F)C_fᵀΦ and the ridge-
// whitened readout of spec §2.3 (primal iff m <= F, dual iff m > F), with an SPD solver that falls
// back from Cholesky to pivoted LDLᵀ to an eigen-solve and says so (spec §7.1.1).
#include <fmt/format.h>

#include <cstdio>
#include <limits>

#include "core/error.hpp"
#include "mlp/constructions.hpp"

// LAPACK (OpenBLAS, LP64). Eigen/src/misc/blas.h (EIGEN_USE_BLAS) already declares dsyrk_.
extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info, std::size_t);
void dsytrf_(const char* uplo, const int* n, double* a, const int* lda, int* ipiv, double* work, const int* lwork,
             int* info, std::size_t);
void dsytrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, std::size_t);
}

namespace memcap::mlp {

namespace {

int lapack_int(Eigen::Index n, const char* what) {
  require(n < std::numeric_limits<int>::max(), "{} dimension {} is too large for 32-bit LAPACK", what, n);
  return static_cast<int>(n);
}

// Fill the strictly upper triangle from the lower one.
void symmetrize_from_lower(Eigen::MatrixXd& S) {
  const Eigen::Index n = S.rows();
#pragma omp parallel for schedule(dynamic, 64) if (n > 512)
  for (Eigen::Index j = 1; j < n; ++j)
    for (Eigen::Index i = 0; i < j; ++i) S(i, j) = S(j, i);
}

}  // namespace

void hadamard_inplace(Eigen::MatrixXd& A, const Eigen::MatrixXd& B, double s) {
  MEMCAP_ASSERT(A.rows() == B.rows() && A.cols() == B.cols(), "hadamard shapes differ");
  const Eigen::Index cols = A.cols();
#pragma omp parallel for schedule(static) if (A.size() > (1 << 16))
  for (Eigen::Index j = 0; j < cols; ++j) A.col(j).array() *= s * B.col(j).array();
}

namespace {
// alpha ΦᵀΦ (of_columns) or alpha ΦΦᵀ by one dsyrk on the lower triangle, then mirrored.
Eigen::MatrixXd syrk_gram(const Eigen::MatrixXd& phi, double alpha, bool of_columns) {
  const Eigen::Index size = of_columns ? phi.cols() : phi.rows();
  const int n = lapack_int(size, "Gram"), k = lapack_int(of_columns ? phi.rows() : phi.cols(), "Gram");
  Eigen::MatrixXd S(size, size);
  advise_huge_pages(S);
  const double beta = 0;
  const int lda = std::max(lapack_int(phi.rows(), "Gram"), 1), ldc = std::max(n, 1);
  if (n > 0)  // Eigen's blas.h declares dsyrk_
    dsyrk_("L", of_columns ? "T" : "N", &n, &k, &alpha, phi.data(), &lda, &beta, S.data(), &ldc);
  symmetrize_from_lower(S);
  return S;
}
}  // namespace

Eigen::MatrixXd gram_columns(const Eigen::MatrixXd& phi, double alpha) { return syrk_gram(phi, alpha, true); }

Eigen::MatrixXd gram_rows(const Eigen::MatrixXd& phi, double alpha) { return syrk_gram(phi, alpha, false); }

std::string solve_symmetric(Eigen::MatrixXd& S, Eigen::MatrixXd& R) {
  require(S.rows() == S.cols() && R.rows() == S.rows(), "solve: S is {}x{}, right-hand side {}x{}", S.rows(),
          S.cols(), R.rows(), R.cols());
  const int n = lapack_int(S.rows(), "solve"), nrhs = lapack_int(R.cols(), "solve");
  if (n == 0) return "none";
  const int lda = n;
  // Cholesky overwrites the lower triangle and the diagonal only: keep the diagonal so the
  // matrix can be restored from its (untouched) upper triangle if the factorization fails.
  const Eigen::VectorXd diag = S.diagonal();
  const Eigen::MatrixXd R0 = R;
  int info = 0;
  dpotrf_("L", &n, S.data(), &lda, &info, 1);
  if (info == 0) {
    dpotrs_("L", &n, &nrhs, S.data(), &lda, R.data(), &lda, &info, 1);
    MEMCAP_ASSERT(info == 0, "dpotrs failed after a successful dpotrf");
    if (R.allFinite()) return "cholesky";
  }
  const int failed_pivot = info;
  // Restore S (lower from upper, diagonal from the copy) and the right-hand side.
  R = R0;
  for (Eigen::Index j = 0; j < S.cols(); ++j)
    for (Eigen::Index i = j + 1; i < S.rows(); ++i) S(i, j) = S(j, i);
  S.diagonal() = diag;
  {
    Eigen::MatrixXd F = S;
    std::vector<int> ipiv(static_cast<std::size_t>(n));
    int lwork = -1;
    double wq = 0;
    dsytrf_("L", &n, F.data(), &lda, ipiv.data(), &wq, &lwork, &info, 1);
    lwork = std::max(1, static_cast<int>(wq));
    std::vector<double> work(static_cast<std::size_t>(lwork));
    dsytrf_("L", &n, F.data(), &lda, ipiv.data(), work.data(), &lwork, &info, 1);
    if (info == 0) {
      dsytrs_("L", &n, &nrhs, F.data(), &lda, ipiv.data(), R.data(), &lda, &info, 1);
      if (info == 0 && R.allFinite()) {
        fmt::print(stderr, "note: Cholesky failed (pivot {} not positive): solved with pivoted LDLᵀ (dsytrf)\n",
                   failed_pivot);
        return "ldlt-bunch-kaufman";
      }
    }
    R = R0;
  }
  // Last resort: pseudo-inverse through the symmetric eigendecomposition.
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(S);
  if (es.info() != Eigen::Success) throw NumericError("symmetric eigen-solve failed: the system matrix is unusable");
  const Eigen::VectorXd ev = es.eigenvalues();
  const double cut = std::abs(ev.cwiseAbs().maxCoeff()) * static_cast<double>(n) * 1e-16;
  Eigen::VectorXd inv = ev.unaryExpr([cut](double x) { return std::abs(x) > cut ? 1.0 / x : 0.0; });
  Eigen::MatrixXd t = es.eigenvectors().transpose() * R0;
  t = inv.asDiagonal() * t;
  R.noalias() = es.eigenvectors() * t;
  if (!R.allFinite()) throw NumericError("whitened readout: every solver produced NaN/Inf (check the inputs)");
  fmt::print(stderr, "note: Cholesky and LDLᵀ failed: solved with a pseudo-inverse eigen-solve\n");
  return "eigen";
}

Eigen::MatrixXd hebbian_readout(const Eigen::MatrixXd& phi, const Eigen::MatrixXd& targets) {
  require(phi.rows() == targets.rows(), "readout: Φ has {} rows, targets {}", phi.rows(), targets.rows());
  Eigen::MatrixXd W(targets.cols(), phi.cols());
  W.noalias() = (1.0 / static_cast<double>(phi.rows())) * targets.transpose() * phi;
  return W;
}

WhitenedReadout whitened_readout(const Eigen::MatrixXd& phi, const Eigen::MatrixXd& targets, double ridge) {
  require(phi.rows() == targets.rows(), "readout: Φ has {} rows, targets {}", phi.rows(), targets.rows());
  require(ridge > 0, "ridge must be > 0 (got {})", ridge);
  const Eigen::Index F = phi.rows(), m = phi.cols();
  WhitenedReadout out;
  out.dual = m > F;
  if (!out.dual) {
    // (ΦᵀΦ/F + λI) Wᵀ = ΦᵀC_f/F
    Eigen::MatrixXd S = gram_columns(phi, 1.0 / static_cast<double>(F));
    S.diagonal().array() += ridge;
    Eigen::MatrixXd Rt(m, targets.cols());
    Rt.noalias() = (1.0 / static_cast<double>(F)) * phi.transpose() * targets;
    out.solver = solve_symmetric(S, Rt);
    out.W = Rt.transpose();
  } else {
    // (ΦΦᵀ + λI) Z = C_f,  W = Zᵀ Φ
    Eigen::MatrixXd S = gram_rows(phi);
    S.diagonal().array() += ridge;
    Eigen::MatrixXd Z = targets;
    out.solver = solve_symmetric(S, Z);
    out.W.resize(targets.cols(), m);
    out.W.noalias() = Z.transpose() * phi;
  }
  return out;
}

}  // namespace memcap::mlp
