// Data-dependent construction (spec §2.4, the released code's "cf_coord_whitened"): refit A1 then
// A0 by Jacobi-preconditioned CG on the normal equations of the score-matrix objective, then the
// ridge-whitened readout on the unscaled features. CG precision: float32 iff m·d > 8192.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "mlp/constructions.hpp"

namespace memcap::mlp {

namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

// Everything the operator needs, in the CG precision T.
template <typename T>
struct Problem {
  Mat<T> Pi;   // m x F
  Mat<T> K;    // F x d
  Mat<T> W0;   // d x m
  Mat<T> Gv;   // d x d  = C_fᵀ C_f
  Mat<T> M;    // m x m  = W0ᵀ Gv W0 when that is cheaper than the factored product, else empty
  T ridge;

  // Op(X) = (Π ⊙ (W0ᵀ Gv W0 Ψ(X))) K + λX,  Ψ(X) = Π ⊙ (X Kᵀ).
  void apply(const Mat<T>& X, Mat<T>& out, Mat<T>& psi, Mat<T>& u, Mat<T>& t1, Mat<T>& t2) const {
    psi.noalias() = X * K.transpose();          // m x F
    psi.array() *= Pi.array();
    if (M.size()) {
      u.noalias() = M * psi;
    } else {
      t1.noalias() = W0 * psi;                  // d x F
      t2.noalias() = Gv * t1;                   // d x F
      u.noalias() = W0.transpose() * t2;        // m x F
    }
    u.array() *= Pi.array();
    out.noalias() = u * K;                      // m x d
    out += ridge * X;
  }
};

template <typename T>
Problem<T> make_problem(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& K, const Eigen::MatrixXd& C,
                        const Eigen::MatrixXd& W0, double ridge) {
  Problem<T> p;
  p.Pi = Pi.cast<T>();
  p.K = K.cast<T>();
  p.W0 = W0.cast<T>();
  const Eigen::MatrixXd Gv = C.transpose() * C;
  p.Gv = Gv.cast<T>();
  const double m = static_cast<double>(W0.cols()), d = static_cast<double>(W0.rows());
  if (m * m < 2 * d * m + d * d) p.M = (W0.transpose() * Gv * W0).cast<T>();  // fewer flops per F column
  p.ridge = static_cast<T>(ridge);
  return p;
}

template <typename T>
CgResult run_cg(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& K, const Eigen::MatrixXd& C,
                const Eigen::MatrixXd& W0, double ridge, double tol, std::int64_t max_iter) {
  const Problem<T> p = make_problem<T>(Pi, K, C, W0, ridge);
  const Eigen::Index m = Pi.rows(), d = K.cols();
  // Right-hand side (Π ⊙ (W0ᵀ C_fᵀ)) K and the Jacobi diagonal, formed in float64 then cast.
  const Mat<T> rhs = fit_projection_rhs(Pi, K, C, W0).cast<T>();
  const Eigen::MatrixXd Gv = C.transpose() * C;
  const Eigen::VectorXd Mrr = (W0.array() * (Gv * W0).array()).colwise().sum().transpose();  // (W0ᵀGvW0)_rr
  const Eigen::MatrixXd PiSq = Pi.array().square().matrix(), KSq = K.array().square().matrix();
  Eigen::MatrixXd diag = PiSq * KSq;  // m x d: Σ_i Π[r,i]² K[i,a]²
  const double floor_val = std::max(ridge, static_cast<double>(std::numeric_limits<T>::epsilon()));
  for (Eigen::Index a = 0; a < d; ++a)
    for (Eigen::Index r = 0; r < m; ++r) diag(r, a) = std::max(Mrr[r] * diag(r, a) + ridge, floor_val);
  const Mat<T> dinv = diag.cwiseInverse().cast<T>();

  CgResult res;
  res.precision = sizeof(T) == 4 ? "float32" : "float64";
  Mat<T> X = Mat<T>::Zero(m, d), R = rhs, Z = dinv.cwiseProduct(R), P = Z, Q(m, d);
  Mat<T> psi, u, t1, t2;
  const double rhs_norm = static_cast<double>(rhs.norm());
  double rz = static_cast<double>((R.cwiseProduct(Z)).sum());
  double rnorm = rhs_norm;
  if (rhs_norm == 0) {
    res.X = Eigen::MatrixXd::Zero(m, d);
    res.converged = true;
    return res;
  }
  for (std::int64_t it = 0; it < max_iter; ++it) {
    p.apply(P, Q, psi, u, t1, t2);
    const double pq = static_cast<double>(P.cwiseProduct(Q).sum());
    if (!(pq > 0)) {
      res.curvature_abort = true;
      break;
    }
    const double alpha = rz / pq;
    X += static_cast<T>(alpha) * P;
    R -= static_cast<T>(alpha) * Q;
    res.iterations = it + 1;
    rnorm = static_cast<double>(R.norm());
    if (rnorm <= tol * rhs_norm) {
      res.converged = true;
      break;
    }
    Z = dinv.cwiseProduct(R);
    const double rz_new = static_cast<double>(R.cwiseProduct(Z).sum());
    P = Z + static_cast<T>(rz_new / rz) * P;
    rz = rz_new;
  }
  res.rel_residual = rnorm / rhs_norm;
  res.X = X.template cast<double>();
  if (!res.X.allFinite()) throw NumericError("data-dependent CG produced NaN/Inf (try cg-precision=float64)");
  return res;
}

}  // namespace

Eigen::MatrixXd fit_projection_rhs(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& K, const Eigen::MatrixXd& C,
                                   const Eigen::MatrixXd& W0) {
  Eigen::MatrixXd wc(W0.cols(), C.rows());  // m x F
  wc.noalias() = W0.transpose() * C.transpose();
  wc.array() *= Pi.array();
  Eigen::MatrixXd rhs(Pi.rows(), K.cols());
  rhs.noalias() = wc * K;
  return rhs;
}

Eigen::MatrixXd fit_projection_operator(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& K,
                                        const Eigen::MatrixXd& C, const Eigen::MatrixXd& W0, double ridge,
                                        const Eigen::MatrixXd& X) {
  Problem<double> p = make_problem<double>(Pi, K, C, W0, ridge);
  Eigen::MatrixXd out(X.rows(), X.cols()), psi, u, t1, t2;
  p.apply(X, out, psi, u, t1, t2);
  return out;
}

CgResult fit_projection(const Eigen::MatrixXd& Pi, const Eigen::MatrixXd& keys, const Eigen::MatrixXd& targets,
                        const Eigen::MatrixXd& W0, const CgOptions& o) {
  const Eigen::Index m = Pi.rows(), F = Pi.cols(), d = keys.cols();
  require(keys.rows() == F && targets.rows() == F, "fit_projection: Π is {}x{}, keys {}x{}, targets {}x{}", m, F,
          keys.rows(), keys.cols(), targets.rows(), targets.cols());
  require(W0.rows() == targets.cols() && W0.cols() == m, "fit_projection: W0 is {}x{}, expected {}x{}", W0.rows(),
          W0.cols(), targets.cols(), m);
  require(o.ridge > 0, "ridge must be > 0 (got {})", o.ridge);
  const bool f32 = o.precision == "float32" || (o.precision == "auto" && m * d > 8192);
  const double tol = o.tol > 0 ? o.tol : (f32 ? 1e-5 : 1e-10);
  const std::int64_t max_iter =
      o.max_iter > 0 ? o.max_iter : std::min<std::int64_t>(std::max<std::int64_t>(2 * m, 128), 1024);
  return f32 ? run_cg<float>(Pi, keys, targets, W0, o.ridge, tol, max_iter)
             : run_cg<double>(Pi, keys, targets, W0, o.ridge, tol, max_iter);
}

GatedMLP build_data_dependent(const FactSet& fs, std::int64_t m, std::uint64_t seed, const MethodSpec& opts) {
  auto fmap = BilinearFeatureMap::random(m, fs.d(), seed, /*scaled=*/false);  // no 1/√m in this variant
  const Eigen::MatrixXd C = fs.targets();
  Eigen::MatrixXd W0;
  {
    const Eigen::MatrixXd phi0 = fmap.apply(fs.keys);
    W0 = hebbian_readout(phi0, C);  // C_fᵀΦ0/F, fixed for both solves
  }
  CgOptions co{opts.ridge, opts.cg_tol, opts.cg_max_iter, opts.cg_precision};
  std::string note;
  auto describe = [](const CgResult& r) {
    return fmt::format("{} it{}, rel.res {:.2e}{}", r.iterations, r.converged ? "" : " (cap)", r.rel_residual,
                       r.curvature_abort ? ", curvature abort" : "");
  };
  Eigen::MatrixXd Pi(m, fs.F());
  {
    Pi.noalias() = fmap.A0 * fs.keys.transpose();  // solve for A1 with A0 fixed
    const CgResult r1 = fit_projection(Pi, fs.keys, C, W0, co);
    fmap.A1 = r1.X;
    note = fmt::format("cg {}: A1 {}", r1.precision, describe(r1));
  }
  {
    Pi.noalias() = fmap.A1 * fs.keys.transpose();  // then A0 with the new A1 fixed
    const CgResult r0 = fit_projection(Pi, fs.keys, C, W0, co);
    fmap.A0 = r0.X;
    note += fmt::format("; A0 {}", describe(r0));
  }
  Pi.resize(0, 0);
  const Eigen::MatrixXd phi1 = fmap.apply(fs.keys);  // unscaled
  auto ro = whitened_readout(phi1, C, opts.ridge);
  GatedMLP mlp = fmap.as_mlp(ro.W);
  mlp.solver_note = fmt::format("{}; readout {} {}", note, ro.dual ? "dual" : "primal", ro.solver);
  return mlp;
}

}  // namespace memcap::mlp
