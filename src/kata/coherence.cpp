// Mutual coherence of a dictionary in raw space and in a feature map's space, computed block pair
// by block pair (one GEMM each), so memory stays O(block²) instead of O(N²). Within a block pair the
// product and the column scans run in parallel on fixed column blocks; the per-column maxima are folded
// in column order, so the value and the reported pair do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/parallel_product.hpp"
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
  Eigen::MatrixXd G;
  std::vector<CoherenceResult> col_best;
  for (std::int64_t i0 = 0; i0 < N; i0 += block) {
    const std::int64_t ni = std::min(block, N - i0);
    for (std::int64_t j0 = i0; j0 < N; j0 += block) {
      const std::int64_t nj = std::min(block, N - j0);
      parallel_product(G, rows.middleRows(i0, ni), rows.middleRows(j0, nj).transpose());
      // Column j's first maximum over i (upper triangle, no diagonal), then the columns in order: the
      // same scan order, hence the same pair on ties, as one sequential pass.
      col_best.assign(static_cast<std::size_t>(nj), CoherenceResult{});
#pragma omp parallel for schedule(static) if (ni * nj > 65536)
      for (std::int64_t j = 0; j < nj; ++j) {
        CoherenceResult& cb = col_best[static_cast<std::size_t>(j)];
        for (std::int64_t i = 0; i < ni; ++i) {
          if (i0 + i >= j0 + j) continue;  // upper triangle, no diagonal
          const double v = std::abs(G(i, j)) * inv(i0 + i) * inv(j0 + j);
          if (v > cb.value || cb.i < 0) cb = {v, i0 + i, j0 + j};
        }
      }
      for (const CoherenceResult& cb : col_best)
        if (cb.i >= 0 && (cb.value > best.value || best.i < 0)) best = cb;
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
  std::vector<double> col_best;
  for (std::int64_t i0 = 0; i0 < N; i0 += block) {
    const std::int64_t ni = std::min(block, N - i0);
    const Eigen::MatrixXd A = rows.middleRows(i0, ni);
    for (std::int64_t j0 = i0; j0 < N; j0 += block) {
      const std::int64_t nj = std::min(block, N - j0);
      const Eigen::MatrixXd B = rows.middleRows(j0, nj);
      // Columns of the kernel block in fixed chunks, each chunk computed and scanned by one thread.
      const std::int64_t chunks = (nj + kProductBlock - 1) / kProductBlock;
      col_best.assign(static_cast<std::size_t>(nj), 0.0);
#pragma omp parallel for schedule(dynamic) if (chunks > 1 && ni * nj > 65536)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t c0 = c * kProductBlock, nc = std::min<std::int64_t>(kProductBlock, nj - c0);
        const Eigen::MatrixXd K =
            map.is_softmax() ? Eigen::MatrixXd(A * B.middleRows(c0, nc).transpose()) : map.kernel_matrix(A, B.middleRows(c0, nc));
        for (std::int64_t jj = 0; jj < nc; ++jj) {
          const std::int64_t j = c0 + jj;
          double cb = 0;
          for (std::int64_t i = 0; i < ni; ++i) {
            if (i0 + i >= j0 + j) continue;
            double v;
            if (map.is_softmax())
              v = std::exp((K(i, jj) - 0.5 * (sq(i0 + i) + sq(j0 + j))) / map.tau());
            else
              v = std::abs(K(i, jj)) * inv(i0 + i) * inv(j0 + j);
            cb = std::max(cb, v);
          }
          col_best[static_cast<std::size_t>(j)] = cb;
        }
      }
      for (double cb : col_best) best = std::max(best, cb);
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
