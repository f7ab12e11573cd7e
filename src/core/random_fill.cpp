// Matrix fills on top of the counter-based streams (see random_fill.hpp).
#include "core/random_fill.hpp"

#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace memcap::rng {

Eigen::MatrixXd normal_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                              std::uint64_t stream, std::uint64_t offset) {
  MEMCAP_ASSERT(rows >= 0 && cols >= 0, "negative matrix shape");
  Eigen::MatrixXd m(rows, cols);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      m(i, j) = normal(seed, stream, offset + static_cast<std::uint64_t>(i * cols + j));
  return m;
}

Eigen::MatrixXd sphere_rows(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                            std::uint64_t stream, std::uint64_t offset) {
  Eigen::MatrixXd m = normal_matrix(rows, cols, seed, stream, offset);
  for (std::int64_t i = 0; i < rows; ++i) {
    const double n = m.row(i).norm();
    m.row(i) /= std::max(n, 1e-30);
  }
  return m;
}

Eigen::VectorXi permutation(std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  Eigen::VectorXi p(n);
  std::iota(p.data(), p.data() + n, 0);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(below(seed, stream, static_cast<std::uint64_t>(i),
                                                   static_cast<std::uint64_t>(i + 1)));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace memcap::rng
