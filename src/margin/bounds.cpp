// Evaluation of the §3.4 bounds on measured statistics (all constants explicit, see bounds.hpp)
// and the bilinear kernel's Lipschitz constant L_bil of §3.2.
#include "margin/bounds.hpp"

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace memcap::margin {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
double sqrt_or_nan(double x) { return x >= 0 ? std::sqrt(x) : kNaN; }
}  // namespace

BoundSet evaluate_bounds(const GeometryStats& s, double m, double d, const BoundConstants& k,
                         const NoiseInputs* noise) {
  require(m > 0 && d > 1, "bounds need width m > 0 and dimension d > 1 (got m={}, d={})", m, d);
  require(s.facts >= 2, "bounds need at least 2 facts");
  const double F = static_cast<double>(s.facts), P = static_cast<double>(s.values);
  const double C = k.c, logF = std::log(F);
  BoundSet b;
  const double L = std::log(k.c0 * F * F / k.delta);
  b.log_term = L;

  b.eq9 = 1.0 - C * std::sqrt(F * logF / (m * d));
  b.eq56 = 1.0 - C * std::sqrt(L / m) - C * std::sqrt(L / (d - 1.0)) - C * std::sqrt(L) * std::sqrt(F / (d * d * d)) -
           C * std::sqrt(L) * std::sqrt(F / (m * d));
  b.cor_b31 = 1.0 - C * std::sqrt(F * std::log(F / k.delta) / (m * d));

  // Theorem 4.3 (C = ½ as stated) with the penalty statistics.
  const double sk = std::sqrt(s.e_k), sv = std::sqrt(s.e_v);
  b.p_key = sk / std::sqrt(F / m);
  b.p_val = sv / std::sqrt(F / d);
  b.p_align = s.kappa / std::sqrt(logF / F);
  const double sig_den = 1.0 - std::sqrt(logF / d);
  b.s_sig = sig_den > 0 ? s.k_min_diag * s.v_min / sig_den : kNaN;
  b.thm43 = 0.5 * b.s_sig - b.p_key * b.p_val * b.p_align * std::sqrt(F * logF / (m * d));
  b.capacity_w = (b.s_sig > 0) ? F * logF * std::pow(b.p_key * b.p_val * b.p_align / b.s_sig, 2) : kNaN;

  // Table 2 ladder.
  const double eps_v = C * std::sqrt(L / (d - 1.0)), eps_k = std::sqrt(L / m);
  b.ladder_rkrv = 1.0 - C * std::sqrt(F * L / (m * d));
  b.ladder_akrv = s.k_min_diag * (1.0 - eps_v) - s.k_max_off - C * sk * std::sqrt(L / d);
  b.ladder_akrv_full = F > 2 ? s.k_min_diag * (1.0 - eps_v) - s.k_max_off -
                                   C * sk * std::sqrt(L / (d - 1.0)) * std::sqrt(1.0 + L / (F - 2.0))
                             : kNaN;
  b.ladder_rkav = (1.0 - C * eps_k) * s.v_min - C * (s.b_y + sv * sqrt_or_nan(s.l_v)) * std::sqrt(L / m);
  b.ladder_akav = s.k_min_diag * s.v_min - sk * sv * s.kappa;
  b.eq44_abs = s.k_min_diag * s.v_min - sk * sv * s.kappa_abs;

  // Deterministic Eq. 43 and the signal bound.
  b.signal = s.k_min_diag * s.v_min - s.k_max_off * s.v_max;
  b.crosstalk_trunc = std::sqrt(s.e_k_trunc) * std::sqrt(s.e_v_trunc) * s.kappa_trunc;
  b.eq43 = b.signal - b.crosstalk_trunc;

  // Welch/Frobenius (Lemma B.34, Cor. B.35) with rank r = min(rank bound, F).
  const double r = std::min(m, F);
  b.welch_ecol_lower = (s.trace * s.trace / r - s.diag_sq_sum) / F;
  const double eps_diag = std::max(std::abs(s.k_min_diag - 1.0), std::abs(s.k_max_diag - 1.0));
  b.welch_upper = (1.0 + eps_diag) - C * std::sqrt(std::max(b.welch_ecol_lower, 0.0) * logF / d);
  b.welch_upper_asym = 1.0 - C * std::sqrt((F / r) * logF / d);

  // Information-theoretic lower bound (Thm 2.4).
  b.info_bits = F * std::log2(P);
  b.info_min_params = b.info_bits / k.bits_per_param;
  b.info_ratio = m * d / b.info_bits;

  if (noise) {
    const double n = F, Ln = std::log(4.0 * n / k.delta), Lc = std::log(4.0 * n * n / k.delta);
    b.noisy_clean = 1.0 - 2.0 * std::sqrt(6.0) * std::sqrt(n * Lc / (d * d * d)) - 8.0 * std::sqrt(n * Lc / (m * d)) -
                    std::sqrt(2.0) * std::sqrt(Lc / d) - std::sqrt(18.0) * std::sqrt(Ln / m) - 8.0 * Ln / m -
                    4.0 * Lc / (d * d);
    b.noisy_degradation = noise->l_bil * noise->eps * (1.0 + 2.0 * std::sqrt(2.0) * std::sqrt(n * Lc / d));
    b.noisy_code = b.noisy_clean - b.noisy_degradation;
    b.eq74 = noise->clean_min_margin - C * noise->l_bil * noise->eps * std::sqrt(F * L / d);
    b.eq76_eps_max = noise->l_bil > 0 ? noise->clean_min_margin / (C * noise->l_bil) * std::sqrt(d / (F * L)) : kNaN;
  } else {
    b.noisy_clean = b.noisy_degradation = b.noisy_code = b.eq74 = b.eq76_eps_max = kNaN;
  }
  return b;
}

std::vector<std::pair<std::string, double>> bound_columns(const BoundSet& b) {
  return {{"bound_log_term", b.log_term},
          {"bound_eq9", b.eq9},
          {"bound_eq56", b.eq56},
          {"bound_cor_b31", b.cor_b31},
          {"bound_thm43", b.thm43},
          {"p_key", b.p_key},
          {"p_val", b.p_val},
          {"p_align", b.p_align},
          {"s_sig", b.s_sig},
          {"bound_capacity_w", b.capacity_w},
          {"bound_ladder_rkrv", b.ladder_rkrv},
          {"bound_ladder_akrv", b.ladder_akrv},
          {"bound_ladder_akrv_full", b.ladder_akrv_full},
          {"bound_ladder_rkav", b.ladder_rkav},
          {"bound_ladder_akav", b.ladder_akav},
          {"bound_eq44", b.ladder_akav},
          {"bound_eq44_abs", b.eq44_abs},
          {"bound_eq43", b.eq43},
          {"bound_signal", b.signal},
          {"bound_crosstalk_trunc", b.crosstalk_trunc},
          {"bound_welch_ecol_lower", b.welch_ecol_lower},
          {"bound_welch_upper", b.welch_upper},
          {"bound_welch_upper_asym", b.welch_upper_asym},
          {"bound_info_bits", b.info_bits},
          {"bound_info_min_params", b.info_min_params},
          {"bound_info_ratio", b.info_ratio},
          {"bound_noisy_clean", b.noisy_clean},
          {"bound_noisy_degradation", b.noisy_degradation},
          {"bound_noisy_code", b.noisy_code},
          {"bound_eq74", b.eq74},
          {"bound_eq76_eps_max", b.eq76_eps_max}};
}

double operator_norm(const Eigen::MatrixXd& a) {
  if (a.size() == 0) return 0.0;
  const Eigen::MatrixXd g = a.rows() >= a.cols() ? Eigen::MatrixXd(a.transpose() * a) : Eigen::MatrixXd(a * a.transpose());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(g, Eigen::EigenvaluesOnly);
  return std::sqrt(std::max(es.eigenvalues().maxCoeff(), 0.0));
}

double bilinear_lipschitz(const Eigen::MatrixXd& a0, const Eigen::MatrixXd& a1, const Eigen::MatrixXd& keys,
                          const Eigen::MatrixXd& noisy, double scale) {
  require(a0.rows() == a1.rows() && a0.cols() == a1.cols() && a0.rows() >= 1,
          "A0 and A1 must both be m×d (got {}×{} and {}×{})", a0.rows(), a0.cols(), a1.rows(), a1.cols());
  require(keys.cols() == a0.cols() && (noisy.size() == 0 || noisy.cols() == a0.cols()),
          "keys/noisy queries must have d = {} columns", a0.cols());
  const double m = static_cast<double>(a0.rows());
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(m);
  const double op0 = operator_norm(a0), op1 = operator_norm(a1);
  const Eigen::MatrixXd p0 = keys * a0.transpose(), p1 = keys * a1.transpose();   // F×m
  const double bg = std::sqrt(((p0.array() * p1.array()).square().rowwise().sum()).maxCoeff()) * s;
  auto jac = [&](const Eigen::MatrixXd& z) {
    if (z.rows() == 0) return 0.0;
    const Eigen::MatrixXd z0 = z * a0.transpose(), z1 = z * a1.transpose();
    const Eigen::VectorXd inf0 = z0.cwiseAbs().rowwise().maxCoeff(), inf1 = z1.cwiseAbs().rowwise().maxCoeff();
    return ((inf1 * op0 + inf0 * op1) * s).maxCoeff();
  };
  return bg * std::max(jac(keys), jac(noisy));
}

}  // namespace memcap::margin
