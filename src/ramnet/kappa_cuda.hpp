// log κ_A for every (query, key) pair on the GPU: the CUDA twin of log_kappa_matrix (address.hpp), for
// the attention experiments (E2/E3) and tests at large N. Per factor one cuBLAS DGEMM of the probability
// tables (float64, no TF32), then log(dp·G) accumulated over factors (kernels/ramnet_kappa.cu). The
// probability tables are built on the host exactly as log_kappa_matrix builds them. Pairs whose factor
// overlap underflows (extreme β, §5.3) come out as -inf, as on the CPU. Built only with MEMCAP_HAVE_CUDA.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <Eigen/Dense>

#include "core/gpu.hpp"
#include "ramnet/address.hpp"

namespace memcap::ramnet {

// Q: n × 2U, K: N × 2U; returns the n × N matrix of log κ_A(q_i, k_s). Rows are processed in tiles of
// at most 2^25 entries, each copied back as it finishes.
Eigen::MatrixXd log_kappa_matrix_cuda(const Params& p, const Codebook& C, const Eigen::MatrixXd& Q,
                                      const Eigen::MatrixXd& K, gpu::Handles& h);

// Device form: Pq (n × U·dp) and Pk (N × U·dp) hold the factor probabilities (factor u at columns
// u·dp..u·dp+dp−1), G is scratch of rows·N, L (rows × N, device) receives log κ_A of query rows
// [r0, r0 + rows). Runs on h's stream (asynchronous).
void log_kappa_rows_device(int U, int dp, std::int64_t r0, std::int64_t rows, std::int64_t N, const double* Pq,
                           const double* Pk, double* G, double* L, gpu::Handles& h);

}  // namespace memcap::ramnet
#endif
