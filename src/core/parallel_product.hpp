// Deterministic parallel matrix products. BLAS runs single-threaded (core/threads.hpp) because a
// threaded BLAS call sums in a thread-count-dependent order; these helpers cut a product into blocks of
// result rows or columns whose boundaries depend only on the shapes, compute each block with one
// single-threaded BLAS call and spread the blocks over the OpenMP threads. Every element of the result is
// therefore the same for any --threads (though not necessarily equal to one unblocked call's result).
#pragma once
#include <Eigen/Dense>
#include <algorithm>

namespace memcap {

// Result rows or columns per block: big enough for BLAS to run at full speed, small enough to share a
// typical tile among many threads.
constexpr Eigen::Index kProductBlock = 128;

// out = lhs · rhs, resized. Blocks run along the longer side of the result. out must not alias lhs or rhs.
template <class Out, class Lhs, class Rhs>
void parallel_product(Out& out, const Lhs& lhs, const Rhs& rhs) {
  const Eigen::Index rows = lhs.rows(), cols = rhs.cols();
  out.resize(rows, cols);
  const bool by_cols = cols >= rows;
  const Eigen::Index len = by_cols ? cols : rows;
  const Eigen::Index blocks = (len + kProductBlock - 1) / kProductBlock;
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(lhs.cols()) * static_cast<double>(cols);
#pragma omp parallel for schedule(dynamic) if (blocks > 1 && flops > 4e6)
  for (Eigen::Index b = 0; b < blocks; ++b) {
    const Eigen::Index s = b * kProductBlock, n = std::min(kProductBlock, len - s);
    if (by_cols)
      out.middleCols(s, n).noalias() = lhs * rhs.middleCols(s, n);
    else
      out.middleRows(s, n).noalias() = lhs.middleRows(s, n) * rhs;
  }
}

}  // namespace memcap
