// Host side of log_kappa_matrix_cuda (see kappa_cuda.hpp).
#if defined(MEMCAP_HAVE_CUDA)
#include "ramnet/kappa_cuda.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "ramnet_kappa.cuh"

namespace memcap::ramnet {
namespace {

constexpr std::int64_t kTileEntries = std::int64_t(1) << 25;

// Row-major probability tables n × U·dp, built as log_kappa_matrix does (factor_log_probs, then exp).
std::vector<double> prob_table(const Params& p, const Codebook& C, double b, const Eigen::MatrixXd& X) {
  const std::int64_t n = X.rows(), W = static_cast<std::int64_t>(p.U) * p.dp;
  std::vector<double> t(static_cast<std::size_t>(n * W));
  std::vector<double> row(static_cast<std::size_t>(p.dp));
  for (std::int64_t i = 0; i < n; ++i)
    for (int u = 0; u < p.U; ++u) {
      factor_log_probs(C, b, X(i, 2 * u), X(i, 2 * u + 1), row.data());
      for (int j = 0; j < p.dp; ++j) t[static_cast<std::size_t>(i * W + u * p.dp + j)] = std::exp(row[static_cast<std::size_t>(j)]);
    }
  return t;
}

}  // namespace

void log_kappa_rows_device(int U, int dp, std::int64_t r0, std::int64_t rows, std::int64_t N, const double* Pq,
                           const double* Pk, double* G, double* L, gpu::Handles& h) {
  const std::int64_t W = static_cast<std::int64_t>(U) * dp;
  const double one = 1.0, zero = 0.0;
  for (int u = 0; u < U; ++u) {
    // Row-major G (rows × N) = Pq_u (rows × dp, stride W) · Pk_uᵀ (dp × N): cuBLAS computes Gᵀ = Pk_u Pq_uᵀ.
    MEMCAP_CUBLAS_CHECK(cublasDgemm(h.blas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(rows), dp,
                                    &one, Pk + u * dp, static_cast<int>(W), Pq + (r0 * W + u * dp),
                                    static_cast<int>(W), &zero, G, static_cast<int>(N)));
    cuda::log_kappa_accumulate(G, rows * N, dp, u == 0, L, h.stream().get());
  }
}

Eigen::MatrixXd log_kappa_matrix_cuda(const Params& p, const Codebook& C, const Eigen::MatrixXd& Q,
                                      const Eigen::MatrixXd& K, gpu::Handles& h) {
  validate(p);
  require(Q.cols() == 2 * p.U && K.cols() == 2 * p.U, "queries and keys must have 2U = {} columns (got {} and {})",
          2 * p.U, Q.cols(), K.cols());
  require(C.cols() == p.dp, "codebook has {} codes, dp = {}", C.cols(), p.dp);
  const std::int64_t n = Q.rows(), N = K.rows(), W = static_cast<std::int64_t>(p.U) * p.dp;
  Eigen::MatrixXd out(n, N);
  if (n == 0 || N == 0) return out;
  const std::int64_t T = std::min<std::int64_t>(n, std::max<std::int64_t>(1, kTileEntries / N));
  gpu::require_device_memory(static_cast<std::size_t>(8 * ((n + N) * W + 2 * T * N)), "log_kappa_matrix_cuda");
  const std::vector<double> pq = prob_table(p, C, p.beta_r, Q), pk = prob_table(p, C, p.beta_w, K);
  const gpu::Stream& st = h.stream();
  gpu::Tensor dq({n, W}, gpu::DType::f64), dk({N, W}, gpu::DType::f64), G({T, N}, gpu::DType::f64),
      L({T, N}, gpu::DType::f64);
  dq.upload(pq.data(), st);
  dk.upload(pk.data(), st);
  std::vector<double> tile(static_cast<std::size_t>(T * N));
  for (std::int64_t r0 = 0; r0 < n; r0 += T) {
    const std::int64_t rows = std::min(T, n - r0);
    log_kappa_rows_device(p.U, p.dp, r0, rows, N, dq.data<double>(), dk.data<double>(), G.data<double>(),
                          L.data<double>(), h);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(tile.data(), L.data<double>(), sizeof(double) * static_cast<std::size_t>(rows * N),
                                      cudaMemcpyDeviceToHost, st.get()));
    st.synchronize();
    using RM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    out.middleRows(r0, rows) = Eigen::Map<const RM>(tile.data(), rows, N);
  }
  return out;
}

}  // namespace memcap::ramnet
#endif
