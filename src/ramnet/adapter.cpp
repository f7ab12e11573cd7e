// A.7 adapter constructions (CAPE and NoPE), the eq.-30 loss and synthetic teachers (spec ramnet.md §1.9,
// E10). See adapter.hpp. Every operator Σ_Q^{1/2} Wᵀ R W' Σ_K^{1/2} is handled through a small core: with the
// thin QR factorisations (W Σ^{1/2})ᵀ = Q R, its Frobenius norm and its SVD are those of R_Q · R · R_Kᵀ
// (at most d_k + 2U square), so d_model only enters the QR steps.
#include "ramnet/adapter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ramnet/cape.hpp"

namespace memcap::ramnet {

namespace {

using Eigen::MatrixXd;
using MatrixXcd = Eigen::MatrixXcd;

struct SqrtPair {
  MatrixXd half, inv_half;
};

SqrtPair spd_sqrt(const MatrixXd& S, const char* name) {
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(S);
  if (es.info() != Eigen::Success) throw NumericError(fmt::format("{}: eigen-decomposition failed", name));
  const auto& ev = es.eigenvalues();
  if (!(ev.minCoeff() > 0))
    throw UserError(fmt::format("{} is not positive definite (smallest eigenvalue {:.3g})", name, ev.minCoeff()));
  const MatrixXd& V = es.eigenvectors();
  return {V * ev.cwiseSqrt().asDiagonal() * V.transpose(), V * ev.cwiseSqrt().cwiseInverse().asDiagonal() * V.transpose()};
}

// Thin QR of Aᵀ (d_model × k): Aᵀ = Q R with Q orthonormal columns; returns Q (d_model × k) and R (k × d_k).
void thin_qr(const MatrixXd& A, MatrixXd& Q, MatrixXd& R) {
  const MatrixXd At = A.transpose();
  Eigen::HouseholderQR<MatrixXd> qr(At);
  const Eigen::Index k = std::min(At.rows(), At.cols());
  Q = qr.householderQ() * MatrixXd::Identity(At.rows(), k);
  R = qr.matrixQR().topRows(k).triangularView<Eigen::Upper>();
}

MatrixXd pinv(const MatrixXd& W) { return Eigen::CompleteOrthogonalDecomposition<MatrixXd>(W).pseudoInverse(); }

// Fill the adapters P = scale · W~ W^+ and their residual.
void finish_adapters(const AdapterTeacher& t, int U, AdapterResult& r) {
  const double s = adapter_scale(U, static_cast<int>(t.WQ.rows()));
  r.PQ = s * r.WQt * pinv(t.WQ);
  r.PK = s * r.WKt * pinv(t.WK);
  const double nq = std::max(r.WQt.norm(), 1e-300), nk = std::max(r.WKt.norm(), 1e-300);
  r.adapter_residual = std::max((r.PQ * t.WQ - s * r.WQt).norm() / (s * nq), (r.PK * t.WK - s * r.WKt).norm() / (s * nk));
}

}  // namespace

void AdapterTeacher::validate() const {
  require(WQ.size() > 0 && WQ.rows() == WK.rows() && WQ.cols() == WK.cols(),
          "teacher W_Q ({}x{}) and W_K ({}x{}) must have the same non-empty shape d_k x d_model", WQ.rows(), WQ.cols(),
          WK.rows(), WK.cols());
  require(WQ.allFinite() && WK.allFinite(), "teacher W_Q / W_K hold non-finite entries");
  const Eigen::Index dm = WQ.cols(), dk = WQ.rows();
  if (!freqs.empty())
    require(dk % 2 == 0 && static_cast<Eigen::Index>(freqs.size()) * 2 == dk,
            "teacher rotations: {} frequencies need d_k = {} (got {})", freqs.size(), 2 * freqs.size(), dk);
  for (double f : freqs) require(std::isfinite(f), "teacher RoPE frequency {} is not finite", f);
  for (const auto* S : {&SigmaQ, &SigmaK}) {
    require(S->rows() == dm && S->cols() == dm, "Sigma must be d_model x d_model = {}x{} (got {}x{})", dm, dm,
            S->rows(), S->cols());
    require(S->allFinite(), "Sigma holds non-finite entries");
    require((*S - S->transpose()).norm() <= 1e-12 * S->norm(), "Sigma must be symmetric");
  }
  require(!deltas.empty() && deltas.size() == prob.size(), "p(Delta): {} positions and {} probabilities",
          deltas.size(), prob.size());
  double sum = 0;
  for (std::size_t i = 0; i < prob.size(); ++i) {
    require(std::isfinite(deltas[i]) && std::isfinite(prob[i]) && prob[i] >= 0, "p(Delta) entry {} is invalid", i);
    sum += prob[i];
  }
  require(std::fabs(sum - 1.0) <= 1e-9, "p(Delta) sums to {}, not 1", sum);
}

MatrixXd block_rotation(const std::vector<double>& freqs, double delta, int dim) {
  MatrixXd R = MatrixXd::Identity(dim, dim);
  for (std::size_t m = 0; m < freqs.size(); ++m) {
    const double c = std::cos(freqs[m] * delta), s = std::sin(freqs[m] * delta);
    const int i = static_cast<int>(2 * m);
    R(i, i) = c;
    R(i, i + 1) = -s;
    R(i + 1, i) = s;
    R(i + 1, i + 1) = c;
  }
  return R;
}

double adapter_scale(int U, int d_k) {
  require(U >= 1 && d_k >= 1, "adapter_scale: U {} and d_k {} must be >= 1", U, d_k);
  return std::pow(2.0 * U / d_k, 0.25);
}

double adapter_loss(const AdapterTeacher& t, const MatrixXd& WQt, const MatrixXd& WKt,
                    const std::vector<double>& student_freqs, bool scale_opt, double* c_out) {
  const Eigen::Index dm = t.WQ.cols();
  const int dk = static_cast<int>(t.WQ.rows());
  require(WQt.cols() == dm && WKt.cols() == dm && WQt.rows() == WKt.rows(),
          "student projections must be n x d_model with d_model = {} (got {}x{} and {}x{})", dm, WQt.rows(), WQt.cols(),
          WKt.rows(), WKt.cols());
  const int n = static_cast<int>(WQt.rows());
  if (!student_freqs.empty())
    require(static_cast<int>(student_freqs.size()) * 2 == n, "{} student frequencies need 2U = {} rows (got {})",
            student_freqs.size(), 2 * student_freqs.size(), n);
  const SqrtPair sq = spd_sqrt(t.SigmaQ, "Sigma_Q"), sk = spd_sqrt(t.SigmaK, "Sigma_K");
  // B^_T − c B^_S = Z_Qᵀ diag(R_T, −c R_S) Z_K with Z_Q = [W_Q; W~_Q] Σ_Q^{1/2}; after thin QR Z_Qᵀ = Q_Q R_Q its
  // Frobenius norm is that of the small core R_Q diag(R_T, −c R_S) R_Kᵀ (no cancellation against the teacher).
  MatrixXd ZQ(dk + n, dm), ZK(dk + n, dm);
  ZQ << t.WQ * sq.half, WQt * sq.half;
  ZK << t.WK * sk.half, WKt * sk.half;
  MatrixXd QQ, RQ, QK, RK;
  thin_qr(ZQ, QQ, RQ);
  thin_qr(ZK, QK, RK);
  auto cores = [&](double d, MatrixXd& T, MatrixXd& S) {
    T = RQ.leftCols(dk) * block_rotation(t.freqs, d, dk) * RK.leftCols(dk).transpose();
    S = RQ.rightCols(n) * block_rotation(student_freqs, d, n) * RK.rightCols(n).transpose();
  };
  MatrixXd T, S;
  double c = 1.0;
  if (scale_opt) {
    double ts = 0, ss = 0;
    for (std::size_t i = 0; i < t.deltas.size(); ++i) {
      if (t.prob[i] == 0) continue;
      cores(t.deltas[i], T, S);
      ts += t.prob[i] * T.cwiseProduct(S).sum();
      ss += t.prob[i] * S.squaredNorm();
    }
    c = ss > 0 ? ts / ss : 0.0;
  }
  if (c_out) *c_out = c;
  double loss = 0;
  for (std::size_t i = 0; i < t.deltas.size(); ++i) {
    if (t.prob[i] == 0) continue;
    cores(t.deltas[i], T, S);
    loss += t.prob[i] * (T - c * S).squaredNorm();
  }
  return loss;
}

AdapterResult cape_adapter(const AdapterTeacher& t, int dp, int U) {
  t.validate();
  const Eigen::Index dm = t.WQ.cols();
  const int dk = static_cast<int>(t.WQ.rows());
  const auto nu = cape_frequencies(dp, U);
  const int nb = 2 * U;
  // Gram of the basis φ(Δ) and the frequency moments E_b = E_p[φ_b(Δ) R_T(Δ)] (cores of E_p[φ_b B^_T]).
  MatrixXd G = MatrixXd::Zero(nb, nb);
  std::vector<MatrixXd> E(nb, MatrixXd::Zero(dk, dk));
  for (std::size_t i = 0; i < t.deltas.size(); ++i) {
    const double d = t.deltas[i], p = t.prob[i];
    Eigen::VectorXd phi(nb);
    for (int u = 0; u < U; ++u) {
      phi(2 * u) = std::cos(nu[u] * d);
      phi(2 * u + 1) = std::sin(nu[u] * d);
    }
    G += p * phi * phi.transpose();
    const MatrixXd RT = block_rotation(t.freqs, d, dk);
    for (int b = 0; b < nb; ++b) E[b] += p * phi(b) * RT;
  }
  const MatrixXd Gp = pinv(G);
  std::vector<MatrixXd> Cc(nb, MatrixXd::Zero(dk, dk));  // cores of X*_a (eq. 31)
  for (int a = 0; a < nb; ++a)
    for (int b = 0; b < nb; ++b) Cc[a] += Gp(a, b) * E[b];

  const SqrtPair sq = spd_sqrt(t.SigmaQ, "Sigma_Q"), sk = spd_sqrt(t.SigmaK, "Sigma_K");
  const MatrixXd AQ = t.WQ * sq.half, AK = t.WK * sk.half;
  MatrixXd QQ, RQ, QK, RK;
  thin_qr(AQ, QQ, RQ);
  thin_qr(AK, QK, RK);

  AdapterResult r;
  r.mode = "cape";
  r.WQt = MatrixXd::Zero(nb, dm);
  r.WKt = MatrixXd::Zero(nb, dm);
  for (int u = 0; u < U; ++u) {
    // M_u = X*_{2u} + i X*_{2u+1} = A_Qᵀ (C_{2u} + i C_{2u+1}) A_K = Q_Q [R_Q (·) R_Kᵀ] Q_Kᵀ.
    const MatrixXcd core = RQ.cast<std::complex<double>>() *
                           (Cc[2 * u].cast<std::complex<double>>() +
                            std::complex<double>(0, 1) * Cc[2 * u + 1].cast<std::complex<double>>()) *
                           RK.transpose().cast<std::complex<double>>();
    Eigen::JacobiSVD<MatrixXcd> svd(core, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const double sigma = svd.singularValues()(0);
    r.sigma.push_back(sigma);
    const Eigen::VectorXcd l = QQ.cast<std::complex<double>>() * svd.matrixU().col(0);
    const Eigen::VectorXcd rr = QK.cast<std::complex<double>>() * svd.matrixV().col(0);
    const double sg = std::sqrt(sigma);
    r.WQt.row(2 * u) = sg * l.real().transpose() * sq.inv_half;
    r.WQt.row(2 * u + 1) = sg * l.imag().transpose() * sq.inv_half;
    r.WKt.row(2 * u) = sg * rr.real().transpose() * sk.inv_half;
    r.WKt.row(2 * u + 1) = sg * rr.imag().transpose() * sk.inv_half;
  }
  r.loss = adapter_loss(t, r.WQt, r.WKt, nu);
  r.teacher_energy = adapter_loss(t, MatrixXd::Zero(nb, dm), MatrixXd::Zero(nb, dm), nu);
  // Relaxed (unconstrained) frequency projection: E || A_Qᵀ (R_T(Δ) − Σ_a φ_a(Δ) C_a) A_K ||².
  {
    double rl = 0;
    for (std::size_t i = 0; i < t.deltas.size(); ++i) {
      const double d = t.deltas[i];
      MatrixXd D = block_rotation(t.freqs, d, dk);
      for (int u = 0; u < U; ++u) D -= std::cos(nu[u] * d) * Cc[2 * u] + std::sin(nu[u] * d) * Cc[2 * u + 1];
      rl += t.prob[i] * (RQ * D * RK.transpose()).squaredNorm();
    }
    r.relaxed_loss = rl;
  }
  finish_adapters(t, U, r);
  return r;
}

AdapterResult nope_adapter(const AdapterTeacher& t, int U) {
  t.validate();
  const Eigen::Index dm = t.WQ.cols();
  const int dk = static_cast<int>(t.WQ.rows());
  const int nb = 2 * U;
  MatrixXd Rbar = MatrixXd::Zero(dk, dk);  // core of B^_0 = E_p[B^_T(Δ)]
  for (std::size_t i = 0; i < t.deltas.size(); ++i) Rbar += t.prob[i] * block_rotation(t.freqs, t.deltas[i], dk);
  const SqrtPair sq = spd_sqrt(t.SigmaQ, "Sigma_Q"), sk = spd_sqrt(t.SigmaK, "Sigma_K");
  const MatrixXd AQ = t.WQ * sq.half, AK = t.WK * sk.half;
  MatrixXd QQ, RQ, QK, RK;
  thin_qr(AQ, QQ, RQ);
  thin_qr(AK, QK, RK);
  Eigen::JacobiSVD<MatrixXd> svd(RQ * Rbar * RK.transpose(), Eigen::ComputeThinU | Eigen::ComputeThinV);
  const int r_keep = std::min<int>({nb, dk, static_cast<int>(svd.singularValues().size())});
  AdapterResult r;
  r.mode = "nope";
  r.WQt = MatrixXd::Zero(nb, dm);
  r.WKt = MatrixXd::Zero(nb, dm);
  for (int i = 0; i < r_keep; ++i) {
    const double s = svd.singularValues()(i);
    r.sigma.push_back(s);
    const Eigen::VectorXd ui = QQ * svd.matrixU().col(i), vi = QK * svd.matrixV().col(i);
    r.WQt.row(i) = std::sqrt(s) * ui.transpose() * sq.inv_half;
    r.WKt.row(i) = std::sqrt(s) * vi.transpose() * sk.inv_half;
  }
  r.loss = adapter_loss(t, r.WQt, r.WKt, {});
  r.teacher_energy = adapter_loss(t, MatrixXd::Zero(nb, dm), MatrixXd::Zero(nb, dm), {});
  // Position-averaging alone (full-rank mean): E || A_Qᵀ (R_T(Δ) − R̄) A_K ||².
  {
    double rl = 0;
    for (std::size_t i = 0; i < t.deltas.size(); ++i) {
      const MatrixXd D = block_rotation(t.freqs, t.deltas[i], dk) - Rbar;
      rl += t.prob[i] * (RQ * D * RK.transpose()).squaredNorm();
    }
    r.relaxed_loss = rl;
  }
  finish_adapters(t, U, r);
  return r;
}

AdapterTeacher make_teacher(const std::string& kind, int d_model, int d_k, int dp, int U, double rope_base,
                            int delta_max, double decay, std::uint64_t seed) {
  require(kind == "cape" || kind == "nope" || kind == "rope", "--teacher must be cape, nope or rope (got '{}')", kind);
  require(d_model >= 2 && d_model <= 4096, "--d-model {} must be in [2, 4096]", d_model);
  require(d_k >= 2 && d_k <= d_model, "--d-k {} must be in [2, d_model = {}]", d_k, d_model);
  require(dp >= 2 && U >= 1 && 2 * U <= d_model, "--dp {} must be >= 2 and --U {} in [1, d_model/2]", dp, U);
  require(delta_max >= 0 && delta_max <= 1000000, "--delta-max {} must be in [0, 1e6]", delta_max);
  require(std::isfinite(decay) && decay >= 0, "--delta-decay {} must be a finite number >= 0 (0 = uniform)", decay);
  AdapterTeacher t;
  t.kind = kind;
  auto gauss = [&](std::uint64_t block, Eigen::Index rows, Eigen::Index cols, double sd) {
    MatrixXd m(rows, cols);
    for (Eigen::Index i = 0; i < rows; ++i)
      for (Eigen::Index j = 0; j < cols; ++j)
        m(i, j) = sd * rng::normal(seed, kStreamAdapterTeacher, (block << 40) + static_cast<std::uint64_t>(i * cols + j));
    return m;
  };
  if (kind == "cape") {
    require(d_k == 2 * U, "--teacher cape is realisable only with d_k = 2U = {} (got --d-k {})", 2 * U, d_k);
    t.freqs = cape_frequencies(dp, U);
  } else if (kind == "rope") {
    require(d_k % 2 == 0, "--teacher rope needs an even --d-k (got {})", d_k);
    require(std::isfinite(rope_base) && rope_base > 1, "--rope-base {} must be a finite number > 1", rope_base);
    for (int m = 0; m < d_k / 2; ++m) t.freqs.push_back(std::pow(rope_base, -2.0 * m / d_k));
  }
  const double sd = 1.0 / std::sqrt(static_cast<double>(d_model));
  t.WQ = gauss(0, d_k, d_model, sd);
  t.WK = gauss(1, d_k, d_model, sd);
  if (kind == "nope" && d_k > 2 * U) {  // W_K = E F with E a rank-2U orthogonal projector: rank(W_Qᵀ W_K) <= 2U
    Eigen::HouseholderQR<MatrixXd> qr(gauss(4, d_k, 2 * U, 1.0));
    const MatrixXd Q = qr.householderQ() * MatrixXd::Identity(d_k, 2 * U);
    t.WK = Q * Q.transpose() * t.WK;
  }
  const MatrixXd LQ = gauss(2, d_model, d_model, 1.0), LK = gauss(3, d_model, d_model, 1.0);
  t.SigmaQ = LQ * LQ.transpose() / d_model + 0.1 * MatrixXd::Identity(d_model, d_model);
  t.SigmaK = LK * LK.transpose() / d_model + 0.1 * MatrixXd::Identity(d_model, d_model);
  t.SigmaQ = 0.5 * (t.SigmaQ + t.SigmaQ.transpose()).eval();
  t.SigmaK = 0.5 * (t.SigmaK + t.SigmaK.transpose()).eval();
  double sum = 0;
  for (int d = -delta_max; d <= 0; ++d) {
    t.deltas.push_back(d);
    t.prob.push_back(decay > 0 ? std::exp(d / decay) : 1.0);
    sum += t.prob.back();
  }
  for (double& p : t.prob) p /= sum;
  t.validate();
  return t;
}

}  // namespace memcap::ramnet
