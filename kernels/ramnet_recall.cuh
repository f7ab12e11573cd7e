// CUDA kernels of the E7 recall protocol (spec ramnet.md §3 E7); CPU reference: src/ramnet/recall_cpu.cpp,
// host side: src/ramnet/recall_cuda.cpp (GEMMs through cuBLAS there). Float64 throughout. Where the CPU
// reference multiplies or adds in a fixed order (feature products Π_u p_u, GSU masses, gates and steps,
// sparse reads), the kernels use __dmul_rn / __dadd_rn in the same order, so those values are bit for bit
// the CPU's; GEMM sums, exp / log1p / expm1 and atomics differ in the last bits only.
// Every launcher checks its launch (MEMCAP_CUDA_CHECK_LAUNCH); all pointers are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::ramnet::cuda {

// Retention gate constants of the GSU (§1.6): γ, e^γ, e^−γ, ε.
struct GateParams {
  double gamma = 0, eg = 0, emg = 0, eps = 0;
};

// out[i·ld + c] = Π_u prob[(r0+i)·U·dp + u·dp + digit_u(a0+c)] (u = 0..U−1 in order), rows × cols.
void dense_features(const double* prob, int U, int dp, std::int64_t r0, std::int64_t rows, std::int64_t a0,
                    std::int64_t cols, double* out, std::int64_t ld, cudaStream_t s);

// Exact K-best addresses of n product distributions from fixed-point factor scores q (n × U·dp int64,
// topk.hpp's topk_fixed_point): order (Σ_u q desc, flat index asc), the same lists as the CPU heap
// decoder. U−1 pairwise merges keeping K candidates; scratch: 4·K·n int64. flat: n × K.
void topk_lists(const std::int64_t* q, int U, int dp, std::int64_t n, std::int64_t K, std::int64_t* flat,
                std::int64_t* scratch, cudaStream_t s);
// weight[e] = Π_u p_u(digit_u(flat[e])) of row e / K.
void sparse_weights(const double* prob, int U, int dp, std::int64_t n, std::int64_t K, const std::int64_t* flat,
                    double* weight, cudaStream_t s);

// Cumulative Top-K writes: S[flat[e]·cols + c] += weight[e]·Va[(e/K)·cols + c] (atomics).
void scatter_cumulative(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K,
                        const double* Va, int cols, double* S, cudaStream_t s);
// GSU recursion with full writes for slots [a0, a0+cols): on exit L (N × ld) holds the unrolled
// coefficients λ_t Π_{r>t}(1−λ_r) and X[(a0+c)·xld + mcol] the final mass of slot a0+c.
void gsu_dense(const double* prob, int U, int dp, std::int64_t N, std::int64_t a0, std::int64_t cols, double* L,
               std::int64_t ld, double* X, std::int64_t xld, int mcol, GateParams g, cudaStream_t s);
// GSU recursion with Top-K writes, step by step (one block): mass (D) and state (D × dv) zeroed first.
void gsu_sparse(const std::int64_t* flat, const double* weight, const double* prob, int U, int dp, std::int64_t N,
                std::int64_t K, const double* V, int dv, double* mass, double* state, GateParams g, cudaStream_t s);

// X (D × (dv+1)) from a state (D × dv) and masses: [m⊙s | m] (mass_form) or [s | m].
void state_to_x(const double* state, const double* mass, std::int64_t D, int dv, bool mass_form, double* X,
                cudaStream_t s);
// In place on X (D × (dv+1)): columns < dv multiplied by column dv (scale) or divided by it (0 when ≤ 0).
void scale_by_mass(double* X, std::int64_t D, int dv, bool divide, cudaStream_t s);
// Oa[i·cols + c] = Σ_k weight[i·K+k] · X[flat[i·K+k]·cols + c] (k in order).
void sparse_read(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K, const double* X,
                 int cols, double* Oa, cudaStream_t s);
// O (n × dv) = Oa[:, :dv] / (Oa[:, dv] + eps) (0 rows when that is not > 0 and finite), or the first dv
// columns as they are (divide = false).
void finish_outputs(const double* Oa, std::int64_t n, int dv, double eps, bool divide, double* O, cudaStream_t s);

// Softmax rows (rows × N, in place): A ← exp(A·it − max_s A·it); sums[i] = Σ_s A.
void softmax_rows(double* A, std::int64_t rows, std::int64_t N, double it, double* sums, cudaStream_t s);
// κ rows: A[i·N + s] = Π_u dp·Σ_j pr[i·W + u·dp + j]·pw[s·W + u·dp + j] (W = U·dp); then per row: when the
// largest entry is below tiny the row is redone as exp(L − max L), L = Σ_u log(dp·G_u); sums[i] = Σ_s A.
void kappa_rows(const double* pr, const double* pw, int U, int dp, std::int64_t rows, std::int64_t N, double tiny,
                double* A, double* sums, cudaStream_t s);
// O[i·dv + c] /= sums[i] (rows with sums not > 0 and finite become 0).
void divide_rows(double* O, std::int64_t rows, int dv, const double* sums, cudaStream_t s);

// elu(x) + 1 elementwise (n values).
void elu_features(const double* X, std::int64_t n, double* F, cudaStream_t s);
// FAVOR+: P[i·D + a] −= ht·|x_i|² (X rows of width d); partial[b] = max over a block's share of P.
void favor_shift(double* P, std::int64_t rows, std::int64_t D, const double* X, int d, double ht, cudaStream_t s);
// Largest entry of P (count values) into *out (device scalar).
void max_value(const double* P, std::int64_t count, double* out, cudaStream_t s);
// P ← exp(P − c) (c = global shift) or, per row, exp(P − max of the row).
void exp_shift_global(double* P, std::int64_t count, double c, cudaStream_t s);
void exp_shift_rows(double* P, std::int64_t rows, std::int64_t D, cudaStream_t s);

// Decoding of rows [r0, r0+rows): G (rows × N) = O_tile Vᵀ; argmax_j G·inv[j] (ties: smaller j; −1 for a
// dead output: |o|² not > 0 or not finite), nmse = 1 − G[i,i]²/(|o|²·vn2[i]) clamped to [0, 1] (1 when dead).
void decode_rows(const double* G, std::int64_t rows, std::int64_t N, std::int64_t r0, const double* inv,
                 const double* vn2, const double* O, int dv, std::int64_t* argmax, double* nmse, cudaStream_t s);

}  // namespace memcap::ramnet::cuda
