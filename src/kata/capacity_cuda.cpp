// Host side of the CUDA capacity trial: converts the float64 Eigen inputs to row-major float32,
// computes the coherence normalizers in float64 and calls kernels/kata_capacity.cu.
#if defined(MEMCAP_HAVE_CUDA)
#include "kata/capacity_cuda.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "kata_capacity.cuh"

namespace memcap::kata {
namespace {
std::vector<float> row_major_f32(const Eigen::MatrixXd& M) {
  std::vector<float> out(static_cast<std::size_t>(M.rows() * M.cols()));
  for (Eigen::Index i = 0; i < M.rows(); ++i)
    for (Eigen::Index j = 0; j < M.cols(); ++j) out[i * M.cols() + j] = static_cast<float>(M(i, j));
  return out;
}
}  // namespace

TrialMetrics evaluate_trial_cuda(const CapacityKernel& map, const Eigen::MatrixXd& U, const Eigen::MatrixXd& Q,
                                 const Values& values, Readout readout, std::int64_t tile_rows) {
  const Eigen::Index K = U.rows();
  require(K >= 1 && Q.rows() == K && U.cols() == map.params().d && Q.cols() == U.cols(),
          "capacity trial: keys {}x{} and queries {}x{} must both be K x d_head with d_head = {}", U.rows(), U.cols(),
          Q.rows(), Q.cols(), map.params().d);
  require(values.V.rows() == K && static_cast<Eigen::Index>(values.target.size()) == K,
          "capacity trial: {} values for {} keys", values.V.rows(), K);
  const std::vector<float> u = row_major_f32(U), v = row_major_f32(values.V), dec = row_major_f32(values.decode);
  const bool same = (&Q == &U) || Q == U;
  const std::vector<float> q = same ? u : row_major_f32(Q);
  // Coherence normalizers (float64): 1/sqrt(k(u,u)); softmax in log space with the tile's row shift.
  const Eigen::VectorXd self = map.self(U);
  std::vector<double> ca(K), cb(K);
  const double umax = static_cast<double>(U.rowwise().norm().maxCoeff());
  for (Eigen::Index i = 0; i < K; ++i) {
    if (map.is_softmax()) {
      ca[i] = U.row(i).norm() * umax / map.params().tau - 0.5 * self(i);
      cb[i] = -0.5 * self(i);
    } else {
      ca[i] = cb[i] = 1.0 / std::sqrt(self(i));
    }
  }
  cuda::CapacityTrialInput in;
  in.p = map.params();
  in.n_psi = map.feature_dim();
  in.normalized = readout == Readout::normalized;
  in.queries_are_keys = same;
  in.K = K;
  in.d_v = static_cast<int>(values.V.cols());
  in.n_dec = values.decode.rows();
  in.U = u.data();
  in.Q = q.data();
  in.V = v.data();
  in.dec = dec.data();
  in.target = values.target.data();
  in.key_coh_a = ca.data();
  in.key_coh_b = cb.data();
  in.tile_rows = tile_rows;
  TrialMetrics m;
  m.psnr = Eigen::VectorXd::Constant(K, std::numeric_limits<double>::quiet_NaN());  // poisoned
  cuda::CapacityTrialOutput out;
  out.psnr = m.psnr.data();
  cuda::capacity_trial(in, out);
  m.correct = out.correct;
  m.coherence = out.coherence;
  m.max_deviation = out.max_deviation;
  return m;
}

}  // namespace memcap::kata
#endif
