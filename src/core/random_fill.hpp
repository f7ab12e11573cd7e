// Fill Eigen matrices from the counter-based streams (row-major element index = counter), so
// a matrix drawn here equals the one a CUDA kernel draws for the same (seed, stream).
#pragma once
#include <Eigen/Dense>
#include <cstdint>

namespace memcap::rng {

using MatrixXdR = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// rows x cols i.i.d. N(0,1); element (i,j) uses counter offset + i*cols + j.
Eigen::MatrixXd normal_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                              std::uint64_t stream, std::uint64_t offset = 0);
// rows x cols, each row uniform on the unit sphere S^{cols-1} (normalized Gaussian rows).
Eigen::MatrixXd sphere_rows(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                            std::uint64_t stream, std::uint64_t offset = 0);
// Uniformly random permutation of 0..n-1 (Fisher-Yates on the stream).
Eigen::VectorXi permutation(std::int64_t n, std::uint64_t seed, std::uint64_t stream);

}  // namespace memcap::rng
