// CPU (float64) trial of the capacity protocol, tiled over query rows so the K x K coefficient
// matrix is never held: per row tile, A = k(Q_t, U) by closed-form GEMMs; pSNR sums, coherence,
// the closed-form readout A V, the state readout psi(Q_t)^T S (softmax: a streaming KV-cache
// pass with a running max) and the decode GEMM against the value rows. Memory O(tile*K + n_psi*d_v) per
// thread: query tiles run in parallel and their results are combined in tile order (thread-count independent).
#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kata/capacity.hpp"

namespace memcap::kata {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

constexpr std::int64_t kTileBudget = std::int64_t(1) << 20;  // coefficients per tile (8 MiB: below glibc's mmap threshold, so tiles reuse heap pages)

// Softmax state path: o_i = sum_j e^{z_ij/tau} v_j / sum_j e^{z_ij/tau}, keys streamed in blocks with
// a running maximum (the flash-attention recurrence), independent of the closed-form tile.
MatrixXd softmax_cache_readout(const MatrixXd& Qt, const MatrixXd& U, const MatrixXd& V, double tau,
                               std::int64_t block) {
  const Eigen::Index t = Qt.rows(), K = U.rows();
  VectorXd run_max = VectorXd::Constant(t, -std::numeric_limits<double>::infinity());
  VectorXd den = VectorXd::Zero(t);
  MatrixXd num = MatrixXd::Zero(t, V.cols());
  for (Eigen::Index c0 = 0; c0 < K; c0 += block) {
    const Eigen::Index cb = std::min<Eigen::Index>(block, K - c0);
    MatrixXd z = (Qt * U.middleRows(c0, cb).transpose()) / tau;
    for (Eigen::Index r = 0; r < t; ++r) {
      const double m_new = std::max(run_max(r), z.row(r).maxCoeff());
      const double rescale = std::exp(run_max(r) - m_new);  // exp(-inf) = 0 on the first block
      z.row(r) = (z.row(r).array() - m_new).exp().matrix();
      num.row(r) *= rescale;
      den(r) = den(r) * rescale + z.row(r).sum();
      run_max(r) = m_new;
    }
    num.noalias() += z * V.middleRows(c0, cb);
  }
  return den.cwiseInverse().asDiagonal() * num;
}

}  // namespace

TrialMetrics evaluate_trial_cpu(const CapacityKernel& map, const MatrixXd& U, const MatrixXd& Q, const Values& values,
                                Readout readout, std::int64_t tile_rows) {
  const Eigen::Index K = U.rows(), d_v = values.V.cols(), n_dec = values.decode.rows();
  require(K >= 1 && Q.rows() == K && U.cols() == map.params().d && Q.cols() == U.cols(),
          "capacity trial: keys {}x{} and queries {}x{} must both be K x d_head with d_head = {}", U.rows(), U.cols(),
          Q.rows(), Q.cols(), map.params().d);
  require(values.V.rows() == K && static_cast<Eigen::Index>(values.target.size()) == K,
          "capacity trial: {} values for {} keys", values.V.rows(), K);
  const bool softmax = map.is_softmax();
  const bool normalized = readout == Readout::normalized;
  const bool same = (&Q == &U) || Q == U;
  const std::int64_t n_psi = map.feature_dim();
  std::int64_t t = tile_rows > 0 ? tile_rows
                                 : kTileBudget / std::max<std::int64_t>({K, n_psi, n_dec, std::int64_t(1)});
  t = std::clamp<std::int64_t>(t, 1, K);

  // Write: S = Psi(U)^T V, Z = Psi(U)^T 1, key tiles at a time (float64 accumulation).
  MatrixXd S;
  VectorXd Z;
  if (!softmax) {
    S = MatrixXd::Zero(n_psi, d_v);
    Z = VectorXd::Zero(n_psi);
    for (Eigen::Index c0 = 0; c0 < K; c0 += t) {
      const Eigen::Index cb = std::min<Eigen::Index>(t, K - c0);
      const MatrixXd Psi = map.features(U.middleRows(c0, cb));
      S.noalias() += Psi.transpose() * values.V.middleRows(c0, cb);
      Z.noalias() += Psi.colwise().sum().transpose();
    }
  }
  const VectorXd vnorm = values.V.rowwise().norm();
  // Coherence normalizers: k(u,u) (softmax: log k(u,u) and the row shifts used by tile()).
  const VectorXd self = map.self(U);
  const double umax = U.rowwise().norm().maxCoeff();
  const VectorXd unorm = U.rowwise().norm();
  const VectorXd inv_sqrt_self = softmax ? VectorXd() : self.cwiseSqrt().cwiseInverse();

  TrialMetrics out;
  out.psnr.resize(K);
  // Query tiles run in parallel; each writes its own pSNR rows and its own slot of the per-tile maxima and
  // counts, which are folded in tile order afterwards, so the result does not depend on the thread count.
  const Eigen::Index ntiles = (K + t - 1) / t;
  std::vector<double> tile_coherence(static_cast<std::size_t>(ntiles), 0.0), tile_dev(tile_coherence);
  std::vector<std::int64_t> tile_correct(static_cast<std::size_t>(ntiles), 0);
  std::vector<std::exception_ptr> tile_error(static_cast<std::size_t>(ntiles));
  // One query tile [r0, r0 + t): its pSNR rows, and its coherence, deviation and correct-count.
  auto run_tile = [&](Eigen::Index r0, double& coherence, double& max_dev, std::int64_t& correct) {
    const Eigen::Index tb = std::min<Eigen::Index>(t, K - r0);
    const MatrixXd Qt = Q.middleRows(r0, tb);
    const MatrixXd A = map.tile(Qt, U);
    // pSNR: matched index is the query's own key.
    for (Eigen::Index r = 0; r < tb; ++r) {
      const Eigen::Index i = r0 + r;
      const double a = A(r, i);
      const double dist = A.row(r).head(i).squaredNorm() + A.row(r).tail(K - i - 1).squaredNorm();
      out.psnr(i) = dist > 0 ? a * a / dist : std::numeric_limits<double>::infinity();
    }
    // Coherence over key pairs (from the key-key tile).
    {
      const MatrixXd Akey = same ? MatrixXd() : map.tile(U.middleRows(r0, tb), U);
      const MatrixXd& Ak = same ? A : Akey;
      for (Eigen::Index r = 0; r < tb; ++r) {
        const Eigen::Index i = r0 + r;
        Eigen::ArrayXd c;
        if (softmax) {  // log domain: log A_ij + shift_i/tau - (log k(u_i,u_i) + log k(u_j,u_j))/2
          c = (Ak.row(r).transpose().array().log() + (unorm(i) * umax / map.params().tau - 0.5 * self(i)) -
               0.5 * self.array())
                  .exp();
        } else {
          c = Ak.row(r).transpose().array().abs() * inv_sqrt_self.array() * inv_sqrt_self(i);
        }
        c(i) = 0.0;
        coherence = std::max(coherence, c.maxCoeff());
      }
    }
    // Closed-form readout and the state readout.
    const MatrixXd Ncf = A * values.V;
    const VectorXd Dcf = A.rowwise().sum();
    const VectorXd scale = A.cwiseAbs() * vnorm;  // sum_j |A_ij| |v_j|: the summation error scale
    MatrixXd Ost;
    if (softmax) {
      Ost = softmax_cache_readout(Qt, U, values.V, map.params().tau, t);
    } else {
      const MatrixXd Psi_q = map.features(Qt);
      Ost = Psi_q * S;
      if (normalized) Ost = (Psi_q * Z).cwiseInverse().asDiagonal() * Ost;
    }
    for (Eigen::Index r = 0; r < tb; ++r) {
      if (!(scale(r) > 0)) continue;
      double dev;
      if (normalized || softmax) {
        const Eigen::RowVectorXd ocf = Ncf.row(r) / Dcf(r);
        dev = (Ost.row(r) - ocf).norm() / (scale(r) / std::abs(Dcf(r)));
      } else {
        dev = (Ost.row(r) - Ncf.row(r)).norm() / scale(r);
      }
      if (!std::isfinite(dev)) dev = std::numeric_limits<double>::infinity();
      max_dev = std::max(max_dev, dev);
    }
    // Decode against the stored values (or the codebook).
    const MatrixXd scores = Ost * values.decode.transpose();
    for (Eigen::Index r = 0; r < tb; ++r) {
      Eigen::Index best = 0;
      scores.row(r).maxCoeff(&best);
      if (best == values.target[r0 + r]) ++correct;
    }
  };
#pragma omp parallel for schedule(dynamic) if (ntiles > 1)
  for (Eigen::Index k = 0; k < ntiles; ++k) {
    const auto slot = static_cast<std::size_t>(k);
    try {
      run_tile(k * t, tile_coherence[slot], tile_dev[slot], tile_correct[slot]);
    } catch (...) {
      tile_error[slot] = std::current_exception();
    }
  }
  for (const auto& e : tile_error)
    if (e) std::rethrow_exception(e);
  double coherence = 0.0, max_dev = 0.0;
  for (std::size_t k = 0; k < tile_error.size(); ++k) {
    coherence = std::max(coherence, tile_coherence[k]);
    max_dev = std::max(max_dev, tile_dev[k]);
    out.correct += tile_correct[k];
  }
  (void)n_dec;
  out.coherence = coherence;
  out.max_deviation = max_dev;
  return out;
}

}  // namespace memcap::kata
