// Mutual coherence of a dictionary in raw space and in a feature map's space, computed block pair
// by block pair (one GEMM each), so memory stays O(block²) instead of O(N²).
#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "kata/dictionary.hpp"

namespace memcap::kata {

CoherenceResult coherence_detail(const Eigen::MatrixXd& rows, std::int64_t block) {
  require(rows.rows() >= 2, "coherence needs at least 2 vectors (got {})", rows.rows());
  require(block >= 1, "coherence block size must be >= 1");
  require(rows.allFinite(), "coherence: the vectors contain NaN or Inf");
  const std::int64_t N = rows.rows();
  Eigen::VectorXd inv = rows.rowwise().norm();
  for (std::int64_t i = 0; i < N; ++i) {
    require(inv(i) > 0, "coherence: vector {} is zero; coherence is defined for nonzero vectors", i);
    inv(i) = 1.0 / inv(i);
  }
  CoherenceResult best;
  for (std::int64_t i0 = 0; i0 < N; i0 += block) {
    const std::int64_t ni = std::min(block, N - i0);
    for (std::int64_t j0 = i0; j0 < N; j0 += block) {
      const std::int64_t nj = std::min(block, N - j0);
      Eigen::MatrixXd G = rows.middleRows(i0, ni) * rows.middleRows(j0, nj).transpose();
      for (std::int64_t j = 0; j < nj; ++j)
        for (std::int64_t i = 0; i < ni; ++i) {
          if (i0 + i >= j0 + j) continue;  // upper triangle, no diagonal
          const double v = std::abs(G(i, j)) * inv(i0 + i) * inv(j0 + j);
          if (v > best.value || best.i < 0) best = {v, i0 + i, j0 + j};
        }
    }
  }
  return best;
}

double coherence(const Eigen::MatrixXd& rows, std::int64_t block) { return coherence_detail(rows, block).value; }

double feature_coherence(const Eigen::MatrixXd& rows, const FeatureMap& map, std::int64_t block) {
  require(rows.rows() >= 2, "feature coherence needs at least 2 vectors (got {})", rows.rows());
  require(block >= 1, "feature coherence block size must be >= 1");
  require(rows.cols() == map.input_dim(), "feature coherence: vectors have {} columns but map '{}' expects d = {}",
          rows.cols(), map.spec(), map.input_dim());
  require(rows.allFinite(), "feature coherence: the vectors contain NaN or Inf");
  const std::int64_t N = rows.rows();
  Eigen::VectorXd sq = rows.rowwise().squaredNorm();  // softmax: log K(x,x) = ‖x‖²/τ
  Eigen::VectorXd inv(N);
  if (!map.is_softmax()) {
    const Eigen::VectorXd diag = map.kernel_diag(rows);
    for (std::int64_t i = 0; i < N; ++i) {
      require(diag(i) > 0, "feature coherence under '{}': ψ(x_{}) = 0, so its direction is undefined (add eps)",
              map.spec(), i);
      inv(i) = 1.0 / std::sqrt(diag(i));
    }
  }
  double best = 0;
  for (std::int64_t i0 = 0; i0 < N; i0 += block) {
    const std::int64_t ni = std::min(block, N - i0);
    const Eigen::MatrixXd A = rows.middleRows(i0, ni);
    for (std::int64_t j0 = i0; j0 < N; j0 += block) {
      const std::int64_t nj = std::min(block, N - j0);
      const Eigen::MatrixXd B = rows.middleRows(j0, nj);
      Eigen::MatrixXd K;
      if (map.is_softmax()) K = A * B.transpose();
      else K = map.kernel_matrix(A, B);
      for (std::int64_t j = 0; j < nj; ++j)
        for (std::int64_t i = 0; i < ni; ++i) {
          if (i0 + i >= j0 + j) continue;
          double v;
          if (map.is_softmax())
            v = std::exp((K(i, j) - 0.5 * (sq(i0 + i) + sq(j0 + j))) / map.tau());
          else
            v = std::abs(K(i, j)) * inv(i0 + i) * inv(j0 + j);
          best = std::max(best, v);
        }
    }
  }
  return best;
}

std::vector<double> distinct_abs_inner_products(const Eigen::MatrixXd& rows, double tol) {
  require(rows.rows() <= 20000, "distinct inner products: {} vectors is too many (at most 20000)", rows.rows());
  const Eigen::MatrixXd G = rows * rows.transpose();
  std::set<long long> keys;
  for (std::int64_t j = 0; j < G.cols(); ++j)
    for (std::int64_t i = 0; i < j; ++i) keys.insert(std::llround(std::abs(G(i, j)) / tol));
  std::vector<double> out;
  for (auto k : keys) out.push_back(static_cast<double>(k) * tol);
  return out;
}

}  // namespace memcap::kata
