// The restricted RAM-Net address space (spec ramnet.md §1.1–1.3, §2.1): U factors of dp codes each,
// a codebook of dp 2-D codes (circular by default, §1.2), per-factor softmax tables and the exact
// factorised address-overlap kernel κ_A. Everything downstream (theory, Top-K, GSU memory, attention
// comparisons, recall capacity, the CUDA kernels' CPU references) builds on these few functions.
//
// Conventions: a query/key is a 2U vector, block u = (x[2u], x[2u+1]); addresses are flattened with
// digit 0 least significant, i(a) = Σ_u a_u dp^u (§1.1); a "factor table" is a U×dp matrix whose row u
// holds log p_b(j | x^(u)), j = 0..dp-1 (never the dp^U vector, §1.3). All log-domain (§5.3).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace memcap::ramnet {

// (dp, U, β_r, β_w) of §1.4: the whole restricted model apart from the q/k streams.
struct Params {
  int dp = 4;          // codes per factor (≥ 2)
  int U = 5;           // number of factors (≥ 1)
  double beta_r = 1.0; // read concentration (> 0)
  double beta_w = 1.0; // write concentration (> 0)
};

// Largest address space any command materialises densely (dense GSU memories, dense distributions):
// 2^26 slots. Commands that only use factor tables accept any dp^U that fits in int64.
inline constexpr std::int64_t kMaxDenseAddresses = std::int64_t(1) << 26;

// Throws UserError (exit 2) naming the flag: dp ≥ 2, U ≥ 1, β_r, β_w finite and > 0, and dp^U ≤ 2^62.
void validate(const Params& p);
// dp^U; throws UserError (exit 2) with the size when it does not fit in int64 (< 2^62).
std::int64_t address_count(int dp, int U);
inline std::int64_t address_count(const Params& p) { return address_count(p.dp, p.U); }
// Throws UserError (exit 2) when dp^U (dense, `bytes_per_slot` each) exceeds kMaxDenseAddresses,
// naming what it would need: "dp^U = 4^14 = 268435456 slots (2.1 GB dense) ...". `what` names the use.
void require_dense(const Params& p, double bytes_per_slot, const std::string& what);

// Flat index of a digit tuple (digit 0 least significant) and its inverse.
std::int64_t flat_index(std::span<const int> digits, int dp);
void digits_of(std::int64_t flat, int dp, int U, std::span<int> out);

// Codebooks: 2×dp, one code per column. Circular: c_j = (cos 2πj/dp, sin 2πj/dp) (§1.2).
using Codebook = Eigen::Matrix<double, 2, Eigen::Dynamic>;
Codebook circular_codebook(int dp);

// log Z_dp(x) = log((1/dp) Σ_j exp(c_j·x)) by log-sum-exp (§2.2, §5.3).
double log_Z(const Codebook& C, double x1, double x2);
// Row of log p_b(j | x) = b c_j·x − log Σ_l exp(b c_l·x) for one 2-vector (dp entries into out).
void factor_log_probs(const Codebook& C, double b, double x1, double x2, double* out);
// U×dp factor table of a 2U vector x at concentration b.
Eigen::MatrixXd factor_table(const Codebook& C, double b, const double* x, int U);
// log r(a) for a flat address, from a factor table.
double address_log_prob(const Eigen::MatrixXd& table, std::int64_t flat);
// The dense distribution over all dp^U addresses (tests, small |A|; require_dense first).
Eigen::VectorXd dense_distribution(const Eigen::MatrixXd& table);

// Exact factorised log κ_A(q,k) = Σ_u [log Z(β_r q_u + β_w k_u) − log Z(β_r q_u) − log Z(β_w k_u)]
// + U log dp − U log dp (the |A| factor and the 1/dp of Z cancel as in §2.1). q, k: 2U doubles.
double log_kappa_A(const Params& p, const Codebook& C, const double* q, const double* k);
// Per factor u: log( dp Σ_j p_{β_r}(j|q_u) p_{β_w}(j|k_u) ), any codebook (generic-codebook kernel of E3).
double log_kappa_factor(const Codebook& C, double beta_r, double beta_w, const double* q2, const double* k2);

}  // namespace memcap::ramnet

namespace memcap::ramnet {
// log κ_A for every (query i, key s) pair: Q is n×2U, K is N×2U, result n×N. Per factor one GEMM
// of the probability tables, P_q (n×dp) · P_kᵀ (dp×N), then log(dp ·) summed over factors (§5 costs).
// Exact for moderate β; pairs whose factor overlap underflows double (extreme β, §5.3) come out as
// -inf — use log_kappa_A for those. Runs on the CPU through BLAS; a CUDA twin lives in ramnet_cuda.
Eigen::MatrixXd log_kappa_matrix(const Params& p, const Codebook& C, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K);
}  // namespace memcap::ramnet
